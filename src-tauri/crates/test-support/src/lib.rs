//! headroom-test-support: the fixtures several crates' tests share, so each
//! is written once: scratch folders that remove themselves, and (feature
//! `store`) a fresh, migrated store in one. Only `[dev-dependencies]` name
//! this crate.

pub mod mcp;
mod scratch;
#[cfg(feature = "store")]
pub mod store;

pub use scratch::{scratch, Scratch};
#[cfg(feature = "store")]
pub use store::{fresh_store, FreshStore};
