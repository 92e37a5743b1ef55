// Saving a session export as a file (src-tauri/src/commands/export.rs): the
// webview cannot download, so Rust writes it into the Downloads folder.
import { command } from './invoke';
import type { ExportFormat } from './sessions';

/** Writes the export and resolves to the file's full path. */
export function sessionExportFile(sessionId: string, format: ExportFormat): Promise<string> {
  return command('session_export_file', { sessionId, format });
}
