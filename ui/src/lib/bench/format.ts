// The benchmark's words and table rows, as llama-bench prints them: mean ± sd
// with the labels that make a figure mean something.
import type { BenchDepth, BenchReport, MeanSd } from '../ipc/bench';
import { formatContext } from '../fit/format';

/** `61.2 ± 0.4`; `61.2` for one run; `—` when undefined. */
export function formatMeanSd(m: MeanSd | null, digits = 1): string {
  if (!m) return '—';
  return m.sd === null ? m.mean.toFixed(digits) : `${m.mean.toFixed(digits)} ± ${m.sd.toFixed(digits)}`;
}

/** One table row per depth. */
export interface BenchRow {
  depth: string;
  prefill: string;
  decode: string;
  ttft: string;
  e2e: string;
}

export function benchRows(report: BenchReport): BenchRow[] {
  return report.depths.map((d: BenchDepth) => ({
    depth: formatContext(d.depth),
    prefill: formatMeanSd(d.summary.prefill_tps),
    decode: formatMeanSd(d.summary.decode_tps),
    ttft: formatMeanSd(d.summary.ttft_ms, 0),
    e2e: formatMeanSd(d.summary.e2e_tps),
  }));
}

/**
 * The labels line under the table:
 * `p 512 · n 128 · batch 1 · 5 runs + 1 warm-up · 4-bit g64 · KV float16 · fused matmul`.
 */
export function benchLabels(report: BenchReport): string {
  const l = report.labels;
  const parts = [
    `p ${l.prompt_tokens}`,
    `n ${l.gen_tokens}`,
    `batch ${l.batch}`,
    `${l.repetitions} run${l.repetitions === 1 ? '' : 's'} + 1 warm-up`,
  ];
  if (l.quantization) parts.push(`${l.quantization.bits}-bit g${l.quantization.group_size}`);
  if (l.kv_dtype) parts.push(`KV ${l.kv_dtype}`);
  const k = l.quant_kernel;
  if (k?.kind === 'cpu-f32' && k.row_shared_below_rows !== null)
    parts.push(`f32 matmul, unpacked once below ${k.row_shared_below_rows} rows, dequantized from ${k.dequantize_from_rows}`);
  else if (k?.kind === 'cpu-f32') parts.push(`f32 matmul, prompt dequantized from ${k.dequantize_from_rows} rows`);
  else if (k?.kind === 'fused') parts.push('fused matmul');
  return parts.join(' · ');
}

/**
 * How close decode ran to the memory-bandwidth limit, in words, from the
 * shallowest depth with a roofline: `Decode reached 78 % of the bandwidth
 * limit (48.1 of 61.7 tok/s at 100 GB/s, measured)`.
 */
export function rooflineSentence(report: BenchReport): string | null {
  for (const d of report.depths) {
    const r = d.roofline ?? d.rated_roofline;
    if (!r) continue;
    const gbps = r.bandwidth_bytes_per_s / 1e9;
    const source = d.roofline ? 'measured' : `rated for ${report.rated_bandwidth?.chip ?? 'this chip'}`;
    // A tiny model's bound is huge and its share tiny: keep digits where they say something.
    const pct = r.achieved_percent < 10 ? r.achieved_percent.toFixed(1) : Math.round(r.achieved_percent).toString();
    const tps = (v: number) => (v >= 1000 ? Math.round(v).toLocaleString('en-US') : v.toFixed(1));
    return (
      `Decode reached ${pct} % of the bandwidth limit at depth ${formatContext(d.depth)} ` +
      `(${tps(r.achieved_tps)} of ${tps(r.bound_tps)} tok/s at ${gbps.toFixed(0)} GB/s, ${source})`
    );
  }
  return null;
}

/** What a decoded token reads against what sits in memory, e.g. `Each token reads 1.6 GB of the
 * 17.2 GB of weights in memory (8 of 128 experts)`; null for runs saved before it was kept. */
export function weightsSentence(report: BenchReport): string | null {
  const l = report.labels;
  const active = l.active_weight_bytes;
  const resident = l.resident_weight_bytes;
  if (active == null || resident == null || resident <= 0) return null;
  // Below 1 of a unit keep two significant digits: a tiny model's 0.09 of 0.18 MB, not 0.1 of 0.2.
  const digits = (v: number) => (v < 1 ? v.toPrecision(2) : v.toFixed(1));
  const gb = (b: number) => (b >= 1e9 ? `${digits(b / 1e9)} GB` : `${digits(b / 1e6)} MB`);
  const t = l.traffic;
  const parts: string[] = [];
  if (t?.experts) parts.push(`${t.experts_per_token ?? 0} of ${t.experts} experts`);
  if (t?.window) parts.push(`KV of sliding layers capped at ${formatContext(t.window)} tokens`);
  if (t?.state_bytes) parts.push(`plus ${gb(t.state_bytes)} of linear-attention state`);
  const detail = parts.length > 0 ? ` (${parts.join('; ')})` : '';
  return `Each token reads ${gb(active)} of the ${gb(resident)} of weights in memory${detail}`;
}

/** Depths as typed (`0, 4096, 12k`) → numbers, or an error sentence. */
export function parseDepths(typed: string): number[] | string {
  const parts = typed.split(/[\s,]+/).filter(Boolean);
  if (parts.length === 0) return 'Give at least one depth, e.g. 0, 4096.';
  const out: number[] = [];
  for (const p of parts) {
    const m = p.match(/^(\d+(?:\.\d+)?)(k?)$/i);
    if (!m?.[1]) return `“${p}” is not a depth: use token counts like 0, 4096 or 12k.`;
    const n = Math.round(Number(m[1]) * (m[2] ? 1024 : 1));
    out.push(n);
  }
  return out;
}
