export { IronClawSandbox } from './sandbox.js';
export { ExecResult } from './result.js';
export { SandboxError } from './errors.js';
export type { SandboxErrorCode } from './errors.js';
export type {
  Approval,
  ApprovalField,
  ApprovalKind,
  ApprovalRequest,
  ApprovalState,
  ByteSize,
  ConnectionOptions,
  Duration,
  FileEntry,
  FileType,
  ModelAccess,
  RunOptions,
  SandboxInfo,
  SandboxLimits,
  SandboxOptions,
  SandboxState,
  WaitForApprovalOptions,
  WriteFileOptions,
} from './types.js';
export { SHELL_TOOL_DESCRIPTION, runShellTool } from './tool.js';
export type { ShellToolOptions, ShellToolOutput } from './tool.js';
