// Background processes and terminals of a sandbox (docs/processes.md):
// sandbox.commands starts, lists, reattaches to and signals processes that
// run on when the client disconnects; sandbox.pty gives them a terminal,
// followed over a WebSocket as raw bytes.

import {
  ConflictError,
  InvalidArgumentError,
  LizardConnectionError,
  LizardError,
  SandboxError,
  SandboxGoneError,
  errorFromAbort,
  errorFromResponse,
} from './errors.js';
import { ndjsonLines, type HttpClient } from './http.js';
import {
  processInfo,
  type ProcessControl,
  type ProcessInfo,
  type ProcessOutputEvent,
  type ProcessResult,
  type PtySize,
  type WireProcessInfo,
} from './types.js';

/** Bytes for a process's stdin or a terminal's input; a string is sent as UTF-8. */
export type InputData = string | Uint8Array;

/** Options of commands.start: exactly one of cmd and args. */
export interface StartOptions {
  /** A command line, run by `bash -c`. */
  cmd?: string;
  /** A program and its arguments, run as they are (looked up on PATH). */
  args?: string[];
  /** Working directory; default the template's, else the user's home. */
  cwd?: string;
  /** Environment variables for this process only. */
  envs?: Record<string, string>;
  /** Keep stdin open for sendStdin; without it stdin is /dev/null. */
  stdin?: boolean;
  /** Kills the process group after this many milliseconds (exit code 124); default none. */
  timeoutMs?: number;
  /** Your name for the process, listed with it (at most 256 bytes). */
  tag?: string;
  /** `root`, or the sandbox user (the default). */
  user?: string;
  /** Called with each piece of stdout as it arrives. */
  onStdout?: (text: string) => void | Promise<void>;
  /** Called with each piece of stderr as it arrives. */
  onStderr?: (text: string) => void | Promise<void>;
}

/** Callbacks of commands.connect. */
export interface ConnectOptions {
  onStdout?: (text: string) => void | Promise<void>;
  onStderr?: (text: string) => void | Promise<void>;
}

/** Options of pty.create. */
export interface PtyCreateOptions {
  cols: number;
  rows: number;
  /** Called with the terminal's output, raw bytes, as it arrives. */
  onData: (data: Uint8Array) => void | Promise<void>;
  /** What runs: a command line for `bash -c`, or a program and its arguments; default the user's login shell. */
  cmd?: string | string[];
  cwd?: string;
  envs?: Record<string, string>;
  timeoutMs?: number;
  tag?: string;
  user?: string;
}

/** A signal by name (TERM, INT, KILL, HUP, USR1... with or without SIG) or number. */
export type Signal = string | number;

const DEFAULT_SIGNAL = 'KILL';

function checkSize(cols: number, rows: number): PtySize {
  for (const [name, v] of [
    ['cols', cols],
    ['rows', rows],
  ] as const) {
    if (!Number.isInteger(v) || v < 1 || v > 1000) {
      throw new InvalidArgumentError(`${name} must be an integer from 1 to 1000, not ${String(v)}`);
    }
  }
  return { cols, rows };
}

function signalBody(signal: Signal): { signal: string } {
  if ((typeof signal !== 'string' && typeof signal !== 'number') || signal === '') {
    throw new InvalidArgumentError(`signal must be a name such as 'TERM' or a number, not ${JSON.stringify(signal)}`);
  }
  return { signal: String(signal) };
}

function inputBytes(data: InputData): Uint8Array {
  if (typeof data === 'string') return new TextEncoder().encode(data);
  if (data instanceof Uint8Array) return data;
  throw new InvalidArgumentError('data must be a string or a Uint8Array');
}

/** Commands are the background processes of one sandbox: `sandbox.commands`. */
export class Commands {
  /** @internal */
  constructor(
    private readonly http: HttpClient,
    private readonly prefix: string,
  ) {}

