import { mockIPC } from '@tauri-apps/api/mocks';
import type { Channel, InvokeArgs } from '@tauri-apps/api/core';
import { render, screen, waitFor, within } from '@testing-library/svelte';
import userEvent from '@testing-library/user-event';
import { describe, expect, it, vi } from 'vitest';
import App from './App.svelte';
import type { AppInfo } from './lib/ipc/app';
import type { ChatEvent, TurnStats } from './lib/ipc/chat';
import type { FitReport, ModelEntry } from './lib/ipc/models';
import type { StoredMessage } from './lib/ipc/sessions';
import type { Settings } from './lib/ipc/settings';
import { DEFAULT_SETTINGS } from './lib/ipc/settings.fixture';
import { budget, estimate, fitReport, modelEntry, overhead } from './lib/ipc/contract.fixture';
import type { AwayNotice } from './lib/ipc/memory';

interface FakeSession {
  id: string;
  title: string;
  messages: StoredMessage[];
}

const INFO: AppInfo = { version: '0.1.0', mlx_version: '0.32.2', device: 'cpu', platform: 'linux' };

const DEMO: ModelEntry = modelEntry({
  id: 'headroom-demo-tiny',
  path: '/data/models/headroom-demo-tiny',
  arch: 'qwen2',
  bits: 4,
  size_bytes: 2_000_000,
  loaded: true,
});
const OTHER: ModelEntry = { ...DEMO, id: 'org/Other-4bit', name: 'Other-4bit', size_bytes: 4_300_000_000, loaded: false };

const GB = 1024 ** 3;
const SWAP_REPORT: FitReport = fitReport({
  estimate: estimate({ weight_bytes: 8 * GB, kv_cache_bytes: 3 * GB, overhead: overhead({ total_bytes: 1 * GB }), predicted_peak_bytes: 12 * GB }),
  budget: budget({ available_bytes: 13 * GB, freed_by_unload_bytes: 1 * GB, os_headroom_bytes: 4 * GB, budget_bytes: 10 * GB }),
  verdict: { kind: 'would_swap', by_bytes: 2 * GB },
  spare_bytes: -2 * GB,
  largest_context_that_fits: 4096,
});
// As models_list sends a refused model: with what would make it fit.
const BIG: ModelEntry = {
  ...DEMO,
  id: 'org/Big-14B',
  name: 'Big-14B',
  size_bytes: 8_600_000_000,
  loaded: false,
  fit: SWAP_REPORT,
  remedies: [{ kind: 'shorter_context', contextTokens: 4096, predictedPeakBytes: 9.5 * GB }],
};

const LOCAL_ROUTE = { target: 'local' as const, modelOrProvider: 'headroom-demo-tiny', reasons: [{ code: 'SHORT_INPUT', message: 'Short input: stays on this Mac' }] };

const STATS: TurnStats = {
  ttftMs: 25,
  prefillTps: 800,
  decodeTps: 193.4,
  e2eTps: 160,
  promptTokens: 20,
  generatedTokens: 40,
  thinkingTokens: 0,
  contextTokens: 20,
  reusedTokens: 0,
  reusedFrom: 'none',
  batch: 1,
  peakMemoryBytes: 12_000_000,
  kvCache: 'bf16',
  speculation: null,
  twoMacs: null,
  model: 'headroom-demo-tiny',
  slowdown: null,
};

/** What `away_notice` answers: the latest thing Headroom did to give memory back. */
let latestNotice: AwayNotice | null = null;

interface Call {
  cmd: string;
  args: InvokeArgs | undefined;
}

/** What chat_send does with a message: emit events on the channel, or throw. */
type Chat = (text: string, emit: (e: ChatEvent) => void) => void;

/** The answer "Hello **world**" in two tokens, then stats and finished. */
const answer: Chat = (_text, emit) => {
  emit({ event: 'started', data: { runId: 1, promptTokens: 20, reusedTokens: 0, route: LOCAL_ROUTE } });
  emit({ event: 'token', data: { text: 'Hello ' } });
  emit({ event: 'token', data: { text: '**world**' } });
  emit({ event: 'stats', data: STATS });
  emit({ event: 'finished', data: { reason: 'stop' } });
};

