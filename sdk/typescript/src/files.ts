// Files inside a sandbox (the agent's /files endpoints). Relative paths are
// relative to the sandbox user's home, /home/user.

import { NotFoundError, SandboxGoneError } from './errors.js';
import type { HttpClient } from './http.js';
import { entryInfo, type EntryInfo, type WireEntry } from './types.js';

/** What files.write accepts. */
export type WriteData = string | Uint8Array | ArrayBuffer | Blob | ReadableStream<Uint8Array>;

/** Files reads and writes files in one sandbox: `sandbox.files`. */
export class Files {
  /** @internal */
  constructor(
    private readonly http: HttpClient,
    private readonly prefix: string,
  ) {}

  /** read returns a file's content, as UTF-8 text by default or as bytes. */
  read(path: string, opts?: { format?: 'text' }): Promise<string>;
  read(path: string, opts: { format: 'bytes' }): Promise<Uint8Array>;
  async read(path: string, opts: { format?: 'text' | 'bytes' } = {}): Promise<string | Uint8Array> {
    const bytes = await this.http.bytes('GET', `${this.prefix}/files`, { query: { path } });
    return opts.format === 'bytes' ? bytes : new TextDecoder().decode(bytes);
  }

  /**
   * write replaces a file with data, creating parent directories. A string is
   * written as UTF-8; a ReadableStream is sent as it is read.
   */
  async write(path: string, data: WriteData): Promise<EntryInfo> {
    const body = data instanceof ArrayBuffer ? new Uint8Array(data) : data;
    const w = await this.http.request<WireEntry>('PUT', `${this.prefix}/files`, {
      query: { path },
      body,
      headers: { 'content-type': 'application/octet-stream' },
    });
    return entryInfo(w);
  }

  /** list returns the entries of a directory. */
  async list(path: string): Promise<EntryInfo[]> {
    const w = await this.http.request<{ entries: WireEntry[] | null }>('GET', `${this.prefix}/files/list`, {
      query: { path },
    });
    return (w.entries ?? []).map(entryInfo);
  }

  /** remove deletes a file or a directory tree. */
  async remove(path: string): Promise<void> {
    await this.http.request<void>('DELETE', `${this.prefix}/files`, { query: { path } });
  }

  /** makeDir makes a directory and its parents. */
  async makeDir(path: string): Promise<EntryInfo> {
    return entryInfo(await this.http.request<WireEntry>('POST', `${this.prefix}/files/mkdir`, { query: { path } }));
  }

  /** stat describes one file or directory. */
  async stat(path: string): Promise<EntryInfo> {
    return entryInfo(await this.http.request<WireEntry>('GET', `${this.prefix}/files/stat`, { query: { path } }));
  }

  /**
   * exists tells whether something is at path. An ended sandbox still
   * throws SandboxGoneError rather than answering false.
   */
  async exists(path: string): Promise<boolean> {
    try {
      await this.stat(path);
      return true;
    } catch (err) {
      if (err instanceof NotFoundError && !(err instanceof SandboxGoneError)) return false;
      throw err;
    }
  }
}
