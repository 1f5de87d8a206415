/**
 * Mastra adapter: a shell tool (`makeSandboxTool`), and a Workspace sandbox and filesystem
 * (`IronClawWorkspaceSandbox`, `IronClawFilesystem`) so `new Workspace({ sandbox, filesystem })` runs
 * Mastra's built-in workspace tools inside an IronClaw sandbox.
 */
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
  SandboxAbortError,
  StaleFileError,
} from '@mastra/core/workspace';
import type {
  CommandResult,
  CopyOptions,
  ExecuteCommandOptions,
  FileContent,
  FileStat,
  FileEntry as MastraFileEntry,
  FilesystemInfo,
  ListOptions,
  MastraFilesystemOptions,
  ProviderStatus,
  ReadOptions,
  RemoveOptions,
  SandboxFileInput,
  SandboxInfo as MastraSandboxInfo,
  SandboxStartResult,
  WriteOptions,
} from '@mastra/core/workspace';
import { z } from 'zod';
import {
  AbortError,
  ApprovalDeniedError,
  ApprovalTimeoutError,
  ConflictError,
  InvalidArgumentError,
  NotFoundError,
  SandboxError,
} from './errors.js';
import type { ExecResult } from './result.js';
import { Sandbox, resolvePath } from './sandbox.js';
import { SHELL_TOOL_DESCRIPTION, runShellTool } from './tool.js';
import type { ShellToolOptions } from './tool.js';
import type { RunOptions, SandboxOptions } from './types.js';

export interface MastraSandboxToolOptions extends Omit<ShellToolOptions, 'name'> {
  /** Tool id (default `sandbox_shell`); the name the model sees is the key you register it under. */
  id?: string;
}

/**
 * A Mastra tool that runs `{ command }` in the sandbox and returns `{ output, exitCode }`, `output` being
 * `ExecResult.toString()`. Output streams to the agent's writer as `data-sandbox-stdout`/`-stderr` chunks.
 * A command an operator did not approve returns `{ output: 'denied: ...', exitCode: -1, denied: true }`.
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
      return runShellTool(sandbox, command, { ...opts, name: id }, call);
    },
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Workspace sandbox

/** The label that ties a daemon sandbox to a logical Mastra sandbox id (for get-or-create). */
export const MASTRA_ID_LABEL = 'mastra.sandbox-id';

export interface IronClawWorkspaceSandboxOptions extends SandboxOptions {
  /**
   * Logical id. A daemon id (`sbx-...`) reconnects to that sandbox; any other string is get-or-create:
   * `start()` reconnects to the running sandbox labelled `mastra.sandbox-id=<id>`, else creates one with that label.
   * Default: a random id.
   */
  id?: string;
  /** Use this client (e.g. one shared with your own code) instead of making one. */
  sandbox?: Sandbox;
  /** Text for the agent's instructions (default: a description of the sandbox). */
  instructions?: string;
  /** Working directory for commands (default `/workspace`). */
  workingDirectory?: string;
  onStart?: ConstructorParameters<typeof MastraSandbox>[0]['onStart'];
  onStop?: ConstructorParameters<typeof MastraSandbox>[0]['onStop'];
  onDestroy?: ConstructorParameters<typeof MastraSandbox>[0]['onDestroy'];
}

const DEFAULT_INSTRUCTIONS =
  'Commands run in an isolated IronClaw Linux sandbox as an unprivileged user. /workspace is the working ' +
  'directory and HOME (writable, kept between commands); /tmp is writable; the rest of the filesystem is ' +
  'read-only. There is no network except hosts an operator allowed (through the HTTP proxy in HTTP_PROXY). ' +
  'Some commands need an operator\'s approval and may be denied.';

/** A Mastra `WorkspaceSandbox` backed by an IronClaw sandbox. */
export class IronClawWorkspaceSandbox extends MastraSandbox {
  readonly id: string;
  readonly name = 'IronClawWorkspaceSandbox';
  readonly provider = 'ironclaw';
  status: ProviderStatus = 'pending';
  private readonly options: IronClawWorkspaceSandboxOptions;
  private _client: Sandbox | undefined;
  private readonly shared: boolean;

