// Typed bindings for lending this Mac from the app (src-tauri/src/commands/lend.rs).
import type { LendStatus, PairedHost } from './generated';
import { command } from './invoke';

export type { LendStatus, PairedHost };

/** Lends this Mac (`headroom lend` on port 7070); if it is lent already, resolves to where. */
export function lendStart(): Promise<LendStatus> {
  return command('lend_start');
}

/** Stops lending; resolves to false if it was not lent. */
export function lendStop(): Promise<boolean> {
  return command('lend_stop');
}

/** Where this Mac is lent, its pairing code now and the hosts waiting for an answer, or null. */
export function lendStatus(): Promise<LendStatus | null> {
  return command('lend_status');
}

/** The hosts this Mac paired with as a lender, allowed or waiting for an answer. */
export function lendHosts(): Promise<PairedHost[]> {
  return command('lend_hosts');
}

/**
 * The owner's answer to "Allow <machine> to use this Mac?" for the paired
 * host with `key`: allowed, or forgotten (also how a host is revoked).
 * Resolves to false if no such host paired.
 */
export function lendAnswer(key: string, allow: boolean): Promise<boolean> {
  return command('lend_answer', { key, allow });
}
