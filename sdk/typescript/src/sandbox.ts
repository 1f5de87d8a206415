import { posix } from 'node:path';
import { Http, goDuration, networkError, sleep } from './client.js';
import { SandboxError } from './errors.js';
import { ExecResult } from './result.js';
import type {
  Approval,
  ApprovalRequest,
  ConnectionOptions,
  FileEntry,
  ModelAccess,
  RunOptions,
  SandboxInfo,
  SandboxOptions,
  WaitForApprovalOptions,
  WriteFileOptions,
} from './types.js';

/** Longest single long-poll on an approval (the daemon allows up to 5m). */
const POLL_MS = 30_000;

/**
 * One IronClaw sandbox: a sealed Linux environment on the daemon, with a writable `/workspace` and `/tmp`.
 *
 * ```ts
 * const sbx = await new IronClawSandbox().engage();
 * console.log((await sbx.run('uname -a')).toString());
 * await sbx.destroy();
 * ```
 * Every method engages the sandbox first if needed, so `engage()` is optional.
 */
export class IronClawSandbox {
  private readonly http: Http;
  private readonly opts: SandboxOptions;
  private _id: string | undefined;
  private _info: SandboxInfo | undefined;
  private engaging: Promise<this> | undefined;
  /** Approvals the create request filed (pending `sandbox.widen` for egress hosts the policy does not cover). */
  approvals: Approval[] = [];

  constructor(opts: SandboxOptions = {}) {
    this.opts = opts;
    this.http = new Http(opts);
    this._id = opts.id;
  }

  /** Creates and engages a sandbox. */
  static create(opts: SandboxOptions = {}): Promise<IronClawSandbox> {
    const { id: _ignored, ...rest } = opts;
    return new IronClawSandbox(rest).engage();
  }

  /** Reconnects to a running sandbox by id. */
  static connect(id: string, opts: ConnectionOptions = {}): Promise<IronClawSandbox> {
    return new IronClawSandbox({ ...opts, id }).engage();
  }