  /** @internal */
  path(pid?: number, rest = ''): string {
    return pid === undefined ? `${this.prefix}/processes` : `${this.prefix}/processes/${Math.trunc(pid)}${rest}`;
  }

  /** @internal */
  async create(body: Record<string, unknown>): Promise<ProcessInfo> {
    return processInfo(await this.http.request<WireProcessInfo>('POST', this.path(), { json: body }));
  }

  /**
   * start starts a command in the background and resolves at once with its
   * handle, which follows its output (onStdout, onStderr). It runs on when
   * this client disconnects; commands.connect finds it again.
   */
  async start(opts: StartOptions): Promise<CommandHandle> {
    if ((opts.cmd === undefined) === (opts.args === undefined)) {
      throw new InvalidArgumentError('start takes exactly one of cmd and args');
    }
    if (opts.cmd === '' || opts.args?.length === 0) throw new InvalidArgumentError('cmd must not be empty');
    const info = await this.create({
      cmd: opts.cmd,
      args: opts.args,
      cwd: opts.cwd,
      envs: opts.envs,
      stdin: opts.stdin || undefined,
      timeoutMs: opts.timeoutMs,
      tag: opts.tag,
      user: opts.user,
    });
    return this.attach(info, opts);
  }

  /** list returns the sandbox's processes: running ones first, then the last 64 that ended. */
  async list(): Promise<ProcessInfo[]> {
    const w = await this.http.request<{ processes: WireProcessInfo[] | null }>('GET', this.path());
    return (w.processes ?? []).map(processInfo);
  }

  /** get returns one process; NotFoundError for an unknown pid. */
  async get(pid: number): Promise<ProcessInfo> {
    return processInfo(await this.http.request<WireProcessInfo>('GET', this.path(pid)));
  }

  /** connect reattaches to a process: the callbacks get the output it kept (its last 1 MiB), then what comes. */
  async connect(pid: number, opts: ConnectOptions = {}): Promise<CommandHandle> {
    return this.attach(await this.get(pid), opts);
  }

  private async attach(info: ProcessInfo, opts: ConnectOptions): Promise<CommandHandle> {
    const stopper = new AbortController();
    const open = await this.http.open('GET', this.path(info.pid, '/output'), { timeoutMs: 0, signal: stopper.signal });
    return new CommandHandle(this, info, open.reader(), () => open.done(), stopper, opts);
  }

  /** sendStdin writes to a process's stdin (started with stdin: true); ConflictError when it is closed or the process ended. */
  async sendStdin(pid: number, data: InputData): Promise<void> {
    await this.http.request<void>('POST', this.path(pid, '/stdin'), { body: inputBytes(data), timeoutMs: 0 });
  }

  /** closeStdin ends a process's stdin (it reads end of file). */
  async closeStdin(pid: number): Promise<void> {
    await this.http.request<void>('POST', this.path(pid, '/stdin/close'));
  }

  /** kill sends a signal (default KILL) to a process's group; NotFoundError when it ended. */
  async kill(pid: number, signal: Signal = DEFAULT_SIGNAL): Promise<void> {
    await this.http.request<void>('POST', this.path(pid, '/signal'), { json: signalBody(signal) });
  }

  /** waitExit resolves once a process has ended, with its exit code (no output). */
  async waitExit(pid: number): Promise<ProcessInfo> {
    return processInfo(await this.http.request<WireProcessInfo>('GET', this.path(pid), { query: { wait: '1' }, timeoutMs: 0 }));
  }

  /** @internal */
  get client(): HttpClient {
    return this.http;
  }
}

/** A background process this client follows (commands.start, commands.connect). */
export class CommandHandle {
  readonly pid: number;
  readonly tag?: string;
  /** Why following the output failed, if it did (SandboxGoneError when the sandbox ended). */
  error?: Error;
  private out: ProcessResult = { stdout: '', stderr: '', exitCode: -1 };
  private ended = false;
  private readonly run: Promise<void>;

