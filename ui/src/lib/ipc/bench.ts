// Typed bindings for the benchmark (src-tauri/src/commands/bench.rs): the
// plan runs on the loaded model, progress streams over a Channel, and the
// report is `headroom bench --json`'s object (snake_case, as the CLI prints
// it and the store keeps it) plus the stored row's id.
import type { ChartTheme } from './charts';
import type { BenchProgress } from './generated';
import { call, Channel } from './invoke';
import type { PressureLevel } from './memory';

/** One run done (run 0 is the warm-up): `bench::BenchProgress`. */
export type { BenchProgress };
/** `headroom_core::bench::MeanSd`; `sd` is null for a single run. */
export interface MeanSd {
  mean: number;
  sd: number | null;
  n: number;
}

export interface RateSummary {
  ttft_ms: MeanSd | null;
  prefill_tps: MeanSd | null;
  decode_tps: MeanSd | null;
  e2e_tps: MeanSd | null;
}

export interface Roofline {
  bytes_per_token: number;
  bandwidth_bytes_per_s: number;
  bound_tps: number;
  achieved_tps: number;
  achieved_percent: number;
}

/** One raw run; undefined rates are null, never 0. */
export interface BenchRun {
  index: number;
  context_tokens: number;
  prompt_tokens: number;
  generated_tokens: number;
  cache_tokens_after: number;
  ttft_ms: number | null;
  prefill_tps: number | null;
  decode_tps: number | null;
  e2e_tps: number | null;
  prefill_ms: number;
  first_token_ms: number | null;
  last_token_ms: number | null;
  peak_memory_bytes: number;
}

export interface BenchDepth {
  depth: number;
  fill_ms: number;
  warmup: BenchRun;
  runs: BenchRun[];
  summary: RateSummary;
  pressure: PressureLevel;
  swap_delta_bytes: number;
  peak_memory_bytes: number;
  roofline: Roofline | null;
  rated_roofline: Roofline | null;
}

export interface BenchReport {
  id: number;
  /** The depth chart (decode and prefill tok/s vs depth), an SVG document;
   * `bench_run` draws it, a report read back from the store has none. */
  chart_svg?: string;
  model: string;
  path: string;
  labels: {
    model_type: string | null;
    quantization: { bits: number; group_size: number } | null;
    kv_dtype: string | null;
    /** How quantized matrices multiply; absent in runs saved before it was recorded. */
    quant_kernel?: { kind: 'fused' | 'cpu-f32'; dequantize_from_rows: number | null } | null;
    weight_bytes: number | null;
    /** Weight bytes one decoded token reads (one embedding row, the chosen experts); absent in older runs. */
    active_weight_bytes?: number | null;
    /** Every weight, all in memory; absent in older runs. */
    resident_weight_bytes?: number | null;
    /** What one decode step reads, by part (`headroom_core::bench::DecodeTraffic`); absent in older runs. */
    traffic?: { experts?: number; experts_per_token?: number; window?: number; state_bytes?: number } | null;
    kv_bytes_per_position: number | null;
    batch: number;
    prompt_tokens: number;
    gen_tokens: number;
    repetitions: number;
    depths: number[];
    seed: number;
  };
  machine: { cpu: string; cpu_cores: number; total_memory_bytes: number; os: string; arch: string };
  bandwidth:
    | { source: 'measured'; copy_gb_per_s: number; triad_gb_per_s: number; array_bytes: number; threads: number }
    | { source: 'given'; gb_per_s: number };
  rated_bandwidth: { chip: string; cpu_cores: number | null; gb_per_s: number; source: string } | null;
  depths: BenchDepth[];
}

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
  return call<BenchReport>('bench_run', { ...plan, theme, onProgress: channel });
}

/** Stops the running benchmark; its `benchRun` rejects with `BENCH_CANCELLED`.
 *  Resolves to whether one was running. */
export function benchCancel(): Promise<boolean> {
  return call<boolean>('bench_cancel');
}
