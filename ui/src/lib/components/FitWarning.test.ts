import { render, screen } from '@testing-library/svelte';
import userEvent from '@testing-library/user-event';
import { describe, expect, it, vi } from 'vitest';
import type { FitReport } from '../ipc/models';
import FitWarning from './FitWarning.svelte';

const GB = 1024 ** 3;
const REPORT: FitReport = {
  estimate: { context_tokens: 8192, weight_bytes: 8 * GB, kv_cache_bytes: 3 * GB, overhead: { total_bytes: GB }, predicted_peak_bytes: 12 * GB },
  budget: { available_bytes: 14 * GB, freed_by_unload_bytes: 0, os_headroom_bytes: 4 * GB, budget_bytes: 10 * GB },
  verdict: { kind: 'would_swap', by_bytes: 2 * GB },
  spare_bytes: -2 * GB,
  largest_context_that_fits: 4096,
};

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
      footprint: {
        kv_layers: [
          { layers: 8, kv_heads: 8, head_dim: 256, window: null, state_bytes: 0 },
          { layers: 40, kv_heads: 8, head_dim: 256, window: 1024, state_bytes: 0 },
          { layers: 30, kv_heads: 0, head_dim: 0, window: null, state_bytes: 2e6 },
        ],
        experts: { count: 128, per_token: 8, resident_bytes: 7 * GB, active_bytes: 0.5 * GB },
        active_weight_bytes: GB,
      },
    });
    expect(screen.getByTestId('fit-parts')).toHaveTextContent('Experts: all 128 in memory, 8 used per token7.0 GB');
    expect(screen.getByTestId('fit-kv-full')).toHaveTextContent('2.0 GB');
    expect(screen.getByTestId('fit-kv-window')).toHaveTextContent('0.5 GB');
    expect(screen.getByTestId('fit-parts')).toHaveTextContent('40 sliding layers: last 1K tokens only');
    expect(screen.getByTestId('fit-parts')).toHaveTextContent('30 linear layers: fixed state, any length');
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
});
