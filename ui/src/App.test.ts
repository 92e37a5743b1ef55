import { mockIPC } from '@tauri-apps/api/mocks';
import type { InvokeArgs } from '@tauri-apps/api/core';
import { render, screen, waitFor } from '@testing-library/svelte';
import userEvent from '@testing-library/user-event';
import { describe, expect, it } from 'vitest';
import App from './App.svelte';
import type { AppInfo, PingReply } from './lib/ipc/app';

const INFO: AppInfo = { version: '0.1.0', mlx_version: '0.32.2', device: 'cpu', platform: 'linux' };

interface Call {
  cmd: string;
  args: InvokeArgs | undefined;
}

/** A fake backend: answers like the Rust commands do and records every call. */
function fakeBackend(ping: (text: string) => PingReply | Promise<PingReply> = echo): Call[] {
  const calls: Call[] = [];
  mockIPC((cmd, args) => {
    calls.push({ cmd, args });
    switch (cmd) {
      case 'app_info':
        return INFO;
      case 'ping':
        return ping((args as { text: string }).text);
      case 'hide_window':
        return null;
      default:
        throw { code: 'UNKNOWN_COMMAND', message: `No command ${cmd}.` };
    }
  });
  return calls;
}

function echo(text: string): PingReply {
  return { echo: text, chars: Array.from(text).length, version: '0.1.0', mlx_version: '0.32.2', device: 'cpu' };
}

function setup() {
  const user = userEvent.setup();
  render(App);
  const input = screen.getByTestId<HTMLTextAreaElement>('chat-input');
  return { user, input, send: screen.getByTestId('send-button') };
}

describe('App', () => {
  it('shows the layout skeleton', async () => {
    fakeBackend();
    setup();

    expect(screen.getByTestId('model-select')).toHaveDisplayValue('No model loaded');
    expect(screen.getByTestId('live-graph')).toHaveTextContent(/memory\s*—/);
    expect(screen.getByTestId('settings-button')).toHaveAccessibleName('Settings');
    expect(screen.getByRole('textbox', { name: 'Message' })).toBe(screen.getByTestId('chat-input'));
    expect(screen.getByTestId('send-button')).toBeDisabled();
    expect(screen.getAllByRole('tab').map((tab) => tab.textContent?.trim())).toEqual(['Chat', 'Sessions', 'Bench']);
    await waitFor(() => expect(screen.getByTestId('app-info')).toHaveTextContent('v0.1.0 · MLX cpu'));
  });

  it('sends with the button: user message, then the reply built from the backend', async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const calls = fakeBackend(async (text) => {
      await gate;
      return echo(text);
    });
    const { user, input, send } = setup();

    await user.type(input, 'hello world!');
    expect(send).toBeEnabled();
    await user.click(send);

    // The user's message is in and the input is clear before the reply arrives.
    expect(screen.getByTestId('message-user')).toHaveTextContent('hello world!');
    expect(input).toHaveValue('');
    expect(screen.queryByTestId('message-assistant')).toBeNull();

    release();
    const reply = await screen.findByTestId('message-assistant');
    expect(reply).toHaveTextContent(
      'Headroom 0.1.0 received your 12 characters ("hello world!") — MLX 0.32.2 on cpu. No model is loaded yet.',
    );
    expect(calls.filter((c) => c.cmd === 'ping')).toEqual([{ cmd: 'ping', args: { text: 'hello world!' } }]);
    expect(screen.queryByTestId('error')).toBeNull();
  });

  it('sends on Enter, and Shift+Enter adds a newline instead', async () => {
    const calls = fakeBackend();
    const { user, input } = setup();

    await user.type(input, 'first line');
    await user.keyboard('{Shift>}{Enter}{/Shift}');
    await user.type(input, 'second line');
    expect(input).toHaveValue('first line\nsecond line');
    expect(calls.some((c) => c.cmd === 'ping')).toBe(false);

    await user.keyboard('{Enter}');

    expect(await screen.findByTestId('message-assistant')).toHaveTextContent('received your 22 characters');
    expect(screen.getByTestId('message-user').textContent?.trim()).toBe('first line\nsecond line');
    expect(input).toHaveValue('');
    expect(calls.filter((c) => c.cmd === 'ping')).toHaveLength(1);
  });

  it('does not send a blank message', async () => {
    const calls = fakeBackend();
    const { user, input, send } = setup();

    await user.type(input, '   {Enter}');

    expect(send).toBeDisabled();
    expect(screen.queryByTestId('message-user')).toBeNull();
    expect(calls.some((c) => c.cmd === 'ping')).toBe(false);
  });

  it('on a CommandError shows its message and puts the text back', async () => {
    fakeBackend(() => {
      throw { code: 'ENGINE_BUSY', message: 'The engine is busy. Try again in a moment.', details: null };
    });
    const { user, input, send } = setup();

    await user.type(input, 'keep this text');
    await user.click(send);

    expect(await screen.findByTestId('error')).toHaveTextContent('The engine is busy. Try again in a moment.');
    expect(input).toHaveValue('keep this text');
    expect(screen.queryByTestId('message-user')).toBeNull();
    expect(screen.queryByTestId('message-assistant')).toBeNull();
  });

  it('clears the error once a send succeeds', async () => {
    let fail = true;
    fakeBackend((text) => {
      if (fail) throw { code: 'ENGINE_BUSY', message: 'The engine is busy.' };
      return echo(text);
    });
    const { user, input } = setup();

    await user.type(input, 'retry me{Enter}');
    await screen.findByTestId('error');
    fail = false;
    await user.keyboard('{Enter}');

    await screen.findByTestId('message-assistant');
    expect(screen.queryByTestId('error')).toBeNull();
    expect(screen.getByTestId('message-user')).toHaveTextContent('retry me');
  });

  it('Esc hides the window through hide_window', async () => {
    const calls = fakeBackend();
    const { user } = setup();

    await user.keyboard('{Escape}');

    await waitFor(() => expect(calls.map((c) => c.cmd)).toContain('hide_window'));
  });

  it('Esc closes settings first, without hiding the window', async () => {
    const calls = fakeBackend();
    const { user } = setup();

    await user.click(screen.getByTestId('settings-button'));
    expect(await screen.findByTestId('settings-view')).toHaveTextContent('0.32.2');
    await user.keyboard('{Escape}');

    expect(screen.queryByTestId('settings-view')).toBeNull();
    expect(calls.map((c) => c.cmd)).not.toContain('hide_window');
  });

  it('switches views and keeps the draft', async () => {
    fakeBackend();
    const { user, input } = setup();

    await user.type(input, 'half-written');
    await user.click(screen.getByRole('tab', { name: 'Sessions' }));
    expect(screen.getByText('No sessions yet')).toBeVisible();
    expect(input).not.toBeVisible();

    await user.click(screen.getByRole('tab', { name: 'Bench' }));
    expect(screen.getByText('No benchmarks yet')).toBeVisible();

    await user.click(screen.getByRole('tab', { name: 'Chat' }));
    expect(input).toBeVisible();
    expect(input).toHaveValue('half-written');
  });
});
