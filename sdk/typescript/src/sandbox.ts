import { posix } from 'node:path';
import { Http, checkMs, readFrames, sleep } from './client.js';
import type { Call } from './client.js';
import { approval as toApproval, createRequest, durationOption, fileEntry, modelAccess, portUrl, sandboxInfo } from './convert.js';
import {
  ApprovalDeniedError,
  ApprovalRequiredError,
  ApprovalTimeoutError,
  ConflictError,
  InvalidArgumentError,
  ProtocolError,
} from './errors.js';
import { Processes } from './processes.js';
import { ExecResult } from './result.js';
import type {
  Approval,
  ApprovalRequest,
  CallOptions,
  FileEntry,
  ModelAccess,
  PortUrl,
  PortUrlOptions,
  RunOptions,
  SandboxConnectOptions,
  SandboxCreateOptions,
  SandboxInfo,
  SandboxOptions,
  WaitForApprovalOptions,
  WriteFileOptions,
} from './types.js';
import type * as wire from './wire.js';

/** Longest single long-poll on an approval (the daemon allows up to 5m). */
const POLL_MS = 30_000;

/** The call options of `o` that are set. */
function call(o: CallOptions | undefined): CallOptions {
  const out: CallOptions = {};
  if (o?.signal) out.signal = o.signal;
  if (o?.requestTimeoutMs !== undefined) out.requestTimeoutMs = o.requestTimeoutMs;
  return out;
}

/**
 * One IronClaw sandbox: a sealed Linux environment on the daemon, with a writable `/workspace` and `/tmp`.
 *
 * ```ts
 * const sbx = await Sandbox.create({ ttlMs: 10 * 60_000 });
 * console.log((await sbx.run('uname -a')).toString());
 * await sbx.destroy();
 * ```
 * `new Sandbox(opts)` makes a handle without calling the daemon; every method engages it first if needed (creates
 * it, or checks the sandbox `opts.id` runs), so a tool can be built before its sandbox exists.
 * `IronClawSandbox` is the same class.
 *
 * Every method takes `signal` and `requestTimeoutMs` (see {@link CallOptions}); failures are `SandboxError`s of
 * one class per kind (`NotFoundError`, `RateLimitError`, ...).
 */
export class Sandbox {
  private readonly http: Http;
  private readonly opts: SandboxOptions;
  private _id: string | undefined;
  private _info: SandboxInfo | undefined;
  private engaging: Promise<this> | undefined;
  /** Approvals the create request filed (pending `sandbox.widen` for what it asked beyond the operator's ceilings and allowlist). */
  approvals: Approval[] = [];
  /** Why those could not be filed, if they could not (the sandbox exists either way). */
  approvalError: string | undefined;
  /** The sandbox's background processes: spawn, list, output from an offset, stdin, signals, kill, wait. */
  readonly processes: Processes;

  constructor(opts: SandboxOptions = {}) {
    this.opts = opts;
    this.http = new Http(opts);
    this._id = opts.id;
    this.processes = new Processes(this.http, (o) => this.sid(o));
  }

  /** Creates a sandbox and returns it running. */
  static create(opts?: SandboxCreateOptions): Promise<Sandbox>;
  /** Creates a sandbox whose root is `image` (a local image or directory, or a registry reference). */
  static create(image: string, opts?: SandboxCreateOptions): Promise<Sandbox>;
  static create(a?: string | SandboxCreateOptions, b?: SandboxCreateOptions): Promise<Sandbox> {
    const opts = typeof a === 'string' ? { ...b, image: a } : { ...a };
    const { id: _ignored, signal, ...rest } = opts;
    return new this(rest).engage(signal ? { signal } : {});
  }

  /** Reconnects to a running sandbox by id (`ConflictError` if it ended, `NotFoundError` if unknown). */
  static connect(id: string, opts: SandboxConnectOptions = {}): Promise<Sandbox> {
    const { signal, ...conn } = opts;
    return new this({ ...conn, id }).engage(signal ? { signal } : {});
  }

