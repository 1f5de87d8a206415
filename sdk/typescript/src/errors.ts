import type { Approval } from './types.js';

/**
 * Error codes: those of the HTTP API (`invalid_argument`, `unauthorized`, `forbidden`, `not_found`,
 * `method_not_allowed`, `conflict`, `too_large`, `rate_limited`, `limit_exceeded`, `internal`, `unavailable`)
 * plus the SDK's own: `approval_required`, `approval_denied`, `approval_timeout`, `aborted`, `protocol`.
 */
export type SandboxErrorCode =
  | 'invalid_argument'
  | 'unauthorized'
  | 'forbidden'
  | 'not_found'
  | 'method_not_allowed'
  | 'conflict'
  | 'too_large'
  | 'rate_limited'
  | 'limit_exceeded'
  | 'internal'
  | 'unavailable'
  | 'approval_required'
  | 'approval_denied'
  | 'approval_timeout'
  | 'aborted'
  | 'protocol'
  | (string & {});

export interface SandboxErrorOptions {
  status?: number;
  approval?: Approval;
  cause?: unknown;
}

/** Every failure the SDK reports. `code` is stable; `message` is for people. */
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

const statusCodes: Record<number, string> = {
  400: 'invalid_argument',
  401: 'unauthorized',
  403: 'forbidden',
  404: 'not_found',
  405: 'method_not_allowed',
  409: 'conflict',
  413: 'too_large',
  429: 'rate_limited',
  500: 'internal',
  503: 'unavailable',
};

/** Turns a non-2xx answer into a SandboxError, reading the API's `{"error": {"code", "message"}}` body. */
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
  code ??= statusCodes[res.status] ?? (res.status >= 500 ? 'internal' : 'invalid_argument');
  message ??= `HTTP ${res.status}${text ? `: ${text.slice(0, 200)}` : ''}`;
  return new SandboxError(code, message, { status: res.status });
}
