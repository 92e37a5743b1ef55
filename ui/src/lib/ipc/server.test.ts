import { mockIPC } from '@tauri-apps/api/mocks';
import { describe, expect, it } from 'vitest';
import { PORT_UNAVAILABLE, serverStart, serverStatus, serverStop, type ServerInfo } from './server';

const RUNNING: ServerInfo = {
  url: 'http://127.0.0.1:8080/v1',
  port: 8080,
  requests: 3,
  completed: 2,
  cancelled: 1,
  active: 0,
};

describe('server', () => {
  it('starts, reports and stops through the three commands', async () => {
    const calls: Array<[string, unknown]> = [];
    mockIPC((cmd, args) => {
      calls.push([cmd, args]);
      if (cmd === 'server_stop') return true;
      return RUNNING;
    });
    await expect(serverStart()).resolves.toEqual(RUNNING);
    await expect(serverStart(9000)).resolves.toEqual(RUNNING);
    await expect(serverStatus()).resolves.toEqual(RUNNING);
    await expect(serverStop()).resolves.toBe(true);
    expect(calls).toEqual([
      ['server_start', {}],
      ['server_start', { port: 9000 }],
      ['server_status', {}],
      ['server_stop', {}],
    ]);
  });

  it('passes a taken port through as a CommandError', async () => {
    const error = { code: PORT_UNAVAILABLE, message: 'The local server: cannot listen on 127.0.0.1:8080: Address in use' };
    mockIPC(() => {
      throw error;
    });
    await expect(serverStart()).rejects.toEqual(error);
  });
});
