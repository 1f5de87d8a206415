/** LangChain.js adapter: a shell tool for `@langchain/core` agents and chat models (`model.bindTools([sandboxTool(sbx)])`). */
import { tool } from '@langchain/core/tools';
import { z } from 'zod';
import type { Sandbox } from './sandbox.js';
import { SHELL_TOOL_DESCRIPTION, runShellTool } from './tool.js';
import type { ShellToolOptions } from './tool.js';

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
      schema: z.object({
        command: z.string().min(1).describe('The shell command line to run, e.g. "ls -la" or "python3 main.py"'),
      }),
    },
  );
}
