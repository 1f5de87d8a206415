import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import {
  AbortError,
  InvalidArgumentError,
  SandboxError,
  TimeoutError,
  UnauthorizedError,
  UnavailableError,
  ProtocolError,
  errorFromResponse,
  retryAfterMs,
} from './errors.js';
import type { CallOptions, ConnectionOptions } from './types.js';

export const DEFAULT_ADDR = 'http://127.0.0.1:8787';

/** The default `requestTimeoutMs`: how long a call waits for the daemon's answer. */
export const REQUEST_TIMEOUT_MS = 60_000;

/** The default `retries`: how many times an idempotent call is retried (5 attempts in all). */
export const RETRIES = 4;

/** The default `retryMaxMs`: the longest an idempotent call spends retrying, waits included. */
export const RETRY_MAX_MS = 30_000;

/** Methods whose calls may be sent again: the API's GET, HEAD, PUT (of files) and DELETE are idempotent. */
const IDEMPOTENT = new Set(['GET', 'HEAD', 'PUT', 'DELETE']);

/** Statuses worth another attempt: the rate limit or a quota (429, with `Retry-After`), a proxy or daemon that cannot now. */
const RETRY_STATUS = new Set([429, 502, 503, 504]);

/** The first backoff and its bound; each retry doubles it, with jitter (half to all of it). */
const BACKOFF_MS = 100;
const BACKOFF_MAX_MS = 5_000;

/** How long to wait before the retry after `attempt` (1-based), honouring the daemon's `Retry-After`. */
export function retryDelayMs(attempt: number, retryAfter: number | undefined, random: () => number = Math.random): number {
  const exp = Math.min(BACKOFF_MAX_MS, BACKOFF_MS * 2 ** (attempt - 1));
  const backoff = exp / 2 + (random() * exp) / 2;
  // Retry-After is a floor; a little jitter above it keeps clients that were refused together apart.
  return retryAfter === undefined ? backoff : Math.max(backoff, retryAfter + random() * Math.min(250, retryAfter / 10));
}

/** `host:port` -> `http://host:port`; no trailing slash. */
export function normalizeAddr(addr: string): string {
  let a = addr.trim();
  if (a.startsWith(':')) a = `127.0.0.1${a}`;
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(a)) a = `http://${a}`;
  return a.replace(/\/+$/, '');
}

/** The agent token from the environment or the default data dir's `agent.token`, if any. */
export function defaultToken(): string | undefined {
  const env = process.env['IRONCLAW_API_TOKEN']?.trim();
  if (env) return env;
  const dirs: string[] = [];
  const dataDir = process.env['IRONCLAW_DATA_DIR'];
  if (dataDir) dirs.push(dataDir);
  const xdg = process.env['XDG_DATA_HOME'];
  if (xdg) dirs.push(join(xdg, 'ironclaw'));
  dirs.push(join(homedir(), '.local', 'share', 'ironclaw'));
  for (const dir of dirs) {
    try {
      const tok = readFileSync(join(dir, 'agent.token'), 'utf8').trim();
      if (tok) return tok;
    } catch {
      // not there; try the next
    }
  }
  return undefined;
}

/** Checks a `...Ms` option: a finite number of milliseconds, not negative. */
export function checkMs(name: string, ms: number | undefined): number | undefined {
  if (ms === undefined) return undefined;
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) {
    throw new InvalidArgumentError(`${name} must be a number of milliseconds, not ${String(ms)}`);
  }
  return ms;
}

export interface RequestOptions extends CallOptions {
  /** A JSON body (the API's wire type). */
  body?: unknown;
  rawBody?: Uint8Array | string;
  query?: Record<string, string | undefined>;
  /** Accept these statuses besides 2xx without throwing. */
  accept?: number[];
  /** Added to the request timeout: how long the daemon holds this request by design (a long-poll). */
  holdMs?: number;
  /** A POST the API documents as idempotent: retried like a GET. (None of the SDK's calls so far.) */
  idempotent?: boolean;
}

/**
 * One call in flight: its answer, and `done`, which ends the call (the timer and the caller's signal are
 * released; the body is cancelled if unread). For a stream the request timeout has already stopped: it bounds
 * the wait for the answer to begin.
 */
export interface Call {
  res: Response;
  done(): void;
  /** The error a failed body read means: aborted, timed out, or the daemon went away. */
  fail(err: unknown): SandboxError;
}

