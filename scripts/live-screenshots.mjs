// Screenshots of the live graph for the README: the real app under Xvfb,
// driven through WebKitWebDriver like the E2E tests. A first session asks a few
// long questions a while apart (each stopped after a few seconds) and
// photographs the graph; a second session, on the same data folder after a
// restart and in the dark theme, photographs what the store brought back.
//
//   node scripts/live-screenshots.mjs OUT_DIR [MINUTES_OF_ACTIVITY]
//
// Needs DISPLAY (an Xvfb), WebKitWebDriver (webkit2gtk-driver) and target/debug/headroom.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { waitFor } from '../ui/e2e/webdriver.mjs';
import { withApp as withAppSession } from './app-session.mjs';

const out = path.resolve(process.argv[2] ?? 'test-output/live-shots');
const minutes = Number(process.argv[3] ?? 3);
const scratch = mkdtempSync(path.join(os.tmpdir(), 'headroom-shots-'));
mkdirSync(out, { recursive: true });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** The app on this run's own data folder and HF cache, with `env` added. */
function withApp(env, port, body) {
  return withAppSession({ HEADROOM_DATA_DIR: path.join(scratch, 'data'), HF_HUB_CACHE: path.join(scratch, 'hf'), ...env }, port, body);
}

async function ask(session, text, seconds) {
  const input = await session.byTestId('chat-input');
  await session.clear(input);
  await session.sendKeys(input, text);
  await session.click(await session.byTestId('send-button'));
  const stop = await session.waitForElement('[data-testid="stop-button"]', 10_000);
  await sleep(seconds * 1000);
  if ((await session.allByTestId('stop-button')).length) await session.click(stop);
  await waitFor(async () => (await session.allByTestId('send-button')).length > 0, { timeoutMs: 20_000, message: 'the answer to end' });
}

async function openGraph(session) {
  await session.click(await session.byTestId('live-graph'));
  await waitFor(
    async () => session.execute('return !!document.querySelector(\'[data-testid="live-chart"] [data-series="memory-used"]\');'),
    { timeoutMs: 10_000, message: 'the live graph' },
  );
  await sleep(1500);
}

try {
  await withApp({}, 4444, async (session) => {
    // Let the demo model load, and ask for long answers.
    await waitFor(async () => (await session.property(await session.byTestId('model-select'), 'value')) !== '', { timeoutMs: 40_000, message: 'the model' });
    await session.click(await session.byTestId('settings-button'));
    await session.waitForElement('[data-testid="max-tokens"]', 5_000);
    await session.execute(`const f = document.querySelector('[data-testid="max-tokens"]'); f.value = '8000'; f.dispatchEvent(new Event('change', { bubbles: true }));`);
    await session.click(await session.byTestId('settings-button'));
    const questions = ['Why does a 14B model swap on a 32 GB Mac?', 'Tell me about KV caches.', 'How fast is 7B at 4 bits?', 'What is memory pressure?'];
    const gap = (minutes * 60_000) / questions.length;
    for (const [i, q] of questions.entries()) {
      const began = Date.now();
      await ask(session, q, 4 + (i % 3) * 3);
      if (i < questions.length - 1) await sleep(Math.max(0, gap - (Date.now() - began)));
    }
    await openGraph(session);
    writeFileSync(path.join(out, 'live.png'), await session.screenshot(30_000));
  });
  await sleep(2000);
  // After a restart, in the dark theme: the graph comes back from the store.
  await withApp({ GTK_THEME: 'Adwaita:dark' }, 4454, async (session) => {
    await sleep(3000);
    await openGraph(session);
    writeFileSync(path.join(out, 'live-dark.png'), await session.screenshot(30_000));
  });
  console.log(`wrote ${out}/live.png and ${out}/live-dark.png`);
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
