import { describe, expect, it } from 'vitest';
import { storageWords } from './cloud';

describe('cloud keys', () => {
  it('says where a key lives in words', () => {
    expect(storageWords('file')).toBe('stored in a file only you can read');
    expect(storageWords('keychain')).toBe('stored in the system keychain');
  });
});