/**
 * The HTTP transport: address, token, fetch, timeouts and cancellation, retries, error mapping.
 *
 * Retries: an idempotent call (GET, HEAD, PUT, DELETE, or one marked `idempotent`) whose body can be sent again
 * (none, a string or bytes) is retried on 429, 502, 503, 504 and network errors, at most `retries` times, waiting
 * with exponential backoff and jitter, and at least what `Retry-After` says; never past `retryMaxMs` of retrying,
 * the call's `requestTimeoutMs` or its signal. Anything else (a POST such as exec or create) is sent once.
 */
export class Http {
  readonly addr: string;
  readonly requestTimeoutMs: number;
  readonly retries: number;
  readonly retryMaxMs: number;
  private readonly explicitToken: string | undefined;
  private cachedToken: string | undefined;
  private readonly fetchImpl: typeof globalThis.fetch;

  constructor(opts: ConnectionOptions = {}) {
    this.addr = normalizeAddr(opts.addr ?? process.env['IRONCLAW_ADDR'] ?? DEFAULT_ADDR);
    this.explicitToken = opts.token;
    this.fetchImpl = opts.fetch ?? globalThis.fetch.bind(globalThis);
    this.requestTimeoutMs = checkMs('requestTimeoutMs', opts.requestTimeoutMs) ?? REQUEST_TIMEOUT_MS;
    if (opts.retries !== undefined && !(Number.isInteger(opts.retries) && opts.retries >= 0)) {
      throw new InvalidArgumentError(`retries must be a whole number, not negative, not ${String(opts.retries)}`);
    }
    this.retries = opts.retries ?? RETRIES;
    this.retryMaxMs = checkMs('retryMaxMs', opts.retryMaxMs) ?? RETRY_MAX_MS;
  }

  private token(): string {
    if (this.explicitToken !== undefined) return this.explicitToken;
    this.cachedToken ??= defaultToken();
    if (!this.cachedToken) {
      throw new UnauthorizedError(
        'no IronClaw token: pass { token }, set IRONCLAW_API_TOKEN, or run the daemon on this machine (its data dir holds agent.token)',
      );
    }
    return this.cachedToken;
  }

  /**
   * Sends a request. With `stream`, the request timeout stops once the answer begins and the caller reads the
   * body for as long as it lasts; otherwise it runs until `done()`. Either way the caller's signal aborts the
   * call until `done()`. A non-2xx answer (not in `accept`) is thrown as its error.
   */
  async call(method: string, path: string, opts: RequestOptions = {}, stream = false): Promise<Call> {
    const timeoutMs = checkMs('requestTimeoutMs', opts.requestTimeoutMs) ?? this.requestTimeoutMs;
    const url = new URL(this.addr + path);
    for (const [k, v] of Object.entries(opts.query ?? {})) if (v !== undefined) url.searchParams.append(k, v);
    const headers: Record<string, string> = { authorization: `Bearer ${this.token()}` };
    let body: string | Uint8Array | undefined;
    if (opts.rawBody !== undefined) {
      body = opts.rawBody;
      headers['content-type'] = 'application/octet-stream';
    } else if (opts.body !== undefined) {
      body = JSON.stringify(opts.body);
      headers['content-type'] = 'application/json';
    }

    // One controller per call: the caller's signal and the timer both abort it, and the error says which.
    const ctl = new AbortController();
    const user = opts.signal;
    let timedOut = false;
    const onAbort = () => ctl.abort(user?.reason);
    if (user?.aborted) ctl.abort(user.reason);
    else user?.addEventListener('abort', onAbort, { once: true });
    const limit = timeoutMs > 0 ? timeoutMs + (opts.holdMs ?? 0) : 0;
    let timer: ReturnType<typeof setTimeout> | undefined =
      limit > 0
        ? setTimeout(() => {
            timedOut = true;
            ctl.abort(new Error(`request timeout (${limit} ms)`));
          }, limit)
        : undefined;
    const stopTimer = () => {
      if (timer !== undefined) clearTimeout(timer);
      timer = undefined;
    };
    let res: Response | undefined;
    let finished = false;
    const done = () => {
      if (finished) return;
      finished = true;
      stopTimer();
      user?.removeEventListener('abort', onAbort);
      res?.body?.cancel().catch(() => undefined);
    };
    const fail = (err: unknown): SandboxError => {
      if (err instanceof SandboxError) return err;
      if (user?.aborted) return new AbortError('the call was aborted', { cause: user.reason ?? err });
      if (timedOut) {
        return new TimeoutError(
          `no answer from the IronClaw daemon at ${this.addr} within ${limit} ms (${method} ${path}; raise requestTimeoutMs, or 0 for none)`,
          { cause: err },
        );
      }
      const msg = err instanceof Error ? (err.cause instanceof Error ? err.cause.message : err.message) : String(err);
      return new UnavailableError(`cannot reach the IronClaw daemon at ${this.addr}: ${msg}`, { cause: err });
    };

    const init: RequestInit = { method, headers, signal: ctl.signal };
    if (body !== undefined) init.body = body as NonNullable<RequestInit['body']>;
    const replayable = body === undefined || typeof body === 'string' || body instanceof Uint8Array;
    const retries = (IDEMPOTENT.has(method) || opts.idempotent) && replayable ? this.retries : 0;
    const started = Date.now();
    for (let attempt = 1; ; attempt++) {
      let netErr: unknown;
      res = undefined;
      try {
        res = await this.fetchImpl(url, init);
      } catch (err) {
        netErr = err;
      }
      if (res && (res.ok || (opts.accept ?? []).includes(res.status))) break;
      // Another attempt? Not once the call is aborted or timed out, nor past its bounds.
      if (attempt <= retries && !ctl.signal.aborted && (res === undefined || RETRY_STATUS.has(res.status))) {
        const wait = retryDelayMs(attempt, res ? retryAfterMs(res.headers.get('retry-after')) : undefined);
        const spent = Date.now() - started + wait;
        if (spent <= this.retryMaxMs && (limit <= 0 || spent < limit)) {
          await res?.body?.cancel().catch(() => undefined);
          try {
            await sleep(wait, ctl.signal);
          } catch (err) {
            done();
            throw fail(ctl.signal.reason ?? err);
          }
          continue;
        }
      }
      if (res === undefined) {
        done();
        throw fail(netErr);
      }
      try {
        throw await errorFromResponse(res);
      } catch (err) {
        throw fail(err);
      } finally {
        done();
      }
    }
    if (stream) stopTimer();
    return { res, done, fail };
  }

