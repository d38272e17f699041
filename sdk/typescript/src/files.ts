// Files inside a sandbox (the agent's /files endpoints). Relative paths are
// relative to the sandbox user's home, /home/user.

import { InvalidArgumentError, NotFoundError, SandboxError, SandboxGoneError, errorFromAbort } from './errors.js';
import { ndjsonLines, type HttpClient } from './http.js';
import { entryInfo, type Abort, type EntryInfo, type FilesystemEvent, type WireEntry } from './types.js';

/**
 * What files.write accepts. A ReadableStream or an AsyncIterable is sent as
 * it is read, so a file of any size passes through a few chunks at a time.
 */
export type WriteData = string | Uint8Array | ArrayBuffer | Blob | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>;

/**
 * Who a file call acts as: the sandbox user ('user', the default) or 'root'.
 * A call may do what its user may (writing under /etc as the sandbox user
 * throws InvalidArgumentError saying permission was denied), and what it
 * makes belongs to its user.
 */
export type FileUser = 'user' | 'root';

/** The option every file call takes. */
export interface FileOptions {
  /** Who the call acts as; default the sandbox user. */
  user?: FileUser;
}

/** fileQuery is a file call's query: its path, its user when one is named, and extra. */
function fileQuery(path: string, opts: FileOptions | undefined, extra: Record<string, string> = {}): Record<string, string> {
  const q: Record<string, string> = { path };
  const user = opts?.user;
  if (user !== undefined) {
    if (user !== 'user' && user !== 'root') {
      throw new InvalidArgumentError(`user must be 'user' (the sandbox user) or 'root', not ${JSON.stringify(user)}`);
    }
    q.user = user;
  }
  return { ...q, ...extra };
}

/** Options of files.write and of a streamed files.read. */
export interface TransferOptions extends FileOptions {
  /**
   * Bound on the whole transfer in ms; 0 = none. Default: none for a stream
   * (a large file takes as long as it takes), the request timeout otherwise.
   */
  timeoutMs?: number;
}

/** Options of files.write. */
export interface WriteOptions extends TransferOptions {
  /**
   * The file's metadata, kept with it as its extended attributes
   * (user.e2b.<key>) and shown as EntryInfo.metadata; a file written again
   * keeps only that write's.
   */
  metadata?: Record<string, string>;
}

/** Options of files.watchDir. */
export interface WatchOptions extends FileOptions {
  /** Also watch every directory below, including those made later. */
  recursive?: boolean;
  /** Give each create, write and chmod event the file's entry (FilesystemEvent.entry). */
  includeEntry?: boolean;
  /** Called once the watch has ended: with undefined after stop() or when the directory was removed, else with the error (SandboxGoneError when the sandbox ended). */
  onExit?: (err?: Error) => void | Promise<void>;
}

/** A running files.watchDir; stop() ends it. */
export interface WatchHandle {
  stop(): Promise<void>;
}

/** toStream makes a ReadableStream of an AsyncIterable, reading it as the stream is read. */
function toStream(it: AsyncIterable<Uint8Array>): ReadableStream<Uint8Array> {
  const iter = it[Symbol.asyncIterator]();
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      const { value, done } = await iter.next();
      if (done) controller.close();
      else controller.enqueue(value);
    },
    async cancel() {
      await iter.return?.();
    },
  });
}

/** Files reads and writes files in one sandbox: `sandbox.files`. */
export class Files {
  /** @internal */
  constructor(
    private readonly http: HttpClient,
    private readonly prefix: string,
  ) {}

  /**
   * read returns a file's content: as UTF-8 text by default, as bytes, or
   * (format 'stream') as a ReadableStream that holds a few chunks of it at a
   * time. A missing file throws here, before the stream is returned.
   */
  read(path: string, opts?: { format?: 'text' } & FileOptions): Promise<string>;
  read(path: string, opts: { format: 'bytes' } & FileOptions): Promise<Uint8Array>;
  read(path: string, opts: { format: 'stream' } & TransferOptions): Promise<ReadableStream<Uint8Array>>;
  async read(
    path: string,
    opts: { format?: 'text' | 'bytes' | 'stream' } & TransferOptions = {},
  ): Promise<string | Uint8Array | ReadableStream<Uint8Array>> {
    if (opts.format === 'stream') {
      const open = await this.http.open('GET', `${this.prefix}/files`, { query: fileQuery(path, opts), timeoutMs: opts.timeoutMs ?? 0 });
      const chunks = open.reader();
      return new ReadableStream<Uint8Array>({
        async pull(controller) {
          try {
            const { value, done } = await chunks.next();
            if (done) {
              open.done();
              controller.close();
            } else controller.enqueue(value);
          } catch (err) {
            open.done();
            controller.error(err);
          }
        },
        async cancel() {
          await chunks.return(undefined);
          open.done();
        },
      });
    }
    const bytes = await this.http.bytes('GET', `${this.prefix}/files`, { query: fileQuery(path, opts) });
    return opts.format === 'bytes' ? bytes : new TextDecoder().decode(bytes);
  }

