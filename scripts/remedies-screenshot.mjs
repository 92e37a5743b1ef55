// The swap warning with its remedies, for the README: the real app under
// Xvfb (driven through WebKitWebDriver like the E2E tests) with a
// Qwen2.5-14B-shaped 8-bit model and its 4-bit sibling in the models folder
// (sparse: headers only). Picking the 8-bit one opens the warning with what
// would fit; the remedies depend on this machine's memory at that moment.
// The app's context limit is set first to the shortest of 8K … 64K at which
// `headroom fit` says the 8-bit model would swap and offers remedies (on a
// 24 GB machine it fits, tight, at the default 8K).
//
//   node scripts/remedies-screenshot.mjs OUT_DIR
//
// Needs DISPLAY (an Xvfb), WebKitWebDriver (webkit2gtk-driver) and target/debug/headroom.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { waitFor } from '../ui/e2e/webdriver.mjs';
import { BIN, withApp } from './app-session.mjs';

const out = path.resolve(process.argv[2] ?? 'test-output/remedies-shots');
const scratch = mkdtempSync(path.join(os.tmpdir(), 'headroom-remedies-'));
const data = path.join(scratch, 'data');
mkdirSync(out, { recursive: true });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

for (const bits of ['8', '4']) {
  const dir = path.join(data, 'models', `Qwen2.5-14B-Instruct-${bits}bit`);
  execFileSync(BIN, ['demo-model', dir, '--preset', 'qwen2.5-14b', '--bits', bits, '--sparse'], { stdio: 'ignore' });
}

const eightBit = path.join(data, 'models', 'Qwen2.5-14B-Instruct-8bit');
const context = [8192, 16384, 32768, 65536].find((c) => {
  const fit = JSON.parse(execFileSync(BIN, ['fit', eightBit, '--context', String(c), '--json'], { encoding: 'utf8' }));
  return fit.verdict.kind === 'would_swap' && fit.remedies.length > 0;
});
if (!context) throw new Error('the 8-bit 14B model swaps with remedies at no context up to 64K on this machine');

try {
  await withApp({ HEADROOM_DATA_DIR: data, HF_HUB_CACHE: path.join(scratch, 'hf') }, 4464, async (session) => {
    await session.click(await session.byTestId('settings-button'));
    await session.waitForElement('[data-testid="context-limit"]', 5_000);
    await session.execute(`
      const f = document.querySelector('[data-testid="context-limit"]');
      f.value = ${JSON.stringify(String(context))};
      f.dispatchEvent(new Event('change', { bubbles: true }));
    `);
    await session.waitForElement('.saved', 5_000);
    await session.click(await session.byTestId('settings-button'));
    await session.click(await session.byTestId('model-select'));
    await session.click(await session.find('[data-testid="model-option"][data-model-id="Qwen2.5-14B-Instruct-8bit"]'));
    const sheet = await session.waitForElement('[data-testid="fit-warning"]', 10_000);
    await waitFor(async () => (await session.allByTestId('fit-remedies')).length > 0, { timeoutMs: 5_000, message: 'the remedies' });
    await sleep(500);
    console.log(`context limit ${context}:\n${await session.text(sheet)}`);
    writeFileSync(path.join(out, 'fit-remedies.png'), await session.screenshot(30_000));
  });
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
