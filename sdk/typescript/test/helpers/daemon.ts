/**
 * Starts a real `ironclaw serve` for a test file: a free port, a temp data dir, the offline mock model
 * provider; stops it (SIGTERM, then SIGKILL) and removes the data dir afterwards.
 * The binary comes from $IRONCLAW_BIN, else it is built from this repository with `go build`.
 */
import { execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import type { ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { after, before } from 'node:test';
import { fileURLToPath } from 'node:url';

export interface Daemon {
  addr: string;
  dataDir: string;
  agentToken: string;
  operatorToken: string;
  /** Calls the API with the operator token; returns status and parsed JSON body. */
  operator(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }>;
  /** Calls the API with the agent token. */
  agent(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }>;
  stop(): Promise<void>;
}

export interface DaemonOptions {
  /** Written to a file and passed as `--policy FILE` (JSON, which is also YAML). */
  policy?: unknown;
  args?: string[];
}

/** The repository root: the nearest parent holding the ironclaw go.mod. */
export function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const mod = join(dir, 'go.mod');
    if (existsSync(mod) && readFileSync(mod, 'utf8').includes('module github.com/ironclaw/ironclaw')) return dir;
    const up = dirname(dir);
    if (up === dir) throw new Error('cannot find the ironclaw repository (go.mod) above ' + fileURLToPath(import.meta.url));
    dir = up;
  }
}

function findGo(): string {
  if (process.env['GO']) return process.env['GO'];
  for (const d of (process.env['PATH'] ?? '').split(':')) if (d && existsSync(join(d, 'go'))) return join(d, 'go');
  if (existsSync('/usr/local/go/bin/go')) return '/usr/local/go/bin/go';
  throw new Error('no go toolchain: set IRONCLAW_BIN to an ironclaw binary, or put go on PATH');
}

/**
 * $IRONCLAW_BIN, or a fresh `CGO_ENABLED=0 go build` of ./cmd/ironclaw, ./cmd/ironclaw-full (where
 * `ironclaw serve` runs) and the small sandbox init ./cmd/ironclaw-sandbox (which the daemon runs when
 * it lies beside it) into a temp dir.
 */
