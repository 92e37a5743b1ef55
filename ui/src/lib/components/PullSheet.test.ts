import { mockIPC } from '@tauri-apps/api/mocks';
import type { Channel, InvokeArgs } from '@tauri-apps/api/core';
import { render, screen, waitFor } from '@testing-library/svelte';
import userEvent from '@testing-library/user-event';
import { describe, expect, it, vi } from 'vitest';
import type { FitReport } from '../ipc/models';
import type { PullCheck, PullEvent } from '../ipc/pull';
import { budget, estimate, fitReport, overhead, remoteModel } from '../ipc/contract.fixture';
import PullSheet from './PullSheet.svelte';

const GB = 1e9;
function report(kind: 'fits' | 'would_swap'): FitReport {
  return fitReport({
    estimate: estimate({ weight_bytes: 4.3 * GB, kv_cache_bytes: 0.5 * GB, overhead: overhead({ total_bytes: 0.3 * GB }), predicted_peak_bytes: 5.1 * GB }),
    budget: budget({ available_bytes: 20 * GB, freed_by_unload_bytes: 0, os_headroom_bytes: 4 * GB, budget_bytes: 16 * GB }),
    verdict: kind === 'fits' ? { kind } : { kind, by_bytes: 2 * 1024 ** 3 },
    spare_bytes: 0,
    largest_context_that_fits: kind === 'fits' ? 32768 : 2048,
  });
}
function checked(kind: 'fits' | 'would_swap'): PullCheck {
  return {
    endpoint: 'http://127.0.0.1:9',
    fit: report(kind),
    model: remoteModel({ repo: 'org/Model-4bit', bits: 4, total_bytes: 4_300_000_000, cached_bytes: 300_000_000 }),
  };
}

function backend(kind: 'fits' | 'would_swap', pull: (emit: (e: PullEvent) => void) => Promise<unknown>) {
  const calls: Array<{ cmd: string; args: InvokeArgs | undefined }> = [];
  mockIPC(async (cmd, args) => {
    calls.push({ cmd, args });
    if (cmd === 'model_pull_check') return checked(kind);
    if (cmd === 'model_pull') {
      const ch = (args as { onProgress: Channel<PullEvent> }).onProgress;
      return pull((e) => ch.onmessage(e));
    }
    if (cmd === 'model_pull_cancel') return true;
    throw `command ${cmd} not found`;
  });
  return calls;
}

describe('PullSheet', () => {
  it('checks the fit from headers, then downloads with progress and reports the model', async () => {
    let finish: (v: unknown) => void = () => {};
    const calls = backend('fits', (emit) => {
      emit({ event: 'started', repo: 'org/Model-4bit', commit: 'abc', files: 3, total_bytes: 4_300_000_000, cached_bytes: 300_000_000 });
      emit({ event: 'progress', file: 'model.safetensors', file_bytes: 1, file_size: 2, done_bytes: 2_150_000_000, total_bytes: 4_300_000_000, bytes_per_sec: 25_000_000, eta_secs: 86 });
      return new Promise((resolve) => (finish = resolve));
    });
    const onPulled = vi.fn();
    const user = userEvent.setup();
    render(PullSheet, { onClose: () => {}, onPulled });

    expect(screen.getByTestId('pull-check')).toBeDisabled();
    await user.type(screen.getByTestId('pull-repo'), 'https://huggingface.co/org/Model-4bit{Enter}');
    const verdict = await screen.findByTestId('pull-verdict');
    expect(verdict).toHaveAttribute('data-verdict', 'fits');
    expect(verdict).toHaveTextContent('org/Model-4bit fits: needs 4.7 GB');
    expect(calls[0]).toEqual({ cmd: 'model_pull_check', args: { repo: 'org/Model-4bit' } });
    const download = screen.getByTestId('pull-download');
    expect(download).toHaveTextContent('Download 4.0 GB');

    await user.click(download);
    await waitFor(() => expect(screen.getByTestId('pull-progress')).toHaveTextContent('2.1 GB of 4.3 GB · 25 MB/s · about 1 min left'));
    expect(screen.getByRole('progressbar')).toHaveAttribute('aria-valuenow', '50');
    expect(calls.find((c) => c.cmd === 'model_pull')?.args).toMatchObject({ repo: 'org/Model-4bit' });

    finish({ snapshot: '/x', downloaded_bytes: 4_000_000_000, entry: null });
    await waitFor(() => expect(onPulled).toHaveBeenCalledWith(null));
  });

  it('a model that would swap needs "Download anyway", which passes the override', async () => {
    const calls = backend('would_swap', async () => ({ snapshot: '/x', downloaded_bytes: 1, entry: null }));
    const user = userEvent.setup();
    render(PullSheet, { onClose: () => {}, onPulled: () => {} });
    await user.type(screen.getByTestId('pull-repo'), 'org/Model-4bit');
    await user.click(screen.getByTestId('pull-check'));
    expect(await screen.findByTestId('pull-verdict')).toHaveTextContent('org/Model-4bit would push this Mac into swap by 2.0 GB at 8K context');
    await user.click(screen.getByTestId('pull-download'));
    await waitFor(() => expect(calls.find((c) => c.cmd === 'model_pull')?.args).toMatchObject({ override: true }));
  });

  it('says what went wrong and keeps the typed repo', async () => {
    mockIPC(() => {
      throw { code: 'REPO_NOT_FOUND', message: 'The hub has no repo org/Nope.' };
    });
    const user = userEvent.setup();
    render(PullSheet, { onClose: () => {}, onPulled: () => {} });
    await user.type(screen.getByTestId('pull-repo'), 'org/Nope{Enter}');
    expect(await screen.findByTestId('pull-error')).toHaveTextContent('The hub has no repo org/Nope.');
    expect(screen.getByTestId('pull-repo')).toHaveValue('org/Nope');
  });
});
