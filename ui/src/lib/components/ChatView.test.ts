import { render, screen } from '@testing-library/svelte';
import userEvent from '@testing-library/user-event';
import { describe, expect, it, vi } from 'vitest';
import type { FitReport } from '../ipc/models';
import type { ShelfEntry } from '../ipc/shelf';
import ChatView from './ChatView.svelte';

const GIB = 1024 ** 3;

function entry(repo: string, kind: 'fits' | 'would_swap', over: Partial<ShelfEntry> = {}): ShelfEntry {
  const peak = kind === 'fits' ? 4.9 * GIB : 23.1 * GIB;
  return {
    repo,
    name: repo.split('/')[1] ?? repo,
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
      estimate: { predicted_peak_bytes: peak, context_tokens: 8192 },
      verdict: kind === 'fits' ? { kind } : { kind, by_bytes: 4.5 * GIB },
    } as unknown as FitReport,
    remedies: [],
    why: kind === 'fits' ? null : "4.5 GB over this Mac's 18.7 GB budget at 8192 tokens; fits with up to 663 tokens",
    source: { kind: 'recorded', on: '2026-12-03' },
    ...over,
  };
}

const SHELF = [entry('a/Small', 'fits'), entry('b/Installed', 'fits', { installed: true }), entry('c/Large', 'would_swap')];

describe('ChatView empty state', () => {
  it('offers the shelf while no model is loaded, what fits first with its numbers; a click pulls that repo', async () => {
    const onShelfPick = vi.fn();
    render(ChatView, { props: { model: null, shelf: SHELF, onShelfPick } });
    expect(screen.getByTestId('shelf-empty')).toHaveTextContent('Start with a model that fits this Mac');
    const rows = screen.getAllByTestId('shelf-starter');
    // What is already in the model list is not offered again.
    expect(rows.map((r) => r.dataset.repo)).toEqual(['a/Small', 'c/Large']);
    expect(rows[0]).toHaveTextContent('4-bit · 2.3 GB download · needs 4.9 GB');
    expect(rows[0]).toHaveTextContent('fits');
    expect(rows[1]).toHaveTextContent('would swap by 4.5 GB');
    expect(rows[1]).toHaveTextContent("4.5 GB over this Mac's 18.7 GB budget at 8192 tokens; fits with up to 663 tokens");
    await userEvent.click(rows[1]!);
    expect(onShelfPick).toHaveBeenCalledWith('c/Large');
  });

  it('with a model loaded, offers the shelf as more models; with no shelf, offers nothing', () => {
    const { unmount } = render(ChatView, { props: { model: 'SmolLM2', shelf: SHELF, onShelfPick: vi.fn() } });
    expect(screen.getByText('Chat with SmolLM2')).toBeInTheDocument();
    expect(screen.getByTestId('shelf-empty')).toHaveTextContent('More models that fit this Mac');
    unmount();
    render(ChatView, { props: { model: 'SmolLM2', shelf: [], onShelfPick: vi.fn() } });
    expect(screen.queryByTestId('shelf-empty')).toBeNull();
  });
});
