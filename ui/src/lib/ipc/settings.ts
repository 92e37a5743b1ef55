// Typed bindings for settings (src-tauri/src/commands/sessions.rs; the
// struct and its validation are headroom_core::settings).
import { call } from './invoke';

/**
 * Mirrors `headroom_core::settings::KernelChoice`: the quantized-matmul
 * kernel. `fused` is mlx-lm's (its tokens); `cpu` computes in f32 (faster on
 * MLX's CPU backend); `auto` picks by device.
 */
export type Kernel = 'auto' | 'fused' | 'cpu';

/**
 * Mirrors `headroom_core::speculative::SpeculativeMode`: `lookup` checks
 * tokens proposed from the conversation several per forward pass (greedy
 * answers unchanged; it switches itself off where it does not pay).
 */
export type Speculative = 'none' | 'lookup';

/** Mirrors `headroom_core::settings::Settings` (serde camelCase). */
export interface Settings {
  contextLimit: number;
  maxTokens: number;
  temperature: number;
  topP: number;
  osHeadroomGb: number;
  cloudBaseUrl: string | null;
  cloudModel: string | null;
  localThresholdTokens: number;
  cloudCacheMb: number;
  summariseForCloud: boolean;
  serverPort: number;
  /** Applied at the next model load. */
  kernel: Kernel;
  /** Start Headroom at login (off unless the user turns it on). */
  launchAtLogin: boolean;
  /** The shortcut that shows or hides the popover ("Alt+Space"); null: none. */
  globalShortcut: string | null;
  /** Unload the model after this many minutes without use (1–1440); null: never. */
  idleUnloadMinutes: number | null;
  /** The KV cache's bits (8 or 4, group size 64); null: the activations' float type. Next load. */
  kvBits: number | null;
  /** Tokens a quantized KV cache stays in float before it is converted (mlx-lm's quantized_kv_start). */
  quantizedKvStart: number;
  /** The most memory (MB) the prompt cache keeps besides the chat in use; never more than half the fit's spare. Next load. */
  promptCacheMb: number;
  /** Disk (MB) for chats' KV states saved across restarts; 0: off. */
  kvDiskMb: number;
  /** How local answers decode: prompt lookup or one token per pass. */
  speculative: Speculative;
}

/** The stored settings; fields never set have their defaults. */
export function settingsGet(): Promise<Settings> {
  return call<Settings>('settings_get');
}

/**
 * Validates and stores every field; rejects with `INVALID_SETTING` and a
 * message naming the field otherwise, `SHORTCUT_TAKEN` when another app
 * holds the shortcut (`SHORTCUT_FAILED` when the OS refused it otherwise),
 * `LAUNCH_AT_LOGIN` when the login item could not be changed (nothing is
 * then changed).
 */
export function settingsSet(settings: Settings): Promise<Settings> {
  return call<Settings>('settings_set', { settings });
}