  /** Running sandboxes, optionally only those carrying every given label. */
  static async list(opts: ConnectionOptions & { labels?: Record<string, string> } = {}): Promise<SandboxInfo[]> {
    const http = new Http(opts);
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(opts.labels ?? {})) q.append('label', `${k}=${v}`);
    const all: SandboxInfo[] = [];
    // The daemon answers a page at a time; `next` continues it.
    for (;;) {
      const qs = q.toString();
      const body = await http.json<{ sandboxes: SandboxInfo[]; next?: string }>('GET', `/v1/sandboxes${qs ? `?${qs}` : ''}`);
      all.push(...(body.sandboxes ?? []));
      if (!body.next) return all;
      q.set('after', body.next);
    }
  }

  /** The daemon's id for this sandbox (`sbx-...`); undefined until engaged unless given. */
  get id(): string | undefined {
    return this._id;
  }

  /** The daemon address in use. */
  get addr(): string {
    return this.http.addr;
  }

  /** The sandbox as last seen (after engage, getInfo or destroy). */
  get info(): SandboxInfo | undefined {
    return this._info;
  }

  /**
   * Creates the sandbox (`POST /v1/sandboxes`) or, when an `id` was given, checks that it is running.
   * Idempotent: later calls return the same sandbox.
   */
  engage(): Promise<this> {
    this.engaging ??= this.doEngage().catch((err: unknown) => {
      this.engaging = undefined; // let a later call try again
      throw err;
    });
    return this.engaging;
  }

  private async doEngage(): Promise<this> {
    if (this._id !== undefined) {
      const info = await this.http.json<SandboxInfo>('GET', `/v1/sandboxes/${encodeURIComponent(this._id)}`);
      this._info = info;
      if (info.state !== 'running') {
        throw new SandboxError('conflict', `sandbox ${info.id} is ${info.state}, not running`, { status: 409 });
      }
      return this;
    }
    const o = this.opts;
    const body: Record<string, unknown> = {};
    if (o.image !== undefined) body['image'] = o.image;
    if (o.env !== undefined) body['env'] = o.env;
    if (o.labels !== undefined) body['labels'] = o.labels;
    if (o.egress !== undefined) body['egress'] = o.egress;
    if (o.ttl !== undefined) body['ttl'] = goDuration(o.ttl);
    if (o.idle !== undefined) body['idle'] = goDuration(o.idle);
    if (o.limits !== undefined) {
      const { openFiles, timeout, ...rest } = o.limits;
      const limits: Record<string, unknown> = { ...rest };
      if (timeout !== undefined) limits['timeout'] = goDuration(timeout);
      if (openFiles !== undefined) limits['open_files'] = openFiles;
      body['limits'] = limits;
    }
    const info = await this.http.json<SandboxInfo>('POST', '/v1/sandboxes', { body });
    this._id = info.id;
    this._info = info;
    this.approvals = info.approvals ?? [];
    return this;
  }

  private async sid(): Promise<string> {
    await this.engage();
    return encodeURIComponent(this._id as string);
  }

  /** Fetches the sandbox's current state (any state, not only running). */
  async getInfo(): Promise<SandboxInfo> {
    if (this._id === undefined) await this.engage();
    this._info = await this.http.json<SandboxInfo>('GET', `/v1/sandboxes/${encodeURIComponent(this._id as string)}`);
    return this._info;
  }

  /**
   * Runs a command: a string is a shell line (`/bin/sh -c`), an array is an argv.
   * Output streams to `onStdout`/`onStderr` as it arrives. A non-zero exit is a result, not an error.
   */
  async run(command: string | string[], opts: RunOptions = {}): Promise<ExecResult> {
    const id = await this.sid();
    const body: Record<string, unknown> = typeof command === 'string' ? { cmd: command } : { argv: command };
    if (opts.stdin !== undefined) body['stdin'] = opts.stdin;
    if (opts.cwd !== undefined) body['cwd'] = opts.cwd;
    if (opts.env !== undefined) body['env'] = opts.env;
    if (opts.timeout !== undefined) body['timeout'] = goDuration(opts.timeout);
    const shown = typeof command === 'string' ? command : command.join(' ');
    let approved: string | undefined;
    for (;;) {
      const res = await this.http.request('POST', `/v1/sandboxes/${id}/exec`, {
        body: approved ? { ...body, approval: approved } : body,
        signal: opts.signal,
      });
      if (res.status !== 202) return readExecStream(res, opts, this.http.addr);
      const held = await res.json().catch((err: unknown) => {
        throw networkError(err, opts.signal, this.http.addr);
      });
      const approval = (held as { approval?: Approval }).approval;
      if (!approval?.id) throw new SandboxError('protocol', 'exec answered 202 without an approval', { status: 202 });
      if (approved !== undefined || opts.approval === 'fail') {
        throw new SandboxError(
          'approval_required',
          `"${shown}" needs an operator's approval (${approval.id}${approval.summary ? `: ${approval.summary}` : ''})`,
          { status: 202, approval },
        );
      }
      opts.onApproval?.(approval);
      const wopts: WaitForApprovalOptions = {};
      if (opts.approvalTimeoutMs !== undefined) wopts.timeoutMs = opts.approvalTimeoutMs;
      if (opts.signal) wopts.signal = opts.signal;
      const final = await this.waitForApproval(approval.id, wopts);
      if (final.state === 'approved') {
        approved = final.id;
        continue;
      }
      if (final.state === 'pending') {
        throw new SandboxError('approval_timeout', `no operator decided on "${shown}" (${final.id}) in time`, {
          approval: final,
        });
      }
      throw new SandboxError(
        'approval_denied',
        `"${shown}" was ${final.state === 'expired' ? 'not approved in time (expired)' : 'denied'}${final.reason ? `: ${final.reason}` : ''} (${final.id})`,
        { approval: final },
      );
    }
  }

  /** Writes a file (parents are created). Relative paths are under `/workspace`. */
  async writeFile(path: string, data: string | Uint8Array, opts: WriteFileOptions = {}): Promise<void> {
    const id = await this.sid();
    const query: Record<string, string | undefined> = { path: resolvePath(path) };
    if (opts.mode !== undefined) {
      query['mode'] = typeof opts.mode === 'number' ? opts.mode.toString(8).padStart(4, '0') : opts.mode;
    }
    await this.http.request('PUT', `/v1/sandboxes/${id}/files`, { query, rawBody: data });
  }

  /** Reads a file's bytes. */
  async readFile(path: string): Promise<Uint8Array> {
    const id = await this.sid();
    const res = await this.http.request('GET', `/v1/sandboxes/${id}/files`, { query: { path: resolvePath(path) } });
    try {
      return new Uint8Array(await res.arrayBuffer());
    } catch (err) {
      throw networkError(err, undefined, this.http.addr);
    }
  }

  /** Reads a file as UTF-8 text. */
  async readTextFile(path: string): Promise<string> {
    return new TextDecoder().decode(await this.readFile(path));
  }

  /** Lists a directory. */
  async list(path = '/workspace'): Promise<FileEntry[]> {
    const id = await this.sid();
    const all: FileEntry[] = [];
    let after: string | undefined;
    // The daemon answers a page at a time; `next` continues it.
    for (;;) {
      const body = await this.http.json<{ entries: FileEntry[]; next?: string }>('GET', `/v1/sandboxes/${id}/files`, {
        query: { path: resolvePath(path), list: '1', after },
      });
      all.push(...(body.entries ?? []));
      if (!body.next) return all;
      after = body.next;
    }
  }

  /** Files a request for an operator's decision (`POST /v1/approvals`); returns it, pending. */
  async requestApproval(req: ApprovalRequest): Promise<Approval> {
    const body: Record<string, unknown> = { kind: req.kind, data: req.data };
    const note = req.note ?? req.summary;
    if (note !== undefined) body['note'] = note;
    if (req.session === undefined) {
      await this.engage();
      body['session'] = this._id;
    } else if (req.session !== null) {
      body['session'] = req.session;
    }
    return this.http.json<Approval>('POST', '/v1/approvals', { body });
  }

  /** One approval as it is now. */
  async getApproval(id: string): Promise<Approval> {
    return this.http.json<Approval>('GET', `/v1/approvals/${encodeURIComponent(id)}`);
  }

  /**
   * Long-polls an approval until it is no longer `pending` (approved, denied or expired) and returns it.
   * With `timeoutMs`, returns it as it is (possibly still pending) once that much time has passed.
   */
  async waitForApproval(id: string, opts: WaitForApprovalOptions = {}): Promise<Approval> {
    const deadline = opts.timeoutMs === undefined ? Infinity : Date.now() + opts.timeoutMs;
    const path = `/v1/approvals/${encodeURIComponent(id)}`;
    for (;;) {
      const left = deadline - Date.now();
      const waitMs = Math.min(POLL_MS, Math.max(0, left));
      const started = Date.now();
      const query: Record<string, string | undefined> = waitMs >= 1 ? { wait: `${Math.ceil(waitMs)}ms` } : {};
      const a = await this.http.json<Approval>('GET', path, { query, signal: opts.signal });
      if (a.state !== 'pending' || Date.now() >= deadline) return a;
      // A daemon that answered a long-poll early with the state unchanged: do not spin.
      if (Date.now() - started < Math.min(250, waitMs)) await sleep(250, opts.signal);
    }
  }

  /** Mints a model-proxy token: point an OpenAI or Anthropic client at the returned base URL with the token as key. */
  async modelAccess(): Promise<ModelAccess> {
    return this.http.json<ModelAccess>('POST', '/v1/model/tokens', { body: {} });
  }

  /** Destroys the sandbox (every process and file in it). A no-op for a sandbox never engaged. */
  async destroy(): Promise<void> {
    if (this._id === undefined) {
      if (!this.engaging) return;
      await this.engaging.catch(() => undefined);
      if (this._id === undefined) return;
    }
    this._info = await this.http.json<SandboxInfo>('DELETE', `/v1/sandboxes/${encodeURIComponent(this._id)}`);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.destroy();
  }
}

