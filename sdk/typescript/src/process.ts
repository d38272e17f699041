// Commands run in a sandbox, one process each (POST /process, NDJSON stream).

import { SandboxError, errorFromAbort } from './errors.js';
import { streamTimeout, type HttpClient } from './http.js';
import type { ProcessEvent, ProcessResult } from './types.js';

export interface ExecOptions {
  /** Working directory; default the sandbox user's home (/home/user). */
  cwd?: string;
  /** Environment variables for this command only. */
  envs?: Record<string, string>;
  /** Kills the process after this many milliseconds; default none. */
  timeoutMs?: number;
  /** Written to the process's standard input, which is then closed. */
  stdin?: string;
  /** Called with each piece of stdout as it arrives. */
  onStdout?: (text: string) => void | Promise<void>;
  /** Called with each piece of stderr as it arrives. */
  onStderr?: (text: string) => void | Promise<void>;
}

/** Process runs commands in one sandbox: `sandbox.process`. */
export class Process {
  /** @internal */
  constructor(
    private readonly http: HttpClient,
    private readonly prefix: string,
  ) {}

  /**
   * exec runs a command and waits for it to end. A string is run by
   * `bash -c`; an array is a program and its arguments, run as is. A
   * non-zero exit code is returned, not thrown.
   */
  async exec(cmd: string | string[], opts: ExecOptions = {}): Promise<ProcessResult> {
    const body = {
      ...(Array.isArray(cmd) ? { args: cmd } : { cmd }),
      cwd: opts.cwd,
      envs: opts.envs,
      timeoutMs: opts.timeoutMs,
      stdin: opts.stdin,
    };
    const out: ProcessResult = { stdout: '', stderr: '', exitCode: -1 };
    // Without a process timeout the call may take as long as the command does.
    const httpTimeout = streamTimeout(opts.timeoutMs);
    for await (const ev of this.http.stream<ProcessEvent>('POST', `${this.prefix}/process`, {
      json: body,
      timeoutMs: httpTimeout,
    })) {
      switch (ev.type) {
        case 'stdout':
          out.stdout += ev.text ?? '';
          await opts.onStdout?.(ev.text ?? '');
          break;
        case 'stderr':
          out.stderr += ev.text ?? '';
          await opts.onStderr?.(ev.text ?? '');
          break;
        case 'abort':
          throw errorFromAbort(ev.abort);
        case 'end':
          if (typeof ev.exitCode === 'number') out.exitCode = ev.exitCode;
          if (ev.error) out.error = ev.error;
          return out;
      }
    }
    throw new SandboxError('the process stream ended without its end event: the connection or the sandbox failed');
  }
}
