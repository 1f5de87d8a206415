/**
 * Mastra adapter: a shell tool (`makeSandboxTool`), and a Workspace sandbox and filesystem
 * (`IronClawWorkspaceSandbox`, `IronClawFilesystem`) so `new Workspace({ sandbox, filesystem })` runs
 * Mastra's built-in workspace tools inside an IronClaw sandbox.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';
import { posix } from 'node:path';
import { createTool } from '@mastra/core/tools';
import {
  DirectoryNotEmptyError,
  DirectoryNotFoundError,
  FileExistsError,
  FileNotFoundError,
  FilesystemError,
  IsDirectoryError,
  MastraFilesystem,
  MastraSandbox,
  NotDirectoryError,
  PermissionError,
  ProcessHandle as MastraProcessHandle,
  SandboxAbortError,
  SandboxProcessManager,
  SandboxUnsupportedFeatureError,
  StaleFileError,
  UnsupportedGrepPatternError,
  WorkspaceReadOnlyError,
  validateSandboxFileMode,
} from '@mastra/core/workspace';
import type {
  CommandResult,
  CopyOptions,
  ExecuteCommandOptions,
  FileContent,
  FileStat,
  FileEntry as MastraFileEntry,
  FilesystemGrepMatch,
  FilesystemGrepOptions,
  FilesystemGrepResult,
  FilesystemInfo,
  InstructionsOption,
  ListOptions,
  MastraFilesystemOptions,
  ProcessInfo as MastraProcessInfo,
  ProviderStatus,
  ReadOptions,
  SpawnProcessOptions,
  RemoveOptions,
  SandboxFileInput,
  SandboxCloneOptions,
  SandboxInfo as MastraSandboxInfo,
  SandboxNetworking,
  SandboxStartOptions,
  SandboxStartResult,
  MountResult,
  WorkspaceFilesystem,
  WorkspaceToolHooks,
  WalkEntry,
  WalkOptions,
  WriteFilesOptions,
  WriteOptions,
} from '@mastra/core/workspace';
import type { RequestContext } from '@mastra/core/request-context';
import { z } from 'zod';
import {
  AbortError,
  ApprovalDeniedError,
  ApprovalRequiredError,
  ApprovalTimeoutError,
  ConflictError,
  ForbiddenError,
  InvalidArgumentError,
  NotFoundError,
  SandboxError,
  UnavailableError,
} from './errors.js';
import type { ProcessInfo as IronClawProcessInfo, SpawnOptions } from './processes.js';
import type { ExecResult } from './result.js';
import { Sandbox } from './sandbox.js';
import { Volumes } from './volumes.js';
import { SHELL_TOOL_DESCRIPTION, runShellTool } from './tool.js';
import type { ShellToolOptions } from './tool.js';
import type { Approval, ConnectionOptions, RunOptions, SandboxInfo, SandboxOptions, WriteFileOptions } from './types.js';

export interface MastraSandboxToolOptions extends Omit<ShellToolOptions, 'name'> {
  /** Tool id (default `sandbox_shell`); the name the model sees is the key you register it under. */
  id?: string;
}

/**
 * A Mastra tool that runs `{ command }` in the sandbox and returns `{ output, exitCode }`, `output` being
 * `ExecResult.toString()`. Output streams to the agent's writer as `data-sandbox-stdout`/`-stderr` chunks.
 * A command an operator did not approve returns `{ output: 'denied: ...', exitCode: -1, denied: true }`.
 * While a command waits for an operator's approval, a `data-ironclaw-approval` chunk ({@link ApprovalChunkData},
 * with the approval's id) goes to the writer, so the agent's stream shows the wait.
 */
export function makeSandboxTool(sandbox: Sandbox, opts: MastraSandboxToolOptions = {}) {
  const id = opts.id ?? 'sandbox_shell';
  return createTool({
    id,
    description: opts.description ?? SHELL_TOOL_DESCRIPTION,
    inputSchema: z.object({
      command: z.string().min(1).describe('The shell command line to run, e.g. "ls -la" or "python3 main.py"'),
    }),
    outputSchema: z.object({
      output: z.string(),
      exitCode: z.number(),
      denied: z.boolean().optional(),
    }),
    execute: async ({ command }, context) => {
      const writer = context?.writer;
      const toolCallId = context?.agent?.toolCallId;
      const emit = (type: 'data-sandbox-stdout' | 'data-sandbox-stderr') =>
        writer
          ? (data: string) => {
              void writer
                .custom({ type, data: { output: data, timestamp: Date.now(), toolCallId }, transient: true })
                .catch(() => undefined);
            }
          : undefined;
      const call: Parameters<typeof runShellTool>[3] = { signal: context?.abortSignal };
      const out = emit('data-sandbox-stdout');
      const err = emit('data-sandbox-stderr');
      if (out) call.onStdout = out;
      if (err) call.onStderr = err;
      const target = writer
        ? announcing(sandbox, (a) => {
            void writer.custom({ type: APPROVAL_CHUNK_TYPE, data: approvalChunk(a, toolCallId) }).catch(() => undefined);
          })
        : sandbox;
      return runShellTool(target, command, { ...opts, name: id }, call);
    },
  });
}

/** The data of a `data-ironclaw-approval` chunk: what the stream's reader needs to find and decide the approval. */
export interface ApprovalChunkData {
  approvalId: string;
  kind: string;
  state: string;
  summary: string;
  expiresAt: string;
  sandboxId?: string;
  toolCallId?: string;
}

function approvalChunk(a: Approval, toolCallId: string | undefined): ApprovalChunkData {
  const data: ApprovalChunkData = {
    approvalId: a.id,
    kind: a.kind,
    state: a.state,
    summary: a.summary,
    expiresAt: a.expiresAt.toISOString(),
  };
  if (a.session) data.sandboxId = a.session;
  if (toolCallId) data.toolCallId = toolCallId;
  return data;
}

/**
 * The same sandbox, calling `announce` with every approval its commands wait for: those the daemon's exec
 * policy holds and those a tool files itself (`requireApproval`).
 */
function announcing(sandbox: Sandbox, announce: (a: Approval) => void): Sandbox {
  return new Proxy(sandbox, {
    get(t, p) {
      if (p === 'run') {
        return (command: string | string[], o: RunOptions = {}) =>
          t.run(command, {
            ...o,
            onApproval: (a) => {
              announce(a);
              o.onApproval?.(a);
            },
          });
      }
      if (p === 'requestApproval') {
        return async (...args: Parameters<Sandbox['requestApproval']>) => {
          const a = await t.requestApproval(...args);
          announce(a);
          return a;
        };
      }
      const v = Reflect.get(t, p, t) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(t) : v;
    },
  });
}

/** The stream writer and tool call id of the workspace tool call running now (set by {@link ironClawToolHooks}). */
const toolCallContext = new AsyncLocalStorage<{ writer?: ToolStreamWriter; toolCallId?: string }>();

interface ToolStreamWriter {
  custom(chunk: { type: `data-${string}`; data: unknown; transient?: boolean }): Promise<void>;
}

/**
 * Workspace tool hooks that let `IronClawWorkspaceSandbox` reach the agent's stream: with
 * `new Workspace({ sandbox, filesystem, tools: { hooks: ironClawToolHooks() } })`, a command that waits for an
 * operator's approval writes a `data-ironclaw-approval` chunk (with the approval id) to the stream of the tool
 * call that ran it. (Mastra hands a sandbox no writer of its own.) Compose with hooks of your own by calling
 * these first.
 */
