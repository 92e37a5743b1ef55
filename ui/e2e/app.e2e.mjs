// End-to-end tests of the real app: WebKitWebDriver drives the popover of
// target/debug/headroom under an X display (Xvfb), started as tauri-driver
// would start it (webdriver.mjs: NATIVE_DRIVER, DRIVER_ENV, appCapabilities).
//
//   DISPLAY=:99 node --test ui/e2e/            (e2e.test.mjs imports this file)
//   DISPLAY=:99 node --test ui/e2e/app.e2e.mjs
//
// The app runs on a fresh data folder (HEADROOM_DATA_DIR, removed afterwards)
// and an empty HF cache, so it sets up and loads its default model, the real
// SmolLM2-135M-Instruct that `make setup` unpacks (a GGUF file), and chats
// with that: answers are checked for their words, not just their shape.
//
// Env: HEADROOM_BIN (default ../../target/debug/headroom from here),
//      HEADROOM_TEST_OUTPUT (default <repo>/test-output; files go to its e2e/),
//      WEBKIT_WEBDRIVER (default WebKitWebDriver on the PATH).
// Without DISPLAY a private Xvfb is started for the run; a private D-Bus
// session bus always is (the single-instance lock lives on it on Linux).
// The app's `xdg-open` is a stand-in that writes down the URLs it is given,
// so no browser starts and the test sees what the popover handed to it.
// Every request, wait and hook is bounded: the file ends within ~2 minutes
// even when the app is broken, and leaves no process behind.

import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { appendFileSync, closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, readdirSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import { DRIVER_ENV, Keys, NATIVE_DRIVER, Session, appCapabilities, driverArgs, waitFor } from './webdriver.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '../..');
const BIN = path.resolve(process.env.HEADROOM_BIN || path.join(here, '../../target/debug/headroom'));
const OUT = path.join(path.resolve(process.env.HEADROOM_TEST_OUTPUT || path.join(repo, 'test-output')), 'e2e');
const DRIVER = NATIVE_DRIVER;

// The model a fresh install starts with (src-tauri/src/default_model.rs).
const DEFAULT_MODEL_ID = 'SmolLM2-135M-Instruct';
const DEFAULT_MODEL_FILE = 'SmolLM2-135M-Instruct.Q4_1.gguf';
// A model whose weight header claims 200 GB (a sparse file: no data on
// disk), put into the data folder before the app starts: too big to load.
const HUGE_MODEL_ID = 'huge-demo';
const HUGE_CLAIMED = 200_000_000_000;
const WHOLE_FILE_MS = 240_000; // watchdog: the file may never take longer
// The app's data folder and HF cache for this run: empty, so the app sets
// up its default model there.
const SCRATCH = mkdtempSync(path.join(os.tmpdir(), 'headroom-e2e-'));
const DATA_DIR = path.join(SCRATCH, 'data');
const HF_CACHE = path.join(SCRATCH, 'hf-cache');
// The stand-in browser: `xdg-open URL` (what the opener plugin runs first on
// Linux) appends URL to OPENED.
const FAKE_BIN = path.join(SCRATCH, 'bin');
const OPENED = path.join(SCRATCH, 'opened.txt');
const run = promisify(execFile);

// ---- processes ---------------------------------------------------------------

/** pid → { ppid, pgrp, state } for every process, from /proc. */
function processTable() {
  const table = new Map();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      // "pid (comm) state ppid pgrp ..." — comm may contain spaces and parentheses.
      const [state, ppid, pgrp] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      table.set(Number(name), { state, ppid: Number(ppid), pgrp: Number(pgrp) });
    } catch {
      // gone meanwhile
    }
  }
  return table;
}

/** Every descendant of `root` (children first-level to deepest). */
function descendants(root) {
  const table = processTable();
  const found = [];
  const queue = [root];
  while (queue.length) {
    const parent = queue.shift();
    for (const [pid, { ppid }] of table) {
      if (ppid === parent && !found.includes(pid)) {
        found.push(pid);
        queue.push(pid);
      }
    }
  }
  return found;
}

/** Live (not zombie) members of process group `pgid`. */
function groupMembers(pgid) {
  return [...processTable()].filter(([, p]) => p.pgrp === pgid && p.state !== 'Z').map(([pid]) => pid);
}

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function signal(pid, sig) {
  try {
    process.kill(pid, sig);
  } catch {
    // already gone
  }
}

/**
 * Ends a process we started (spawned `detached`, so it leads its own process
 * group) with everything under it: TERM, then KILL after `graceMs`.
 */
async function killTree(child, graceMs = 3000) {
  if (!child?.pid) return;
  const pids = [child.pid, ...descendants(child.pid)];
  signal(-child.pid, 'SIGTERM');
  for (const pid of pids) signal(pid, 'SIGTERM');
  const deadline = Date.now() + graceMs;
  while (Date.now() < deadline && pids.some(alive)) await new Promise((r) => setTimeout(r, 100));
  // Anything spawned meanwhile, or that ignored TERM.
  for (const pid of [...pids, ...descendants(child.pid)]) signal(pid, 'SIGKILL');
  signal(-child.pid, 'SIGKILL');
}

/**
 * The WebDriver server runs under this small bash guard, in a process group of its
 * own (guard, WebKitWebDriver, the app). The guard ends the
 * group when this test process is gone, however it went: a signal or SIGKILL
 * to Node runs none of its handlers. $1: our pid; the rest: the command.
 */
const GUARD = `
trap ':' TERM  # survive our own group TERM below (children get the default)
owner=$1; shift
"$@" &
child=$!
while kill -0 "$child" 2>/dev/null; do
  if ! kill -0 "$owner" 2>/dev/null; then
    kill -TERM 0; sleep 2; kill -KILL 0
  fi
  sleep 0.5
done
wait "$child"
`;

/** Synchronous last resort for process exit (no awaiting possible there). */
function killTreeNow(child) {
  if (!child?.pid) return;
  for (const pid of [child.pid, ...descendants(child.pid)]) signal(pid, 'SIGKILL');
  signal(-child.pid, 'SIGKILL');
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

function canConnect(port) {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host: '127.0.0.1' });
    const done = (ok) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(1000, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

/** The last `n` lines of a log file, for error messages. */
function tail(file, n = 25) {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-n).join('\n');
  } catch {
    return '(no log)';
  }
}

/** Starts a private Xvfb when no display was given; returns the child or null. */
async function ensureDisplay() {
  if (process.env.DISPLAY) return null;
  let n = 90;
  while (n < 200 && (existsSync(`/tmp/.X11-unix/X${n}`) || existsSync(`/tmp/.X${n}-lock`))) n++;
  const display = `:${n}`;
  const xvfb = spawn('Xvfb', [display, '-screen', '0', '1280x800x24', '-nolisten', 'tcp', '-noreset'], {
    stdio: 'ignore',
    detached: true,
  });
  await waitFor(() => existsSync(`/tmp/.X11-unix/X${n}`), {
    timeoutMs: 10_000,
    message: `Xvfb on ${display} (no DISPLAY was set)`,
  });
  process.env.DISPLAY = display;
  return xvfb;
}

/**
 * Starts a private D-Bus session bus; resolves to { child, address }. The
 * single-instance plugin needs one on Linux (without it, it lets a second
 * launch run, and the test would say so).
 */
async function startDbus() {
  const child = spawn('dbus-daemon', ['--session', '--nofork', '--nopidfile', '--print-address=1'], {
    stdio: ['ignore', 'pipe', 'ignore'],
    detached: true,
  });
  let out = '';
  child.stdout.on('data', (chunk) => (out += chunk));
  const address = await waitFor(() => out.includes('\n') && out.trim(), {
    timeoutMs: 10_000,
    message: 'dbus-daemon to print its address (Debian package dbus-daemon)',
  });
  return { child, address };
}

/** The stand-in `xdg-open` in FAKE_BIN. */
function writeFakeBrowser() {
  mkdirSync(FAKE_BIN, { recursive: true });
  const script = path.join(FAKE_BIN, 'xdg-open');
  writeFileSync(script, `#!/bin/sh\nprintf '%s\\n' "$1" >> '${OPENED}'\n`, { mode: 0o755 });
}

/** The URLs the app asked the OS to open so far. */
function openedUrls() {
  try {
    return readFileSync(OPENED, 'utf8').split('\n').filter(Boolean);
  } catch {
    return [];
  }
}

/** Ids of the app's mapped (visible) windows titled exactly "Headroom". */
async function visiblePopovers(pid) {
  try {
    const { stdout } = await run('xdotool', ['search', '--all', '--onlyvisible', '--pid', String(pid), '--name', '^Headroom$'], { timeout: 5_000 });
    return stdout.split('\n').filter(Boolean);
  } catch {
    return []; // xdotool exits 1 when nothing matches
  }
}

/** Width and height from a PNG's IHDR chunk. */
function pngSize(buffer) {
  assert.equal(buffer.subarray(0, 8).toString('hex'), '89504e470d0a1a0a', 'the screenshot is not a PNG');
  return { width: buffer.readUInt32BE(16), height: buffer.readUInt32BE(20) };
}

// ---- the suite ------------------------------------------------------------------

