// Vitest setup: DOM matchers and a clean Tauri IPC mock for every test.
import '@testing-library/jest-dom/vitest';
import { clearMocks } from '@tauri-apps/api/mocks';
import { afterEach } from 'vitest';

afterEach(() => {
  clearMocks();
});

// jsdom does no layout, so it has no scrollIntoView; the picker calls it.
if (!Element.prototype.scrollIntoView) Element.prototype.scrollIntoView = () => {};
