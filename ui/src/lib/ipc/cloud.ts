// Typed bindings for the cloud endpoint's API key (src-tauri/src/commands/cloud.rs).
// The key goes in and never comes back out: status says only whether one is stored, and where.
import type { KeyStatus, KeyStorage } from './generated';
import { command } from './invoke';

export type { KeyStatus, KeyStorage };
/** Stores `key` for `baseUrl` (replacing any earlier one); resolves to where it went. */
export function cloudKeySet(baseUrl: string, key: string): Promise<KeyStorage> {
  return command('cloud_key_set', { baseUrl, key });
}

/** Whether a key is stored for `baseUrl`, and where. */
export function cloudKeyStatus(baseUrl: string): Promise<KeyStatus> {
  return command('cloud_key_status', { baseUrl });
}

/** Removes the key for `baseUrl`; resolves to false if none was stored. */
export function cloudKeyDelete(baseUrl: string): Promise<boolean> {
  return command('cloud_key_delete', { baseUrl });
}

/** How the UI says where a key lives. */
export function storageWords(storage: KeyStorage): string {
  return storage === 'keychain' ? 'stored in the system keychain' : 'stored in a file only you can read';
}
