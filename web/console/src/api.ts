// The Lizard API v1 (api/openapi.yaml), called with fetch from the same
// origin. The key lives in sessionStorage and travels only in the
// Authorization header: never in a URL, a cookie or the page.

const KEY = "lizard.apiKey";

export function apiKey(): string | null {
  return sessionStorage.getItem(KEY);
}

export function setApiKey(key: string | null): void {
  if (key === null) sessionStorage.removeItem(KEY);
  else sessionStorage.setItem(KEY, key);
}

/** An API error: the HTTP status and the API's own code and message. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = "ApiError";
  }
}

/** GET /v1/health: the server is up, and its version. */
export interface Health {
  status: string;
  version?: string;
}

/** health asks the server for its version; it needs no key. */
export async function health(): Promise<Health> {
  const r = await fetch("/v1/health");
  if (!r.ok) throw new ApiError(r.status, "unavailable", `the server answered HTTP ${r.status}`);
  return (await r.json()) as Health;
}

export interface Sandbox {
  sandboxId: string;
  projectId: string;
  template: string;
  state: "starting" | "running" | "paused" | "killed" | "expired" | "failed";
  timeoutMs: number;
  metadata: Record<string, string>;
  createdAt: string;
  expiresAt?: string;
  endedAt?: string;
  /** The resources it runs with; absent when the server sets no bound. */
  memoryMb?: number;
  cpus?: number;
  diskMb?: number;
  /** The sandbox whose lizardToken created this one. */
  parentSandboxId?: string;
  /** The volumes it mounts, and where. */
  volumes?: VolumeMount[];
  /** Opens its exposed ports to whoever holds it (docs/ports.md). */
  accessToken?: string;
  /** Its ports need no credential. */
  publicPorts?: boolean;
  /** The server's wildcard domain for ports, if it has one. */
  portsDomain?: string;
  /** The Host its ports' requests carry (${PORT}: the port), when it was created with one. */
  portsHost?: string;
  network?: NetworkPolicy;
  /** Paused with its image in the image store: it outlives its node (docs/storage.md). */
  durable?: boolean;
}

/** A volume of the project mounted in a sandbox at path. */
export interface VolumeMount {
  name: string;
  path: string;
}

export interface Snapshot {
  snapshotId: string;
  sandboxId: string;
  projectId: string;
  template: string;
  createdAt: string;
  sizeBytes: number;
  /** Its image is in the image store: creates from it may run on any node. */
  durable?: boolean;
  /** Its name in the project, when it has one. */
  name?: string;
}

export interface CreateSandboxRequest {
  template?: string;
  timeoutMs?: number;
  envs?: Record<string, string>;
  metadata?: Record<string, string>;
  snapshotId?: string;
  onTimeout?: "kill" | "pause";
  memoryMb?: number;
  cpus?: number;
  diskMb?: number;
  allowInternet?: boolean;
  lizardToken?: boolean;
  volumes?: VolumeMount[];
  publicPorts?: boolean;
  /** The Host its ports' requests carry, ${PORT} the port (docs/ports.md). */
  portsHost?: string;
  network?: NetworkPolicy;
  /** false: its pauses keep the disk alone and a resume boots afresh. */
  pauseMemory?: boolean;
}

export interface Result {
  type: "result" | "display";
  mime: string;
  data: string;
}

export interface ExecutionError {
  name: string;
  message: string;
  traceback: string;
}

/** The API error a stream ends with when the sandbox stopped during the call. */
export interface Abort {
  status: number;
  code: string;
  message: string;
}

export interface ExecuteEvent {
  type: "stdout" | "stderr" | "result" | "error" | "end" | "abort";
  text?: string;
  result?: Result;
  error?: ExecutionError;
  executionCount?: number;
  abort?: Abort;
  /** Every MIME type of a result, when the request set `bundle` (the console does not). */
  bundle?: Record<string, unknown>;
}

export interface ProcessEvent {
  type: "stdout" | "stderr" | "end" | "abort";
  text?: string;
  exitCode?: number;
  error?: string;
  abort?: Abort;
}

/** A terminal's size (PtySize). */
export interface PtySize {
  cols: number;
  rows: number;
}

/** The body of POST /processes (ProcessStartRequest). */
export interface ProcessStartRequest {
  cmd?: string;
  args?: string[];
  cwd?: string;
  envs?: Record<string, string>;
  stdin?: boolean;
  pty?: PtySize;
  timeoutMs?: number;
  timeoutKills?: 'group' | 'process';
  tag?: string;
  user?: string;
}

