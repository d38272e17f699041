// Wire types of the HTTP API (api/types.go, api/openapi.yaml) and the
// public shapes built from them.

import type { NetworkPolicy } from './network.js';

/** One output of a run, with exactly one MIME type: the richest one offered. */
export interface Result {
  /** 'result' for the value of the last expression, 'display' for displayed output such as plt.show(). */
  type: 'result' | 'display' | string;
  /** For example 'text/plain', 'text/html' or 'image/png'. */
  mime: string;
  /** The data; images are base64. */
  data: string;
}

/** An error raised by the code that ran (never thrown). */
export interface ExecutionError {
  name: string;
  message: string;
  traceback: string;
}

/** What a runCode call returns. */
export class Execution {
  /** Results in the order the code produced them. */
  results: Result[] = [];
  /** Everything the code printed to stdout. */
  stdout = '';
  /** Everything the code printed to stderr. */
  stderr = '';
  /** The code's error, undefined when it ran through; a timeout gives name 'TimeoutError'. */
  error?: ExecutionError;
  /** The Jupyter execution count (Python), undefined for other languages. */
  executionCount?: number;

  /** text is the data of the 'result' result with text/plain, if any. */
  get text(): string | undefined {
    return this.results.find((r) => r.type === 'result' && r.mime === 'text/plain')?.data;
  }

  toJSON() {
    return {
      results: this.results,
      stdout: this.stdout,
      stderr: this.stderr,
      error: this.error,
      executionCount: this.executionCount,
    };
  }
}

/** An execution context: its own kernel, variables and working directory. */
export interface Context {
  id: string;
  language: string;
  cwd: string;
}

/** What the API tells about one sandbox. */
export interface SandboxInfo {
  sandboxId: string;
  projectId: string;
  template: string;
  /** starting, running, paused, killed, expired or failed. */
  state: string;
  timeoutMs: number;
  metadata: Record<string, string>;
  createdAt: Date;
  /** Undefined when the sandbox never expires. */
  expiresAt?: Date;
  /** Set once the sandbox has been killed, expired or failed. */
  endedAt?: Date;
  /** The resources it runs with; undefined when the server sets no bound. */
  memoryMb?: number;
  cpus?: number;
  diskMb?: number;
  /** The sandbox whose lizardToken created this one. */
  parentSandboxId?: string;
  /** The volumes it mounts. */
  volumes: VolumeMount[];
  /** Opens its exposed ports (getHost) to whoever holds it. */
  accessToken?: string;
  /** Its ports need no credential. */
  publicPorts: boolean;
  /** The server's wildcard domain for ports, if it has one. */
  portsDomain?: string;
  /** The Host its ports' requests carry (`${PORT}` the port), if it was created with one. */
  portsHost?: string;
  /** Its network policy by domain name, if it has one. */
  network?: NetworkPolicy;
  /** It is paused and its image is in the server's image store: it outlives the machine that paused it. */
  durable: boolean;
}

/** A volume mounted in a sandbox: its name and where. */
export interface VolumeMount {
  name: string;
  path: string;
}

/** A persistent volume of the project. */
export interface VolumeInfo {
  name: string;
  volumeId: string;
  /** Its size; writes past it fail with ENOSPC inside the sandbox. */
  sizeMb: number;
  createdAt: Date;
}

/** A secret of the project, without its value (no call returns one). */
export interface SecretInfo {
  name: string;
  /**
   * The names and wildcards it may be sent to; empty for a secret set
   * before secrets named their hosts, which is sent nowhere until set again.
   */
  hosts: string[];
  /** Whether it may go over plain HTTP too. */
  allowHttp: boolean;
  createdAt: Date;
  /** When its value was last set. */
  updatedAt: Date;
}

