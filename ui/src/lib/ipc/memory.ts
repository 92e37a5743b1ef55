// Typed bindings for live memory (src-tauri/src/memory.rs, commands/memory.rs).
import { call, subscribeTo } from './invoke';

export type PressureLevel = 'normal' | 'warning' | 'critical' | 'unknown';

/** Mirrors `memory::MemorySample` (bytes). */
export interface MemorySample {
  atUnixMs: number;
  total: number;
  available: number;
  used: number;
  swapTotal: number;
  swapUsed: number;
  pressure: PressureLevel;
  processRss: number;
  /** MLX's live arrays; null in the history. */
  mlxActive: number | null;
  mlxPeak: number | null;
}

/** Emitted about once a second with a `MemorySample`. */
export const MEMORY_EVENT = 'memory';

/** The last minutes of samples, oldest first, for the strip's first paint. */
export function memoryHistory(): Promise<MemorySample[]> {
  return call<MemorySample[]>('memory_history');
}

export function onMemory(handler: (sample: MemorySample) => void): Promise<() => void> {
  return subscribeTo<MemorySample>(MEMORY_EVENT, handler);
}

/**
 * Tells the backend whether the popover is on screen: hidden, it sends no
 * memory events and samples slowly; shown, it takes a reading at once.
 */
export function liveVisibility(visible: boolean): Promise<void> {
  return call<void>('live_visibility', { visible });
}