  /** @internal */
  constructor(
    private readonly commands: Commands,
    /** The process as it was when this handle was made. */
    readonly info: ProcessInfo,
    reader: AsyncGenerator<Uint8Array>,
    done: () => void,
    private readonly stopper: AbortController,
    opts: ConnectOptions,
  ) {
    this.pid = info.pid;
    this.tag = info.tag;
    this.run = (async () => {
      try {
        for await (const line of ndjsonLines(reader)) {
          let ev: ProcessOutputEvent;
          try {
            ev = JSON.parse(line) as ProcessOutputEvent;
          } catch (err) {
            throw new SandboxError(`process ${info.pid}: invalid line in the output: ${line.slice(0, 200)}`, { cause: err });
          }
          switch (ev.type) {
            case 'stdout':
              this.out.stdout += ev.text ?? '';
              await opts.onStdout?.(ev.text ?? '');
              break;
            case 'stderr':
              this.out.stderr += ev.text ?? '';
              await opts.onStderr?.(ev.text ?? '');
              break;
            case 'abort':
              throw errorFromAbort(ev.abort);
            case 'end':
              this.ended = true;
              if (typeof ev.exitCode === 'number') this.out.exitCode = ev.exitCode;
              if (ev.error) this.out.error = ev.error;
              break;
          }
        }
      } catch (err) {
        if (!stopper.signal.aborted) this.error = err instanceof Error ? err : new Error(String(err));
      } finally {
        done();
      }
    })();
  }

  /** The standard output received so far. */
  get stdout(): string {
    return this.out.stdout;
  }

  /** The standard error received so far. */
  get stderr(): string {
    return this.out.stderr;
  }

  /**
   * wait resolves once the process has ended, with its exit code and the
   * output this handle received; a non-zero exit is not thrown. It rejects
   * with SandboxGoneError when the sandbox ended first. After disconnect()
   * it waits for the exit code alone.
   */
  async wait(): Promise<ProcessResult> {
    await this.run;
    if (this.error) throw this.error;
    if (!this.ended) {
      const info = await this.commands.waitExit(this.pid);
      return { ...this.out, exitCode: info.exitCode ?? -1, ...(info.error ? { error: info.error } : {}) };
    }
    return { ...this.out };
  }

  /** sendStdin writes to its stdin (started with stdin: true). */
  sendStdin(data: InputData): Promise<void> {
    return this.commands.sendStdin(this.pid, data);
  }

  /** closeStdin ends its stdin. */
  closeStdin(): Promise<void> {
    return this.commands.closeStdin(this.pid);
  }

  /** kill sends it a signal (to its process group); default KILL. */
  kill(signal: Signal = DEFAULT_SIGNAL): Promise<void> {
    return this.commands.kill(this.pid, signal);
  }

  /** disconnect stops following its output; the process runs on. */
  async disconnect(): Promise<void> {
    this.stopper.abort();
    await this.run;
  }
}

// The part of the WHATWG WebSocket interface used here: the global one
// (browsers, Node 22+) and the `ws` package's (Node 18 and 20) both have it.
interface Socket {
  binaryType: string;
  send(data: string | Uint8Array): void;
  close(code?: number, reason?: string): void;
  onopen: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onclose: ((ev: { code: number; reason: string }) => void) | null;
  onerror: ((ev: { message?: string; error?: unknown }) => void) | null;
}
type SocketClass = new (url: string, protocols: string[]) => Socket;

async function socketClass(): Promise<SocketClass> {
  const global = (globalThis as { WebSocket?: SocketClass }).WebSocket;
  if (global) return global;
  return (await import('ws')).WebSocket as unknown as SocketClass;
}

