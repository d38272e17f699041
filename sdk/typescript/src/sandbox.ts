// CodeSandbox: one sandbox on a Lizard server, with a stateful Jupyter
// kernel per context, processes and files.

import { InvalidArgumentError, NotFoundError, SandboxError, errorFromAbort } from './errors.js';
import { HttpClient, resolveConfig, streamTimeout, type ConnectionOptions } from './http.js';
import { Files } from './files.js';
import { Commands, Pty } from './commands.js';
import { Process } from './process.js';
import { Network, type NetworkPolicy } from './network.js';
import { Desktop } from './desktop.js';
import {
  Execution,
  sandboxInfo,
  sandboxMetric,
  type VolumeMount,
  type Context,
  type ExecuteEvent,
  type ExecutionError,
  type Result,
  type SandboxInfo,
  type SandboxMetric,
  type WireMetric,
  type WireSandbox,
} from './types.js';

/** Default life of a sandbox: five minutes. */
export const DEFAULT_SANDBOX_TIMEOUT_MS = 300_000;
/** Default bound of one runCode call: one minute. */
export const DEFAULT_CODE_TIMEOUT_MS = 60_000;
/**
 * Default HTTP timeout of create: the first sandbox of a template may wait
 * for the template to be built.
 */
export const DEFAULT_CREATE_REQUEST_TIMEOUT_MS = 900_000;

export interface CreateOptions extends ConnectionOptions {
  /**
   * The project the sandbox must belong to. The API key decides the project;
   * when given, create checks that the key's project is this one.
   */
  projectId?: string;
  /** The sandbox's life in milliseconds (default 300 000); 0 means it never ends by itself. */
  timeoutMs?: number;
  /** The template to boot (default 'interpreter'). */
  template?: string;
  /** Environment variables of the code run in the sandbox. Put no other secrets here. */
  envs?: Record<string, string>;
  /** Free labels, returned with the sandbox and usable as list filters. */
  metadata?: Record<string, string>;
  /**
   * Give the sandbox a fresh API key scoped to its project (for the lizard
   * CLI inside it), revoked when the sandbox ends. Only pass it when the
   * code needs the CLI: the code can then change the project.
   */
  lizardToken?: boolean;
  /**
   * Restore the sandbox from this snapshot (see snapshot()) instead of
   * booting a template: its variables, files and processes are the
   * snapshot's. envs and lizardToken cannot be used with it.
   */
  snapshotId?: string;
  /**
   * The project's volumes to mount, [{ name: 'data', path: '/home/user/data' }]
   * (see Volume); their files outlive the sandbox.
   */
  volumes?: VolumeMount[];
  /** Let anyone with a getHost URL reach the sandbox's ports, without the API key or its access token. */
  publicPorts?: boolean;
  /**
   * The Host header requests to the sandbox's ports carry in place of the caller's (which goes in
   * X-Forwarded-Host), `${PORT}` replaced by the port: 'localhost:${PORT}' for a program that
   * answers only its own name (docs/ports.md).
   */
  portsHost?: string;
  /** The sandbox's memory in MiB; default and maximum are the server's. */
  memoryMb?: number;
  /** Its CPU time in cores (1.5 = one and a half); default and maximum are the server's. */
  cpus?: number;
  /**
   * The size of its writable layer in MiB; default and maximum are the
   * server's. Another size than the default boots cold instead of from the
   * template's snapshot.
   */
  diskMb?: number;
  /** What happens when the timeout passes: 'kill' (the default) or 'pause'. */
  onTimeout?: 'kill' | 'pause';
  /**
   * false has its pauses (at its timeout, and pause() without memory) keep
   * its disk alone: no memory, a fresh boot at resume (see pause()).
   */
  pauseMemory?: boolean;
  /** false takes all network egress away from the sandbox; absent or true leaves what the server allows. */
  allowInternet?: boolean;
  /**
   * Its network policy by domain name, such as { default: 'deny', allow: ['pypi.org'] }
   * (docs/network.md); change it later with sandbox.network.update.
   */
  network?: NetworkPolicy;
}

export interface ListOptions extends ConnectionOptions {
  /** Only sandboxes whose metadata has all these pairs. */
  metadata?: Record<string, string>;
  /** Only sandboxes in this state (starting, running, paused, killed, expired, failed). */
  state?: string;
}

