// The HTTP layer: configuration, one request with its timeout and error
// mapping, and the NDJSON line reader the streaming endpoints use.

import {
  AuthenticationError,
  InvalidArgumentError,
  LizardConnectionError,
  LizardError,
  RequestTimeoutError,
  SandboxError,
  errorFromResponse,
} from './errors.js';

export const DEFAULT_API_URL = 'http://127.0.0.1:8080';
/** Default timeout of one HTTP request that does not run code. */
export const DEFAULT_REQUEST_TIMEOUT_MS = 60_000;
/**
 * How much longer than its own timeout a call that runs code may take over
 * HTTP: the agent's interrupt and TimeoutError event must arrive first.
 */
export const STREAM_TIMEOUT_MARGIN_MS = 30_000;

/** streamTimeout is the HTTP timeout of a stream whose work is bounded by timeoutMs (0 or none: no bound). */
export function streamTimeout(timeoutMs: number | undefined): number {
  return timeoutMs ? timeoutMs + STREAM_TIMEOUT_MARGIN_MS : 0;
}

/** How to reach the Lizard API. Explicit options win over the environment. */
export interface ConnectionOptions {
  /** API key; defaults to the LIZARD_API_KEY environment variable. */
  apiKey?: string;
  /** Base URL of the API; defaults to LIZARD_API_URL, then http://127.0.0.1:8080. */
  apiUrl?: string;
  /**
   * Timeout of each HTTP request, in milliseconds (default 60 000; create
   * 900 000; 0 means none). Calls that run code are bounded instead by
   * their own timeout plus 30 s, so the code's timeout fires first.
   */
  requestTimeoutMs?: number;
}

export interface ConnectionConfig {
  apiKey: string;
  apiUrl: string;
  requestTimeoutMs: number;
}

/** resolveConfig applies the precedence: explicit option, environment, default. */
export function resolveConfig(opts: ConnectionOptions = {}): ConnectionConfig {
  const apiKey = opts.apiKey || process.env.LIZARD_API_KEY;
  if (!apiKey) {
    throw new AuthenticationError('no API key: set LIZARD_API_KEY or pass apiKey');
  }
  const apiUrl = (opts.apiUrl || process.env.LIZARD_API_URL || DEFAULT_API_URL).replace(/\/+$/, '');
  const requestTimeoutMs = opts.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
  if (!Number.isFinite(requestTimeoutMs) || requestTimeoutMs < 0) {
    throw new InvalidArgumentError(`requestTimeoutMs must be a number of milliseconds >= 0, got ${requestTimeoutMs}`);
  }
  return { apiKey, apiUrl, requestTimeoutMs };
}

export type Query = Record<string, string | string[] | undefined>;

export interface RequestOptions {
  query?: Query;
  /** A JSON body (serialized here) or a raw body passed to fetch as is. */
  json?: unknown;
  body?: string | Uint8Array | Blob | ReadableStream<Uint8Array>;
  /** Overall timeout of the request including reading its body; 0 = none. */
  timeoutMs?: number;
  headers?: Record<string, string>;
  /** Aborts the request, and the reading of its body, when it fires. */
  signal?: AbortSignal;
}

/**
 * A Response whose body is still to be read, and the hook that ends its
 * timeout: callers must call done() once they have consumed the body.
 */
export interface OpenResponse {
  response: Response;
  /** Reads the body, mapping a timeout or a broken connection to typed errors. */
  reader(): AsyncGenerator<Uint8Array>;
  done(): void;
}

/** HttpClient sends requests to one Lizard API with one key. */
export class HttpClient {
  constructor(readonly config: ConnectionConfig) {}

  url(path: string, query?: Query): string {
    const u = new URL(this.config.apiUrl + path);
    for (const [k, v] of Object.entries(query ?? {})) {
      if (v === undefined) continue;
      for (const item of Array.isArray(v) ? v : [v]) u.searchParams.append(k, item);
    }
    return u.toString();
  }

  /**
   * open sends a request and returns once the response headers are in. A
   * non-2xx status is thrown as a typed error; the timeout keeps running
   * until done() so that it also bounds reading a streamed body.
   */
  async open(method: string, path: string, opts: RequestOptions = {}): Promise<OpenResponse> {
    const timeoutMs = opts.timeoutMs ?? this.config.requestTimeoutMs;
    const controller = new AbortController();
    let timedOut = false;
    const timer =
      timeoutMs > 0
        ? setTimeout(() => {
            timedOut = true;
            controller.abort();
          }, timeoutMs)
        : undefined;
    const unlink = linkSignal(opts.signal, controller);
    const done = () => {
      clearTimeout(timer);
      unlink();
    };
    const describe = `${method} ${path}`;
    const failure = (err: unknown): LizardError => {
      if (err instanceof LizardError) return err;
      if (timedOut) return new RequestTimeoutError(`${describe}: no complete answer within ${timeoutMs} ms`, { cause: err });
      return new LizardConnectionError(
        `cannot reach Lizard at ${this.config.apiUrl} (${describe}: ${causeText(err)}); is \`lizard serve\` running? ` +
          'Set LIZARD_API_URL or pass apiUrl',
        { cause: err },
      );
    };

    const headers: Record<string, string> = { authorization: `Bearer ${this.config.apiKey}`, ...traceContext(), ...opts.headers };
    let body: RequestInit['body'];
    const init: RequestInit & { duplex?: 'half' } = { method, headers, signal: controller.signal };
    if (opts.json !== undefined) {
      headers['content-type'] = 'application/json';
      body = JSON.stringify(opts.json);
    } else if (opts.body !== undefined) {
      headers['content-type'] ??= 'application/octet-stream';
      body = opts.body as RequestInit['body'];
      // A stream body needs half duplex in Node's fetch.
      if (typeof (opts.body as ReadableStream).getReader === 'function') init.duplex = 'half';
    }
    init.body = body;

    let response: Response;
    try {
      response = await fetch(this.url(path, opts.query), init);
    } catch (err) {
      done();
      throw failure(err);
    }
    if (!response.ok) {
      let text = '';
      try {
        text = await response.text();
      } catch (err) {
        if (timedOut) {
          done();
          throw failure(err);
        }
      }
      done();
      throw errorFromResponse(response.status, text);
    }
    async function* reader(): AsyncGenerator<Uint8Array> {
      if (!response.body) return;
      const r = response.body.getReader();
      try {
        for (;;) {
          let chunk: Awaited<ReturnType<typeof r.read>>;
          try {
            chunk = await r.read();
          } catch (err) {
            throw failure(err);
          }
          if (chunk.done) return;
          yield chunk.value;
        }
      } finally {
        // Stop the download when the caller gives up early.
        r.cancel().catch(() => {});
        r.releaseLock();
      }
    }
    return { response, reader, done };
  }

