// Typed bindings for the charts (src-tauri/src/commands/charts.rs): SVG text
// drawn by headroom-charts; put into the page only through `sanitizeChart`.
import type { LiveView, MemoryPoint, ModelRate, PlotBox, SlowdownView } from './generated';
import { command } from './invoke';

export type ChartTheme = 'light' | 'dark';

/** The per-session chart: decode tok/s and TTFT per turn against context length. */
export function sessionChart(sessionId: string, theme: ChartTheme): Promise<string> {
  return command('session_chart', { sessionId, theme });
}


/** The live graph's windows, in minutes. */
export const LIVE_WINDOWS = [5, 15, 60] as const;
export type LiveWindow = (typeof LIVE_WINDOWS)[number];

/** The live graph and the figures behind it (`live::LiveView`). */
export type { LiveView, PlotBox };
/** The worst of the readings over `[atMs, atMs + spanMs)` (`core::timeline::MemoryPoint`). */
export type LiveMemoryPoint = MemoryPoint;
/** `tokens` decoded in `(startMs, atMs]` at `tps` (`live::ModelRate`). */
export type LiveRate = ModelRate;
export type LiveSlowdown = SlowdownView;
/** The live graph of the last `minutes`: memory against the budget, pressure, swap, decode tok/s. */
export function liveChart(minutes: LiveWindow, theme: ChartTheme): Promise<LiveView> {
  return command('live_chart', { minutes, theme });
}
