// Typed bindings for finding and pairing with a lending Mac from the app (src-tauri/src/commands/peers.rs).
import type { Lender, PeerPaired } from './generated';
import { command } from './invoke';

export type { Lender, PeerPaired };

/** The Macs lending themselves on this network (Bonjour, about 2 s), each marked if this Mac paired with it. */
export function peersFind(): Promise<Lender[]> {
  return command('peers_find');
}

/**
 * Pairs with the lender at `address` using the code it shows; the token is
 * kept and the lender becomes the peer Mac. Resolves to its machine name
 * and the settings as stored.
 */
export function peerPair(address: string, code: string): Promise<PeerPaired> {
  return command('peer_pair', { address, code });
}