/** One file or directory in a sandbox. */
export interface EntryInfo {
  name: string;
  path: string;
  /** file, dir, symlink or other. */
  type: 'file' | 'dir' | 'symlink' | 'other' | string;
  size: number;
  /** The permission bits, such as 0o644. */
  mode: number;
  modTime: Date;
  /** The type and mode as `ls -l` shows them, such as "-rw-r--r--". */
  permissions: string;
  /** The owner's user name (the uid when the sandbox has no name for it). */
  owner: string;
  /** The group's name (the gid when the sandbox has no name for it). */
  group: string;
  /** Where a symlink points, as stored in it; undefined for other types. */
  symlinkTarget?: string;
  /** The file's metadata (files.write's metadata, its user.e2b.* extended attributes); undefined for none. */
  metadata?: Record<string, string>;
}

/** One change under a watched directory (files.watchDir). */
export interface FilesystemEvent {
  /** create, write, remove, rename (the old name; the new one comes as create) or chmod. */
  type: 'create' | 'write' | 'remove' | 'rename' | 'chmod' | string;
  /** The path that changed, relative to the watched directory. */
  name: string;
  /** When the sandbox saw it. */
  time: Date;
  /** The file as it was when the event was sent, with watchDir's includeEntry. */
  entry?: EntryInfo;
}

/** One sample of a sandbox's use of its machine (getMetrics), taken every 5 s. */
export interface SandboxMetric {
  timestamp: Date;
  /** CPU time used since the previous sample, in percent of cpuCount CPUs. */
  cpuUsedPct: number;
  cpuCount: number;
  /** Memory its host cannot reclaim, bytes; memTotal its limit. */
  memUsed: number;
  memTotal: number;
  /** What its writable layer holds, bytes; diskTotal its limit. */
  diskUsed: number;
  diskTotal: number;
}

export interface WireMetric {
  timestamp: string;
  cpuUsedPct: number;
  cpuCount: number;
  memUsed: number;
  memTotal: number;
  diskUsed: number;
  diskTotal: number;
}

export function sandboxMetric(w: WireMetric): SandboxMetric {
  return { ...w, timestamp: new Date(w.timestamp) };
}

/** What process.exec returns, and a background command's wait(). */
export interface ProcessResult {
  stdout: string;
  stderr: string;
  /** The exit code; 124 when the process ran past timeoutMs and was killed, -1 when it could not start. */
  exitCode: number;
  /** Why the process did not run to its end (could not start, timed out), if it did not. */
  error?: string;
}

// Raw wire shapes.

export interface WireSandbox {
  sandboxId: string;
  projectId: string;
  template: string;
  state: string;
  timeoutMs: number;
  metadata?: Record<string, string> | null;
  createdAt: string;
  expiresAt?: string | null;
  endedAt?: string | null;
  memoryMb?: number;
  cpus?: number;
  diskMb?: number;
  parentSandboxId?: string;
  volumes?: VolumeMount[] | null;
  accessToken?: string;
  publicPorts?: boolean;
  portsDomain?: string;
  portsHost?: string;
  network?: NetworkPolicy;
  durable?: boolean;
}

export interface WireVolume {
  name: string;
  volumeId: string;
  sizeMb: number;
  createdAt: string;
}

export interface WireSecret {
  name: string;
  hosts?: string[] | null;
  allowHttp?: boolean;
  createdAt: string;
  updatedAt: string;
}

export interface WireEntry {
  name: string;
  path: string;
  type: string;
  size: number;
  mode: number;
  modTime: string;
  permissions?: string;
  owner?: string;
  group?: string;
  symlinkTarget?: string;
  metadata?: Record<string, string>;
}

/** The API error a stream ended with when the sandbox stopped during the call. */
export interface Abort {
  status: number;
  code: string;
  message: string;
}

export interface ExecuteEvent {
  type: 'stdout' | 'stderr' | 'result' | 'error' | 'end' | 'abort' | string;
  text?: string;
  result?: Result;
  error?: ExecutionError;
  executionCount?: number;
  abort?: Abort;
}

export interface ProcessEvent {
  type: 'stdout' | 'stderr' | 'end' | 'abort' | string;
  text?: string;
  exitCode?: number | null;
  error?: string;
  abort?: Abort;
}

