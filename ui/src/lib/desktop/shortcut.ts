// The global shortcut as the Settings view records and shows it. Stored as
// the accelerator text the app registers (tauri-plugin-global-shortcut's
// syntax, e.g. "Alt+Space", "Ctrl+Shift+H"); the Rust side parses it again
// and says what is wrong with it, so this only builds and formats it.

/** What a keydown tells us (a KeyboardEvent has all of it). */
export interface KeyPress {
  code: string;
  altKey: boolean;
  ctrlKey: boolean;
  shiftKey: boolean;
  metaKey: boolean;
}

const MODIFIER_CODES = /^(?:Alt|Control|Shift|Meta|OS)(?:Left|Right)?$/;

/**
 * The accelerator for a key press, or null while only modifiers are down
 * (the user is still building the chord) or when no modifier is held (a
 * bare key taken system-wide would stop working everywhere else).
 */
export function shortcutFromKey(press: KeyPress): string | null {
  if (!press.code || MODIFIER_CODES.test(press.code)) return null;
  const mods = [
    press.ctrlKey && 'Ctrl',
    press.altKey && 'Alt',
    press.shiftKey && 'Shift',
    press.metaKey && 'Cmd',
  ].filter((m): m is string => typeof m === 'string');
  if (mods.length === 0) return null;
  const key = press.code.replace(/^Key(?=[A-Z]$)/, '').replace(/^Digit(?=\d$)/, '');
  return [...mods, key].join('+');
}

const MAC_SYMBOLS: Record<string, string> = {
  CTRL: '⌃',
  CONTROL: '⌃',
  ALT: '⌥',
  OPTION: '⌥',
  SHIFT: '⇧',
  CMD: '⌘',
  COMMAND: '⌘',
  SUPER: '⌘',
  CMDORCTRL: '⌘',
  COMMANDORCONTROL: '⌘',
  COMMANDORCTRL: '⌘',
  CMDORCONTROL: '⌘',
};

/** "Alt+Space" as a Mac shows it (⌥Space); elsewhere as it is written. */
export function formatShortcut(accelerator: string, platform: string): string {
  if (platform !== 'macos') return accelerator.split('+').map((t) => t.trim()).join('+');
  const tokens = accelerator.split('+').map((t) => t.trim());
  const key = tokens.pop() ?? '';
  return tokens.map((t) => MAC_SYMBOLS[t.toUpperCase()] ?? `${t}+`).join('') + key;
}
