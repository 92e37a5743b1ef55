// Typed bindings for the benchmark (src-tauri/src/commands/bench.rs): the
// plan runs on the loaded model, progress streams over a Channel, and the
// report is `headroom bench --json`'s object (snake_case, as the CLI prints
// it and the store keeps it) plus the stored row's id.
import type { ChartTheme } from './charts';
import type { BenchDepth, BenchProgress, BenchRun, BenchRunReply, MeanSd, RateSummary, Roofline } from './generated';
import { command, Channel } from './invoke';

/** One run done (run 0 is the warm-up): `bench::BenchProgress`. */
export type { BenchProgress };
export type { BenchDepth, BenchRun, MeanSd, RateSummary, Roofline };
/** What `bench_run` resolves to: `headroom bench --json`'s object, the stored row's `id`, the depth chart. */
export type BenchReport = BenchRunReply;

export interface BenchPlan {
  /** Positions already in the KV cache before each run. */
  depths: number[];
  /** Prompt tokens per run. */
  p: number;
  /** Generated tokens per run. */
  n: number;
  /** Counted runs per depth (one warm-up comes on top). */
  r: number;
}

/** Runs the plan on the loaded model; resolves when every depth is done and saved. */
export function benchRun(
  plan: BenchPlan,
  onProgress: (p: BenchProgress) => void,
  theme: ChartTheme = 'light',
): Promise<BenchReport> {
  const channel = new Channel<BenchProgress>();
  channel.onmessage = onProgress;
  return command('bench_run', { ...plan, theme, onProgress: channel });
}

/** Stops the running benchmark; its `benchRun` rejects with `BENCH_CANCELLED`.
 *  Resolves to whether one was running. */
export function benchCancel(): Promise<boolean> {
  return command('bench_cancel');
}
