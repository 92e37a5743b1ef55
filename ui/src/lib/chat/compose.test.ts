import { describe, expect, it } from 'vitest';
import { composerKeyAction, restoreDraft, sendableText } from './compose';

describe('composerKeyAction', () => {
  it('sends on a plain Enter', () => {
    expect(composerKeyAction({ key: 'Enter' })).toBe('send');
  });

  it('leaves Shift+Enter and Alt+Enter to insert a newline', () => {
    expect(composerKeyAction({ key: 'Enter', shiftKey: true })).toBe('newline');
    expect(composerKeyAction({ key: 'Enter', altKey: true })).toBe('newline');
  });

  it('does not send while an IME is composing', () => {
    expect(composerKeyAction({ key: 'Enter', isComposing: true })).toBe('none');
    expect(composerKeyAction({ key: 'Enter', keyCode: 229 })).toBe('none');
  });

  it('ignores every other key', () => {
    expect(composerKeyAction({ key: 'a' })).toBe('none');
    expect(composerKeyAction({ key: 'Escape' })).toBe('none');
    expect(composerKeyAction({ key: 'Tab', shiftKey: true })).toBe('none');
  });

  it('accepts a real KeyboardEvent', () => {
    expect(composerKeyAction(new KeyboardEvent('keydown', { key: 'Enter' }))).toBe('send');
    expect(composerKeyAction(new KeyboardEvent('keydown', { key: 'Enter', shiftKey: true }))).toBe('newline');
  });
});

describe('sendableText', () => {
  it('trims surrounding whitespace but keeps inner newlines', () => {
    expect(sendableText('  two\nlines \n')).toBe('two\nlines');
  });

  it('has nothing to send for blank drafts', () => {
    expect(sendableText('')).toBeNull();
    expect(sendableText(' \n\t ')).toBeNull();
  });
});

describe('restoreDraft', () => {
  it('puts the failed text back into an empty input', () => {
    expect(restoreDraft('hello world!', '')).toBe('hello world!');
    expect(restoreDraft('hello world!', '  ')).toBe('hello world!');
  });

  it('keeps what was typed while the send was in flight', () => {
    expect(restoreDraft('first', 'second')).toBe('first\nsecond');
  });
});
