// Words and colours for fit verdicts and memory figures.
import type { PressureLevel } from '../ipc/memory';
import type { FitReport, LoadOptions, ModelEntry, PeerSplit, Remedy, Share, Verdict } from '../ipc/models';

const GIB = 1024 ** 3;

/** Bytes as GB (2^30, as Activity Monitor counts), one decimal: `4.3 GB`. */
export function formatGB(bytes: number): string {
  return `${(bytes / GIB).toFixed(1)} GB`;
}

/** A context length the way people say it: 8192 → `8K`, 1536 → `1.5K`, 512 → `512`. */
export function formatContext(tokens: number): string {
  if (tokens < 1024) return `${tokens}`;
  const k = tokens / 1024;
  return `${Number.isInteger(k) ? k : Number(k.toFixed(1))}K`;
}

/** The dot colour for a verdict (unknown when there is none). */
export function verdictLevel(verdict: Verdict | null | undefined): PressureLevel {
  switch (verdict?.kind) {
    case 'fits':
      return 'normal';
    case 'tight':
      return 'warning';
    case 'would_swap':
    case 'cannot_fit':
      return 'critical';
    default:
      return 'unknown';
  }
}

/** A verdict in a few words. */
export function verdictLabel(verdict: Verdict | null | undefined): string {
  switch (verdict?.kind) {
    case 'fits':
      return 'fits';
    case 'tight':
      return 'tight';
    case 'would_swap':
      return `would swap by ${formatGB(verdict.by_bytes)}`;
    case 'cannot_fit':
      return 'cannot fit';
    default:
      return 'fit unknown';
  }
}

/** Whether loading needs the user's say-so (the backend refuses without `override`). */
export function refuses(report: FitReport | null | undefined): boolean {
  return report?.verdict.kind === 'would_swap' || report?.verdict.kind === 'cannot_fit';
}

/** The sheet's sentence, e.g. `Qwen2.5-14B would push this Mac into swap by 2.3 GB at 8K context`. */
export function swapSentence(name: string, report: FitReport): string {
  const v = report.verdict;
  const by = v.kind === 'would_swap' || v.kind === 'cannot_fit' ? v.by_bytes : 0;
  const ctx = formatContext(report.estimate.context_tokens);
  if (v.kind === 'cannot_fit') {
    return `${name} would push this Mac into swap by ${formatGB(by)} at ${ctx} context, and no smaller context fits`;
  }
  return `${name} would push this Mac into swap by ${formatGB(by)} at ${ctx} context`;
}

/** One line of the memory breakdown below "Weights" or "KV cache". */
export interface MemoryPart {
  /** `experts`, `kv-full`, `kv-window`, `kv-state`: also the test id suffix. */
  key: string;
  label: string;
  bytes: number;
}

/** The experts of a mixture-of-experts model: all in memory, a few read per token. */
export function expertsPart(report: FitReport): MemoryPart | null {
  const x = report.footprint?.experts;
  if (!x) return null;
  return {
    key: 'experts',
    label: `Experts: all ${x.count} in memory, ${x.per_token} used per token`,
    bytes: x.resident_bytes,
  };
}

/** The KV cache by kind of layer, when it is not all full attention (else empty). */
export function kvParts(report: FitReport): MemoryPart[] {
  const groups = report.footprint?.kv_layers ?? [];
  if (groups.every((g) => g.window === null && g.state_bytes === 0)) return [];
  const e = report.estimate;
  const parts: MemoryPart[] = [];
  for (const g of groups) {
    if (g.state_bytes > 0) {
      parts.push({ key: 'kv-state', label: `${g.layers} linear layers: fixed state, any length`, bytes: e.kv_state_bytes ?? 0 });
    } else if (g.window !== null) {
      parts.push({
        key: 'kv-window',
        label: `${g.layers} sliding layers: last ${formatContext(g.window)} tokens only`,
        bytes: e.kv_window_bytes ?? 0,
      });
    } else {
      parts.push({ key: 'kv-full', label: `${g.layers} full-attention layers: grows with context`, bytes: e.kv_full_bytes ?? 0 });
    }
  }
  return parts;
}

/** What sets a model's memory apart from "weights + KV", for a picker row: `8 of 128 experts · window 1K`. */
export function architectureNote(report: FitReport | null | undefined): string {
  if (!report) return '';
  const notes: string[] = [];
  const x = report.footprint?.experts;
  if (x) notes.push(`${x.per_token} of ${x.count} experts per token`);
  for (const g of report.footprint?.kv_layers ?? []) {
    if (g.window !== null) notes.push(`KV window ${formatContext(g.window)}`);
    if (g.state_bytes > 0) notes.push('fixed-size state');
  }
  return notes.join(' · ');
}