export interface RunCodeOptions {
  /**
   * python (default), javascript, bash, r or java (r and java: a kernel that
   * keeps its state, IRkernel and JShell). A context's own language wins.
   */
  language?: 'python' | 'javascript' | 'bash' | 'typescript' | 'r' | 'java' | string;
  /** The context to run in; default the language's default context. */
  context?: Context | string;
  /**
   * Bounds this call in milliseconds (default 60 000; 0 = no limit). On expiry
   * a Python, R or Java kernel is interrupted, keeps its state, and error.name
   * is 'TimeoutError'.
   */
  timeoutMs?: number;
  /** Environment variables for this call only. */
  envs?: Record<string, string>;
  /** Called with each piece of stdout while the code runs. */
  onStdout?: (text: string) => void | Promise<void>;
  /** Called with each piece of stderr while the code runs. */
  onStderr?: (text: string) => void | Promise<void>;
  /** Called with each result while the code runs. */
  onResult?: (result: Result) => void | Promise<void>;
  /** Called with the code's error, if it raises one. */
  onError?: (error: ExecutionError) => void | Promise<void>;
}

export interface CreateContextOptions {
  /** python (default), javascript, bash, r or java. */
  language?: 'python' | 'javascript' | 'bash' | 'typescript' | 'r' | 'java' | string;
  /** Working directory; default the sandbox user's home. */
  cwd?: string;
}

/** A snapshot of a sandbox, as the server describes it. */
export interface SnapshotInfo {
  snapshotId: string;
  sandboxId: string;
  projectId: string;
  template: string;
  createdAt: Date;
  sizeBytes: number;
  /** Its image is in the server's image store (uploaded in the background after the snapshot). */
  durable: boolean;
  /** The name it was taken with, while no newer snapshot of the project has taken it. */
  name?: string;
}

/** Options of snapshot(). */
export interface SnapshotOptions {
  /**
   * Names the snapshot in the project: create({ snapshotId: name }) and
   * listSnapshots({ name }) take it; a name given again moves to the newer
   * snapshot (the older one keeps its id).
   */
  name?: string;
}

/** Options of CodeSandbox.listSnapshots. */
export interface ListSnapshotsOptions extends ConnectionOptions {
  /** Only the snapshot of this name (none when no snapshot holds it). */
  name?: string;
}

/** A sandbox that runs code. Make one with CodeSandbox.create or CodeSandbox.connect. */
export class CodeSandbox {
  /** The sandbox's id. */
  readonly sandboxId: string;
  /** Commands: sandbox.process.exec(cmd). */
  readonly process: Process;
  /** Files: sandbox.files.read(path), .write(path, data), ... */
  readonly files: Files;
  /** Background processes: sandbox.commands.start({ cmd }), .list(), .connect(pid), ... */
  readonly commands: Commands;
  /** Terminals: sandbox.pty.create({ cols, rows, onData }), .connect(pid, { onData }), ... */
  readonly pty: Pty;
  /** Its network policy: sandbox.network.update({ deny: [...] }), .log(). */
  readonly network: Network;
  /** A desktop sandbox's screen, mouse, keyboard and stream: sandbox.desktop.screenshot(), .click(x, y), .stream.start(), ... */
  readonly desktop: Desktop;

  private readonly http: HttpClient;
  private readonly prefix: string;
  /** What the server said last (create, connect, getInfo): the access token and ports domain. */
  private info?: SandboxInfo;

  /** @internal Use CodeSandbox.create or CodeSandbox.connect. */
  constructor(sandboxId: string, http: HttpClient) {
    this.sandboxId = sandboxId;
    this.http = http;
    this.prefix = `/v1/sandboxes/${encodeURIComponent(sandboxId)}`;
    this.process = new Process(http, this.prefix);
    this.files = new Files(http, this.prefix);
    this.commands = new Commands(http, this.prefix);
    this.pty = new Pty(this.commands);
    this.network = new Network(http, this.prefix);
    this.desktop = new Desktop(http, this.prefix);
  }