/** closeError is what a process's WebSocket closing with code means: 4410 the sandbox ended, 4409 it was paused. */
function closeError(code: number, reason: string): LizardError | undefined {
  if (code === 1000) return undefined;
  if (code === 4410) return new SandboxGoneError(reason || 'the sandbox ended', { status: 410, code: 'gone' });
  if (code === 4409) {
    return new ConflictError(reason || 'the sandbox was paused; connect again to resume it', { status: 409, code: 'conflict' });
  }
  return new SandboxError(`the terminal's connection closed with code ${code}: ${reason || 'no reason given'}`);
}

/** Pty is the terminals of one sandbox: `sandbox.pty`. */
export class Pty {
  /** @internal */
  constructor(private readonly commands: Commands) {}

  /**
   * create starts a terminal of cols x rows running cmd (default the
   * user's login shell, TERM=xterm-256color) and attaches to it: onData
   * gets its output as raw bytes.
   */
  async create(opts: PtyCreateOptions): Promise<PtyHandle> {
    const pty = checkSize(opts.cols, opts.rows);
    if (opts.cmd === '' || (Array.isArray(opts.cmd) && opts.cmd.length === 0)) throw new InvalidArgumentError('cmd must not be empty');
    const info = await this.commands.create({
      ...(Array.isArray(opts.cmd) ? { args: opts.cmd } : { cmd: opts.cmd }),
      cwd: opts.cwd,
      envs: opts.envs,
      timeoutMs: opts.timeoutMs,
      tag: opts.tag,
      user: opts.user,
      pty,
    });
    return this.attach(info, opts.onData);
  }

  /** connect reattaches to a terminal: onData gets the output it kept, then what comes. */
  async connect(pid: number, opts: { onData: (data: Uint8Array) => void | Promise<void> }): Promise<PtyHandle> {
    return this.attach(await this.commands.get(pid), opts.onData);
  }

  private async attach(info: ProcessInfo, onData: (data: Uint8Array) => void | Promise<void>): Promise<PtyHandle> {
    const { apiUrl, apiKey } = this.commands.client.config;
    const url = apiUrl.replace(/^http/, 'ws') + this.commands.path(info.pid, '/ws');
    const Impl = await socketClass();
    // The key goes as a subprotocol beside "lizard", as a browser's must (it cannot set headers).
    const ws = new Impl(url, ['lizard', `lizard.bearer.${apiKey}`]);
    ws.binaryType = 'arraybuffer';
    // The agent sends the kept output right after the handshake, and `ws`
    // may deliver it (on process.nextTick) before the code after the await
    // below runs: what comes meanwhile is kept for the handle, not lost.
    const early: Early = { messages: [] };
    ws.onmessage = (ev) => void early.messages.push(ev);
    await new Promise<void>((resolve, reject) => {
      let failure = '';
      let open = false;
      ws.onopen = () => {
        open = true;
        resolve();
      };
      ws.onerror = (ev) => {
        failure = ev?.message ?? String(ev?.error ?? '');
      };
      ws.onclose = (ev) => {
        if (open) {
          early.close = ev;
          return;
        }
        // ws names a refused handshake's status ("Unexpected server response: 404"); a browser does not.
        const status = /Unexpected server response: (\d+)/.exec(failure)?.[1];
        if (status) reject(errorFromResponse(Number(status), ''));
        else reject(new LizardConnectionError(`cannot open the terminal's WebSocket at ${apiUrl}: ${failure || `closed with ${ev.code}`}`));
      };
    });
    return new PtyHandle(this.commands, info, ws, onData, early);
  }

  /** sendInput types into a terminal without attaching to it. */
  sendInput(pid: number, data: InputData): Promise<void> {
    return this.commands.sendStdin(pid, data);
  }

  /** resize gives a terminal a new size without attaching to it. */
  async resize(pid: number, cols: number, rows: number): Promise<void> {
    await this.commands.client.request<void>('POST', this.commands.path(pid, '/resize'), { json: checkSize(cols, rows) });
  }