/** The picker's size groups. */
export function sizeGroup(m: ModelEntry): string {
  const gb = m.size_bytes / 1e9;
  if (gb < 1) return 'Under 1 GB';
  if (gb < 8) return '1–8 GB';
  if (gb < 24) return '8–24 GB';
  return 'Over 24 GB';
}

/** Models grouped by size (the list arrives smallest first; order is kept). */
export function groupBySize(models: ModelEntry[]): Array<{ label: string; models: ModelEntry[] }> {
  const groups: Array<{ label: string; models: ModelEntry[] }> = [];
  for (const m of models) {
    const label = sizeGroup(m);
    const group = groups.find((g) => g.label === label);
    if (group) group.models.push(m);
    else groups.push({ label, models: [m] });
  }
  return groups;
}

/** A picker row's memory part: `needs 4.3 GB`. */
export function predictedMemory(m: ModelEntry): string {
  return m.fit ? `needs ${formatGB(m.fit.estimate.predicted_peak_bytes)}` : '';
}

/** What a prediction rests on, for a picker row: `measured here at 4K` or `estimated`. */
export function basisShort(report: FitReport | null | undefined): string {
  if (!report) return '';
  return report.calibration ? `measured here at ${formatContext(report.calibration.at_context)}` : 'estimated';
}

/** The live strip's figure: `19.1/32.0 GB`. */
export function formatUsed(used: number, total: number): string {
  return `${(used / GIB).toFixed(1)}/${(total / GIB).toFixed(1)} GB`;
}

/** An SVG polyline's points for `values` in a `width` × `height` box (0 at the bottom, `max` at the top). */
export function sparkline(values: number[], max: number, width: number, height: number): string {
  if (values.length === 0 || max <= 0) return '';
  const step = values.length > 1 ? width / (values.length - 1) : 0;
  return values
    .map((v, i) => {
      const y = height - (Math.min(Math.max(v, 0), max) / max) * height;
      return `${(i * step).toFixed(1)},${y.toFixed(1)}`;
    })
    .join(' ');
}

/** A remedy as the warning sheet lists it: what the button does, and what it would then need. */
export function remedyText(r: Remedy): { action: string; detail: string } {
  const needs = `needs ${formatGB(r.predictedPeakBytes)}`;
  switch (r.kind) {
    case 'kv_cache':
      return { action: `Load with the KV cache at ${r.bits} bits`, detail: `${r.label} · ${needs}` };
    case 'other_quantization':
      return {
        action: `Load ${r.name} instead`,
        detail: `${r.bits === null ? 'unquantized' : `${r.bits}-bit`}, already on this Mac · ${needs}`,
      };
    case 'shorter_context':
      return { action: `Load with ${formatContext(r.contextTokens)} context`, detail: needs };
  }
}

/** The load a remedy of model `id` stands for: which model, with which options. */
export function remedyLoad(id: string, r: Remedy): { id: string; options: LoadOptions } {
  switch (r.kind) {
    case 'kv_cache':
      return { id, options: { kv: { kind: 'quantized', bits: r.bits, group_size: r.groupSize, start: r.start } } };
    case 'other_quantization':
      return { id: r.id, options: {} };
    case 'shorter_context':
      return { id, options: { contextLimit: r.contextTokens } };
  }
}

/** One Mac's line of a split across two Macs: its layers, its peak against its budget, its verdict. */
export function shareText(name: string, share: Share): string {
  const f = share.fit;
  const last = share.first_layer + share.layers - 1;
  const layers = share.layers === 1 ? `layer ${last}` : `layers ${share.first_layer}–${last}`;
  return `${name}: ${layers}, needs ${formatGB(f.estimate.predicted_peak_bytes)} of ${formatGB(f.budget.budget_bytes)} · ${verdictLabel(f.verdict)}`;
}

/** Whether a split fits on both Macs. */
export function splitFits(split: PeerSplit | null | undefined): boolean {
  return !!split && !refuses(split.host.fit) && !refuses(split.peer.fit);
}

/** The picker row's note for a model split across two Macs. */
export function twoMacsNote(split: PeerSplit): string {
  return splitFits(split)
    ? `fits across this Mac and ${split.machine}`
    : `would swap even across this Mac and ${split.machine}`;
}