/** A background process, running or ended (ProcessInfo). */
export interface ProcessInfo {
  pid: number;
  tag?: string;
  cmd?: string;
  args: string[];
  cwd: string;
  user: string;
  startedAt: string;
  pty?: PtySize;
  stdin: boolean;
  running: boolean;
  exitCode?: number;
  endedAt?: string;
  error?: string;
}

/** A text frame of a process's WebSocket (ProcessControl). */
export interface ProcessControl {
  type: "resize" | "eof" | "dropped" | "error" | "end";
  cols?: number;
  rows?: number;
  dropped?: number;
  exitCode?: number;
  error?: string;
}

/** One sample of GET /v1/sandboxes/{id}/metrics (SandboxMetric). */
export interface NetworkPolicy {
  default?: "allow" | "deny";
  allow?: string[];
  deny?: string[];
  ports?: number[];
  /** Headers the node sets on requests to a domain, secrets expanded there (docs/secrets.md). */
  inject?: HeaderRule[];
}

export interface HeaderRule {
  domain: string;
  headers: Record<string, string>;
}

export interface NetworkLogEntry {
  time: string;
  kind: string;
  name?: string;
  addr?: string;
  port?: number;
  allowed: boolean;
  reason?: string;
  bytesOut?: number;
  bytesIn?: number;
}

export interface SandboxMetric {
  timestamp: string;
  cpuUsedPct: number;
  cpuCount: number;
  memUsed: number;
  memTotal: number;
  diskUsed: number;
  diskTotal: number;
}

/** A custom template's recipe, as a template's record shows it (docs/templates.md). */
export interface TemplateRecipe {
  base?: string;
  /** An OCI/Docker image the template is built on instead of a built-in base; its digest is pinned. */
  from?: string;
  apt?: string[];
  pip?: string[];
  files?: TemplateFile[];
  env?: Record<string, string>;
  workdir?: string;
  run?: TemplateCommand[];
  start?: string;
  /** Exits 0 once start is ready; the template snapshot waits for it. */
  ready?: string;
  /** Steps in order after the fixed parts: each exactly one kind. */
  steps?: TemplateStep[];
}

/** A built custom template of the project (docs/templates.md). */
export interface Template {
  name: string;
  projectId: string;
  base: string;
  /** The hash of its recipe and base: a build is cached under it. */
  key: string;
  /** The digest of the image the recipe's `from` named when it was built. */
  digest?: string;
  createdAt: string;
  /** 0 when it was found in the cache. */
  buildMs: number;
  sizeBytes: number;
  recipe: TemplateRecipe;
}

/** The body of POST /v1/templates. */
export interface BuildTemplateRequest {
  name: string;
  recipe: TemplateRecipe;
  /** Credentials for the registry of the recipe's `from`, used for this build's pull only. */
  registry?: RegistryAuth;
  /** Run every step again, even when the project has a build of the recipe or of a prefix of its steps. */
  skipCache?: boolean;
}

export interface RegistryAuth {
  username: string;
  password?: string;
  /** The name of the project's secret that holds the password, instead of password. */
  passwordSecret?: string;
}

/** One line of a build's NDJSON stream; it ends with `done` or `error`. */
export interface TemplateBuildEvent {
  type: "step" | "log" | "done" | "error";
  step?: number;
  total?: number;
  name?: string;
  text?: string;
  cached?: boolean;
  template?: Template;
  code?: string;
  message?: string;
  /** The failing step's last output. */
  log?: string;
}

export interface TemplateFile {
  path: string;
  /** Base64; left out of responses. */
  content?: string;
  mode?: number;
  owner?: "user" | "root";
  size?: number;
}

export interface TemplateCommand {
  cmd: string;
  user?: "root" | "user";
}

export interface TemplateStep {
  run?: TemplateCommand;
  copy?: TemplateFile[];
  env?: Record<string, string>;
  workdir?: string;
  user?: "root" | "user";
  apt?: string[];
  pip?: string[];
  symlink?: TemplateSymlink;
  npm?: TemplateNpm;
}

export interface TemplateNpm {
  packages: string[];
  global?: boolean;
  dev?: boolean;
}

export interface TemplateSymlink {
  target: string;
  path: string;
}

/** A viewer of a desktop sandbox's stream (POST /desktop/stream), with a token of its own. */
export interface DesktopViewer {
  viewerId: string;
  token: string;
  control: boolean;
  expiresAt: string;
  websocketUrl: string;
  url: string;
}

export interface Context {
  id: string;
  language: string;
  cwd: string;
}

