import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { SandboxError, errorFromResponse } from './errors.js';
import type { ConnectionOptions, Duration } from './types.js';

export const DEFAULT_ADDR = 'http://127.0.0.1:8787';

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

/** A Go duration string from a Duration (numbers are milliseconds). */
export function goDuration(d: Duration | undefined): string | undefined {
  if (d === undefined) return undefined;
  if (typeof d === 'string') return d;
  if (!Number.isFinite(d) || d < 0) throw new SandboxError('invalid_argument', `bad duration: ${d}`);
  return `${Math.round(d)}ms`;
}

export interface RequestOptions {
  body?: unknown;
  rawBody?: Uint8Array | string;
  query?: Record<string, string | undefined>;
  signal?: AbortSignal | undefined;
  /** Accept these statuses besides 2xx without throwing. */
  accept?: number[];
}

/** The HTTP transport: address, token, fetch, error mapping. */
export class Http {
  readonly addr: string;
  private readonly explicitToken: string | undefined;
  private cachedToken: string | undefined;
  private readonly fetchImpl: typeof globalThis.fetch;

  constructor(opts: ConnectionOptions = {}) {
    this.addr = normalizeAddr(opts.addr ?? process.env['IRONCLAW_ADDR'] ?? DEFAULT_ADDR);
    this.explicitToken = opts.token;
    this.fetchImpl = opts.fetch ?? globalThis.fetch.bind(globalThis);
  }

  private token(): string {
    if (this.explicitToken !== undefined) return this.explicitToken;
    this.cachedToken ??= defaultToken();
    if (!this.cachedToken) {
      throw new SandboxError(
        'unauthorized',
        'no IronClaw token: pass { token }, set IRONCLAW_API_TOKEN, or run the daemon on this machine (its data dir holds agent.token)',
      );
    }
    return this.cachedToken;
  }

  async request(method: string, path: string, opts: RequestOptions = {}): Promise<Response> {
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
    const init: RequestInit = { method, headers };
    if (body !== undefined) init.body = body as NonNullable<RequestInit['body']>;
    if (opts.signal) init.signal = opts.signal;
    let res: Response;
    try {
      res = await this.fetchImpl(url, init);
    } catch (err) {
      throw networkError(err, opts.signal, this.addr);
    }
    if (!res.ok && !(opts.accept ?? []).includes(res.status)) throw await errorFromResponse(res);
    return res;
  }

  async json<T>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
    const res = await this.request(method, path, opts);
    try {
      return (await res.json()) as T;
    } catch (err) {
      throw networkError(err, opts.signal, this.addr);
    }
  }
}

/** Maps a failed fetch or body read: aborted by the caller, else the daemon is unreachable. */
export function networkError(err: unknown, signal: AbortSignal | undefined, addr: string): SandboxError {
  if (err instanceof SandboxError) return err;
  if (signal?.aborted) {
    return new SandboxError('aborted', 'the request was aborted', { cause: signal.reason ?? err });
  }
  const msg = err instanceof Error ? (err.cause instanceof Error ? err.cause.message : err.message) : String(err);
  return new SandboxError('unavailable', `cannot reach the IronClaw daemon at ${addr}: ${msg}`, { cause: err });
}

/** Sleeps, or rejects with `aborted` when the signal fires. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(new SandboxError('aborted', 'aborted', { cause: signal.reason }));
      return;
    }
    const onAbort = () => {
      clearTimeout(t);
      reject(new SandboxError('aborted', 'aborted', { cause: signal?.reason }));
    };
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
