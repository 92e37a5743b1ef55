import { mockIPC } from '@tauri-apps/api/mocks';
import { describe, expect, it } from 'vitest';
import { DEFAULT_SETTINGS } from './settings.fixture';
import {
  sessionCreate,
  sessionDelete,
  sessionExport,
  sessionImport,
  sessionMessages,
  sessionRename,
  sessionSearch,
  sessionsList,
} from './sessions';
import { settingsGet, settingsSet, type Settings } from './settings';

describe('sessions', () => {
  it('calls each command with camelCase arguments', async () => {
    const calls: Array<[string, unknown]> = [];
    mockIPC((cmd, args) => {
      calls.push([cmd, args]);
      return cmd === 'session_delete' ? true : [];
    });
    await sessionsList();
    await sessionCreate();
    await sessionCreate({ title: 'Plans' });
    await sessionCreate({ firstMessage: 'How fast is 14B?' });
    await sessionRename('s1', 'Trips');
    await expect(sessionDelete('s1')).resolves.toBe(true);
    await sessionSearch('50%');
    await sessionMessages('s1');
    await sessionExport('s1', 'md');
    await sessionImport('{"format":"headroom-session"}');
    expect(calls).toEqual([
      ['sessions_list', {}],
      ['session_create', {}],
      ['session_create', { title: 'Plans' }],
      ['session_create', { firstMessage: 'How fast is 14B?' }],
      ['session_rename', { sessionId: 's1', title: 'Trips' }],
      ['session_delete', { sessionId: 's1' }],
      ['session_search', { text: '50%' }],
      ['session_messages', { sessionId: 's1' }],
      ['session_export', { sessionId: 's1', format: 'md' }],
      ['session_import', { json: '{"format":"headroom-session"}' }],
    ]);
  });

  it('passes store errors through as CommandErrors', async () => {
    const error = { code: 'SESSION_NOT_FOUND', message: 'no session `x`' };
    mockIPC(() => {
      throw error;
    });
    await expect(sessionMessages('x')).rejects.toEqual(error);
  });
});

describe('settings', () => {
  it('reads and writes the whole struct', async () => {
    const settings: Settings = { ...DEFAULT_SETTINGS, kvBits: 8, quantizedKvStart: 0 };
    const calls: Array<[string, unknown]> = [];
    mockIPC((cmd, args) => {
      calls.push([cmd, args]);
      return settings;
    });
    await expect(settingsGet()).resolves.toEqual(settings);
    await expect(settingsSet(settings)).resolves.toEqual(settings);
    expect(calls).toEqual([
      ['settings_get', {}],
      ['settings_set', { settings }],
    ]);
  });
});