  /** kill kills a terminal's process group (SIGKILL). */
  kill(pid: number): Promise<void> {
    return this.commands.kill(pid, 'KILL');
  }
}

/** What a terminal's socket delivered before its handle was made. */
interface Early {
  messages: { data: unknown }[];
  close?: { code: number; reason: string };
}

/** A terminal this client is attached to (pty.create, pty.connect). */
export class PtyHandle {
  readonly pid: number;
  readonly tag?: string;
  /** Its exit code once it ended. */
  exitCode?: number;
  /** Why the connection ended, if not with the terminal's end (SandboxGoneError: the sandbox ended; ConflictError: it was paused). */
  error?: Error;
  private disconnected = false;
  private readonly closed: Promise<void>;

  /** @internal */
  constructor(
    private readonly commands: Commands,
    /** The terminal's process as it was when this handle was made. */
    readonly info: ProcessInfo,
    private readonly ws: Socket,
    onData: (data: Uint8Array) => void | Promise<void>,
    early: Early = { messages: [] },
  ) {
    this.pid = info.pid;
    this.tag = info.tag;
    // Callbacks run one after another, in the order the frames came.
    let queue = Promise.resolve();
    const fail = (err: unknown) => {
      if (!this.disconnected) this.error ??= err instanceof Error ? err : new Error(String(err));
      ws.close();
    };
    ws.onmessage = (ev) => {
      const d = ev.data;
      if (typeof d === 'string') {
        try {
          const c = JSON.parse(d) as ProcessControl;
          if (c.type === 'end' && typeof c.exitCode === 'number') this.exitCode = c.exitCode;
        } catch {
          // Not a control this client knows: newer servers may send others.
        }
        return;
      }
      const bytes = d instanceof ArrayBuffer ? new Uint8Array(d) : (d as Uint8Array);
      queue = queue.then(() => onData(bytes)).catch(fail);
    };
    ws.onerror = () => {};
    const onMessage = ws.onmessage;
    for (const ev of early.messages) onMessage(ev);
    this.closed = new Promise<void>((resolve) => {
      ws.onclose = (ev) => {
        if (!this.disconnected && this.exitCode === undefined) {
          this.error ??= closeError(ev.code, ev.reason) ?? new SandboxError("the terminal's connection closed before its end");
        }
        queue.then(resolve, resolve);
      };
      if (early.close) ws.onclose(early.close);
    });
  }

  /** sendInput types into the terminal (keystrokes, pasted text, "\x03" for Ctrl-C). */
  async sendInput(data: InputData): Promise<void> {
    this.send(inputBytes(data));
  }

  /** resize gives the terminal a new size (its program gets SIGWINCH). */
  async resize(cols: number, rows: number): Promise<void> {
    const control: ProcessControl = { type: 'resize', ...checkSize(cols, rows) };
    this.send(JSON.stringify(control));
  }

  private send(data: string | Uint8Array): void {
    if (this.error) throw this.error;
    try {
      this.ws.send(data);
    } catch (err) {
      throw new SandboxError("the terminal's connection is closed", { cause: err });
    }
  }

  /** kill kills the terminal's process group (SIGKILL); wait() then resolves with 137. */
  kill(): Promise<void> {
    return this.commands.kill(this.pid, 'KILL');
  }

  /**
   * wait resolves with the terminal program's exit code. It rejects with
   * SandboxGoneError when the sandbox ended first, ConflictError when it
   * was paused. After disconnect() it waits for the exit code alone.
   */
  async wait(): Promise<number> {
    await this.closed;
    if (this.error) throw this.error;
    if (this.exitCode === undefined) return (await this.commands.waitExit(this.pid)).exitCode ?? -1;
    return this.exitCode;
  }

  /** disconnect closes this connection; the terminal runs on (pty.connect finds it again). */
  async disconnect(): Promise<void> {
    this.disconnected = true;
    this.ws.close(1000);
    await this.closed;
  }
}
