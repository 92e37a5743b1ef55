//! `headroom sessions`: the stored conversations, most recent first.

use std::io::Write;

use clap::Args;
use headroom_store::{SessionSummary, Store};

use super::CliError;
use crate::runtime::block_on;

#[derive(Debug, Clone, Args)]
pub struct SessionsArgs {
    /// Print a JSON array instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &SessionsArgs) -> Result<(), CliError> {
    let store = super::chat::open_store()?;
    let stdout = std::io::stdout();
    sessions(args, &store, &mut stdout.lock())
}

pub(crate) fn sessions(args: &SessionsArgs, store: &Store, out: &mut dyn Write) -> Result<(), CliError> {
    let list = block_on(store.list_sessions())?;
    if args.json {
        writeln!(out, "{}", serde_json::to_string(&list)?)?;
    } else {
        write!(out, "{}", table(&list))?;
    }
    Ok(())
}

fn table(list: &[SessionSummary]) -> String {
    if list.is_empty() {
        return "No sessions yet: `headroom chat MODEL --session NAME --message TEXT` starts one.\n".into();
    }
    let width = list.iter().map(|s| s.session.id.chars().count()).max().unwrap_or(2).max(2);
    let mut t = format!("{:<width$}  {:>8}  {:<20}  TITLE\n", "ID", "MESSAGES", "LAST ACTIVE");
    for s in list {
        t.push_str(&format!(
            "{:<width$}  {:>8}  {:<20}  {}\n",
            s.session.id,
            s.message_count,
            headroom_store::export::utc_minute(s.session.updated_at),
            s.session.title
        ));
    }
    t
}

#[cfg(test)]
mod tests {
    use headroom_store::Route;

    use super::*;

    #[test]
    fn lists_as_a_table_and_as_json() {
        let tmp = headroom_test_support::scratch("cli-sessions");
        let dir = tmp.join("data");
        let store = block_on(Store::open(&dir)).unwrap();
        let mut out = Vec::new();
        sessions(&SessionsArgs { json: false }, &store, &mut out).unwrap();
        assert!(String::from_utf8_lossy(&out).starts_with("No sessions yet"));

        block_on(store.begin_turn("work", "Plan the week", None, Route::Local)).unwrap();
        let mut out = Vec::new();
        sessions(&SessionsArgs { json: false }, &store, &mut out).unwrap();
        let text = String::from_utf8_lossy(&out);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].starts_with("ID    MESSAGES  LAST ACTIVE"), "{text}");
        assert!(lines[1].starts_with("work         2  ") && lines[1].ends_with("UTC  Plan the week"), "{text}");

        let mut out = Vec::new();
        sessions(&SessionsArgs { json: true }, &store, &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            (v[0]["id"].as_str(), v[0]["title"].as_str(), v[0]["messageCount"].as_i64()),
            (Some("work"), Some("Plan the week"), Some(2))
        );
    }
}
