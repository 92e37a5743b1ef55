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

  it('shows the thinking above the answer, closed to its line once done, and counts it apart in the stats', async () => {
    const thinking = { text: '\nThe user asks for a capital.\n', tokens: 340, ms: 12_400 };
    const stats = shownStats({ generatedTokens: 512, thinkingTokens: 340 });
    render(AnswerTurn, { props: { message: answer({ thinking, stats }), onError: vi.fn() } });
    const block = screen.getByTestId('thinking');
    // Above the answer, in document order.
    expect(block.compareDocumentPosition(screen.getByTestId('message-assistant')) & Node.DOCUMENT_POSITION_FOLLOWING).toBeTruthy();
    expect(screen.getByTestId('thinking-line')).toHaveTextContent('Thought for 12 s · 340 tokens');
    const toggle = screen.getByTestId('thinking-toggle');
    expect(toggle).toHaveAttribute('aria-expanded', 'false');
    expect(screen.queryByTestId('thinking-text')).toBeNull();
    await fireEvent.click(toggle);
    expect(screen.getByTestId('thinking-text')).toHaveTextContent('The user asks for a capital.');
    // The thinking is not in the answer's text.
    expect(screen.getByTestId('message-assistant')).not.toHaveTextContent('capital.The user');
    expect(screen.getByTestId('turn-stats')).toHaveTextContent('TTFT 25 ms · 193 tok/s · 512 tok (340 thinking) · ctx 20');
  });

  it('keeps the thinking open while the model thinks, counting up', async () => {
    const message = answer({ text: '', stats: undefined, thinking: { text: 'Hm, ', tokens: 3, ms: null } });
    const { rerender } = render(AnswerTurn, { props: { message, onError: vi.fn() } });
    expect(screen.getByTestId('thinking-line')).toHaveTextContent('Thinking · 3 tokens');
    expect(screen.getByTestId('thinking-text')).toHaveTextContent('Hm,');
    await rerender({ message: { ...message, text: 'Paris.', thinking: { text: 'Hm, Paris.', tokens: 4, ms: 900 } }, onError: vi.fn() });
    // The answer started: the block closes to its line.
    expect(screen.getByTestId('thinking-line')).toHaveTextContent('Thought for 0.9 s · 4 tokens');
    expect(screen.queryByTestId('thinking-text')).toBeNull();
  });

  it('shows a tool call as a card that asks first, then its result and time', async () => {
    const onToolAnswer = vi.fn();
    const call = { callId: 'call_1_0', server: 'fake', tool: 'secret', arguments: '{}', asks: true };
    const { unmount } = render(AnswerTurn, { props: { message: answer({ calls: [call] }), onError: vi.fn(), onToolAnswer } });
    expect(screen.getByTestId('tool-approval')).toHaveTextContent('Allow secret from fake?');
    await fireEvent.click(screen.getByTestId('tool-always'));
    expect(onToolAnswer).toHaveBeenCalledWith('call_1_0', 'always');
    unmount();
    const done = { ...call, answered: true, result: { outcome: 'done' as const, text: 'the deploy key is …', ms: 1250 } };
    render(AnswerTurn, { props: { message: answer({ calls: [done] }), onError: vi.fn(), onToolAnswer } });
    expect(screen.queryByTestId('tool-approval')).toBeNull();
    expect(screen.getByTestId('tool-card')).toHaveAttribute('data-outcome', 'done');
    expect(screen.getByTestId('tool-result-line')).toHaveTextContent('Result · 1.3 s');
    expect(screen.getByTestId('tool-result')).toHaveTextContent('the deploy key is');
  });

  it('says how a call that did not return ended', () => {
    const cut = { callId: 'c', server: 'fake', tool: 'hang', arguments: '{}', asks: false, result: { outcome: 'error' as const, text: 'Hang from fake: no answer within 60s; the call was cut off', ms: 60000 } };
    render(AnswerTurn, { props: { message: answer({ calls: [cut] }), onError: vi.fn() } });
    expect(screen.getByTestId('tool-result-line')).toHaveTextContent('cut off · 60.0 s');
    expect(screen.getByTestId('tool-result')).toHaveTextContent('no answer within 60s');
  });
});