export interface EntryInfo {
  name: string;
  path: string;
  type: "file" | "dir" | "symlink" | "other";
  size: number;
  mode: number;
  modTime: string;
  /** The type and mode as `ls -l` shows them. */
  permissions?: string;
  owner?: string;
  group?: string;
  /** Where a symlink points; absent for other types. */
  symlinkTarget?: string;
  /** The file's metadata (its user.e2b.* extended attributes). */
  metadata?: Record<string, string>;
}

type Query = Record<string, string | string[] | undefined>;

function url(path: string, query?: Query): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query ?? {})) {
    if (v === undefined) continue;
    for (const one of Array.isArray(v) ? v : [v]) q.append(k, one);
  }
  const s = q.toString();
  return s ? `${path}?${s}` : path;
}

/** request sends one API call and throws ApiError for any non-2xx answer. */
export async function request(
  method: string,
  path: string,
  opts: { query?: Query; json?: unknown; body?: BodyInit; signal?: AbortSignal; key?: string; keepalive?: boolean } = {},
): Promise<Response> {
  const key = opts.key ?? apiKey();
  const headers: Record<string, string> = {};
  if (key) headers["Authorization"] = `Bearer ${key}`;
  let body = opts.body;
  if (opts.json !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(opts.json);
  } else if (body !== undefined) {
    headers["Content-Type"] = "application/octet-stream";
  }
  let resp: Response | undefined;
  // A GET that fails below HTTP (the browser drops requests in flight when
  // the host's network interfaces change, as they do each time a sandbox
  // is made) is tried once more; anything else might have reached the
  // server, so it is not.
  for (let attempt = 0; !resp; attempt++) {
    try {
      resp = await fetch(url(path, opts.query), { method, headers, body, signal: opts.signal, credentials: "omit", cache: "no-store", keepalive: opts.keepalive });
    } catch (e) {
      if (e instanceof DOMException && e.name === "AbortError") throw e;
      if (method === "GET" && attempt === 0) {
        await new Promise((r) => setTimeout(r, 300));
        continue;
      }
      throw new ApiError(0, "network", `The server did not answer (${String(e)}). Is lizard serve still running?`);
    }
  }
  if (!resp.ok) {
    let code = "unknown";
    let message = `${resp.status} ${resp.statusText}`;
    try {
      const e = (await resp.json()) as { code?: string; message?: string };
      if (e.code) code = e.code;
      if (e.message) message = e.message;
    } catch {
      /* not the API's JSON error (a proxy in between): keep the status line */
    }
    throw new ApiError(resp.status, code, message);
  }
  return resp;
}

async function json<T>(method: string, path: string, opts: Parameters<typeof request>[2] = {}): Promise<T> {
  const resp = await request(method, path, opts);
  return (await resp.json()) as T;
}

/** stream reads an NDJSON body, calling onEvent per line; it throws when
 * the stream ends without its last event (`end`, or what last says: the
 * run was cut off). */
export async function stream<E extends { type: string }>(resp: Response, onEvent: (e: E) => void, last = (e: E) => e.type === "end"): Promise<E> {
  if (!resp.body) throw new ApiError(0, "cut_off", "The response had no body.");
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  let end: E | undefined;
  const line = (l: string) => {
    if (!l.trim()) return;
    const e = JSON.parse(l) as E;
    if (last(e)) end = e;
    onEvent(e);
  };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value;
    let i: number;
    while ((i = buf.indexOf("\n")) >= 0) {
      line(buf.slice(0, i));
      buf = buf.slice(i + 1);
    }
  }
  line(buf);
  if (!end) throw new ApiError(0, "cut_off", "The run was cut off before it ended (connection lost, agent died or sandbox killed).");
  return end;
}

const sb = (id: string) => `/v1/sandboxes/${encodeURIComponent(id)}`;

