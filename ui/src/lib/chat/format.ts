// Sentences built from backend replies; versions and devices always come from
// the reply, never from constants here.
import type { AppInfo, PingReply } from '../ipc/app';

/** Longer echoes are shortened in the sentence; the user's bubble has it all. */
export const ECHO_PREVIEW_CHARS = 80;

/** One line, at most `ECHO_PREVIEW_CHARS` characters, never splitting an emoji's surrogates. */
function preview(text: string): string {
  const chars = Array.from(text.replace(/\s+/g, ' '));
  if (chars.length <= ECHO_PREVIEW_CHARS) return chars.join('');
  return `${chars.slice(0, ECHO_PREVIEW_CHARS - 1).join('')}…`;
}

export function formatPingReply(reply: PingReply): string {
  const noun = reply.chars === 1 ? 'character' : 'characters';
  return (
    `Headroom ${reply.version} received your ${reply.chars} ${noun} ` +
    `("${preview(reply.echo)}") — MLX ${reply.mlx_version} on ${reply.device}. ` +
    'No model is loaded yet.'
  );
}

/** The quiet footer line, e.g. `v0.1.0 · MLX cpu`. */
export function formatAppInfo(info: AppInfo): string {
  return `v${info.version} · MLX ${info.device}`;
}
