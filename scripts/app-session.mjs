// The real app under Xvfb for the README's screenshot scripts: WebKitWebDriver
// started on `port` (as the E2E starts it: ui/e2e/webdriver.mjs), one WebDriver session of target/debug/headroom with
// `env` added (the data folder, the HF cache, …), the popover's composer
// waited for, `body(session)` run, and everything stopped after.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { DRIVER_ENV, NATIVE_DRIVER, Session, appCapabilities, driverArgs } from '../ui/e2e/webdriver.mjs';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const BIN = path.join(repo, 'target/debug/headroom');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function withApp(env, port, body) {
  const driver = spawn(NATIVE_DRIVER, driverArgs(port), {
    env: { ...process.env, ...DRIVER_ENV, HEADROOM_SHOW_WINDOW: '1', ...env },
    stdio: 'ignore',
    detached: true,
  });
  try {
    await sleep(1500);
    const session = await Session.create(`http://127.0.0.1:${port}`, appCapabilities(BIN), { timeoutMs: 60_000 });
    try {
      await session.waitForElement('[data-testid="chat-input"]', 30_000);
      await body(session);
    } finally {
      await session.delete(10_000);
    }
  } finally {
    try {
      process.kill(-driver.pid, 'SIGTERM');
    } catch {
      // already gone
    }
    await sleep(1000);
    try {
      process.kill(-driver.pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
}
