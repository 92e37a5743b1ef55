import { mockIPC } from '@tauri-apps/api/mocks';
import { render, screen } from '@testing-library/svelte';
import userEvent from '@testing-library/user-event';
import { describe, expect, it } from 'vitest';
import BenchView from './BenchView.svelte';

describe('BenchView', () => {
  it('stops a running benchmark, says nothing was saved, and can run again', async () => {
    const calls: string[] = [];
    let reject: ((e: unknown) => void) | null = null;
    mockIPC((cmd) => {
      calls.push(cmd);
      if (cmd === 'bench_run') return new Promise((_, no) => (reject = no));
      if (cmd === 'bench_cancel') {
        reject?.({ code: 'BENCH_CANCELLED', message: 'the benchmark was cancelled' });
        return true;
      }
      return null;
    });
    const user = userEvent.setup();
    render(BenchView, { props: { model: 'demo' } });
    await user.click(screen.getByTestId('bench-run'));
    expect(screen.queryByTestId('bench-run')).toBeNull();
    await user.click(screen.getByTestId('bench-stop'));
    expect(calls).toEqual(['bench_run', 'bench_cancel']);
    expect(await screen.findByTestId('bench-stopped')).toHaveTextContent('Stopped; nothing was saved.');
    expect(screen.queryByTestId('bench-error')).toBeNull();
    expect(screen.getByTestId('bench-run')).toBeEnabled();
  });

  it('shows any other failure as an error', async () => {
    mockIPC(() => {
      throw { code: 'NO_MODEL_LOADED', message: 'No model is loaded.' };
    });
    const user = userEvent.setup();
    render(BenchView, { props: { model: 'demo' } });
    await user.click(screen.getByTestId('bench-run'));
    expect(await screen.findByTestId('bench-error')).toHaveTextContent('No model is loaded.');
    expect(screen.queryByTestId('bench-stopped')).toBeNull();
  });
});
