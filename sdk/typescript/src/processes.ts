import { readFrames } from './client.js';
import type { Http } from './client.js';
import { approval as toApproval, durationOption } from './convert.js';
import { ApprovalRequiredError, InvalidArgumentError, ProtocolError } from './errors.js';
import type { CallOptions } from './types.js';
import type * as wire from './wire.js';

/** A background process, as the daemon describes it. */
export interface ProcessInfo {
  /** The daemon's handle for the process, unique in its sandbox: what every other call takes. */
  pid: number;
  /** Its pid inside the sandbox (0 until known). */
  osPid: number;
  /** The tag it was spawned with, if any. */
  tag?: string;
  argv: string[];
  state: 'running' | 'exited';
  /** Once exited: 128+N for signal N (143 for TERM, 137 for a kill), 126/127 when it could not start, -1 when its end is unknown. */
  exitCode?: number;
  /** Why it could not start, or how it ended (`killed`). */
  error?: string;
  startedAt: Date;
  endedAt?: Date;
  /** The end of its output log, in bytes: where a read from now on starts. */
  offset: number;
  /** Where the part of the log the daemon still holds begins (it keeps the newest 1 MiB). */
  dropped: number;
  /** Its stdin is open (spawned with `stdin: true` and not yet closed). */
  stdin: boolean;
}

/** What `spawn` returns: the process's handle (and all else known of it). */
export type ProcessHandle = ProcessInfo;

export interface SpawnOptions extends CallOptions {
  /** Working directory inside (a clean absolute path). @default `/workspace` */
  cwd?: string;
  env?: Record<string, string>;
  /** A name for `list({ tag })`: at most 64 letters, digits and `. _ - : /`. */
  tag?: string;
  /** Open the process's stdin for `sendStdin`/`closeStdin`; without it the process reads end of file. */
  stdin?: boolean;
  /** An approved `exec.command` request (mode `spawn`) to spend: see `ApprovalRequiredError`. */
  approval?: string;
  /**
   * The daemon ends the process group (SIGKILL, exit 137) after this many milliseconds, whether or not a client
   * is still there. @default none: it runs until it exits, is killed or its sandbox ends
   */
  timeoutMs?: number;
}

export interface OutputOptions extends CallOptions {
  /** A byte offset into the process's output log (a `ProcessOutput.offset` of an earlier read). @default 0 */
  offset?: number;
  /** Wait for more output until the process exits (or `signal` aborts the read). */
  follow?: boolean;
  onStdout?: (text: string) => void;
  onStderr?: (text: string) => void;
  /** Told of bytes before the offset that the daemon no longer held (its ring overwrote them). */
  onDropped?: (bytes: number) => void;
  /** Keep the text read in the result. @default true; false for a long follow that only uses the callbacks */
  collect?: boolean;
}

/** What an output read returned. */
export interface ProcessOutput {
  stdout: string;
  stderr: string;
  /** Where a later read continues. */
  offset: number;
  /** Bytes the read skipped because the daemon no longer held them. */
  dropped: number;
  /** The process's state when the read stopped; with `exited`, `exitCode` is set and the log is complete. */
  state: 'running' | 'exited';
  exitCode?: number;
  error?: string;
}

/** The signals a process may be sent. */
export type ProcessSignal = 'TERM' | 'INT' | 'HUP' | 'QUIT' | 'KILL' | 'USR1' | 'USR2';
const SIGNALS = new Set(['TERM', 'INT', 'HUP', 'QUIT', 'KILL', 'USR1', 'USR2']);

/** The call options of `o` that are set. */
function call(o: CallOptions | undefined): CallOptions {
  const out: CallOptions = {};
  if (o?.signal) out.signal = o.signal;
  if (o?.requestTimeoutMs !== undefined) out.requestTimeoutMs = o.requestTimeoutMs;
  return out;
}

function checkPid(pid: number): number {
  if (!Number.isSafeInteger(pid) || pid < 1) throw new InvalidArgumentError(`${String(pid)} is not a process handle (a positive integer)`);
  return pid;
}

