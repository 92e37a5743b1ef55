// The one place that talks to `@tauri-apps/api/core`: every command goes
//! through `call`, so every rejection reaching the UI is a `CommandError`.
import { Channel, invoke, type InvokeArgs } from '@tauri-apps/api/core';
import { listen } from '@tauri-apps/api/event';
import type { CommandError as BackendError, ErrorCode } from './generated';
import type { Commands } from './generated/commands';

export { Channel };

/** The codes a command fails with (`ErrorCode` in src-tauri/src/error.rs). */
export type { ErrorCode };

/** Raised in the UI itself when there is no Tauri backend to talk to. */
export const NO_BACKEND = 'NO_BACKEND';
/** Tauri's own failures (unknown command, bad arguments) arrive as strings. */
export const IPC_ERROR = 'IPC_ERROR';

/**
 * What every `call` rejects with: the backend's `CommandError`
 * (src-tauri/src/error.rs), or one the UI makes itself (`NO_BACKEND`, `IPC_ERROR`).
 */
export type CommandError = Omit<BackendError, 'code'> & { code: ErrorCode | typeof NO_BACKEND | typeof IPC_ERROR };

export function isCommandError(value: unknown): value is CommandError {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { code?: unknown }).code === 'string' &&
    typeof (value as { message?: unknown }).message === 'string'
  );
}

/** Folds whatever `invoke` rejected with into a `CommandError`. */
export function toCommandError(value: unknown): CommandError {
  if (isCommandError(value)) return value;
  if (typeof value === 'string') return { code: IPC_ERROR, message: value };
  return {
    code: NO_BACKEND,
    message: "Can't reach Headroom's backend. Reopen the window from the menu-bar icon.",
    details: value instanceof Error ? value.message : value,
  };
}

/** The app's commands (src-tauri/src/commands/), as the generated contract types them. */
export type CommandName = keyof Commands;
type ArgsOf<K extends CommandName> = Commands[K]['args'];

/**
 * Invokes the app's command `name` with the arguments and the reply its
 * Rust signature has (`generated/commands.ts`); arguments are optional
 * only where every one of them is. Rejects only with a `CommandError`.
 */
export function command<K extends CommandName>(
  name: K,
  ...args: Record<string, never> extends ArgsOf<K> ? [ArgsOf<K>?] : [ArgsOf<K>]
): Promise<Commands[K]['reply']> {
  return call<Commands[K]['reply']>(name, args[0] as InvokeArgs | undefined);
}

/** Invokes a command by name (a plugin's; the app's own go through `command`); rejects only with a `CommandError`. */
export async function call<T>(command: string, args?: InvokeArgs): Promise<T> {
  try {
    return await invoke<T>(command, args);
  } catch (error) {
    throw toCommandError(error);
  }
}

/**
 * Calls `handler` on each backend broadcast named `event` (no payload);
 * resolves to the function that stops listening. Without a backend there
 * is nothing to hear, so it resolves to a no-op rather than rejecting.
 */
export async function subscribe(event: string, handler: () => void): Promise<() => void> {
  return subscribeTo<unknown>(event, () => handler());
}

/**
 * Like `subscribe`, for broadcasts that carry a payload (e.g. `memory`):
 * `handler` gets each payload.
 */
export async function subscribeTo<T>(event: string, handler: (payload: T) => void): Promise<() => void> {
  try {
    const unlisten = await listen<T>(event, (e) => handler(e.payload));
    return () => {
      // Tauri's unlisten is async; once the bridge is gone (window closing)
      // there is nothing left to undo.
      void Promise.resolve()
        .then(() => unlisten())
        .catch(() => {});
    };
  } catch {
    return () => {};
  }
}
