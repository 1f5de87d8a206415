/**
 * Vercel AI SDK adapter: a shell tool for `generateText`/`streamText`/`ToolLoopAgent` (`tools: { sandbox_shell: sandboxTool(sbx) }`),
 * and tools for background processes and ports (`...processTools(sbx)`).
 */
import { tool } from 'ai';
import type { Tool } from 'ai';
import { z } from 'zod';
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
    inputSchema: z.object({
      command: z.string().min(1).describe('The shell command line to run, e.g. "ls -la" or "python3 main.py"'),
    }),
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
      inputSchema: z.object({
        command: z.string().min(1).describe('The shell command line, e.g. "npm run dev" or "python3 -m http.server 3000"'),
        cwd: z.string().optional().describe('Working directory (relative to /workspace, or absolute)'),
        stdin: z.boolean().optional().describe('Keep its stdin open for send_stdin (default: it reads end of file)'),
      }),
      execute: async (input, { abortSignal }) => startProcessTool(sandbox, input, options, { signal: abortSignal }),
    }),
    process_output: tool({
      description: PROCESS_TOOL_DESCRIPTIONS.output,
      inputSchema: z.object({
        pid: z.number().int().positive().describe('The pid start_process returned'),
        offset: z.number().int().min(0).optional().describe('The offset a previous read returned (default 0: all it kept)'),
        wait: z.boolean().optional().describe('Wait until the process exits'),
      }),
      execute: async (input, { abortSignal }) => processOutputTool(sandbox, input, options, { signal: abortSignal }),
    }),
    send_stdin: tool({
      description: PROCESS_TOOL_DESCRIPTIONS.stdin,
      inputSchema: z.object({
        pid: z.number().int().positive(),
        data: z.string().describe('Text to write (include "\\n" to end a line)'),
        close: z.boolean().optional().describe('Close stdin after writing'),
      }),
      execute: async (input, { abortSignal }) => sendStdinTool(sandbox, input, { signal: abortSignal }),
    }),
    kill_process: tool({
      description: PROCESS_TOOL_DESCRIPTIONS.kill,
      inputSchema: z.object({ pid: z.number().int().positive() }),
      execute: async (input, { abortSignal }) => killProcessTool(sandbox, input, options, { signal: abortSignal }),
    }),
    port_url: tool({
      description: PROCESS_TOOL_DESCRIPTIONS.portUrl,
      inputSchema: z.object({ port: z.number().int().min(1).max(65535) }),
      execute: async (input, { abortSignal }) => portUrlTool(sandbox, input, options, { signal: abortSignal }),
    }),
  };
}
