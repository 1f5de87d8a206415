export { Sandbox, Sandbox as IronClawSandbox } from './sandbox.js';
export { ExecResult } from './result.js';
export { Volumes } from './volumes.js';
export { Processes } from './processes.js';
export type { OutputOptions, ProcessHandle, ProcessInfo, ProcessOutput, ProcessSignal, SpawnOptions } from './processes.js';
export { REQUEST_TIMEOUT_MS, RETRIES, RETRY_MAX_MS } from './client.js';
export {
  AbortError,
  ApprovalDeniedError,
  ApprovalRequiredError,
  ApprovalTimeoutError,
  ConflictError,
  ForbiddenError,
  InsufficientStorageError,
  InternalError,
  InvalidArgumentError,
  LimitExceededError,
  NotFoundError,
  ProtocolError,
  RateLimitError,
  SandboxError,
  TimeoutError,
  TooLargeError,
  UnauthorizedError,
  UnavailableError,
} from './errors.js';
export type { SandboxErrorCode, SandboxErrorOptions } from './errors.js';
export type {
  Approval,
  ApprovalField,
  ApprovalKind,
  ApprovalRequest,
  ApprovalState,
  ByteSize,
  CallOptions,
  ConnectionOptions,
  Duration,
  FileEntry,
  FileType,
  ModelAccess,
  PortUrl,
  PortUrlOptions,
  RunOptions,
  SandboxConnectOptions,
  SandboxCreateOptions,
  SandboxInfo,
  SandboxLimits,
  SandboxOptions,
  SandboxState,
  VolumeInfo,
  VolumeMount,
  WaitForApprovalOptions,
  WriteFileOptions,
} from './types.js';
export type * as wire from './wire.js';
export { SHELL_TOOL_DESCRIPTION, runShellTool } from './tool.js';
export type { ShellToolOptions, ShellToolOutput } from './tool.js';
