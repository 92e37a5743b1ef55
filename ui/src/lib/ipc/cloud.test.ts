import { mockIPC } from '@tauri-apps/api/mocks';
import { describe, expect, it } from 'vitest';
import { cloudKeyDelete, cloudKeySet, cloudKeyStatus, storageWords } from './cloud';

describe('cloud keys', () => {
  it('calls the key commands with camelCase arguments', async () => {
    const calls: [string, unknown][] = [];
    mockIPC((cmd, args) => {
      calls.push([cmd, args]);
      if (cmd === 'cloud_key_set') return 'file';
      if (cmd === 'cloud_key_status') return { stored: true, storage: 'file' };
      return true;
    });
    const url = 'https://api.example.com/v1';
    await expect(cloudKeySet(url, 'sk-1')).resolves.toBe('file');
    await expect(cloudKeyStatus(url)).resolves.toEqual({ stored: true, storage: 'file' });
    await expect(cloudKeyDelete(url)).resolves.toBe(true);
    expect(calls).toEqual([
      ['cloud_key_set', { baseUrl: url, key: 'sk-1' }],
      ['cloud_key_status', { baseUrl: url }],
      ['cloud_key_delete', { baseUrl: url }],
    ]);
  });

  it('says where a key lives in words', () => {
    expect(storageWords('file')).toBe('stored in a file only you can read');
    expect(storageWords('keychain')).toBe('stored in the system keychain');
  });
});
