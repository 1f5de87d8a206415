/**
 * Vercel AI SDK adapter: a shell tool for `generateText`/`streamText`/`ToolLoopAgent` (`tools: { sandbox_shell: sandboxTool(sbx) }`),
 * and tools for background processes and ports (`...processTools(sbx)`).
 */
import { tool } from 'ai';
import type { Tool } from 'ai';
import type { Sandbox } from './sandbox.js';
import {
  PROCESS_TOOL_DESCRIPTIONS,
  SHELL_TOOL_DESCRIPTION,
  killProcessTool,
  portUrlTool,
  processOutputTool,
  runShellTool,
  sendStdinTool,
  startProcessTool,
} from './tool.js';
import { PROCESS_TOOL_INPUTS, SHELL_TOOL_INPUT } from './tool-schemas.js';
import type {
  KillProcessOutput,
  PortUrlOutput,
  ProcessOutputResult,
  ProcessToolOptions,
  ShellToolOptions,
  ShellToolOutput,
  StartProcessOutput,
} from './tool.js';

export type { ShellToolOptions, ShellToolOutput } from './tool.js';

/**
 * An AI SDK tool that runs `{ command }` in the sandbox and returns `{ output, exitCode }` (`output` is
 * `ExecResult.toString()`; a command an operator did not approve gives `denied: ...` and exitCode -1).
 * `options.name` is only used to label `tool.call` approvals; the model sees the key you register the tool under.
 */
export function sandboxTool(
  sandbox: Sandbox,
  options: ShellToolOptions = {},
): Tool<{ command: string }, ShellToolOutput> {
  return tool({
    description: options.description ?? SHELL_TOOL_DESCRIPTION,
    inputSchema: SHELL_TOOL_INPUT,
    execute: async ({ command }, { abortSignal }) => runShellTool(sandbox, command, options, { signal: abortSignal }),
  });
}

export type {
  KillProcessOutput,
  PortUrlOutput,
  ProcessOutputResult,
  ProcessToolOptions,
  StartProcessOutput,
} from './tool.js';

/** The tools of {@link processTools}, by the names they are registered under. */
export interface ProcessTools {
  start_process: Tool<{ command: string; cwd?: string | undefined; stdin?: boolean | undefined }, StartProcessOutput>;
  process_output: Tool<{ pid: number; offset?: number | undefined; wait?: boolean | undefined }, ProcessOutputResult>;
  send_stdin: Tool<{ pid: number; data: string; close?: boolean | undefined }, { pid: number; written: number; closed: boolean }>;
  kill_process: Tool<{ pid: number }, KillProcessOutput>;
  port_url: Tool<{ port: number }, PortUrlOutput>;
}

/**
 * AI SDK tools for background processes and ports in the sandbox, next to {@link sandboxTool}:
 * `tools: { sandbox_shell: sandboxTool(sbx), ...processTools(sbx) }`. `start_process` returns a pid at once,
 * `process_output` reads from an offset (or waits for the exit), `send_stdin`, `kill_process`, and `port_url`
 * gives a URL for a port the sandbox was created with (`ports: [3000]`, on a policy with `ports.inbound`).
 */
export function processTools(sandbox: Sandbox, options: ProcessToolOptions = {}): ProcessTools {
  return {
    start_process: tool({
      description: PROCESS_TOOL_DESCRIPTIONS.start,
      inputSchema: PROCESS_TOOL_INPUTS.start,
      execute: async (input, { abortSignal }) => startProcessTool(sandbox, input, options, { signal: abortSignal }),
    }),
    process_output: tool({
      description: PROCESS_TOOL_DESCRIPTIONS.output,
      inputSchema: PROCESS_TOOL_INPUTS.output,
      execute: async (input, { abortSignal }) => processOutputTool(sandbox, input, options, { signal: abortSignal }),
    }),
    send_stdin: tool({
      description: PROCESS_TOOL_DESCRIPTIONS.stdin,
      inputSchema: PROCESS_TOOL_INPUTS.stdin,
      execute: async (input, { abortSignal }) => sendStdinTool(sandbox, input, { signal: abortSignal }),
    }),
    kill_process: tool({
      description: PROCESS_TOOL_DESCRIPTIONS.kill,
      inputSchema: PROCESS_TOOL_INPUTS.kill,
      execute: async (input, { abortSignal }) => killProcessTool(sandbox, input, options, { signal: abortSignal }),
    }),
    port_url: tool({
      description: PROCESS_TOOL_DESCRIPTIONS.portUrl,
      inputSchema: PROCESS_TOOL_INPUTS.portUrl,
      execute: async (input, { abortSignal }) => portUrlTool(sandbox, input, options, { signal: abortSignal }),
    }),
  };
}