/** A fake backend: answers like the Rust commands do and records every call. */
function fakeBackend(
  chat: Chat = answer,
  models: ModelEntry[] = [DEMO],
  sessions: FakeSession[] = [],
  /** `chat_regenerate` rejects with this (a refused regenerate), if given. */
  refuseRegenerate?: { code: string; message: string },
): Call[] {
  const calls: Call[] = [];
  let nextMessage = 1;
  let settings: Settings = { ...DEFAULT_SETTINGS };
  const message = (sessionId: string, role: 'user' | 'assistant', content: string): StoredMessage => ({
    id: nextMessage++,
    sessionId,
    role,
    content,
    model: null,
    route: 'local',
    status: 'complete',
    error: null,
    createdAt: 0,
    updatedAt: 0,
    stats: null,
  });
  mockIPC((cmd, args) => {
    calls.push({ cmd, args });
    switch (cmd) {
      case 'settings_get':
        return settings;
      case 'settings_set': {
        const next = (args as { settings: Settings }).settings;
        if (next.maxTokens < 1 || next.maxTokens > 32768) {
          throw { code: 'INVALID_SETTING', message: 'max new tokens must be between 1 and 32768 (got 0)' };
        }
        settings = next;
        return settings;
      }
      case 'server_status':
        return null;
      case 'cloud_cache_stats':
        return { hits: 3, misses: 5, entries: 2, bytes: 1_200_000 };
      case 'route_preview': {
        const loaded = models.find((m) => m.loaded);
        const a = args as { text: string; force: string | null };
        const cloud = a.force === 'cloud' || a.text.length > 200;
        return {
          target: cloud ? { kind: 'cloud', provider: 'gpt-test' } : { kind: 'local', model: loaded?.name ?? 'none' },
          reasons: [cloud ? { code: 'LONG_INPUT', message: 'Long input: goes to the cloud' } : { code: 'SHORT_INPUT', message: 'Short input: stays on this Mac' }],
          inputTokens: Math.ceil(a.text.length / 4),
          tokensExact: true,
          thresholdTokens: 8192,
          neededContext: 0,
        };
      }
      case 'sessions_list':
        return sessions.map((x) => ({ id: x.id, title: x.title, createdAt: 0, updatedAt: Date.now(), messageCount: x.messages.length, preview: null }));
      case 'session_create': {
        const a = args as { title?: string; firstMessage?: string } | undefined;
        const created = { id: `s${sessions.length + 1}`, title: a?.title ?? a?.firstMessage ?? 'New chat', messages: [] };
        sessions.unshift(created);
        return { id: created.id, title: created.title, createdAt: 0, updatedAt: 0 };
      }
      case 'session_messages':
        return sessions.find((x) => x.id === (args as { sessionId: string }).sessionId)?.messages ?? [];
      case 'session_delete': {
        const id = (args as { sessionId: string }).sessionId;
        const before = sessions.length;
        sessions = sessions.filter((x) => x.id !== id);
        return sessions.length < before;
      }
      case 'session_rename': {
        const a = args as { sessionId: string; title: string };
        const found = sessions.find((x) => x.id === a.sessionId);
        if (found) found.title = a.title;
        return { id: a.sessionId, title: a.title, createdAt: 0, updatedAt: 0 };
      }
      case 'session_search': {
        const q = (args as { text: string }).text.toLowerCase();
        return sessions
          .filter((x) => x.title.toLowerCase().includes(q) || x.messages.some((m) => m.content.toLowerCase().includes(q)))
          .map((x) => ({ id: x.id, title: x.title, createdAt: 0, updatedAt: 0, messageId: null, snippet: null }));
      }
      case 'session_chart':
        return '<svg xmlns="http://www.w3.org/2000/svg" width="400" height="200"><circle class="turn" cx="1" cy="1" r="2"/></svg>';
      case 'app_info':
        return INFO;
      case 'models_list':
        return models;
      case 'model_load': {
        const id = (args as { id: string }).id;
        models = models.map((m) => ({ ...m, loaded: m.id === id }));
        return {
          ...models.find((m) => m.id === id),
          context_limit: 8192,
          unload_ms: 120,
          load_ms: 900,
          cache_limit_bytes: 2 * 2 ** 30,
          wired_limit_bytes: null,
          kv_cache: '8-bit (group 64) from 5000 tokens',
        };
      }
      case 'chat_send': {
        const a = args as { sessionId: string; text: string; onEvent: Channel<ChatEvent> };
        sessions.find((x) => x.id === a.sessionId)?.messages.push(message(a.sessionId, 'user', a.text));
        // Events arrive after the command has returned its run id.
        setTimeout(() => chat(a.text, (e) => a.onEvent.onmessage(e)));
        return 1;
      }
      case 'chat_cancel':
        return true;
      case 'chat_regenerate': {
        if (refuseRegenerate) throw refuseRegenerate;
        const a = args as { sessionId: string; onEvent: Channel<ChatEvent> };
        const found = sessions.find((x) => x.id === a.sessionId);
        const question = found?.messages.filter((m) => m.role === 'user').at(-1)?.content ?? '';
        setTimeout(() => chat(question, (e) => a.onEvent.onmessage(e)));
        return 2;
      }
      case 'hide_window':
        return null;
      case 'memory_history':
        return [];
      case 'away_notice':
        return latestNotice;
      default:
        throw `command ${cmd} not found`;
    }
  }, { shouldMockEvents: true });
  return calls;
}

function setup() {
  const user = userEvent.setup();
  render(App);
  const input = screen.getByTestId<HTMLTextAreaElement>('chat-input');
  return { user, input, send: () => screen.getByTestId('send-button') };
}

/** Picks a model as a user would: open the list, click the row. */
async function pick(user: ReturnType<typeof setup>['user'], id: string): Promise<void> {
  await user.click(screen.getByTestId('model-select'));
  const row = (await screen.findAllByTestId('model-option')).find((o) => o.dataset.modelId === id);
  if (!row) throw new Error(`no row for ${id}`);
  await user.click(row);
}

/** Opens the model list and returns its rows. */
async function openList(user: ReturnType<typeof setup>['user'], count: number): Promise<HTMLElement[]> {
  await waitFor(() => expect(screen.getByTestId('model-select')).toBeEnabled());
  await user.click(screen.getByTestId('model-select'));
  const rows = await screen.findAllByTestId('model-option');
  expect(rows).toHaveLength(count);
  return rows;
}