  /** request sends a request and returns its JSON body (undefined for 204). */
  async request<T>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
    const open = await this.open(method, path, opts);
    try {
      const bytes = await readAll(open.reader());
      if (open.response.status === 204 || bytes.length === 0) return undefined as T;
      const text = new TextDecoder().decode(bytes);
      try {
        return JSON.parse(text) as T;
      } catch (err) {
        throw new SandboxError(`${method} ${path}: invalid JSON in the response: ${text.slice(0, 200)}`, {
          status: open.response.status,
          cause: err,
        });
      }
    } finally {
      open.done();
    }
  }

  /** bytes sends a request and returns its raw body. */
  async bytes(method: string, path: string, opts: RequestOptions = {}): Promise<Uint8Array> {
    const open = await this.open(method, path, opts);
    try {
      return await readAll(open.reader());
    } finally {
      open.done();
    }
  }

  /**
   * stream sends a request whose answer is NDJSON and yields one parsed
   * object per line as the lines arrive.
   */
  async *stream<T>(method: string, path: string, opts: RequestOptions = {}): AsyncGenerator<T> {
    const open = await this.open(method, path, opts);
    try {
      for await (const line of ndjsonLines(open.reader())) {
        let value: T;
        try {
          value = JSON.parse(line) as T;
        } catch (err) {
          throw new SandboxError(`${method} ${path}: invalid line in the stream: ${line.slice(0, 200)}`, { cause: err });
        }
        yield value;
      }
    } finally {
      open.done();
    }
  }
}

/**
 * ndjsonLines splits a byte stream into text lines. Chunks may end anywhere,
 * even inside a multi-byte character; empty lines are skipped and a last line
 * without a newline still counts.
 */
export async function* ndjsonLines(chunks: AsyncIterable<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let buf = '';
  for await (const chunk of chunks) {
    buf += decoder.decode(chunk, { stream: true });
    let nl: number;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl).replace(/\r$/, '');
      buf = buf.slice(nl + 1);
      if (line.trim() !== '') yield line;
    }
  }
  buf += decoder.decode();
  if (buf.trim() !== '') yield buf.replace(/\r$/, '');
}

async function readAll(chunks: AsyncIterable<Uint8Array>): Promise<Uint8Array> {
  const parts: Uint8Array[] = [];
  let n = 0;
  for await (const c of chunks) {
    parts.push(c);
    n += c.length;
  }
  const out = new Uint8Array(n);
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.length;
  }
  return out;
}

function causeText(err: unknown): string {
  const cause = (err as { cause?: { code?: string; message?: string } })?.cause;
  if (cause?.code) return cause.code;
  if (cause?.message) return cause.message;
  return err instanceof Error ? err.message : String(err);
}

/** linkSignal aborts controller when signal fires; the returned function unlinks them. */
function linkSignal(signal: AbortSignal | undefined, controller: AbortController): () => void {
  if (!signal) return () => {};
  if (signal.aborted) {
    controller.abort();
    return () => {};
  }
  const abort = () => controller.abort();
  signal.addEventListener('abort', abort, { once: true });
  return () => signal.removeEventListener('abort', abort);
}

/** What traceContext reads of the global the OpenTelemetry API (`@opentelemetry/api` 1.x) registers. */
interface OTelGlobal {
  context?: { active(): unknown };
  propagation?: {
    inject(context: unknown, carrier: Record<string, string>, setter: { set(c: Record<string, string>, k: string, v: string): void }): void;
  };
}

/**
 * traceContext is the caller's W3C trace context (`traceparent`, `tracestate`) when the calling program uses
 * OpenTelemetry: a request carrying it continues the caller's trace through Lizard (docs/traces.md). It is
 * read from the global that `@opentelemetry/api` registers its context manager and propagator in, so the SDK
 * neither depends on nor imports the package; without it, or with no active span, it is empty.
 */
export function traceContext(): Record<string, string> {
  const api = (globalThis as Record<symbol, unknown>)[Symbol.for('opentelemetry.js.api.1')] as OTelGlobal | undefined;
  if (api?.context === undefined || api.propagation === undefined) return {};
  const carrier: Record<string, string> = {};
  try {
    api.propagation.inject(api.context.active(), carrier, { set: (c, k, v) => { c[k] = v; } });
  } catch {
    return {}; // a broken propagator must not break the call
  }
  const out: Record<string, string> = {};
  for (const k of ['traceparent', 'tracestate']) if (carrier[k] !== undefined) out[k] = carrier[k];
  return out;
}
