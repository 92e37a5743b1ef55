// Typed bindings for lending this Mac from the app (src-tauri/src/commands/lend.rs).
import type { LendStatus } from './generated';
import { call } from './invoke';

export type { LendStatus };

/** Lends this Mac (`headroom lend` on port 7070); if it is lent already, resolves to where. */
export function lendStart(): Promise<LendStatus> {
  return call<LendStatus>('lend_start');
}

/** Stops lending; resolves to false if it was not lent. */
export function lendStop(): Promise<boolean> {
  return call<boolean>('lend_stop');
}

/** Where this Mac is lent, or null. */
export function lendStatus(): Promise<LendStatus | null> {
  return call<LendStatus | null>('lend_status');
}