describe('App', () => {
  it('shows the layout skeleton and the loaded model in the picker', async () => {
    fakeBackend();
    const { user } = setup();

    expect(screen.getByTestId('live-graph')).toHaveTextContent(/memory\s*—/);
    expect(screen.getByTestId('settings-button')).toHaveAccessibleName('Settings');
    expect(screen.getByRole('textbox', { name: 'Message' })).toBe(screen.getByTestId('chat-input'));
    expect(screen.getByTestId('send-button')).toBeDisabled();
    expect(screen.getAllByRole('tab').map((tab) => tab.textContent?.trim())).toEqual(['Chat', 'Sessions', 'Bench']);
    await waitFor(() => expect(screen.getByTestId('app-info')).toHaveTextContent('v0.1.0 · MLX cpu'));
    await waitFor(() => expect(screen.getByTestId('model-select')).toHaveAttribute('value', 'headroom-demo-tiny'));
    const [option] = await openList(user, 1);
    expect(option).toHaveAttribute('data-model-id', 'headroom-demo-tiny');
    expect(option).toHaveTextContent(/headroom-demo-tiny\s*4-bit · 2 MB/);
    expect(option).toHaveAttribute('aria-selected', 'true');
    expect(screen.getByTestId('route-chip')).toHaveTextContent('Local · headroom-demo-tiny');
  });

  it('reads the verdicts again each time the model list opens (a turn may have been measured since)', async () => {
    const calls = fakeBackend();
    const { user } = setup();
    await waitFor(() => expect(screen.getByTestId('model-select')).toHaveAttribute('value', 'headroom-demo-tiny'));
    const lists = calls.filter((c) => c.cmd === 'models_list').length;
    await openList(user, 1);
    await waitFor(() => expect(calls.filter((c) => c.cmd === 'models_list').length).toBe(lists + 1));
  });

  it('says so when there is no model, and refreshes when the backend says models changed', async () => {
    const calls = fakeBackend(answer, []);
    setup();
    await waitFor(() => expect(screen.getByTestId('model-select')).toHaveTextContent('No model found'));
    const lists = calls.filter((c) => c.cmd === 'models_list').length;
    const { emit } = await import('@tauri-apps/api/event');
    await emit('models-changed');
    await waitFor(() => expect(calls.filter((c) => c.cmd === 'models_list').length).toBe(lists + 1));
  });

  it('shows what Headroom did to give memory back: the latest at start, then each new one, until dismissed', async () => {
    latestNotice = {
      atUnixMs: 1000,
      action: 'unload',
      cause: { kind: 'idle', idleMs: 900_000 },
      modelId: 'headroom-demo-tiny',
      freedBytes: 2_000_000,
      message: 'It was not used for 15 min: Headroom unloaded headroom-demo-tiny and gave back 0.00 GB. Your next message loads it again.',
    };
    fakeBackend();
    const { user } = setup();
    const shown = await screen.findByTestId('away-notice');
    expect(shown).toHaveTextContent('Headroom unloaded headroom-demo-tiny');
    expect(shown).toHaveAttribute('data-action', 'unload');
    await user.click(within(shown).getByRole('button', { name: 'Dismiss' }));
    expect(screen.queryByTestId('away-notice')).toBeNull();

    const { emit } = await import('@tauri-apps/api/event');
    await emit('away', {
      ...latestNotice,
      atUnixMs: 2000,
      action: 'blameRun',
      cause: { kind: 'pressure', level: 'critical' },
      message: 'Memory pressure reached critical during this answer: this answer is the cause.',
    });
    const blamed = await screen.findByTestId('away-notice');
    expect(blamed).toHaveAttribute('data-action', 'blameRun');
    expect(blamed).toHaveTextContent('this answer is the cause');
    latestNotice = null;
  });

  it('loads the model picked in the dropdown', async () => {
    const calls = fakeBackend(answer, [DEMO, OTHER]);
    const { user } = setup();
    await waitFor(() => expect(screen.getByTestId('model-select')).toHaveAttribute('value', DEMO.id));

    await pick(user, 'org/Other-4bit');

    await waitFor(() => expect(screen.getByTestId('model-select')).toHaveAttribute('value', 'org/Other-4bit'));
    expect(calls.filter((c) => c.cmd === 'model_load')).toEqual([{ cmd: 'model_load', args: { id: 'org/Other-4bit' } }]);
    // The chip follows through a debounced route preview: wait for it, do not race it.
    await waitFor(() => expect(screen.getByTestId('route-chip')).toHaveTextContent('Local · Other-4bit'));
  });

  it('picks the KV cache in Settings and shows the loaded model memory limits', async () => {
    const calls = fakeBackend(answer, [DEMO, OTHER]);
    const { user } = setup();
    await waitFor(() => expect(screen.getByTestId('model-select')).toHaveAttribute('value', DEMO.id));
    await user.click(screen.getByTestId('settings-button'));
    // Before a load: where the limits come from.
    expect(await screen.findByTestId('memory-limits')).toHaveTextContent('set from the budget when a model loads');
    expect(screen.getByTestId('kv-bits')).toHaveValue('float');
    expect(screen.queryByTestId('kv-start')).toBeNull();
    await user.selectOptions(screen.getByTestId('kv-bits'), '8');
    await waitFor(() =>
      expect(calls.filter((c) => c.cmd === 'settings_set').at(-1)?.args).toMatchObject({ settings: { kvBits: 8, quantizedKvStart: 5000 } }),
    );
    const start = await screen.findByTestId('kv-start');
    await user.clear(start);
    await user.type(start, '0');
    start.blur();
    await waitFor(() =>
      expect(calls.filter((c) => c.cmd === 'settings_set').at(-1)?.args).toMatchObject({ settings: { kvBits: 8, quantizedKvStart: 0 } }),
    );
    await user.click(screen.getByRole('button', { name: 'Done' }));

    await pick(user, 'org/Other-4bit');
    await waitFor(() => expect(screen.getByTestId('model-select')).toHaveAttribute('value', 'org/Other-4bit'));
    await user.click(screen.getByTestId('settings-button'));
    const limits = await screen.findByTestId('memory-limits');
    expect(limits).toHaveTextContent('KV cache 8-bit (group 64) from 5000 tokens');
    expect(limits).toHaveTextContent('MLX buffer cache limit 2.00 GB');
    expect(limits).toHaveTextContent('Wired limit none (off Metal, or no safe reserve left)');
  });

  it('warns before loading a model that would swap, with three choices', async () => {
    const calls = fakeBackend(answer, [DEMO, BIG]);
    const { user } = setup();
    const rows = await openList(user, 2);
    const big = rows.find((o) => o.dataset.modelId === 'org/Big-14B');
    expect(big?.dataset.verdict).toBe('would_swap');
    expect(big).toHaveTextContent('needs 12.0 GB');
    expect(big).toHaveTextContent('would swap by 2.0 GB');
    if (big) await user.click(big);
    const sheet = await screen.findByTestId('fit-warning');
    expect(sheet).toHaveTextContent('Big-14B would push this Mac into swap by 2.0 GB at 8K context');
    expect(within(sheet).getByTestId('fit-largest')).toHaveTextContent('4K tokens');
    expect(screen.getByTestId('fit-warning-cancel')).toHaveFocus();
    await user.click(screen.getByTestId('fit-warning-cancel'));
    expect(screen.queryByTestId('fit-warning')).toBeNull();
    expect(calls.filter((c) => c.cmd === 'model_load')).toEqual([]);

    await pick(user, 'org/Big-14B');
    const shorter = await screen.findByTestId('fit-remedy-shorter_context');
    expect(shorter).toHaveTextContent('Load with 4K context');
    await user.click(shorter);
    await waitFor(() => expect(screen.queryByTestId('fit-warning')).toBeNull());
    await waitFor(() => expect(screen.getByTestId('switch-note')).toHaveTextContent('unloaded in 0.1 s, loaded in 0.9 s'));

    // Back to the demo model (it fits: no sheet), then Big again, anyway.
    await pick(user, DEMO.id);
    await waitFor(() => expect(calls.filter((c) => c.cmd === 'model_load')).toHaveLength(2));
    await waitFor(() => expect(screen.getByTestId('model-select')).toHaveAttribute('value', DEMO.id));
    await pick(user, 'org/Big-14B');
    await user.click(await screen.findByTestId('fit-warning-load-anyway'));
    await waitFor(() => expect(calls.filter((c) => c.cmd === 'model_load')).toHaveLength(3));
    expect(calls.filter((c) => c.cmd === 'model_load').map((c) => c.args)).toEqual([
      { id: 'org/Big-14B', contextLimit: 4096 },
      { id: DEMO.id },
      { id: 'org/Big-14B', override: true },
    ]);
  });

  it('Cmd+K opens the model list; arrows and Enter pick; Esc closes only the list', async () => {
    const calls = fakeBackend(answer, [DEMO, OTHER]);
    const { user } = setup();
    await waitFor(() => expect(screen.getByTestId('model-select')).toHaveAttribute('value', DEMO.id));

    await user.keyboard('{Control>}k{/Control}');
    const list = await screen.findByRole('listbox', { name: 'Models' });
    expect(list).toHaveFocus();
    expect(list.getAttribute('aria-activedescendant')).toBe('model-option-0');
    await user.keyboard('{Escape}');
    expect(screen.queryByRole('listbox')).toBeNull();
    expect(calls.filter((c) => c.cmd === 'hide_window')).toEqual([]);
    expect(screen.getByTestId('model-select')).toHaveFocus();

    await user.keyboard('{Control>}k{/Control}');
    await screen.findByRole('listbox');
    await user.keyboard('{ArrowDown}{Enter}');
    await waitFor(() => expect(calls.filter((c) => c.cmd === 'model_load')).toEqual([{ cmd: 'model_load', args: { id: OTHER.id } }]));
  });

  it('streams the answer as Markdown, then the stats line that expands', async () => {
    const calls = fakeBackend();
    const { user, input, send } = setup();

    await user.type(input, 'hello world!');
    await user.click(send());

    expect(screen.getByTestId('message-user')).toHaveTextContent('hello world!');
    expect(input).toHaveValue('');
    const reply = await screen.findByTestId('message-assistant');
    await waitFor(() => expect(reply).toHaveAttribute('data-finish-reason', 'stop'));
    expect(reply).toHaveTextContent('Hello world');
    expect(reply.querySelector('strong')).toHaveTextContent('world');
    const stats = screen.getByTestId('turn-stats');
    expect(stats).toHaveTextContent('TTFT 25 ms · 193 tok/s · 40 tok · ctx 20');
    const route = screen.getByTestId('answer-route');
    expect(route).toHaveTextContent('local');
    expect(route).toHaveAttribute('title', 'Short input: stays on this Mac');
    await user.click(stats);
    expect(screen.getByTestId('turn-stats-details')).toHaveTextContent('Peak memory12 MB');
    const send_ = calls.find((c) => c.cmd === 'chat_send')?.args as Record<string, unknown>;
    expect(send_).toMatchObject({ text: 'hello world!', maxTokens: 512 });
    // The first message created the session it was sent to.
    expect(calls.filter((c) => c.cmd === 'session_create')).toHaveLength(1);
    expect(send_.sessionId).toBe('s1');
    expect(screen.getByTestId('send-button')).toBeInTheDocument();
  });

  it("a thinking model's thinking streams into a block above the answer; the Think switch asks for none", async () => {
    const thinker = { ...DEMO, loaded: true, thinks: true };
    const thought: Chat = (_text, emit) => {
      emit({ event: 'started', data: { runId: 1, promptTokens: 20, reusedTokens: 0, route: LOCAL_ROUTE } });
      emit({ event: 'thinking', data: { text: 'The user greets me.', tokens: 5 } });
      emit({ event: 'thinking', data: { text: '', tokens: 7 } });
      emit({ event: 'token', data: { text: 'Hello!' } });
      emit({ event: 'stats', data: { ...STATS, generatedTokens: 9, thinkingTokens: 7 } });
      emit({ event: 'finished', data: { reason: 'stop' } });
    };
    const calls = fakeBackend(thought, [thinker]);
    const { user, input } = setup();
    const toggle = await screen.findByTestId('think-switch');
    expect(toggle).toBeChecked();

    await user.type(input, 'hi{Enter}');
    const reply = await screen.findByTestId('message-assistant');
    await waitFor(() => expect(reply).toHaveAttribute('data-finish-reason', 'stop'));
    expect(reply).toHaveTextContent('Hello!');
    expect(reply).not.toHaveTextContent('greets');
    expect(screen.getByTestId('thinking-line')).toHaveTextContent(/^Thought for [\d.]+ s · 7 tokens$/);
    expect(screen.getByTestId('turn-stats')).toHaveTextContent('9 tok (7 thinking)');
    await user.click(screen.getByTestId('thinking-toggle'));
    expect(screen.getByTestId('thinking-text')).toHaveTextContent('The user greets me.');
    // Untouched, the switch leaves the model's setting: no `think` is sent.
    expect(calls.find((c) => c.cmd === 'chat_send')?.args).not.toHaveProperty('think');

    await user.click(toggle);
    await user.type(input, 'again{Enter}');
    await waitFor(() => expect(calls.filter((c) => c.cmd === 'chat_send')).toHaveLength(2));
    expect(calls.filter((c) => c.cmd === 'chat_send')[1]?.args).toMatchObject({ text: 'again', think: false });
  });

  it('offers no Think switch for a model whose template does not think', async () => {
    fakeBackend(answer, [{ ...DEMO, loaded: true }]);
    setup();
    await screen.findByText(/Chat with/);
    expect(screen.queryByTestId('think-switch')).toBeNull();
  });

  it('shows Stop while generating, and Stop cancels the run', async () => {
    let emit!: (e: ChatEvent) => void;
    const calls = fakeBackend((_t, e) => {
      emit = e;
      e({ event: 'started', data: { runId: 1, promptTokens: 20, reusedTokens: 0, route: LOCAL_ROUTE } });
      e({ event: 'token', data: { text: 'one ' } });
    });
    const { user, input } = setup();

    await user.type(input, 'go on{Enter}');
    const stop = await screen.findByTestId('stop-button');
    expect(screen.queryByTestId('send-button')).toBeNull();
    await waitFor(() => expect(screen.getByTestId('message-assistant')).toHaveTextContent('one'));
    await user.click(stop);
    await waitFor(() => expect(calls.filter((c) => c.cmd === 'chat_cancel')).toEqual([{ cmd: 'chat_cancel', args: { runId: 1 } }]));

    emit({ event: 'stats', data: { ...STATS, generatedTokens: 1 } });
    emit({ event: 'finished', data: { reason: 'cancelled' } });
    await waitFor(() => expect(screen.getByTestId('message-assistant')).toHaveAttribute('data-finish-reason', 'cancelled'));
    expect(screen.getByTestId('turn-stats')).toHaveTextContent('stopped');
    expect(screen.getByTestId('send-button')).toBeInTheDocument();
  });

  it('sends on Enter, and Shift+Enter adds a newline instead', async () => {
    const calls = fakeBackend();
    const { user, input } = setup();

    await user.type(input, 'first line');
    await user.keyboard('{Shift>}{Enter}{/Shift}');
    await user.type(input, 'second line');
    expect(input).toHaveValue('first line\nsecond line');
    expect(calls.some((c) => c.cmd === 'chat_send')).toBe(false);

    await user.keyboard('{Enter}');

    expect(await screen.findByTestId('message-assistant')).toHaveTextContent('Hello');
    expect(screen.getByTestId('message-user').textContent?.trim()).toBe('first line\nsecond line');
    expect(input).toHaveValue('');
    expect(calls.filter((c) => c.cmd === 'chat_send')).toHaveLength(1);
  });

  it('does not send a blank message', async () => {
    const calls = fakeBackend();
    const { user, input, send } = setup();

    await user.type(input, '   {Enter}');

    expect(send()).toBeDisabled();
    expect(screen.queryByTestId('message-user')).toBeNull();
    expect(calls.some((c) => c.cmd === 'chat_send')).toBe(false);
  });

  it('on a refused send shows its message and puts the text back', async () => {
    mockIPC((cmd) => {
      if (cmd === 'chat_send') throw { code: 'NO_MODEL_LOADED', message: 'No model is loaded yet. Pick one from the list at the top.' };
      if (cmd === 'session_create') return { id: 's1', title: 'New chat', createdAt: 0, updatedAt: 0 };
      if (cmd === 'models_list' || cmd === 'sessions_list') return [];
      throw `command ${cmd} not found`;
    }, { shouldMockEvents: true });
    const { user, input, send } = setup();

    await user.type(input, 'keep this text');
    await user.click(send());

    expect(await screen.findByTestId('error')).toHaveTextContent('No model is loaded yet. Pick one from the list at the top.');
    expect(input).toHaveValue('keep this text');
    expect(screen.queryByTestId('message-user')).toBeNull();
    expect(screen.queryByTestId('message-assistant')).toBeNull();
  });

  it('on an error event before any text, gives the text back; then a retry works', async () => {
    let fail = true;
    fakeBackend((text, emit) => {
      if (fail) emit({ event: 'error', data: { code: 'CONTEXT_OVERFLOW', message: 'The message is longer than the context.' } });
      else answer(text, emit);
    });
    const { user, input } = setup();

    await user.type(input, 'retry me{Enter}');
    expect(await screen.findByTestId('error')).toHaveTextContent('The message is longer than the context.');
    expect(input).toHaveValue('retry me');
    expect(screen.queryByTestId('message-user')).toBeNull();
    fail = false;
    await user.keyboard('{Enter}');

    await screen.findByTestId('message-assistant');
    expect(screen.queryByTestId('error')).toBeNull();
    expect(within(screen.getByRole('log')).getByTestId('message-user')).toHaveTextContent('retry me');
  });

  it('copies an answer as its Markdown source, and shows the live then final speed', async () => {
    fakeBackend();
    const { user, input, send } = setup();
    const writeText = vi.fn().mockResolvedValue(undefined);
    Object.defineProperty(navigator, 'clipboard', { value: { writeText }, configurable: true });

    await user.type(input, 'hello world!');
    await user.click(send());
    const reply = await screen.findByTestId('message-assistant');
    await waitFor(() => expect(reply).toHaveAttribute('data-finish-reason', 'stop'));
    await user.click(await screen.findByTestId('copy-answer'));
    expect(writeText).toHaveBeenCalledWith(expect.stringContaining('**world**'));
    expect(screen.getByTestId('copy-answer')).toHaveAccessibleName('Copied');
    await waitFor(() => expect(screen.getByTestId('speed')).toHaveTextContent(/^\d+\.\d tok\/s$/));
    expect(screen.getByTestId('speed')).toHaveAttribute('data-live', 'false');
  });

  it('previews the route as you type, and a per-message override goes with that message only', async () => {
    const calls = fakeBackend();
    const { user, input } = setup();
    await waitFor(() => expect(screen.getByTestId('route-chip')).toHaveTextContent('Local · headroom-demo-tiny'));
    await user.type(input, 'x'.repeat(250));
    await waitFor(() => expect(screen.getByTestId('route-chip')).toHaveAttribute('data-target', 'cloud'));
    expect(screen.getByTestId('route-why')).toHaveTextContent('Long input: goes to the cloud');
    await user.clear(input);
    await waitFor(() => expect(screen.getByTestId('route-chip')).toHaveAttribute('data-target', 'local'));

    await user.click(screen.getByRole('button', { name: /Local · / }));
    await user.click(screen.getByTestId('route-force-cloud'));
    await waitFor(() => expect(screen.getByTestId('route-chip')).toHaveTextContent('Cloud · gpt-test'));
    await user.type(input, 'first{Enter}');
    await waitFor(() => expect(calls.filter((c) => c.cmd === 'chat_send')).toHaveLength(1));
    expect(calls.find((c) => c.cmd === 'chat_send')?.args).toMatchObject({ text: 'first', force: 'cloud' });
    await waitFor(() => expect(screen.getByTestId('send-button')).toBeInTheDocument());
    await user.type(input, 'second{Enter}');
    await waitFor(() => expect(calls.filter((c) => c.cmd === 'chat_send')).toHaveLength(2));
    expect(calls.filter((c) => c.cmd === 'chat_send')[1]?.args).not.toHaveProperty('force');
  });

  /** Answers "answer n to <question>" on the n-th call; `fail(n)` makes the n-th fail before it starts. */
  function numbered(fail: (n: number) => boolean = () => false): Chat {
    let n = 0;
    return (text, emit) => {
      n += 1;
      if (fail(n)) {
        emit({ event: 'error', data: { code: 'CLOUD_CONNECTION_REFUSED', message: 'The cloud endpoint refused the connection.' } });
        return;
      }
      emit({ event: 'started', data: { runId: n, promptTokens: 3, reusedTokens: 0, route: LOCAL_ROUTE } });
      emit({ event: 'token', data: { text: `answer ${n} to ${text}` } });
      emit({ event: 'stats', data: STATS });
      emit({ event: 'finished', data: { reason: 'stop' } });
    };
  }

  it('regenerates the last answer: the question is asked again in place', async () => {
    const calls = fakeBackend(numbered());
    const { user, input } = setup();
    await user.type(input, 'why?{Enter}');
    await waitFor(() => expect(screen.getByTestId('message-assistant')).toHaveTextContent('answer 1 to why?'));
    await user.click(await screen.findByTestId('regenerate'));
    await waitFor(() => expect(screen.getByTestId('message-assistant')).toHaveTextContent('answer 2 to why?'));
    expect(screen.getAllByTestId('message-user')).toHaveLength(1);
    expect(calls.filter((c) => c.cmd === 'chat_regenerate').map((c) => (c.args as { sessionId: string }).sessionId)).toEqual(['s1']);
  });

  it('keeps the old answer on screen when a regenerate is refused, and says why', async () => {
    const refusal = { code: 'ROUTE_NO_LOCAL_MODEL', message: 'This message must stay on this Mac, but no local model is loaded.' };
    fakeBackend(answer, [DEMO], [], refusal);
    const { user, input } = setup();
    await user.type(input, 'why?{Enter}');
    await waitFor(() => expect(screen.getByTestId('message-assistant')).toHaveTextContent('Hel'));
    const before = screen.getByTestId('message-assistant').textContent;
    await user.click(await screen.findByTestId('regenerate'));
    await waitFor(() => expect(screen.getByTestId('error')).toHaveTextContent('must stay on this Mac'));
    expect(screen.getAllByTestId('message-user').map((m) => m.textContent)).toEqual(['why?']);
    expect(screen.getByTestId('message-assistant').textContent).toBe(before);
    expect(input.value).toBe('');
  });

  it('keeps the old answer when the new one fails before it starts', async () => {
    fakeBackend(numbered((n) => n === 2));
    const { user, input } = setup();
    await user.type(input, 'why?{Enter}');
    await waitFor(() => expect(screen.getByTestId('message-assistant')).toHaveTextContent('answer 1 to why?'));
    await user.click(await screen.findByTestId('regenerate'));
    await waitFor(() => expect(screen.getByTestId('error')).toHaveTextContent('refused the connection'));
    expect(screen.getByTestId('message-assistant')).toHaveTextContent('answer 1 to why?');
    expect(screen.getAllByTestId('message-user')).toHaveLength(1);
    expect(input.value).toBe('');
  });

  it('says under the answer which earlier messages stayed on this Mac', async () => {
    const withheld = { code: 'HISTORY_WITHHELD', message: 'Earlier messages 1 and 2 stay on this Mac: the cloud gets the conversation without them.' };
    const route = { target: 'cloud' as const, modelOrProvider: 'gpt-test', reasons: [{ code: 'FORCED_CLOUD', message: 'You asked for the cloud.' }, withheld] };
    fakeBackend((_text, emit) => {
      emit({ event: 'started', data: { runId: 1, promptTokens: 3, reusedTokens: 0, route } });
      emit({ event: 'token', data: { text: 'fine' } });
      emit({ event: 'stats', data: STATS });
      emit({ event: 'finished', data: { reason: 'stop' } });
    });
    const { user, input } = setup();
    await user.type(input, 'and then?{Enter}');
    await waitFor(() => expect(screen.getByTestId('answer-withheld')).toHaveTextContent('Earlier messages 1 and 2 stay on this Mac'));
  });

  it('previews the route with the open chat, as the send will count it', async () => {
    const calls = fakeBackend();
    const { user, input } = setup();
    await user.type(input, 'first{Enter}');
    await waitFor(() => expect(screen.getByTestId('message-assistant')).toHaveTextContent('Hel'));
    await user.type(input, 'second');
    await waitFor(() =>
      expect(calls.filter((c) => c.cmd === 'route_preview').at(-1)?.args).toMatchObject({ text: 'second', sessionId: 's1' }),
    );
  });

  it('renders no script from model output', async () => {
    fakeBackend((_t, emit) => {
      emit({ event: 'started', data: { runId: 1, promptTokens: 1, reusedTokens: 0, route: LOCAL_ROUTE } });
      emit({ event: 'token', data: { text: '<img src=x onerror=alert(1)><script>alert(2)</script>[x](javascript:alert(3))' } });
      emit({ event: 'finished', data: { reason: 'stop' } });
    });
    const { user, input } = setup();
    await user.type(input, 'attack{Enter}');
    const reply = await screen.findByTestId('message-assistant');
    await waitFor(() => expect(reply).toHaveAttribute('data-finish-reason', 'stop'));
    expect(reply.querySelector('script')).toBeNull();
    expect(reply.innerHTML).not.toMatch(/onerror|javascript:/);
  });

  it('stores settings, keeps a refused value in its field with the reason, and sends the max new tokens', async () => {
    const calls = fakeBackend();
    const { user, input } = setup();
    await user.click(screen.getByTestId('settings-button'));
    const field = await screen.findByTestId('max-tokens');
    await user.clear(field);
    await user.type(field, '0');
    field.blur();
    expect(await screen.findByTestId('error-maxTokens')).toHaveTextContent('max new tokens must be between 1 and 32768');
    expect(screen.getByTestId('cloud-cache-stats')).toHaveTextContent('2 answers, 1.2 MB · 3 hits, 5 misses');
    expect(field).toHaveValue(0);

    await user.clear(field);
    await user.type(field, '4096');
    field.blur();
    await waitFor(() => expect(screen.queryByTestId('error-maxTokens')).toBeNull());
    expect(calls.filter((c) => c.cmd === 'settings_set').at(-1)?.args).toMatchObject({ settings: { maxTokens: 4096, contextLimit: 8192 } });
    // The kernel: mlx-lm's fused one, stored as the Rust side spells it.
    expect(screen.getByTestId('kernel')).toHaveValue('auto');
    await user.selectOptions(screen.getByTestId('kernel'), 'fused');
    await waitFor(() =>
      expect(calls.filter((c) => c.cmd === 'settings_set').at(-1)?.args).toMatchObject({ settings: { kernel: 'fused', maxTokens: 4096 } }),
    );
    // Idle unload: minutes, or never (null, as the Rust side stores it).
    expect(screen.getByTestId('idle-unload')).toHaveValue('15');
    await user.selectOptions(screen.getByTestId('idle-unload'), 'never');
    await waitFor(() =>
      expect(calls.filter((c) => c.cmd === 'settings_set').at(-1)?.args).toMatchObject({ settings: { idleUnloadMinutes: null, kernel: 'fused' } }),
    );
    await user.selectOptions(screen.getByTestId('idle-unload'), '30');
    await waitFor(() =>
      expect(calls.filter((c) => c.cmd === 'settings_set').at(-1)?.args).toMatchObject({ settings: { idleUnloadMinutes: 30 } }),
    );
    await user.click(screen.getByRole('button', { name: 'Done' }));

    await user.type(input, 'long please{Enter}');
    await screen.findByTestId('message-assistant');
    expect(calls.find((c) => c.cmd === 'chat_send')?.args).toMatchObject({ maxTokens: 4096 });
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

  it('reopens the most recent session, and the sessions view lists, charts, opens and starts sessions', async () => {
    const stored = (sessionId: string, texts: string[]): StoredMessage[] =>
      texts.map((content, i) => ({
        id: i + 100 * sessionId.length,
        sessionId,
        role: i % 2 ? 'assistant' : 'user',
        content,
        model: null,
        route: 'local',
        status: 'complete',
        error: null,
        createdAt: 0,
        updatedAt: 0,
        stats: null,
      }));
    const calls = fakeBackend(answer, [DEMO], [
      { id: 'recent', title: 'Recent chat', messages: stored('recent', ['first question', 'first answer']) },
      { id: 'older', title: 'Older chat about llamas', messages: stored('older', ['llamas?', 'yes, llamas']) },
    ]);
    const { user } = setup();

    // Where the user left off.
    await waitFor(() => expect(screen.getAllByTestId('message-user').map((m) => m.textContent)).toEqual(['first question']));
    expect(screen.getByTestId('message-assistant')).toHaveTextContent('first answer');

    await user.click(screen.getByRole('tab', { name: 'Sessions' }));
    const list = await screen.findByTestId('session-list');
    await waitFor(() => expect(within(list).getAllByTestId('session-item')).toHaveLength(2));
    expect(within(list).getAllByTestId('session-item')[0]).toHaveAttribute('aria-current', 'true');

    await user.type(screen.getByTestId('session-search'), 'llama');
    await waitFor(() => expect(within(list).getAllByTestId('session-item')).toHaveLength(1));
    await user.click(within(list).getByTestId('session-item'));
    const chart = await screen.findByTestId('session-chart');
    await waitFor(() => expect(chart.querySelector('svg circle.turn')).not.toBeNull());
    expect(calls.find((c) => c.cmd === 'session_chart')?.args).toMatchObject({ sessionId: 'older' });

    await user.click(screen.getByTestId('session-open'));
    await waitFor(() => expect(screen.getAllByTestId('message-user').map((m) => m.textContent)).toEqual(['llamas?']));
    expect(screen.getByTestId('chat-input')).toBeVisible();

    // Cmd+N: a new, empty chat; its first message creates the session.
    await user.keyboard('{Control>}n{/Control}');
    await waitFor(() => expect(screen.queryAllByTestId('message-user')).toHaveLength(0));
    await user.type(screen.getByTestId('chat-input'), 'a new topic{Enter}');
    await waitFor(() => expect(calls.filter((c) => c.cmd === 'session_create')).toEqual([{ cmd: 'session_create', args: { firstMessage: 'a new topic' } }]));
    expect(calls.find((c) => c.cmd === 'chat_send')?.args).toMatchObject({ sessionId: 's3', text: 'a new topic' });
  });

  it('renames and deletes a session, deleting only after a second click', async () => {
    const calls = fakeBackend(answer, [DEMO], [{ id: 'a', title: 'Old title', messages: [] }]);
    const { user } = setup();
    await user.click(screen.getByRole('tab', { name: 'Sessions' }));
    await user.click(await screen.findByTestId('session-item'));

    await user.click(screen.getByTestId('session-rename'));
    const field = screen.getByTestId('session-rename-input');
    await user.clear(field);
    await user.type(field, 'Speed notes{Enter}');
    await waitFor(() => expect(screen.getByTestId('session-title')).toHaveTextContent('Speed notes'));

    await user.click(screen.getByTestId('session-delete'));
    expect(calls.filter((c) => c.cmd === 'session_delete')).toEqual([]);
    await user.click(screen.getByTestId('session-delete-confirm'));
    await waitFor(() => expect(screen.getByText(/No sessions yet/)).toBeVisible());
    expect(calls.filter((c) => c.cmd === 'session_delete')).toEqual([{ cmd: 'session_delete', args: { sessionId: 'a' } }]);
  });

  it('switches views and keeps the draft', async () => {
    fakeBackend();
    const { user, input } = setup();

    await user.type(input, 'half-written');
    await user.click(screen.getByRole('tab', { name: 'Sessions' }));
    expect(await screen.findByText(/No sessions yet/)).toBeVisible();
    expect(input).not.toBeVisible();

    await user.click(screen.getByRole('tab', { name: 'Bench' }));
    expect(screen.getByTestId('bench-run')).toBeVisible();

    await user.click(screen.getByRole('tab', { name: 'Chat' }));
    expect(input).toBeVisible();
    expect(input).toHaveValue('half-written');
  });
});
