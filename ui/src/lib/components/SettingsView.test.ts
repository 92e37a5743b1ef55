import { mockIPC } from '@tauri-apps/api/mocks';
import type { InvokeArgs } from '@tauri-apps/api/core';
import { fireEvent, render, screen, waitFor, within } from '@testing-library/svelte';
import userEvent from '@testing-library/user-event';
import { describe, expect, it, vi } from 'vitest';
import type { AppInfo } from '../ipc/app';
import type { DesktopStatus } from '../ipc/desktop';
import type { Lender } from '../ipc/peers';
import { modelEntry } from '../ipc/contract.fixture';
import type { ModelEntry } from '../ipc/models';
import type { Settings } from '../ipc/settings';
import { DEFAULT_SETTINGS } from '../ipc/settings.fixture';
import SettingsView from './SettingsView.svelte';

const INFO: AppInfo = { version: '0.1.0', mlx_version: '0.32.2', device: 'gpu', platform: 'macos' };
const DEFAULTS: Settings = DEFAULT_SETTINGS;
const LOGS = '/Users/me/Library/Logs/app.headroom.menubar';

/** The `n`th lender listed. */
function lenderRow(n: number): HTMLElement {
  const row = screen.getAllByTestId('peer-row')[n];
  if (!row) throw new Error(`no lender row ${n}`);
  return row;
}

const STUDIO: Lender = { machine: 'Studio.local', address: '10.0.0.2:7070', budgetBytes: 26.1 * 2 ** 30, paired: false };
const MINI: Lender = { machine: 'Mini.local', address: '10.0.0.3:7070', budgetBytes: null, paired: true };

/**
 * A backend whose shortcut registration refuses `taken`, like a shortcut
 * another app holds; Bonjour finds `lenders`, and each pairs with `code`.
 */
function backend(taken = 'Ctrl+Alt+K', lenders: Lender[] = [], code = '482913') {
  const calls: Array<{ cmd: string; args: InvokeArgs | undefined }> = [];
  let settings = { ...DEFAULTS };
  let key = `hr-${'1'.repeat(64)}`;
  let desktop: DesktopStatus = {
    logDir: LOGS,
    logFile: `${LOGS}/headroom.2026-12-01.log`,
    shortcut: { shortcut: 'Alt+Space', registered: true, error: null },
    launchAtLogin: false,
  };
  mockIPC((cmd, args) => {
    calls.push({ cmd, args });
    switch (cmd) {
      case 'settings_get':
        return settings;
      case 'settings_set': {
        const next = (args as { settings: Settings }).settings;
        if (next.globalShortcut === taken) {
          throw { code: 'SHORTCUT_TAKEN', message: `${taken} is already taken by another app or by the system` };
        }
        settings = next;
        desktop = {
          ...desktop,
          launchAtLogin: next.launchAtLogin,
          shortcut: { shortcut: next.globalShortcut, registered: next.globalShortcut !== null, error: null },
        };
        return settings;
      }
      case 'desktop_status':
        return desktop;
      case 'server_status':
        return null;
      case 'server_key':
        return key;
      case 'server_key_regenerate':
        key = `hr-${'2'.repeat(64)}`;
        return key;
      case 'lend_status':
        return null;
      case 'lend_start':
        return { address: '0.0.0.0:7070', code: '048291', waiting: [] };
      case 'lend_hosts':
      case 'peers_paired':
        return [];
      case 'lend_stop':
        return true;
      case 'cloud_cache_stats':
        return { hits: 0, misses: 0, entries: 0, bytes: 0 };
      case 'peers_find':
        return lenders;
      case 'peer_pair': {
        const { address, code: given } = args as { address: string; code: string };
        const lender = lenders.find((l) => l.address === address);
        if (!lender) throw { code: 'PEER_UNREACHABLE', message: `No answer from ${address}: is it still lending itself?` };
        if (given !== code) throw { code: 'PEER_REFUSED', message: `The Mac at ${address} refused: wrong pairing code.` };
        settings = { ...settings, peer: address };
        return { machine: lender.machine, allowed: true, settings };
      }
      default:
        throw `command ${cmd} not found`;
    }
  });
  return calls;
}

