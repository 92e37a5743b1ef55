import { mockIPC } from '@tauri-apps/api/mocks';
import { render, screen, waitFor } from '@testing-library/svelte';
import userEvent from '@testing-library/user-event';
import { describe, expect, it } from 'vitest';
import type { LiveView } from '../ipc/charts';
import { clock } from '../live/readout';
import LivePanel from './LivePanel.svelte';

const GB = 1024 ** 3;
const T0 = 1_800_000_000_000;

const SVG =
  '<svg width="400" height="200" viewBox="0 0 400 200" xmlns="http://www.w3.org/2000/svg">' +
  '<g data-series="memory-used" data-points="2"><polygon points="0,0 1,1" fill="#30B0C7"/></g>' +
  '<g data-series="tps" data-points="1"><circle data-at-ms="1800000061000" data-tps="12.00" cx="300" cy="50" r="3" fill="#007AFF"/></g>' +
  '<script>alert(1)</script></svg>';

function view(minutes: number): LiveView {
  const start = T0 + 300_000 - minutes * 60_000;
  return {
    svg: SVG,
    plot: { left: 34, right: 362, top: 22, bottom: 178, startMs: start, endMs: T0 + 300_000 },
    budgetBytes: 20 * GB,
    memory: [
      { atMs: T0 + 60_000, spanMs: 1000, totalBytes: 24 * GB, availableBytes: 16 * GB, usedBytes: 8 * GB, swapTotalBytes: 0, swapUsedBytes: 0, processRssBytes: GB, pressure: 'normal' },
      { atMs: T0 + 299_000, spanMs: 1000, totalBytes: 24 * GB, availableBytes: 14 * GB, usedBytes: 10 * GB, swapTotalBytes: 0, swapUsedBytes: 0, processRssBytes: GB, pressure: 'warning' },
    ],
    rates: [{ modelId: 'demo', startMs: T0 + 60_000, atMs: T0 + 61_000, tokens: 12, tps: 12 }],
    slowdowns: [],
  };
}

function backend() {
  const calls: Record<string, unknown>[] = [];
  mockIPC((cmd, args) => {
    if (cmd !== 'live_chart') throw `command ${cmd} not found`;
    const a = args as { minutes: number; theme: string };
    calls.push(a);
    return view(a.minutes);
  });
  return calls;
}

describe('LivePanel', () => {
  it('shows the drawn graph, sanitized, with its series and the latest figures', async () => {
    const calls = backend();
    render(LivePanel, { props: { tick: 1 } });
    const chart = await screen.findByTestId('live-chart');
    await waitFor(() => expect(chart.querySelector('[data-series="tps"] circle')).not.toBeNull());
    expect(chart.querySelector('[data-series="tps"] circle')?.getAttribute('data-tps')).toBe('12.00');
    expect(chart.querySelector('[data-series="memory-used"]')?.getAttribute('data-points')).toBe('2');
    expect(chart.querySelector('script')).toBeNull();
    expect(calls).toEqual([{ minutes: 5, theme: 'light' }]);
    const readout = screen.getByTestId('live-readout');
    expect(readout).toHaveTextContent(clock(T0 + 299_000));
    expect(readout).toHaveTextContent('used 10.0/24.0 GB · budget 20.0 GB · swap 0.0 GB · pressure warning');
    expect(chart).toHaveAccessibleName(/^Live graph of the last 5 minutes: memory used 10.0\/24.0 GB/);
  });

  it('switches the window and reads older moments with the keyboard', async () => {
    const calls = backend();
    const user = userEvent.setup();
    render(LivePanel, { props: { tick: 1 } });
    await screen.findByText(/pressure warning/);
    await user.click(screen.getByTestId('live-window-15'));
    await waitFor(() => expect(calls.at(-1)).toEqual({ minutes: 15, theme: 'light' }));
    expect(screen.getByTestId('live-window-15')).toHaveAttribute('aria-checked', 'true');
    expect(screen.getByTestId('live-window-5')).toHaveAttribute('aria-checked', 'false');

    screen.getByTestId('live-chart').focus();
    await user.keyboard('{ArrowLeft}');
    // One step back from the latest moment: the rate at 61 s.
    const readout = screen.getByTestId('live-readout');
    await waitFor(() => expect(readout).toHaveTextContent('12.0 tok/s decoding (demo)'));
    expect(readout).toHaveTextContent(clock(T0 + 61_000));
    await user.keyboard('{Home}');
    expect(readout).toHaveTextContent(clock(T0 + 60_000));
    expect(readout).toHaveTextContent('used 8.0/24.0 GB');
    await user.keyboard('{End}');
    expect(readout).toHaveTextContent(clock(T0 + 299_000));
  });

  it('says what went wrong in the read-out', async () => {
    mockIPC(() => {
      throw { code: 'STORE', message: 'The database could not be read.' };
    });
    render(LivePanel, { props: { tick: 1 } });
    expect(await screen.findByText('The database could not be read.')).toBeInTheDocument();
  });
});
