import { ApprovalDeniedError, ApprovalRequiredError, ApprovalTimeoutError } from './errors.js';
import type { Sandbox } from './sandbox.js';
import type { Approval, Duration, RunOptions } from './types.js';

/** What the shell tools tell the model. */
export const SHELL_TOOL_DESCRIPTION =
  'Run a shell command (/bin/sh -c) in an isolated Linux sandbox. The working directory and HOME is /workspace, ' +
  'which is writable and keeps its files between calls; /tmp is writable too and everything else is read-only. ' +
  'There is no network access except to hosts an operator allowed. Some commands need an operator\'s approval ' +
  'and may be denied. Returns stdout, then stderr, then the exit code.';

/** Options shared by the framework adapters' shell tools. */
export interface ShellToolOptions {
  /** Tool name (default `sandbox_shell`). */
  name?: string;
  /** Tool description shown to the model (default SHELL_TOOL_DESCRIPTION). */
  description?: string;
  /**
   * File a `tool.call` approval at the IronClaw gateway before every call and run the command only once an
   * operator approves it. A denial is returned to the model as text, not thrown.
   */
  requireApproval?: boolean;
  /** Wall-time limit per command, in milliseconds. */
  timeoutMs?: number;
  /** @deprecated Use `timeoutMs`. Milliseconds or a Go duration string. */
  timeout?: Duration;
  /** Stop waiting for an operator after this long (the command then counts as denied). Default: until decided or expired. */
  approvalTimeoutMs?: number;
}

/** What the shell tools return. */
export interface ShellToolOutput {
  /** ExecResult.toString(), or `denied: ...` when an operator did not approve. */
  output: string;
  /** The command's exit code; -1 when it did not run. */
  exitCode: number;
  /** Set when the command did not run because it was not approved. */
  denied?: boolean;
}

export interface ShellToolCall {
  signal?: AbortSignal | undefined;
  onStdout?: (data: string) => void;
  onStderr?: (data: string) => void;
}

/**
 * The body of every adapter's shell tool: optional tool.call approval, then `sandbox.run(command)`;
 * a denied approval (filed by the tool or by the daemon's exec policy) becomes a `denied: ...` answer.
 */
export async function runShellTool(
  sandbox: Sandbox,
  command: string,
  opts: ShellToolOptions = {},
  call: ShellToolCall = {},
): Promise<ShellToolOutput> {
  const name = opts.name ?? 'sandbox_shell';
  if (opts.requireApproval) {
    // The daemon shows the operator the tool and its arguments from data; no note repeats them.
    const filed = await sandbox.requestApproval({ kind: 'tool.call', data: { tool: name, input: { command } } });
    const wait: { timeoutMs?: number; signal?: AbortSignal } = {};
    if (opts.approvalTimeoutMs !== undefined) wait.timeoutMs = opts.approvalTimeoutMs;
    if (call.signal) wait.signal = call.signal;
    const final = await sandbox.waitForApproval(filed.id, wait);
    if (final.state !== 'approved') return denied(final, command);
  }
  const ropts: RunOptions = { approval: 'wait' };
  if (opts.timeoutMs !== undefined) ropts.timeoutMs = opts.timeoutMs;
  else if (opts.timeout !== undefined) ropts.timeout = opts.timeout;
  if (opts.approvalTimeoutMs !== undefined) ropts.approvalTimeoutMs = opts.approvalTimeoutMs;
  if (call.signal) ropts.signal = call.signal;
  if (call.onStdout) ropts.onStdout = call.onStdout;
  if (call.onStderr) ropts.onStderr = call.onStderr;
  try {
    const r = await sandbox.run(command, ropts);
    return { output: r.toString(), exitCode: r.exitCode };
  } catch (err) {
    if (err instanceof ApprovalDeniedError || err instanceof ApprovalTimeoutError) {
      return denied(err.approval, command);
    }
    throw err;
  }
}

