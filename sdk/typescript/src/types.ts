import type * as wire from './wire.js';

/**
 * A duration in the deprecated options (`timeout`, `ttl`, `idle`): a number of milliseconds or a Go duration
 * string such as `"30s"`. The current options are `...Ms` numbers.
 */
export type Duration = string | number;

/** A byte size: a number of bytes or a string such as `"256M"`. */
export type ByteSize = wire.ByteSize;

/** How to reach the daemon. Every field defaults from the environment. */
export interface ConnectionOptions {
  /** Daemon address, `http://host:port` or `host:port`. @default `$IRONCLAW_ADDR`, else `http://127.0.0.1:8787` */
  addr?: string;
  /**
   * Agent token. @default `$IRONCLAW_API_TOKEN`, else the `agent.token` file of `$IRONCLAW_DATA_DIR`,
   * `$XDG_DATA_HOME/ironclaw` or `~/.local/share/ironclaw`
   */
  token?: string;
  /** A `fetch` implementation. @default the global one */
  fetch?: typeof globalThis.fetch;
  /**
   * How long each call waits for the daemon's answer, in milliseconds, unless the call says otherwise; `0`
   * waits as long as it takes. A stream (a command's output) is bounded only until it begins, and a long-poll
   * (waiting for an approval) gets its wait on top. Past it the call throws a `TimeoutError`.
   * @default 60_000
   */
  requestTimeoutMs?: number;
  /**
   * How many times an idempotent call (a GET, a file write, a DELETE) is retried on 429 (rate limit, quota),
   * 502, 503, 504 and network errors, with exponential backoff and jitter and at least the daemon's
   * `Retry-After`; `0`: never. Commands and creates (POSTs) are never retried.
   * @default 4 (5 attempts in all)
   */
  retries?: number;
  /**
   * The longest an idempotent call spends retrying, waits included, in milliseconds; a retry never runs past
   * the call's `requestTimeoutMs` or its signal either.
   * @default 30_000
   */
  retryMaxMs?: number;
}

/** What every call takes. */
export interface CallOptions {
  /** Aborting it cancels the call (an `AbortError`); for a command, the daemon then kills it. */
  signal?: AbortSignal;
  /** This call's request timeout, in milliseconds (`0`: none). @default the connection's `requestTimeoutMs` */
  requestTimeoutMs?: number;
}

/** Resource limits of a sandbox (all optional; the daemon's defaults apply). */
export interface SandboxLimits {
  memory?: ByteSize;
  pids?: number;
  cpus?: number;
  /** Wall time per command, in milliseconds. */
  timeoutMs?: number;
  /** @deprecated Use `timeoutMs`. Milliseconds or a Go duration string. */
  timeout?: Duration;
  /** Output bytes kept per command. */
  output?: ByteSize;
  /** Size of the `/workspace` tmpfs. */
  workspace?: ByteSize;
  /** Size of the `/tmp` tmpfs. */
  tmp?: ByteSize;
  openFiles?: number;
}

/** What a sandbox is to be, and how to reach the daemon. */
export interface SandboxOptions extends ConnectionOptions {
  /** Reconnect to this existing sandbox instead of creating one. */
  id?: string;
  /**
   * The root filesystem: a local image or directory beneath the daemon's `--image-dir`, or a registry reference
   * from an `--image-registry` host. @default the host-toolchain view
   */
  image?: string;
  env?: Record<string, string>;
  limits?: SandboxLimits;
  /** Hosts to reach through the egress broker; those the policy does not already allow are filed as a `sandbox.widen` approval. */
  egress?: { allow: string[] };
  /**
   * Named volumes of yours to mount (`Volumes.create`), each at a path under `/workspace` or a new top-level
   * directory; a volume is in one running sandbox at a time (`ConflictError` otherwise).
   */
  volumes?: VolumeMount[];
  /**
   * Loopback TCP ports (at most 16, 1024-65535, not 4000 or 4001) the sandbox's servers may listen on, to be
   * reached from the host with `getPortUrl(port)`. Needs a policy with `ports.inbound: true` (`ForbiddenError`
   * otherwise).
   */
  ports?: number[];
  labels?: Record<string, string>;
  /** A snapshot id (`snap-…`, from `sandbox.snapshot()`): `/workspace` starts as that snapshot (a fork). */
  snapshot?: string;
  /**
   * Brokered secrets (by name, at most 16; the operator sets them with `ironclaw secret set`) the sandbox may use:
   * each one's variable holds a placeholder, and the egress broker puts the real value into requests to the
   * secret's hosts only. A secret whose grant is `ask` files a `secret.use` approval first.
   */
  secrets?: string[];
  /** Lifetime of the sandbox, in milliseconds (E2B's `timeoutMs`). @default the daemon's */
  ttlMs?: number;
  /** Idle timeout of the sandbox, in milliseconds. @default the daemon's */
  idleMs?: number;
  /** What the idle timeout does: `destroy` it, or `pause` it until its next request (its TTL still ends it). @default the policy's `limits.idle_action` */
  idleAction?: 'destroy' | 'pause';
  /** @deprecated Use `ttlMs`. Milliseconds or a Go duration string. */
  ttl?: Duration;
  /** @deprecated Use `idleMs`. Milliseconds or a Go duration string. */
  idle?: Duration;
}

/** `Sandbox.create`'s options: the sandbox, and the create call's own `signal`. */
export interface SandboxCreateOptions extends SandboxOptions {
  /** Aborts the create call (not the sandbox's later calls). */
  signal?: AbortSignal;
}

/** `Sandbox.connect`'s and `Sandbox.list`'s options. */
export interface SandboxConnectOptions extends ConnectionOptions {
  /** Aborts this call. */
  signal?: AbortSignal;
}

