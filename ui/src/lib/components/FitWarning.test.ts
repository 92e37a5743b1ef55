import { render, screen } from '@testing-library/svelte';
import userEvent from '@testing-library/user-event';
import { describe, expect, it, vi } from 'vitest';
import { remedyLoad } from '../fit/format';
import type { FitReport, PeerSplit, Remedy } from '../ipc/models';
import { budget, calibration, estimate, fitReport, footprint, overhead } from '../ipc/contract.fixture';
import FitWarning from './FitWarning.svelte';

const GB = 1024 ** 3;
const REPORT: FitReport = fitReport({
  estimate: estimate({ weight_bytes: 8 * GB, kv_cache_bytes: 3 * GB, overhead: overhead({ total_bytes: GB }), predicted_peak_bytes: 12 * GB }),
  budget: budget({ available_bytes: 14 * GB, freed_by_unload_bytes: 0, os_headroom_bytes: 4 * GB, budget_bytes: 10 * GB }),
  verdict: { kind: 'would_swap', by_bytes: 2 * GB },
  spare_bytes: -2 * GB,
  largest_context_that_fits: 4096,
});

function show(report: FitReport = REPORT) {
  const props = { name: 'Big', report, onCancel: vi.fn(), onLoadWithContext: vi.fn(), onLoadAnyway: vi.fn() };
  render(FitWarning, { props });
  return props;
}