  constructor(opts: IronClawWorkspaceSandboxOptions = {}) {
    const base: ConstructorParameters<typeof MastraSandbox>[0] = {
      name: 'IronClawWorkspaceSandbox',
      workingDirectory: opts.workingDirectory ?? '/workspace',
    };
    if (opts.onStart) base.onStart = opts.onStart;
    if (opts.onStop) base.onStop = opts.onStop;
    if (opts.onDestroy) base.onDestroy = opts.onDestroy;
    super(base);
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

  /** Get-or-create: reconnects to this logical sandbox if it is still running on the daemon, else creates it. */
  override async start(): Promise<SandboxStartResult> {
    if (this.shared) {
      const client = this._client as Sandbox;
      const had = client.id !== undefined;
      await client.engage();
      return { outcome: had ? 'connected' : 'created' };
    }
    const { sandbox: _s, instructions: _i, workingDirectory: _w, onStart: _a, onStop: _b, onDestroy: _c, id: _id, ...rest } =
      this.options;
    // 1. the sandbox this instance used before (stop() keeps it running on the daemon)
    const known = this._client?.id ?? (this.id.startsWith('sbx-') ? this.id : undefined);
    if (known !== undefined) {
      try {
        this._client = await Sandbox.connect(known, rest);
        return { outcome: 'connected' };
      } catch (err) {
        const gone = err instanceof NotFoundError || err instanceof ConflictError;
        if (!gone || this.id.startsWith('sbx-')) throw err;
      }
    }
    // 2. a running sandbox carrying our logical id
    const labels = { ...(rest.labels ?? {}), [MASTRA_ID_LABEL]: this.id };
    const found = (await Sandbox.list({ ...rest, labels }))[0];
    if (found) {
      this._client = await Sandbox.connect(found.id, rest);
      return { outcome: 'connected' };
    }
    // 3. a new one
    this._client = await Sandbox.create({ ...rest, labels });
    return { outcome: 'created' };
  }

  /**
   * Detaches without destroying: IronClaw sandboxes cannot be paused, so the daemon keeps this one running
   * (until its idle timeout or ttl) and the next `start()` reconnects to it. Use `destroy()` to end it.
   */
  override async stop(): Promise<void> {
    // nothing to release on the client side; the id is kept for the next start()
  }

  /** Destroys the daemon sandbox. */
  override async destroy(): Promise<void> {
    await this._client?.destroy();
  }

  override getInstructions(): string {
    return this.options.instructions ?? DEFAULT_INSTRUCTIONS;
  }

  override async getInfo(): Promise<MastraSandboxInfo> {
    const info = this._client?.id !== undefined ? await this._client.getInfo().catch(() => this._client?.info) : undefined;
    const out: MastraSandboxInfo = {
      id: this.id,
      name: this.name,
      provider: this.provider,
      status: this.status,
      createdAt: info ? info.createdAt : new Date(),
      metadata: {
        sandboxId: this._client?.id,
        state: info?.state,
        labels: info?.labels,
        addr: this._client?.addr,
      },
    };
    if (info?.lastUsedAt) out.lastUsedAt = info.lastUsedAt;
    if (info?.expiresAt) out.timeoutAt = info.expiresAt;
    return out;
  }

  override async executeCommand(
    command: string,
    args: string[] = [],
    options: ExecuteCommandOptions = {},
  ): Promise<CommandResult> {
    await this.ensureRunning();
    const line = args.length ? [command, ...args.map(shellQuote)].join(' ') : command;
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries({ ...this.getEnv(), ...(options.env ?? {}) })) {
      if (v !== undefined) env[k] = v;
    }
    const ropts: RunOptions = { approval: 'wait' };
    if (Object.keys(env).length) ropts.env = env;
    const cwd = options.cwd ?? this.workingDirectory;
    if (cwd !== undefined) ropts.cwd = cwd.startsWith('/') ? cwd : resolvePath(cwd);
    if (options.timeout !== undefined) ropts.timeoutMs = options.timeout; // Mastra's timeout is in ms
    if (options.onStdout) ropts.onStdout = options.onStdout;
    if (options.onStderr) ropts.onStderr = options.onStderr;
    if (options.abortSignal) ropts.signal = options.abortSignal;
    let r: ExecResult;
    try {
      r = await this.client.run(line, ropts);
    } catch (err) {
      if (err instanceof AbortError) {
        throw new SandboxAbortError('command', options.abortSignal?.reason);
      }
      if (err instanceof ApprovalDeniedError || err instanceof ApprovalTimeoutError) {
        const msg = `denied: ${err.message}`;
        options.onStderr?.(msg);
        return {
          success: false,
          exitCode: -1,
          stdout: '',
          stderr: msg,
          executionTimeMs: 0,
          command,
          args,
        };
      }
      throw err;
    }
    const stderr = r.error ? `${r.stderr}${r.stderr && !r.stderr.endsWith('\n') ? '\n' : ''}${r.error}` : r.stderr;
    return {
      success: r.exitCode === 0,
      exitCode: r.exitCode,
      stdout: r.stdout,
      stderr,
      executionTimeMs: r.durationMs,
      timedOut: r.timedOut,
      killed: r.timedOut || r.oomKilled,
      stdoutTruncated: r.truncated,
      stderrTruncated: r.truncated,
      command,
      args,
    };
  }

