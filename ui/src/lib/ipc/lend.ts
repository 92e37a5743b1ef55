// Typed bindings for lending this Mac from the app (src-tauri/src/commands/lend.rs).
import type { LendStatus } from './generated';
import { command } from './invoke';

export type { LendStatus };

/** Lends this Mac (`headroom lend` on port 7070); if it is lent already, resolves to where. */
export function lendStart(): Promise<LendStatus> {
  return command('lend_start');
}

/** Stops lending; resolves to false if it was not lent. */
export function lendStop(): Promise<boolean> {
  return command('lend_stop');
}

/** Where this Mac is lent, or null. */
export function lendStatus(): Promise<LendStatus | null> {
  return command('lend_status');
}
