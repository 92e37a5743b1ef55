// Typed bindings for chat (src-tauri/src/commands/chat.rs): the answer
// streams over a Channel as `ChatEvent`s.
import type { ChatEvent, FinishReason, Force, ReusedFrom, RouteInfo, RouteReason, RouteTarget, ToolOutcome } from './generated';
import type { Commands } from './generated/commands';
import { command, Channel } from './invoke';

export type { ChatEvent, FinishReason, Force, ReusedFrom, RouteInfo, RouteReason, RouteTarget, ToolOutcome };

/** A turn's figures: the `stats` event's data; a rate that is undefined for the turn is null. */
export type TurnStats = Extract<ChatEvent, { event: 'stats' }>['data'];
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

export interface SendOptions {
  /** Max new tokens; the backend's default (512) when absent. */
  maxTokens?: number;
  /** Run this message here or in the cloud instead of where the router would send it. */
  force?: Force;
  /** Let this message's sensitive content go to the cloud (the user said so); `force: 'cloud'` alone does not. */
  allowSensitive?: boolean;
  /** The chat's Think switch (a thinking model); absent: the model's thinking setting. */
  think?: boolean;
  /** The model must call this tool first (an enabled tool of a running MCP server). */
  tool?: string;
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
  return command('chat_send', {
    sessionId,
    text,
    ...turnArgs(onEvent, options),
    ...(options.tool !== undefined && { tool: options.tool }),
  });
}

/**
 * Asks the session's last question again: the stored last turn is replaced
 * by a new one once the new one has started (its `started` event), and
 * stays as it was if the new one is refused (the promise rejects) or fails
 * before starting (an `error` event first). Events arrive as with `chatSend`.
 */
export function chatRegenerate(sessionId: string, onEvent: (event: ChatEvent) => void, options: SendOptions = {}): Promise<number> {
  return command('chat_regenerate', { sessionId, ...turnArgs(onEvent, options) });
}

/** The arguments every turn takes: the channel and the options that are set. */
function turnArgs(
  onEvent: (event: ChatEvent) => void,
  options: SendOptions,
): Omit<Commands['chat_regenerate']['args'], 'sessionId'> {
  const channel = new Channel<ChatEvent>();
  channel.onmessage = onEvent;
  return {
    onEvent: channel,
    ...(options.maxTokens !== undefined && { maxTokens: options.maxTokens }),
    ...(options.force !== undefined && { force: options.force }),
    ...(options.allowSensitive && { allowSensitive: true }),
    ...(options.think !== undefined && { think: options.think }),
  };
}

/** Stops a run, local or cloud; resolves to false if it was already over. */
export function chatCancel(runId: number): Promise<boolean> {
  return command('chat_cancel', { runId });
}