/** A terminal's size in characters. */
export interface PtySize {
  cols: number;
  rows: number;
}

/** A background process of a sandbox (commands.list, commands.start), running or ended. */
export interface ProcessInfo {
  pid: number;
  /** Your name for it, if you gave one. */
  tag?: string;
  /** The command line, when it was started from one (run by `bash -c`). */
  cmd?: string;
  /** What runs: for a command line `bash -c cmd`, for a terminal the shell. */
  args: string[];
  cwd: string;
  user: string;
  startedAt: Date;
  /** Its terminal's size; absent when it has none. */
  pty?: PtySize;
  /** Whether its stdin takes input now. */
  stdin: boolean;
  running: boolean;
  /** Once it ended: 128+N when signal N killed it, 124 when it timed out. */
  exitCode?: number;
  endedAt?: Date;
  /** Why it ended, when not by itself (a timeout). */
  error?: string;
}

export interface WireProcessInfo extends Omit<ProcessInfo, 'startedAt' | 'endedAt'> {
  startedAt: string;
  endedAt?: string;
}

export function processInfo(w: WireProcessInfo): ProcessInfo {
  const { startedAt, endedAt, ...rest } = w;
  return { ...rest, startedAt: new Date(startedAt), ...(endedAt ? { endedAt: new Date(endedAt) } : {}) };
}

/** One line of GET /processes/{pid}/output. */
export interface ProcessOutputEvent {
  type: 'stdout' | 'stderr' | 'pty' | 'dropped' | 'end' | 'abort' | string;
  text?: string;
  /** A terminal's raw bytes, base64. */
  data?: string;
  dropped?: number;
  exitCode?: number;
  error?: string;
  abort?: Abort;
}

/** A text frame of a process's WebSocket. */
export interface ProcessControl {
  type: 'resize' | 'eof' | 'dropped' | 'error' | 'end' | string;
  cols?: number;
  rows?: number;
  dropped?: number;
  exitCode?: number;
  error?: string;
}

export function sandboxInfo(w: WireSandbox): SandboxInfo {
  return {
    sandboxId: w.sandboxId,
    projectId: w.projectId,
    template: w.template,
    state: w.state,
    timeoutMs: w.timeoutMs,
    metadata: w.metadata ?? {},
    createdAt: new Date(w.createdAt),
    expiresAt: w.expiresAt ? new Date(w.expiresAt) : undefined,
    endedAt: w.endedAt ? new Date(w.endedAt) : undefined,
    memoryMb: w.memoryMb,
    cpus: w.cpus,
    diskMb: w.diskMb,
    parentSandboxId: w.parentSandboxId || undefined,
    volumes: (w.volumes ?? []).map((v) => ({ name: v.name, path: v.path })),
    accessToken: w.accessToken || undefined,
    publicPorts: w.publicPorts ?? false,
    portsDomain: w.portsDomain || undefined,
    portsHost: w.portsHost || undefined,
    network: w.network ?? undefined,
    durable: w.durable ?? false,
  };
}

export function volumeInfo(w: WireVolume): VolumeInfo {
  return { name: w.name, volumeId: w.volumeId, sizeMb: w.sizeMb, createdAt: new Date(w.createdAt) };
}

export function secretInfo(w: WireSecret): SecretInfo {
  return {
    name: w.name,
    hosts: w.hosts ?? [],
    allowHttp: w.allowHttp ?? false,
    createdAt: new Date(w.createdAt),
    updatedAt: new Date(w.updatedAt),
  };
}

export function entryInfo(w: WireEntry): EntryInfo {
  return {
    name: w.name,
    path: w.path,
    type: w.type,
    size: w.size,
    mode: w.mode,
    modTime: new Date(w.modTime),
    permissions: w.permissions ?? '',
    owner: w.owner ?? '',
    group: w.group ?? '',
    symlinkTarget: w.symlinkTarget || undefined,
    metadata: w.metadata && Object.keys(w.metadata).length > 0 ? { ...w.metadata } : undefined,
  };
}