  /** create boots a new sandbox and returns once it is ready to run code. */
  static async create(opts: CreateOptions = {}): Promise<CodeSandbox> {
    const http = new HttpClient(resolveConfig(opts));
    const timeoutMs = opts.timeoutMs ?? DEFAULT_SANDBOX_TIMEOUT_MS;
    checkMs('timeoutMs', timeoutMs);
    for (const [name, v] of [['memoryMb', opts.memoryMb], ['diskMb', opts.diskMb]] as const) {
      if (v !== undefined && (!Number.isInteger(v) || v <= 0)) {
        throw new InvalidArgumentError(`${name} must be a positive integer of MiB, not ${String(v)}`);
      }
    }
    if (opts.cpus !== undefined && !(typeof opts.cpus === 'number' && opts.cpus > 0)) {
      throw new InvalidArgumentError(`cpus must be a positive number of cores, not ${String(opts.cpus)}`);
    }
    if (opts.onTimeout !== undefined && opts.onTimeout !== 'kill' && opts.onTimeout !== 'pause') {
      throw new InvalidArgumentError(`onTimeout must be 'kill' or 'pause', not '${String(opts.onTimeout)}'`);
    }
    const w = await http.request<WireSandbox>('POST', '/v1/sandboxes', {
      json: {
        template: opts.snapshotId ? undefined : (opts.template ?? 'interpreter'),
        snapshotId: opts.snapshotId,
        timeoutMs,
        envs: opts.envs,
        metadata: opts.metadata,
        lizardToken: opts.lizardToken || undefined,
        volumes: opts.volumes?.length ? opts.volumes.map((v) => ({ name: v.name, path: v.path })) : undefined,
        publicPorts: opts.publicPorts || undefined,
        portsHost: opts.portsHost || undefined,
        memoryMb: opts.memoryMb,
        cpus: opts.cpus,
        diskMb: opts.diskMb,
        onTimeout: opts.onTimeout,
        pauseMemory: opts.pauseMemory,
        allowInternet: opts.allowInternet,
        network: opts.network,
      },
      timeoutMs: opts.requestTimeoutMs ?? DEFAULT_CREATE_REQUEST_TIMEOUT_MS,
    });
    const sandbox = new CodeSandbox(w.sandboxId, http);
    sandbox.info = sandboxInfo(w);
    if (opts.projectId !== undefined && w.projectId !== opts.projectId) {
      // The key belongs to another project: do not leave a sandbox there.
      await sandbox.kill().catch(() => {});
      throw new InvalidArgumentError(`projectId '${opts.projectId}' does not match the API key's project '${w.projectId}'`);
    }
    return sandbox;
  }

  /** connect returns a handle on an existing sandbox after checking that it exists. */
  static async connect(sandboxId: string, opts: ConnectionOptions = {}): Promise<CodeSandbox> {
    const sandbox = new CodeSandbox(sandboxId, new HttpClient(resolveConfig(opts)));
    const info = await sandbox.getInfo();
    if (info.state === 'paused') await sandbox.resume();
    return sandbox;
  }

  /** list returns the sandboxes of the key's project, newest first. */
  static async list(opts: ListOptions = {}): Promise<SandboxInfo[]> {
    const http = new HttpClient(resolveConfig(opts));
    const metadata = Object.entries(opts.metadata ?? {}).map(([k, v]) => `${k}=${v}`);
    const w = await http.request<{ sandboxes: WireSandbox[] | null }>('GET', '/v1/sandboxes', {
      query: { metadata, state: opts.state },
    });
    return (w.sandboxes ?? []).map(sandboxInfo);
  }

  /**
   * runCode runs code and returns its Execution. Errors raised by the code,
   * timeouts included, are in Execution.error and never thrown; only request
   * failures throw. Callbacks fire in order while the code runs.
   */
  async runCode(code: string, opts: RunCodeOptions = {}): Promise<Execution> {
    const timeoutMs = opts.timeoutMs ?? DEFAULT_CODE_TIMEOUT_MS;
    checkMs('timeoutMs', timeoutMs);
    const contextId = typeof opts.context === 'string' ? opts.context : opts.context?.id;
    // The HTTP timeout must outlast the code's, so the run ends with a
    // TimeoutError result instead of a broken request.
    const httpTimeout = streamTimeout(timeoutMs);
    const exec = new Execution();
    const events = this.http.stream<ExecuteEvent>('POST', `${this.prefix}/execute`, {
      json: { code, language: opts.language, contextId, timeoutMs, envs: opts.envs },
      timeoutMs: httpTimeout,
    });
    for await (const ev of events) {
      if (ev.executionCount) exec.executionCount = ev.executionCount;
      switch (ev.type) {
        case 'stdout':
          exec.stdout += ev.text ?? '';
          await opts.onStdout?.(ev.text ?? '');
          break;
        case 'stderr':
          exec.stderr += ev.text ?? '';
          await opts.onStderr?.(ev.text ?? '');
          break;
        case 'result':
          if (ev.result) {
            exec.results.push(ev.result);
            await opts.onResult?.(ev.result);
          }
          break;
        case 'error':
          if (ev.error) {
            exec.error = ev.error;
            await opts.onError?.(ev.error);
          }
          break;
        case 'abort':
          throw errorFromAbort(ev.abort);
        case 'end':
          return exec;
      }
    }
    throw new SandboxError('the execute stream ended without its end event: the connection or the sandbox failed');
  }