const lastSet = (calls: ReturnType<typeof backend>) =>
  (calls.filter((c) => c.cmd === 'settings_set').at(-1)?.args as { settings: Settings } | undefined)?.settings;

describe('SettingsView: saving', () => {
  it('two fields changed at once are both kept: each save starts from the one before', async () => {
    const calls = backend();
    render(SettingsView, { info: INFO, onDone: () => {} });
    const url = await screen.findByTestId<HTMLInputElement>('cloud-url');
    const model = screen.getByTestId<HTMLInputElement>('cloud-model');
    // As fast as a script (or a quick Tab) changes them: no await in between.
    url.value = 'http://127.0.0.1:9/v1';
    void fireEvent.change(url);
    model.value = 'stub-model';
    void fireEvent.change(model);
    await waitFor(() => expect(calls.filter((c) => c.cmd === 'settings_set')).toHaveLength(2));
    expect(lastSet(calls)).toMatchObject({ cloudBaseUrl: 'http://127.0.0.1:9/v1', cloudModel: 'stub-model' });
  });
});

describe('SettingsView: thinking', () => {
  it("offers the loaded thinking model's setting: its template's default, on, off, or a budget, kept by its id", async () => {
    const calls = backend();
    const user = userEvent.setup();
    const thinker = modelEntry({ id: 'qwen3-thinker', name: 'Qwen3 thinker', loaded: true, thinks: true });
    render(SettingsView, { info: INFO, models: [thinker], onDone: () => {} });
    const mode = await screen.findByTestId<HTMLSelectElement>('thinking-mode');
    expect(mode.value).toBe('default');
    await user.selectOptions(mode, 'budget');
    await waitFor(() => expect(lastSet(calls)?.thinking).toEqual({ 'qwen3-thinker': { budget: 1024 } }));
    const budget = await screen.findByTestId<HTMLInputElement>('thinking-budget');
    budget.value = '300';
    await fireEvent.change(budget);
    await waitFor(() => expect(lastSet(calls)?.thinking).toEqual({ 'qwen3-thinker': { budget: 300 } }));
    await user.selectOptions(mode, 'off');
    await waitFor(() => expect(lastSet(calls)?.thinking).toEqual({ 'qwen3-thinker': 'off' }));
    await user.selectOptions(mode, 'default');
    await waitFor(() => expect(lastSet(calls)?.thinking).toEqual({}));
  });

  it('offers nothing for a model whose template does not think', async () => {
    backend();
    render(SettingsView, { info: INFO, models: [modelEntry({ id: 'smol', loaded: true })], onDone: () => {} });
    await screen.findByTestId('max-tokens');
    expect(screen.queryByTestId('thinking-mode')).toBeNull();
  });
});

describe('SettingsView: background network', () => {
  it('"Check the hub for updates" is on by default and turns off', async () => {
    const calls = backend();
    const user = userEvent.setup();
    render(SettingsView, { info: INFO, onDone: () => {} });
    const box = await screen.findByTestId<HTMLInputElement>('check-hub-updates');
    expect(box.checked).toBe(true);
    await user.click(box);
    await waitFor(() => expect(lastSet(calls)?.checkHubUpdates).toBe(false));
    expect(box.checked).toBe(false);
  });
});

