// A tiny W3C WebDriver client for the end-to-end tests: just what they use,
// on Node's built-in fetch, with a timeout on every request and errors that
// carry the driver's own answer.

/**
 * The WebDriver server for a Tauri app on Linux is WebKitWebDriver itself
 * (Debian's webkit2gtk-driver). tauri-driver only starts it with Tauri's
 * automation switch and renames `tauri:options` to WebKitGTK's capability,
 * so the tests do those two things here and need no tauri-driver (whose
 * source build cost every fresh machine a whole HTTP stack).
 */
export const NATIVE_DRIVER = process.env.WEBKIT_WEBDRIVER || 'WebKitWebDriver';

/** argv for the native driver listening on `port` (127.0.0.1 only). */
export function driverArgs(port) {
  return [`--port=${port}`, '--host=127.0.0.1'];
}

/** What the app needs in its environment to let a WebDriver drive its webview (Tauri 1 and 2 spellings). */
export const DRIVER_ENV = Object.freeze({ TAURI_AUTOMATION: 'true', TAURI_WEBVIEW_AUTOMATION: 'true' });

/** New-session capabilities that start the app at `binary` with `args`. */
export function appCapabilities(binary, args = []) {
  return { alwaysMatch: { 'webkitgtk:browserOptions': { binary, args } } };
}

/** The key under which W3C WebDriver returns an element reference. */
export const ELEMENT_KEY = 'element-6066-11e4-a52e-4f735466cecf';

/** WebDriver key codes (W3C WebDriver §17.4.2). */
export const Keys = Object.freeze({
  NULL: '\uE000', // releases held modifiers in Element Send Keys (not in WebKitWebDriver)
  BACKSPACE: '\uE003',
  TAB: '\uE004',
  RETURN: '\uE006',
  ENTER: '\uE007',
  SHIFT: '\uE008',
  CONTROL: '\uE009',
  ALT: '\uE00A',
  ESCAPE: '\uE00C',
});

/** A failed WebDriver request: HTTP status, W3C error code, and the raw body. */
export class WebDriverError extends Error {
  constructor(message, { method, path, status, error, body, cause } = {}) {
    super(message, cause ? { cause } : undefined);
    this.name = 'WebDriverError';
    this.method = method;
    this.path = path;
    this.status = status;
    this.error = error; // e.g. "no such element", "timeout"
    this.body = body;
  }
}

const DEFAULT_TIMEOUT_MS = 15_000;

function truncate(text, max = 2000) {
  return text.length > max ? `${text.slice(0, max)}… (${text.length} chars)` : text;
}

/**
 * One HTTP request to a WebDriver endpoint. Resolves to the parsed `value`;
 * rejects with a WebDriverError on a timeout, a network failure, a non-2xx
 * status, or a body that is not JSON.
 */
export async function request(baseUrl, method, path, body, timeoutMs = DEFAULT_TIMEOUT_MS, { signal } = {}) {
  const url = `${baseUrl.replace(/\/$/, '')}${path}`;
  const what = `${method} ${path}`;
  // One deadline for the answer and its body. (A plain timer, not
  // AbortSignal.any([AbortSignal.timeout(…), …]): on Node 20 that combined
  // signal's timer can be collected and never fire.)
  const controller = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    controller.abort(new Error(`no answer within ${timeoutMs} ms`));
  }, timeoutMs);
  const giveUp = () => controller.abort(signal.reason);
  if (signal?.aborted) giveUp();
  else signal?.addEventListener('abort', giveUp, { once: true });
  const reasonFor = (cause) => {
    if (timedOut) return `no answer within ${timeoutMs} ms`;
    if (signal?.aborted) return `given up: ${signal.reason?.message ?? signal.reason}`;
    return `${cause?.message ?? cause}${cause?.cause ? ` (${cause.cause.message ?? cause.cause})` : ''}`;
  };

  let response;
  let text;
  try {
    try {
      response = await fetch(url, {
        method,
        headers: body === undefined ? undefined : { 'content-type': 'application/json; charset=utf-8' },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: controller.signal,
      });
    } catch (cause) {
      throw new WebDriverError(`WebDriver ${what} failed: ${reasonFor(cause)}`, { method, path, cause });
    }
    try {
      text = await response.text();
    } catch (cause) {
      throw new WebDriverError(`WebDriver ${what}: could not read the HTTP ${response.status} body: ${reasonFor(cause)}`, {
        method,
        path,
        status: response.status,
        cause,
      });
    }
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener('abort', giveUp);
  }

  let parsed;
  try {
    parsed = text.length ? JSON.parse(text) : {};
  } catch {
    throw new WebDriverError(`WebDriver ${what}: HTTP ${response.status}, body is not JSON: ${truncate(text)}`, {
      method,
      path,
      status: response.status,
      body: text,
    });
  }
  const value = parsed?.value;
  if (!response.ok || (value && typeof value === 'object' && typeof value.error === 'string')) {
    const code = value?.error ?? `HTTP ${response.status}`;
    const message = value?.message ? `: ${value.message}` : '';
    throw new WebDriverError(`WebDriver ${what} → ${response.status} ${code}${message}\n  body: ${truncate(text)}`, {
      method,
      path,
      status: response.status,
      error: value?.error,
      body: text,
    });
  }
  return value;
}

