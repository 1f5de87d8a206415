/** A duration: a Go duration string such as `"30s"` or `"1m30s"`, or a number of milliseconds. */
export type Duration = string | number;

/** A byte size: a number of bytes or a string such as `"256M"`. */
export type ByteSize = string | number;

/** How to reach the daemon. Every field defaults from the environment. */
export interface ConnectionOptions {
  /** Daemon address, `http://host:port` or `host:port`. Default: `$IRONCLAW_ADDR`, else `http://127.0.0.1:8787`. */
  addr?: string;
  /**
   * Agent token. Default: `$IRONCLAW_API_TOKEN`, else the `agent.token` file of
   * `$IRONCLAW_DATA_DIR`, `$XDG_DATA_HOME/ironclaw` or `~/.local/share/ironclaw`.
   */
  token?: string;
  /** A `fetch` implementation (default: the global one). */
  fetch?: typeof globalThis.fetch;
}

/** Resource limits of a sandbox (all optional; the daemon's defaults apply). */
export interface SandboxLimits {
  memory?: ByteSize;
  pids?: number;
  cpus?: number;
  /** Wall time per command. */
  timeout?: Duration;
  /** Output bytes kept per command. */
  output?: ByteSize;
  /** Size of the `/workspace` tmpfs. */
  workspace?: ByteSize;
  /** Size of the `/tmp` tmpfs. */
  tmp?: ByteSize;
  openFiles?: number;
}

export interface SandboxOptions extends ConnectionOptions {
  /** Reconnect to this existing sandbox instead of creating one. */
  id?: string;
  /** Absolute path of a directory on the daemon's host to use as the root (default: the host-toolchain view). */
  image?: string;
  env?: Record<string, string>;
  limits?: SandboxLimits;
  /** Hosts to reach through the egress broker; those the policy does not already allow are filed as a `sandbox.widen` approval. */
  egress?: { allow: string[] };
  labels?: Record<string, string>;
  /** Lifetime of the sandbox (0 or absent: the daemon's default). */
  ttl?: Duration;
  /** Idle timeout of the sandbox (0 or absent: the daemon's default). */
  idle?: Duration;
}

export type SandboxState = 'running' | 'destroyed' | 'reaped' | 'lost';

/** A sandbox as the daemon describes it (`GET /v1/sandboxes/{id}`). */
export interface SandboxInfo {
  id: string;
  state: SandboxState | (string & {});
  labels: Record<string, string>;
  created_at: string;
  expires_at?: string;
  idle_timeout?: string;
  last_used_at?: string;
  ended_at?: string;
  end_reason?: string;
  /** Pending approvals filed by the create request (e.g. `sandbox.widen` for extra egress hosts). */
  approvals?: Approval[];
}

export type ApprovalState = 'pending' | 'approved' | 'denied' | 'expired';

export type ApprovalKind =
  | 'egress.host'
  | 'sandbox.widen'
  | 'tool.register'
  | 'agent.spawn'
  | 'exec.command'
  | 'tool.call'
  | (string & {});

/** One decisive field of an approval: what an operator must read to decide, in full. */
export interface ApprovalField {
  name: string;
  /** Exact; escape it before printing it. With `format: 'json'` it is JSON text (an argv, a tool's arguments). */
  value: string;
  format?: 'json' | (string & {});
}

/** A request for an operator's decision, held by the daemon's approval gateway. */
export interface Approval {
  id: string;
  kind: ApprovalKind;
  state: ApprovalState | (string & {});
  session?: string;
  /** The principal that asked ("agent", "agent:NAME", an operator). */
  requested_by?: string;
  /** The part of the daemon that filed it for `requested_by` (`egress`: a held connection). */
  via?: string;
  /** One line derived by the daemon from `data`, what an approval applies; never the requester's text. */
  summary?: string;
  /** The decisive fields of `data`, derived by the daemon. */
  fields?: ApprovalField[];
  /** The requester's own text about the request (`note` when filed), shown to operators labelled as such. */
  agent_note?: string;
  data?: unknown;
  created_at?: string;
  expires_at?: string;
  decided_at?: string;
  decided_by?: string;
  scope?: string;
  reason?: string;
  result?: unknown;
}

export interface ApprovalRequest {
  kind: ApprovalKind;
  data: unknown;
  /**
   * Your own words about the request, shown to the operator as the agent's note (never as what will be
   * applied, which the daemon derives from `data`). Printable text, at most 500 bytes.
   */
  note?: string;
  /** @deprecated The older name of `note`. */
  summary?: string;
  /** The sandbox the request belongs to. Default: this sandbox (engaged first); `null` files it without one. */
  session?: string | null;
}

export interface WaitForApprovalOptions {
  /** Give up after this many milliseconds and return the approval as it is (still `pending`). Default: wait until decided or expired. */
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface RunOptions {
  /** Wall-time limit of this command (number: milliseconds). */
  timeout?: Duration;
  cwd?: string;
  env?: Record<string, string>;
  stdin?: string;
  /** Called with each chunk of standard output as it arrives. */
  onStdout?: (data: string) => void;
  /** Called with each chunk of standard error as it arrives. */
  onStderr?: (data: string) => void;
  /** Aborting cancels the request; the daemon kills the command when the client goes away. */
  signal?: AbortSignal;
  /**
   * What to do when the daemon's policy requires an operator's approval for this command:
   * `'wait'` (default) waits for the decision and runs it once approved; `'fail'` throws `approval_required`.
   */
  approval?: 'wait' | 'fail';
  /** With `approval: 'wait'`, stop waiting after this long and throw `approval_timeout`. Default: until decided or expired. */
  approvalTimeoutMs?: number;
  /** Called once when the command is held for approval (e.g. to tell a user who to ask). */
  onApproval?: (approval: Approval) => void;
}

export type FileType = 'file' | 'dir' | 'symlink' | 'other';

export interface FileEntry {
  name: string;
  type: FileType | (string & {});
  size: number;
  /** Permission bits, octal, e.g. `"0644"`. */
  mode: string;
  /** Modification time, RFC 3339. */
  mtime: string;
}

export interface WriteFileOptions {
  /** Permission bits: a number (`0o600`) or an octal string (`"0600"`). */
  mode?: number | string;
}

/** Credentials for the daemon's model proxy (`POST /v1/model/tokens`). */
export interface ModelAccess {
  /** Proxy token (`icp_...`): use it as the provider API key. */
  token: string;
  /** Base URL for OpenAI-compatible clients (includes `/v1`). */
  openai_base_url: string;
  /** Base URL for Anthropic clients. */
  anthropic_base_url: string;
  session?: string;
}