describe('Headroom popover (real app, WebDriver)', { timeout: WHOLE_FILE_MS }, () => {
  let xvfb = null;
  let dbus = null; // { child, address }
  let driver = null;
  let session = null;
  let expected = null; // { version, mlx_version, device, platform } from the binary itself
  let driverUrl = null; // the WebDriver server's URL, to open a second app session (the restart)
  const driverLog = path.join(OUT, 'webdriver.log');

  // Whatever happens (a hung hook, an uncaught error), nothing outlives us.
  const watchdog = setTimeout(() => {
    process.stderr.write(`e2e: watchdog: still running after ${WHOLE_FILE_MS} ms, killing the driver and the app\n`);
    killTreeNow(driver);
    killTreeNow(xvfb);
    killTreeNow(dbus?.child);
    process.exit(1);
  }, WHOLE_FILE_MS + 5_000);
  watchdog.unref();
  process.once('exit', () => {
    killTreeNow(driver);
    killTreeNow(xvfb);
    killTreeNow(dbus?.child);
    // HEADROOM_E2E_KEEP=1 keeps the app's data folder (its logs) to look at after a failure.
    if (!process.env.HEADROOM_E2E_KEEP) rmSync(SCRATCH, { recursive: true, force: true });
  });
  // A signal would end Node without its 'exit' event; the driver runs in its
  // own process group, so nobody else would stop it.
  for (const [sig, code] of [['SIGINT', 130], ['SIGTERM', 143], ['SIGHUP', 129]]) {
    process.once(sig, () => {
      killTreeNow(driver);
      killTreeNow(xvfb);
      killTreeNow(dbus?.child);
      process.exit(code);
    });
  }

  /** The app's answer, read from the binary (never hard-coded here). */
  async function readExpected() {
    const { stdout: versionOut } = await run(BIN, ['--version'], { timeout: 20_000 });
    const version = versionOut.trim().match(/^headroom (\S+)$/)?.[1];
    assert.ok(version, `unexpected \`headroom --version\` output: ${JSON.stringify(versionOut)}`);
    const { stdout: backendOut } = await run(BIN, ['backend', '--json'], { timeout: 20_000 });
    let backend;
    try {
      backend = JSON.parse(backendOut);
    } catch {
      assert.fail(`\`headroom backend --json\` did not print JSON: ${JSON.stringify(backendOut)}`);
    }
    for (const key of ['version', 'mlx_version', 'device', 'platform']) {
      assert.equal(typeof backend[key], 'string', `backend --json lacks "${key}": ${backendOut}`);
    }
    assert.equal(backend.version, version, '`--version` and `backend --json` disagree on the version');
    return backend;
  }

  /** The app's environment (under the driver, and for a second launch). */
  function appEnv() {
    return {
      ...process.env,
      HEADROOM_DATA_DIR: DATA_DIR,
      HF_HUB_CACHE: HF_CACHE,
      // No test may reach the real hub: a closed loopback port refuses at once.
      HF_ENDPOINT: 'http://127.0.0.1:9',
      DBUS_SESSION_BUS_ADDRESS: dbus?.address ?? '',
      PATH: `${FAKE_BIN}:${process.env.PATH}`,
    };
  }

  /** Starts the WebDriver server on a free port; resolves to its URL once it listens. */
  async function startDriver() {
    const port = await freePort();
    appendFileSync(driverLog, `--- ${new Date().toISOString()} ${DRIVER} ${driverArgs(port).join(' ')}\n`);
    // The driver (and the app under it) write straight into the log file:
    // nothing to pipe, and the log stays complete even if Node dies first.
    const log = openSync(driverLog, 'a');
    driver = spawn('bash', ['-c', GUARD, 'e2e-guard', String(process.pid), DRIVER, ...driverArgs(port)], {
      env: { ...appEnv(), ...DRIVER_ENV, HEADROOM_SHOW_WINDOW: '1' },
      stdio: ['ignore', log, log],
      detached: true, // its own process group: killTree takes WebKitWebDriver and the app too
    });
    closeSync(log);
    let exited = null;
    let spawnError = null;
    driver.once('exit', (code, sig) => (exited = `exited with ${sig ?? code}`));
    driver.once('error', (e) => (spawnError = e));

    await waitFor(
      async () => {
        if (spawnError) throw new Error(`could not start ${DRIVER}: ${spawnError.message}`);
        if (exited) throw new Error(`${DRIVER} ${exited}`);
        return canConnect(port);
      },
      { timeoutMs: 15_000, intervalMs: 200, message: `${DRIVER} to listen on port ${port}` },
    ).catch((e) => {
      throw new Error(`${e.message}\n--- WebDriver log (${driverLog}) ---\n${tail(driverLog)}`);
    });
    return `http://127.0.0.1:${port}`;
  }

  /** Processes under the driver that run the app binary (zombies excluded). */
  function appPids() {
    if (!driver?.pid) return [];
    return descendants(driver.pid).filter((pid) => {
      try {
        return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').slice(0, 2).includes(BIN);
      } catch {
        return false;
      }
    });
  }

  /**
   * POST /session, watching the app meanwhile: WebKitWebDriver does not
   * notice an app that died while starting and would wait out the timeout.
   */
  async function openSession(baseUrl) {
    const giveUp = new AbortController();
    const began = Date.now();
    let seen = false;
    // WebKitWebDriver forks the app as soon as it gets the request, so no app
    // process 3 s later means it died at once (too fast for this poll to see).
    const monitor = setInterval(() => {
      const running = appPids().length > 0;
      if (running) seen = true;
      else if (seen) giveUp.abort(new Error(`the app exited ${Date.now() - began} ms after it was started`));
      else if (Date.now() - began > 3_000) giveUp.abort(new Error('the app is not running 3 s after the session request (it died at start?)'));
    }, 100);
    try {
      return await Session.create(
        baseUrl,
        appCapabilities(BIN),
        { timeoutMs: 40_000, requestTimeoutMs: 15_000, signal: giveUp.signal },
      );
    } catch (e) {
      const error = new Error(
        `could not open a WebDriver session on ${BIN}: ${e.message}\n--- WebDriver log (${driverLog}) ---\n${tail(driverLog)}`,
        { cause: e },
      );
      error.appDied = giveUp.signal.aborted;
      throw error;
    } finally {
      clearInterval(monitor);
    }
  }

  /** The sparse huge model: the demo model's config, one bf16 tensor header claiming HUGE_CLAIMED bytes. */
  async function writeHugeModel(dir) {
    await run(BIN, ['demo-model', dir, '--preset', 'tiny', '--bits', '16'], { timeout: 30_000 });
    for (const f of readdirSync(dir)) if (f.startsWith('model.safetensors')) rmSync(path.join(dir, f));
    const rows = HUGE_CLAIMED / 2 / 1_000_000;
    const header = Buffer.from(
      JSON.stringify({ 'model.embed_tokens.weight': { dtype: 'BF16', shape: [rows, 1_000_000], data_offsets: [0, HUGE_CLAIMED] } }),
    );
    const len = Buffer.alloc(8);
    len.writeBigUInt64LE(BigInt(header.length));
    const file = path.join(dir, 'model.safetensors');
    writeFileSync(file, Buffer.concat([len, header]));
    truncateSync(file, 8 + header.length + HUGE_CLAIMED); // sparse: no data on disk
  }

  /** Everything the tests need: the expected values, a display, a session. */
  async function setUp() {
    mkdirSync(OUT, { recursive: true });
    writeFileSync(driverLog, ''); // this run's log only
    rmSync(path.join(OUT, 'popover.png'), { force: true }); // never show a stale picture
    rmSync(path.join(OUT, 'fit-warning.png'), { force: true });
    assert.ok(existsSync(BIN), `no app binary at ${BIN}: run \`cargo build -p headroom\` (after \`cd ui && npm run build\`), or set HEADROOM_BIN`);
    expected = await readExpected();
    await writeHugeModel(path.join(DATA_DIR, 'models', HUGE_MODEL_ID));
    xvfb = await ensureDisplay();
    dbus = await startDbus();
    writeFakeBrowser();

    // Xvfb refuses connections for a moment after its last client left
    // (a server reset), so an app started just then dies at once: when the
    // app dies early, start over once with a fresh driver.
    for (let attempt = 1; ; attempt++) {
      const began = Date.now();
      try {
        const baseUrl = await startDriver();
        session = await openSession(baseUrl);
        driverUrl = baseUrl;
        break;
      } catch (e) {
        const early = e.appDied && Date.now() - began < 15_000;
        if (attempt >= 2 || !early) throw e;
        process.stderr.write(`e2e: the app died while starting (${e.message.split('\n')[0]}); trying once more\n`);
        await killTree(driver);
        driver = null;
        await new Promise((r) => setTimeout(r, 500));
      }
    }
    // The UI is mounted once the composer exists.
    await session.waitForElement('[data-testid="chat-input"]', 20_000);
  }

  // A failed set-up fails every test (so the runner counts them as failed,
  // not as cancelled), the first with the whole story, the rest in one line.
  let setupError = null;
  let setupReported = false;
  function requireApp() {
    if (!setupError) return;
    if (!setupReported) {
      setupReported = true;
      throw setupError;
    }
    throw new Error(`no app to test (set-up failed: ${setupError.message.split('\n')[0]})`);
  }

  before(
    async () => {
      const work = setUp();
      work.catch(() => {}); // still settles after a deadline: never unhandled
      let timer;
      const deadline = new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`set-up took over 85 s\n--- WebDriver log ---\n${tail(driverLog)}`)), 85_000);
      });
      try {
        await Promise.race([work, deadline]);
      } catch (e) {
        setupError = e;
      } finally {
        clearTimeout(timer);
      }
    },
    { timeout: 90_000 },
  );

  after(
    async () => {
      clearTimeout(watchdog);
      if (session) {
        const error = await session.delete(10_000);
        if (error) process.stderr.write(`e2e: deleting the session failed (killing instead): ${error.message}\n`);
      }
      await killTree(driver);
      await killTree(xvfb, 1000);
      await killTree(dbus?.child, 1000);
      if (process.env.HEADROOM_E2E_KEEP) process.stderr.write(`e2e: kept ${SCRATCH}\n`);
      else rmSync(SCRATCH, { recursive: true, force: true });
      // The guard's group: WebKitWebDriver, the app and its web processes.
      const left = driver?.pid ? groupMembers(driver.pid) : [];
      assert.deepEqual(left, [], 'processes left behind by the WebDriver server and the app');
    },
    { timeout: 20_000 },
  );

  test('the popover is the app: title, size, composer, version footer', { timeout: 20_000 }, async () => {
    requireApp();
    assert.equal(await session.title(), 'Headroom');
    const size = await session.execute('return [window.innerWidth, window.innerHeight];');
    assert.deepEqual(size, [420, 640], 'the popover is 420×640');

    const input = await session.byTestId('chat-input');
    assert.equal(await session.displayed(input), true, 'chat-input is displayed');
    assert.equal(await session.property(input, 'tagName'), 'TEXTAREA');
    // ChatView focuses the composer on mount.
    const focusedAtStart = await session.execute(
      'return document.activeElement && document.activeElement.getAttribute("data-testid");',
    );
    assert.equal(focusedAtStart, 'chat-input', 'the composer has focus when the popover opens');
    // …and it takes focus back when clicked after something else had it.
    await session.execute('document.querySelector(\'[data-testid="settings-button"]\').focus();');
    await session.click(input);
    const active = await session.activeElement();
    assert.equal(Session.elementId(active), Session.elementId(input), 'clicking chat-input focuses it');

    const send = await session.byTestId('send-button');
    assert.equal(await session.enabled(send), false, 'send is disabled while the composer is empty');

    const footer = await session.byTestId('app-info');
    const footerText = await waitFor(async () => (await session.text(footer)).trim(), {
      timeoutMs: 10_000,
      message: 'the app-info footer to be filled in by app_info',
    });
    assert.equal(footerText, `v${expected.version} · MLX ${expected.device}`);
    const title = await session.attribute(footer, 'title');
    assert.ok(title?.includes(`Headroom ${expected.version}`), `footer title: ${title}`);
    assert.ok(title?.includes(`MLX ${expected.mlx_version} on ${expected.device}`), `footer title: ${title}`);
  });

  /** The assistant messages so far. */
  const answers = () => session.allByTestId('message-assistant');

  /** Types `text` into the composer and clicks Send. */
  async function sendMessage(text) {
    const input = await session.byTestId('chat-input');
    await session.clear(input);
    await session.sendKeys(input, text);
    assert.equal(await session.property(input, 'value'), text);
    const send = await session.byTestId('send-button');
    await waitFor(() => session.enabled(send), { timeoutMs: 5_000, message: 'send-button to be enabled' });
    await session.click(send);
  }

  /** Waits until the `n`th answer (1-based) has finished; returns its element and reason. */
  async function finishedAnswer(n, timeoutMs) {
    try {
      return await waitFor(
        async () => {
          const el = (await answers())[n - 1];
          const reason = el && (await session.attribute(el, 'data-finish-reason'));
          return reason ? { el, reason } : false;
        },
        { timeoutMs, intervalMs: 150, message: `answer ${n} to finish` },
      );
    } catch (e) {
      // What the popover showed instead, for the log and test-output/e2e/.
      const shown = await session.execute('return document.body.innerText;', []).catch(() => '(unreadable)');
      const input = await session.byTestId('chat-input').then((i) => session.property(i, 'value')).catch(() => '?');
      writeFileSync(path.join(OUT, `answer-${n}-unfinished.png`), await session.screenshot(30_000).catch(() => Buffer.alloc(0)));
      throw new Error(`${e.message}\n--- the composer held: ${JSON.stringify(input)}\n--- the popover showed:\n${String(shown).slice(-1500)}`);
    }
  }

  test('the default model, a real one, is set up, loaded and offered in the picker', { timeout: 40_000 }, async () => {
    requireApp();
    const select = await session.byTestId('model-select');
    await waitFor(async () => (await session.property(select, 'value')) === DEFAULT_MODEL_ID, {
      timeoutMs: 35_000,
      intervalMs: 250,
      message: `model-select to show the loaded ${DEFAULT_MODEL_ID}`,
    });
    await session.click(select);
    const options = await session.allByTestId('model-option');
    const ids = await Promise.all(options.map((o) => session.attribute(o, 'data-model-id')));
    assert.deepEqual(ids, [DEFAULT_MODEL_ID, HUGE_MODEL_ID], 'the data folder holds the default model and the huge one, smallest first');
    // Loaded but never run: its figure is the formula's.
    const basis = await session.text(await session.find(`[data-model-id="${DEFAULT_MODEL_ID}"] [data-testid="model-basis"]`));
    assert.equal(basis.trim(), ', estimated', `the default row says what its figure rests on: ${basis}`);
    await session.click(select);
    await waitFor(async () => (await session.allByTestId('model-option')).length === 0, { timeoutMs: 5_000, message: 'the list to close' });
    assert.ok(existsSync(path.join(DATA_DIR, 'models', DEFAULT_MODEL_ID, DEFAULT_MODEL_FILE)), 'the default model is in HEADROOM_DATA_DIR');
    assert.ok((await session.text(await session.byTestId('route-chip'))).includes(DEFAULT_MODEL_ID), 'the route chip names the model');
  });

  test('picking the huge model opens the swap warning with numbers; Cancel keeps the default model', { timeout: 40_000 }, async () => {
    requireApp();
    // Choose it as a user would: open the list, click its row.
    await session.click(await session.byTestId('model-select'));
    const options = await session.allByTestId('model-option');
    const verdicts = {};
    for (const o of options) verdicts[await session.attribute(o, 'data-model-id')] = await session.attribute(o, 'data-verdict');
    assert.equal(verdicts[HUGE_MODEL_ID], 'cannot_fit', `verdicts: ${JSON.stringify(verdicts)}`);
    assert.ok(['fits', 'tight'].includes(verdicts[DEFAULT_MODEL_ID]), `verdicts: ${JSON.stringify(verdicts)}`);
    const png0 = await session.screenshot(30_000);
    writeFileSync(path.join(OUT, 'model-list.png'), png0);
    await session.click(await session.find(`[data-testid="model-option"][data-model-id="${HUGE_MODEL_ID}"]`));
    const sheet = await session.waitForElement('[data-testid="fit-warning"]', 5_000);
    const text = await session.text(sheet);
    assert.match(text, new RegExp(`${HUGE_MODEL_ID} would push this Mac into swap by [\\d.]+ GB at 8K context`), text);
    assert.ok(text.includes('186.3 GB'), `the weights (200 GB = 186.3 GiB) are shown: ${text}`);
    for (const label of ['Weights', 'KV cache', 'Overhead', 'Budget', 'Largest context that fits']) {
      assert.ok(text.includes(label), `the warning shows ${label}: ${text}`);
    }
    assert.equal(await session.text(await session.byTestId('fit-largest')), 'none');
    // No KV cache, quantization on disk or context would make 200 GB fit: the sheet says so.
    assert.match(await session.text(await session.byTestId('fit-remedies-none')), /^Nothing on this Mac would/);
    await session.byTestId('fit-warning-load-anyway');
    const cancel = await session.byTestId('fit-warning-cancel');
    assert.equal(await session.execute('return document.activeElement?.dataset.testid;'), 'fit-warning-cancel', 'Cancel has the focus');

    const png = await session.screenshot(30_000);
    writeFileSync(path.join(OUT, 'fit-warning.png'), png);

    await session.click(cancel);
    await waitFor(async () => (await session.allByTestId('fit-warning')).length === 0, { timeoutMs: 5_000, message: 'the warning to close' });
    assert.equal(await session.property(await session.byTestId('model-select'), 'value'), DEFAULT_MODEL_ID, 'the default model stays loaded');
  });

  test('the starter shelf: real models with their fit here, what fits first; a click starts the pull', { timeout: 40_000 }, async () => {
    requireApp();
    // The empty chat offers the first few, under the default model.
    const empty = await session.waitForElement('[data-testid="shelf-empty"]', 10_000);
    assert.match(await session.text(empty), /^More models that fit this Mac/, 'the empty chat offers more models');
    const starters = await session.allByTestId('shelf-starter');
    assert.ok(starters.length >= 1 && starters.length <= 4, `a few starters, not a catalogue: ${starters.length}`);
    assert.equal(await session.attribute(starters[0], 'data-verdict'), 'fits', 'the first starter fits');

    await session.click(await session.byTestId('model-select'));
    const rows = await waitFor(
      async () => {
        const found = await session.execute(
          `return [...document.querySelectorAll('[data-testid="shelf-option"]')].map((r) => ({
             repo: r.dataset.repo, verdict: r.dataset.verdict,
             facts: r.querySelector('[data-testid="shelf-facts"]')?.textContent ?? '',
             why: r.querySelector('[data-testid="shelf-why"]')?.textContent ?? null }));`,
          [],
        );
        return found.length >= 6 && found;
      },
      { timeoutMs: 10_000, intervalMs: 250, message: 'the shelf rows in the model list' },
    );
    const rank = { fits: 0, tight: 1, would_swap: 2, cannot_fit: 3 };
    const ranks = rows.map((r) => rank[r.verdict]);
    assert.ok(ranks.every((r) => r !== undefined), `every row has a verdict: ${JSON.stringify(rows)}`);
    assert.deepEqual(ranks, [...ranks].sort((a, b) => a - b), `what fits comes first: ${JSON.stringify(rows)}`);
    const fits = rows.find((r) => r.verdict === 'fits');
    const refused = rows.find((r) => rank[r.verdict] >= 2);
    assert.ok(fits && refused, `this 24 GB machine has a row that fits and one that does not: ${JSON.stringify(rows)}`);
    assert.match(fits.facts, /^4-bit · [\d.]+ GB download · needs [\d.]+ GB$/, fits.facts);
    assert.equal(fits.why, null, 'a row that fits gives no reason');
    assert.match(refused.facts, /needs [\d.]+ GB$/, refused.facts);
    assert.match(refused.why ?? '', /^[\d.]+ GB over this Mac's [\d.]+ GB budget (at \d+ tokens|even at the shortest context)/, refused.why);
    // The screenshot shows the shelf's end: the largest models, and why they do not fit.
    await session.execute(`const l = document.querySelector('[role="listbox"]'); l.scrollTop = l.scrollHeight;`, []);
    await new Promise((r) => setTimeout(r, 300));
    writeFileSync(path.join(OUT, 'shelf.png'), await session.screenshot(30_000));

    // One click: the pull sheet opens on that repo and checks its real headers
    // through the pull path (the hub is unreachable here, and it says so).
    await session.click(await session.find(`[data-testid="shelf-option"][data-repo="${fits.repo}"]`));
    await session.waitForElement('[data-testid="pull-sheet"]', 5_000);
    assert.equal(await session.property(await session.byTestId('pull-repo'), 'value'), fits.repo);
    const error = await session.waitForElement('[data-testid="pull-error"]', 20_000);
    assert.match(await session.text(error), /hub|reach|connect/i, 'the failed check says why');
    await session.click(await session.byTestId('pull-cancel'));
    await waitFor(async () => (await session.allByTestId('pull-sheet')).length === 0, { timeoutMs: 5_000, message: 'the sheet to close' });
  });

  test('the live strip shows memory figures from the sampler', { timeout: 20_000 }, async () => {
    requireApp();
    const used = await waitFor(
      async () => {
        const t = await session.text(await session.byTestId('memory-used'));
        return /^\d+\.\d\/\d+\.\d GB$/.test(t.trim()) && t.trim();
      },
      { timeoutMs: 10_000, intervalMs: 250, message: 'the live strip to show used/total memory' },
    );
    assert.ok(used);
    // Read again as a whole: the sampler may have moved the figure meanwhile.
    const strip = await session.text(await session.byTestId('live-graph'));
    assert.ok(/\d+\.\d\/\d+\.\d GB/.test(strip) && /swap\s*[\d.]+ GB/.test(strip), `live strip: ${strip}`);
  });

  test('"hello" streams an answer token by token, then a stats line with tok/s', { timeout: 45_000 }, async () => {
    requireApp();
    // Greedy from here on: the model then answers each prompt the same way
    // every run (sampled, a short answer now and then ended a streaming
    // test's answer after a token or two).
    await session.click(await session.byTestId('settings-button'));
    await setSetting('temperature', '0');
    await session.waitForElement('.saved', 5_000);
    await session.click(await session.byTestId('settings-button'));
    await session.waitForElement('[data-testid="chat-input"]', 5_000);
    // Record every distinct text the answer shows while it streams.
    await session.execute(`
      window.__seen = [];
      const log = document.querySelector('[role="log"]');
      new MutationObserver(() => {
        const all = document.querySelectorAll('[data-testid="message-assistant"]');
        const text = all.length ? all[all.length - 1].textContent : '';
        if (text && window.__seen[window.__seen.length - 1] !== text) window.__seen.push(text);
      }).observe(log, { subtree: true, childList: true, characterData: true });
    `);
    await sendMessage('hello');

    const users = await waitFor(async () => {
      const found = await session.allByTestId('message-user');
      return found.length === 1 && found;
    }, { timeoutMs: 10_000, message: 'one message-user' });
    assert.equal((await session.text(users[0])).trim(), 'hello');
    assert.equal(await session.property(await session.byTestId('chat-input'), 'value'), '', 'the composer is cleared');

    const { el, reason } = await finishedAnswer(1, 40_000);
    assert.ok(['stop', 'length'].includes(reason), `finish reason ${reason}`);
    const text = (await session.text(el)).trim();
    assert.ok(text.length > 0, 'the answer has text');
    const seen = await session.execute('return window.__seen;');
    assert.ok(seen.length >= 3, `the answer grew in steps (streamed), saw ${seen.length}: ${JSON.stringify(seen.slice(0, 3))}`);
    assert.ok(seen.every((t, k) => k === 0 || t.length >= seen[k - 1].length), 'the answer only grows while streaming');

    const stats = (await session.allByTestId('turn-stats'))[0];
    const line = (await session.text(stats)).trim();
    assert.match(line, /^TTFT [\d.]+ (ms|s) · [\d.]+ tok\/s · \d+(\.\dK)? tok · ctx \d+/, `stats line: ${line}`);
    await session.click(stats);
    const details = await session.waitForElement('[data-testid="turn-stats-details"]', 5_000);
    const all = await session.text(details);
    for (const label of ['Time to first token', 'Prefill', 'Decode', 'End to end', 'Batch', 'Peak memory', DEFAULT_MODEL_ID]) {
      assert.ok(all.includes(label), `expanded stats name ${label}: ${all}`);
    }
    assert.deepEqual(await session.allByTestId('error'), [], 'no error is shown');
    await session.byTestId('send-button'); // Stop turned back into Send

    // That turn was measured: the picker's figure for the model now rests on it.
    await session.click(await session.byTestId('model-select'));
    const row = `[data-model-id="${DEFAULT_MODEL_ID}"] [data-testid="model-basis"]`;
    const measured = await waitFor(async () => {
      const t = (await session.text(await session.find(row))).trim();
      return t.startsWith(', measured here at ') && t;
    }, { timeoutMs: 10_000, intervalMs: 250, message: 'the default row to say its figure was measured here' });
    assert.match(await session.attribute(await session.find(row), 'title'), /^measured here at \d+: [\d.]+ GB(, counted \d+ % at \S+|, too far to count at \S+)?$/, measured);
    writeFileSync(path.join(OUT, 'picker-measured.png'), await session.screenshot(30_000));
    await session.click(await session.byTestId('model-select'));
    await waitFor(async () => (await session.allByTestId('model-option')).length === 0, { timeoutMs: 5_000, message: 'the list to close' });
  });

  test('asked the capital of France, the default model answers Paris', { timeout: 60_000 }, async () => {
    requireApp();
    const before = (await answers()).length;
    // Greedy from here on, as a user would set it for repeatable answers: at
    // the default temperature (0.7) a 135M model sometimes wanders off (seen:
    // "La Famille-Rochot, France is the capital of …"), and the later cases
    // that need a long answer got a short one now and then.
    await session.click(await session.byTestId('settings-button'));
    await setSetting('temperature', '0');
    await session.click(await session.byTestId('settings-button'));
    await session.waitForElement('[data-testid="chat-input"]', 5_000);
    await waitFor(async () => (await answers()).length === before, { timeoutMs: 10_000, message: 'the chat to reload' });
    await sendMessage('What is the capital of France?');
    const { el, reason } = await finishedAnswer(before + 1, 40_000);
    assert.equal(reason, 'stop', 'the model ended its answer itself');
    const text = (await session.text(el)).trim();
    assert.match(text, /\bParis\b/, `the answer names Paris: ${text}`);
    writeFileSync(path.join(OUT, 'paris.png'), await session.screenshot(30_000));
  });

  test('an answer that copies from the message is decoded with prompt lookup, and says so', { timeout: 60_000 }, async () => {
    requireApp();
    const before = (await answers()).length;
    // Prompt lookup is on by default (Settings → Generation); greedy since the Paris case.
    await sendMessage(
      'Fix the typos and write the text out again in full: The quick brown fox jumpd over the lazy dog. It was a sunny day in the vilage, and the children were playng in the park near the old church.',
    );
    // (What it copies depends on the chat so far; the stats say what lookup did.)
    const { reason } = await finishedAnswer(before + 1, 45_000);
    assert.equal(reason, 'stop', 'the model ended its answer itself');
    const stats = (await session.allByTestId('turn-stats')).at(-1);
    const line = (await session.text(stats)).trim();
    assert.match(line, /· lookup: \d+% accepted, [\d.]+ tok\/pass/, `the stats line says what lookup did: ${line}`);
    await session.click(stats);
    const details = (await session.allByTestId('turn-stats-details')).at(-1);
    assert.match(await session.text(details), /Decoding\s*lookup: \d+% accepted/, 'the details name the decoding');
    writeFileSync(path.join(OUT, 'prompt-lookup.png'), await session.screenshot(30_000));
    await session.click(stats);
  });

  test('the live graph opens from the strip and draws the answer\'s tok/s and the memory series', { timeout: 60_000 }, async () => {
    requireApp();
    rmSync(path.join(OUT, 'live.png'), { force: true });
    const strip = await session.byTestId('live-graph');
    assert.equal(await session.attribute(strip, 'aria-expanded'), 'false');
    await session.click(strip);
    await session.waitForElement('[data-testid="live-panel"]', 5_000);
    assert.equal(await session.attribute(strip, 'aria-expanded'), 'true');
    // The memory series is drawn from the sampler's readings (by data attributes, not pixels).
    const memoryPoints = await waitFor(
      async () => {
        const n = await session.execute(
          'const g = document.querySelector(\'[data-testid="live-chart"] svg [data-series="memory-used"]\'); return g ? Number(g.dataset.points) : 0;',
        );
        return n > 0 && n;
      },
      { timeoutMs: 10_000, intervalMs: 250, message: 'the live graph to draw the memory series' },
    );
    assert.ok(memoryPoints >= 1, `memory points: ${memoryPoints}`);
    const budget = await session.execute('return document.querySelector(\'[data-testid="live-chart"] [data-series="budget"]\')?.dataset.bytes;');
    assert.ok(Number(budget) > 0, `the budget line is drawn: ${budget}`);

    // An answer that streams for several seconds. Its length must not hang
    // on timing: this runs before any answer is cut short by a Stop, so the
    // chat so far is the same every run and the greedy answer is too (asked
    // after the Stop case, an answer of 39 to 59 tokens, ~1.5 to 2.2 s, hung
    // on how many tokens that case let through).
    const sentAt = await session.execute('return Date.now();');
    const before = (await answers()).length;
    await sendMessage('Tell me a very long story.');
    const stop = await session.waitForElement('[data-testid="stop-button"]', 5_000);
    await waitFor(async () => (await answers()).length === before + 1, { timeoutMs: 20_000, message: 'the answer to start' });

    // One tok/s mark per second of the answer, each after the message was
    // sent, drawn while it streams.
    const tpsMarks = () =>
      session.execute(`
        return [...document.querySelectorAll('[data-testid="live-chart"] svg [data-series="tps"] circle')]
          .map((c) => ({ at: Number(c.dataset.atMs), tps: Number(c.dataset.tps) }))
          .filter((m) => m.at >= ${Number(sentAt)});`);
    await waitFor(async () => (await tpsMarks()).length >= 2, {
      timeoutMs: 20_000,
      intervalMs: 250,
      message: "two of the streaming answer's tok/s marks in the live graph",
    });
    assert.equal((await session.allByTestId('stop-button')).length, 1, 'the answer still streams after two marks');
    await session.click(stop);
    await finishedAnswer(before + 1, 20_000);
    const marks = await tpsMarks();
    assert.ok(marks.length >= 2, `the marks stay once the answer ends: ${JSON.stringify(marks)}`);
    assert.ok(marks.every((m) => m.tps > 0 && Number.isFinite(m.tps)), `every mark is a real rate: ${JSON.stringify(marks)}`);
    // About one a second: a point closes a second after the last, the
    // answer's last (under a second) only if it spans half a second.
    const gaps = marks.slice(1).map((m, i) => m.at - marks[i].at);
    assert.ok(gaps.every((g) => g >= 500), `no two marks within half a second: ${gaps}`);
    const readout = await session.text(await session.byTestId('live-readout'));
    assert.match(readout, /used [\d.]+\/[\d.]+ GB · budget [\d.]+ GB · swap [\d.]+ GB · pressure \w+/, readout);
    writeFileSync(path.join(OUT, 'live.png'), await session.screenshot(30_000));

    // The 15-minute window draws the same marks; the strip folds the graph away.
    await session.click(await session.byTestId('live-window-15'));
    await waitFor(
      async () =>
        (await session.execute('return document.querySelector(\'[data-testid="live-window-15"]\').getAttribute("aria-checked");')) === 'true',
      { timeoutMs: 5_000, message: 'the 15-minute window to be picked' },
    );
    await session.click(strip);
    await waitFor(async () => (await session.allByTestId('live-panel')).length === 0, { timeoutMs: 5_000, message: 'the graph to fold away' });
  });

  test('Stop ends a long answer, which is marked stopped', { timeout: 45_000 }, async () => {
    requireApp();
    // Ask for far more tokens than the model writes in the time we wait.
    await session.click(await session.byTestId('settings-button'));
    await session.waitForElement('[data-testid="max-tokens"]', 5_000);
    await session.execute(`
      const f = document.querySelector('[data-testid="max-tokens"]');
      f.value = '8000';
      f.dispatchEvent(new Event('change', { bubbles: true }));
    `);
    await session.click(await session.byTestId('settings-button'));
    await session.waitForElement('[data-testid="chat-input"]', 5_000);

    const before = (await answers()).length;
    await sendMessage('Tell me a very long story.');
    const stop = await session.waitForElement('[data-testid="stop-button"]', 5_000);
    // Let the run decode for a moment, so Stop ends a run that is under way:
    // from its first words (the answer's element is there before them, and
    // with the story above in the chat the first token takes ~0.6 s).
    await waitFor(async () => {
      const el = (await answers())[before];
      return el && (await session.text(el)).trim().length > 0;
    }, { timeoutMs: 20_000, message: 'the long answer to start' });
    await new Promise((r) => setTimeout(r, 500));
    await session.click(stop);

    const { reason } = await finishedAnswer(before + 1, 20_000);
    assert.equal(reason, 'cancelled', 'the turn finished as stopped');
    const stats = (await session.allByTestId('turn-stats'))[before];
    const line = await session.text(stats);
    assert.ok(line.includes('stopped'), `the stats line says stopped: ${line}`);
    const tokens = Number(line.match(/· (\d+) tok ·/)?.[1]);
    assert.ok(tokens > 0 && tokens < 8000, `stopped well before the limit: ${line}`);
    await session.waitForElement('[data-testid="send-button"]', 5_000);
    assert.deepEqual(await session.allByTestId('stop-button'), [], 'Stop is gone once the run ended');
  });

  test('Shift+Enter adds a line; Enter sends', { timeout: 45_000 }, async () => {
    requireApp();
    const count = async () => ({
      user: (await session.allByTestId('message-user')).length,
      assistant: (await answers()).length,
    });
    const start = await count();

    const input = await session.byTestId('chat-input');
    await session.clear(input);
    await session.sendKeys(input, 'line one');
    // Shift+Enter as explicit key actions on the focused composer. (In Element
    // Send Keys, WebKitWebDriver ignores NULL and keeps Shift down for the
    // rest of the text: "line one\nLINE TWO".)
    await session.chord(Keys.SHIFT, Keys.ENTER);
    await session.sendKeys(input, 'line two');
    assert.equal(await session.property(input, 'value'), 'line one\nline two', 'Shift+Enter inserted a newline');
    // Give a (wrong) send time to show up before saying it did not happen.
    await new Promise((r) => setTimeout(r, 750));
    assert.deepEqual(await count(), start, 'Shift+Enter sent nothing');

    await session.sendKeys(input, Keys.ENTER);
    await waitFor(async () => (await count()).user === start.user + 1, {
      timeoutMs: 10_000,
      message: 'Enter to send the two-line message',
    });
    const users = await session.allByTestId('message-user');
    assert.equal(await session.text(users.at(-1)), 'line one\nline two', 'the bubble keeps the line break');
    assert.equal(await session.property(input, 'value'), '', 'the composer is cleared after sending');
    // Stop it rather than wait for 8000 tokens.
    await waitFor(async () => (await count()).assistant === start.assistant + 1, { timeoutMs: 20_000, message: 'an answer to start' });
    assert.equal(await session.property(input, 'value'), '', 'the composer stays clear while it answers');
    const stop = (await session.allByTestId('stop-button'))[0];
    if (stop) await session.click(stop);
    await finishedAnswer(start.assistant + 1, 20_000);
  });

  test('screenshot of the popover', { timeout: 40_000 }, async () => {
    requireApp();
    const png = await session.screenshot(30_000);
    const file = path.join(OUT, 'popover.png');
    writeFileSync(file, png);
    const { width, height } = pngSize(png);
    assert.ok(width >= 400 && height >= 600, `popover screenshot is ${width}×${height}, expected about 420×640 (${file})`);
  });

  /**
   * An OpenAI-compatible endpoint on loopback: answers every request with
   * `pieces` streamed, and keeps every request body.
   */
  async function cloudStub(pieces) {
    const http = await import('node:http');
    const bodies = [];
    const server = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        bodies.push(body);
        res.writeHead(200, { 'Content-Type': 'text/event-stream', Connection: 'close' });
        for (const p of pieces) res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: p } }] })}\n\n`);
        res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })}\n\n`);
        res.end('data: [DONE]\n\n');
      });
    });
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    return { url: `http://127.0.0.1:${server.address().port}/v1`, bodies, close: () => new Promise((r) => server.close(r)) };
  }

  /** Sets a Settings field as a user does (its change event saves it). */
  /** Opens the model list once the picker is free (it ignores clicks while a model loads). */
  async function openModelList() {
    await waitFor(async () => {
      if ((await session.allByTestId('model-option')).length > 0) return true;
      const select = await session.byTestId('model-select');
      if ((await session.property(select, 'disabled')) !== true) await session.click(select);
      return false;
    }, { timeoutMs: 30_000, intervalMs: 500, message: 'the model list to open' });
  }

  /** Closes whatever an earlier test left open: the swap warning, the model list, Settings. */
  async function closeOverlays() {
    for (const cancel of await session.allByTestId('fit-warning-cancel')) await session.click(cancel);
    if ((await session.allByTestId('model-option')).length > 0) await session.click(await session.byTestId('model-select'));
    if ((await session.allByTestId('settings-view')).length > 0) await session.click(await session.byTestId('settings-button'));
    await openTab('chat');
  }

  async function setSetting(testId, value) {
    await session.waitForElement(`[data-testid="${testId}"]`, 5_000);
    await session.execute(`
      const f = document.querySelector('[data-testid="${testId}"]');
      f.value = ${JSON.stringify(value)};
      f.dispatchEvent(new Event('change', { bubbles: true }));
    `);
  }

  /**
   * `headroom lend --port 0 ARGS` on this machine's loopback with a data
   * folder of its own, in a process group of its own: its address and the
   * pairing code it printed, and `stop()`, which kills it and its sessions.
   */
  async function startLender(args = []) {
    const data = mkdtempSync(path.join(SCRATCH, 'lender-'));
    const child = spawn(BIN, ['lend', '--port', '0', ...args], { env: { ...process.env, HEADROOM_DATA_DIR: data }, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    const stop = () => {
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    };
    try {
      const first = await new Promise((resolve, reject) => {
        let out = '';
        const timer = setTimeout(() => reject(new Error(`lend printed no address: ${out}`)), 20_000);
        // Read to the end: a full pipe would stall the lender.
        child.stdout.on('data', (b) => {
          out += b;
          if (out.includes('\n')) {
            clearTimeout(timer);
            resolve(out.split('\n')[0]);
          }
        });
      });
      const addr = / on (127\.0\.0\.1:\d+) /.exec(first)?.[1];
      const code = /pairing code (\d{6})/.exec(first)?.[1];
      assert.ok(addr && code, `lend's first line names its address and pairing code: ${first}`);
      return { addr, code, stop };
    } catch (e) {
      stop();
      throw e;
    }
  }

  test('a private exchange stays here when the cloud is forced, and the answer says so', { timeout: 60_000 }, async () => {
    requireApp();
    const cloud = await cloudStub(['Functors ', 'map.']);
    try {
      const before = (await answers()).length;
      await session.click(await session.byTestId('settings-button'));
      await setSetting('cloud-url', cloud.url);
      await setSetting('cloud-model', 'stub-model');
      await setSetting('max-tokens', '8');
      await session.click(await session.byTestId('settings-button'));
      await session.waitForElement('[data-testid="chat-input"]', 5_000);
      // Back in the chat, its messages load again: send once they are there.
      await waitFor(async () => (await answers()).length === before, { timeoutMs: 10_000, message: 'the chat to reload' });

      // A private address: it stays on this Mac (the local model answers).
      await sendMessage('my NAS is at 10.0.0.5, remember it');
      await finishedAnswer(before + 1, 30_000);
      assert.equal(cloud.bodies.length, 0, 'nothing went to the cloud');

      // The cloud forced for a harmless question: it goes, the exchange above does not.
      await session.click(await session.find('[data-testid="route-chip"] button'));
      await session.click(await session.byTestId('route-force-cloud'));
      await sendMessage('what is a functor?');
      const { el } = await finishedAnswer(before + 2, 30_000);
      assert.equal((await session.text(el)).trim(), 'Functors map.');
      const note = await session.waitForElement('[data-testid="answer-withheld"]', 5_000);
      assert.match(await session.text(note), /stay on this Mac/);
      assert.equal(cloud.bodies.length, 1);
      assert.ok(cloud.bodies[0].includes('what is a functor?'), cloud.bodies[0]);
      assert.ok(!cloud.bodies[0].includes('10.0.0.5'), `the private address reached the cloud: ${cloud.bodies[0]}`);
      writeFileSync(path.join(OUT, 'privacy.png'), await session.screenshot(30_000));
    } finally {
      await session.click(await session.byTestId('settings-button'));
      await setSetting('cloud-url', '');
      await session.click(await session.byTestId('settings-button'));
      await cloud.close();
    }
  });

  /** The session ids the sessions list shows, in its order. */
  async function listedSessions() {
    const items = await session.allByTestId('session-item');
    return Promise.all(items.map((i) => session.attribute(i, 'data-session-id')));
  }

  async function openTab(name) {
    await session.click(await session.find(`[role="tab"]#tab-${name}`));
  }

  test('bench: a short plan runs to its table, labelled with the kernel; Stop ends the next run', { timeout: 120_000 }, async () => {
    requireApp();
    await openTab('bench');
    const fill = async (id, value) => {
      const input = await session.byTestId(id);
      await session.clear(input);
      await session.sendKeys(input, value);
    };
    await fill('bench-depths', '0');
    await fill('bench-p', '16');
    await fill('bench-n', '16');
    await fill('bench-r', '2');
    await session.click(await session.byTestId('bench-run'));
    const table = await session.waitForElement('[data-testid="bench-table"]', 90_000);
    const text = await session.text(table);
    assert.match(text, /prefill tok\/s/);
    const labels = await session.text(await session.find('.bench .labels'));
    assert.match(labels, /p 16 · n 16 · batch 1 · 2 runs \+ 1 warm-up/);
    // Linux runs MLX on its CPU backend: the f32 kernel, and on an AVX2 CPU
    // its row-shared path for the default model's 4-bit matrices.
    assert.match(labels, /f32 matmul, (unpacked once below 48 rows, dequantized from 48|prompt dequantized from 8 rows)/);
    await session.waitForElement('[data-testid="bench-chart"] svg', 10_000);
    writeFileSync(path.join(OUT, 'bench.png'), await session.screenshot(30_000));

    // A second run, stopped while it measures: nothing is saved, no error.
    await fill('bench-n', '400');
    await session.click(await session.byTestId('bench-run'));
    await session.click(await session.waitForElement('[data-testid="bench-stop"]', 5_000));
    const stopped = await session.waitForElement('[data-testid="bench-stopped"]', 60_000);
    assert.match(await session.text(stopped), /Stopped; nothing was saved/);
    assert.equal((await session.allByTestId('bench-error')).length, 0);
    await openTab('chat');
  });

  test('sessions: a new one starts empty; both are kept across a restart; the chart opens', { timeout: 120_000 }, async () => {
    requireApp();
    // Everything so far went into one session, created by the first message.
    await openTab('sessions');
    await session.waitForElement('[data-testid="session-list"]', 5_000);
    const first = await waitFor(async () => {
      const ids = await listedSessions();
      return ids.length === 1 && ids;
    }, { timeoutMs: 10_000, message: 'the list to show the one session' });

    await session.click(await session.byTestId('new-session'));
    await session.waitForElement('[data-testid="chat-input"]', 5_000);
    await waitFor(async () => (await session.allByTestId('message-user')).length === 0, { timeoutMs: 5_000, message: 'an empty chat' });
    await sendMessage('a second session');
    await finishedAnswer(1, 40_000);
    await openTab('sessions');
    const both = await waitFor(async () => {
      const ids = await listedSessions();
      return ids.length === 2 && ids;
    }, { timeoutMs: 10_000, message: 'the list to show two sessions' });
    assert.equal(both[1], first[0], 'the newest session is listed first');

    // Restart the app on the same data folder.
    const error = await session.delete(15_000);
    if (error) throw error;
    await waitFor(() => appPids().length === 0, { timeoutMs: 15_000, message: 'the app to quit' });
    session = await openSession(driverUrl);
    await session.waitForElement('[data-testid="chat-input"]', 20_000);
    // It reopens the most recent session…
    const users = await waitFor(async () => {
      const found = await session.allByTestId('message-user');
      return found.length === 1 && found;
    }, { timeoutMs: 15_000, message: 'the most recent session to reopen' });
    assert.equal((await session.text(users[0])).trim(), 'a second session');
    // …and keeps the other, with its speed chart.
    await openTab('sessions');
    await waitFor(async () => (await listedSessions()).length === 2, { timeoutMs: 10_000, message: 'both sessions after the restart' });
    await session.click(await session.find(`[data-testid="session-item"][data-session-id="${first[0]}"]`));
    const chart = await session.waitForElement('[data-testid="session-chart"] svg', 15_000);
    assert.ok(chart, 'the session chart is drawn');
    writeFileSync(path.join(OUT, 'sessions.png'), await session.screenshot(30_000));
    await session.click(await session.byTestId('session-open'));
    await waitFor(async () => {
      const texts = await Promise.all((await session.allByTestId('message-user')).map((m) => session.text(m)));
      return texts[0]?.trim() === 'hello' && texts;
    }, { timeoutMs: 10_000, message: 'the first session to open in the chat, starting with "hello"' });
  });

  // ---- the menu-bar conventions (issue #20) -------------------------------------

  /** The one app process under the driver (it waits a moment for it). */
  async function appPid() {
    const pids = await waitFor(() => appPids().length && appPids(), { timeoutMs: 5_000, message: 'the app process' });
    assert.equal(pids.length, 1, `one app process, found ${pids.length}`);
    return pids[0];
  }

  async function popoverVisible(pid, visible, message) {
    await waitFor(async () => ((await visiblePopovers(pid)).length > 0) === visible, {
      timeoutMs: 10_000,
      intervalMs: 200,
      message,
    });
  }

  test('a link in an answer opens in the default browser; the popover stays where it was', { timeout: 60_000 }, async () => {
    requireApp();
    // An answer with links, as a model would write them: a session exported
    // by the app, its answer replaced, imported back (the CLI, same data folder).
    const env = { ...process.env, HEADROOM_DATA_DIR: DATA_DIR, HF_HUB_CACHE: HF_CACHE };
    const { stdout: list } = await run(BIN, ['sessions', '--json'], { env, timeout: 20_000 });
    const ids = JSON.parse(list).map((x) => x.id);
    assert.ok(ids.length > 0, `sessions --json: ${list}`);
    const { stdout } = await run(BIN, ['export', ids[0], '--format', 'json'], { env, timeout: 20_000 });
    const exported = JSON.parse(stdout);
    const answer = exported.messages.find((m) => m.role === 'assistant');
    const question = exported.messages.find((m) => m.role === 'user');
    assert.ok(answer && question, 'the exported session has a question and an answer');
    const URL_A = 'https://example.com/headroom-e2e?from=answer';
    exported.session = { ...exported.session, id: 'links-e2e', title: 'Links' };
    exported.messages = [
      { ...question, content: 'Where are the docs?' },
      { ...answer, content: `They are [here](${URL_A}), or see [part 2](#part-2).`, stats: null },
    ];
    const file = path.join(SCRATCH, 'links.json');
    writeFileSync(file, JSON.stringify(exported));
    await run(BIN, ['import', file], { env, timeout: 20_000 });

    // Found as a user would find it: the list's search reads the database.
    await openTab('sessions');
    const back = (await session.allByTestId('session-back'))[0];
    if (back) await session.click(back);
    const search = await session.waitForElement('[data-testid="session-search"]', 5_000);
    await session.clear(search);
    await session.sendKeys(search, 'Links');
    const item = await session.waitForElement('[data-testid="session-item"][data-session-id="links-e2e"]', 10_000);
    await session.click(item);
    await session.click(await session.waitForElement('[data-testid="session-open"]', 5_000));
    const link = await session.waitForElement(`[data-testid="message-assistant"] a[href="${URL_A}"]`, 10_000);
    assert.equal(await session.execute('return arguments[0].hasAttribute("target");', [link]), false, 'no target: the handler decides');

    const before = await session.execute('return window.location.href;');
    const openedBefore = openedUrls().length;
    await session.click(link);
    const opened = await waitFor(() => openedUrls().length > openedBefore && openedUrls(), {
      timeoutMs: 10_000,
      message: `xdg-open to be given ${URL_A}`,
    });
    assert.equal(opened.at(-1), URL_A, 'the default browser got the link');
    await new Promise((r) => setTimeout(r, 500)); // a navigation, were there one, would have started
    assert.equal(await session.execute('return window.location.href;'), before, "the popover's URL did not change");
    // The in-page anchor does not change it either (it has no target here: nothing happens).
    await session.click(await session.find('[data-testid="message-assistant"] a[href="#part-2"]'));
    assert.equal(await session.execute('return window.location.href;'), before, 'an anchor does not navigate');
    assert.equal(openedUrls().length, opened.length, 'an anchor opens nothing');
    await session.byTestId('chat-input');
  });

  test('the global shortcut Alt+Space hides and shows the popover', { timeout: 40_000 }, async () => {
    requireApp();
    const pid = await appPid();
    await popoverVisible(pid, true, 'the popover to be visible at first');
    await run('xdotool', ['key', '--clearmodifiers', 'alt+space'], { timeout: 5_000 });
    await popoverVisible(pid, false, 'Alt+Space to hide the popover');
    await run('xdotool', ['key', '--clearmodifiers', 'alt+space'], { timeout: 5_000 });
    await popoverVisible(pid, true, 'Alt+Space to show the popover again');
    await session.waitForElement('[data-testid="chat-input"]', 10_000);
  });

  test('a second launch shows the running popover and exits; one app runs', { timeout: 60_000 }, async () => {
    requireApp();
    const pid = await appPid();
    // Hide it as a user would (Esc), so that showing it again is the second launch's doing.
    await session.sendKeys(await session.byTestId('chat-input'), Keys.ESCAPE);
    await popoverVisible(pid, false, 'Esc to hide the popover');

    const started = Date.now();
    const second = spawn(BIN, [], { env: { ...appEnv(), HEADROOM_SHOW_WINDOW: '0' }, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    second.stderr.on('data', (chunk) => (stderr += chunk));
    const exit = await new Promise((resolve) => {
      const timer = setTimeout(() => {
        second.kill('SIGKILL');
        resolve({ code: null, timedOut: true });
      }, 30_000);
      second.once('exit', (code, sig) => {
        clearTimeout(timer);
        resolve({ code, sig });
      });
    });
    assert.equal(exit.code, 0, `the second launch exits with status 0 (got ${JSON.stringify(exit)}): ${stderr}`);
    await popoverVisible(pid, true, "the second launch to show the first one's popover");
    assert.deepEqual(appPids(), [pid], 'the first app still runs, alone');
    assert.ok(Date.now() - started < 30_000);
    await session.waitForElement('[data-testid="chat-input"]', 10_000);
  });

  test('Settings: open at login is off, the shortcut is ⌥Space (Alt+Space here), the log folder is shown', { timeout: 30_000 }, async () => {
    requireApp();
    await session.click(await session.byTestId('settings-button'));
    const login = await session.waitForElement('[data-testid="launch-at-login"]', 5_000);
    assert.equal(await session.property(login, 'checked'), false, 'launch at login is off by default');
    assert.equal((await session.text(await session.byTestId('shortcut-record'))).trim(), 'Alt+Space');
    assert.deepEqual(await session.allByTestId('shortcut-error'), [], 'the shortcut is registered');
    const logs = await session.waitForElement('[data-testid="log-dir"]', 5_000);
    assert.equal((await session.text(logs)).trim(), path.join(DATA_DIR, 'logs'));
    const file = await session.attribute(logs, 'title');
    assert.match(file ?? '', /headroom\.\d{4}-\d{2}-\d{2}\.log$/, `the current log file: ${file}`);
    assert.ok(readFileSync(file, 'utf8').includes('INFO'), 'the app logs at info level to its file');
    // The prompt cache's figures (this process's: the app was restarted
    // above): memory against its allowance, how well it served, the disk tier.
    const prompts = await session.waitForElement('[data-testid="prompt-cache-stats"]', 5_000);
    await session.execute('arguments[0].scrollIntoView({ block: "center" });', [prompts]);
    const figures = await session.text(prompts);
    writeFileSync(path.join(OUT, 'settings-prompt-cache.png'), await session.screenshot(30_000));
    await session.click(await session.byTestId('settings-button'));
    assert.match(figures, /Prompt cache\s*\d+ prompts?, .*; others .* of /, figures);
    assert.match(figures, /Reused a prefix\s*(no request yet|\d+ % of \d+ requests)/, figures);
    assert.match(figures, /Saved on disk\s*\d+ states?, .* of 4\.00 GB/, figures);
  });

  // Issue #27: Settings → Draft model, through the real engine. A draft of
  // another vocabulary is refused by name when the loaded model is loaded
  // again with it, before anything is unloaded; None loads it back alone.
  test('Settings: a draft model of another vocabulary is refused by name and the model stays; None reloads it alone', { timeout: 90_000 }, async () => {
    requireApp();
    await closeOverlays();
    const loadedId = async () => session.property(await session.byTestId('model-select'), 'value');
    // The test before restarted the app: its model may still be loading.
    let before = await loadedId();
    for (const until = Date.now() + 30_000; !before && Date.now() < until; before = await loadedId()) {
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.ok(before, 'a model is loaded');
    await session.click(await session.byTestId('settings-button'));
    const row = await session.waitForElement('[data-testid="draft-model"]', 5_000);
    const offered = await session.execute("return [...document.querySelectorAll('[data-testid=\"draft-model\"] option')].map((o) => o.value);");
    // The default model (SmolLM2's GGUF vocabulary of 49,152) and the demo
    // models (the project's tokenizer of a few hundred) cannot draft for each other.
    const draft = offered.find((id) => id !== '' && id !== before && (before === 'SmolLM2-135M-Instruct') !== (id === 'SmolLM2-135M-Instruct'));
    assert.ok(offered[0] === '' && draft, `None and the list's models are offered: ${offered}`);
    await setSetting('draft-model', draft);
    await session.waitForElement('.saved', 5_000);
    await session.execute('arguments[0].scrollIntoView({ block: "center" });', [row]);
    writeFileSync(path.join(OUT, 'settings-draft.png'), await session.screenshot(30_000));
    await session.click(await session.byTestId('settings-button'));
    await waitFor(async () => (await session.allByTestId('error')).length > 0, { timeoutMs: 60_000, message: 'the refused draft to be said' });
    const said = await session.text(await session.byTestId('error'));
    assert.match(said, /as a draft model/, said);
    assert.match(said, /vocabulary/, said);
    assert.equal(await loadedId(), before, 'the model stays loaded');
    await session.click(await session.byTestId('settings-button'));
    await setSetting('draft-model', '');
    await session.waitForElement('.saved', 5_000);
    await session.click(await session.byTestId('settings-button'));
    await waitFor(async () => (await session.allByTestId('error')).length === 0, { timeoutMs: 60_000, message: 'the model to load again without a draft' });
    assert.equal(await loadedId(), before);
  });

  test('a shortcut another app holds is refused with the reason; the old one keeps working', { timeout: 40_000 }, async () => {
    requireApp();
    // "Another app": an X client holding Ctrl+Alt+K, as a global shortcut does.
    const grabber = spawn('python3', [path.join(here, 'grab-key.py'), 'ctrl+alt+k'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let said = '';
    grabber.stdout.on('data', (chunk) => (said += chunk));
    grabber.stderr.on('data', (chunk) => (said += chunk));
    try {
      await waitFor(() => said.includes('grabbed'), { timeoutMs: 10_000, message: `the grabber to hold Ctrl+Alt+K (${said})` });
      await session.click(await session.byTestId('settings-button'));
      const record = await session.waitForElement('[data-testid="shortcut-record"]', 5_000);
      await session.click(record);
      assert.match(await session.text(record), /Type a shortcut/);
      await session.chord(Keys.CONTROL, Keys.ALT, 'k');
      const error = await session.waitForElement('[data-testid="error-globalShortcut"]', 10_000);
      assert.match(await session.text(error), /Ctrl\+Alt\+K is already taken by another app/);
      assert.equal((await session.text(record)).trim(), 'Alt+Space', 'the old shortcut stays');
      await session.execute('arguments[0].scrollIntoView({ block: "center" });', [record]);
      writeFileSync(path.join(OUT, 'settings-shortcut-taken.png'), await session.screenshot(30_000));
      await session.click(await session.byTestId('settings-button'));
      // …and still works.
      const pid = await appPid();
      await run('xdotool', ['key', '--clearmodifiers', 'alt+space'], { timeout: 5_000 });
      await popoverVisible(pid, false, 'Alt+Space to hide the popover after the refused change');
      await run('xdotool', ['key', '--clearmodifiers', 'alt+space'], { timeout: 5_000 });
      await popoverVisible(pid, true, 'Alt+Space to show it again');
      await session.waitForElement('[data-testid="chat-input"]', 10_000);
    } finally {
      grabber.kill('SIGTERM');
    }
  });

  // Issue #18's "a model that fits only with KV 8-bit offers it and loads
  // with it": a demo model whose KV cache is most of its memory at 64K
  // (kv-heavy: 6.9 GiB predicted with a 16-bit cache, 5.0 GiB at 8 bits),
  // and the OS headroom set from this machine's free memory now so the
  // budget falls between the two (a ±0.9 GiB margin for memory to move).
  test('a model that fits only with an 8-bit KV cache offers it, and loads with it', { timeout: 120_000 }, async () => {
    requireApp();
    const id = 'kv-heavy-demo';
    const dir = path.join(DATA_DIR, 'models', id);
    await run(BIN, ['demo-model', dir, '--preset', 'kv-heavy', '--bits', '4'], { timeout: 60_000 });
    // The budget counts what unloading the loaded model would give back: a
    // real model's MLX arrays and buffer cache (after the bench) move by more
    // than this case's margin from one reading to the next, so a tiny demo
    // model (84 KB of weights) is loaded first, as when this case was made.
    const tiny = 'headroom-demo-tiny';
    await run(BIN, ['demo-model', path.join(DATA_DIR, 'models', tiny), '--preset', 'tiny', '--bits', '4'], { timeout: 60_000 });
    await session.click(await session.byTestId('model-select'));
    await session.click(await session.waitForElement(`[data-testid="model-option"][data-model-id="${tiny}"]`, 10_000));
    await waitFor(async () => (await session.property(await session.byTestId('model-select'), 'value')) === tiny, {
      timeoutMs: 30_000,
      intervalMs: 250,
      message: `${tiny} to load`,
    });
    const peak = async (extra) => {
      const { stdout } = await run(BIN, ['fit', dir, '--context', '65536', '--json', ...extra], { timeout: 30_000, env: { ...process.env, HEADROOM_DATA_DIR: DATA_DIR } });
      return JSON.parse(stdout).estimate.predicted_peak_bytes;
    };
    const [float, q8] = [await peak([]), await peak(['--kv-bits', '8'])];
    assert.ok(float - q8 > 1.5 * 2 ** 30, `the 8-bit cache saves most of 2 GiB: ${float} vs ${q8}`);
    const available = Number(/MemAvailable:\s+(\d+) kB/.exec(readFileSync('/proc/meminfo', 'utf8'))[1]) * 1024;
    // The budget also counts what unloading the loaded (tiny) model would give back.
    const listed = await session.execute("return window.__TAURI_INTERNALS__.invoke('models_list', {});");
    const freed = listed.find((m) => m.loaded)?.fit?.budget?.freed_by_unload_bytes ?? 0;
    const headroomGb = (available + freed - (float + q8) / 2) / 2 ** 30;
    assert.ok(headroomGb > 0.5, `this machine has room for the case: ${available} bytes free`);
    await session.click(await session.byTestId('settings-button'));
    await setSetting('context-limit', '65536');
    await session.waitForElement('.saved', 5_000);
    await setSetting('os-headroom', headroomGb.toFixed(2));
    await session.waitForElement('.saved', 5_000);
    await session.click(await session.byTestId('settings-button'));
    try {
      // The list is read again as it opens: the new folder and the new budget.
      await session.click(await session.byTestId('model-select'));
      const row = `[data-testid="model-option"][data-model-id="${id}"]`;
      await waitFor(async () => (await session.allByTestId('model-option')).length === 4, { timeoutMs: 10_000, message: 'the new model in the list' });
      // The list shows what it had while it reads again (the tiny model's
      // switch opened it with these four rows): wait for the fresh verdict.
      const verdict = await waitFor(async () => {
        const v = await session.attribute(await session.find(row), 'data-verdict');
        return v === 'would_swap' && v;
      }, { timeoutMs: 10_000, intervalMs: 250, message: `${id}'s verdict to read would_swap` }).catch(async () => session.attribute(await session.find(row), 'data-verdict'));
      if (verdict !== 'would_swap') {
        const now = await session.execute("return window.__TAURI_INTERNALS__.invoke('models_list', {});");
        const fit = now.find((m) => m.id === id)?.fit;
        assert.fail(`verdict ${verdict}, expected would_swap: float ${float}, q8 ${q8}, MemAvailable ${available}, freed ${freed}, headroom ${headroomGb} GiB; the app: ${JSON.stringify({ budget: fit?.budget, peak: fit?.estimate?.predicted_peak_bytes })}`);
      }
      await session.click(await session.find(row));
      const sheet = await session.waitForElement('[data-testid="fit-warning"]', 10_000);
      const remedy = await session.byTestId('fit-remedy-kv_cache');
      const offered = await session.text(remedy);
      assert.match(offered, /KV cache at 8 bits/, `the 8-bit KV cache is offered: ${await session.text(sheet)}`);
      writeFileSync(path.join(OUT, 'fit-remedy-kv8.png'), await session.screenshot(30_000));
      await session.click(remedy);
      // Loaded, not loading: the picker names the model while it loads too.
      await waitFor(async () => {
        const select = await session.byTestId('model-select');
        return (await session.property(select, 'value')) === id && (await session.property(select, 'disabled')) === false;
      }, {
        timeoutMs: 60_000,
        intervalMs: 250,
        message: `${id} to load with the 8-bit KV cache`,
      });
      assert.deepEqual(await session.allByTestId('fit-warning'), [], 'the sheet closed');
      // The loaded cache is 8-bit: an answer's stats say so.
      const before = (await answers()).length;
      const statsBefore = (await session.allByTestId('turn-stats')).length;
      await sendMessage('hi');
      await finishedAnswer(before + 1, 60_000);
      const stats = await waitFor(async () => {
        const all = await session.allByTestId('turn-stats');
        return all.length > statsBefore && all.at(-1);
      }, { timeoutMs: 10_000, message: 'the new answer\'s stats line' });
      // Earlier answers' details may be open too: this turn's are the ones the click opened.
      const openBefore = new Set((await session.allByTestId('turn-stats-details')).map(Session.elementId));
      await session.click(stats);
      const details = await waitFor(async () => {
        const opened = (await session.allByTestId('turn-stats-details')).find((d) => !openBefore.has(Session.elementId(d)));
        return opened ? session.text(opened) : false;
      }, { timeoutMs: 5_000, message: 'the new answer\'s details' });
      assert.match(details, /8-bit/, `the turn ran on the 8-bit KV cache (bf16 until its 5000th token, as mlx-lm): ${details}`);
    } finally {
      // Back to the default model and the default settings.
      await session.click(await session.byTestId('settings-button'));
      await setSetting('os-headroom', '4');
      await session.waitForElement('.saved', 5_000);
      await setSetting('context-limit', '8192');
      await session.waitForElement('.saved', 5_000);
      await session.click(await session.byTestId('settings-button'));
      await openModelList();
      await session.click(await session.waitForElement(`[data-testid="model-option"][data-model-id="${DEFAULT_MODEL_ID}"]`, 10_000));
      await waitFor(async () => (await session.property(await session.byTestId('model-select'), 'value')) === DEFAULT_MODEL_ID, {
        timeoutMs: 30_000,
        intervalMs: 250,
        message: 'the default model to load again',
      });
    }
  });

  // Issue #29: with the app's local server on, any local process could send
  // the popover chat's message with a guessed digit and read from
  // `cached_tokens` whether the guess was right (the right one reused the
  // chat's state). A chat's state serves that chat only: the exact message
  // is cached no more than a wrong guess.
  test('with the local server on, a popover chat cannot be read through it: its exact message is cached no more than a wrong guess', { timeout: 90_000 }, async () => {
    requireApp();
    await closeOverlays();
    const port = await freePort();
    const savedNext = (testId) =>
      waitFor(
        () => session.execute(`return document.querySelector('[data-testid="${testId}"]').closest('label').nextElementSibling?.classList.contains('saved') ?? false;`),
        { timeoutMs: 5_000, message: `${testId} to be saved` },
      );
    await session.click(await session.byTestId('settings-button'));
    await setSetting('temperature', '0');
    await savedNext('temperature');
    await setSetting('max-tokens', '16');
    await savedNext('max-tokens');
    await setSetting('server-port', String(port));
    await savedNext('server-port');
    await session.click(await session.byTestId('server-toggle'));
    const url = `http://127.0.0.1:${port}/v1`;
    await waitFor(async () => (await session.text(await session.byTestId('server-status'))).includes(url), {
      timeoutMs: 15_000,
      message: `the server to report ${url}`,
    });
    // The key the server requires (shown in Settings, as a user copies it).
    const key = await waitFor(
      async () => {
        const shown = (await session.text(await session.byTestId('server-key'))).trim();
        return shown.startsWith('hr-') ? shown : null;
      },
      { timeoutMs: 5_000, message: 'the server key in Settings' },
    );
    // What the user sees: the server on, its key with Copy and New key.
    await session.execute(`document.querySelector('[data-testid="server-key"]').scrollIntoView({ block: 'center' });`);
    writeFileSync(path.join(OUT, 'settings-server-key.png'), await session.screenshot(30_000).catch(() => Buffer.alloc(0)));
    const keyless = await fetch(`${url}/models`, { signal: AbortSignal.timeout(10_000) });
    assert.equal(keyless.status, 401, 'the app server answers a request without its key');
    await session.click(await session.byTestId('settings-button'));
    try {
      // A new chat: its one message is the whole conversation the engine ran.
      await openTab('sessions');
      // An earlier test may have left a session's chart open: back to the list.
      for (const back of await session.allByTestId('session-back')) await session.click(back);
      await session.click(await session.waitForElement('[data-testid="new-session"]', 5_000));
      await session.waitForElement('[data-testid="chat-input"]', 5_000);
      await waitFor(async () => (await session.allByTestId('message-user')).length === 0, { timeoutMs: 5_000, message: 'an empty chat' });
      const secret = 'Keep this private: the last digit of my door code is 7.';
      await sendMessage(secret);
      await finishedAnswer(1, 40_000);

      // Another local process: the chat's exact conversation first, then the
      // same with a wrong digit, greedy, on the model the popover uses.
      const ask = async (content) => {
        const reply = await fetch(`${url}/chat/completions`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${key}` },
          body: JSON.stringify({ model: DEFAULT_MODEL_ID, messages: [{ role: 'user', content }], max_tokens: 2, temperature: 0 }),
          signal: AbortSignal.timeout(30_000),
        });
        const body = await reply.text();
        assert.equal(reply.status, 200, body);
        return JSON.parse(body).usage;
      };
      const exact = await ask(secret);
      const wrong = await ask(secret.replace('7', '3'));
      const cached = (usage) => usage?.prompt_tokens_details?.cached_tokens;
      for (const [name, usage] of [['exact', exact], ['wrong', wrong]]) {
        assert.equal(typeof cached(usage), 'number', `the ${name} guess's reply reports cached_tokens: ${JSON.stringify(usage)}`);
      }
      assert.equal(exact.prompt_tokens, wrong.prompt_tokens, 'the two guesses are the same length');
      assert.ok(
        cached(exact) <= cached(wrong),
        `the chat's exact message reused ${cached(exact)} cached tokens, a wrong guess ${cached(wrong)} (of ${exact.prompt_tokens}): the chat can be read through the server`,
      );
    } catch (error) {
      // What the popover showed, before the clean-up below can hide it.
      writeFileSync(path.join(OUT, 'server-privacy-failed.png'), await session.screenshot(30_000).catch(() => Buffer.alloc(0)));
      throw error;
    } finally {
      await closeOverlays();
      await session.click(await session.byTestId('settings-button'));
      await session.click(await session.waitForElement('[data-testid="server-toggle"]', 5_000));
      await waitFor(async () => (await session.text(await session.byTestId('server-status'))).startsWith('Off'), {
        timeoutMs: 15_000,
        message: 'the server to stop',
      });
      await session.click(await session.byTestId('settings-button'));
    }
  });

  // Issue #28: a model too large for this Mac alone, with a lending Mac set
  // in Settings, shows its verdict across both in the picker and the swap
  // warning (each Mac's layers and numbers), loads across both from the
  // warning, and answers. The lender is `headroom lend` on this machine's
  // loopback; the budget is made too small for the model alone as in the
  // 8-bit KV case above (the KV cache at 64K tokens dominates, and a split
  // halves it at least).
  test('a model too large for this Mac loads across two Macs from its warning, and answers', { timeout: 150_000 }, async () => {
    requireApp();
    const id = 'kv-heavy-demo';
    const dir = path.join(DATA_DIR, 'models', id);
    assert.ok(existsSync(dir), 'the 8-bit KV case wrote the model');
    // A lender reads only its own shelves: this one lends from the app's models folder.
    const lender = await startLender(['--models', path.join(DATA_DIR, 'models')]);
    const { addr } = lender;
    try {
      await closeOverlays();
      const tiny = 'headroom-demo-tiny';
      await session.click(await session.byTestId('model-select'));
      await session.click(await session.waitForElement(`[data-testid="model-option"][data-model-id="${tiny}"]`, 10_000));
      await waitFor(async () => (await session.property(await session.byTestId('model-select'), 'value')) === tiny, {
        timeoutMs: 30_000,
        intervalMs: 250,
        message: `${tiny} to load`,
      });
      const { stdout } = await run(BIN, ['fit', dir, '--context', '65536', '--json'], { timeout: 30_000, env: { ...process.env, HEADROOM_DATA_DIR: DATA_DIR } });
      const alone = JSON.parse(stdout).estimate.predicted_peak_bytes;
      const available = Number(/MemAvailable:\s+(\d+) kB/.exec(readFileSync('/proc/meminfo', 'utf8'))[1]) * 1024;
      const listed = await session.execute("return window.__TAURI_INTERNALS__.invoke('models_list', {});");
      const freed = listed.find((m) => m.loaded)?.fit?.budget?.freed_by_unload_bytes ?? 0;
      // A budget half a GiB short of the model alone.
      const headroomGb = (available + freed - (alone - 2 ** 29)) / 2 ** 30;
      assert.ok(headroomGb > 0.5, `this machine has room for the case: ${available} bytes free`);
      await session.click(await session.byTestId('settings-button'));
      await setSetting('context-limit', '65536');
      await session.waitForElement('.saved', 5_000);
      await setSetting('os-headroom', headroomGb.toFixed(2));
      await session.waitForElement('.saved', 5_000);
      await setSetting('peer', addr);
      await session.waitForElement('.saved', 5_000);
      await session.click(await session.byTestId('settings-button'));
      try {
        await session.click(await session.byTestId('model-select'));
        const row = `[data-testid="model-option"][data-model-id="${id}"]`;
        const note = await waitFor(async () => {
          const r = await session.find(row).catch(() => null);
          if (!r || (await session.attribute(r, 'data-verdict')) !== 'would_swap') return false;
          const n = await session.execute(`return document.querySelector('${row} [data-testid="model-two-macs"]')?.textContent ?? null;`);
          return n ?? false;
        }, { timeoutMs: 20_000, intervalMs: 250, message: `${id} to read would_swap here, with a verdict across two Macs` });
        assert.match(note, /^fits across this Mac and \S+/, note);
        await session.click(await session.find(row));
        await session.waitForElement('[data-testid="fit-warning"]', 10_000);
        const host = await session.text(await session.byTestId('fit-two-macs-host'));
        const peer = await session.text(await session.byTestId('fit-two-macs-peer'));
        assert.match(host, /^This Mac: (layer 0|layers 0–\d+), needs [\d.]+ GB of [\d.]+ GB · fits/, host);
        assert.match(peer, /: layers \d+–\d+, needs [\d.]+ GB of [\d.]+ GB · fits/, peer);
        writeFileSync(path.join(OUT, 'two-macs.png'), await session.screenshot(30_000));
        await session.click(await session.byTestId('fit-two-macs-load'));
        // Loaded, not loading: the picker names the model while it loads too.
        await waitFor(async () => {
          const select = await session.byTestId('model-select');
          return (await session.property(select, 'value')) === id && (await session.property(select, 'disabled')) === false;
        }, {
          timeoutMs: 60_000,
          intervalMs: 250,
          message: `${id} to load across two Macs`,
        });
        assert.deepEqual(await session.allByTestId('fit-warning'), [], 'the sheet closed');
        const before = (await answers()).length;
        const statsBefore = (await session.allByTestId('turn-stats')).length;
        await sendMessage('hi');
        await finishedAnswer(before + 1, 60_000);
        // Its stats line says where it ran.
        const line = await waitFor(async () => {
          const all = await session.allByTestId('turn-stats');
          return all.length > statsBefore && session.text(all.at(-1));
        }, { timeoutMs: 10_000, message: "the answer's stats line" });
        assert.match(line, /two Macs/, line);
      } catch (error) {
        // What the popover showed, before the clean-up below can hide it.
        writeFileSync(path.join(OUT, 'two-macs-failed.png'), await session.screenshot(30_000).catch(() => Buffer.alloc(0)));
        throw error;
      } finally {
        for (const sheet of await session.allByTestId('fit-warning-cancel')) await session.click(sheet);
        if ((await session.allByTestId('settings-view')).length === 0) await session.click(await session.byTestId('settings-button'));
        await setSetting('peer', '');
        await session.waitForElement('.saved', 5_000);
        await setSetting('os-headroom', '4');
        await session.waitForElement('.saved', 5_000);
        await setSetting('context-limit', '8192');
        await session.waitForElement('.saved', 5_000);
        await session.click(await session.byTestId('settings-button'));
        await openModelList();
        const option = await session.waitForElement(`[data-testid="model-option"][data-model-id="${DEFAULT_MODEL_ID}"]`, 10_000).catch(async (e) => {
          writeFileSync(path.join(OUT, 'two-macs-restore-failed.png'), await session.screenshot(30_000).catch(() => Buffer.alloc(0)));
          const listed = await session.execute("return window.__TAURI_INTERNALS__.invoke('models_list', {});").catch((x) => String(x));
          console.log('two-macs restore:', JSON.stringify(listed).slice(0, 2000));
          throw e;
        });
        await session.click(option);
        await waitFor(async () => (await session.property(await session.byTestId('model-select'), 'value')) === DEFAULT_MODEL_ID, {
          timeoutMs: 30_000,
          intervalMs: 250,
          message: 'the default model to load again',
        });
      }
    } finally {
      lender.stop();
    }
  });

  // Issue #28: Settings → Two Macs → "Lend this Mac" runs `headroom lend`
  // from the app; another host pairs with the code it shows.
  test('Settings lends this Mac: the code it shows pairs another host, and Stop ends it', { timeout: 60_000 }, async () => {
    requireApp();
    await closeOverlays();
    await session.click(await session.byTestId('settings-button'));
    try {
      await session.click(await session.waitForElement('[data-testid="lend-toggle"]', 5_000));
      const status = await waitFor(async () => {
        const t = await session.text(await session.byTestId('lend-status'));
        return /pairing code \d{6}/.test(t) && t;
      }, { timeoutMs: 15_000, message: 'the lend status to show a pairing code' });
      assert.match(status, /^Lent on port 7070 · pairing code \d{6}$/, status);
      await session.execute(`document.querySelector('[data-testid="lend-status"]').scrollIntoView({ block: 'center' });`);
      writeFileSync(path.join(OUT, 'settings-lend.png'), await session.screenshot(30_000));
      const code = /(\d{6})$/.exec(status)[1];
      const hostData = mkdtempSync(path.join(SCRATCH, 'pair-host-'));
      const { stdout } = await run(BIN, ['pair', '127.0.0.1:7070', code], { timeout: 20_000, env: { ...process.env, HEADROOM_DATA_DIR: hostData } });
      assert.match(stdout, /^paired with \S+ at 127\.0\.0\.1:7070/, stdout);
      await session.click(await session.byTestId('lend-toggle'));
      await waitFor(async () => (await session.text(await session.byTestId('lend-status'))).startsWith('Not lent'), {
        timeoutMs: 10_000,
        message: 'lending to stop',
      });
      await assert.rejects(run(BIN, ['pair', '127.0.0.1:7070', code], { timeout: 20_000, env: { ...process.env, HEADROOM_DATA_DIR: hostData } }), 'nothing listens once lending stopped');
    } finally {
      if ((await session.allByTestId('settings-view')).length > 0) await session.click(await session.byTestId('settings-button'));
    }
  });

  // Settings → Two Macs on the host: Find Macs lists the lenders Bonjour
  // finds; one is paired with the code it printed and becomes the peer Mac.
  // The lender is `headroom lend` on loopback, allowing no host by address.
  test('Settings finds a lending Mac with Bonjour, pairs with its code, and makes it the peer', { timeout: 60_000 }, async () => {
    requireApp();
    await closeOverlays();
    const lender = await startLender(['--allow', '10.255.255.1', '--available-gb', '12']);
    await session.click(await session.byTestId('settings-button'));
    const row = `[data-testid="peer-row"][data-address="${lender.addr}"]`;
    try {
      // Bonjour answers within a look or two; each look lasts 2 s.
      const find = await session.waitForElement('[data-testid="peers-find"]', 5_000);
      await waitFor(async () => {
        if ((await session.text(find)).trim() === 'Looking…') return false;
        if ((await session.findAll(row)).length > 0) return true;
        await session.click(find);
        await waitFor(async () => (await session.text(find)).trim() === 'Find Macs', { timeoutMs: 10_000, message: 'the look to end' });
        return (await session.findAll(row)).length > 0;
      }, { timeoutMs: 20_000, intervalMs: 100, message: `${lender.addr} to be listed` });
      const listed = await session.text(await session.find(row));
      assert.match(listed, new RegExp(`${lender.addr.replaceAll('.', '\\.')} · 8\\.00 GB`), listed);
      assert.doesNotMatch(listed, /paired/, listed);
      const code = await session.find(`${row} [data-testid="peer-code"]`);
      await session.sendKeys(code, lender.code);
      await waitFor(async () => (await session.property(code, 'value')) === lender.code, { timeoutMs: 5_000, message: 'the code to be typed' });
      // The list in the middle of the view (the focused field would keep it at the bottom).
      const showList = `document.activeElement?.blur(); document.querySelector('[data-testid="peers-find"]').scrollIntoView({ block: 'center' });`;
      await session.execute(showList);
      writeFileSync(path.join(OUT, 'settings-peers-found.png'), await session.screenshot(30_000));
      await session.click(await session.find(`${row} [data-testid="peer-pair"]`));
      const said = await waitFor(async () => {
        const p = await session.allByTestId('peer-paired');
        return p.length > 0 && session.text(p[0]);
      }, { timeoutMs: 15_000, message: 'the pairing to be confirmed' });
      assert.match(said, /^Paired with \S+/, said);
      assert.equal(await session.property(await session.byTestId('peer'), 'value'), lender.addr);
      assert.match(await session.text(await session.find(row)), /paired/);
      assert.equal((await session.text(await session.find(`${row} [data-testid="peer-use"]`))).trim(), 'In use');
      const stored = await session.execute("return window.__TAURI_INTERNALS__.invoke('settings_get', {});");
      assert.equal(stored.peer, lender.addr);
      await session.execute(showList);
      writeFileSync(path.join(OUT, 'settings-peers.png'), await session.screenshot(30_000));
    } catch (error) {
      writeFileSync(path.join(OUT, 'settings-peers-failed.png'), await session.screenshot(30_000).catch(() => Buffer.alloc(0)));
      throw error;
    } finally {
      lender.stop();
      if ((await session.allByTestId('settings-view')).length === 0) await session.click(await session.byTestId('settings-button'));
      await setSetting('peer', '');
      await session.waitForElement('.saved', 5_000);
      await session.click(await session.byTestId('settings-button'));
    }
  });

  // A thinking model: the demo whose chat template opens <think> as Qwen3's
  // thinking releases do. Its weights are random, so it never closes the
  // block itself: the model's thinking setting (a budget of 12 tokens) does.
  // What this shows is the path (the block, its line, its count, the Think
  // switch reaching the template), not any thought.
  test('a thinking model: its thinking sits collapsed above the answer, and the Think switch turns it off', { timeout: 120_000 }, async () => {
    requireApp();
    await closeOverlays();
    const id = 'thinking-demo';
    await run(BIN, ['demo-model', path.join(DATA_DIR, 'models', id), '--arch', 'qwen3', '--thinking'], { timeout: 60_000 });
    const stored = await session.execute("return window.__TAURI_INTERNALS__.invoke('settings_get', {});");
    await session.execute(
      "return window.__TAURI_INTERNALS__.invoke('settings_set', { settings: arguments[0] });",
      [{ ...stored, thinking: { ...stored.thinking, [id]: { budget: 12 } } }],
    );
    await openModelList();
    await session.click(await session.waitForElement(`[data-testid="model-option"][data-model-id="${id}"]`, 10_000));
    await waitFor(async () => (await session.property(await session.byTestId('model-select'), 'value')) === id, {
      timeoutMs: 30_000,
      intervalMs: 250,
      message: `${id} to load`,
    });
    // A new chat, so this model's answers are the only ones.
    await openTab('sessions');
    await session.click(await session.byTestId('new-session'));
    const thinkSwitch = await session.waitForElement('[data-testid="think-switch"]', 10_000);
    assert.equal(await session.property(thinkSwitch, 'checked'), true, 'the switch starts on (the model thinks by its setting)');

    await sendMessage('hello');
    const { el } = await finishedAnswer(1, 60_000);
    const block = await session.byTestId('thinking');
    const line = (await session.text(await session.byTestId('thinking-line'))).trim();
    assert.match(line, /^Thought for [\d.]+ s · \d+ tokens$/, line);
    const thought = Number(/· (\d+) tokens/.exec(line)[1]);
    assert.ok(thought > 12, `the budget's 12 tokens and the close tag's: ${line}`);
    assert.equal(await session.attribute(await session.byTestId('thinking-toggle'), 'aria-expanded'), 'false', 'collapsed once the answer started');
    const stats = (await session.text((await session.allByTestId('turn-stats'))[0])).trim();
    assert.match(stats, new RegExp(`· \\d+ tok \\(${thought} thinking\\) ·`), `the stats line counts thinking apart: ${stats}`);
    assert.ok(!(await session.text(el)).includes('think>'), 'no tag in the answer');
    await session.click(await session.byTestId('thinking-toggle'));
    const text = await session.waitForElement('[data-testid="thinking-text"]', 5_000);
    assert.ok((await session.text(text)).trim().length > 0, 'the thinking text opens under its line');
    assert.ok(block, 'the block is there');
    writeFileSync(path.join(OUT, 'thinking.png'), await session.screenshot(30_000));

    // Think off: the template is asked for no thinking, and none comes.
    await session.click(thinkSwitch);
    assert.equal(await session.property(thinkSwitch, 'checked'), false);
    await sendMessage('hello again');
    await finishedAnswer(2, 60_000);
    assert.equal((await session.allByTestId('thinking')).length, 1, 'the second answer has no thinking block');
    const second = (await session.text((await session.allByTestId('turn-stats'))[1])).trim();
    assert.ok(!second.includes('thinking'), second);
    writeFileSync(path.join(OUT, 'thinking-off.png'), await session.screenshot(30_000));
  });
});