export function ironClawToolHooks(): WorkspaceToolHooks {
  return {
    // Synchronous on purpose: enterWith then holds for the rest of this tool call's execution.
    beforeToolCall: (ctx) => {
      const c = (ctx.context ?? {}) as { writer?: ToolStreamWriter; agent?: { toolCallId?: string } };
      const store: { writer?: ToolStreamWriter; toolCallId?: string } = {};
      if (c.writer && typeof c.writer.custom === 'function') store.writer = c.writer;
      if (c.agent?.toolCallId) store.toolCallId = c.agent.toolCallId;
      toolCallContext.enterWith(store);
    },
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Workspace sandbox

/** The label that ties a daemon sandbox to a logical Mastra sandbox id (for get-or-create). */
export const MASTRA_ID_LABEL = 'mastra.sandbox-id';

/** The stream chunk type an approval wait is announced with (on a tool's `writer`, see {@link makeSandboxTool}). */
export const APPROVAL_CHUNK_TYPE = 'data-ironclaw-approval';

export interface IronClawWorkspaceSandboxOptions extends SandboxOptions {
  /**
   * Logical id. A daemon id (`sbx-...`) reconnects to that sandbox; any other string is get-or-create:
   * `start()` reconnects to the running sandbox labelled `mastra.sandbox-id=<id>`, else creates one with that label.
   * Default: a random id.
   */
  id?: string;
  /** Use this client (e.g. one shared with your own code) instead of making one. */
  sandbox?: Sandbox;
  /**
   * Text for the agent's instructions: a string, or a function of the default text and the request's
   * `requestContext` (Mastra's `InstructionsOption`). Default: a description of the sandbox.
   */
  instructions?: InstructionsOption;
  /** Working directory for commands (default `/workspace`). */
  workingDirectory?: string;
  /** Called when a command waits for an operator's approval (before the wait), with the pending approval. */
  onApproval?: (approval: Approval) => void;
  onStart?: ConstructorParameters<typeof MastraSandbox>[0]['onStart'];
  onStop?: ConstructorParameters<typeof MastraSandbox>[0]['onStop'];
  onDestroy?: ConstructorParameters<typeof MastraSandbox>[0]['onDestroy'];
}

const DEFAULT_INSTRUCTIONS =
  'Commands run in an isolated IronClaw Linux sandbox as an unprivileged user. /workspace is the working ' +
  'directory and HOME (writable, kept between commands); /tmp is writable; the rest of the filesystem is ' +
  'read-only. There is no network except hosts an operator allowed (through the HTTP proxy in HTTP_PROXY). ' +
  'Some commands need an operator\'s approval and may be denied.';

/** LocalSandbox's exit code for a command that ran past its timeout. */
const TIMEOUT_EXIT = 124;
/** LocalSandbox's exit code for a command killed by a signal (an abort). */
const KILLED_EXIT = 128;

/** How long `getInfo()` reuses the resource usage it read. */
const RESOURCES_TTL_MS = 5_000;

/** In-flight starts by daemon address and logical id: concurrent starts in one process share one get-or-create. */
const acquiring = new Map<string, Promise<Sandbox>>();

/** The daemon says this sandbox is gone (ended, reaped, crashed, lost, unknown). */
function isGone(err: unknown): boolean {
  if (err instanceof NotFoundError) return /sandbox not found/.test(err.message);
  if (err instanceof ConflictError) return /not running|is (destroyed|reaped|crashed|lost)/.test(err.message);
  return false;
}

/** Keeps the newest `max` bytes of `s` (whole code points), as Mastra's retained output buffer does. */
function retain(s: string, max: number | undefined): { text: string; dropped: number } {
  if (max === undefined || max === Infinity) return { text: s, dropped: 0 };
  if (!Number.isInteger(max) || max < 0) throw new RangeError('maxRetainedBytes must be a non-negative integer or Infinity');
  let bytes = Buffer.byteLength(s);
  if (bytes <= max) return { text: s, dropped: 0 };
  if (max === 0) return { text: '', dropped: bytes };
  let i = 0;
  let dropped = 0;
  while (i < s.length && bytes > max) {
    const cp = s.codePointAt(i) as number;
    const n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    bytes -= n;
    dropped += n;
    i += cp > 0xffff ? 2 : 1;
  }
  return { text: s.slice(i), dropped };
}

/** A Mastra `WorkspaceSandbox` backed by an IronClaw sandbox. */
export class IronClawWorkspaceSandbox extends MastraSandbox {
  readonly id: string;
  readonly name = 'IronClawWorkspaceSandbox';
  readonly provider = 'ironclaw';
  status: ProviderStatus = 'pending';
  private readonly options: IronClawWorkspaceSandboxOptions;
  private _client: Sandbox | undefined;
  private readonly shared: boolean;
  private recovering: Promise<void> | undefined;
  private usage: { sandboxId: string; at: number; value: MastraSandboxInfo['resources'] } | undefined;

  constructor(opts: IronClawWorkspaceSandboxOptions = {}) {
    const base: ConstructorParameters<typeof MastraSandbox>[0] = {
      name: 'IronClawWorkspaceSandbox',
      workingDirectory: opts.workingDirectory ?? '/workspace',
    };
    if (opts.onStart) base.onStart = opts.onStart;
    if (opts.onStop) base.onStop = opts.onStop;
    if (opts.onDestroy) base.onDestroy = opts.onDestroy;
    base.processes = new IronClawProcessManager();
    super(base);
    (this as { networking: SandboxNetworking }).networking = { getPortUrl: (port: number) => this.getPortUrl(port) };
    this.options = opts;
    this.shared = opts.sandbox !== undefined;
    this._client = opts.sandbox;
    this.id = opts.id ?? opts.sandbox?.id ?? `ironclaw-${randomUUID()}`;
  }

  /** The IronClaw client (after start). */
  get client(): Sandbox {
    if (!this._client) throw new ConflictError(`sandbox ${this.id} is not started`);
    return this._client;
  }

  /** The daemon's id of the sandbox in use (`sbx-...`), once started. */
  get sandboxId(): string | undefined {
    return this._client?.id;
  }

  /** The connection and create options (what every client of this sandbox is made with). */
  private rest(): SandboxOptions {
    const {
      sandbox: _s,
      instructions: _i,
      workingDirectory: _w,
      onStart: _a,
      onStop: _b,
      onDestroy: _c,
      onApproval: _o,
      id: _id,
      ...rest
    } = this.options;
    const fromMounts = this.volumeMounts();
    if (fromMounts.length) rest.volumes = [...(rest.volumes ?? []), ...fromMounts];
    return rest;
  }

  /**
   * The volumes `Workspace({ mounts })` asked for (IronClaw volume filesystems): the sandbox is created with them
   * at their mount paths, so they must be known before it starts. Each filesystem learns its mount path here.
   */
  private volumeMounts(): Array<{ name: string; path: string }> {
    const out: Array<{ name: string; path: string }> = [];
    for (const [path, entry] of this.mounts?.entries ?? []) {
      const fs = entry.filesystem;
      const config = fs.getMountConfig?.() as { type?: string; volume?: unknown } | undefined;
      if (config?.type !== VOLUME_MOUNT_TYPE || typeof config.volume !== 'string') continue;
      if (entry.state === 'error' || entry.state === 'unsupported') continue;
      if (fs instanceof IronClawFilesystem) fs.bindMountPath(path);
      out.push({ name: config.volume, path });
    }
    return out;
  }

  /** `start()` after a `destroy()` makes a new sandbox (the object stays usable), as LocalSandbox does. */
  override async _start(options?: SandboxStartOptions): Promise<SandboxStartResult | void> {
    if (this.status === 'destroyed') this.status = 'pending';
    return super._start(options);
  }

  /**
   * Get-or-create: reconnects to this logical sandbox if it is still running on the daemon, else creates it.
   * Concurrent starts in one process share one lookup and create; across processes a create that finds
   * another sandbox with the same logical id made first destroys its own and connects to that one.
   */
  override async start(options: SandboxStartOptions = {}): Promise<SandboxStartResult> {
    const signal = options.abortSignal;
    if (signal?.aborted) throw new SandboxAbortError('start', signal.reason);
    try {
      return await this.acquire(signal);
    } catch (err) {
      if (err instanceof AbortError) throw new SandboxAbortError('start', signal?.reason);
      throw err;
    }
  }

  private async acquire(signal: AbortSignal | undefined): Promise<SandboxStartResult> {
    const call: { signal?: AbortSignal } = signal ? { signal } : {};
    if (this.shared) {
      const client = this._client as Sandbox;
      const had = client.id !== undefined;
      await client.engage(call);
      await this.resumeIfPaused(client, call);
      return { outcome: had ? 'connected' : 'created' };
    }
    const rest = this.rest();
    // 1. the sandbox this instance used before (stop() keeps it running on the daemon)
    const known = this._client?.id ?? (this.id.startsWith('sbx-') ? this.id : undefined);
    if (known !== undefined) {
      try {
        this._client = await Sandbox.connect(known, { ...rest, ...call });
        await this.resumeIfPaused(this._client, call);
        return { outcome: 'connected' };
      } catch (err) {
        const gone = err instanceof NotFoundError || err instanceof ConflictError;
        if (!gone || this.id.startsWith('sbx-')) throw err;
        this._client = undefined;
      }
    }
    // 2. a running sandbox carrying our logical id, else 3. a new one; one at a time per logical id here
    const key = `${new Sandbox(rest).addr}\u0000${this.id}`;
    let created = false;
    let p = acquiring.get(key);
    if (!p) {
      p = this.lookupOrCreate(rest, call).then((r) => {
        created = r.created;
        return r.sandbox;
      });
      acquiring.set(key, p);
      p.then(
        () => acquiring.delete(key),
        () => acquiring.delete(key),
      );
    }
    try {
      this._client = await p;
    } catch (err) {
      // a start we joined was aborted by its own caller, not by ours: try again on our own
      if (!(err instanceof AbortError) || signal?.aborted) throw err;
      const r = await this.lookupOrCreate(rest, call);
      this._client = r.sandbox;
      return { outcome: r.created ? 'created' : 'connected' };
    }
    return { outcome: created ? 'created' : 'connected' };
  }

  private async lookupOrCreate(
    rest: SandboxOptions,
    call: { signal?: AbortSignal },
  ): Promise<{ sandbox: Sandbox; created: boolean }> {
    const labels = { ...(rest.labels ?? {}), [MASTRA_ID_LABEL]: this.id };
    const first = (await Sandbox.list({ ...rest, ...call, labels })).sort(byAge)[0];
    if (first) {
      const found = await Sandbox.connect(first.id, { ...rest, ...call });
      await this.resumeIfPaused(found, call);
      return { sandbox: found, created: false };
    }
    const mine = await Sandbox.create({ ...rest, ...call, labels });
    // Another process may have raced us to it: the oldest sandbox with this logical id wins, the others go.
    const all = (await Sandbox.list({ ...rest, labels }).catch(() => [])).sort(byAge);
    const winner = all[0];
    if (winner && winner.id !== mine.id) {
      await mine.destroy().catch(() => undefined);
      return { sandbox: await Sandbox.connect(winner.id, { ...rest, ...call }), created: false };
    }
    return { sandbox: mine, created: true };
  }

  /**
   * Runs `fn` with the client; when the daemon says the sandbox is gone (idle reaper, crash, destroyed from
   * elsewhere), makes a new one for this logical id once and runs `fn` again. `fn` must fail before doing
   * anything for that to be safe: the daemon refuses requests for an ended sandbox before they run.
   * @internal used by IronClawFilesystem too
   */
  async withClient<T>(fn: (client: Sandbox) => Promise<T>): Promise<T> {
    await this.ensureRunning();
    const client = this.client;
    try {
      return await fn(client);
    } catch (err) {
      if (!isGone(err) || this.shared || this.id.startsWith('sbx-')) throw err;
      if (this._client === client) {
        this.recovering ??= (async () => {
          this.logger.warn(`IronClaw sandbox ${client.id} of ${this.id} is gone; making a new one`);
          this._client = undefined;
          this.status = 'pending';
          try {
            await this.ensureRunning();
          } finally {
            this.recovering = undefined;
          }
        })();
      }
      await this.recovering;
      await this.ensureRunning();
      return fn(this.client);
    }
  }

  /**
   * Pauses the sandbox (as E2B's `stop()` does): its processes are frozen (no CPU; memory, files and background
   * processes kept) and the next `start()` (or any command, through `ensureRunning()`) resumes it. On a backend
   * that cannot pause (`UnavailableError`) it only detaches, with a warning. Use `destroy()` to end it.
   */
  override async stop(): Promise<void> {
    await this.pauseOnStop();
  }

  /** Pauses the daemon sandbox in use, if any (a sandbox already paused stays so). */
  protected async pauseOnStop(): Promise<void> {
    const c = this._client;
    if (c?.id === undefined) return;
    try {
      await c.pause();
    } catch (err) {
      if (isGone(err)) return; // nothing left to pause; the next start makes a new one
      if (err instanceof ConflictError && /paused/.test(err.message)) return;
      if (err instanceof UnavailableError) {
        this.logger.warn(`IronClaw sandbox ${c.id} cannot be paused on this backend (${err.message}); stop() only detaches`);
        return;
      }
      throw err;
    }
  }

  private async resumeIfPaused(c: Sandbox, call: { signal?: AbortSignal }): Promise<void> {
    if (c.info?.state !== 'paused') return;
    await c.resume(call);
  }

  /**
   * `networking.getPortUrl(port)`: a URL that reaches `port` in the sandbox from the host through the daemon
   * (a signed, expiring URL; see `Sandbox.getPortUrl`). `null` for a port the sandbox was not created with
   * (the `ports` option) or a sandbox that is destroyed; the daemon's refusal (a policy without
   * `ports.inbound`) is thrown.
   */
  async getPortUrl(port: number, opts: { ttlMs?: number } = {}): Promise<string | null> {
    if (!(this.options.ports ?? []).includes(port)) return null;
    if (this.status === 'destroyed' || this.status === 'destroying') return null;
    const o: { ttlMs?: number } = {};
    if (opts.ttlMs !== undefined) o.ttlMs = opts.ttlMs;
    return (await this.withClient((c) => c.getPortUrl(port, o))).url;
  }

  /**
   * Destroys the daemon sandbox; one never started here is looked up first (by its `sbx-` id, or the running
   * sandboxes labelled with this logical id), so a new process can end the workspace an earlier one made.
   * A later `start()` makes a new one.
   */
  override async destroy(): Promise<void> {
    const c = this._client;
    if (c) {
      await c.destroy();
      if (!this.shared) this._client = undefined;
      return;
    }
    const rest = this.rest();
    if (this.id.startsWith('sbx-')) {
      await new Sandbox({ ...rest, id: this.id }).destroy();
      return;
    }
    const labels = { ...(rest.labels ?? {}), [MASTRA_ID_LABEL]: this.id };
    for (const found of await Sandbox.list({ ...rest, labels })) {
      await new Sandbox({ ...rest, id: found.id }).destroy();
    }
  }

  override getInstructions(opts?: { requestContext?: RequestContext }): string {
    const o = this.options.instructions;
    if (typeof o === 'string') return o;
    if (o === undefined) return DEFAULT_INSTRUCTIONS;
    const arg: { defaultInstructions: string; requestContext?: RequestContext } = { defaultInstructions: DEFAULT_INSTRUCTIONS };
    if (opts?.requestContext) arg.requestContext = opts.requestContext;
    return o(arg);
  }

  override async getInfo(): Promise<MastraSandboxInfo> {
    const c = this._client;
    const info = c?.id !== undefined ? await c.getInfo().catch(() => c.info) : undefined;
    const out: MastraSandboxInfo = {
      id: this.id,
      name: this.name,
      provider: this.provider,
      status: this.status,
      createdAt: info ? info.createdAt : new Date(),
      mounts: this.mountList(),
      metadata: {
        sandboxId: c?.id,
        state: info?.state,
        labels: info?.labels,
        addr: c?.addr,
      },
    };
    if (info?.lastUsedAt) out.lastUsedAt = info.lastUsedAt;
    // whichever ends it first: the ttl, or the idle timeout counted from the last use
    const idleEnd = info && info.idleTimeoutMs > 0 ? new Date(info.lastUsedAt.getTime() + info.idleTimeoutMs) : undefined;
    const end = info?.expiresAt && idleEnd ? (info.expiresAt < idleEnd ? info.expiresAt : idleEnd) : (info?.expiresAt ?? idleEnd);
    if (end) out.timeoutAt = end;
    if (c?.id !== undefined && info?.state === 'running') {
      // Mastra asks for the info around every tool call: the usage is read at most every few seconds.
      // A failure is kept as long; a policy that holds every command for approval stops the reading for good
      // (no stray approvals for a cgroup read).
      const cached = this.usage;
      let resources = cached?.value;
      if (!cached || cached.sandboxId !== c.id || Date.now() - cached.at >= RESOURCES_TTL_MS) {
        let at = Date.now();
        resources = await this.resources(c).catch((err: unknown) => {
          if (err instanceof ApprovalRequiredError) at = Infinity;
          return undefined;
        });
        this.usage = { sandboxId: c.id, at, value: resources };
      }
      if (resources) out.resources = { ...resources };
    }
    return out;
  }

  /** Limits and usage, read inside the sandbox (its cgroup and `df`) in one command. */
  private async resources(c: Sandbox): Promise<NonNullable<MastraSandboxInfo['resources']>> {
    const r = await c.run(
      [
        '/bin/sh',
        '-c',
        // cgroup v2 files, else v1's (memory/, cpu/, cpuacct/)
        'g=/sys/fs/cgroup; r() { for f in "$@"; do [ -r "$g/$f" ] && { tr "\\n" " " < "$g/$f"; return; }; done; }; ' +
          'echo "mem.max=$(r memory.max memory/memory.limit_in_bytes)"; ' +
          'echo "mem.cur=$(r memory.current memory/memory.usage_in_bytes)"; ' +
          'echo "cpu.max=$(r cpu.max)"; echo "cpu.quota=$(r cpu/cpu.cfs_quota_us) $(r cpu/cpu.cfs_period_us)"; ' +
          'echo "cpu.usec=$(r cpu.stat)"; echo "cpu.nsec=$(r cpuacct/cpuacct.usage)"; ' +
          'printf "df="; df -Pk /workspace 2>/dev/null | tail -n 1',
      ],
      { approval: 'fail', timeoutMs: 10_000 },
    );
    const kv = new Map<string, string>();
    for (const line of r.stdout.split('\n')) {
      const eq = line.indexOf('=');
      if (eq > 0) kv.set(line.slice(0, eq), line.slice(eq + 1).trim());
    }
    const out: NonNullable<MastraSandboxInfo['resources']> = {};
    const mb = (bytes: number) => Math.round((bytes / 1024 / 1024) * 10) / 10;
    const num = (k: string) => {
      const v = (kv.get(k) ?? '').trim();
      return v === '' ? NaN : Number(v);
    };
    const memMax = num('mem.max');
    if (Number.isFinite(memMax) && memMax > 0 && memMax < 2 ** 60) out.memoryMB = mb(memMax);
    const memCur = num('mem.cur');
    if (Number.isFinite(memCur)) out.memoryUsedMB = mb(memCur);
    const [quota, period] = (kv.get('cpu.max') || kv.get('cpu.quota') || '').trim().split(/\s+/);
    if (quota && period && quota !== 'max' && Number(quota) > 0 && Number(period) > 0) {
      out.cpuCores = Number(quota) / Number(period);
    } else if (this.options.limits?.cpus !== undefined) out.cpuCores = this.options.limits.cpus;
    const usec = /usage_usec (\d+)/.exec(kv.get('cpu.usec') ?? '')?.[1];
    const nsec = (kv.get('cpu.nsec') ?? '').trim();
    const cpuUs = usec !== undefined ? Number(usec) : /^\d+$/.test(nsec) ? Number(nsec) / 1000 : undefined;
    const created = c.info?.createdAt;
    if (cpuUs !== undefined && created) {
      const wallUs = Math.max(1, (Date.now() - created.getTime()) * 1000);
      out.cpuPercent = Math.round((cpuUs / wallUs) * 1000) / 10;
    }
    const df = (kv.get('df') ?? '').split(/\s+/);
    if (df.length >= 4 && Number.isFinite(Number(df[1]))) {
      out.diskMB = Math.round(Number(df[1]) / 102.4) / 10;
      out.diskUsedMB = Math.round(Number(df[2]) / 102.4) / 10;
    }
    return out;
  }

  /**
   * Runs a command with LocalSandbox's result semantics: a non-zero exit, a timeout (exit 124 and
   * `Process timed out after Nms` on stderr) and an abort (exit 128, `killed`, the output so far) are
   * results; `maxRetainedBytes` keeps the newest bytes of each stream. `command` is the full shell line.
   */
  override async executeCommand(
    command: string,
    args: string[] = [],
    options: ExecuteCommandOptions = {},
  ): Promise<CommandResult> {
    const line = args.length ? [command, ...args.map(shellQuote)].join(' ') : command;
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries({ ...this.getEnv(), ...(options.env ?? {}) })) {
      if (v !== undefined) env[k] = v;
    }
    const ropts: RunOptions = { approval: 'wait' };
    if (Object.keys(env).length) ropts.env = env;
    const cwd = options.cwd ?? this.workingDirectory;
    // a relative cwd is under the working directory, as in LocalSandbox
    if (cwd !== undefined) ropts.cwd = cwd.startsWith('/') ? cwd : posix.resolve(this.workingDirectory ?? ROOT, cwd);
    if (options.timeout !== undefined) ropts.timeoutMs = options.timeout; // Mastra's timeout is in ms
    let stdout = '';
    let stderr = '';
    ropts.onStdout = (s) => {
      stdout += s;
      options.onStdout?.(s);
    };
    ropts.onStderr = (s) => {
      stderr += s;
      options.onStderr?.(s);
    };
    if (options.abortSignal) ropts.signal = options.abortSignal;
    const call = toolCallContext.getStore();
    const onApproval = this.options.onApproval;
    if (onApproval || call?.writer) {
      ropts.onApproval = (a) => {
        onApproval?.(a);
        void call?.writer?.custom({ type: APPROVAL_CHUNK_TYPE, data: approvalChunk(a, call.toolCallId) }).catch(() => undefined);
      };
    }
    const started = Date.now();
    const finish = (fields: Omit<CommandResult, 'stdout' | 'stderr' | 'command'>): CommandResult => {
      const o = retain(stdout, options.maxRetainedBytes);
      const e = retain(stderr, options.maxRetainedBytes);
      // As LocalSandbox, always set: `*DroppedBytes` counts what maxRetainedBytes dropped; `*Truncated` is also
      // set when the sandbox's own output limit cut the stream (how much it dropped is not known).
      return {
        ...fields,
        stdout: o.text,
        stderr: e.text,
        command: line,
        stdoutTruncated: o.dropped > 0 || fields.stdoutTruncated === true,
        stderrTruncated: e.dropped > 0 || fields.stderrTruncated === true,
        stdoutDroppedBytes: o.dropped,
        stderrDroppedBytes: e.dropped,
      };
    };
    if (options.abortSignal?.aborted) {
      return finish({ success: false, exitCode: KILLED_EXIT, executionTimeMs: 0, killed: true, timedOut: false });
    }
    let r: ExecResult;
    try {
      r = await this.withClient((c) => {
        stdout = '';
        stderr = '';
        return c.run(line, ropts);
      });
    } catch (err) {
      if (err instanceof AbortError || (options.abortSignal?.aborted && err instanceof SandboxError)) {
        // LocalSandbox: the process is killed and the call settles with its result so far.
        return finish({
          success: false,
          exitCode: KILLED_EXIT,
          executionTimeMs: Date.now() - started,
          killed: true,
          timedOut: false,
        });
      }
      if (err instanceof ApprovalDeniedError || err instanceof ApprovalTimeoutError) {
        const msg = `denied: ${err.message}`;
        options.onStderr?.(msg);
        stderr = msg;
        return finish({ success: false, exitCode: -1, executionTimeMs: Date.now() - started });
      }
      throw err;
    }
    if (r.error) {
      const add = `${stderr && !stderr.endsWith('\n') ? '\n' : ''}${r.error}`;
      stderr += add;
    }
    let exitCode = r.exitCode;
    if (r.timedOut) {
      // LocalSandbox's timeout result: exit 124 and a line on stderr (also streamed).
      const msg = `\nProcess timed out after ${options.timeout ?? r.durationMs}ms`;
      stderr += msg;
      options.onStderr?.(msg);
      exitCode = TIMEOUT_EXIT;
    }
    return finish({
      success: exitCode === 0,
      exitCode,
      executionTimeMs: r.durationMs,
      timedOut: r.timedOut,
      killed: r.timedOut || r.oomKilled,
      stdoutTruncated: r.truncated,
      stderrTruncated: r.truncated,
    });
  }

  /**
   * What `getInfo().mounts` lists: the volumes of the `volumes` option, and the mounts of `Workspace({ mounts })`
   * that are mounted, each with its filesystem (`ironclaw-volume:<name>` for a volume).
   */
  private mountList(): Array<{ path: string; filesystem: string }> {
    const out: Array<{ path: string; filesystem: string }> = (this.options.volumes ?? []).map((v) => ({
      path: v.path,
      filesystem: `${VOLUME_MOUNT_TYPE}:${v.name}`,
    }));
    for (const [path, entry] of this.mounts?.entries ?? []) {
      if (entry.state !== 'mounted') continue;
      const config = entry.filesystem.getMountConfig?.() as { type?: string; volume?: unknown } | undefined;
      out.push({
        path,
        filesystem: config?.type === VOLUME_MOUNT_TYPE ? `${VOLUME_MOUNT_TYPE}:${String(config.volume)}` : entry.filesystem.provider,
      });
    }
    return out;
  }

  /**
   * Mounts for `Workspace({ mounts })`. An IronClaw sandbox mounts IronClaw volumes only
   * (`new IronClawFilesystem({ sandbox, volume })`, mount config {@link IronClawVolumeMountConfig}); they are
   * mounted when the sandbox is created, so this only checks that the sandbox in use has the volume at the
   * path (a sandbox that was already running without it, reconnected by its id, does not: destroy it and start
   * again). The plain `IronClawFilesystem` mounts at `/workspace` only, where it already is. Anything else
   * (S3, GCS, a host directory, ...) is a mount error naming the filesystem, never silently skipped.
   */
  override async mount(filesystem: WorkspaceFilesystem, mountPath: string): Promise<MountResult> {
    const config = filesystem.getMountConfig?.() as { type?: string; volume?: unknown } | undefined;
    if (config?.type === WORKSPACE_MOUNT_TYPE) {
      if (mountPath === ROOT) return { success: true, mountPath };
      return {
        success: false,
        mountPath,
        error: `the IronClaw workspace filesystem is the sandbox's ${ROOT} and mounts only there, not at ${mountPath}`,
      };
    }
    if (config?.type !== VOLUME_MOUNT_TYPE || typeof config.volume !== 'string') {
      return {
        success: false,
        mountPath,
        error:
          `IronClaw sandboxes mount only IronClaw volumes ({ type: '${VOLUME_MOUNT_TYPE}' }): ${filesystem.provider}` +
          `${config?.type ? ` (${config.type})` : ''} at ${mountPath} is not visible to commands in the sandbox`,
      };
    }
    const volume = config.volume;
    try {
      const v = await Volumes.get(volume, this.connection());
      if (v.sandbox !== undefined && v.sandbox === this.sandboxId) {
        if (filesystem instanceof IronClawFilesystem) filesystem.bindMountPath(mountPath);
        return { success: true, mountPath };
      }
      return {
        success: false,
        mountPath,
        error:
          `volume ${volume} is not mounted in sandbox ${String(this.sandboxId)}` +
          (v.sandbox ? ` (sandbox ${v.sandbox} has it)` : ' (that sandbox was created without it: destroy it and start again)'),
      };
    } catch (err) {
      return { success: false, mountPath, error: `volume ${volume}: ${err instanceof Error ? err.message : String(err)}` };
    }
  }

  /** Volumes stay mounted until the sandbox ends (the daemon mounts them at create only): this forgets the entry. */
  override async unmount(mountPath: string): Promise<void> {
    this.mounts?.delete(mountPath);
  }

  /** The connection options (address, token, fetch, ...) of this sandbox's clients. */
  private connection(): ConnectionOptions {
    return this.rest();
  }

  /**
   * @internal Spawns a background process; one the daemon's policy holds for an operator's approval waits for
   * the decision (announced as executeCommand's are) and is refused with `ApprovalDeniedError` if not approved.
   */
  async spawnApproved(c: Sandbox, command: string, sopts: SpawnOptions): Promise<IronClawProcessInfo> {
    try {
      return await c.processes.spawn(command, sopts);
    } catch (err) {
      if (!(err instanceof ApprovalRequiredError) || !err.approval) throw err;
      const pending = err.approval;
      const call = toolCallContext.getStore();
      this.options.onApproval?.(pending);
      void call?.writer?.custom({ type: APPROVAL_CHUNK_TYPE, data: approvalChunk(pending, call.toolCallId) }).catch(() => undefined);
      const final = await c.waitForApproval(pending.id);
      if (final.state !== 'approved') {
        throw new ApprovalDeniedError(`"${command}" was ${final.state === 'pending' ? 'not decided in time' : final.state}${final.reason ? `: ${final.reason}` : ''} (${final.id})`, {
          approval: final,
        });
      }
      return c.processes.spawn(command, { ...sopts, approval: final.id });
    }
  }

  /**
   * A sibling sandbox from this one's configuration (no I/O): a new logical id unless `id` is given,
   * `sandboxId` reattaches to that daemon sandbox, `env`, `workingDirectory` and `idleTimeoutMinutes` override.
   * Checkpoint names are ignored (no checkpoints yet). A sandbox built on a shared client cannot be cloned
   * (its connection is the client's own): build it from connection options instead. The `volumes` option is not
   * copied (a volume is in one running sandbox at a time), nor are the mounts of a Workspace.
   */
  clone(options: SandboxCloneOptions = {}): IronClawWorkspaceSandbox {
    if (this.shared) {
      throw new SandboxUnsupportedFeatureError('clone() of a sandbox built on a shared client: pass connection options instead', {
        provider: this.provider,
      });
    }
    const { sandbox: _s, id: _id, volumes: _v, ...same } = this.options;
    const o: IronClawWorkspaceSandboxOptions = { ...same };
    const id = options.sandboxId ?? options.id;
    if (id !== undefined) o.id = id;
    if (options.env !== undefined) o.env = options.env;
    if (options.workingDirectory !== undefined) o.workingDirectory = options.workingDirectory;
    if (options.idleTimeoutMinutes !== undefined) {
      o.idleMs = options.idleTimeoutMinutes * 60_000;
      delete o.idle;
    }
    return new IronClawWorkspaceSandbox(o);
  }

  /** Uploads files (one request each). Modes must be 0o001-0o777 (Mastra's `INVALID_ARGUMENT` otherwise). */
  override async writeFiles(files: SandboxFileInput[], options: WriteFilesOptions = {}): Promise<void> {
    for (const f of files) if (f.mode !== undefined) validateSandboxFileMode(f.mode);
    const signal = options.abortSignal;
    if (signal?.aborted) throw new SandboxAbortError('writeFiles', signal.reason);
    await this.withClient(async (c) => {
      for (const f of files) {
        if (signal?.aborted) throw new SandboxAbortError('writeFiles', signal.reason);
        const o: WriteFileOptions = f.mode === undefined ? {} : { mode: f.mode };
        if (signal) o.signal = signal;
        try {
          await c.writeFile(f.path, f.content, o);
        } catch (err) {
          if (err instanceof AbortError) throw new SandboxAbortError('writeFiles', signal?.reason);
          throw err;
        }
      }
    });
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Processes

/** The command line a daemon process was spawned with (the shell line for `sh -c`). */
function commandOf(argv: string[]): string {
  if (argv.length === 3 && argv[0] === '/bin/sh' && argv[1] === '-c') return argv[2] as string;
  return argv.map(shellQuote).join(' ');
}

/**
 * A Mastra `ProcessHandle` over an IronClaw background process. Its output is the daemon's log of the process,
 * read from an offset: `IronClawProcessManager.get()` reads what is new (so `handle.stdout` is current when the
 * tools look at it), `wait()` (and spawn-time `onStdout`/`onStderr`) follow it live until the exit. Exit codes as
 * LocalSandbox reports them: 124 and `Process timed out after Nms` on stderr for a `timeout`, 128 (`killed`) for
 * a process this client killed; the rest as the daemon says (128+N for a signal from elsewhere).
 */
export class IronClawProcessHandle extends MastraProcessHandle {
  readonly pid: string;
  exitCode: number | undefined = undefined;
  /** The daemon's description of the process as last read. */
  info: IronClawProcessInfo;
  private offset: number;
  private following: Promise<void> | undefined;
  private refreshing: Promise<void> | undefined;
  private timedOut = false;
  private killing = false;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private readonly timeoutMs: number | undefined;
  private readonly startedAt: number;
  private endedAt: number | undefined;

  constructor(
    private readonly client: Sandbox,
    info: IronClawProcessInfo,
    options: Pick<SpawnProcessOptions, 'maxRetainedBytes' | 'onStdout' | 'onStderr' | 'timeout'> = {},
    offset = 0,
  ) {
    const base: Pick<SpawnProcessOptions, 'maxRetainedBytes' | 'onStdout' | 'onStderr'> = {};
    if (options.maxRetainedBytes !== undefined) base.maxRetainedBytes = options.maxRetainedBytes;
    if (options.onStdout) base.onStdout = options.onStdout;
    if (options.onStderr) base.onStderr = options.onStderr;
    super(base);
    this.pid = String(info.pid);
    this.info = info;
    this.offset = offset;
    this.command = commandOf(info.argv);
    this.startedAt = info.startedAt.getTime();
    this.timeoutMs = options.timeout;
    if (options.timeout !== undefined && options.timeout > 0 && info.state === 'running') {
      this.timer = setTimeout(() => {
        this.timedOut = true;
        void this.client.processes.signal(info.pid, 'TERM').catch(() => undefined);
      }, options.timeout);
      this.timer.unref?.();
    }
    // A process that exited before this handle was made is not finished here: its output is still unread,
    // and the first read (refresh, follow, wait) takes the output and the end together.
  }

  /** The daemon's handle of the process (a number). */
  get daemonPid(): number {
    return this.info.pid;
  }

  private finish(exit: number | undefined, error: string | undefined): void {
    if (this.exitCode !== undefined) return;
    if (this.timer) clearTimeout(this.timer);
    this.endedAt = Date.now();
    if (this.timedOut) {
      this.emitStderr(`\nProcess timed out after ${this.timeoutMs}ms`);
      this.exitCode = TIMEOUT_EXIT;
    } else if (this.killing || error === 'killed') {
      this.exitCode = KILLED_EXIT;
    } else {
      this.exitCode = exit ?? -1;
    }
    if (error && error !== 'killed' && exit !== undefined && exit >= 126 && exit <= 127) this.emitStderr(error);
  }

  private read(follow: boolean): Promise<void> {
    return this.client.processes
      .output(this.info.pid, {
        offset: this.offset,
        follow,
        collect: false,
        onStdout: (t) => this.emitStdout(t),
        onStderr: (t) => this.emitStderr(t),
      })
      .then(
        (out) => {
          this.offset = out.offset;
          if (out.state === 'exited') this.finish(out.exitCode, out.error);
        },
        (err: unknown) => {
          // released on the daemon by another client (its kill, or a release after its exit): the end is unknown here
          if (err instanceof NotFoundError && /process not found/.test(err.message)) return this.finish(undefined, 'released');
          throw err;
        },
      );
  }

  /** Reads the output that is new since the last read, and the state (unless a live follow does already). */
  refresh(): Promise<void> {
    if (this.exitCode !== undefined || this.following) return Promise.resolve();
    this.refreshing ??= this.read(false).finally(() => {
      this.refreshing = undefined;
    });
    return this.refreshing;
  }

  /** Follows the output live until the process exits (one follow at a time). */
  follow(): Promise<void> {
    if (this.exitCode !== undefined) return Promise.resolve();
    this.following ??= (async () => {
      await this.refreshing?.catch(() => undefined);
      while (this.exitCode === undefined) await this.read(true);
    })().finally(() => {
      this.following = undefined;
    });
    return this.following;
  }

  override async wait(): Promise<CommandResult> {
    await this.follow();
    const exitCode = this.exitCode as number;
    return {
      success: exitCode === 0,
      exitCode,
      stdout: this.stdout,
      stderr: this.stderr,
      executionTimeMs: (this.endedAt ?? Date.now()) - this.startedAt,
      killed: this.killing || this.timedOut || this.info.error === 'killed',
      timedOut: this.timedOut,
    };
  }

  /** Kills the process group (SIGKILL) and waits for its end; `false` if it had already exited. */
  async kill(): Promise<boolean> {
    if (this.exitCode !== undefined) return false;
    this.killing = true;
    try {
      await this.client.processes.signal(this.info.pid, 'KILL');
    } catch (err) {
      this.killing = false;
      if (err instanceof ConflictError || err instanceof NotFoundError) {
        await this.refresh().catch(() => undefined);
        return false;
      }
      throw err;
    }
    await this.follow().catch(() => undefined);
    return true;
  }

  async sendStdin(data: string): Promise<void> {
    this.checkStdin();
    await this.client.processes.sendStdin(this.info.pid, data);
  }

  override async closeStdin(): Promise<void> {
    this.checkStdin();
    await this.client.processes.closeStdin(this.info.pid);
  }

  private checkStdin(): void {
    if (this.exitCode !== undefined) throw new Error(`Process ${this.pid} has already exited with code ${this.exitCode}`);
    if (!this.info.stdin) throw new Error(`Process ${this.pid} does not have stdin available (spawned with stdinMode 'ignore')`);
  }

  /** @internal Forgets the process on the daemon (its slot among the kept exited processes). */
  forget(): Promise<unknown> {
    return this.client.processes.kill(this.info.pid).catch(() => undefined);
  }
}

/**
 * Mastra's `SandboxProcessManager` over the daemon's processes API (`sandbox.processes`): background processes
 * that the daemon holds, so they outlive this client. `list()` asks the daemon; `get(pid)` of a process this
 * client does not know (spawned before a restart, or by another client) reattaches to it with its retained
 * output (the newest 1 MiB). `spawn` honours `cwd` (relative: under the working directory), `env` (with the
 * sandbox's overlay), `stdinMode` (`pipe`, the default, opens stdin), `timeout`, `maxRetainedBytes` and the
 * callbacks; a spawn the daemon's policy holds for an operator waits for the decision.
 */
export class IronClawProcessManager extends SandboxProcessManager<IronClawWorkspaceSandbox> {
  override async spawn(command: string, options: SpawnProcessOptions = {}): Promise<MastraProcessHandle> {
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries(options.env ?? {})) if (v !== undefined) env[k] = v;
    const wd = this.sandbox.workingDirectory ?? ROOT;
    const cwd = options.cwd === undefined ? wd : options.cwd.startsWith('/') ? options.cwd : posix.resolve(wd, options.cwd);
    const sopts: SpawnOptions = { cwd, stdin: options.stdinMode !== 'ignore' };
    if (Object.keys(env).length) sopts.env = env;
    // The handle times the process out itself, with LocalSandbox's result (124 and its message); the daemon's
    // own timeout, a little later, ends it should this client be gone by then.
    if (options.timeout) sopts.timeoutMs = options.timeout + 5_000;
    let client: Sandbox | undefined;
    const info = await this.sandbox.withClient(async (c) => {
      client = c;
      return this.sandbox.spawnApproved(c, command, sopts);
    });
    const handle = new IronClawProcessHandle(client as Sandbox, info, options);
    this._tracked.set(handle.pid, handle);
    // live callbacks and the timeout's result need the output as it comes
    if (options.onStdout || options.onStderr || options.timeout) void handle.follow().catch(() => undefined);
    return handle;
  }

  override async list(): Promise<MastraProcessInfo[]> {
    const all = await this.sandbox.withClient((c) => c.processes.list());
    return all
      .filter((p) => !this._dismissed.has(String(p.pid)))
      .map((p) => {
        const tracked = this._tracked.get(String(p.pid));
        const exitCode = tracked?.exitCode ?? p.exitCode;
        const out: MastraProcessInfo = { pid: String(p.pid), command: commandOf(p.argv), running: p.state === 'running' };
        if (p.state === 'exited' && exitCode !== undefined) out.exitCode = exitCode;
        return out;
      });
  }

  override async get(pid: string): Promise<MastraProcessHandle | undefined> {
    const tracked = this._tracked.get(pid) as IronClawProcessHandle | undefined;
    if (tracked) {
      await tracked.refresh();
      return tracked;
    }
    if (!/^[1-9]\d{0,15}$/.test(pid)) return undefined;
    let client: Sandbox | undefined;
    let info: IronClawProcessInfo;
    try {
      info = await this.sandbox.withClient((c) => {
        client = c;
        return c.processes.get(Number(pid));
      });
    } catch (err) {
      if (err instanceof NotFoundError && !isGone(err)) return undefined;
      throw err;
    }
    const handle = new IronClawProcessHandle(client as Sandbox, info);
    this._tracked.set(handle.pid, handle);
    await handle.refresh();
    return handle;
  }

  /** Forgets the handle; an exited process is also released on the daemon. A running one keeps running. */
  override release(pid: string): void {
    const h = this._tracked.get(pid) as IronClawProcessHandle | undefined;
    super.release(pid);
    if (h && (h.exitCode !== undefined || h.info.state === 'exited')) void h.forget();
  }
}

function byAge(a: SandboxInfo, b: SandboxInfo): number {
  return a.createdAt.getTime() - b.createdAt.getTime() || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}

/** Quotes one argument for /bin/sh. */
export function shellQuote(arg: string): string {
  if (/^[A-Za-z0-9_\/.,:=+@%^-]+$/.test(arg)) return arg;
  return `'${arg.replace(/'/g, `'\\''`)}'`;
}

// ---------------------------------------------------------------------------------------------------------------
// Filesystem

export interface IronClawFilesystemOptions extends MastraFilesystemOptions {
  /** The sandbox whose files this is: the Workspace's sandbox (preferred) or a plain client. */
  sandbox: IronClawWorkspaceSandbox | Sandbox;
  id?: string;
  readOnly?: boolean;
  /** Text for the agent's instructions: a string (`''`: none), or a function of the default and `requestContext`. */
  instructions?: InstructionsOption;
  /**
   * An IronClaw volume (`Volumes.create`) this filesystem is: use it as a mount,
   * `new Workspace({ sandbox, mounts: { '/data': new IronClawFilesystem({ sandbox, volume: 'notes' }) } })`;
   * the sandbox is then created with the volume at the mount path (commands see it there), and the
   * filesystem's paths are relative to that path. Without it the filesystem is the sandbox's `/workspace`.
   */
  volume?: string;
}

/** The mount config of an {@link IronClawFilesystem} over a volume (`getMountConfig()`), which an IronClaw sandbox mounts. */
export interface IronClawVolumeMountConfig {
  type: 'ironclaw-volume';
  /** The volume's name. */
  volume: string;
}

/** The mount config of the plain {@link IronClawFilesystem}: the sandbox's own `/workspace`, mountable there only. */
export interface IronClawWorkspaceMountConfig {
  type: 'ironclaw-workspace';
}

export const VOLUME_MOUNT_TYPE = 'ironclaw-volume';
export const WORKSPACE_MOUNT_TYPE = 'ironclaw-workspace';

// Exit codes of the helper scripts below (errno values, as the shell cannot see them).
const ENOENT = 2;
const EACCES = 13;
const EEXIST = 17;
const ENOTDIR = 20;
const EISDIR = 21;
const ENOTEMPTY = 39;

/** Bytes of listing or search output one command may return (the daemon's default output cap is 4 MiB). */
const BULK_OUTPUT_BYTES = 3 << 20;

/** MIME types by extension, as Mastra's LocalFilesystem reports them in `stat` (else `application/octet-stream`). */
const MIME_TYPES: Record<string, string> = {
  txt: 'text/plain', html: 'text/html', htm: 'text/html', css: 'text/css', csv: 'text/csv', md: 'text/markdown',
  js: 'application/javascript', mjs: 'application/javascript', ts: 'application/typescript',
  tsx: 'application/typescript', jsx: 'application/javascript', json: 'application/json', xml: 'application/xml',
  yaml: 'text/yaml', yml: 'text/yaml', py: 'text/x-python', rb: 'text/x-ruby', go: 'text/x-go', rs: 'text/x-rust',
  java: 'text/x-java', c: 'text/x-c', cpp: 'text/x-c++', h: 'text/x-c', hpp: 'text/x-c++', sh: 'text/x-sh',
  bash: 'text/x-sh', zsh: 'text/x-sh', toml: 'text/toml', ini: 'text/plain', env: 'text/plain', sql: 'text/x-sql',
  graphql: 'application/graphql', gql: 'application/graphql', vue: 'text/x-vue', svelte: 'text/x-svelte',
  scss: 'text/x-scss', sass: 'text/x-sass', less: 'text/x-less', php: 'application/x-php', swift: 'text/x-swift',
  kt: 'text/x-kotlin', kts: 'text/x-kotlin', dart: 'application/dart', lua: 'text/x-lua', r: 'text/x-r',
  tf: 'text/x-terraform', tfvars: 'text/x-terraform', mdx: 'text/markdown', sas: 'text/plain', log: 'text/plain',
  jsonl: 'application/jsonl', png: 'image/png', jpg: 'image/jpeg', jpeg: 'image/jpeg', gif: 'image/gif',
  svg: 'image/svg+xml', webp: 'image/webp', ico: 'image/x-icon', bmp: 'image/bmp', tiff: 'image/tiff',
  tif: 'image/tiff', heic: 'image/heic', heif: 'image/heif', avif: 'image/avif', pdf: 'application/pdf',
  mp3: 'audio/mpeg', wav: 'audio/wav', ogg: 'audio/ogg', flac: 'audio/flac', m4a: 'audio/mp4', aac: 'audio/aac',
  mp4: 'video/mp4', webm: 'video/webm', mov: 'video/quicktime', avi: 'video/x-msvideo', mkv: 'video/x-matroska',
  zip: 'application/zip', tar: 'application/x-tar', gz: 'application/gzip', tgz: 'application/gzip',
  bz2: 'application/x-bzip2', '7z': 'application/x-7z-compressed', rar: 'application/vnd.rar',
  exe: 'application/vnd.microsoft.portable-executable', dll: 'application/vnd.microsoft.portable-executable',
  so: 'application/x-sharedlib', dylib: 'application/x-sharedlib', bin: 'application/x-binary',
  dat: 'application/x-binary', dmg: 'application/x-apple-diskimage', iso: 'application/x-iso9660-image',
  deb: 'application/vnd.debian.binary-package', rpm: 'application/x-rpm', doc: 'application/msword',
  docx: 'application/vnd.openxmlformats-officedocument.wordprocessingml.document', xls: 'application/vnd.ms-excel',
  xlsx: 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet', ppt: 'application/vnd.ms-powerpoint',
  pptx: 'application/vnd.openxmlformats-officedocument.presentationml.presentation', ttf: 'font/ttf',
  otf: 'font/otf', woff: 'font/woff', woff2: 'font/woff2', wasm: 'application/wasm', class: 'application/java-vm',
  pyc: 'application/x-python-code',
};
/** The MIME type `stat` reports for a file name (Mastra's table; `application/octet-stream` if unknown). */
export function mimeTypeOf(name: string): string {
  const ext = posix.extname(name).slice(1).toLowerCase();
  return Object.hasOwn(MIME_TYPES, ext) ? (MIME_TYPES[ext] as string) : 'application/octet-stream';
}

const ROOT = '/workspace';

/** The daemon's file API takes paths under /workspace and /tmp only. */
function fileApiReaches(abs: string): boolean {
  return abs === ROOT || abs.startsWith(`${ROOT}/`) || abs === '/tmp' || abs.startsWith('/tmp/');
}

/**
 * A Mastra `WorkspaceFilesystem` over the sandbox's `/workspace` (its `basePath`): every path is relative to it,
 * a leading `/` included (`/notes/a.txt` is `/workspace/notes/a.txt`; `/workspace/...` is taken as is), and a
 * path that leaves it (`../etc`) is a `PermissionError`. Reads and writes use the daemon's file API; listings,
 * `walk` and `grep` are one command each inside the sandbox; the rest (stat, delete, copy, move, mkdir) runs
 * coreutils there. Errors are Mastra's classes, as `LocalFilesystem` throws them.
 */
export class IronClawFilesystem extends MastraFilesystem {
  readonly id: string;
  readonly name = 'IronClawFilesystem';
  readonly provider = 'ironclaw';
  /** `/workspace`, or the mount path of the volume this filesystem is. */
  basePath = ROOT;
  readonly readOnly: boolean;
  /** The volume this filesystem is, if it is one. */
  readonly volume: string | undefined;
  readonly icon = 'hard-drive';
  readonly displayName = 'IronClaw sandbox';
  readonly description = "The sandbox's /workspace, reached through the IronClaw daemon";
  status: ProviderStatus = 'pending';
  private readonly source: IronClawWorkspaceSandbox | Sandbox;
  private readonly instructions: InstructionsOption | undefined;

  constructor(opts: IronClawFilesystemOptions) {
    const base: ConstructorParameters<typeof MastraFilesystem>[0] = { name: 'IronClawFilesystem' };
    if (opts.onInit) base.onInit = opts.onInit;
    if (opts.onDestroy) base.onDestroy = opts.onDestroy;
    if (opts.textExtensions) base.textExtensions = opts.textExtensions;
    super(base);
    this.source = opts.sandbox;
    this.instructions = opts.instructions;
    this.readOnly = opts.readOnly ?? false;
    this.volume = opts.volume;
    this.id = opts.id ?? `ironclaw-fs-${randomUUID()}`;
  }

  /**
   * What an IronClaw sandbox mounts: the volume ({@link IronClawVolumeMountConfig}), or for the plain filesystem
   * the sandbox's own `/workspace` ({@link IronClawWorkspaceMountConfig}).
   */
  getMountConfig(): IronClawVolumeMountConfig | IronClawWorkspaceMountConfig {
    return this.volume !== undefined ? { type: VOLUME_MOUNT_TYPE, volume: this.volume } : { type: WORKSPACE_MOUNT_TYPE };
  }

  /** @internal The sandbox tells a volume filesystem where it mounted it. */
  bindMountPath(path: string): void {
    this.basePath = path;
  }

  getInstructions(opts?: { requestContext?: RequestContext }): string {
    const def =
      `Files live in the IronClaw sandbox under ${this.basePath}: paths are relative to it ("/" is ${this.basePath} itself)` +
      (this.readOnly ? '; the filesystem is read-only.' : '.');
    const o = this.instructions;
    if (typeof o === 'string') return o;
    if (o === undefined) return def;
    const arg: { defaultInstructions: string; requestContext?: RequestContext } = { defaultInstructions: def };
    if (opts?.requestContext) arg.requestContext = opts.requestContext;
    return o(arg);
  }

  getInfo(): FilesystemInfo {
    const info: FilesystemInfo = {
      id: this.id,
      name: this.name,
      provider: this.provider,
      status: this.status,
      readOnly: this.readOnly,
      icon: this.icon,
      metadata: { basePath: this.basePath, ...(this.volume !== undefined ? { volume: this.volume } : {}) },
    };
    const sid = this.source instanceof Sandbox ? this.source.id : this.source.sandboxId;
    if (sid !== undefined) (info.metadata as Record<string, unknown>)['sandboxId'] = sid;
    return info;
  }

  /** No host path: the files are inside the sandbox (an LSP on the host cannot open them). */
  resolveAbsolutePath(_path: string): string | undefined {
    return undefined;
  }

  /** The sandbox path of a workspace path; `PermissionError` if it leaves `/workspace`. */
  resolve(path: string, op = 'access'): string {
    // '~' is HOME, which is /workspace in an IronClaw sandbox
    const p = path.trim() === '' || path === '~' ? '.' : path.startsWith('~/') ? path.slice(2) : path;
    const root = this.basePath;
    const abs = p === root || p.startsWith(`${root}/`) ? p : posix.join(root, p);
    const clean = posix.normalize(abs).replace(/\/+$/, '') || '/';
    if (clean !== root && !clean.startsWith(`${root}/`)) {
      throw new PermissionError(path, `${op} (path is outside the workspace; use a path relative to ${root})`);
    }
    return clean;
  }

  /** The workspace-relative form of a sandbox path (as LocalFilesystem returns paths). */
  private relative(abs: string): string {
    return posix.relative(this.basePath, abs);
  }

  private async withClient<T>(fn: (c: Sandbox) => Promise<T>): Promise<T> {
    if (this.source instanceof Sandbox) {
      await this.source.engage();
      return fn(this.source);
    }
    return this.source.withClient(fn);
  }

  /**
   * Reads a file's bytes: through the daemon's file API under /workspace and /tmp, else (a volume mounted at a
   * top-level path, which the file API does not reach) as base64 through a command (files up to ~3 MiB).
   */
  private async readBytes(abs: string, path: string): Promise<Uint8Array> {
    if (fileApiReaches(abs)) return this.withClient((c) => c.readFile(abs));
    const r = await this.sh('[ -e "$1" ] || exit 2; [ -d "$1" ] && exit 21; [ -r "$1" ] || exit 13; base64 < "$1"', abs);
    this.check(r, path, 'read');
    if (r.truncated) throw new FilesystemError(`${path} is too large to read outside /workspace`, 'EFBIG', path);
    return new Uint8Array(Buffer.from(r.stdout.replace(/\s+/g, ''), 'base64'));
  }

  /** Writes a file's bytes (parents created), as {@link readBytes} reads them. */
  private async writeBytes(abs: string, path: string, data: Uint8Array): Promise<void> {
    if (fileApiReaches(abs)) {
      await this.withClient((c) => c.writeFile(abs, data));
      return;
    }
    const r = await this.withClient((c) =>
      c.run(['/bin/sh', '-c', '[ -d "$1" ] && exit 21; mkdir -p -- "$(dirname -- "$1")" && base64 -d > "$1"', 'sh', abs], {
        approval: 'fail',
        env: { LC_ALL: 'C' },
        stdin: Buffer.from(data).toString('base64'),
      }),
    );
    this.check(r, path, 'write');
  }

  private writable(op: string): void {
    if (this.readOnly) throw new WorkspaceReadOnlyError(op);
  }

  /** Runs a small sh script with the paths as $1.. (never interpolated), for the operations the file API lacks. */
  private async sh(script: string, ...args: string[]): Promise<ExecResult> {
    return this.withClient((c) => c.run(['/bin/sh', '-c', script, 'sh', ...args], { approval: 'fail', env: { LC_ALL: 'C' } }));
  }

  private check(r: ExecResult, path: string, op: string): void {
    if (r.exitCode === 0) return;
    switch (r.exitCode) {
      case ENOENT:
        throw op === 'dir' ? new DirectoryNotFoundError(path) : new FileNotFoundError(path);
      case EACCES:
        throw new PermissionError(path, op);
      case EEXIST:
        throw new FileExistsError(path);
      case ENOTDIR:
        throw new NotDirectoryError(path);
      case EISDIR:
        throw new IsDirectoryError(path);
      case ENOTEMPTY:
        throw new DirectoryNotEmptyError(path);
      default:
        if (/Permission denied|Read-only file system|Operation not permitted/.test(r.stderr)) {
          throw new PermissionError(path, op);
        }
        throw new FilesystemError(
          `${op} ${path} failed (exit ${r.exitCode}): ${(r.stderr || r.error || '').trim()}`,
          'EIO',
          path,
        );
    }
  }

  private mapFileError(err: unknown, path: string, op: string): unknown {
    if (!(err instanceof SandboxError) || isGone(err)) return err;
    if (err instanceof NotFoundError) return new FileNotFoundError(path);
    if (err instanceof InvalidArgumentError && /not a regular file|is a directory/.test(err.message)) return new IsDirectoryError(path);
    if (err instanceof ForbiddenError || (err instanceof InvalidArgumentError && /outside|not allowed|permission|read-only/i.test(err.message))) {
      return new PermissionError(path, op);
    }
    return err;
  }

  async realpath(path: string): Promise<string> {
    await this.ensureReady();
    const abs = this.resolve(path);
    const r = await this.sh('[ -e "$1" ] || [ -L "$1" ] || exit 2; readlink -f -- "$1"', abs);
    this.check(r, path, 'realpath');
    const real = r.stdout.replace(/\n$/, '');
    if (real !== this.basePath && !real.startsWith(`${this.basePath}/`)) throw new PermissionError(path, 'realpath (it leads outside the workspace)');
    return this.relative(real);
  }

  async readFile(path: string, options: ReadOptions = {}): Promise<string | Buffer> {
    await this.ensureReady();
    const abs = this.resolve(path, 'read');
    let bytes: Uint8Array;
    try {
      bytes = await this.readBytes(abs, path);
    } catch (err) {
      throw this.mapFileError(err, path, 'read');
    }
    const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    return options.encoding ? buf.toString(options.encoding) : buf;
  }

  /** Writes a file. `mimeType` is accepted and not needed (the sandbox keeps bytes, not types). */
  async writeFile(path: string, content: FileContent, options: WriteOptions = {}): Promise<void> {
    await this.ensureReady();
    this.writable('writeFile');
    const abs = this.resolve(path, 'write');
    if (options.overwrite === false || options.expectedMtime || options.recursive === false) {
      const parent = posix.dirname(abs);
      const r = await this.sh(
        'if [ "$3" = 0 ] && [ ! -d "$2" ]; then [ -e "$2" ] && exit 20; exit 2; fi; ' +
          'if [ -e "$1" ]; then [ -d "$1" ] && exit 21; [ "$4" = 0 ] && exit 17; stat -c %.9Y -- "$1"; fi; exit 0',
        abs,
        parent,
        options.recursive === false ? '0' : '1',
        options.overwrite === false ? '0' : '1',
      );
      if (r.exitCode === ENOENT || r.exitCode === ENOTDIR) this.check(r, posix.dirname(path), 'dir');
      this.check(r, path, 'write');
      const mtime = r.stdout.trim();
      if (options.expectedMtime && mtime) {
        const actual = new Date(Math.round(Number(mtime) * 1000));
        if (actual.getTime() !== options.expectedMtime.getTime()) {
          throw new StaleFileError(path, options.expectedMtime, actual);
        }
      }
    }
    try {
      await this.writeBytes(abs, path, typeof content === 'string' ? new TextEncoder().encode(content) : new Uint8Array(content));
    } catch (err) {
      throw this.mapFileError(err, path, 'write');
    }
  }

  async appendFile(path: string, content: FileContent): Promise<void> {
    await this.ensureReady();
    this.writable('appendFile');
    const abs = this.resolve(path, 'write');
    let old: Uint8Array = new Uint8Array();
    try {
      old = await this.readBytes(abs, path);
    } catch (err) {
      const mapped = this.mapFileError(err, path, 'read');
      if (!(mapped instanceof FileNotFoundError)) throw mapped;
    }
    const add = typeof content === 'string' ? new TextEncoder().encode(content) : content;
    const all = new Uint8Array(old.byteLength + add.byteLength);
    all.set(old, 0);
    all.set(add, old.byteLength);
    try {
      await this.writeBytes(abs, path, all);
    } catch (err) {
      throw this.mapFileError(err, path, 'write');
    }
  }

  async deleteFile(path: string, options: RemoveOptions = {}): Promise<void> {
    await this.ensureReady();
    this.writable('deleteFile');
    const r = await this.sh(
      'if [ ! -e "$1" ] && [ ! -L "$1" ]; then [ "$2" = 1 ] && exit 0; exit 2; fi; ' +
        '[ -d "$1" ] && [ ! -L "$1" ] && exit 21; rm -f -- "$1"',
      this.resolve(path, 'delete'),
      options.force ? '1' : '0',
    );
    this.check(r, path, 'delete');
  }

  async copyFile(src: string, dest: string, options: CopyOptions = {}): Promise<void> {
    await this.ensureReady();
    this.writable('copyFile');
    const r = await this.sh(
      '[ -e "$1" ] || exit 2; if [ -d "$1" ]; then [ "$3" = 1 ] || exit 21; fi; ' +
        '[ "$4" = 0 ] && [ -e "$2" ] && exit 17; mkdir -p -- "$(dirname -- "$2")" && ' +
        'if [ -d "$1" ]; then mkdir -p -- "$2" && cp -R -- "$1"/. "$2"/; else cp -- "$1" "$2"; fi',
      this.resolve(src, 'copy'),
      this.resolve(dest, 'copy'),
      options.recursive ? '1' : '0',
      options.overwrite === false ? '0' : '1',
    );
    this.check(r, r.exitCode === EEXIST ? dest : src, 'copy');
  }

  async moveFile(src: string, dest: string, options: CopyOptions = {}): Promise<void> {
    await this.ensureReady();
    this.writable('moveFile');
    const r = await this.sh(
      '[ -e "$1" ] || [ -L "$1" ] || exit 2; [ "$3" = 0 ] && [ -e "$2" ] && exit 17; ' +
        'mkdir -p -- "$(dirname -- "$2")" && mv -f -- "$1" "$2"',
      this.resolve(src, 'move'),
      this.resolve(dest, 'move'),
      options.overwrite === false ? '0' : '1',
    );
    this.check(r, r.exitCode === EEXIST ? dest : src, 'move');
  }

  async mkdir(path: string, options: { recursive?: boolean } = {}): Promise<void> {
    await this.ensureReady();
    this.writable('mkdir');
    const r = await this.sh(
      'if [ -e "$1" ]; then [ -d "$1" ] && exit 0; exit 17; fi; ' +
        'if [ "$2" = 1 ]; then mkdir -p -- "$1"; else [ -d "$(dirname -- "$1")" ] || exit 2; mkdir -- "$1"; fi',
      this.resolve(path, 'mkdir'),
      options.recursive === false ? '0' : '1',
    );
    this.check(r, r.exitCode === ENOENT ? posix.dirname(path) : path, 'dir');
  }

  async rmdir(path: string, options: RemoveOptions = {}): Promise<void> {
    await this.ensureReady();
    this.writable('rmdir');
    const r = await this.sh(
      'if [ ! -e "$1" ]; then [ "$3" = 1 ] && exit 0; exit 2; fi; [ -d "$1" ] || exit 20; ' +
        'if [ "$2" = 1 ]; then rm -rf -- "$1"; else [ -z "$(ls -A -- "$1")" ] || exit 39; rmdir -- "$1"; fi',
      this.resolve(path, 'rmdir'),
      options.recursive ? '1' : '0',
      options.force ? '1' : '0',
    );
    this.check(r, path, 'dir');
  }

  /**
   * Every entry under `abs` (to `maxDepth`, root entries being depth 1) in one `find` inside the sandbox:
   * NUL-separated fields, so names with newlines or spaces survive; bounded output.
   */
  private async list(abs: string, path: string, maxDepth: number | undefined, hidden: boolean): Promise<Listed[]> {
    const r = await this.sh(
      '[ -e "$1" ] || [ -L "$1" ] || exit 2; [ -d "$1" ] || exit 20; cd -- "$1" || exit 13; d=$2; n=$4; ' +
        'if [ "$3" = 1 ]; then set --; else set -- "(" -name ".*" -prune ")" -o; fi; ' +
        'if [ -n "$d" ]; then find . -mindepth 1 -maxdepth "$d" "$@" -printf "%y\\0%Y\\0%s\\0%P\\0%l\\0"; ' +
        'else find . -mindepth 1 "$@" -printf "%y\\0%Y\\0%s\\0%P\\0%l\\0"; fi | head -c "$n"',
      abs,
      maxDepth === undefined ? '' : String(Math.max(1, Math.floor(maxDepth))),
      hidden ? '1' : '0',
      String(BULK_OUTPUT_BYTES),
    );
    if (r.exitCode === ENOENT || r.exitCode === ENOTDIR) this.check(r, path, 'dir');
    if (r.stdout === '' && /printf|unknown|unrecognized|invalid/i.test(r.stderr)) throw new NoFindPrintf(r.stderr);
    if (r.exitCode !== 0 && r.stdout === '') this.check(r, path, 'dir');
    if (r.truncated || Buffer.byteLength(r.stdout) >= BULK_OUTPUT_BYTES) {
      throw new FilesystemError(`listing ${path} is larger than ${BULK_OUTPUT_BYTES} bytes`, 'EFBIG', path);
    }
    const f = r.stdout.split('\0');
    const out: Listed[] = [];
    for (let i = 0; i + 4 < f.length; i += 5) {
      const [y, Y, size, rel, target] = f.slice(i, i + 5) as [string, string, string, string, string];
      const isSymlink = y === 'l';
      const entry: Listed = {
        path: rel,
        name: posix.basename(rel),
        type: (isSymlink ? Y : y) === 'd' ? 'directory' : 'file',
        depth: rel.split('/').length,
      };
      if (isSymlink) {
        entry.isSymlink = true;
        entry.symlinkTarget = target;
      } else if (entry.type === 'file') {
        entry.size = Number(size);
      }
      out.push(entry);
    }
    return out;
  }

  /** `list` through the daemon's file API, one request per directory: for images whose `find` lacks `-printf`. */
  private async listByApi(abs: string, path: string, maxDepth: number): Promise<Listed[]> {
    const walk = async (dir: string, prefix: string, depth: number): Promise<Listed[]> => {
      let entries;
      try {
        entries = await this.withClient((c) => c.list(dir));
      } catch (err) {
        if (err instanceof SandboxError && !isGone(err)) {
          const r = await this.sh('[ -d "$1" ] && exit 0; [ -e "$1" ] && exit 20; exit 2', dir);
          this.check(r, path, 'dir');
        }
        throw err;
      }
      const out: Listed[] = [];
      for (const e of entries) {
        const rel = prefix + e.name;
        const entry: Listed = { path: rel, name: e.name, type: e.type === 'dir' ? 'directory' : 'file', depth };
        if (e.type === 'file') entry.size = e.size;
        if (e.type === 'symlink') entry.isSymlink = true;
        out.push(entry);
        if (e.type === 'dir' && depth < maxDepth) out.push(...(await walk(`${dir}/${e.name}`, `${rel}/`, depth + 1)));
      }
      return out;
    };
    return walk(abs, '', 1);
  }

  async readdir(path: string, options: ListOptions = {}): Promise<MastraFileEntry[]> {
    await this.ensureReady();
    const abs = this.resolve(path, 'readdir');
    const exts = options.extension === undefined ? undefined : [options.extension].flat();
    const depth = options.recursive ? (options.maxDepth ?? 100) + 1 : 1;
    let listed: Listed[];
    try {
      listed = await this.list(abs, path, depth, true);
    } catch (err) {
      if (!(err instanceof NoFindPrintf)) throw err;
      listed = await this.listByApi(abs, path, depth);
    }
    const out: MastraFileEntry[] = [];
    for (const e of listed) {
      if (exts && e.type === 'file') {
        const ext = posix.extname(e.name);
        if (!exts.some((x) => x === ext || x === ext.slice(1))) continue;
      }
      const entry: MastraFileEntry = { name: e.path, type: e.type };
      if (e.size !== undefined) entry.size = e.size;
      if (e.isSymlink) {
        entry.isSymlink = true;
        entry.symlinkTarget = e.symlinkTarget as string;
      }
      out.push(entry);
    }
    return out;
  }

  /** Every entry under `path` in one command (Mastra's list_files uses it instead of a readdir per directory). */
  async walk(path: string, options: WalkOptions = {}): Promise<WalkEntry[]> {
    await this.ensureReady();
    const abs = this.resolve(path, 'walk');
    const listed = await this.list(abs, path, options.maxDepth, options.includeHidden ?? false);
    return listed.map((e) => {
      const w: WalkEntry = { name: e.name, path: e.path, type: e.type };
      if (e.size !== undefined) w.size = e.size;
      if (e.isSymlink) {
        w.isSymlink = true;
        w.symlinkTarget = e.symlinkTarget as string;
      }
      return w;
    });
  }

  /**
   * Content search in one `grep -r` inside the sandbox. The pattern (JS regex source) is translated to a POSIX
   * extended regex that matches at least what it matches; every line found is checked again with the JS regex
   * (which also gives the column), so the results are the JS regex's. A pattern with no such translation
   * (lookarounds, backreferences, ...) is an `UnsupportedGrepPatternError`: Mastra then searches on the host.
   */
  async grep(options: FilesystemGrepOptions): Promise<FilesystemGrepResult[]> {
    await this.ensureReady();
    const abs = this.resolve(options.path, 'grep');
    const caseSensitive = options.caseSensitive ?? true;
    const ere = jsRegexToERE(options.pattern, caseSensitive);
    const re = new RegExp(options.pattern, caseSensitive ? '' : 'i');
    const ctx = Math.max(0, Math.floor(options.contextLines ?? 0));
    const flags = ['-rnIZsE', '--no-group-separator', '--exclude-dir=.git'];
    if (!caseSensitive) flags.push('-i');
    if (options.maxCountPerFile !== undefined) flags.push(`--max-count=${Math.max(0, Math.floor(options.maxCountPerFile))}`);
    if (ctx > 0) flags.push(`--context=${ctx}`);
    if (!options.includeHidden) flags.push('--exclude=.*', '--exclude-dir=.*');
    const r = await this.sh(
      '[ -e "$1" ] || exit 2; [ -d "$1" ] || exit 20; cd -- "$1" || exit 13; n=$2; shift 2; ' +
        '{ grep "$@"; echo "rc=$?" >&2; } | head -c "$n"',
      abs,
      String(BULK_OUTPUT_BYTES),
      ...flags,
      '-e',
      ere,
    );
    if (r.exitCode === ENOENT || r.exitCode === ENOTDIR) this.check(r, options.path, 'dir');
    this.check(r, options.path, 'grep');
    const rc = Number(/rc=(\d+)\s*$/.exec(r.stderr)?.[1] ?? '2');
    if (rc >= 2 && r.stdout === '') throw new UnsupportedGrepPatternError(options.pattern, r.stderr.trim().slice(0, 500));
    const cut = r.truncated || Buffer.byteLength(r.stdout) >= BULK_OUTPUT_BYTES;
    // Records: NAME \0 LINE (':' match | '-' context) TEXT \n; a name may hold newlines, a line cannot.
    const files = new Map<string, { lines: Map<number, string>; hits: number[] }>();
    const s = r.stdout;
    let i = 0;
    for (;;) {
      const z = s.indexOf('\0', i);
      if (z < 0) break;
      const name = s.slice(i, z).replace(/^\.\//, '');
      const m = /^(\d+)([:-])/.exec(s.slice(z + 1, z + 24));
      const nl = s.indexOf('\n', z + 1);
      if (!m || nl < 0) break; // a cut record at the end
      const line = Number(m[1]);
      const text = s.slice(z + 1 + m[0].length, nl);
      let f = files.get(name);
      if (!f) files.set(name, (f = { lines: new Map(), hits: [] }));
      f.lines.set(line, text);
      if (m[2] === ':') f.hits.push(line);
      i = nl + 1;
    }
    const out: FilesystemGrepResult[] = [];
    let total = 0;
    const cap = options.maxTotalMatches ?? Infinity;
    for (const [path, f] of files) {
      const matches: FilesystemGrepMatch[] = [];
      for (const line of f.hits) {
        if (total >= cap) break;
        if (options.maxCountPerFile !== undefined && matches.length >= options.maxCountPerFile) break;
        const text = f.lines.get(line) as string;
        const hit = re.exec(text);
        if (!hit) continue; // the translation matched more than the JS regex does
        const match: FilesystemGrepMatch = { line, column: hit.index, text };
        if (ctx > 0) {
          const before: string[] = [];
          for (let k = Math.max(1, line - ctx); k < line; k++) {
            const t = f.lines.get(k);
            if (t !== undefined) before.push(t);
          }
          const after: string[] = [];
          for (let k = line + 1; k <= line + ctx; k++) {
            const t = f.lines.get(k);
            if (t === undefined) break;
            after.push(t);
          }
          match.before = before;
          match.after = after;
        }
        matches.push(match);
        total++;
      }
      if (matches.length) out.push({ path, matches });
    }
    if (cut && total < cap) {
      // Results cut short by the output bound would read as "that is all": say so, and Mastra searches on the host.
      throw new FilesystemError(`grep output under ${options.path} is larger than ${BULK_OUTPUT_BYTES} bytes`, 'EFBIG', options.path);
    }
    return out;
  }

  async exists(path: string): Promise<boolean> {
    await this.ensureReady();
    const r = await this.sh('[ -e "$1" ]', this.resolve(path));
    return r.exitCode === 0;
  }

  async stat(path: string): Promise<FileStat> {
    await this.ensureReady();
    const abs = this.resolve(path, 'stat');
    const r = await this.sh('[ -e "$1" ] || exit 2; stat -L -c "%F|%s|%.9W|%.9Y" -- "$1"', abs);
    this.check(r, path, 'stat');
    const [kind = '', size = '0', born = '0', mod = '0'] = r.stdout.trim().split('|');
    const modifiedAt = new Date(Math.round(Number(mod) * 1000));
    const b = Number(born);
    const type = kind === 'directory' ? 'directory' : 'file';
    const st: FileStat = {
      name: posix.basename(abs),
      path: this.relative(abs),
      type,
      size: Number(size),
      createdAt: Number.isFinite(b) && b > 0 ? new Date(Math.round(b * 1000)) : modifiedAt,
      modifiedAt,
    };
    if (type === 'file') st.mimeType = mimeTypeOf(abs);
    return st;
  }
}

/** The sandbox's `find` has no `-printf` (e.g. BusyBox): listings fall back to the daemon's file API. */
class NoFindPrintf extends Error {}

interface Listed {
  path: string;
  name: string;
  type: 'file' | 'directory';
  depth: number;
  size?: number;
  isSymlink?: boolean;
  symlinkTarget?: string;
}

// ---------------------------------------------------------------------------------------------------------------
// JS regex -> POSIX ERE (for grep in the C locale), matching a superset of the JS regex's lines.

const ERE_SPECIAL = new Set([...'.[()*+?{|^$\\']);
/** Non-ASCII whitespace JS's \s matches (as alternatives after [[:space:]]). */
const JS_UNICODE_SPACE = '\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff';
const CLASS_D = [[0x30, 0x39]] as const;
const CLASS_W = [[0x30, 0x39], [0x41, 0x5a], [0x61, 0x7a], [0x5f, 0x5f]] as const;
const CLASS_S = [[0x09, 0x0d], [0x20, 0x20]] as const;

/** A POSIX bracket expression for a set of ASCII codes (], ^ and - placed where they are literal). */
function bracket(set: Set<number>, negate: boolean): string {
  const has = (c: string) => set.has(c.charCodeAt(0));
  const rest = [...set].filter((c) => c !== 0x5d && c !== 0x2d && c !== 0x5e && c !== 0x5b).sort((a, b) => a - b);
  let body = has(']') ? ']' : '';
  for (let i = 0; i < rest.length; ) {
    let j = i;
    while (j + 1 < rest.length && rest[j + 1] === (rest[j] as number) + 1) j++;
    const a = String.fromCharCode(rest[i] as number);
    const b = String.fromCharCode(rest[j] as number);
    body += j - i >= 2 ? `${a}-${b}` : rest.slice(i, j + 1).map((c) => String.fromCharCode(c)).join('');
    i = j + 1;
  }
  if (has('^')) body += '^';
  if (has('[')) body += '[';
  if (has('-')) body += '-';
  if (body === '^' && !negate) return '\\^';
  // a lone ']' or '^' first would change meaning; ']' first is literal, '^' is never first here unless alone
  return negate ? `[^${body}]` : `[${body}]`;
}

/**
 * Translates a JS regex source to a POSIX ERE for GNU grep in the C locale that matches every line the JS
 * regex matches (and maybe more: the caller checks each line with the JS regex). Throws
 * `UnsupportedGrepPatternError` for what has no such translation.
 */
export function jsRegexToERE(src: string, caseSensitive = true): string {
  const unsupported = (why: string): never => {
    throw new UnsupportedGrepPatternError(src, why);
  };
  const cps = [...src];
  let out = '';
  let i = 0;
  const literal = (ch: string): string => {
    const cp = ch.codePointAt(0) as number;
    if (cp === 0x0a || cp === 0) unsupported('newline or NUL in the pattern');
    if (cp > 0x7f) {
      if (!caseSensitive) unsupported('case-insensitive non-ASCII');
      return `(${ch})`;
    }
    return ERE_SPECIAL.has(ch) ? `\\${ch}` : ch;
  };
  const anyChar = '(.{1,4})'; // one JS char is up to 4 bytes
  const escape = (c: string, inClass: boolean): string | Set<number> => {
    // returns a literal char (string of length 1 code point) or a class set (for \d \w \s inside classes)
    switch (c) {
      case 'd':
        return rangeSet(CLASS_D);
      case 'w':
        return rangeSet(CLASS_W);
      case 's':
        if (inClass) unsupported('\\s inside a class');
        return rangeSet(CLASS_S);
      case 't':
        return '\t';
      case 'r':
        return '\r';
      case 'f':
        return '\f';
      case 'v':
        return '\v';
      case 'n':
      case '0':
      case 'c':
      case 'k':
      case 'p':
      case 'P':
        return unsupported(`\\${c}`);
      case 'x': {
        const h = cps.slice(i + 1, i + 3).join('');
        if (!/^[0-9a-fA-F]{2}$/.test(h)) return 'x';
        i += 2;
        return String.fromCodePoint(parseInt(h, 16));
      }
      case 'u': {
        const h = cps.slice(i + 1, i + 5).join('');
        if (!/^[0-9a-fA-F]{4}$/.test(h)) return 'u';
        i += 4;
        return String.fromCodePoint(parseInt(h, 16));
      }
      default:
        if (/[1-9]/.test(c)) return unsupported('backreference');
        if (/[DWSbB]/.test(c)) return unsupported(`\\${c}`); // handled by the caller outside classes
        return c;
    }
  };
  let quantifiable = false;
  while (i < cps.length) {
    const c = cps[i] as string;
    if (c === '\\') {
      const n = cps[i + 1];
      if (n === undefined) unsupported('trailing backslash');
      i++;
      if (n === 'b' || n === 'B') {
        out += `\\${n}`;
        quantifiable = false;
      } else if (n === 'D' || n === 'W' || n === 'S') {
        const set = rangeSet(n === 'D' ? CLASS_D : n === 'W' ? CLASS_W : CLASS_S);
        out += `(${bracket(set, true)}{1,4})`;
        quantifiable = true;
      } else {
        const e = escape(n as string, false);
        if (typeof e === 'string') out += literal(e);
        else if (n === 's') out += `([[:space:]]|${[...JS_UNICODE_SPACE].join('|')})`;
        else out += bracket(e, false);
        quantifiable = true;
      }
      i++;
      continue;
    }
    switch (c) {
      case '.':
        out += anyChar;
        quantifiable = true;
        i++;
        continue;
      case '^':
      case '$':
      case '|':
        out += c;
        quantifiable = false;
        i++;
        continue;
      case '(':
        if (cps[i + 1] === '?') {
          if (cps[i + 2] !== ':') unsupported('lookaround or named group');
          i += 3;
        } else i++;
        out += '(';
        quantifiable = false;
        continue;
      case ')':
        out += ')';
        quantifiable = true;
        i++;
        continue;
      case '*':
      case '+':
      case '?':
        if (!quantifiable) unsupported('quantifier without an atom');
        out += c;
        i++;
        if (cps[i] === '?') i++; // lazy: same lines, same leftmost start
        quantifiable = false;
        continue;
      case '{': {
        const rest = cps.slice(i).join('');
        const q = /^\{(\d+)(,(\d*))?\}/.exec(rest);
        if (q && quantifiable) {
          out += q[0];
          i += [...q[0]].length;
          if (cps[i] === '?') i++;
          quantifiable = false;
        } else {
          out += '\\{';
          i++;
          quantifiable = true;
        }
        continue;
      }
      case '[': {
        i++;
        let negate = false;
        if (cps[i] === '^') {
          negate = true;
          i++;
        }
        const set = new Set<number>();
        let closed = false;
        while (i < cps.length) {
          const k = cps[i] as string;
          if (k === ']') {
            closed = true;
            i++;
            break;
          }
          let item: string | Set<number>;
          if (k === '\\') {
            i++;
            const n = cps[i];
            if (n === undefined) unsupported('trailing backslash');
            if (n === 'b') item = '\b';
            else item = escape(n as string, true);
          } else item = k;
          i++;
          if (typeof item !== 'string') {
            for (const x of item) set.add(x);
            continue;
          }
          const cp = item.codePointAt(0) as number;
          if (cp > 0x7f) unsupported('non-ASCII in a class');
          if (cps[i] === '-' && cps[i + 1] !== undefined && cps[i + 1] !== ']') {
            // a range a-b
            i++;
            let hi = cps[i] as string;
            if (hi === '\\') {
              i++;
              const e = escape(cps[i] as string, true);
              if (typeof e !== 'string') unsupported('class escape as a range end');
              hi = e as string;
            }
            i++;
            const hcp = hi.codePointAt(0) as number;
            if (hcp > 0x7f) unsupported('non-ASCII in a class');
            for (let x = cp; x <= hcp; x++) set.add(x);
            continue;
          }
          set.add(cp);
        }
        if (!closed) unsupported('unclosed class');
        if (set.size === 0) {
          if (!negate) unsupported('empty class');
          out += anyChar;
        } else if (negate) {
          out += `(${bracket(set, true)}{1,4})`;
        } else {
          out += bracket(set, false);
        }
        quantifiable = true;
        continue;
      }
      default:
        out += literal(c);
        quantifiable = true;
        i++;
    }
  }
  return out;
}

function rangeSet(ranges: ReadonlyArray<readonly [number, number]>): Set<number> {
  const s = new Set<number>();
  for (const [a, b] of ranges) for (let x = a; x <= b; x++) s.add(x);
  return s;
}
