//! Saving a session export as a file. The webview cannot download, so Rust
//! writes the Markdown or JSON into the Downloads folder (the app's data
//! folder where the platform has none), never over an existing file.

use std::path::{Path, PathBuf};

use headroom_store::StoreError;
use tauri::State;

use crate::error::{CommandError, ErrorCode};
use crate::state::AppState;

/// Writes the session as `format` ("md" or "json"); resolves to the file's path.
#[tauri::command]
pub async fn session_export_file(
    session_id: String,
    format: String,
    state: State<'_, AppState>,
) -> Result<String, CommandError> {
    let session =
        state.store.session(&session_id).await?.ok_or_else(|| StoreError::SessionNotFound(session_id.clone()))?;
    let text = match format.as_str() {
        "md" => state.store.export_markdown(&session_id).await?,
        "json" => state.store.export_json(&session_id).await?,
        other => {
            return Err(CommandError::new(
                ErrorCode::InvalidInput,
                format!("Export as \"md\" or \"json\", not \"{other}\"."),
            ))
        }
    };
    let dir = dirs::download_dir().unwrap_or_else(|| state.locations.data_dir.join("exports"));
    let name = file_name(&session.title, &format);
    // A file write: on a blocking thread, not the async runtime's.
    let written = tauri::async_runtime::spawn_blocking({
        let dir = dir.clone();
        move || write_new(&dir, &name, &text)
    })
    .await
    .map_err(|e| {
        CommandError::new(ErrorCode::EngineInternal, format!("Saving the export stopped unexpectedly: {e}"))
    })?;
    let path = written.map_err(|e| {
        CommandError::new(ErrorCode::Io, format!("Could not save the export in {}: {e}", dir.display()))
    })?;
    Ok(path.display().to_string())
}

/// The title as a file name: no path or reserved characters, at most 80 characters.
fn file_name(title: &str, ext: &str) -> String {
    let cleaned: String =
        title.chars().map(|c| if c.is_control() || "\\/:*?\"<>|".contains(c) { ' ' } else { c }).collect();
    // Words of dots only ("..") would make hidden or relative-looking names.
    let words: Vec<&str> = cleaned.split_whitespace().filter(|w| !w.chars().all(|c| c == '.')).collect();
    let base: String = words.join(" ").chars().take(80).collect();
    let base = base.trim_start_matches('.').trim();
    format!("{}.{ext}", if base.is_empty() { "session" } else { base })
}

/// Writes `text` to `dir/name`, or `name 2`, `name 3`, … if taken; never overwrites.
fn write_new(dir: &Path, name: &str, text: &str) -> std::io::Result<PathBuf> {
    use std::io::Write;
    std::fs::create_dir_all(dir)?;
    let (stem, ext) = name.rsplit_once('.').unwrap_or((name, ""));
    for n in 1..1000 {
        let candidate = if n == 1 { name.to_owned() } else { format!("{stem} {n}.{ext}") };
        let path = dir.join(candidate);
        // create_new fails if the file exists, so two exports never race onto one name.
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(mut file) => {
                file.write_all(text.as_bytes())?;
                return Ok(path);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::new(std::io::ErrorKind::AlreadyExists, format!("999 files named like {name} already exist")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_become_safe_file_names() {
        assert_eq!(file_name("How fast is 14B?", "md"), "How fast is 14B.md");
        assert_eq!(file_name("a/b\\c:d\n", "json"), "a b c d.json");
        assert_eq!(file_name("../../etc/passwd", "md"), "etc passwd.md");
        assert_eq!(file_name("   ", "md"), "session.md");
        assert_eq!(file_name(&"x".repeat(200), "md").len(), 83);
    }

    #[test]
    fn exports_never_overwrite_a_file() -> std::io::Result<()> {
        let tmp = headroom_test_support::scratch("export");
        let dir = tmp.join("data");
        let first = write_new(&dir, "Chat.md", "one")?;
        let second = write_new(&dir, "Chat.md", "two")?;
        assert_eq!(first.file_name().and_then(|n| n.to_str()), Some("Chat.md"));
        assert_eq!(second.file_name().and_then(|n| n.to_str()), Some("Chat 2.md"));
        assert_eq!(std::fs::read_to_string(&first)?, "one");
        assert_eq!(std::fs::read_to_string(&second)?, "two");
        std::fs::remove_dir_all(&dir)
    }
}