describe('FitWarning', () => {
  it('shows every number and focuses Cancel', () => {
    show();
    expect(screen.getByTestId('fit-warning')).toHaveTextContent('Big would push this Mac into swap by 2.0 GB at 8K context.');
    expect(screen.getByTestId('fit-weights')).toHaveTextContent('8.0 GB');
    expect(screen.getByTestId('fit-kv')).toHaveTextContent('3.0 GB');
    expect(screen.getByTestId('fit-overhead')).toHaveTextContent('1.0 GB');
    expect(screen.getByTestId('fit-budget')).toHaveTextContent('10.0 GB');
    expect(screen.getByTestId('fit-largest')).toHaveTextContent('4K tokens');
    expect(screen.getByTestId('fit-warning-cancel')).toHaveFocus();
  });

  it('shows the experts, the window and the fixed state as their own lines, and none for a dense model', () => {
    show({
      ...REPORT,
      estimate: { ...REPORT.estimate, kv_full_bytes: 2 * GB, kv_window_bytes: 0.5 * GB, kv_state_bytes: 0.5 * GB },
      footprint: footprint({
        kv_layers: [
          { layers: 8, kv_heads: 8, head_dim: 256, window: null, state_bytes: 0 },
          { layers: 40, kv_heads: 8, head_dim: 256, window: 1024, state_bytes: 0 },
          { layers: 30, kv_heads: 0, head_dim: 0, window: null, state_bytes: 2e6 },
        ],
        experts: { count: 128, per_token: 8, resident_bytes: 7 * GB, active_bytes: 0.5 * GB },
        active_weight_bytes: GB,
      }),
    });
    expect(screen.getByTestId('fit-parts')).toHaveTextContent('Experts: all 128 in memory, 8 used per token7.0 GB');
    expect(screen.getByTestId('fit-kv-full')).toHaveTextContent('2.0 GB');
    expect(screen.getByTestId('fit-kv-window')).toHaveTextContent('0.5 GB');
    expect(screen.getByTestId('fit-parts')).toHaveTextContent('40 sliding layers: last 1K tokens only');
    expect(screen.getByTestId('fit-parts')).toHaveTextContent('30 linear layers: fixed state, any length');
  });

  it("draws the cache the peak holds in the bar, and the context's cache in the figures", () => {
    // An earlier prompt chunk peaks: 2 GB of cache then, 3 GB at the full context.
    const { container } = render(FitWarning, {
      props: {
        name: 'Big',
        report: { ...REPORT, estimate: { ...REPORT.estimate, peak_positions: 6144, kv_at_peak_bytes: 2 * GB, predicted_peak_bytes: 11 * GB } },
        onCancel: vi.fn(),
        onLoadWithContext: vi.fn(),
        onLoadAnyway: vi.fn(),
      },
    });
    // The bar's scale is the 11 GB peak: 8 + 2 + 1.
    expect((container.querySelector('.seg.kv') as HTMLElement).style.width).toBe(`${((2 / 11) * 100).toFixed(2)}%`);
    expect(screen.getByTestId('fit-kv')).toHaveTextContent('3.0 GB');
  });

  it('says what the figure rests on: a peak measured here, else an estimate', () => {
    show();
    expect(screen.getByTestId('fit-basis')).toHaveTextContent('estimated');
    expect(screen.queryByTestId('fit-basis-rule')).toBeNull();
    const rule = 'A peak measured on this Mac counts in full at its own context and less with distance.';
    const measured = calibration({
      at_context: 4096,
      peak_bytes: 9.8 * GB,
      formula_bytes: 9 * GB,
      offset_bytes: 0.8 * GB,
      for_context: 8192,
      weight_percent: 75,
      rule,
    });
    document.body.innerHTML = '';
    show({ ...REPORT, calibration: measured, basis: 'measured here at 4K: 9.8 GB, counted 50 % at 8K' });
    expect(screen.getByTestId('fit-basis')).toHaveTextContent('measured here at 4K: 9.8 GB, counted 50 % at 8K');
    // The sheet says how a measurement counts: the rule from core::calibration.
    expect(screen.getByTestId('fit-basis-rule')).toHaveTextContent(rule);
  });

  it('has no parts list for a dense full-attention model', () => {
    show();
    expect(screen.queryByTestId('fit-parts')).toBeNull();
  });

  it('calls back for each button and Esc', async () => {
    const user = userEvent.setup();
    const props = show();
    await user.click(screen.getByRole('button', { name: 'Load with 4K context' }));
    expect(props.onLoadWithContext).toHaveBeenCalledWith(4096);
    await user.click(screen.getByTestId('fit-warning-load-anyway'));
    expect(props.onLoadAnyway).toHaveBeenCalledOnce();
    await user.click(screen.getByTestId('fit-warning-cancel'));
    await user.keyboard('{Escape}');
    expect(props.onCancel).toHaveBeenCalledTimes(2);
  });

  it('offers no smaller context when none fits', () => {
    show({ ...REPORT, verdict: { kind: 'cannot_fit', by_bytes: 170 * GB }, largest_context_that_fits: null });
    expect(screen.queryByRole('button', { name: /Load with/ })).toBeNull();
    expect(screen.getByTestId('fit-largest')).toHaveTextContent('none');
  });

  it('lists what would fit, each with its numbers, and applies the one clicked', async () => {
    const user = userEvent.setup();
    const remedies: Remedy[] = [
      { kind: 'kv_cache', bits: 8, groupSize: 64, start: 0, label: '8-bit (group 64)', predictedPeakBytes: 9.5 * GB },
      { kind: 'other_quantization', id: 'org/Big-4bit', name: 'Big-4bit', bits: 4, predictedPeakBytes: 7 * GB },
      { kind: 'shorter_context', contextTokens: 4096, predictedPeakBytes: 9.9 * GB },
    ];
    const onRemedy = vi.fn();
    render(FitWarning, { props: { name: 'Big', report: REPORT, onCancel: vi.fn(), onLoadWithContext: vi.fn(), onLoadAnyway: vi.fn(), remedies, onRemedy } });
    const list = screen.getByTestId('fit-remedies');
    expect(list).toHaveTextContent('Load with the KV cache at 8 bits 8-bit (group 64) · needs 9.5 GB');
    expect(list).toHaveTextContent('Load Big-4bit instead 4-bit, already on this Mac · needs 7.0 GB');
    expect(list).toHaveTextContent('Load with 4K context needs 9.9 GB');
    // The shorter context is one of the remedies now, not a second button.
    expect(screen.queryByTestId('fit-warning-load-smaller')).toBeNull();
    await user.click(screen.getByTestId('fit-remedy-kv_cache'));
    expect(onRemedy).toHaveBeenCalledWith(remedies[0]);
    // What each click loads: the same model with a quantized cache, the other model, the same at 4K.
    expect(remedyLoad('org/Big-8bit', remedies[0]!)).toEqual({
      id: 'org/Big-8bit',
      options: { kv: { kind: 'quantized', bits: 8, group_size: 64, start: 0 } },
    });
    expect(remedyLoad('org/Big-8bit', remedies[1]!)).toEqual({ id: 'org/Big-4bit', options: {} });
    expect(remedyLoad('org/Big-8bit', remedies[2]!)).toEqual({ id: 'org/Big-8bit', options: { contextLimit: 4096 } });
  });

  it('says so when nothing would fit', () => {
    render(FitWarning, { props: { name: 'Huge', report: REPORT, onCancel: vi.fn(), onLoadWithContext: vi.fn(), onLoadAnyway: vi.fn(), remedies: [] } });
    expect(screen.getByTestId('fit-remedies-none')).toHaveTextContent('Nothing on this Mac would');
  });

  it('offers the load across two Macs with each Mac\'s layers and numbers, only where both fit', async () => {
    const share = (first: number, layers: number, peak: number, limit: number, verdict: FitReport['verdict']) => ({
      first_layer: first,
      layers,
      fit: fitReport({
        estimate: estimate({ predicted_peak_bytes: peak * GB }),
        budget: budget({ budget_bytes: limit * GB }),
        verdict,
      }),
    });
    const split: PeerSplit = {
      address: '10.0.0.2:7070',
      machine: 'Studio',
      context_tokens: 8192,
      host: share(0, 9, 4.1, 10, { kind: 'fits' }),
      peer: share(9, 19, 8.3, 20, { kind: 'fits' }),
    };
    const onLoadAcross = vi.fn();
    render(FitWarning, { props: { name: 'Big', report: REPORT, onCancel: vi.fn(), onLoadWithContext: vi.fn(), onLoadAnyway: vi.fn(), twoMacs: split, onLoadAcross } });
    expect(screen.getByTestId('fit-two-macs-host')).toHaveTextContent('This Mac: layers 0–8, needs 4.1 GB of 10.0 GB · fits');
    expect(screen.getByTestId('fit-two-macs-peer')).toHaveTextContent('Studio: layers 9–27, needs 8.3 GB of 20.0 GB · fits');
    await userEvent.click(screen.getByTestId('fit-two-macs-load'));
    expect(onLoadAcross).toHaveBeenCalledOnce();
  });

  it('says so where the split would still swap one of the two Macs, and offers no load across', () => {
    const over: FitReport['verdict'] = { kind: 'would_swap', by_bytes: GB };
    const split: PeerSplit = {
      address: '10.0.0.2:7070',
      machine: 'Air',
      context_tokens: 8192,
      host: { first_layer: 0, layers: 14, fit: fitReport({ verdict: { kind: 'fits' } }) },
      peer: { first_layer: 14, layers: 14, fit: fitReport({ verdict: over }) },
    };
    render(FitWarning, { props: { name: 'Big', report: REPORT, onCancel: vi.fn(), onLoadWithContext: vi.fn(), onLoadAnyway: vi.fn(), twoMacs: split } });
    expect(screen.getByTestId('fit-two-macs-none')).toHaveTextContent('Split with Air, one of the two Macs would still swap.');
    expect(screen.queryByTestId('fit-two-macs-load')).toBeNull();
  });
});
