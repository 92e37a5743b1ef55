import { mockIPC } from '@tauri-apps/api/mocks';
import { describe, expect, it } from 'vitest';
import { modelEntry } from './contract.fixture';
import { modelLoad, modelsList, onModelsChanged, type ModelEntry } from './models';

const DEMO: ModelEntry = modelEntry({
  id: 'headroom-demo-tiny',
  path: '/data/models/headroom-demo-tiny',
  arch: 'qwen2',
  bits: 4,
  size_bytes: 1_234_567,
  loaded: true,
});

describe('models', () => {
  it('lists with models_list and loads with model_load { id }', async () => {
    const calls: Array<[string, unknown]> = [];
    mockIPC((cmd, args) => {
      calls.push([cmd, args]);
      return cmd === 'models_list' ? [DEMO] : DEMO;
    });

    await expect(modelsList()).resolves.toEqual([DEMO]);
    await expect(modelLoad('headroom-demo-tiny')).resolves.toEqual(DEMO);
    expect(calls).toEqual([
      ['models_list', {}],
      ['model_load', { id: 'headroom-demo-tiny' }],
    ]);
  });

  it('passes a failed load through as a CommandError', async () => {
    const error = { code: 'MODEL_NOT_FOUND', message: 'The model x is no longer on this Mac.' };
    mockIPC(() => {
      throw error;
    });
    await expect(modelLoad('x')).rejects.toEqual(error);
  });

  it('hears models-changed broadcasts and can stop listening', async () => {
    mockIPC(() => null, { shouldMockEvents: true });
    const { emit } = await import('@tauri-apps/api/event');
    let heard = 0;
    const stop = await onModelsChanged(() => heard++);
    await emit('models-changed');
    expect(heard).toBe(1);
    stop();
    await new Promise((resolve) => setTimeout(resolve, 0)); // unlisten is async
    await emit('models-changed');
    expect(heard).toBe(1);
  });
});
