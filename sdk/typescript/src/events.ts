// Events: the project's sandbox lifecycle events (docs/events.md), as pages
// and as a live follow.
//
//   const stream = await Events.follow({ metadata: { user: 'alice' } });
//   for await (const ev of stream) console.log(ev.type, ev.sandboxId);

import { HttpClient, ndjsonLines, resolveConfig, type ConnectionOptions, type OpenResponse, type Query } from './http.js';
import { SandboxError } from './errors.js';

/** One lifecycle event of a sandbox. */
export interface SandboxEvent {
  /** Grows in the order events are recorded: pass the last seen as `after` to resume. */
  id: number;
  /** What happened, such as 'sandbox.created', 'sandbox.paused', 'sandbox.killed'. */
  type: string;
  time: Date;
  projectId: string;
  sandboxId: string;
  /** The sandbox's metadata when it happened. */
  metadata: Record<string, string>;
  /** What else it says, in the API's names: state, reason, template, snapshotId, forkedFrom, sandboxIds, node... */
  data: Record<string, unknown>;
}

/** One page of events, oldest first: pass `next` as `after` for the following page while `hasMore`. */
export interface EventPage {
  events: SandboxEvent[];
  next: number;
  hasMore: boolean;
}

export interface WireEvent {
  id: number;
  type: string;
  time: string;
  projectId: string;
  sandboxId: string;
  metadata: Record<string, string> | null;
  data: Record<string, unknown> | null;
}

interface WireEventList {
  events: WireEvent[] | null;
  next: number;
  hasMore: boolean;
}

export interface EventFilter extends ConnectionOptions {
  sandboxId?: string;
  /** Only events of these types. */
  types?: string[];
  /** Only events of sandboxes whose metadata had every pair. */
  metadata?: Record<string, string>;
  /** Only events after this ID (for follow: replay from it; else from now). */
  after?: number;
}

export interface ListEventsOptions extends EventFilter {
  /** Page size, 1 to 1000 (default 100). */
  limit?: number;
}

function sandboxEvent(w: WireEvent): SandboxEvent {
  return {
    id: w.id,
    type: w.type,
    time: new Date(w.time),
    projectId: w.projectId,
    sandboxId: w.sandboxId,
    metadata: w.metadata ?? {},
    data: w.data ?? {},
  };
}

function query(opts: ListEventsOptions, follow: boolean): Query {
  return {
    sandbox: opts.sandboxId,
    type: opts.types,
    metadata: Object.entries(opts.metadata ?? {}).map(([k, v]) => `${k}=${v}`),
    after: opts.after === undefined ? undefined : String(opts.after),
    limit: opts.limit === undefined ? undefined : String(opts.limit),
    follow: follow ? '1' : undefined,
  };
}

/** A live follow of events (Events.follow): iterate it with `for await`; close() ends it. */
export class EventStream implements AsyncIterable<SandboxEvent> {
  /** The ID of the last event yielded: Events.follow({ after: stream.last }) resumes without a gap. */
  last: number;

  constructor(
    private readonly open: OpenResponse,
    private readonly controller: AbortController,
    after: number,
  ) {
    this.last = after;
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<SandboxEvent> {
    try {
      for await (const line of ndjsonLines(this.open.reader())) {
        let w: WireEvent;
        try {
          w = JSON.parse(line) as WireEvent;
        } catch (err) {
          throw new SandboxError(`GET /v1/events: invalid line in the stream: ${line.slice(0, 200)}`, { cause: err });
        }
        this.last = w.id;
        yield sandboxEvent(w);
      }
    } catch (err) {
      if (this.controller.signal.aborted) return; // closed: the normal end of a follow
      throw err;
    } finally {
      this.open.done();
    }
  }

  /** close stops following; an iteration in progress ends. */
  close(): void {
    this.controller.abort();
    this.open.done();
  }
}

/** The key's project's sandbox lifecycle events. */
export class Events {
  /** list returns one page of events, oldest first, filtered by sandbox, types and metadata (all must match). */
  static async list(opts: ListEventsOptions = {}): Promise<EventPage> {
    const http = new HttpClient(resolveConfig(opts));
    const w = await http.request<WireEventList>('GET', '/v1/events', { query: query(opts, false) });
    return { events: (w.events ?? []).map(sandboxEvent), next: w.next, hasMore: w.hasMore };
  }

  /**
   * follow starts following events as they are recorded (from now, or after
   * `after`); the server follows once the promise resolves. The stream never
   * ends by itself: close() it when done.
   */
  static async follow(opts: EventFilter = {}): Promise<EventStream> {
    const http = new HttpClient(resolveConfig(opts));
    const controller = new AbortController();
    const open = await http.open('GET', '/v1/events', { query: query(opts, true), timeoutMs: 0, signal: controller.signal });
    return new EventStream(open, controller, opts.after ?? 0);
  }
}
