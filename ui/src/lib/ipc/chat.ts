// Typed bindings for chat (src-tauri/src/commands/chat.rs): the answer
// streams over a Channel as `ChatEvent`s.
import { call, Channel } from './invoke';

export type FinishReason = 'stop' | 'length' | 'cancelled';

/** Mirrors `ChatEvent::Stats`; a rate that is undefined for the turn is null. */
export interface TurnStats {
  ttftMs: number | null;
  prefillTps: number | null;
  decodeTps: number | null;
  e2eTps: number | null;
  promptTokens: number;
  /** Of those, how many the prompt cache held and were not prefilled again. */
  reusedTokens: number;
  /** Where they came from; null for a stored answer (the store keeps the count only). */
  reusedFrom: 'memory' | 'disk' | 'none' | null;
  generatedTokens: number;
  contextTokens: number;
  batch: number;
  peakMemoryBytes: number;
  model: string;
  /** Set when memory slowed the answer ("slowed by swap: 3.1 → 0.8 tok/s while swap grew 1.2 GB"). */
  slowdown: string | null;
  /** What the KV cache was: "bf16", "8-bit (group 64)", … */
  kvCache: string;
  /** What prompt lookup did ("lookup: 62% accepted, 2.5 tok/pass"); null when the answer decoded plainly. */
  speculation: string | null;
}

/**
 * Where an answer comes from: the local model, the cloud, or the cloud's
 * earlier answer to the same request from this Mac's cache.
 */
export type RouteTarget = 'local' | 'cloud' | 'cached';

/** One reason for the route: a stable `code` (e.g. `SHORT_INPUT`, `CACHED`) and a sentence. */
export interface RouteReason {
  code: string;
  message: string;
}

/**
 * Notes a route carries about what stayed on this Mac: earlier messages left
 * out of a cloud request (`HISTORY_WITHHELD`), a summary left out
 * (`SUMMARY_WITHHELD`). The answer shows them, not only its tooltip.
 */
export const WITHHELD_CODES: readonly string[] = ['HISTORY_WITHHELD', 'SUMMARY_WITHHELD'];

/** The route's notes about what stayed behind, in order; none for a route without them. */
export function withheldNotes(route: RouteInfo | undefined): RouteReason[] {
  return route?.reasons.filter((r) => WITHHELD_CODES.includes(r.code)) ?? [];
}

/** Mirrors `turn::RouteInfo`, sent with `started`. */
export interface RouteInfo {
  target: RouteTarget;
  /** The local model's id, or the cloud model (also for a cached answer). */
  modelOrProvider: string;
  reasons: RouteReason[];
}

/** Mirrors `turn::ChatEvent` (serde: tag `event`, content `data`). */
export type ChatEvent =
  | { event: 'started'; data: { runId: number; promptTokens: number; reusedTokens: number; route: RouteInfo } }
  | { event: 'token'; data: { text: string } }
  | { event: 'stats'; data: TurnStats }
  | { event: 'finished'; data: { reason: FinishReason } }
  | { event: 'error'; data: { code: string; message: string } };

export interface SendOptions {
  /** Max new tokens; the backend's default (512) when absent. */
  maxTokens?: number;
  /** Run this message here or in the cloud instead of where the router would send it. */
  force?: 'local' | 'cloud';
  /** Let this message's sensitive content go to the cloud (the user said so); `force: 'cloud'` alone does not. */
  allowSensitive?: boolean;
}

/**
 * Sends `text` in `sessionId`; resolves to the run id at once, while the
 * answer arrives on `onEvent`.
 */
export function chatSend(
  sessionId: string,
  text: string,
  onEvent: (event: ChatEvent) => void,
  options: SendOptions = {},
): Promise<number> {
  return call<number>('chat_send', { sessionId, text, ...turnArgs(onEvent, options) });
}

/**
 * Asks the session's last question again: the stored last turn is replaced
 * by a new one once the new one has started (its `started` event), and
 * stays as it was if the new one is refused (the promise rejects) or fails
 * before starting (an `error` event first). Events arrive as with `chatSend`.
 */
export function chatRegenerate(sessionId: string, onEvent: (event: ChatEvent) => void, options: SendOptions = {}): Promise<number> {
  return call<number>('chat_regenerate', { sessionId, ...turnArgs(onEvent, options) });
}

/** The arguments every turn takes: the channel and the options that are set. */
function turnArgs(onEvent: (event: ChatEvent) => void, options: SendOptions): Record<string, unknown> {
  const channel = new Channel<ChatEvent>();
  channel.onmessage = onEvent;
  const args: Record<string, unknown> = { onEvent: channel };
  if (options.maxTokens !== undefined) args.maxTokens = options.maxTokens;
  if (options.force !== undefined) args.force = options.force;
  if (options.allowSensitive) args.allowSensitive = true;
  return args;
}

/** Stops a run, local or cloud; resolves to false if it was already over. */
export function chatCancel(runId: number): Promise<boolean> {
  return call<boolean>('chat_cancel', { runId });
}
