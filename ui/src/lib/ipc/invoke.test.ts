import { describe, expect, it } from 'vitest';
import { IPC_ERROR, NO_BACKEND, isCommandError, toCommandError } from './invoke';

describe('toCommandError', () => {
  it('keeps a CommandError as it is, details included', () => {
    const error = { code: 'MODEL_TOO_LARGE', message: 'It would swap.', details: { over_gb: 2.3 } };
    expect(toCommandError(error)).toBe(error);
  });

  it('wraps a bare string', () => {
    expect(toCommandError('missing required key text')).toEqual({
      code: IPC_ERROR,
      message: 'missing required key text',
    });
  });

  it('maps a JS exception to NO_BACKEND and keeps its message as details', () => {
    const error = toCommandError(new TypeError("Cannot read properties of undefined (reading 'invoke')"));
    expect(error.code).toBe(NO_BACKEND);
    expect(error.details).toContain('invoke');
  });

  it('does not mistake look-alikes for CommandErrors', () => {
    expect(isCommandError({ code: 1, message: 'x' })).toBe(false);
    expect(isCommandError({ code: 'X' })).toBe(false);
    expect(isCommandError(null)).toBe(false);
  });
});
