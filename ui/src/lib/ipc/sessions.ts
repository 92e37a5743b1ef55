// Typed bindings for sessions (src-tauri/src/commands/sessions.rs): the
// stored conversations, their messages with per-turn stats, export/import.
import type {
  MessageStatus,
  PressureLevel,
  Route,
  SearchHit,
  Session,
  SessionSummary,
  StoredMessage,
  TurnStatsRecord,
} from './generated';
import { command } from './invoke';

export type { MessageStatus, PressureLevel, Route, SearchHit, Session, SessionSummary, StoredMessage };
/** One answer's figures with all their labels (`TurnStatsRecord`); an undefined rate is null. */
export type StoredTurnStats = TurnStatsRecord;
export type ExportFormat = 'md' | 'json';

/** Every session, the most recently active first. */
export function sessionsList(): Promise<SessionSummary[]> {
  return command('sessions_list');
}

/**
 * A new empty session, titled `title`, else after `firstMessage` (its first
 * line, as the store titles every session), else "New chat".
 */
export function sessionCreate(options: { title?: string; firstMessage?: string } = {}): Promise<Session> {
  return command('session_create', { ...options });
}

export function sessionRename(sessionId: string, title: string): Promise<Session> {
  return command('session_rename', { sessionId, title });
}

/** Deletes the session, its messages and their stats; false if there was none. */
export function sessionDelete(sessionId: string): Promise<boolean> {
  return command('session_delete', { sessionId });
}

/** Sessions whose title or messages contain `text`. */
export function sessionSearch(text: string): Promise<SearchHit[]> {
  return command('session_search', { text });
}

/** A session's messages in order, each answer with its stats. */
export function sessionMessages(sessionId: string): Promise<StoredMessage[]> {
  return command('session_messages', { sessionId });
}

/** The session as Markdown or as JSON (which `sessionImport` reads back). */
export function sessionExport(sessionId: string, format: ExportFormat): Promise<string> {
  return command('session_export', { sessionId, format });
}

/** Imports a JSON export; resolves to the session as stored (its id may get a suffix). */
export function sessionImport(json: string): Promise<Session> {
  return command('session_import', { json });
}