  /** A call whose answer `read` takes from its body; the call ends once it has. */
  private async read<T>(method: string, path: string, opts: RequestOptions, read: (res: Response) => Promise<T>): Promise<T> {
    const c = await this.call(method, path, opts);
    try {
      return await read(c.res);
    } catch (err) {
      throw c.fail(err);
    } finally {
      c.done();
    }
  }

  /** A call whose JSON answer is T (a wire type). */
  json<T>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
    return this.read(method, path, opts, async (res) => (await res.json()) as T);
  }

  /** A call whose answer is bytes. */
  bytes(method: string, path: string, opts: RequestOptions = {}): Promise<Uint8Array> {
    return this.read(method, path, opts, async (res) => new Uint8Array(await res.arrayBuffer()));
  }

  /** A call whose answer has no body worth reading. */
  async empty(method: string, path: string, opts: RequestOptions = {}): Promise<void> {
    const c = await this.call(method, path, opts);
    c.done();
  }
}

/**
 * Reads a stream call's body of JSON lines (`what` names them in errors), each frame to `handle` until it
 * returns a result, which this returns; the call ends either way. A stream that ends first throws `endedEarly`
 * as an UnavailableError.
 */
export async function readFrames<F, T>(c: Call, what: string, handle: (f: F) => T | undefined, endedEarly: string): Promise<T> {
  const { res } = c;
  if (!res.body) {
    c.done();
    throw new ProtocolError(`${what} answered without a body`, { status: res.status });
  }
  const line = (text: string): T | undefined => {
    if (!text.trim()) return undefined;
    let f: F;
    try {
      f = JSON.parse(text) as F;
    } catch {
      throw new ProtocolError(`bad ${what} frame: ${text.slice(0, 200)}`);
    }
    return handle(f);
  };
  const decoder = new TextDecoder();
  let buf = '';
  const reader = res.body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const r = line(buf.slice(0, nl));
        buf = buf.slice(nl + 1);
        if (r !== undefined) return r;
      }
    }
    buf += decoder.decode();
    const r = line(buf);
    if (r !== undefined) return r;
  } catch (err) {
    throw c.fail(err);
  } finally {
    reader.cancel().catch(() => undefined);
    c.done();
  }
  throw new UnavailableError(endedEarly);
}

/** Sleeps, or rejects with an AbortError when the signal fires. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(new AbortError('aborted', { cause: signal.reason }));
      return;
    }
    const onAbort = () => {
      clearTimeout(t);
      reject(new AbortError('aborted', { cause: signal?.reason }));
    };
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
