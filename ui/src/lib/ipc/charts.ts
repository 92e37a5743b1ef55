// Typed bindings for the charts (src-tauri/src/commands/charts.rs): SVG text
// drawn by headroom-charts; put into the page only through `sanitizeChart`.
import { call } from './invoke';
import type { PressureLevel } from './memory';

export type ChartTheme = 'light' | 'dark';

/** The per-session chart: decode tok/s and TTFT per turn against context length. */
export function sessionChart(sessionId: string, theme: ChartTheme): Promise<string> {
  return call<string>('session_chart', { sessionId, theme });
}


/** The live graph's windows, in minutes. */
export const LIVE_WINDOWS = [5, 15, 60] as const;
export type LiveWindow = (typeof LIVE_WINDOWS)[number];

/** Mirrors `headroom_charts::PlotBox`: the plot area in SVG pixels and the times at its edges. */
export interface PlotBox {
  left: number;
  right: number;
  top: number;
  bottom: number;
  startMs: number;
  endMs: number;
}

/** Mirrors `core::timeline::MemoryPoint`: the worst of the readings over `[atMs, atMs + spanMs)`. */
export interface LiveMemoryPoint {
  atMs: number;
  spanMs: number;
  totalBytes: number;
  availableBytes: number;
  usedBytes: number;
  swapTotalBytes: number;
  swapUsedBytes: number;
  processRssBytes: number;
  pressure: PressureLevel;
}

/** Mirrors `live::ModelRate`: `tokens` decoded in `(startMs, atMs]` at `tps`. */
export interface LiveRate {
  modelId: string;
  startMs: number;
  atMs: number;
  tokens: number;
  tps: number;
}

/** Mirrors `live::SlowdownView`. */
export interface LiveSlowdown {
  modelId: string;
  startMs: number;
  endMs: number;
  sentence: string;
}

/** Mirrors `live::LiveView`: the drawn graph and the figures behind it. */
export interface LiveView {
  svg: string;
  plot: PlotBox;
  budgetBytes: number | null;
  memory: LiveMemoryPoint[];
  rates: LiveRate[];
  slowdowns: LiveSlowdown[];
}

/** The live graph of the last `minutes`: memory against the budget, pressure, swap, decode tok/s. */
export function liveChart(minutes: LiveWindow, theme: ChartTheme): Promise<LiveView> {
  return call<LiveView>('live_chart', { minutes, theme });
}