  /** createContext starts a new kernel with its own variables and working directory. */
  async createContext(opts: CreateContextOptions = {}): Promise<Context> {
    return this.http.request<Context>('POST', `${this.prefix}/contexts`, {
      json: { language: opts.language, cwd: opts.cwd },
    });
  }

  /** listContexts returns the sandbox's contexts, default ones included once started. */
  async listContexts(): Promise<Context[]> {
    const w = await this.http.request<{ contexts: Context[] | null }>('GET', `${this.prefix}/contexts`);
    return w.contexts ?? [];
  }

  /** restartContext restarts a context's kernel: its variables are lost, its id and cwd stay. */
  async restartContext(context: Context | string): Promise<Context> {
    return this.http.request<Context>('POST', `${this.prefix}/contexts/${contextPath(context)}/restart`);
  }

  /** deleteContext stops a context's kernel. */
  async deleteContext(context: Context | string): Promise<void> {
    await this.http.request<void>('DELETE', `${this.prefix}/contexts/${contextPath(context)}`);
  }

  /** setTimeout resets the sandbox's deadline to timeoutMs from now; 0 means never. */
  async setTimeout(timeoutMs: number): Promise<void> {
    checkMs('timeoutMs', timeoutMs);
    await this.http.request<WireSandbox>('POST', `${this.prefix}/timeout`, { json: { timeoutMs } });
  }

  /**
   * getMetrics returns the sandbox's CPU, memory and disk samples of the
   * last 5 minutes, oldest first (one every 5 s; none while it is paused or
   * in its first seconds).
   */
  async getMetrics(): Promise<SandboxMetric[]> {
    const w = await this.http.request<{ metrics: WireMetric[] | null }>('GET', `${this.prefix}/metrics`);
    return (w.metrics ?? []).map(sandboxMetric);
  }

  /** kill ends the sandbox at once. Killing a sandbox that is already gone (404, 410) succeeds. */
  async kill(): Promise<void> {
    try {
      await this.http.request<void>('DELETE', this.prefix);
    } catch (err) {
      if (!(err instanceof NotFoundError)) throw err;
    }
  }

  /** getInfo describes the sandbox; it works for ended sandboxes too. */
  async getInfo(): Promise<SandboxInfo> {
    this.info = sandboxInfo(await this.http.request<WireSandbox>('GET', this.prefix));
    return this.info;
  }

  /**
   * The token that opens this sandbox's ports (and nothing else), as of
   * create, connect or the last getInfo: send it as ?lizard_access_token=
   * or the X-Lizard-Access-Token header.
   */
  get accessToken(): string | undefined {
    return this.info?.accessToken;
  }

  /**
   * getHost returns the URL at which a server listening on port inside the
   * sandbox (on 0.0.0.0) is reached through Lizard, HTTP and WebSocket:
   * {apiUrl}/v1/sandboxes/{id}/ports/{port}/, or http://{port}-{id}.{domain}/
   * when the server has a ports domain. Requests need the API key
   * (Authorization: Bearer) or accessToken, unless the sandbox was created
   * with publicPorts.
   */
  getHost(port: number): string {
    return portUrl(this.http.config.apiUrl, this.sandboxId, port, this.info?.portsDomain);
  }

  /**
   * pause saves the sandbox (memory, kernel variables, processes, files) to
   * the server's disk and stops it; its timeout clock stops too. Any call on
   * it, resume() or connect() resumes it. Throws ConflictError when a call is
   * still running after 10 s.
   *
   * The image is copied to the server's image store in the background;
   * waitDurable returns only once it is there (durable), so that the sandbox
   * outlives the machine that paused it, and throws SandboxError (503) if that
   * takes over 5 minutes.
   *
   * memory: false keeps its disk alone (its files, not its memory, kernel
   * variables or processes), a far smaller image; the resume boots it fresh
   * over that disk, with its envs, metadata and ID. It holds for the
   * sandbox's later pauses too (those at its timeout).
   */
  async pause(opts: { waitDurable?: boolean; memory?: boolean } = {}): Promise<void> {
    await this.http.request<unknown>('POST', `${this.prefix}/pause`, {
      json: { ...(opts.waitDurable ? { waitDurable: true } : {}), ...(opts.memory !== undefined ? { memory: opts.memory } : {}) },
      timeoutMs: this.longTimeout(),
    });
  }

  /**
   * resume restores a paused sandbox (a running one is left as is).
   * timeoutMs, when given, replaces the time it had left when paused.
   * memory: false asks for a fresh boot over its disk, as a sandbox paused
   * with memory: false resumes anyway; one paused with its memory throws
   * ConflictError and stays paused.
   */
  async resume(opts: { timeoutMs?: number; memory?: boolean } = {}): Promise<void> {
    if (opts.timeoutMs !== undefined) checkMs('timeoutMs', opts.timeoutMs);
    await this.http.request<unknown>('POST', `${this.prefix}/resume`, {
      json: { timeoutMs: opts.timeoutMs, memory: opts.memory },
      timeoutMs: this.longTimeout(),
    });
  }