  /** Running sandboxes, optionally only those carrying every given label. */
  static async list(opts: SandboxConnectOptions & { labels?: Record<string, string> } = {}): Promise<SandboxInfo[]> {
    const http = new Http(opts);
    const labels = Object.entries(opts.labels ?? {}).map(([k, v]) => `${k}=${v}`);
    const all: SandboxInfo[] = [];
    let after: string | undefined;
    // The daemon answers a page at a time; `next` continues it.
    for (;;) {
      const q = new URLSearchParams(labels.map((l): [string, string] => ['label', l]));
      if (after !== undefined) q.set('after', after);
      const page = await http.json<wire.SandboxList>('GET', `/v1/sandboxes?${q}`, call(opts));
      all.push(...(page.sandboxes ?? []).map(sandboxInfo));
      if (!page.next) return all;
      after = page.next;
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
   * Idempotent: later calls return the same sandbox (and share the first call's `signal`).
   */
  engage(opts: CallOptions = {}): Promise<this> {
    this.engaging ??= this.doEngage(opts).catch((err: unknown) => {
      this.engaging = undefined; // let a later call try again
      throw err;
    });
    return this.engaging;
  }

  private async doEngage(opts: CallOptions): Promise<this> {
    if (this._id !== undefined) {
      const info = sandboxInfo(await this.http.json<wire.Sandbox>('GET', `/v1/sandboxes/${encodeURIComponent(this._id)}`, call(opts)));
      this._info = info;
      if (info.state !== 'running' && info.state !== 'paused') {
        throw new ConflictError(`sandbox ${info.id} is ${info.state}, not running`, { status: 409 });
      }
      return this;
    }
    const body = createRequest(this.opts);
    const created = await this.http.json<wire.CreatedSandbox>('POST', '/v1/sandboxes', { ...call(opts), body });
    this._id = created.id;
    this._info = sandboxInfo(created);
    this.approvals = (created.approvals ?? []).map(toApproval);
    this.approvalError = created.approval_error;
    return this;
  }

  private async sid(opts?: CallOptions): Promise<string> {
    await this.engage(call(opts));
    return encodeURIComponent(this._id as string);
  }

  /** Fetches the sandbox's current state (any state, not only running). */
  async getInfo(opts: CallOptions = {}): Promise<SandboxInfo> {
    if (this._id === undefined) await this.engage(call(opts));
    const w = await this.http.json<wire.Sandbox>('GET', `/v1/sandboxes/${encodeURIComponent(this._id as string)}`, call(opts));
    this._info = sandboxInfo(w);
    return this._info;
  }

  /**
   * Runs a command: a string is a shell line (`/bin/sh -c`), an array is an argv.
   * Output streams to `onStdout`/`onStderr` as it arrives. A non-zero exit is a result, not an error.
   * `requestTimeoutMs` bounds the wait for the output to begin; `timeoutMs` is the command's own wall time.
   */
  async run(command: string | string[], opts: RunOptions = {}): Promise<ExecResult> {
    const body: wire.ExecRequest = typeof command === 'string' ? { cmd: command } : { argv: command };
    if (opts.stdin !== undefined) body.stdin = opts.stdin;
    if (opts.cwd !== undefined) body.cwd = opts.cwd;
    if (opts.env !== undefined) body.env = opts.env;
    const timeout = durationOption('timeoutMs', opts.timeoutMs, opts.timeout);
    if (timeout !== undefined) body.timeout = timeout;
    checkMs('approvalTimeoutMs', opts.approvalTimeoutMs);
    const shown = typeof command === 'string' ? command : command.join(' ');
    // The first call on a handle not yet created creates it and runs the command in one request.
    let pending: Approval | undefined;
    if (this._id === undefined && this.engaging === undefined) {
      try {
        const first = await this.createAndRun(body, opts);
        if (first instanceof ExecResult) return first;
        pending = first;
      } catch (err) {
        // A daemon from before creates took a command: create, then run, as it knows.
        if (!(err instanceof InvalidArgumentError && err.message.includes('unknown field "exec"'))) throw err;
      }
    }
    const id = await this.sid(opts);
    let approved: string | undefined;
    for (;;) {
      if (pending === undefined) {
        const c = await this.http.call(
          'POST',
          `/v1/sandboxes/${id}/exec`,
          { ...call(opts), body: approved ? { ...body, approval: approved } : body },
          true,
        );
        if (c.res.status !== 202) return readExecStream(c, opts);
        let held: wire.ExecPending;
        try {
          held = (await c.res.json()) as wire.ExecPending;
        } catch (err) {
          throw c.fail(err);
        } finally {
          c.done();
        }
        if (!held?.approval?.id) throw new ProtocolError('exec answered 202 without an approval', { status: 202 });
        pending = toApproval(held.approval);
      }
      if (approved !== undefined || opts.approval === 'fail') {
        throw new ApprovalRequiredError(
          `"${shown}" needs an operator's approval (${pending.id}${pending.summary ? `: ${pending.summary}` : ''})`,
          { status: 202, approval: pending },
        );
      }
      opts.onApproval?.(pending);
      const wopts: WaitForApprovalOptions = call(opts);
      if (opts.approvalTimeoutMs !== undefined) wopts.timeoutMs = opts.approvalTimeoutMs;
      const final = await this.waitForApproval(pending.id, wopts);
      if (final.state === 'approved') {
        approved = final.id;
        pending = undefined;
        continue;
      }
      if (final.state === 'pending') {
        throw new ApprovalTimeoutError(`no operator decided on "${shown}" (${final.id}) in time`, { approval: final });
      }
      throw new ApprovalDeniedError(
        `"${shown}" was ${final.state === 'expired' ? 'not approved in time (expired)' : 'denied'}${final.reason ? `: ${final.reason}` : ''} (${final.id})`,
        { approval: final },
      );
    }
  }

  /**
   * Creates the sandbox with its first command (`POST /v1/sandboxes` with `exec`): the stream's first frame is the
   * sandbox (this handle is engaged from then on, and calls waiting on `engage` go on), then the command's frames,
   * or the exec.command approval the policy filed for it.
   */
  private createAndRun(body: wire.ExecRequest, opts: RunOptions): Promise<ExecResult | Approval> {
    let engaged!: (s: this) => void;
    let failed!: (err: unknown) => void;
    const engaging = new Promise<this>((resolve, reject) => {
      engaged = resolve;
      failed = reject;
    });
    engaging.catch(() => undefined); // the run's own caller hears the error
    this.engaging = engaging;
    let created = false;
    const notCreated = (err: unknown) => {
      if (created) return;
      if (this.engaging === engaging) this.engaging = undefined; // let a later call try again
      failed(err);
    };
    const onExec = execFrames(opts);
    const handle = (f: AnyFrame & Partial<wire.CreatedFrame & wire.ExecPending>): ExecResult | Approval | undefined => {
      if (!created) {
        if (!f.sandbox?.id) throw new ProtocolError('the create stream did not begin with the sandbox');
        created = true;
        this._id = f.sandbox.id;
        this._info = sandboxInfo(f.sandbox);
        this.approvals = (f.sandbox.approvals ?? []).map(toApproval);
        this.approvalError = f.sandbox.approval_error;
        engaged(this);
        return undefined;
      }
      if (f.approval !== undefined) {
        if (!f.approval.id) throw new ProtocolError('the create stream held an approval without an id');
        return toApproval(f.approval);
      }
      return onExec(f);
    };
    const run = async (): Promise<ExecResult | Approval> => {
      const c = await this.http.call('POST', '/v1/sandboxes', { ...call(opts), body: { ...createRequest(this.opts), exec: body } }, true);
      return readFrames(c, 'create', handle, 'the create stream ended before the command finished (daemon gone?)');
    };
    return run().catch((err: unknown) => {
      notCreated(err);
      throw err;
    });
  }
  /** Writes a file (parents are created). Relative paths are under `/workspace`. */
  async writeFile(path: string, data: string | Uint8Array, opts: WriteFileOptions = {}): Promise<void> {
    const id = await this.sid(opts);
    const query: Record<string, string | undefined> = { path: resolvePath(path) };
    if (opts.mode !== undefined) {
      query['mode'] = typeof opts.mode === 'number' ? opts.mode.toString(8).padStart(4, '0') : opts.mode;
    }
    await this.http.empty('PUT', `/v1/sandboxes/${id}/files`, { ...call(opts), query, rawBody: data });
  }

  /** Reads a file's bytes. */
  async readFile(path: string, opts: CallOptions = {}): Promise<Uint8Array> {
    const id = await this.sid(opts);
    return this.http.bytes('GET', `/v1/sandboxes/${id}/files`, { ...call(opts), query: { path: resolvePath(path) } });
  }

  /** Reads a file as UTF-8 text. */
  async readTextFile(path: string, opts: CallOptions = {}): Promise<string> {
    return new TextDecoder().decode(await this.readFile(path, opts));
  }

  /** Lists a directory. */
  async list(path = '/workspace', opts: CallOptions = {}): Promise<FileEntry[]> {
    const id = await this.sid(opts);
    const all: FileEntry[] = [];
    let after: string | undefined;
    // The daemon answers a page at a time; `next` continues it.
    for (;;) {
      const page = await this.http.json<wire.FileList>('GET', `/v1/sandboxes/${id}/files`, {
        ...call(opts),
        query: { path: resolvePath(path), list: '1', after },
      });
      all.push(...(page.entries ?? []).map(fileEntry));
      if (!page.next) return all;
      after = page.next;
    }
  }

  /** Files a request for an operator's decision (`POST /v1/approvals`); returns it, pending. */
  async requestApproval(req: ApprovalRequest, opts: CallOptions = {}): Promise<Approval> {
    // The daemon validates kind and data (strictly, per kind); the SDK passes them on.
    const body: wire.FileApprovalRequest = {
      kind: req.kind as wire.FileApprovalRequest['kind'],
      data: req.data as wire.FileApprovalRequest['data'],
    };
    const note = req.note ?? req.summary;
    if (note !== undefined) body.note = note;
    if (req.session === undefined) {
      await this.engage(call(opts));
      body.session = this._id as string;
    } else if (req.session !== null) {
      body.session = req.session;
    }
    return toApproval(await this.http.json<wire.Approval>('POST', '/v1/approvals', { ...call(opts), body }));
  }

  /** One approval as it is now. */
  async getApproval(id: string, opts: CallOptions = {}): Promise<Approval> {
    return toApproval(await this.http.json<wire.Approval>('GET', `/v1/approvals/${encodeURIComponent(id)}`, call(opts)));
  }

  /**
   * Long-polls an approval until it is no longer `pending` (approved, denied or expired) and returns it.
   * With `timeoutMs`, returns it as it is (possibly still pending) once that much time has passed. Each poll may
   * take its wait plus `requestTimeoutMs`.
   */
  async waitForApproval(id: string, opts: WaitForApprovalOptions = {}): Promise<Approval> {
    const timeoutMs = checkMs('timeoutMs', opts.timeoutMs);
    const deadline = timeoutMs === undefined ? Infinity : Date.now() + timeoutMs;
    const path = `/v1/approvals/${encodeURIComponent(id)}`;
    for (;;) {
      const left = deadline - Date.now();
      const waitMs = Math.ceil(Math.min(POLL_MS, Math.max(0, left)));
      const started = Date.now();
      const query: Record<string, string | undefined> = waitMs >= 1 ? { wait: `${waitMs}ms` } : {};
      const a = toApproval(await this.http.json<wire.Approval>('GET', path, { ...call(opts), query, holdMs: waitMs }));
      if (a.state !== 'pending' || Date.now() >= deadline) return a;
      // A daemon that answered a long-poll early with the state unchanged: do not spin.
      if (Date.now() - started < Math.min(250, waitMs)) await sleep(250, opts.signal);
    }
  }

  /** Mints a model-proxy token: point an OpenAI or Anthropic client at the returned base URL with the token as key. */
  async modelAccess(opts: CallOptions = {}): Promise<ModelAccess> {
    return modelAccess(await this.http.json<wire.ModelToken>('POST', '/v1/model/tokens', { ...call(opts), body: {} }));
  }

  /** Destroys the sandbox (every process and file in it). A no-op for a sandbox never engaged. */
  async destroy(opts: CallOptions = {}): Promise<void> {
    if (this._id === undefined) {
      if (!this.engaging) return;
      await this.engaging.catch(() => undefined);
      if (this._id === undefined) return;
    }
    const w = await this.http.json<wire.Sandbox>('DELETE', `/v1/sandboxes/${encodeURIComponent(this._id)}`, call(opts));
    this._info = sandboxInfo(w);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.destroy();
  }

  /**
   * Pauses the sandbox (`POST /v1/sandboxes/{id}/pause`): its processes are frozen (no CPU; memory, files and
   * processes kept) until `resume()` or the next request, which resumes it first. Returns it, now `paused`.
   * Refused (409) while commands run; 503 on a backend that cannot pause.
   */
  async pause(opts: CallOptions = {}): Promise<SandboxInfo> {
    const id = await this.sid(opts);
    this._info = sandboxInfo(await this.http.json<wire.Sandbox>('POST', `/v1/sandboxes/${id}/pause`, call(opts)));
    return this._info;
  }

  /**
   * Copies `/workspace` (directories and regular files with their permission bits; symlinks are counted in `skipped`)
   * into a snapshot the daemon keeps for its run; `new IronClawSandbox({ snapshot: s.id })` forks it.
   */
  async snapshot(opts: CallOptions = {}): Promise<wire.Snapshot> {
    const id = await this.sid(opts);
    return this.http.json<wire.Snapshot>('POST', `/v1/sandboxes/${id}/snapshots`, call(opts));
  }

  /**
   * A URL that reaches `port` inside the sandbox from the host (`POST /v1/sandboxes/{id}/ports`): the daemon
   * reverse-proxies HTTP and WebSocket on it to the sandbox's `127.0.0.1:<port>` until `expiresAt`. The port must
   * be one the sandbox was created with (`ports: [3000]`) and the policy must allow inbound ports
   * (`ForbiddenError` otherwise). A `502` from the URL means nothing listens inside yet.
   */
  async getPortUrl(port: number, opts: PortUrlOptions = {}): Promise<PortUrl> {
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw new InvalidArgumentError(`port ${String(port)} is not a TCP port`);
    const id = await this.sid(opts);
    const body: wire.OpenPortRequest = { port };
    const ttl = durationOption('ttlMs', opts.ttlMs, undefined);
    if (ttl !== undefined) body.ttl = ttl;
    return portUrl(await this.http.json<wire.PortURL>('POST', `/v1/sandboxes/${id}/ports`, { ...call(opts), body }));
  }

  /** Resumes a paused sandbox (`POST /v1/sandboxes/{id}/resume`); returns it, now `running`. */
  async resume(opts: CallOptions = {}): Promise<SandboxInfo> {
    const id = await this.sid(opts);
    this._info = sandboxInfo(await this.http.json<wire.Sandbox>('POST', `/v1/sandboxes/${id}/resume`, call(opts)));
    return this._info;
  }
}

/** Relative paths are under `/workspace`; the result is clean and absolute. */
export function resolvePath(path: string): string {
  if (path === '' || path === '.' || path === '/') return '/workspace';
  const abs = path.startsWith('/') ? path : `/workspace/${path}`;
  const clean = posix.normalize(abs);
  return clean.length > 1 ? clean.replace(/\/+$/, '') : clean;
}

/** One line of the exec stream, any frame: the members of both kinds, all optional. */
type AnyFrame = Partial<wire.ExecOutputFrame & wire.ExecExitFrame>;

function readExecStream(c: Call, opts: RunOptions): Promise<ExecResult> {
  return readFrames(c, 'exec', execFrames(opts), 'the exec stream ended before the command finished (daemon gone?)');
}

/** The handler of an exec stream's frames: output to `opts`' callbacks, the result at the exit frame. */
function execFrames(opts: RunOptions): (f: AnyFrame) => ExecResult | undefined {
  let stdout = '';
  let stderr = '';
  return (f: AnyFrame): ExecResult | undefined => {
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
}
