// Typed bindings for finding and pairing with a lending Mac from the app (src-tauri/src/commands/peers.rs).
import type { Lender, PairedLender, PeerPaired } from './generated';
import { command } from './invoke';

export type { Lender, PairedLender, PeerPaired };

/** The Macs lending themselves on this network (Bonjour, about 2 s), each marked if this Mac paired with it. */
export function peersFind(): Promise<Lender[]> {
  return command('peers_find');
}

/**
 * Pairs with the lender at `address` using the code it shows (the code
 * never crosses the network); its key is pinned and the lender becomes the
 * peer Mac. Resolves to its machine name, whether its owner allowed this
 * Mac already, and the settings as stored.
 */
export function peerPair(address: string, code: string): Promise<PeerPaired> {
  return command('peer_pair', { address, code });
}

/** The lenders this Mac paired with. */
export function peersPaired(): Promise<PairedLender[]> {
  return command('peers_paired');
}

/** Forgets the pairing with `address`; resolves to false if there was none. */
export function peerForget(address: string): Promise<boolean> {
  return command('peer_forget', { address });
}
