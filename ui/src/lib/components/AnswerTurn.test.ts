import { fireEvent, render, screen } from '@testing-library/svelte';
import { describe, expect, it, vi } from 'vitest';
import { shownStats } from '../chat/testing';
import type { ChatMessage } from '../sessions/format';
import AnswerTurn from './AnswerTurn.svelte';

const STATS = shownStats({ kvCache: 'bf16', speculation: 'draft: 62% accepted, 2.5 tok/pass' });

const answer = (o: Partial<ChatMessage> = {}): ChatMessage => ({
  id: 2,
  role: 'assistant',
  text: 'Paris is the **capital**.',
  stats: STATS,
  reason: 'stop',
  route: { target: 'local', modelOrProvider: 'headroom-demo-tiny', reasons: [] },
  ...o,
});

describe('AnswerTurn', () => {
  it('renders the Markdown, the stats line that opens into every figure, and where it ran', async () => {
    render(AnswerTurn, { props: { message: answer(), onError: vi.fn() } });
    expect(screen.getByTestId('message-assistant').querySelector('strong')).toHaveTextContent('capital');
    const line = screen.getByTestId('turn-stats');
    expect(line).toHaveTextContent('TTFT 25 ms · 193 tok/s · 40 tok · ctx 20');
    expect(line).toHaveAttribute('aria-expanded', 'false');
    expect(screen.queryByTestId('turn-stats-details')).toBeNull();
    await fireEvent.click(line);
    expect(line).toHaveAttribute('aria-expanded', 'true');
    expect(screen.getByTestId('turn-stats-details')).toHaveTextContent('draft: 62% accepted');
    expect(screen.getByTestId('answer-route')).toHaveTextContent('local');
  });

  it('offers Regenerate only when given one, and says a failed answer and an interrupted one', async () => {
    const onRegenerate = vi.fn();
    const { unmount } = render(AnswerTurn, { props: { message: answer(), onRegenerate, onError: vi.fn() } });
    await fireEvent.click(screen.getByTestId('regenerate'));
    expect(onRegenerate).toHaveBeenCalledOnce();
    unmount();
    render(AnswerTurn, { props: { message: answer({ stats: undefined, failed: 'The peer Mac is gone.' }), onError: vi.fn() } });
    expect(screen.queryByTestId('regenerate')).toBeNull();
    expect(screen.getByTestId('answer-failed')).toHaveTextContent('The peer Mac is gone.');
  });

  it('tells the chat when the clipboard refuses a copy', async () => {
    const onError = vi.fn();
    Object.assign(navigator, { clipboard: { writeText: () => Promise.reject(new Error('denied')) } });
    render(AnswerTurn, { props: { message: answer(), onError } });
    await fireEvent.click(screen.getByTestId('copy-answer'));
    await vi.waitFor(() => expect(onError).toHaveBeenCalledWith('Could not copy: this system refused access to the clipboard.'));
  });
});
