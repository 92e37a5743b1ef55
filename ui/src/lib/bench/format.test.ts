import { describe, expect, it } from 'vitest';
import type { BenchReport } from '../ipc/bench';
import { decodeTraffic, plainSpeculation } from '../ipc/contract.fixture';
import { benchLabels, benchRows, formatMeanSd, parseDepths, rooflineSentence, weightsSentence } from './format';

const run = { index: 0, context_tokens: 0, prompt_tokens: 512, generated_tokens: 128, cache_tokens_after: 640, ttft_ms: 100, prefill_tps: 5000, decode_tps: 60, e2e_tps: 50, prefill_ms: 100, first_token_ms: 100, last_token_ms: 2000, peak_memory_bytes: 1 };
const report: BenchReport = {
  id: 1,
  model: 'demo',
  path: '/m',
  chart_svg: '<svg/>',
  labels: {
    model_type: 'qwen2',
    quantization: { bits: 4, group_size: 64 },
    kv_dtype: 'float16',
    quant_kernel: null,
    weight_bytes: 1e9,
    active_weight_bytes: null,
    resident_weight_bytes: null,
    traffic: null,
    kv_bytes_per_position: 1000,
    batch: 1,
    prompt_tokens: 512,
    gen_tokens: 128,
    repetitions: 5,
    depths: [0, 4096],
    seed: 0,
  },
  machine: { cpu: 'x', cpu_cores: 2, total_memory_bytes: 1, os: 'linux', arch: 'x86_64' },
  bandwidth: { source: 'measured', copy_gb_per_s: 10, triad_gb_per_s: 11, array_bytes: 1, threads: 2, passes: 2, last_level_cache_bytes: null, capped_by_memory: false },
  rated_bandwidth: null,
  depths: [
    {
      depth: 0,
      fill_ms: 0,
      warmup: run,
      runs: [run],
      summary: { ttft_ms: { mean: 101.4, sd: 2.04, n: 5 }, prefill_tps: { mean: 5012.3, sd: 31.1, n: 5 }, decode_tps: { mean: 61.25, sd: 0.41, n: 5 }, e2e_tps: null },
      speculative: plainSpeculation(),
      pressure: 'normal',
      swap_delta_bytes: 0,
      peak_memory_bytes: 1,
      roofline: null,
      rated_roofline: null,
    },
    {
      depth: 4096,
      fill_ms: 10,
      warmup: run,
      runs: [run],
      summary: { ttft_ms: null, prefill_tps: null, decode_tps: { mean: 48.1, sd: null, n: 1 }, e2e_tps: null },
      speculative: plainSpeculation(),
      pressure: 'normal',
      swap_delta_bytes: 0,
      peak_memory_bytes: 1,
      roofline: { bytes_per_token: 1e9, bandwidth_bytes_per_s: 100e9, bound_tps: 61.7, achieved_tps: 48.1, achieved_percent: 77.96 },
      rated_roofline: null,
    },
  ],
};

describe('benchmark words', () => {
  it('prints mean ± sd, one value for one run, a dash for none', () => {
    expect(formatMeanSd({ mean: 61.25, sd: 0.41, n: 5 })).toBe('61.3 ± 0.4');
    expect(formatMeanSd({ mean: 48.1, sd: null, n: 1 })).toBe('48.1');
    expect(formatMeanSd(null)).toBe('—');
  });

  it('makes one row per depth, with the labels and the roofline in words', () => {
    expect(benchRows(report)).toEqual([
      { depth: '0', prefill: '5012.3 ± 31.1', decode: '61.3 ± 0.4', ttft: '101 ± 2', e2e: '—' },
      { depth: '4K', prefill: '—', decode: '48.1', ttft: '—', e2e: '—' },
    ]);
    expect(benchLabels(report)).toBe('p 512 · n 128 · batch 1 · 5 runs + 1 warm-up · 4-bit g64 · KV float16');
    const kernel = (quant_kernel: BenchReport['labels']['quant_kernel']) =>
      benchLabels({ ...report, labels: { ...report.labels, quant_kernel } });
    expect(kernel({ kind: 'cpu-f32', dequantize_from_rows: 8, row_shared_below_rows: null })).toMatch(
      /KV float16 · f32 matmul, prompt dequantized from 8 rows$/,
    );
    expect(kernel({ kind: 'cpu-f32', dequantize_from_rows: 48, row_shared_below_rows: 48 })).toMatch(
      /KV float16 · f32 matmul, unpacked once below 48 rows, dequantized from 48$/,
    );
    expect(kernel({ kind: 'fused', dequantize_from_rows: null, row_shared_below_rows: null })).toMatch(
      /KV float16 · fused matmul$/,
    );
    expect(rooflineSentence(report)).toBe(
      'Decode reached 78 % of the bandwidth limit at depth 4K (48.1 of 61.7 tok/s at 100 GB/s, measured)',
    );
    expect(rooflineSentence({ ...report, depths: [] })).toBeNull();
    // Without the active/resident split (no depth ran): no sentence rather than a wrong one.
    expect(weightsSentence(report)).toBeNull();
    const moe = {
      ...report,
      labels: {
        ...report.labels,
        active_weight_bytes: 1.6e9,
        resident_weight_bytes: 17.2e9,
        traffic: decodeTraffic({ experts: 128, experts_per_token: 8 }),
      },
    };
    expect(weightsSentence(moe)).toBe('Each token reads 1.6 GB of the 17.2 GB of weights in memory (8 of 128 experts)');
    const dense = { ...report, labels: { ...report.labels, active_weight_bytes: 4.2e6, resident_weight_bytes: 4.3e6, traffic: decodeTraffic() } };
    expect(weightsSentence(dense)).toBe('Each token reads 4.2 MB of the 4.3 MB of weights in memory');
    // The tiny MoE demo: below 1 MB two significant digits, not "0.1 of the 0.2 MB".
    const tinyMoe = { ...moe, labels: { ...moe.labels, active_weight_bytes: 89_216, resident_weight_bytes: 181_376 } };
    expect(weightsSentence(tinyMoe)).toBe('Each token reads 0.089 MB of the 0.18 MB of weights in memory (8 of 128 experts)');
    const tiny = structuredClone(report);
    const roof = tiny.depths[1]?.roofline;
    if (!roof) throw new Error('the fixture has a roofline at depth 4K');
    Object.assign(roof, { achieved_tps: 379.1, bound_tps: 397179.04, achieved_percent: 0.0954 });
    expect(rooflineSentence(tiny)).toBe(
      'Decode reached 0.1 % of the bandwidth limit at depth 4K (379.1 of 397,179 tok/s at 100 GB/s, measured)',
    );
  });

  it('reads depths as typed', () => {
    expect(parseDepths('0, 4096 12k')).toEqual([0, 4096, 12288]);
    expect(parseDepths('  ')).toBe('Give at least one depth, e.g. 0, 4096.');
    expect(parseDepths('0, lots')).toMatch(/“lots” is not a depth/);
  });
});
