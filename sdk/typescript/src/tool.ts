import { ApprovalDeniedError, ApprovalTimeoutError } from './errors.js';
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
