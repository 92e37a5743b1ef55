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

/** Why Headroom gave memory back (mirrors `core::away::Cause`). */
export type AwayCause =
  | { kind: 'idle'; idleMs: number }
  | { kind: 'pressure'; level: PressureLevel }
  | { kind: 'swapGrowing'; grewBytes: number; overMs: number };

/** What Headroom did to give memory back (mirrors `away::Notice`). */
export interface AwayNotice {
  atUnixMs: number;
  /** `blameRun`: memory turned tight during an answer, which is the cause; nothing was freed mid-answer. */
  action: 'blameRun' | 'dropSessions' | 'unload';
  cause: AwayCause;
  modelId: string | null;
  freedBytes: number | null;
  message: string;
}

/** Emitted with an `AwayNotice` each time Headroom frees memory (or blames an answer). */
export const AWAY_EVENT = 'away';

/** The latest notice, for a popover opened after it (null: none yet). */
export function awayNotice(): Promise<AwayNotice | null> {
  return call<AwayNotice | null>('away_notice');
}

export function onAway(handler: (notice: AwayNotice) => void): Promise<() => void> {
  return subscribeTo<AwayNotice>(AWAY_EVENT, handler);
}

/**
 * Tells the backend whether the popover is on screen: hidden, it sends no
 * memory events and samples slowly; shown, it takes a reading at once.
 */
export function liveVisibility(visible: boolean): Promise<void> {
  return call<void>('live_visibility', { visible });
}
