// Typed bindings for settings (src-tauri/src/commands/sessions.rs; the
// struct and its validation are headroom_core::settings).
import type { KernelChoice, Settings, SpeculativeMode } from './generated';
import { command } from './invoke';

export type { Settings };
/** The quantized-matmul kernel: `fused` is mlx-lm's, `cpu` computes in f32, `auto` picks by device. */
export type Kernel = KernelChoice;
/** `lookup` checks tokens proposed from the conversation several per forward pass. */
export type Speculative = SpeculativeMode;
/** The stored settings; fields never set have their defaults. */
export function settingsGet(): Promise<Settings> {
  return command('settings_get');
}

/**
 * Validates and stores every field; rejects with `INVALID_SETTING` and a
 * message naming the field otherwise, `SHORTCUT_TAKEN` when another app
 * holds the shortcut (`SHORTCUT_FAILED` when the OS refused it otherwise),
 * `LAUNCH_AT_LOGIN` when the login item could not be changed (nothing is
 * then changed).
 */
export function settingsSet(settings: Settings): Promise<Settings> {
  return command('settings_set', { settings });
}
