//! The one tracing setup, made in main.rs for the app and the CLI alike:
//! `warn` for every crate and `info` for Headroom's own unless `RUST_LOG`
//! says otherwise, to stderr; for the app also to a file in its log folder,
//! one a day, the last week kept. Settings shows where.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{fmt, EnvFilter, Layer};

/// Log files are `headroom.YYYY-MM-DD.log`.
pub const LOG_FILE_PREFIX: &str = "headroom";
pub const LOG_FILE_SUFFIX: &str = "log";
/// Days of logs kept; older files are deleted as new days begin.
pub const LOG_FILES_KEPT: usize = 7;

/// Headroom's crates, whose `info` lines are kept by default.
const OWN_CRATES: &[&str] = &[
    "headroom",
    "headroom_core",
    "headroom_engine",
    "headroom_memory",
    "headroom_store",
    "headroom_charts",
    "headroom_cloud",
    "headroom_server",
    "headroom_hub",
];

/// The filter used when `RUST_LOG` is unset: `warn,headroom=info,…`.
pub fn default_filter() -> String {
    std::iter::once("warn".to_owned())
        .chain(OWN_CRATES.iter().map(|c| format!("{c}=info")))
        .collect::<Vec<_>>()
        .join(",")
}

/// Where the app's log files go: `$HEADROOM_DATA_DIR/logs` when that is set
/// (tests and demos keep everything in one folder), else Tauri's app log
/// folder (`~/Library/Logs/<identifier>` on macOS, `<data>/<identifier>/logs`
/// elsewhere), computed without a running app so logging starts first.
pub fn app_log_dir() -> Option<PathBuf> {
    app_log_dir_from(std::env::var_os(crate::DATA_DIR_ENV))
}

fn app_log_dir_from(data_dir: Option<OsString>) -> Option<PathBuf> {
    if let Some(dir) = data_dir.filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir).join("logs"));
    }
    let identifier = crate::state::app_identifier();
    if cfg!(target_os = "macos") {
        Some(dirs::home_dir()?.join("Library/Logs").join(identifier))
    } else {
        Some(dirs::data_local_dir()?.join(identifier).join("logs"))
    }
}

/// What `init` set up, for the Settings view.
#[derive(Debug, Clone, Default)]
pub struct Logs {
    /// The folder the app's log files are written to; `None`: stderr only.
    pub dir: Option<PathBuf>,
}

impl Logs {
    /// The newest log file in the folder (today's, once anything was logged).
    pub fn current_file(&self) -> Option<PathBuf> {
        let dir = self.dir.as_ref()?;
        let prefix = format!("{LOG_FILE_PREFIX}.");
        let suffix = format!(".{LOG_FILE_SUFFIX}");
        std::fs::read_dir(dir)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&prefix) && n.ends_with(&suffix))
            })
            .max()
    }
}

/// Installs the subscriber. `file_dir`: the app's log folder (`None` for
/// the CLI, which logs to stderr only). A folder that cannot be used is
/// reported on stderr and the app logs to stderr alone.
pub fn init(file_dir: Option<&Path>) -> Logs {
    let (filter, bad_rust_log) = filter();
    // Colours only for a person at a terminal, not in log files and test output.
    let stderr = fmt::layer().with_writer(std::io::stderr).with_ansi(std::io::stderr().is_terminal());
    let (file, dir, file_error) = match file_dir.map(file_appender) {
        Some(Ok(appender)) => (Some(fmt::layer().with_ansi(false).with_writer(appender)), file_dir, None),
        Some(Err(e)) => (None, None, Some(e)),
        None => (None, None, None),
    };
    let installed = tracing_subscriber::registry().with(stderr.and_then(file).with_filter(filter)).try_init();
    if let Err(e) = installed {
        eprintln!("headroom: logging was set up twice: {e}");
    }
    if let Some(e) = bad_rust_log {
        tracing::warn!("RUST_LOG is not a valid filter ({e}); using {}", default_filter());
    }
    if let Some((dir, e)) = file_dir.zip(file_error) {
        tracing::warn!("cannot write logs to {}: {e}; logging to stderr only", dir.display());
    }
    Logs { dir: dir.map(Path::to_path_buf) }
}

