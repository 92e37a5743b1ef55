// Typed bindings for sessions (src-tauri/src/commands/sessions.rs): the
// stored conversations, their messages with per-turn stats, export/import.
import { call } from './invoke';
import type { FinishReason } from './chat';

/** Mirrors `headroom_store::Session` (times are Unix milliseconds). */
export interface Session {
  id: string;
  title: string;
  createdAt: number;
  updatedAt: number;
}

/** Mirrors `SessionSummary`: a session as the list shows it. */
export interface SessionSummary extends Session {
  messageCount: number;
  /** The start of the last message. */
  preview: string | null;
}

/** Mirrors `SearchHit`; `messageId` is null when only the title matched. */
export interface SearchHit extends Session {
  messageId: number | null;
  snippet: string | null;
}

export type MessageStatus = 'streaming' | 'complete' | 'interrupted' | 'error';
export type Route = 'local' | 'cloud';
export type PressureLevel = 'normal' | 'warning' | 'critical' | 'unknown';

/** Mirrors `TurnStatsRecord`: one answer's figures with all their labels; an undefined rate is null. */
export interface StoredTurnStats {
  modelId: string;
  quantization: string | null;
  kvDtype: string;
  batch: number;
  contextTokens: number;
  promptTokens: number;
  reusedTokens: number;
  generatedTokens: number;
  ttftMs: number | null;
  prefillTps: number | null;
  decodeTps: number | null;
  e2eTps: number | null;
  prefillMs: number;
  firstTokenMs: number | null;
  lastTokenMs: number | null;
  peakMemoryBytes: number;
  pressure: PressureLevel;
  swapDeltaBytes: number | null;
  finishReason: FinishReason;
  /** The quantized-matmul kernel ("cpu-f32", "fused"); null if unquantized or cloud. */
  quantKernel: string | null;
  slowdown: string | null;
  /** What prompt lookup did; null for plain decoding (and answers stored before it was kept). */
  speculation: string | null;
}

/** Mirrors `StoredMessage`. */
export interface StoredMessage {
  id: number;
  sessionId: string;
  role: 'system' | 'user' | 'assistant';
  content: string;
  model: string | null;
  route: Route;
  status: MessageStatus;
  error: string | null;
  createdAt: number;
  updatedAt: number;
  stats: StoredTurnStats | null;
}

export type ExportFormat = 'md' | 'json';

/** Every session, the most recently active first. */
export function sessionsList(): Promise<SessionSummary[]> {
  return call<SessionSummary[]>('sessions_list');
}

/**
 * A new empty session, titled `title`, else after `firstMessage` (its first
 * line, as the store titles every session), else "New chat".
 */
export function sessionCreate(options: { title?: string; firstMessage?: string } = {}): Promise<Session> {
  return call<Session>('session_create', { ...options });
}

export function sessionRename(sessionId: string, title: string): Promise<Session> {
  return call<Session>('session_rename', { sessionId, title });
}

/** Deletes the session, its messages and their stats; false if there was none. */
export function sessionDelete(sessionId: string): Promise<boolean> {
  return call<boolean>('session_delete', { sessionId });
}

/** Sessions whose title or messages contain `text`. */
export function sessionSearch(text: string): Promise<SearchHit[]> {
  return call<SearchHit[]>('session_search', { text });
}

/** A session's messages in order, each answer with its stats. */
export function sessionMessages(sessionId: string): Promise<StoredMessage[]> {
  return call<StoredMessage[]>('session_messages', { sessionId });
}

/** The session as Markdown or as JSON (which `sessionImport` reads back). */
export function sessionExport(sessionId: string, format: ExportFormat): Promise<string> {
  return call<string>('session_export', { sessionId, format });
}

/** Imports a JSON export; resolves to the session as stored (its id may get a suffix). */
export function sessionImport(json: string): Promise<Session> {
  return call<Session>('session_import', { json });
}
