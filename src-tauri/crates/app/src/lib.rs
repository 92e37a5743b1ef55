//! The service layer: everything Headroom does, with no window in sight.
//! The app (`src-tauri`: commands, tray, popover) and the CLI are two front
//! ends over this crate, so a promise (a fit check before a load, the
//! privacy gate before the cloud) is kept in one place for both. No Tauri
//! here: a test checks this crate's dependency tree.
//!
//! Each module's failures are its own error enum; [`codes::Coded`] says
//! which code and sentence each one is shown with.

pub mod about;
pub mod away;
pub mod bench;
pub mod codes;
pub mod default_model;
pub mod discovery;
pub mod fit;
pub mod give_back;
pub mod lend;
pub mod live;
pub mod locations;
pub mod memory;
pub mod models;
pub mod peers;
pub mod pull;
pub mod runs;
pub mod runtime;
pub mod serve;
pub mod serve_marker;
pub mod server_key;
pub mod shelf;
pub mod state;
pub mod tools;
pub mod turn;

pub use state::{platform_app_data_dir, AppState, Locations};

/// Overrides the app's data folder (models/, the database): tests and
/// demos point it at a temporary folder.
pub const DATA_DIR_ENV: &str = "HEADROOM_DATA_DIR";

/// A state on a fresh temporary data folder and an empty HF cache. Each
/// call gets a folder of its own: tests run in parallel threads of one
/// process, and several share a tag (two of them once removed each other's
/// database mid-test: "disk I/O error").
///
/// The folders live under `target/test-tmp/app-state-PID/` (as
/// `headroom_test_support::scratch`'s do), and the first call of a test
/// process removes those of processes that have ended: an `AppState` is
/// shared by clones and the engine thread, so no one value can remove its
/// folder when dropped, and in the system temp folder each run of the
/// suite left about 75 MB behind.
#[cfg(any(test, feature = "testing"))]
#[allow(clippy::unwrap_used)]
pub fn test_state(tag: &str) -> AppState {
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    static SWEPT: std::sync::Once = std::sync::Once::new();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../target/test-tmp");
    SWEPT.call_once(|| sweep_ended_test_states(&root));
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let data_dir = root.join(format!("app-state-{}", std::process::id())).join(format!("{tag}-{n}"));
    let _ = std::fs::remove_dir_all(&data_dir);
    let engine = headroom_engine::worker::EngineHandle::spawn().unwrap();
    let store = runtime::block_on(headroom_store::Store::open(&data_dir)).unwrap();
    AppState::new(engine, Locations { data_dir, hub: models::HubEnv::default(), default_model: None }, store)
}

/// Removes `root/app-state-PID` folders whose process has ended (where the
/// OS says which are running: `/proc`; elsewhere nothing is removed).
#[cfg(any(test, feature = "testing"))]
fn sweep_ended_test_states(root: &std::path::Path) {
    let proc = std::path::Path::new("/proc");
    if !proc.join("self").exists() {
        return;
    }
    for entry in std::fs::read_dir(root).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("app-state-")) else { continue };
        if pid.parse::<u32>().is_ok() && !proc.join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
