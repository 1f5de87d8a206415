import type { Approval } from './types.js';
import type { ErrorCode } from './wire.js';

/**
 * Error codes: those of the HTTP API ({@link ErrorCode}: `invalid_argument`, `unauthorized`, `forbidden`,
 * `not_found`, `method_not_allowed`, `request_timeout`, `conflict`, `too_large`, `rate_limited`,
 * `limit_exceeded`, `internal`, `unavailable`, `insufficient_storage`) plus the SDK's own: `approval_required`,
 * `approval_denied`, `approval_timeout`, `aborted`, `protocol`. `request_timeout` is also the SDK's own when
 * `requestTimeoutMs` passes (then without a `status`).
 */
export type SandboxErrorCode =
  | ErrorCode
  | 'approval_required'
  | 'approval_denied'
  | 'approval_timeout'
  | 'aborted'
  | 'protocol'
  | (string & {});

export interface SandboxErrorOptions {
  /** HTTP status of the daemon's answer, when there was one. */
  status?: number;
  /** The approval involved (approval errors). */
  approval?: Approval;
  cause?: unknown;
}

/**
 * The base of every error the SDK throws. `code` is stable (the API's error code, or one of the SDK's own);
 * `message` is for people. Catch a subclass to handle one kind: `NotFoundError`, `RateLimitError`, ...
 */
export class SandboxError extends Error {
  readonly code: SandboxErrorCode;
  /** HTTP status of the answer, when there was one. */
  readonly status?: number;
  /** The approval involved, for `approval_required`, `approval_denied` and `approval_timeout`. */
  readonly approval?: Approval;

  constructor(code: SandboxErrorCode, message: string, opts: SandboxErrorOptions = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'SandboxError';
    this.code = code;
    if (opts.status !== undefined) this.status = opts.status;
    if (opts.approval !== undefined) this.approval = opts.approval;
  }
}

/** 400 `invalid_argument`: the request is malformed or asks for something impossible; retrying it unchanged fails again. Also thrown before any request for an option the SDK can tell is wrong. */
export class InvalidArgumentError extends SandboxError {
  constructor(message: string, opts: SandboxErrorOptions = {}) {
    super('invalid_argument', message, opts);
    this.name = 'InvalidArgumentError';
  }
}

/** 401 `unauthorized`: no token, or one the daemon does not know. Pass `token`, set `IRONCLAW_API_TOKEN`, or run on the daemon's machine. */
export class UnauthorizedError extends SandboxError {
  constructor(message: string, opts: SandboxErrorOptions = {}) {
    super('unauthorized', message, opts);
    this.name = 'UnauthorizedError';
  }
}

/** 403 `forbidden`: a token of the wrong role (the agent token on an operator route). */
export class ForbiddenError extends SandboxError {
  constructor(message: string, opts: SandboxErrorOptions = {}) {
    super('forbidden', message, opts);
    this.name = 'ForbiddenError';
  }
}

/** 404 `not_found`: an unknown sandbox (or another principal's), file, approval or route. */
export class NotFoundError extends SandboxError {
  constructor(message: string, opts: SandboxErrorOptions = {}) {
    super('not_found', message, opts);
    this.name = 'NotFoundError';
  }
}

/** 409 `conflict`: the sandbox is not running, or an approval was decided otherwise, expired or is for another command. */
export class ConflictError extends SandboxError {
  constructor(message: string, opts: SandboxErrorOptions = {}) {
    super('conflict', message, opts);
    this.name = 'ConflictError';
  }
}

/** 413 `too_large`: a body, upload or download is over its limit. */
export class TooLargeError extends SandboxError {
  constructor(message: string, opts: SandboxErrorOptions = {}) {
    super('too_large', message, opts);
    this.name = 'TooLargeError';
  }
}

/** 429 `rate_limited`: too many requests for this token. Wait `retryAfterMs` (from `Retry-After`), then retry. */
export class RateLimitError extends SandboxError {
  /** How long the daemon asks to wait, in milliseconds, when it said. */
  readonly retryAfterMs?: number;

  constructor(message: string, opts: SandboxErrorOptions & { retryAfterMs?: number } = {}) {
    super('rate_limited', message, opts);
    this.name = 'RateLimitError';
    if (opts.retryAfterMs !== undefined) this.retryAfterMs = opts.retryAfterMs;
  }
}

/**
 * 429 `limit_exceeded`: a quota or capacity is used up (the daemon's or a principal's sandboxes, commands in
 * flight, the host's memory, CPUs or processes, pending approvals, a model budget). Retry after something ends.
 */
export class LimitExceededError extends SandboxError {
  constructor(message: string, opts: SandboxErrorOptions = {}) {
    super('limit_exceeded', message, opts);
    this.name = 'LimitExceededError';
  }
}

/**
 * `request_timeout`: no answer within `requestTimeoutMs` (no `status`), or the daemon's 408 for a request body
 * that arrived too slowly.
 */
export class TimeoutError extends SandboxError {
  constructor(message: string, opts: SandboxErrorOptions & { code?: 'request_timeout' | 'approval_timeout' } = {}) {
    super(opts.code ?? 'request_timeout', message, opts);
    this.name = 'TimeoutError';
  }
}

/** 500 `internal`: a bug in the daemon; its log says more. */
export class InternalError extends SandboxError {
  constructor(message: string, opts: SandboxErrorOptions = {}) {
    super('internal', message, opts);
    this.name = 'InternalError';
  }
}

/** 503 `unavailable`: the daemon cannot now (shutting down, out of processes or memory), or cannot be reached at all. A retry may work. */
export class UnavailableError extends SandboxError {
  constructor(message: string, opts: SandboxErrorOptions = {}) {
    super('unavailable', message, opts);
    this.name = 'UnavailableError';
  }
}

