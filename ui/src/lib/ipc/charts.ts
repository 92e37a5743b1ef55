// Typed bindings for the charts (src-tauri/src/commands/charts.rs): SVG text
// drawn by headroom-charts; put into the page only through `sanitizeChart`.
import { call } from './invoke';

export type ChartTheme = 'light' | 'dark';

/** The per-session chart: decode tok/s and TTFT per turn against context length. */
export function sessionChart(sessionId: string, theme: ChartTheme): Promise<string> {
  return call<string>('session_chart', { sessionId, theme });
}