describe('SettingsView: the menu-bar conventions', () => {
  it('shows launch at login off by default and turns it on', async () => {
    const calls = backend();
    const user = userEvent.setup();
    render(SettingsView, { info: INFO, onDone: () => {} });
    const box = await screen.findByTestId<HTMLInputElement>('launch-at-login');
    expect(box.checked).toBe(false);
    await user.click(box);
    await waitFor(() => expect(lastSet(calls)?.launchAtLogin).toBe(true));
    expect(box.checked).toBe(true);
  });

  it('records a new shortcut from a key chord and shows it the Mac way', async () => {
    const calls = backend();
    const user = userEvent.setup();
    render(SettingsView, { info: INFO, onDone: () => {} });
    const button = await screen.findByTestId('shortcut-record');
    expect(button).toHaveTextContent('⌥Space');
    await user.click(button);
    expect(button).toHaveTextContent('Type a shortcut…');
    // Modifiers alone change nothing; the chord does.
    await fireEvent.keyDown(button, { key: 'Control', code: 'ControlLeft', ctrlKey: true });
    expect(lastSet(calls)).toBeUndefined();
    await fireEvent.keyDown(button, { key: 'h', code: 'KeyH', ctrlKey: true, shiftKey: true });
    await waitFor(() => expect(lastSet(calls)?.globalShortcut).toBe('Ctrl+Shift+H'));
    expect(button).toHaveTextContent('⌃⇧H');
  });

  it('reports a shortcut another app holds beside the field and keeps the old one', async () => {
    const calls = backend('Ctrl+Alt+K');
    const user = userEvent.setup();
    render(SettingsView, { info: INFO, onDone: () => {} });
    const button = await screen.findByTestId('shortcut-record');
    await user.click(button);
    await fireEvent.keyDown(button, { key: 'k', code: 'KeyK', ctrlKey: true, altKey: true });
    expect(await screen.findByTestId('error-globalShortcut')).toHaveTextContent('Ctrl+Alt+K is already taken by another app');
    expect(button).toHaveTextContent('⌥Space');
    expect(calls.filter((c) => c.cmd === 'settings_set')).toHaveLength(1);
  });

  it('Esc stops recording without changing anything, and × turns the shortcut off', async () => {
    const calls = backend();
    const user = userEvent.setup();
    render(SettingsView, { info: INFO, onDone: () => {} });
    const button = await screen.findByTestId('shortcut-record');
    await user.click(button);
    const esc = await fireEvent.keyDown(button, { key: 'Escape', code: 'Escape' });
    expect(esc).toBe(false); // cancelled: Settings itself does not close
    expect(button).toHaveTextContent('⌥Space');
    await user.click(screen.getByTestId('shortcut-clear'));
    await waitFor(() => expect(lastSet(calls)?.globalShortcut).toBeNull());
    expect(button).toHaveTextContent('None');
  });

  it('says why a stored shortcut does not work, and where the logs are', async () => {
    backend();
    mockIPC((cmd) => {
      if (cmd === 'settings_get') return DEFAULTS;
      if (cmd === 'desktop_status')
        return {
          logDir: LOGS,
          logFile: `${LOGS}/headroom.2026-12-01.log`,
          shortcut: { shortcut: 'Alt+Space', registered: false, error: 'Alt+Space is already taken by another app or by the system' },
          launchAtLogin: false,
        } satisfies DesktopStatus;
      return null;
    });
    render(SettingsView, { info: INFO, onDone: () => {} });
    expect(await screen.findByTestId('shortcut-error')).toHaveTextContent('Alt+Space is already taken');
    const logs = await screen.findByTestId('log-dir');
    expect(logs).toHaveTextContent(LOGS);
    expect(logs).toHaveAttribute('title', `${LOGS}/headroom.2026-12-01.log`);
  });
});

describe('SettingsView: the local server', () => {
  it('shows the server key, replaces it on request, and saves the key and model-switch switches', async () => {
    const calls = backend();
    render(SettingsView, { info: INFO, onDone: () => {} });
    const key = await screen.findByTestId('server-key');
    await waitFor(() => expect(key).toHaveTextContent(`hr-${'1'.repeat(64)}`));
    await fireEvent.click(screen.getByTestId('server-key-regenerate'));
    await waitFor(() => expect(key).toHaveTextContent(`hr-${'2'.repeat(64)}`));
    expect(screen.getByTestId('server-key-note')).toHaveTextContent('New key');
    const require = screen.getByTestId<HTMLInputElement>('server-require-key');
    expect(require.checked).toBe(true);
    await fireEvent.click(require);
    await waitFor(() => expect(lastSet(calls)?.serverRequireKey).toBe(false));
    const allow = screen.getByTestId<HTMLInputElement>('server-allow-switch');
    expect(allow.checked).toBe(false);
    await fireEvent.click(allow);
    await waitFor(() => expect(lastSet(calls)?.serverAllowModelSwitch).toBe(true));
  });
});