/// `RUST_LOG` when it is set and valid, else the default (and why).
fn filter() -> (EnvFilter, Option<String>) {
    match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => match EnvFilter::try_new(&spec) {
            Ok(f) => (f, None),
            Err(e) => (EnvFilter::new(default_filter()), Some(e.to_string())),
        },
        _ => (EnvFilter::new(default_filter()), None),
    }
}

/// Why the app's log file cannot be written (it then logs to stderr only).
#[derive(Debug, thiserror::Error)]
pub enum LogFileError {
    #[error("cannot create {}: {source}", dir.display())]
    CreateDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Appender(#[from] tracing_appender::rolling::InitError),
}

fn file_appender(dir: &Path) -> Result<tracing_appender::rolling::RollingFileAppender, LogFileError> {
    // Blocking writes, not tracing-appender's background thread: a menu-bar
    // app logs a few lines a minute, and a line written before a crash (or
    // before `app.run`, which never returns, ends the process) stays written.
    // The folder first: pruning old files reads it, and complains on stderr
    // when it is not there yet.
    std::fs::create_dir_all(dir).map_err(|source| LogFileError::CreateDir { dir: dir.to_owned(), source })?;
    Ok(tracing_appender::rolling::Builder::new()
        .rotation(tracing_appender::rolling::Rotation::DAILY)
        .filename_prefix(LOG_FILE_PREFIX)
        .filename_suffix(LOG_FILE_SUFFIX)
        .max_log_files(LOG_FILES_KEPT)
        .build(dir)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_default_warnings_everywhere_and_info_from_headroom() {
        let f = default_filter();
        assert!(f.starts_with("warn,headroom=info,"), "{f}");
        for c in OWN_CRATES {
            assert!(f.contains(&format!("{c}=info")), "{c} in {f}");
        }
        assert!(EnvFilter::try_new(&f).is_ok(), "{f}");
    }

    #[test]
    fn the_log_folder_is_tauris_app_log_folder_or_the_data_folders() {
        let mut context = tauri::test::mock_context(tauri::test::noop_assets());
        context.config_mut().identifier = crate::state::app_identifier();
        let app = tauri::test::mock_builder().build(context).unwrap();
        use tauri::Manager;
        assert_eq!(app_log_dir_from(None), app.path().app_log_dir().ok());
        assert_eq!(app_log_dir_from(Some("".into())), app.path().app_log_dir().ok(), "empty is unset");
        assert_eq!(app_log_dir_from(Some("/tmp/hd".into())), Some(PathBuf::from("/tmp/hd/logs")));
    }

    #[test]
    fn the_current_file_is_the_newest_log_of_the_folder() {
        let dir = tempfile::tempdir().unwrap();
        let logs = Logs { dir: Some(dir.path().to_owned()) };
        assert_eq!(logs.current_file(), None);
        for name in
            ["headroom.2026-11-30.log", "headroom.2026-12-01.log", "other.2026-12-02.log", "headroom.2026-12-02.txt"]
        {
            std::fs::write(dir.path().join(name), "x").unwrap();
        }
        assert_eq!(logs.current_file(), Some(dir.path().join("headroom.2026-12-01.log")));
        assert_eq!(Logs::default().current_file(), None);
    }

    #[test]
    fn the_appender_writes_dated_files_in_the_folder() {
        use std::io::Write;
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("logs"); // not there yet: created
        let mut appender = file_appender(&dir).unwrap();
        appender.write_all(b"one line\n").unwrap();
        appender.flush().unwrap();
        let file = Logs { dir: Some(dir) }.current_file().expect("a log file");
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        assert!(name.len() == "headroom.2026-12-01.log".len(), "{name}");
        assert_eq!(std::fs::read_to_string(file).unwrap(), "one line\n");
    }
}