export type SandboxState = wire.SandboxState;

/** A sandbox as the daemon describes it. */
export interface SandboxInfo {
  /** `sbx-...` */
  id: string;
  /** `running`, `destroyed`, `reaped` (TTL or idle timeout), `lost` (its daemon run died) or `crashed` (its pid 1 died). */
  state: SandboxState | (string & {});
  labels: Record<string, string>;
  createdAt: Date;
  /** When its TTL ends, if it has one. */
  expiresAt?: Date;
  /** Its idle timeout in milliseconds; `0` is none. */
  idleTimeoutMs: number;
  lastUsedAt: Date;
  /** When it ended, once it did. */
  endedAt?: Date;
  endReason?: string;
}

export type ApprovalState = wire.ApprovalState;
export type ApprovalKind = wire.ApprovalKind | (string & {});

/** One decisive field of an approval: what an operator must read to decide, in full. */
export interface ApprovalField {
  name: string;
  /** Exact; escape it before printing it. With `format: 'json'` it is JSON text (an argv, a tool's arguments). */
  value: string;
  format?: 'json' | (string & {});
}

/** A request for an operator's decision, held by the daemon's approval gateway. */
export interface Approval {
  /** `apr-...` */
  id: string;
  kind: ApprovalKind;
  state: ApprovalState | (string & {});
  /** The sandbox it concerns, if any. */
  session?: string;
  /** The principal that asked ("agent", "agent:NAME", an operator). */
  requestedBy: string;
  /** The part of the daemon that filed it for `requestedBy` (`egress`: a held connection). */
  via?: string;
  /** One line derived by the daemon from `data`, what an approval applies; never the requester's text. */
  summary: string;
  /** The decisive fields of `data`, derived by the daemon. */
  fields: ApprovalField[];
  /** The requester's own text about the request (`note` when filed), shown to operators labelled as such. */
  agentNote?: string;
  /** The kind's payload, as filed (its members are the API's, snake_case). */
  data: unknown;
  createdAt: Date;
  expiresAt: Date;
  decidedAt?: Date;
  /** The operator token's name, or `gateway` for an expiry or withdrawal. */
  decidedBy?: string;
  /** `sandbox` or `global`, for an approved `egress.host`. */
  scope?: string;
  reason?: string;
  /** What the approved action did, e.g. `{ sandbox: 'sbx-...' }`. */
  result?: unknown;
}

export interface ApprovalRequest {
  kind: ApprovalKind;
  /** The kind's payload, in the API's members (e.g. `{ tool, input }` for `tool.call`). */
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

export interface WaitForApprovalOptions extends CallOptions {
  /** Give up after this many milliseconds and return the approval as it is (still `pending`). Default: wait until decided or expired. */
  timeoutMs?: number;
}

export interface RunOptions extends CallOptions {
  /** Wall-time limit of this command, in milliseconds. @default the sandbox's `limits.timeoutMs` */
  timeoutMs?: number;
  /** @deprecated Use `timeoutMs`. Milliseconds or a Go duration string. */
  timeout?: Duration;
  cwd?: string;
  env?: Record<string, string>;
  stdin?: string;
  /** Called with each chunk of standard output as it arrives. */
  onStdout?: (data: string) => void;
  /** Called with each chunk of standard error as it arrives. */
  onStderr?: (data: string) => void;
  /**
   * What to do when the daemon's policy requires an operator's approval for this command: `'wait'` (default)
   * waits for the decision and runs it once approved; `'fail'` throws an `ApprovalRequiredError`.
   */
  approval?: 'wait' | 'fail';
  /** With `approval: 'wait'`, stop waiting after this long and throw an `ApprovalTimeoutError`. Default: until decided or expired. */
  approvalTimeoutMs?: number;
  /** Called once when the command is held for approval (e.g. to tell a user who to ask). */
  onApproval?: (approval: Approval) => void;
}

export type FileType = wire.FileType;

export interface FileEntry {
  name: string;
  type: FileType | (string & {});
  size: number;
  /** Permission bits, octal, e.g. `"0644"`. */
  mode: string;
  /** Modification time. */
  mtime: Date;
}

export interface WriteFileOptions extends CallOptions {
  /** Permission bits: a number (`0o600`) or an octal string (`"0600"`). */
  mode?: number | string;
}

/** Credentials for the daemon's model proxy (`POST /v1/model/tokens`). */
export interface ModelAccess {
  /** Proxy token (`icp_...`): use it as the provider API key. */
  token: string;
  /** Base URL for OpenAI-compatible clients (includes `/v1`). */
  openaiBaseUrl: string;
  /** Base URL for Anthropic clients. */
  anthropicBaseUrl: string;
  /** Names the token. */
  session: string;
  expiresAt: Date;
}

/** A named volume at a path inside a sandbox. */
export interface VolumeMount {
  name: string;
  path: string;
}

/** A named persistent volume. */
export interface VolumeInfo {
  name: string;
  /** Who owns it. */
  principal: string;
  sizeBytes: number;
  createdAt: Date;
  /** The running sandbox it is mounted in, when it is. */
  sandbox?: string;
}

/** A URL that reaches a port of the sandbox from the host (`sandbox.getPortUrl`). */
export interface PortUrl {
  port: number;
  /** `http://<the daemon's ports listener>/p/<ticket>/`: the URL is the credential; the path after it is the path inside. */
  url: string;
  /** When the URL stops working (it also stops when the sandbox ends). */
  expiresAt: Date;
}

export interface PortUrlOptions extends CallOptions {
  /** How long the URL works, in milliseconds. @default and at most the policy's `ports.url_ttl` (1h) */
  ttlMs?: number;
}