export function processInfo(w: wire.Process): ProcessInfo {
  const p: ProcessInfo = {
    pid: w.pid,
    osPid: w.os_pid,
    argv: w.argv ?? [],
    state: w.state,
    startedAt: new Date(w.started_at),
    offset: w.offset,
    dropped: w.dropped,
    stdin: w.stdin,
  };
  if (w.tag) p.tag = w.tag;
  if (w.exit !== undefined) p.exitCode = w.exit;
  if (w.error) p.error = w.error;
  if (w.ended_at) p.endedAt = new Date(w.ended_at);
  return p;
}

/**
 * A sandbox's background processes (`sandbox.processes`): commands that keep running after the call that
 * started them, whose output the daemon keeps (the newest 1 MiB each) for reading from an offset, now or later,
 * from this client or another.
 *
 * ```ts
 * const { pid } = await sbx.processes.spawn('python3 -m http.server 8000', { tag: 'web' });
 * const out = await sbx.processes.output(pid);            // what it printed so far
 * await sbx.processes.signal(pid, 'TERM');
 * const done = await sbx.processes.wait(pid);             // done.exitCode === 143
 * ```
 */
export class Processes {
  constructor(
    private readonly http: Http,
    private readonly sid: (opts?: CallOptions) => Promise<string>,
  ) {}

  private async path(pid: number, rest = '', opts?: CallOptions): Promise<string> {
    checkPid(pid);
    return `/v1/sandboxes/${await this.sid(opts)}/processes/${pid}${rest}`;
  }

  /** Starts a process: a string is a shell line (`/bin/sh -c`), an array an argv. Resolves once it runs. */
  async spawn(command: string | string[], opts: SpawnOptions = {}): Promise<ProcessHandle> {
    const id = await this.sid(opts);
    const body: wire.SpawnProcessRequest = typeof command === 'string' ? { cmd: command } : { argv: command };
    if (opts.cwd !== undefined) body.cwd = opts.cwd;
    if (opts.env !== undefined) body.env = opts.env;
    if (opts.tag !== undefined) body.tag = opts.tag;
    if (opts.stdin) body.stdin = true;
    if (opts.approval !== undefined) body.approval = opts.approval;
    const timeout = durationOption('timeoutMs', opts.timeoutMs, undefined);
    if (timeout !== undefined) body.timeout = timeout;
    const c = await this.http.call('POST', `/v1/sandboxes/${id}/processes`, { ...call(opts), body });
    try {
      if (c.res.status === 202) {
        const held = (await c.res.json()) as wire.ExecPending;
        if (!held?.approval?.id) throw new ProtocolError('spawn answered 202 without an approval', { status: 202 });
        const pending = toApproval(held.approval);
        throw new ApprovalRequiredError(`this command needs an operator's approval (${pending.id}${pending.summary ? `: ${pending.summary}` : ''})`, {
          status: 202,
          approval: pending,
        });
      }
      return processInfo((await c.res.json()) as wire.Process);
    } catch (err) {
      throw c.fail(err);
    } finally {
      c.done();
    }
  }

  /** The sandbox's processes: running ones and the exited ones still kept (the newest 64), oldest first. */
  async list(opts: CallOptions & { tag?: string } = {}): Promise<ProcessInfo[]> {
    const id = await this.sid(opts);
    const l = await this.http.json<wire.ProcessList>('GET', `/v1/sandboxes/${id}/processes`, { ...call(opts), query: { tag: opts.tag } });
    return (l.processes ?? []).map(processInfo);
  }

  /** One process as it is now. */
  async get(pid: number, opts: CallOptions = {}): Promise<ProcessInfo> {
    return processInfo(await this.http.json<wire.Process>('GET', await this.path(pid, '', opts), call(opts)));
  }

