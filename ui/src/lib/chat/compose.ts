// Pure rules of the message composer, kept out of the component so they are
// testable without a DOM.

/** The parts of a `KeyboardEvent` the composer looks at. */
export interface ComposerKey {
  key: string;
  shiftKey?: boolean;
  altKey?: boolean;
  ctrlKey?: boolean;
  metaKey?: boolean;
  isComposing?: boolean;
  keyCode?: number;
}

export type ComposerAction = 'send' | 'newline' | 'none';

/**
 * Enter sends; Shift+Enter (and Alt+Enter) leave the browser's newline alone.
 * An Enter that confirms an IME candidate (Japanese, Chinese, …) must not
 * send: WebKit reports it with `isComposing` or, on some versions, only with
 * the legacy keyCode 229.
 */
export function composerKeyAction(event: ComposerKey): ComposerAction {
  if (event.key !== 'Enter') return 'none';
  if (event.isComposing || event.keyCode === 229) return 'none';
  if (event.shiftKey || event.altKey) return 'newline';
  return 'send';
}

/** The text to send for a draft, or `null` if there is nothing to send. */
export function sendableText(draft: string): string | null {
  const text = draft.trim();
  return text.length > 0 ? text : null;
}

/**
 * The draft to show after a send failed: the failed text comes back, and
 * anything typed while the request was in flight is kept after it.
 */
export function restoreDraft(failed: string, current: string): string {
  if (current.trim().length === 0) return failed;
  return `${failed}\n${current}`;
}
