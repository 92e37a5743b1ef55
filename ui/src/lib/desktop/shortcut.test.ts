import { describe, expect, it } from 'vitest';
import { formatShortcut, shortcutFromKey, type KeyPress } from './shortcut';

const press = (code: string, mods: Partial<KeyPress> = {}): KeyPress => ({
  code,
  altKey: false,
  ctrlKey: false,
  shiftKey: false,
  metaKey: false,
  ...mods,
});

describe('shortcutFromKey', () => {
  it('writes the chord in the accelerator syntax the app registers', () => {
    expect(shortcutFromKey(press('Space', { altKey: true }))).toBe('Alt+Space');
    expect(shortcutFromKey(press('KeyH', { ctrlKey: true, shiftKey: true }))).toBe('Ctrl+Shift+H');
    expect(shortcutFromKey(press('Digit1', { metaKey: true, altKey: true }))).toBe('Alt+Cmd+1');
    expect(shortcutFromKey(press('F5', { ctrlKey: true }))).toBe('Ctrl+F5');
    expect(shortcutFromKey(press('ArrowUp', { altKey: true }))).toBe('Alt+ArrowUp');
  });

  it('waits while only modifiers are down, and refuses a bare key', () => {
    expect(shortcutFromKey(press('AltLeft', { altKey: true }))).toBeNull();
    expect(shortcutFromKey(press('ShiftRight', { shiftKey: true, ctrlKey: true }))).toBeNull();
    expect(shortcutFromKey(press('KeyA'))).toBeNull();
    expect(shortcutFromKey(press('', { altKey: true }))).toBeNull();
  });
});

describe('formatShortcut', () => {
  it('shows Mac symbols on a Mac and the accelerator elsewhere', () => {
    expect(formatShortcut('Alt+Space', 'macos')).toBe('⌥Space');
    expect(formatShortcut('Ctrl+Shift+H', 'macos')).toBe('⌃⇧H');
    expect(formatShortcut('CmdOrCtrl+K', 'macos')).toBe('⌘K');
    expect(formatShortcut('Alt+Space', 'linux')).toBe('Alt+Space');
    expect(formatShortcut('Alt + Space', 'linux')).toBe('Alt+Space');
  });
});