  /**
   * Waits until the process exited and returns it. It waits as long as the process runs unless `signal` or
   * `requestTimeoutMs` says otherwise.
   */
  async wait(pid: number, opts: CallOptions = {}): Promise<ProcessInfo> {
    const o = call(opts);
    o.requestTimeoutMs ??= 0;
    return processInfo(await this.http.json<wire.Process>('GET', await this.path(pid, '/wait', opts), o));
  }

  /** Kills the process (its process group) if it runs, waits for its end and forgets it; returns how it ended. */
  async kill(pid: number, opts: CallOptions = {}): Promise<ProcessInfo> {
    return processInfo(await this.http.json<wire.Process>('DELETE', await this.path(pid, '', opts), call(opts)));
  }

  /** Sends a signal to the process's group (inside the sandbox, as its user). */
  async signal(pid: number, sig: ProcessSignal, opts: CallOptions = {}): Promise<void> {
    const s = String(sig).toUpperCase().replace(/^SIG/, '');
    if (!SIGNALS.has(s)) throw new InvalidArgumentError(`signal ${String(sig)}: one of ${[...SIGNALS].join(', ')}`);
    await this.http.empty('POST', await this.path(pid, '/signal', opts), { ...call(opts), body: { signal: s } });
  }

  /** Writes to the process's stdin (at most 1 MiB a call; it waits while the daemon's 1 MiB buffer is full). */
  async sendStdin(pid: number, data: string | Uint8Array, opts: CallOptions = {}): Promise<void> {
    const bytes = typeof data === 'string' ? new TextEncoder().encode(data) : data;
    await this.http.json<wire.StdinWritten>('POST', await this.path(pid, '/stdin', opts), { ...call(opts), rawBody: bytes });
  }

  /** Closes the process's stdin: it reads end of file once it read what was written. */
  async closeStdin(pid: number, opts: CallOptions = {}): Promise<void> {
    await this.http.json<wire.StdinWritten>('POST', await this.path(pid, '/stdin', opts), {
      ...call(opts),
      query: { close: '1' },
      rawBody: new Uint8Array(0),
    });
  }

  /**
   * Reads the process's output from `offset` on: what the daemon holds now, or with `follow` everything until
   * the process exits. Output also goes to `onStdout`/`onStderr` as it arrives. `offset` in the result is where a
   * later read continues, so a client can reattach after a restart without reading anything twice.
   */
  async output(pid: number, opts: OutputOptions = {}): Promise<ProcessOutput> {
    const offset = opts.offset ?? 0;
    if (!Number.isSafeInteger(offset) || offset < 0) throw new InvalidArgumentError(`offset ${String(offset)} must be a byte offset (0 or more)`);
    const query: Record<string, string | undefined> = { offset: String(offset) };
    if (opts.follow) query['follow'] = '1';
    const c = await this.http.call('GET', await this.path(pid, '/output', opts), { ...call(opts), query }, true);
    const collect = opts.collect ?? true;
    const out: ProcessOutput = { stdout: '', stderr: '', offset, dropped: 0, state: 'running' };
    type AnyFrame = Partial<wire.ProcessOutputFrame & wire.ProcessEndFrame>;
    const handle = (f: AnyFrame): ProcessOutput | undefined => {
      if (f.end) {
        out.offset = f.offset ?? out.offset;
        out.state = f.state ?? 'running';
        if (f.exit !== undefined) out.exitCode = f.exit;
        if (f.error) out.error = f.error;
        return out;
      }
      if (typeof f.dropped === 'number' && f.dropped > 0) {
        out.dropped += f.dropped;
        opts.onDropped?.(f.dropped);
      } else if (typeof f.stdout === 'string') {
        if (collect) out.stdout += f.stdout;
        opts.onStdout?.(f.stdout);
      } else if (typeof f.stderr === 'string') {
        if (collect) out.stderr += f.stderr;
        opts.onStderr?.(f.stderr);
      }
      return undefined;
    };
    return readFrames(c, 'output', handle, 'the output stream ended before its end frame (daemon gone?)');
  }
}
