import { describe, expect, it } from 'vitest';
import type { ModelEntry } from '../ipc/models';
import { modelEntry } from '../ipc/contract.fixture';
import { formatAppInfo, modelFacts } from './format';

const model = (o: Partial<ModelEntry> = {}): ModelEntry =>
  modelEntry({
  id: 'm',
  name: 'Qwen2.5-7B-Instruct-4bit',
  path: '/m',
  arch: 'qwen2',
  bits: 4,
  size_bytes: 4_300_000_000,
  loaded: false,
  ...o,
});

describe('formatAppInfo', () => {
  it('is the quiet footer line', () => {
    expect(formatAppInfo({ version: '0.1.0', mlx_version: '0.32.2', device: 'cpu', platform: 'linux' })).toBe(
      'v0.1.0 · MLX cpu',
    );
  });
});

describe('modelFacts', () => {
  it('names the model, its quantization and size', () => {
    expect(modelFacts(model())).toBe('4-bit · 4.0 GB');
    expect(modelFacts(model({ bits: null, size_bytes: 1_600_000 }))).toBe('2 MB');
    expect(modelFacts(model({ size_bytes: 10 }))).toContain('1 MB');
  });
});