/** Polls `probe` until it returns a truthy value (returned) or the deadline passes. */
export async function waitFor(probe, { timeoutMs = 10_000, intervalMs = 100, message = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs;
  let lastError;
  let lastValue;
  for (;;) {
    try {
      lastValue = await probe();
      if (lastValue) return lastValue;
    } catch (error) {
      lastError = error;
    }
    if (Date.now() >= deadline) {
      const detail = lastError ? `; last error: ${lastError.message}` : `; last value: ${JSON.stringify(lastValue)}`;
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${message}${detail}`, lastError ? { cause: lastError } : undefined);
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

/** A WebDriver session. Create with `Session.create(baseUrl, capabilities)`. */
export class Session {
  constructor(baseUrl, id, capabilities, { timeoutMs = DEFAULT_TIMEOUT_MS } = {}) {
    this.baseUrl = baseUrl;
    this.id = id;
    this.capabilities = capabilities;
    this.timeoutMs = timeoutMs;
  }

  /**
   * POST /session. Starting the app can be slow on a cold, 2-core machine;
   * `signal` lets the caller give up sooner (e.g. when the app died).
   */
  static async create(baseUrl, capabilities, { timeoutMs = 60_000, requestTimeoutMs = DEFAULT_TIMEOUT_MS, signal } = {}) {
    const value = await request(baseUrl, 'POST', '/session', { capabilities }, timeoutMs, { signal });
    if (!value?.sessionId) {
      throw new WebDriverError(`WebDriver POST /session: no sessionId in ${JSON.stringify(value)}`, {
        method: 'POST',
        path: '/session',
      });
    }
    return new Session(baseUrl, value.sessionId, value.capabilities, { timeoutMs: requestTimeoutMs });
  }

  cmd(method, path, body, timeoutMs = this.timeoutMs) {
    return request(this.baseUrl, method, `/session/${this.id}${path}`, body, timeoutMs);
  }

  static elementId(element) {
    const id = element?.[ELEMENT_KEY];
    if (typeof id !== 'string') throw new Error(`not a WebDriver element: ${JSON.stringify(element)}`);
    return id;
  }

  title() {
    return this.cmd('GET', '/title');
  }

  /** The first element matching `css`; throws WebDriverError "no such element" if none. */
  find(css) {
    return this.cmd('POST', '/element', { using: 'css selector', value: css });
  }

  /** All elements matching `css` (possibly none). */
  findAll(css) {
    return this.cmd('POST', '/elements', { using: 'css selector', value: css });
  }

  /** Shorthand for `[data-testid="…"]`. */
  byTestId(id) {
    return this.find(`[data-testid="${id}"]`);
  }

  allByTestId(id) {
    return this.findAll(`[data-testid="${id}"]`);
  }

  /** Waits until `css` matches at least one element; returns the first. */
  waitForElement(css, timeoutMs = 10_000) {
    return waitFor(async () => (await this.findAll(css))[0], { timeoutMs, message: `an element matching ${css}` });
  }

  activeElement() {
    return this.cmd('GET', '/element/active');
  }

  click(element) {
    return this.cmd('POST', `/element/${Session.elementId(element)}/click`, {});
  }

  clear(element) {
    return this.cmd('POST', `/element/${Session.elementId(element)}/clear`, {});
  }

  /**
   * Element Send Keys. Per the spec modifiers (Keys.SHIFT…) stay down until
   * Keys.NULL, but WebKitWebDriver ignores NULL: use performActions for chords.
   */
  sendKeys(element, text) {
    return this.cmd('POST', `/element/${Session.elementId(element)}/value`, { text });
  }

  /** The element's rendered text (innerText-like). */
  text(element) {
    return this.cmd('GET', `/element/${Session.elementId(element)}/text`);
  }

  /** The element's HTML attribute, or null. */
  attribute(element, name) {
    return this.cmd('GET', `/element/${Session.elementId(element)}/attribute/${encodeURIComponent(name)}`);
  }

  /** The element's DOM property (e.g. `value` of a textarea). */
  property(element, name) {
    return this.cmd('GET', `/element/${Session.elementId(element)}/property/${encodeURIComponent(name)}`);
  }

  displayed(element) {
    return this.cmd('GET', `/element/${Session.elementId(element)}/displayed`);
  }

  enabled(element) {
    return this.cmd('GET', `/element/${Session.elementId(element)}/enabled`);
  }

  /** Runs `script` (a function body) in the page; `arguments[i]` are `args`. */
  execute(script, args = []) {
    return this.cmd('POST', '/execute/sync', { script, args });
  }

  /** W3C input actions (keys / pointer), then releases everything. */
  async performActions(actions) {
    await this.cmd('POST', '/actions', { actions });
    await this.cmd('DELETE', '/actions');
  }

  /** Presses `keys` down in order and releases them in reverse: a chord such as Shift+Enter. */
  chord(...keys) {
    const down = keys.map((value) => ({ type: 'keyDown', value }));
    const up = keys.toReversed().map((value) => ({ type: 'keyUp', value }));
    return this.performActions([{ type: 'key', id: 'keyboard', actions: [...down, ...up] }]);
  }

  /** A PNG of the window's viewport, as a Buffer. */
  async screenshot(timeoutMs = 30_000) {
    const base64 = await this.cmd('GET', '/screenshot', undefined, timeoutMs);
    if (typeof base64 !== 'string' || base64.length === 0) throw new Error('WebDriver screenshot: empty answer');
    return Buffer.from(base64, 'base64');
  }

  /** Ends the session (the driver closes the app). Never throws: returns the error, if any. */
  async delete(timeoutMs = 10_000) {
    try {
      await request(this.baseUrl, 'DELETE', `/session/${this.id}`, undefined, timeoutMs);
      return null;
    } catch (error) {
      return error;
    }
  }
}