  override async writeFiles(files: SandboxFileInput[]): Promise<void> {
    await this.ensureRunning();
    for (const f of files) {
      await this.client.writeFile(f.path, f.content, f.mode === undefined ? {} : { mode: f.mode });
    }
  }
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
}

// Exit codes of the helper scripts below (errno values, as the shell cannot see them).
const ENOENT = 2;
const EEXIST = 17;
const ENOTDIR = 20;
const EISDIR = 21;
const ENOTEMPTY = 39;

/**
 * A Mastra `WorkspaceFilesystem` over the sandbox's files: reads, writes and listings use the daemon's file API;
 * the rest (stat, delete, copy, move, mkdir) runs coreutils inside the sandbox. Relative paths are under
 * `/workspace`; the daemon confines file transfers to `/workspace` and `/tmp`.
 */
export class IronClawFilesystem extends MastraFilesystem {
  readonly id: string;
  readonly name = 'IronClawFilesystem';
  readonly provider = 'ironclaw';
  readonly basePath = '/workspace';
  readonly readOnly: boolean;
  status: ProviderStatus = 'pending';
  private readonly source: IronClawWorkspaceSandbox | Sandbox;

  constructor(opts: IronClawFilesystemOptions) {
    const base: ConstructorParameters<typeof MastraFilesystem>[0] = { name: 'IronClawFilesystem' };
    if (opts.onInit) base.onInit = opts.onInit;
    if (opts.onDestroy) base.onDestroy = opts.onDestroy;
    if (opts.textExtensions) base.textExtensions = opts.textExtensions;
    super(base);
    this.source = opts.sandbox;
    this.readOnly = opts.readOnly ?? false;
    this.id = opts.id ?? `ironclaw-fs-${randomUUID()}`;
  }

  getInstructions(): string {
    return 'Files live in the IronClaw sandbox: relative paths are under /workspace (writable); /tmp is writable too.';
  }

  getInfo(): FilesystemInfo {
    return { id: this.id, name: this.name, provider: this.provider, status: this.status, readOnly: this.readOnly };
  }

  resolveAbsolutePath(path: string): string {
    return resolvePath(path);
  }

  private async client(): Promise<Sandbox> {
    if (this.source instanceof Sandbox) {
      await this.source.engage();
      return this.source;
    }
    await this.source.ensureRunning();
    return this.source.client;
  }

  private writable(op: string): void {
    if (this.readOnly) throw new FilesystemError(`filesystem is read-only (${op})`, 'EROFS', '');
  }

  /** Runs a small sh script with the paths as $1.. (never interpolated), for the operations the file API lacks. */
  private async sh(script: string, ...args: string[]): Promise<ExecResult> {
    const c = await this.client();
    return c.run(['/bin/sh', '-c', script, 'sh', ...args], { approval: 'fail' });
  }

  private check(r: ExecResult, path: string, op: string): void {
    if (r.exitCode === 0) return;
    switch (r.exitCode) {
      case ENOENT:
        throw op === 'dir' ? new DirectoryNotFoundError(path) : new FileNotFoundError(path);
      case EEXIST:
        throw new FileExistsError(path);
      case ENOTDIR:
        throw new NotDirectoryError(path);
      case EISDIR:
        throw new IsDirectoryError(path);
      case ENOTEMPTY:
        throw new DirectoryNotEmptyError(path);
      default:
        throw new FilesystemError(
          `${op} ${path} failed (exit ${r.exitCode}): ${(r.stderr || r.error || '').trim()}`,
          'EIO',
          path,
        );
    }
  }

  async readFile(path: string, options: ReadOptions = {}): Promise<string | Buffer> {
    await this.ensureReady();
    const c = await this.client();
    let bytes: Uint8Array;
    try {
      bytes = await c.readFile(path);
    } catch (err) {
      throw await this.mapFileError(err, path);
    }
    const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    return options.encoding ? buf.toString(options.encoding) : buf;
  }