/** 507 `insufficient_storage`: the daemon's disk is full; nothing was changed, reads still work. */
export class InsufficientStorageError extends SandboxError {
  constructor(message: string, opts: SandboxErrorOptions = {}) {
    super('insufficient_storage', message, opts);
    this.name = 'InsufficientStorageError';
  }
}

/** `aborted`: the caller's `signal` aborted the call (its reason is the `cause`). Its `name` is `AbortError`, as DOM aborts are. */
export class AbortError extends SandboxError {
  constructor(message: string, opts: SandboxErrorOptions = {}) {
    super('aborted', message, opts);
    this.name = 'AbortError';
  }
}

/**
 * `protocol`: the daemon's answer is not what this SDK speaks (a bad frame, a missing body), or
 * `method_not_allowed` (405): the daemon serves that route with other methods. Either means an SDK and a daemon
 * of different versions.
 */
export class ProtocolError extends SandboxError {
  constructor(message: string, opts: SandboxErrorOptions & { code?: 'protocol' | 'method_not_allowed' } = {}) {
    super(opts.code ?? 'protocol', message, opts);
    this.name = 'ProtocolError';
  }
}

/** `approval_required`: the command needs an operator's approval and the call asked not to wait (`approval: 'fail'`). `approval` is the request filed. */
export class ApprovalRequiredError extends SandboxError {
  declare readonly approval: Approval;
  constructor(message: string, opts: SandboxErrorOptions & { approval: Approval }) {
    super('approval_required', message, opts);
    this.name = 'ApprovalRequiredError';
  }
}

/** `approval_denied`: an operator denied the request, or it expired undecided. `approval` says which and why. */
export class ApprovalDeniedError extends SandboxError {
  declare readonly approval: Approval;
  constructor(message: string, opts: SandboxErrorOptions & { approval: Approval }) {
    super('approval_denied', message, opts);
    this.name = 'ApprovalDeniedError';
  }
}

/** `approval_timeout`: the call stopped waiting (`approvalTimeoutMs`) while the request is still pending. */
export class ApprovalTimeoutError extends TimeoutError {
  declare readonly approval: Approval;
  constructor(message: string, opts: SandboxErrorOptions & { approval: Approval }) {
    super(message, { ...opts, code: 'approval_timeout' });
    this.name = 'ApprovalTimeoutError';
  }
}

type Make = (message: string, opts: SandboxErrorOptions & { retryAfterMs?: number }) => SandboxError;

/** The class of each of the API's error codes; the compiler holds it to the document's ErrorCode. */
const byCode: Record<ErrorCode, Make> = {
  invalid_argument: (m, o) => new InvalidArgumentError(m, o),
  unauthorized: (m, o) => new UnauthorizedError(m, o),
  forbidden: (m, o) => new ForbiddenError(m, o),
  not_found: (m, o) => new NotFoundError(m, o),
  method_not_allowed: (m, o) => new ProtocolError(m, { ...o, code: 'method_not_allowed' }),
  request_timeout: (m, o) => new TimeoutError(m, o),
  conflict: (m, o) => new ConflictError(m, o),
  too_large: (m, o) => new TooLargeError(m, o),
  rate_limited: (m, o) => new RateLimitError(m, o),
  limit_exceeded: (m, o) => new LimitExceededError(m, o),
  internal: (m, o) => new InternalError(m, o),
  unavailable: (m, o) => new UnavailableError(m, o),
  insufficient_storage: (m, o) => new InsufficientStorageError(m, o),
};

/** The code an answer without the API's error body gets, by its status. */
const byStatus: Record<number, ErrorCode> = {
  400: 'invalid_argument',
  401: 'unauthorized',
  403: 'forbidden',
  404: 'not_found',
  405: 'method_not_allowed',
  408: 'request_timeout',
  409: 'conflict',
  413: 'too_large',
  429: 'rate_limited',
  500: 'internal',
  503: 'unavailable',
  507: 'insufficient_storage',
};

/** The error of one of the API's codes (an unknown code: a plain SandboxError). */
export function errorFor(code: string, message: string, opts: SandboxErrorOptions & { retryAfterMs?: number } = {}): SandboxError {
  const make = Object.hasOwn(byCode, code) ? byCode[code as ErrorCode] : undefined;
  return make ? make(message, opts) : new SandboxError(code, message, opts);
}

/** `Retry-After` in milliseconds: seconds, or an HTTP date. */
export function retryAfterMs(header: string | null): number | undefined {
  if (!header) return undefined;
  const h = header.trim();
  if (/^\d+$/.test(h)) return Number(h) * 1000;
  const at = Date.parse(h);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}

/** Turns a non-2xx answer into its error, reading the API's `{"error": {"code", "message"}}` body. */
export async function errorFromResponse(res: Response): Promise<SandboxError> {
  let text = '';
  try {
    text = await res.text();
  } catch {
    // the body is gone; the status still says something
  }
  let code: string | undefined;
  let message: string | undefined;
  try {
    const body = JSON.parse(text) as { error?: { code?: unknown; message?: unknown } };
    if (body && typeof body.error === 'object' && body.error) {
      if (typeof body.error.code === 'string') code = body.error.code;
      if (typeof body.error.message === 'string') message = body.error.message;
    }
  } catch {
    // not JSON
  }
  code ??= byStatus[res.status] ?? (res.status >= 500 ? 'internal' : 'invalid_argument');
  message ??= `HTTP ${res.status}${text ? `: ${text.slice(0, 200)}` : ''}`;
  const opts: SandboxErrorOptions & { retryAfterMs?: number } = { status: res.status };
  const wait = retryAfterMs(res.headers.get('retry-after'));
  if (wait !== undefined) opts.retryAfterMs = wait;
  return errorFor(code, message, opts);
}
