//! `headroom export` and `headroom import`: a session as Markdown or JSON
//! (with its stats), and a JSON export back into the database.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use headroom_store::{SessionExport, Store};

use super::CliError;
use crate::runtime::block_on;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// For reading: one heading per message, stats under each answer.
    Md,
    /// Everything, stats included; `headroom import` reads it back.
    Json,
}

#[derive(Debug, Clone, Args)]
pub struct ExportArgs {
    /// The session's id (see `headroom sessions`).
    pub session: String,
    #[arg(long, value_enum, default_value = "md")]
    pub format: ExportFormat,
}

#[derive(Debug, Clone, Args)]
pub struct ImportArgs {
    /// A JSON file written by `headroom export --format json` (or the app).
    pub file: PathBuf,
}

pub fn run_export(args: &ExportArgs) -> Result<(), CliError> {
    let store = super::chat::open_store()?;
    let stdout = std::io::stdout();
    export(args, &store, &mut stdout.lock())
}

pub fn run_import(args: &ImportArgs) -> Result<(), CliError> {
    let store = super::chat::open_store()?;
    let stdout = std::io::stdout();
    import(args, &store, &mut stdout.lock())
}

pub(crate) fn export(args: &ExportArgs, store: &Store, out: &mut dyn Write) -> Result<(), CliError> {
    let text = match args.format {
        ExportFormat::Md => block_on(store.export_markdown(&args.session))?,
        ExportFormat::Json => block_on(store.export_json(&args.session))?,
    };
    writeln!(out, "{}", text.trim_end())?;
    Ok(())
}

pub(crate) fn import(args: &ImportArgs, store: &Store, out: &mut dyn Write) -> Result<(), CliError> {
    let text = std::fs::read_to_string(&args.file)
        .map_err(|source| CliError::ImportFile { path: args.file.clone(), source })?;
    let export = SessionExport::from_json(&text)?;
    let session = block_on(store.import_session(&export))?;
    writeln!(out, "imported {} messages as session `{}` ({})", export.messages.len(), session.id, session.title)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use headroom_store::{MessageStatus, Route, TurnOutcome};

    use super::*;
    use headroom_test_support::{fresh_store, FreshStore};

    fn store(tag: &str) -> FreshStore {
        block_on(fresh_store(&format!("cli-export-{tag}")))
    }

    #[test]
    fn export_json_then_import_into_another_database_round_trips() {
        let a = store("a");
        let t = block_on(a.begin_turn("trip", "Where to?", Some("m"), Route::Local)).unwrap();
        let done = TurnOutcome { content: "Lisbon.".into(), status: MessageStatus::Complete, error: None, stats: None };
        block_on(a.finish_turn(t.assistant_message_id, &done)).unwrap();

        let mut json = Vec::new();
        export(&ExportArgs { session: "trip".into(), format: ExportFormat::Json }, &a, &mut json).unwrap();
        let file = a.path().with_file_name("trip.json");
        std::fs::write(&file, &json).unwrap();

        let b = store("b");
        let mut out = Vec::new();
        import(&ImportArgs { file: file.clone() }, &b, &mut out).unwrap();
        assert_eq!(String::from_utf8_lossy(&out), "imported 2 messages as session `trip` (Where to?)\n");
        let mut again = Vec::new();
        export(&ExportArgs { session: "trip".into(), format: ExportFormat::Json }, &b, &mut again).unwrap();
        assert_eq!(String::from_utf8_lossy(&again), String::from_utf8_lossy(&json));

        let mut md = Vec::new();
        export(&ExportArgs { session: "trip".into(), format: ExportFormat::Md }, &b, &mut md).unwrap();
        let md = String::from_utf8_lossy(&md);
        assert!(md.starts_with("# Where to?\n") && md.contains("\n\nLisbon.\n"), "{md}");

        let r = export(&ExportArgs { session: "nope".into(), format: ExportFormat::Md }, &b, &mut Vec::new());
        assert_eq!(r.err().map(|e| e.to_string()), Some("no session `nope`".into()));
        let r = import(&ImportArgs { file: file.with_file_name("absent.json") }, &b, &mut Vec::new());
        assert!(r.err().map(|e| e.to_string()).unwrap_or_default().contains("absent.json"));
    }
}
