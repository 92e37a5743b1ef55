//! headroom-core: the pure logic every other crate shares. No IO, no heavy
//! dependencies, so it is tested in milliseconds and used everywhere.

pub mod attention;
pub mod away;
pub mod bench;
pub mod cache_policy;
pub mod calibration;
pub mod chat;
pub mod chat_format;
pub mod fit;
pub mod format;
pub mod gate;
pub mod kv;
pub mod pressure;
pub mod remedies;
pub mod router;
pub mod sensitive;
pub mod settings;
pub mod shelf;
pub mod slowdown;
pub mod speculative;
pub mod split;
pub mod stats;
pub mod terminal;
pub mod thinking;
pub mod timeline;
