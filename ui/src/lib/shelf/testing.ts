// A shelf row for the UI's tests: Qwen3 4B as the recorded shelf has it,
// fitting, with `over` changing what a case needs.
import type { FitReport } from '../ipc/models';
import type { ShelfEntry } from '../ipc/shelf';

const GIB = 1024 ** 3;

export function shelfEntry(over: Partial<ShelfEntry> = {}, peakGiB = 4.9): ShelfEntry {
  return {
    repo: 'mlx-community/Qwen3-4B-4bit',
    name: 'Qwen3 4B',
    about: '',
    license: 'apache-2.0',
    gated: false,
    arch: 'qwen3',
    bits: 4,
    quantization: '4-bit, group 64',
    download_bytes: null,
    weight_bytes: 2_262_920_192,
    installed: false,
    fit: {
      estimate: { predicted_peak_bytes: peakGiB * GIB, context_tokens: 8192 },
      verdict: { kind: 'fits' },
    } as unknown as FitReport,
    remedies: [],
    why: null,
    source: { kind: 'recorded', on: '2026-12-03' },
    ...over,
  };
}
