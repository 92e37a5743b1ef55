// Sessions as the list and the chat show them.
import type { FinishReason, RouteInfo, ToolOutcome } from '../ipc/chat';
import type { ShownStats } from '../chat/stats';
import type { Thinking } from '../chat/thinking';
import type { StoredMessage, StoredTurnStats } from '../ipc/sessions';

/** A message as the chat view holds it. */
export interface ChatMessage {
  id: number;
  role: 'user' | 'assistant';
  text: string;
  stats?: ShownStats;
  reason?: FinishReason;
  /** Saved as it streamed, then cut short (the app quit, or Stop). */
  interrupted?: boolean;
  /** The turn failed; the text is what arrived before. */
  failed?: string;
  /** Where an answer came from and why (live answers carry the reasons; stored ones only the place). */
  route?: RouteInfo;
  /** A thinking model's thinking, shown above the answer (live answers only: it is not stored). */
  thinking?: Thinking;
  /** The tool calls the answer made, in order (live answers only: calls are not stored). */
  calls?: ToolCallCard[];
}

/** One tool call as its card shows it. */
export interface ToolCallCard {
  callId: string;
  server: string;
  tool: string;
  /** JSON text, as the model wrote it. */
  arguments: string;
  /** It waits for the user's answer until a result (or an answer) arrives. */
  asks: boolean;
  /** The user answered; the card stops asking. */
  answered?: boolean;
  result?: { outcome: ToolOutcome; text: string; ms: number };
}

/** The stats line's figures from a stored turn. */
export function toTurnStats(s: StoredTurnStats): ShownStats {
  return {
    ttftMs: s.ttftMs,
    prefillTps: s.prefillTps,
    decodeTps: s.decodeTps,
    e2eTps: s.e2eTps,
    promptTokens: s.promptTokens,
    reusedTokens: s.reusedTokens,
    reusedFrom: null,
    generatedTokens: s.generatedTokens,
    // Not stored: a reloaded answer does not say how much of it was thinking.
    thinkingTokens: null,
    contextTokens: s.contextTokens,
    batch: s.batch,
    peakMemoryBytes: s.peakMemoryBytes,
    model: s.modelId,
    slowdown: s.slowdown,
    kvCache: s.kvDtype,
    speculation: s.speculation ?? null,
    twoMacs: s.twoMacs ?? null,
  };
}

/** Stored messages → the chat's, in order; system prompts are not shown. */
export function toChatMessages(stored: StoredMessage[]): ChatMessage[] {
  return stored
    .filter((m) => m.role !== 'system')
    .map((m) => {
      const message: ChatMessage = { id: m.id, role: m.role as 'user' | 'assistant', text: m.content };
      if (m.stats) {
        message.stats = toTurnStats(m.stats);
        message.reason = m.stats.finishReason;
      }
      if (m.status === 'interrupted') {
        message.interrupted = true;
        message.reason ??= 'cancelled';
      }
      if (m.status === 'error') message.failed = m.error ?? 'This answer failed.';
      if (m.role === 'assistant') {
        // A cached answer is stored as a cloud turn whose stats name `cache:<model>`.
        const cached = m.stats?.modelId.startsWith('cache:') ?? false;
        message.route = {
          target: cached ? 'cached' : m.route,
          modelOrProvider: cached ? (m.stats?.modelId.slice('cache:'.length) ?? '') : (m.model ?? m.stats?.modelId ?? ''),
          reasons: [],
        };
      }
      return message;
    });
}

const DAY = 24 * 60 * 60 * 1000;

/** When, as a list says it: `14:02` today, `Yesterday`, `Mon`, `3 Mar`, `3 Mar 2025`. */
export function formatWhen(ms: number, now: number = Date.now()): string {
  const when = new Date(ms);
  const today = new Date(now);
  today.setHours(0, 0, 0, 0);
  const start = today.getTime();
  if (ms >= start) return when.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', hour12: false });
  if (ms >= start - DAY) return 'Yesterday';
  if (ms >= start - 6 * DAY) return when.toLocaleDateString('en-GB', { weekday: 'short' });
  const sameYear = when.getFullYear() === today.getFullYear();
  return when.toLocaleDateString('en-GB', sameYear ? { day: 'numeric', month: 'short' } : { day: 'numeric', month: 'short', year: 'numeric' });
}

/** `3 messages`. */
export function formatCount(n: number): string {
  return `${n} message${n === 1 ? '' : 's'}`;
}
