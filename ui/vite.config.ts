/// <reference types="vitest/config" />
// Vite builds the popover's web UI; Tauri serves ui/dist through its custom
// protocol, so every URL in the bundle must be relative.
import { svelte } from '@sveltejs/vite-plugin-svelte';
import { svelteTesting } from '@testing-library/svelte/vite';
import { defineConfig } from 'vite';

export default defineConfig({
  base: './',
  plugins: [svelte(), svelteTesting()],
  // Tauri prints its own logs to the same terminal; keep them visible.
  clearScreen: false,
  server: {
    // Fixed so src-tauri's `devUrl` can point at it.
    port: 1420,
    strictPort: true,
  },
  envPrefix: ['VITE_', 'TAURI_ENV_'],
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    // MLX needs macOS 13.5+, whose WKWebView is Safari 16.6; WebKitGTK on
    // Linux is newer still.
    target: 'safari16',
    // A strict CSP without `data:` must still load everything.
    assetsInlineLimit: 0,
    sourcemap: false,
  },
  test: {
    environment: 'jsdom',
    include: ['src/**/*.test.ts'],
    setupFiles: ['./src/test-setup.ts'],
    restoreMocks: true,
  },
});