export function ironclawBin(): string {
  const env = process.env['IRONCLAW_BIN'];
  if (env) return resolve(env);
  // One build directory per checkout: worktrees testing side by side must not run each other's binary.
  const checkout = createHash('sha256').update(repoRoot()).digest('hex').slice(0, 12);
  const outDir = join(tmpdir(), `ironclaw-sdk-test-${process.getuid?.() ?? 0}-${checkout}`);
  mkdirSync(outDir, { recursive: true });
  const out = join(outDir, 'ironclaw');
  const tmp = join(outDir, `build.${process.pid}`);
  mkdirSync(tmp, { recursive: true });
  execFileSync(findGo(), ['build', '-o', `${tmp}/`, './cmd/ironclaw', './cmd/ironclaw-full', './cmd/ironclaw-sandbox'], {
    cwd: repoRoot(),
    env: { ...process.env, CGO_ENABLED: '0' },
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  // The init and ironclaw-full first: a daemon started from `out` meanwhile finds binaries of one build.
  renameSync(join(tmp, 'ironclaw-sandbox'), join(outDir, 'ironclaw-sandbox'));
  renameSync(join(tmp, 'ironclaw-full'), join(outDir, 'ironclaw-full'));
  renameSync(join(tmp, 'ironclaw'), out);
  rmSync(tmp, { recursive: true, force: true });
  process.env['IRONCLAW_BIN'] = out;
  return out;
}

export async function startDaemon(opts: DaemonOptions = {}): Promise<Daemon> {
  const bin = ironclawBin();
  const dataDir = mkdtempSync(join(tmpdir(), 'ironclaw-sdk-'));
  // The audit key and checkpoints live outside the data dir (the daemon
  // insists), here in a temp dir of their own rather than the host's /etc.
  const custodyDir = mkdtempSync(join(tmpdir(), 'ironclaw-sdk-custody-'));
  const args = ['serve', '--listen', '127.0.0.1:0', '--data-dir', dataDir, '--provider', 'mock',
    '--audit-key', join(custodyDir, 'audit.key'), '--audit-checkpoints', join(custodyDir, 'checkpoints.jsonl')];
  if (opts.policy !== undefined) {
    const file = join(dataDir, 'policy.yaml');
    writeFileSync(file, JSON.stringify(opts.policy));
    args.push('--policy', file);
  }
  args.push(...(opts.args ?? []));
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  // Never leave a daemon behind: not on exit, nor when the test runner signals this process.
  const killOnExit = () => {
    child.kill('SIGKILL');
    rmSync(dataDir, { recursive: true, force: true });
    rmSync(custodyDir, { recursive: true, force: true });
  };
  const onSignal = (sig: NodeJS.Signals) => {
    killOnExit();
    process.exit(sig === 'SIGINT' ? 130 : 143);
  };
  process.on('exit', killOnExit);
  process.once('SIGTERM', onSignal);
  process.once('SIGINT', onSignal);
  let log = '';
  const addr = await new Promise<string>((resolveAddr, reject) => {
    const timer = setTimeout(() => reject(new Error(`ironclaw serve did not start in 20s:\n${log}`)), 20_000);
    const onData = (b: Buffer) => {
      log += b.toString();
      const m = /listening on (http:\/\/\S+)/.exec(log);
      if (m?.[1]) {
        clearTimeout(timer);
        resolveAddr(m[1]);
      }
    };
    child.stderr!.on('data', onData);
    child.stdout!.on('data', onData);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`ironclaw serve exited with ${code}:\n${log}`));
    });
  });
  for (let i = 0; ; i++) {
    try {
      const res = await fetch(`${addr}/healthz`);
      if (res.ok) break;
    } catch {
      // not yet
    }
    if (i > 100) throw new Error(`no /healthz from ${addr}:\n${log}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  const agentToken = readFileSync(join(dataDir, 'agent.token'), 'utf8').trim();
  const operatorToken = readFileSync(join(dataDir, 'operator.token'), 'utf8').trim();
  const call = (token: string) => async (method: string, path: string, body?: unknown) => {
    const init: RequestInit = { method, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' } };
    if (body !== undefined) init.body = JSON.stringify(body);
    const res = await fetch(addr + path, init);
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      // keep the text
    }
    return { status: res.status, body: parsed as any };
  };
  return {
    addr,
    dataDir,
    agentToken,
    operatorToken,
    operator: call(operatorToken),
    agent: call(agentToken),
    async stop() {
      process.off('exit', killOnExit);
      process.off('SIGTERM', onSignal);
      process.off('SIGINT', onSignal);
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise<void>((r) => child.once('exit', () => r()));
        child.kill('SIGTERM');
        const t = setTimeout(() => child.kill('SIGKILL'), 10_000);
        await exited;
        clearTimeout(t);
      }
      rmSync(dataDir, { recursive: true, force: true });
    rmSync(custodyDir, { recursive: true, force: true });
    },
  };
}

/** A test file's daemon, as {@link daemonPerFile} keeps it: set once the file's `before` hook has run. */
export interface FileDaemon {
  d: Daemon;
  /** The agent's connection to it. */
  conn: { addr: string; token: string };
  /** Run after the file's tests, newest first (their failures ignored), before the daemon stops. */
  cleanup: Array<() => Promise<unknown>>;
}

/**
 * Starts a daemon before the test file's tests, then runs `ready` on it (what the file sets up on it: node runs a
 * file's top-level `before` hooks concurrently, so that cannot be a hook of its own); after the tests it runs the
 * `cleanup`, then stops the daemon.
 */
export function daemonPerFile(opts: DaemonOptions = {}, ready?: (srv: FileDaemon) => Promise<unknown> | void): FileDaemon {
  const t = { cleanup: [] } as unknown as FileDaemon;
  before(async () => {
    t.d = await startDaemon(opts);
    t.conn = { addr: t.d.addr, token: t.d.agentToken };
    await ready?.(t);
  });
  after(async () => {
    for (const f of t.cleanup.reverse()) await f().catch(() => undefined);
    await t.d?.stop();
  });
  return t;
}

/** Polls until fn() returns a truthy value (or throws after timeoutMs). */
export async function eventually<T>(fn: () => Promise<T | undefined | null | false>, timeoutMs = 10_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 50));
  }
}
