/**
 * LangChain.js adapter: a shell tool for `@langchain/core` agents and chat models (`model.bindTools([sandboxTool(sbx)])`),
 * and tools for background processes and ports (`...processTools(sbx)`).
 */
import { tool } from '@langchain/core/tools';
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
import type { ProcessToolOptions, ShellToolOptions } from './tool.js';

export type { ShellToolOptions } from './tool.js';

/**
 * A LangChain tool (name `sandbox_shell` unless `options.name`) that runs `{ command }` in the sandbox and
 * returns the text the model should see: `ExecResult.toString()`, or `denied: ...` when an operator did not approve.
 */
export function sandboxTool(sandbox: Sandbox, options: ShellToolOptions = {}) {
  const name = options.name ?? 'sandbox_shell';
  return tool(
    async ({ command }: { command: string }, config) => {
      const r = await runShellTool(sandbox, command, { ...options, name }, { signal: config?.signal });
      return r.output;
    },
    {
      name,
      description: options.description ?? SHELL_TOOL_DESCRIPTION,
      schema: SHELL_TOOL_INPUT,
    },
  );
}

export type { ProcessToolOptions } from './tool.js';

const json = (v: unknown) => JSON.stringify(v);

/**
 * LangChain tools for background processes and ports in the sandbox, next to {@link sandboxTool}
 * (`model.bindTools([sandboxTool(sbx), ...processTools(sbx)])`): `start_process`, `process_output`,
 * `send_stdin`, `kill_process` and `port_url`, each answering the model with JSON text.
 */
export function processTools(sandbox: Sandbox, options: ProcessToolOptions = {}) {
  return [
    tool(async (input: { command: string; cwd?: string | undefined; stdin?: boolean | undefined }, config) =>
      json(await startProcessTool(sandbox, input, options, { signal: config?.signal })), {
      name: 'start_process',
      description: PROCESS_TOOL_DESCRIPTIONS.start,
      schema: PROCESS_TOOL_INPUTS.start,
    }),
    tool(async (input: { pid: number; offset?: number | undefined; wait?: boolean | undefined }, config) =>
      json(await processOutputTool(sandbox, input, options, { signal: config?.signal })), {
      name: 'process_output',
      description: PROCESS_TOOL_DESCRIPTIONS.output,
      schema: PROCESS_TOOL_INPUTS.output,
    }),
    tool(async (input: { pid: number; data: string; close?: boolean | undefined }, config) =>
      json(await sendStdinTool(sandbox, input, { signal: config?.signal })), {
      name: 'send_stdin',
      description: PROCESS_TOOL_DESCRIPTIONS.stdin,
      schema: PROCESS_TOOL_INPUTS.stdin,
    }),
    tool(async (input: { pid: number }, config) => json(await killProcessTool(sandbox, input, options, { signal: config?.signal })), {
      name: 'kill_process',
      description: PROCESS_TOOL_DESCRIPTIONS.kill,
      schema: PROCESS_TOOL_INPUTS.kill,
    }),
    tool(async (input: { port: number }, config) => json(await portUrlTool(sandbox, input, options, { signal: config?.signal })), {
      name: 'port_url',
      description: PROCESS_TOOL_DESCRIPTIONS.portUrl,
      schema: PROCESS_TOOL_INPUTS.portUrl,
    }),
  ] as const;
}