function denied(a: Approval, command: string): ShellToolOutput {
  const why =
    a.state === 'pending'
      ? 'no operator decided in time'
      : a.state === 'expired'
        ? 'the approval request expired'
        : 'an operator denied it';
  return {
    output: `denied: ${why}${a.reason ? ` (${a.reason})` : ''}; the command did not run: ${command} [approval ${a.id}]`,
    exitCode: -1,
    denied: true,
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Background processes and ports: the bodies of the adapters' process tools

/** What the process tools tell the model. */
export const PROCESS_TOOL_DESCRIPTIONS = {
  start:
    'Start a long-running command (/bin/sh -c) in the background in the isolated Linux sandbox, e.g. a dev ' +
    'server or a watcher, and return its pid at once. Read its output later with the process output tool; stop it ' +
    'with the kill process tool. The working directory is /workspace.',
  output:
    'Read the output (stdout, stderr) and the state of a background process by its pid. Pass the offset a ' +
    'previous read returned to get only what is new; wait: true blocks until the process exits.',
  kill: 'Kill a background process (and its children) by its pid; returns how it ended and the end of its output.',
  stdin: 'Write text to the stdin of a background process started with stdin: true (close: true closes it after).',
  portUrl:
    'Get a URL that reaches a TCP port a server in the sandbox listens on (on 127.0.0.1), for a browser or an ' +
    'HTTP client on the host. Only the ports the sandbox was created with work.',
} as const;

/** Options of the adapters' process tools. */
export interface ProcessToolOptions {
  /** Text of each answer's output kept for the model, from the end (default 16000 characters). */
  maxOutputChars?: number;
  /** Stop waiting for an operator on a held spawn after this long (it then counts as denied). */
  approvalTimeoutMs?: number;
  /** How long a port URL works, in milliseconds (default: the policy's `ports.url_ttl`). */
  portUrlTtlMs?: number;
}

export interface StartProcessOutput {
  /** The daemon's handle of the process; -1 when it did not start. */
  pid: number;
  output: string;
  denied?: boolean;
}

export interface ProcessOutputResult {
  pid: number;
  state: 'running' | 'exited';
  exitCode?: number;
  stdout: string;
  stderr: string;
  /** Where the next read continues. */
  offset: number;
  /** Characters of this read left out (the oldest), beyond maxOutputChars. */
  omitted?: number;
}

export interface KillProcessOutput {
  pid: number;
  exitCode: number;
  output: string;
}

export interface PortUrlOutput {
  port: number;
  url: string;
  expiresAt: string;
}

const DEFAULT_MAX_OUTPUT_CHARS = 16_000;

function tailText(s: string, max: number): { text: string; omitted: number } {
  return s.length <= max ? { text: s, omitted: 0 } : { text: s.slice(s.length - max), omitted: s.length - max };
}

/**
 * Starts a background process; one the daemon's policy holds for an operator waits for the decision, and a
 * denial is an answer (`pid: -1`, `denied: true`), not a throw.
 */
export async function startProcessTool(
  sandbox: Sandbox,
  input: { command: string; cwd?: string | undefined; stdin?: boolean | undefined },
  opts: ProcessToolOptions = {},
  call: ShellToolCall = {},
): Promise<StartProcessOutput> {
  const sopts: { cwd?: string; stdin?: boolean; signal?: AbortSignal; approval?: string } = {};
  if (input.cwd) sopts.cwd = resolveCwd(input.cwd);
  if (input.stdin) sopts.stdin = true;
  if (call.signal) sopts.signal = call.signal;
  let p;
  try {
    p = await sandbox.processes.spawn(input.command, sopts);
  } catch (err) {
    if (!(err instanceof ApprovalRequiredError) || !err.approval) throw err;
    const wait: { timeoutMs?: number; signal?: AbortSignal } = {};
    if (opts.approvalTimeoutMs !== undefined) wait.timeoutMs = opts.approvalTimeoutMs;
    if (call.signal) wait.signal = call.signal;
    const final = await sandbox.waitForApproval(err.approval.id, wait);
    if (final.state !== 'approved') {
      const d = denied(final, input.command);
      return { pid: -1, output: d.output, denied: true };
    }
    p = await sandbox.processes.spawn(input.command, { ...sopts, approval: final.id });
  }
  return { pid: p.pid, output: `started background process ${p.pid}: ${input.command}` };
}

function resolveCwd(cwd: string): string {
  return cwd.startsWith('/') ? cwd : `/workspace/${cwd}`;
}

/** Reads a process's output from `offset` (the newest `maxOutputChars` of it) and its state. */
export async function processOutputTool(
  sandbox: Sandbox,
  input: { pid: number; offset?: number | undefined; wait?: boolean | undefined },
  opts: ProcessToolOptions = {},
  call: ShellToolCall = {},
): Promise<ProcessOutputResult> {
  const max = opts.maxOutputChars ?? DEFAULT_MAX_OUTPUT_CHARS;
  const o: { offset?: number; follow?: boolean; signal?: AbortSignal; requestTimeoutMs?: number } = {};
  if (input.offset !== undefined) o.offset = input.offset;
  if (input.wait) {
    o.follow = true;
    o.requestTimeoutMs = 0;
  }
  if (call.signal) o.signal = call.signal;
  const out = await sandbox.processes.output(input.pid, o);
  const so = tailText(out.stdout, max);
  const se = tailText(out.stderr, max);
  const r: ProcessOutputResult = { pid: input.pid, state: out.state, stdout: so.text, stderr: se.text, offset: out.offset };
  if (out.exitCode !== undefined) r.exitCode = out.exitCode;
  if (so.omitted + se.omitted > 0) r.omitted = so.omitted + se.omitted;
  return r;
}

/** Kills a process (its group), waits for its end and releases it; returns its exit and the end of its output. */
export async function killProcessTool(
  sandbox: Sandbox,
  input: { pid: number },
  opts: ProcessToolOptions = {},
  call: ShellToolCall = {},
): Promise<KillProcessOutput> {
  const max = opts.maxOutputChars ?? DEFAULT_MAX_OUTPUT_CHARS;
  const c = call.signal ? { signal: call.signal } : {};
  // read what it printed first: the kill releases the process and its output on the daemon
  await sandbox.processes.signal(input.pid, 'KILL', c).catch(() => undefined);
  const out = await sandbox.processes.output(input.pid, { ...c, follow: true, requestTimeoutMs: 10_000 }).catch(() => undefined);
  const end = await sandbox.processes.kill(input.pid, c);
  const text = [out?.stdout, out?.stderr].filter((x) => x).join('\n');
  return { pid: input.pid, exitCode: end.exitCode ?? -1, output: tailText(text, max).text };
}

/** Writes text to a process's stdin, and closes it with `close`. */
export async function sendStdinTool(
  sandbox: Sandbox,
  input: { pid: number; data: string; close?: boolean | undefined },
  call: ShellToolCall = {},
): Promise<{ pid: number; written: number; closed: boolean }> {
  const c = call.signal ? { signal: call.signal } : {};
  if (input.data) await sandbox.processes.sendStdin(input.pid, input.data, c);
  if (input.close) await sandbox.processes.closeStdin(input.pid, c);
  return { pid: input.pid, written: Buffer.byteLength(input.data), closed: input.close === true };
}

/** A URL for a port of the sandbox. */
export async function portUrlTool(
  sandbox: Sandbox,
  input: { port: number },
  opts: ProcessToolOptions = {},
  call: ShellToolCall = {},
): Promise<PortUrlOutput> {
  const o: { ttlMs?: number; signal?: AbortSignal } = {};
  if (opts.portUrlTtlMs !== undefined) o.ttlMs = opts.portUrlTtlMs;
  if (call.signal) o.signal = call.signal;
  const u = await sandbox.getPortUrl(input.port, o);
  return { port: u.port, url: u.url, expiresAt: u.expiresAt.toISOString() };
}
