/**
 * The input schemas of the shell and process tools, the same for every adapter that takes zod schemas
 * (AI SDK, LangChain). Only the adapters import this: zod is an optional peer.
 */
import { z } from 'zod';

/** `{ command }` of the shell tool. */
export const SHELL_TOOL_INPUT = z.object({
  command: z.string().min(1).describe('The shell command line to run, e.g. "ls -la" or "python3 main.py"'),
});

/** The inputs of the process tools, by the keys of `PROCESS_TOOL_DESCRIPTIONS`. */
export const PROCESS_TOOL_INPUTS = {
  start: z.object({
    command: z.string().min(1).describe('The shell command line, e.g. "npm run dev" or "python3 -m http.server 3000"'),
    cwd: z.string().optional().describe('Working directory (relative to /workspace, or absolute)'),
    stdin: z.boolean().optional().describe('Keep its stdin open for send_stdin (default: it reads end of file)'),
  }),
  output: z.object({
    pid: z.number().int().positive().describe('The pid start_process returned'),
    offset: z.number().int().min(0).optional().describe('The offset a previous read returned (default 0: all it kept)'),
    wait: z.boolean().optional().describe('Wait until the process exits'),
  }),
  stdin: z.object({
    pid: z.number().int().positive(),
    data: z.string().describe('Text to write (include "\\n" to end a line)'),
    close: z.boolean().optional().describe('Close stdin after writing'),
  }),
  kill: z.object({ pid: z.number().int().positive() }),
  portUrl: z.object({ port: z.number().int().min(1).max(65535) }),
};
