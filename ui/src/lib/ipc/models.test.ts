import { mockIPC } from '@tauri-apps/api/mocks';
import { describe, expect, it } from 'vitest';
import { modelEntry } from './contract.fixture';
import { onModelsChanged, type ModelEntry } from './models';

const DEMO: ModelEntry = modelEntry({
  id: 'headroom-demo-tiny',
  path: '/data/models/headroom-demo-tiny',
  arch: 'qwen2',
  bits: 4,
  size_bytes: 1_234_567,
  loaded: true,
});

describe('models', () => {
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
