/** Vercel AI SDK adapter: a shell tool for `generateText`/`streamText`/`ToolLoopAgent` (`tools: { sandbox_shell: sandboxTool(sbx) }`). */
import { tool } from 'ai';
import type { Tool } from 'ai';
import { z } from 'zod';
import type { Sandbox } from './sandbox.js';
import { SHELL_TOOL_DESCRIPTION, runShellTool } from './tool.js';
import type { ShellToolOptions, ShellToolOutput } from './tool.js';

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
