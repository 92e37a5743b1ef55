// Typed bindings for the local OpenAI-compatible server's toggle
// (src-tauri/src/commands/server.rs).
import type { ServerInfo } from './generated';
import { command, type ErrorCode } from './invoke';

export type { ServerInfo };
/** The port the server uses when none is given. */
export const DEFAULT_SERVER_PORT = 8080;

/** The code a start rejects with when the port is taken. */
export const PORT_UNAVAILABLE = 'PORT_UNAVAILABLE' satisfies ErrorCode;

/**
 * Starts the server on 127.0.0.1 (`port` defaults to 8080); if it already
 * runs, resolves to where. Rejects with `PORT_UNAVAILABLE` if the port is taken.
 */
export function serverStart(port?: number): Promise<ServerInfo> {
  return command('server_start', port === undefined ? {} : { port });
}

/** Stops the server; resolves to false if it was not running. */
export function serverStop(): Promise<boolean> {
  return command('server_stop');
}

/** The running server, or null. */
export function serverStatus(): Promise<ServerInfo | null> {
  return command('server_status');
}

/** The key clients send (`Authorization: Bearer <key>`); made on first call. */
export function serverKey(): Promise<string> {
  return command('server_key');
}

/** Replaces the key (a running server restarts with it); resolves to the new key. */
export function serverKeyRegenerate(): Promise<string> {
  return command('server_key_regenerate');
}
