// A thinking model's thinking as the chat holds and labels it.
import { formatCount } from './stats';

/** One answer's thinking: its text (tags left out), its tokens, how long it took. */
export interface Thinking {
  text: string;
  tokens: number;
  /** From the first thinking token to the answer's first; null while still thinking. */
  ms: number | null;
}

function tokens(n: number): string {
  return `${formatCount(n)} ${n === 1 ? 'token' : 'tokens'}`;
}

/** Seconds as the line says them: `0.4 s` under ten, whole seconds above. */
function seconds(ms: number): string {
  const s = ms / 1000;
  return s < 10 ? `${s.toFixed(1)} s` : `${Math.round(s)} s`;
}

/** The block's one line: `Thinking · 40 tokens` while it runs, `Thought for 12 s · 340 tokens` after. */
export function thinkingLine(t: Thinking): string {
  return t.ms === null ? `Thinking · ${tokens(t.tokens)}` : `Thought for ${seconds(t.ms)} · ${tokens(t.tokens)}`;
}