describe('SettingsView: two Macs', () => {
  it('lends this Mac: the toggle starts lend, shows the port and the pairing code, and stops it', async () => {
    const calls = backend();
    render(SettingsView, { info: INFO, onDone: () => {} });
    const toggle = await screen.findByTestId('lend-toggle');
    expect(screen.getByTestId('lend-status')).toHaveTextContent('Not lent');
    await fireEvent.click(toggle);
    await waitFor(() => expect(screen.getByTestId('lend-status')).toHaveTextContent('Lent on port 7070 · pairing code 048291'));
    expect(screen.getByText(/headroom pair THIS-MAC:7070 048291/)).toBeInTheDocument();
    await fireEvent.click(toggle);
    await waitFor(() => expect(screen.getByTestId('lend-status')).toHaveTextContent('Not lent'));
    expect(calls.map((c) => c.cmd).filter((c) => c.startsWith('lend_'))).toEqual(['lend_status', 'lend_hosts', 'lend_start', 'lend_stop']);
  });

  it('asks "Allow <host> to use this Mac?" for a host that paired, and Allow answers it', async () => {
    backend();
    const key = 'ab'.repeat(32);
    let waiting = [{ machine: 'Air.local', key, allowed: false, pairedAt: 0 }];
    const answers: unknown[] = [];
    mockIPC((cmd, args) => {
      if (cmd === 'settings_get') return DEFAULTS;
      if (cmd === 'lend_status') return { address: '192.168.1.5:7070', code: '048291', waiting };
      if (cmd === 'lend_hosts') return waiting.length ? waiting : [{ machine: 'Air.local', key, allowed: true, pairedAt: 0 }];
      if (cmd === 'peers_paired') return [];
      if (cmd === 'lend_answer') {
        answers.push(args);
        waiting = [];
        return true;
      }
      return null;
    });
    render(SettingsView, { info: INFO, onDone: () => {} });
    const asked = await screen.findByTestId('lend-waiting');
    expect(asked).toHaveTextContent('Allow Air.local to use this Mac?');
    await fireEvent.click(screen.getByTestId('lend-allow'));
    await waitFor(() => expect(screen.queryByTestId('lend-waiting')).toBeNull());
    expect(answers).toEqual([{ key, allow: true }]);
    expect(await screen.findByTestId('lent-to')).toHaveTextContent('Air.local may use this Mac');
    expect(screen.getByTestId('two-macs-crossing')).toHaveTextContent('sends its content to the paired Mac over the network, encrypted');
  });

  it('the peer Mac is saved as typed (the backend checks it is HOST:PORT)', async () => {
    const calls = backend();
    render(SettingsView, { info: INFO, onDone: () => {} });
    const peer = await screen.findByTestId<HTMLInputElement>('peer');
    peer.value = '10.0.0.2:7070';
    await fireEvent.change(peer);
    await waitFor(() => expect(lastSet(calls)).toMatchObject({ peer: '10.0.0.2:7070' }));
  });

  it('the draft model is chosen from the model list and saved by id; None clears it', async () => {
    const calls = backend();
    const entry = (id: string, name: string, problem: ModelEntry['problem'] = null) =>
      modelEntry({ id, name, path: `/data/models/${id}`, problem });
    const models = [
      entry('qwen-7b', 'Qwen2.5 7B'),
      entry('qwen-0.5b', 'Qwen2.5 0.5B'),
      entry('broken', 'Broken', { code: 'MODEL_CONFIG', message: 'config.json is not JSON' }),
    ];
    const onSettings = vi.fn();
    render(SettingsView, { info: INFO, models, onDone: () => {}, onSettings });
    const select = await screen.findByTestId<HTMLSelectElement>('draft-model');
    // A model that cannot be read is not offered.
    expect([...select.options].map((o) => o.textContent)).toEqual(['None', 'Qwen2.5 7B', 'Qwen2.5 0.5B']);
    await fireEvent.change(select, { target: { value: 'qwen-0.5b' } });
    await waitFor(() => expect(lastSet(calls)).toMatchObject({ draftModel: 'qwen-0.5b' }));
    expect(onSettings).toHaveBeenLastCalledWith(expect.objectContaining({ draftModel: 'qwen-0.5b' }));
    await fireEvent.change(select, { target: { value: '' } });
    await waitFor(() => expect(lastSet(calls)).toMatchObject({ draftModel: null }));
  });

  it('finds the lending Macs, pairs with one by its code, and it becomes the peer Mac', async () => {
    const calls = backend(undefined, [STUDIO, MINI]);
    const onSettings = vi.fn();
    const user = userEvent.setup();
    render(SettingsView, { info: INFO, onDone: () => {}, onSettings });
    await user.click(await screen.findByTestId('peers-find'));
    const rows = await screen.findAllByTestId('peer-row');
    expect(rows.map((r) => r.textContent?.replace(/\s+/g, ' ').trim())).toEqual([
      'Studio.local 10.0.0.2:7070 · 26.10 GB Pair',
      'Mini.local paired 10.0.0.3:7070 Use',
    ]);
    // Only the paired one can be used as it is; the other asks for its code first.
    expect(within(lenderRow(1)).queryByTestId('peer-code')).toBeNull();
    const pair = within(lenderRow(0)).getByTestId('peer-pair');
    expect(pair).toBeDisabled();
    await user.type(within(lenderRow(0)).getByTestId('peer-code'), '482913');
    await user.click(pair);
    expect(await screen.findByTestId('peer-paired')).toHaveTextContent('Paired with Studio.local');
    expect(calls.find((c) => c.cmd === 'peer_pair')?.args).toEqual({ address: '10.0.0.2:7070', code: '482913' });
    expect(screen.getByTestId<HTMLInputElement>('peer').value).toBe('10.0.0.2:7070');
    expect(onSettings).toHaveBeenLastCalledWith(expect.objectContaining({ peer: '10.0.0.2:7070' }));
    // Now paired, and in use.
    expect(lenderRow(0)).toHaveTextContent('paired');
    expect(within(lenderRow(0)).getByTestId('peer-use')).toHaveTextContent('In use');
    // The other paired Mac is one click away.
    await user.click(within(lenderRow(1)).getByTestId('peer-use'));
    await waitFor(() => expect(lastSet(calls)).toMatchObject({ peer: '10.0.0.3:7070' }));
    expect(screen.getByTestId<HTMLInputElement>('peer').value).toBe('10.0.0.3:7070');
  });

  it('says "Looking…" while it looks, and that no Mac lends itself when none answers', async () => {
    backend();
    let answer: (lenders: Lender[]) => void = () => {};
    mockIPC((cmd) => {
      if (cmd === 'settings_get') return DEFAULTS;
      if (cmd === 'peers_find') return new Promise<Lender[]>((resolve) => (answer = resolve));
      return null;
    });
    render(SettingsView, { info: INFO, onDone: () => {} });
    const find = await screen.findByTestId('peers-find');
    await fireEvent.click(find);
    await waitFor(() => expect(find).toHaveTextContent('Looking…'));
    expect(find).toBeDisabled();
    answer([]);
    expect(await screen.findByTestId('peers-none')).toHaveTextContent('No Mac lends itself on this network');
    expect(find).toHaveTextContent('Find Macs');
  });

  it('a wrong code is refused in the lender\'s words; the code stays to correct and the peer is unchanged', async () => {
    const calls = backend(undefined, [STUDIO]);
    const user = userEvent.setup();
    render(SettingsView, { info: INFO, onDone: () => {} });
    await user.click(await screen.findByTestId('peers-find'));
    const code = await screen.findByTestId<HTMLInputElement>('peer-code');
    await user.type(code, '111111{Enter}');
    expect(await screen.findByTestId('peers-error')).toHaveTextContent('The Mac at 10.0.0.2:7070 refused: wrong pairing code.');
    expect(code.value).toBe('111111');
    expect(screen.queryByTestId('peer-paired')).toBeNull();
    expect(screen.getByTestId<HTMLInputElement>('peer').value).toBe('');
    expect(lastSet(calls)).toBeUndefined();
  });
});