export const api = {
  listSandboxes: (f: { state?: string[]; metadata?: string[] }, key?: string) =>
    json<{ sandboxes: Sandbox[] }>("GET", "/v1/sandboxes", { query: { state: f.state, metadata: f.metadata }, key }).then((r) => r.sandboxes),
  createSandbox: (req: CreateSandboxRequest) => json<Sandbox>("POST", "/v1/sandboxes", { json: req }),
  getSandbox: (id: string) => json<Sandbox>("GET", sb(id)),
  kill: (id: string) => request("DELETE", sb(id)).then(() => undefined),
  setTimeout: (id: string, timeoutMs: number) => json<Sandbox>("POST", `${sb(id)}/timeout`, { json: { timeoutMs } }),
  pause: (id: string) => json<Sandbox>("POST", `${sb(id)}/pause`),
  resume: (id: string) => json<Sandbox>("POST", `${sb(id)}/resume`, { json: {} }),
  fork: (id: string, count: number) => json<{ sandboxes: Sandbox[] }>("POST", `${sb(id)}/fork`, { json: { count } }).then((r) => r.sandboxes),
  snapshot: (id: string) => json<Snapshot>("POST", `${sb(id)}/snapshots`),
  listSnapshots: () => json<{ snapshots: Snapshot[] }>("GET", "/v1/snapshots").then((r) => r.snapshots),
  deleteSnapshot: (id: string) => request("DELETE", `/v1/snapshots/${encodeURIComponent(id)}`).then(() => undefined),
  listContexts: (id: string) => json<{ contexts: Context[] }>("GET", `${sb(id)}/contexts`).then((r) => r.contexts),
  createContext: (id: string, language: string) => json<Context>("POST", `${sb(id)}/contexts`, { json: { language } }),
  execute: (id: string, body: { code: string; language: string; contextId?: string }, signal: AbortSignal) =>
    request("POST", `${sb(id)}/execute`, { json: body, signal }),
  process: (id: string, cmd: string, signal: AbortSignal) => request("POST", `${sb(id)}/process`, { json: { cmd }, signal }),
  listDir: (id: string, path: string) => json<{ entries: EntryInfo[] }>("GET", `${sb(id)}/files/list`, { query: { path } }).then((r) => r.entries),
  readFile: (id: string, path: string) => request("GET", `${sb(id)}/files`, { query: { path } }).then((r) => r.blob()),
  writeFile: (id: string, path: string, body: Blob) => json<EntryInfo>("PUT", `${sb(id)}/files`, { query: { path }, body }),
  removeFile: (id: string, path: string) => request("DELETE", `${sb(id)}/files`, { query: { path } }).then(() => undefined),
  makeDir: (id: string, path: string) => json<EntryInfo>("POST", `${sb(id)}/files/mkdir`, { query: { path } }),
  startProcess: (id: string, req: ProcessStartRequest) => json<ProcessInfo>("POST", `${sb(id)}/processes`, { json: req }),
  listProcesses: (id: string) => json<{ processes: ProcessInfo[] }>("GET", `${sb(id)}/processes`).then((r) => r.processes),
  getProcess: (id: string, pid: number) => json<ProcessInfo>("GET", `${sb(id)}/processes/${pid}`),
  signal: (id: string, pid: number, signal: string) => request("POST", `${sb(id)}/processes/${pid}/signal`, { json: { signal } }).then(() => undefined),
  metrics: (id: string) => json<{ metrics: SandboxMetric[] }>("GET", `${sb(id)}/metrics`).then((r) => r.metrics),
  listTemplates: () => json<{ templates: Template[] }>("GET", "/v1/templates").then((r) => r.templates),
  getTemplate: (name: string) => json<Template>("GET", `/v1/templates/${encodeURIComponent(name)}`),
  deleteTemplate: (name: string) => request("DELETE", `/v1/templates/${encodeURIComponent(name)}`).then(() => undefined),
  /** The build's events stream as they come (stream(resp, ..., done or error)); leaving cancels it. */
  buildTemplate: (req: BuildTemplateRequest, signal: AbortSignal) => request("POST", "/v1/templates", { json: req, signal }),
  startDesktopStream: (id: string, control: boolean) => json<DesktopViewer>("POST", `${sb(id)}/desktop/stream`, { json: { control } }),
  /** keepalive: sent even as the page closes. */
  revokeDesktopViewer: (id: string, viewerId: string) =>
    request("DELETE", `${sb(id)}/desktop/stream/viewers/${encodeURIComponent(viewerId)}`, { keepalive: true }).then(() => undefined),
  networkLog: (id: string) => json<{ entries: NetworkLogEntry[] }>("GET", `${sb(id)}/network/log`).then((r) => r.entries),
};

/** The subprotocols that carry the key on a process's WebSocket, which a
 * browser cannot give an Authorization header (docs/console.md). */
export function socketProtocols(): string[] {
  return ["lizard", `lizard.bearer.${apiKey() ?? ""}`];
}

/** The URL of a process's WebSocket on this origin. */
export function processSocketURL(id: string, pid: number): string {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}${sb(id)}/processes/${pid}/ws`;
}

/** The URL of a desktop's stream on this origin, opened with a viewer's token alone (docs/desktop.md). */
export function desktopSocketURL(id: string, token: string): string {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}${sb(id)}/desktop/stream/websocket?${new URLSearchParams({ token })}`;
}
