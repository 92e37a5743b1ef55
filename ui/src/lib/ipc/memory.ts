// Typed bindings for live memory (src-tauri/src/memory.rs, commands/memory.rs).
import type { Cause, MemorySample, Notice, PressureLevel } from './generated';
import { command, subscribeTo } from './invoke';

export type { MemorySample, PressureLevel };

/** Emitted about once a second with a `MemorySample`. */
export const MEMORY_EVENT = 'memory';

/** The last minutes of samples, oldest first, for the strip's first paint. */
export function memoryHistory(): Promise<MemorySample[]> {
  return command('memory_history');
}

export function onMemory(handler: (sample: MemorySample) => void): Promise<() => void> {
  return subscribeTo<MemorySample>(MEMORY_EVENT, handler);
}

/** Why Headroom gave memory back (`core::away::Cause`). */
export type AwayCause = Cause;
/** What Headroom did to give memory back (`away::Notice`); `blameRun`: memory
 *  turned tight during an answer, which is the cause; nothing was freed mid-answer. */
export type AwayNotice = Notice;
/** Emitted with an `AwayNotice` each time Headroom frees memory (or blames an answer). */
export const AWAY_EVENT = 'away';

/** The latest notice, for a popover opened after it (null: none yet). */
export function awayNotice(): Promise<AwayNotice | null> {
  return command('away_notice');
}

export function onAway(handler: (notice: AwayNotice) => void): Promise<() => void> {
  return subscribeTo<AwayNotice>(AWAY_EVENT, handler);
}

/**
 * Tells the backend whether the popover is on screen: hidden, it sends no
 * memory events and samples slowly; shown, it takes a reading at once.
 */
export function liveVisibility(visible: boolean): Promise<null> {
  return command('live_visibility', { visible });
}
