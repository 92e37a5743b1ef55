import { render, screen } from '@testing-library/svelte';
import userEvent from '@testing-library/user-event';
import { describe, expect, it, vi } from 'vitest';
import type { FitReport } from '../ipc/models';
import type { ShelfEntry } from '../ipc/shelf';
import { shelfEntry } from '../shelf/testing';
import ChatView from './ChatView.svelte';

const GIB = 1024 ** 3;

function entry(repo: string, kind: 'fits' | 'would_swap', over: Partial<ShelfEntry> = {}): ShelfEntry {
  if (kind === 'fits') return shelfEntry({ repo, name: repo.split('/')[1] ?? repo, ...over });
  const refused = shelfEntry({ repo, name: repo.split('/')[1] ?? repo, ...over }, 23.1);
  return {
    ...refused,
    fit: { ...refused.fit, verdict: { kind, by_bytes: 4.5 * GIB } } as unknown as FitReport,
    why: "4.5 GB over this Mac's 18.7 GB budget at 8192 tokens; fits with up to 663 tokens",
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