/** Relative paths are under `/workspace`; the result is clean and absolute. */
export function resolvePath(path: string): string {
  if (path === '' || path === '.' || path === '/') return '/workspace';
  const abs = path.startsWith('/') ? path : `/workspace/${path}`;
  const clean = posix.normalize(abs);
  return clean.length > 1 ? clean.replace(/\/+$/, '') : clean;
}

interface ExecFrame {
  stdout?: string;
  stderr?: string;
  exit?: number;
  duration_ms?: number;
  truncated?: boolean;
  timed_out?: boolean;
  oom_killed?: boolean;
  error?: string;
}

async function readExecStream(res: Response, opts: RunOptions, addr: string): Promise<ExecResult> {
  if (!res.body) throw new SandboxError('protocol', 'exec answered without a body', { status: res.status });
  const decoder = new TextDecoder();
  let buf = '';
  let stdout = '';
  let stderr = '';
  const handle = (line: string): ExecResult | undefined => {
    if (!line.trim()) return undefined;
    let f: ExecFrame;
    try {
      f = JSON.parse(line) as ExecFrame;
    } catch {
      throw new SandboxError('protocol', `bad exec frame: ${line.slice(0, 200)}`);
    }
    if (typeof f.stdout === 'string') {
      stdout += f.stdout;
      opts.onStdout?.(f.stdout);
    }
    if (typeof f.stderr === 'string') {
      stderr += f.stderr;
      opts.onStderr?.(f.stderr);
    }
    if (typeof f.exit === 'number') {
      const fields: ConstructorParameters<typeof ExecResult>[0] = {
        stdout,
        stderr,
        exitCode: f.exit,
        durationMs: f.duration_ms ?? 0,
        truncated: f.truncated ?? false,
        timedOut: f.timed_out ?? false,
        oomKilled: f.oom_killed ?? false,
      };
      if (f.error) fields.error = f.error;
      return new ExecResult(fields);
    }
    return undefined;
  };
  const reader = res.body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const r = handle(buf.slice(0, nl));
        buf = buf.slice(nl + 1);
        if (r) return r;
      }
    }
    buf += decoder.decode();
    const r = handle(buf);
    if (r) return r;
  } catch (err) {
    throw networkError(err, opts.signal, addr);
  } finally {
    reader.cancel().catch(() => undefined);
  }
  throw new SandboxError('unavailable', 'the exec stream ended before the command finished (daemon gone?)');
}
