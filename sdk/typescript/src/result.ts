/** The outcome of one command. `toString()` is the compact text a tool hands the model. */
export class ExecResult {
  readonly stdout: string;
  readonly stderr: string;
  /** The command's exit code: 128+N when killed by signal N (137 for wall time or memory), 126/127 when it could not start. */
  readonly exitCode: number;
  readonly durationMs: number;
  /** Output went over the sandbox's output limit; the rest was dropped. */
  readonly truncated: boolean;
  readonly timedOut: boolean;
  readonly oomKilled: boolean;
  /** Why the command could not start (e.g. `command not found: ...`), when it could not. */
  readonly error?: string;

  constructor(fields: {
    stdout: string;
    stderr: string;
    exitCode: number;
    durationMs: number;
    truncated?: boolean;
    timedOut?: boolean;
    oomKilled?: boolean;
    error?: string;
  }) {
    this.stdout = fields.stdout;
    this.stderr = fields.stderr;
    this.exitCode = fields.exitCode;
    this.durationMs = fields.durationMs;
    this.truncated = fields.truncated ?? false;
    this.timedOut = fields.timedOut ?? false;
    this.oomKilled = fields.oomKilled ?? false;
    if (fields.error) this.error = fields.error;
  }

  /** `exitCode === 0`. */
  get ok(): boolean {
    return this.exitCode === 0;
  }

  /**
   * stdout, then stderr under a `[stderr]` line, then one `[exit N]` line carrying the notes
   * (`timed out`, `out of memory`, `output truncated`) and why the command could not start.
   */
  toString(): string {
    const parts: string[] = [];
    const out = trimEnd(this.stdout);
    const err = trimEnd(this.stderr);
    if (out) parts.push(out);
    if (err) parts.push(`[stderr]\n${err}`);
    const notes: string[] = [];
    if (this.timedOut) notes.push('timed out');
    if (this.oomKilled) notes.push('out of memory');
    if (this.truncated) notes.push('output truncated');
    if (this.error) notes.push(this.error);
    parts.push(`[exit ${this.exitCode}${notes.length ? `: ${notes.join('; ')}` : ''}]`);
    return parts.join('\n');
  }

  toJSON(): Record<string, unknown> {
    return {
      stdout: this.stdout,
      stderr: this.stderr,
      exitCode: this.exitCode,
      durationMs: this.durationMs,
      truncated: this.truncated,
      timedOut: this.timedOut,
      oomKilled: this.oomKilled,
      ...(this.error ? { error: this.error } : {}),
    };
  }
}

function trimEnd(s: string): string {
  return s.replace(/\n+$/, '');
}
