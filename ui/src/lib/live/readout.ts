// The live graph's read-out: which figures stand at a moment of the graph
// (under the pointer, or where the keyboard put the cursor), in words.
import { formatGB, formatUsed } from '../fit/format';
import type { LiveMemoryPoint, LiveRate, LiveSlowdown, LiveView, PlotBox } from '../ipc/charts';

/** A rate within this much of a moment is "at" it (rates come once a second). */
const RATE_NEAR_MS = 1_500;

/** The moment at horizontal position `x` (in the SVG's own pixels), clamped to the plot. */
export function timeAt(plot: PlotBox, x: number): number {
  const width = plot.right - plot.left;
  if (width <= 0) return plot.endMs;
  const f = Math.min(1, Math.max(0, (x - plot.left) / width));
  return plot.startMs + f * (plot.endMs - plot.startMs);
}

/** The horizontal position (SVG pixels) of moment `t`. */
export function xAt(plot: PlotBox, t: number): number {
  const span = plot.endMs - plot.startMs;
  if (span <= 0) return plot.right;
  return plot.left + ((t - plot.startMs) / span) * (plot.right - plot.left);
}

/**
 * The memory reading that stands at `t`: the one whose span holds it, else
 * the nearest one no further than a span away; null in a gap.
 */
export function memoryAt(points: LiveMemoryPoint[], t: number): LiveMemoryPoint | null {
  let best: LiveMemoryPoint | null = null;
  let bestDistance = Infinity;
  for (const p of points) {
    const end = p.atMs + Math.max(p.spanMs, 1);
    if (t >= p.atMs && t < end) return p;
    const distance = t < p.atMs ? p.atMs - t : t - end;
    if (distance <= Math.max(p.spanMs, 1_000) && distance < bestDistance) {
      best = p;
      bestDistance = distance;
    }
  }
  return best;
}

/** The decode rate measured nearest `t` (within a second and a half), if any. */
export function rateAt(rates: LiveRate[], t: number): LiveRate | null {
  let best: LiveRate | null = null;
  for (const r of rates) {
    const d = Math.abs(r.atMs - t);
    if (d <= RATE_NEAR_MS && (!best || d < Math.abs(best.atMs - t))) best = r;
  }
  return best;
}

/** The slowdown whose stretch holds `t`, if any. */
export function slowdownAt(slowdowns: LiveSlowdown[], t: number): LiveSlowdown | null {
  return slowdowns.find((s) => t >= s.startMs && t <= s.endMs) ?? null;
}

/** A wall-clock time, e.g. `14:02:09`. */
export function clock(ms: number): string {
  const d = new Date(ms);
  const two = (n: number) => String(n).padStart(2, '0');
  return `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}`;
}

/** The figures at `t`, one line each: time, memory against the budget, swap and pressure, tok/s, slowdown. */
export function readout(view: LiveView, t: number): string[] {
  const lines = [clock(t)];
  const m = memoryAt(view.memory, t);
  if (m) {
    const budget = view.budgetBytes === null ? '' : ` · budget ${formatGB(view.budgetBytes)}`;
    lines.push(`used ${formatUsed(m.usedBytes, m.totalBytes)}${budget} · swap ${formatGB(m.swapUsedBytes)} · pressure ${m.pressure}`);
  } else {
    lines.push('no memory reading (Headroom was not running)');
  }
  const r = rateAt(view.rates, t);
  if (r) lines.push(`${r.tps.toFixed(1)} tok/s decoding (${r.modelId})`);
  const s = slowdownAt(view.slowdowns, t);
  if (s) lines.push(s.sentence);
  return lines;
}

/** The sentence a screen reader hears for the whole graph. */
export function summary(view: LiveView, minutes: number): string {
  const last = view.memory.at(-1);
  const memory = last
    ? `memory used ${formatUsed(last.usedBytes, last.totalBytes)}, swap ${formatGB(last.swapUsedBytes)}, pressure ${last.pressure}`
    : 'no memory readings';
  const rates = view.rates.length ? `${view.rates.length} decode rate points, last ${view.rates.at(-1)?.tps.toFixed(1)} tok/s` : 'no answers decoding';
  const slow = view.slowdowns.length ? `; ${view.slowdowns.at(-1)?.sentence}` : '';
  return `Live graph of the last ${minutes} minutes: ${memory}; ${rates}${slow}. Use the arrow keys to read the figures at each moment.`;
}