  private async mapFileError(err: unknown, path: string): Promise<unknown> {
    if (!(err instanceof SandboxError)) return err;
    if (err instanceof NotFoundError && !/sandbox/.test(err.message)) return new FileNotFoundError(path);
    if (err instanceof InvalidArgumentError && /not a regular file|is a directory/.test(err.message)) return new IsDirectoryError(path);
    return err;
  }

  async writeFile(path: string, content: FileContent, options: WriteOptions = {}): Promise<void> {
    await this.ensureReady();
    this.writable('writeFile');
    const abs = resolvePath(path);
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
    const c = await this.client();
    await c.writeFile(abs, typeof content === 'string' ? content : new Uint8Array(content));
  }

  async appendFile(path: string, content: FileContent): Promise<void> {
    await this.ensureReady();
    this.writable('appendFile');
    const c = await this.client();
    let old: Uint8Array = new Uint8Array();
    try {
      old = await c.readFile(path);
    } catch (err) {
      const mapped = await this.mapFileError(err, path);
      if (!(mapped instanceof FileNotFoundError)) throw mapped;
    }
    const add = typeof content === 'string' ? new TextEncoder().encode(content) : content;
    const all = new Uint8Array(old.byteLength + add.byteLength);
    all.set(old, 0);
    all.set(add, old.byteLength);
    await c.writeFile(path, all);
  }

  async deleteFile(path: string, options: RemoveOptions = {}): Promise<void> {
    await this.ensureReady();
    this.writable('deleteFile');
    const r = await this.sh(
      'if [ ! -e "$1" ] && [ ! -L "$1" ]; then [ "$2" = 1 ] && exit 0; exit 2; fi; ' +
        '[ -d "$1" ] && [ ! -L "$1" ] && exit 21; rm -f -- "$1"',
      resolvePath(path),
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
      resolvePath(src),
      resolvePath(dest),
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
      resolvePath(src),
      resolvePath(dest),
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
      resolvePath(path),
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
      resolvePath(path),
      options.recursive ? '1' : '0',
      options.force ? '1' : '0',
    );
    this.check(r, path, 'dir');
  }

  async readdir(path: string, options: ListOptions = {}): Promise<MastraFileEntry[]> {
    await this.ensureReady();
    const c = await this.client();
    const exts = options.extension === undefined ? undefined : [options.extension].flat();
    const walk = async (dir: string, prefix: string, depth: number): Promise<MastraFileEntry[]> => {
      let entries;
      try {
        entries = await c.list(dir);
      } catch (err) {
        if (err instanceof NotFoundError && !/sandbox/.test(err.message)) {
          throw new DirectoryNotFoundError(path);
        }
        if (err instanceof InvalidArgumentError && /directory/.test(err.message)) {
          throw new NotDirectoryError(path);
        }
        throw err;
      }
      const out: MastraFileEntry[] = [];
      for (const e of entries) {
        const isDir = e.type === 'dir';
        if (exts && !isDir) {
          const ext = posix.extname(e.name);
          if (!exts.some((x) => x === ext || x === ext.slice(1))) continue;
        }
        const entry: MastraFileEntry = { name: prefix + e.name, type: isDir ? 'directory' : 'file' };
        if (e.type === 'file') entry.size = e.size;
        if (e.type === 'symlink') entry.isSymlink = true;
        out.push(entry);
        if (isDir && options.recursive && depth > 0) {
          out.push(...(await walk(`${dir}/${e.name}`, `${prefix}${e.name}/`, depth - 1)));
        }
      }
      return out;
    };
    return walk(resolvePath(path), '', options.maxDepth ?? 100);
  }

  async exists(path: string): Promise<boolean> {
    await this.ensureReady();
    const r = await this.sh('[ -e "$1" ] || [ -L "$1" ]', resolvePath(path));
    return r.exitCode === 0;
  }

  async stat(path: string): Promise<FileStat> {
    await this.ensureReady();
    const abs = resolvePath(path);
    const r = await this.sh('[ -e "$1" ] || exit 2; stat -L -c "%F|%s|%.9W|%.9Y" -- "$1"', abs);
    this.check(r, path, 'stat');
    const [kind = '', size = '0', born = '0', mod = '0'] = r.stdout.trim().split('|');
    const modifiedAt = new Date(Math.round(Number(mod) * 1000));
    const b = Number(born);
    return {
      name: posix.basename(abs),
      path: abs,
      type: kind === 'directory' ? 'directory' : 'file',
      size: Number(size),
      createdAt: Number.isFinite(b) && b > 0 ? new Date(Math.round(b * 1000)) : modifiedAt,
      modifiedAt,
    };
  }
}
