// @lizard-build/sdk: run LLM-written code in Lizard sandboxes.
//
//   import { CodeSandbox } from '@lizard-build/sdk';
//   const sandbox = await CodeSandbox.create();
//   const run = await sandbox.runCode('1 + 1');
//   console.log(run.results[0]?.data); // "2"
//   await sandbox.kill();
//
// The API key and URL come from the options or from LIZARD_API_KEY and
// LIZARD_API_URL (default http://127.0.0.1:8080).

export {
  CodeSandbox,
  DEFAULT_CODE_TIMEOUT_MS,
  DEFAULT_CREATE_REQUEST_TIMEOUT_MS,
  DEFAULT_SANDBOX_TIMEOUT_MS,
  portUrl,
  type CreateContextOptions,
  type CreateOptions,
  type ListOptions,
  type RunCodeOptions,
  type ListSnapshotsOptions,
  type SnapshotInfo,
  type SnapshotOptions,
} from './sandbox.js';
export {
  Execution,
  type Context,
  type EntryInfo,
  type ExecutionError,
  type FilesystemEvent,
  type ProcessInfo,
  type ProcessResult,
  type PtySize,
  type Result,
  type SandboxInfo,
  type SandboxMetric,
  type SecretInfo,
  type VolumeInfo,
  type VolumeMount,
} from './types.js';
export { Volume, type CreateVolumeOptions } from './volume.js';
export { Network, type NetworkLogEntry, type NetworkPolicy, type NetworkUpdate } from './network.js';
export {
  Desktop,
  DesktopStream,
  type DesktopCursor,
  type DesktopScreen,
  type DesktopViewer,
  type DesktopWindow,
  type KeyboardAction,
  type MouseAction,
  type MouseButton,
  type Region,
  type ScrollDirection,
  type StreamOptions,
} from './desktop.js';
export { Secret, type SetSecretOptions } from './secret.js';
export {
  Events,
  EventStream,
  type EventFilter,
  type EventPage,
  type ListEventsOptions,
  type SandboxEvent,
} from './events.js';
export {
  Template,
  type BuildOptions,
  type Recipe,
  type RecipeFile,
  type RecipeCommand,
  type RecipeStep,
  type RegistryCredentials,
  type TemplateBuildEvent,
  type TemplateInfo,
} from './template.js';
export { Process, type ExecOptions } from './process.js';
export {
  CommandHandle,
  Commands,
  Pty,
  PtyHandle,
  type ConnectOptions,
  type InputData,
  type PtyCreateOptions,
  type Signal,
  type StartOptions,
} from './commands.js';
export { Files, type FileOptions, type FileUser, type TransferOptions, type WatchHandle, type WatchOptions, type WriteData } from './files.js';
export { DEFAULT_API_URL, DEFAULT_REQUEST_TIMEOUT_MS, type ConnectionOptions } from './http.js';
export { VERSION } from './version.js';
export {
  AuthenticationError,
  ConflictError,
  DiskFullError,
  InvalidArgumentError,
  LizardConnectionError,
  LizardError,
  NotFoundError,
  PermissionDeniedError,
  RateLimitError,
  RequestTimeoutError,
  SandboxError,
  SandboxGoneError,
  TemplateBuildError,
} from './errors.js';