  /** snapshot saves the running sandbox without stopping it; create({snapshotId}) restores it. */
  async snapshot(opts: SnapshotOptions = {}): Promise<SnapshotInfo> {
    const w = await this.http.request<WireSnapshot>('POST', `${this.prefix}/snapshots`, {
      json: opts.name ? { name: opts.name } : {},
      timeoutMs: this.longTimeout(),
    });
    return snapshotInfo(w);
  }

  /** listSnapshots lists the key's project's snapshots, newest first; with name, the one of that name. */
  static async listSnapshots(opts: ListSnapshotsOptions = {}): Promise<SnapshotInfo[]> {
    const http = new HttpClient(resolveConfig(opts));
    const w = await http.request<{ snapshots: WireSnapshot[] | null }>('GET', '/v1/snapshots', {
      query: opts.name ? { name: opts.name } : {},
    });
    return (w.snapshots ?? []).map(snapshotInfo);
  }

  /** deleteSnapshot removes a snapshot of the key's project and its image. */
  async deleteSnapshot(snapshotId: string): Promise<void> {
    await this.http.request<unknown>('DELETE', `/v1/snapshots/${encodeURIComponent(snapshotId)}`);
  }

  /**
   * fork copies the sandbox as it is now (variables, files, processes) into
   * new, independent sandboxes, each with its own address and reseeded
   * random generators. fork() returns one sandbox; fork({count}) (1 to 16)
   * returns an array.
   */
  async fork(opts?: { timeoutMs?: number; metadata?: Record<string, string> }): Promise<CodeSandbox>;
  async fork(opts: { count: number; timeoutMs?: number; metadata?: Record<string, string> }): Promise<CodeSandbox[]>;
  async fork(
    opts: { count?: number; timeoutMs?: number; metadata?: Record<string, string> } = {},
  ): Promise<CodeSandbox | CodeSandbox[]> {
    if (opts.timeoutMs !== undefined) checkMs('timeoutMs', opts.timeoutMs);
    if (opts.count !== undefined && (!Number.isInteger(opts.count) || opts.count < 1 || opts.count > 16)) {
      throw new InvalidArgumentError(`count must be an integer from 1 to 16, got ${opts.count}`);
    }
    const w = await this.http.request<{ sandboxes: WireSandbox[] | null }>('POST', `${this.prefix}/fork`, {
      json: { count: opts.count, timeoutMs: opts.timeoutMs, metadata: opts.metadata },
      timeoutMs: this.longTimeout(),
    });
    const forks = (w.sandboxes ?? []).map((s) => new CodeSandbox(s.sandboxId, this.http));
    return opts.count !== undefined ? forks : forks[0];
  }

  private longTimeout(): number | undefined {
    const t = this.http.config.requestTimeoutMs;
    return t && Math.max(t, DEFAULT_CREATE_REQUEST_TIMEOUT_MS);
  }
}

function contextPath(context: Context | string): string {
  return encodeURIComponent(typeof context === 'string' ? context : context.id);
}

function checkMs(name: string, ms: number): void {
  if (!Number.isInteger(ms) || ms < 0) {
    throw new InvalidArgumentError(`${name} must be a whole number of milliseconds >= 0, got ${ms}`);
  }
}

/**
 * portUrl is the URL of port inside sandbox sandboxId served through the API
 * at apiUrl: host-based under portsDomain when the server has one.
 */
export function portUrl(apiUrl: string, sandboxId: string, port: number, portsDomain?: string): string {
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new InvalidArgumentError(`port must be an integer from 1 to 65535, not ${port}`);
  }
  if (portsDomain) {
    const u = new URL(apiUrl);
    return `${u.protocol}//${port}-${sandboxId}.${portsDomain}${u.port ? `:${u.port}` : ''}/`;
  }
  return `${apiUrl.replace(/\/+$/, '')}/v1/sandboxes/${encodeURIComponent(sandboxId)}/ports/${port}/`;
}

type WireSnapshot = Omit<SnapshotInfo, 'createdAt'> & { createdAt: string };

// A Date, as every other time the SDK returns (getInfo, Volume, Secret, Template).
function snapshotInfo(w: WireSnapshot): SnapshotInfo {
  return { ...w, createdAt: new Date(w.createdAt), name: w.name || undefined };
}