  /**
   * write replaces a file with data, creating parent directories. A string is
   * written as UTF-8; a ReadableStream or AsyncIterable is sent as it is
   * read. The file appears whole once all of it is written.
   */
  async write(path: string, data: WriteData, opts: WriteOptions = {}): Promise<EntryInfo> {
    let body: string | Uint8Array | Blob | ReadableStream<Uint8Array>;
    if (data instanceof ArrayBuffer) body = new Uint8Array(data);
    else if (typeof data === 'string' || data instanceof Uint8Array || data instanceof Blob || data instanceof ReadableStream) body = data;
    else body = toStream(data);
    const streamed = body instanceof ReadableStream;
    const metadata = Object.fromEntries(Object.entries(opts.metadata ?? {}).map(([k, v]) => [`metadata[${k}]`, v]));
    const w = await this.http.request<WireEntry>('PUT', `${this.prefix}/files`, {
      query: fileQuery(path, opts, metadata),
      body,
      headers: { 'content-type': 'application/octet-stream' },
      timeoutMs: opts.timeoutMs ?? (streamed ? 0 : undefined),
    });
    return entryInfo(w);
  }

  /** rename moves a file or directory, as rename(2): a file at newPath is replaced. It returns the entry at its new path. */
  async rename(oldPath: string, newPath: string, opts?: FileOptions): Promise<EntryInfo> {
    return entryInfo(
      await this.http.request<WireEntry>('POST', `${this.prefix}/files/rename`, { query: fileQuery(oldPath, opts, { to: newPath }) }),
    );
  }

  /** getInfo describes a file or directory (owner, group, permissions, symlink target...); the same as stat. */
  async getInfo(path: string, opts?: FileOptions): Promise<EntryInfo> {
    return this.stat(path, opts);
  }

  /**
   * watchDir calls onEvent with each change under directory path. It
   * resolves once the watch is in place: every change after that is
   * reported. The watch ends with stop(), when the directory is removed,
   * or when the sandbox ends (onExit gets SandboxGoneError). A missing
   * directory rejects with NotFoundError, a file with InvalidArgumentError.
   */
  async watchDir(
    path: string,
    onEvent: (event: FilesystemEvent) => void | Promise<void>,
    opts: WatchOptions = {},
  ): Promise<WatchHandle> {
    const stopper = new AbortController();
    const open = await this.http.open('GET', `${this.prefix}/files/watch`, {
      query: fileQuery(path, opts, {
        recursive: opts.recursive ? 'true' : 'false',
        ...(opts.includeEntry ? { includeEntry: 'true' } : {}),
      }),
      timeoutMs: 0,
      signal: stopper.signal,
    });
    const run = (async () => {
      let failure: Error | undefined;
      try {
        for await (const line of ndjsonLines(open.reader())) {
          let ev: { type?: string; name?: string; time?: string; abort?: Abort; entry?: WireEntry };
          try {
            ev = JSON.parse(line);
          } catch (err) {
            throw new SandboxError(`watching ${path}: invalid line in the stream: ${line.slice(0, 200)}`, { cause: err });
          }
          if (ev.type === 'abort') throw errorFromAbort(ev.abort);
          if (!ev.type) continue;
          await onEvent({ type: ev.type, name: ev.name ?? '', time: new Date(ev.time ?? 0), entry: ev.entry ? entryInfo(ev.entry) : undefined });
        }
      } catch (err) {
        if (!stopper.signal.aborted) failure = err instanceof Error ? err : new Error(String(err));
      } finally {
        open.done();
      }
      await opts.onExit?.(failure);
    })();
    return {
      async stop() {
        stopper.abort();
        await run;
      },
    };
  }

  /** list returns the entries of a directory. */
  async list(path: string, opts?: FileOptions): Promise<EntryInfo[]> {
    const w = await this.http.request<{ entries: WireEntry[] | null }>('GET', `${this.prefix}/files/list`, {
      query: fileQuery(path, opts),
    });
    return (w.entries ?? []).map(entryInfo);
  }

  /** remove deletes a file or a directory tree. */
  async remove(path: string, opts?: FileOptions): Promise<void> {
    await this.http.request<void>('DELETE', `${this.prefix}/files`, { query: fileQuery(path, opts) });
  }

  /** makeDir makes a directory and its parents. */
  async makeDir(path: string, opts?: FileOptions): Promise<EntryInfo> {
    return entryInfo(await this.http.request<WireEntry>('POST', `${this.prefix}/files/mkdir`, { query: fileQuery(path, opts) }));
  }

  /** stat describes one file or directory. */
  async stat(path: string, opts?: FileOptions): Promise<EntryInfo> {
    return entryInfo(await this.http.request<WireEntry>('GET', `${this.prefix}/files/stat`, { query: fileQuery(path, opts) }));
  }

  /**
   * exists tells whether something is at path. An ended sandbox still
   * throws SandboxGoneError rather than answering false.
   */
  async exists(path: string, opts?: FileOptions): Promise<boolean> {
    try {
      await this.stat(path, opts);
      return true;
    } catch (err) {
      if (err instanceof NotFoundError && !(err instanceof SandboxGoneError)) return false;
      throw err;
    }
  }
}
