// Errors thrown by the SDK. They mirror the Python SDK's hierarchy
// (docs/sdk-errors.md): one class per kind of request failure, chosen by the
// HTTP status, with the server's {"code", "message"} body as code and message.
//
// Errors raised by the code a sandbox runs are never thrown: they come back in
// Execution.error (see SPEC S6).

/** Base class of every error the SDK throws. */
export class LizardError extends Error {
  /** HTTP status of the failed response, when there was one. */
  readonly status?: number;
  /** Server error code such as "not_found", when the server sent one. */
  readonly code?: string;

  constructor(message: string, options?: { status?: number; code?: string; cause?: unknown }) {
    super(message, options?.cause !== undefined ? { cause: options.cause } : undefined);
    this.name = new.target.name;
    this.status = options?.status;
    this.code = options?.code;
  }
}

/** The API key is missing, wrong or revoked (401). */
export class AuthenticationError extends LizardError {}

/**
 * The key may not do this whatever the request says (403 forbidden): a key
 * minted for a sandbox (lizardToken) asking for what only a project key may,
 * such as setting or listing secrets or widening a network policy.
 */
export class PermissionDeniedError extends LizardError {}

/** The sandbox, context or file does not exist (404). */
export class NotFoundError extends LizardError {}

/** The sandbox existed but has ended: killed, expired or failed (410). */
export class SandboxGoneError extends NotFoundError {}

/** The request conflicts with the sandbox's state, such as resuming a running sandbox (409). */
export class ConflictError extends LizardError {}

/** Too many requests or sandboxes (429). */
export class RateLimitError extends LizardError {}

/** The request was malformed or too large (400, 413). */
export class InvalidArgumentError extends LizardError {}

/** The server or the sandbox failed (5xx), or a stream ended without its "end" event. */
export class SandboxError extends LizardError {}

/**
 * The server's disk is full (507 disk_full): running sandboxes go on, but
 * nothing that needs more disk (create, fork, snapshot, pause, volume) can be
 * done until the operator frees space; retry then.
 */
export class DiskFullError extends SandboxError {}

/** The server could not be reached, or the connection broke mid-response. */
export class LizardConnectionError extends LizardError {}

/** The HTTP request took longer than its timeout (not the code's timeout: see Execution.error). */
export class RequestTimeoutError extends LizardError {}

/**
 * A template build failed after it began: step is the step that failed and
 * log its last output (code "invalid_argument": fix the recipe), or the
 * server failed (another code).
 */
export class TemplateBuildError extends LizardError {
  readonly step?: string;
  readonly log?: string;

  constructor(message: string, options?: { code?: string; step?: string; log?: string }) {
    super(message, { code: options?.code });
    this.step = options?.step;
    this.log = options?.log;
  }
}

type ErrorClass = new (message: string, options?: { status?: number; code?: string }) => LizardError;

function classForStatus(status: number): ErrorClass {
  switch (status) {
    case 400:
    case 413:
      return InvalidArgumentError;
    case 401:
      return AuthenticationError;
    case 403:
      return PermissionDeniedError;
    case 404:
      return NotFoundError;
    case 409:
      return ConflictError;
    case 410:
      return SandboxGoneError;
    case 429:
      return RateLimitError;
    case 507:
      return DiskFullError;
  }
  return status >= 500 && status <= 599 ? SandboxError : LizardError;
}

/**
 * errorFromResponse maps a failed response to a typed error. The HTTP status
 * decides the class (a proxy in between may answer without the JSON body);
 * the body gives the code and the message.
 */
export function errorFromResponse(status: number, bodyText: string): LizardError {
  let code: string | undefined;
  let message: string | undefined;
  try {
    const body = JSON.parse(bodyText) as { code?: unknown; message?: unknown };
    if (typeof body?.code === 'string') code = body.code;
    if (typeof body?.message === 'string') message = body.message;
  } catch {
    // Not JSON: a proxy or a crash answered.
  }
  if (message === undefined) {
    const head = new TextDecoder().decode(new TextEncoder().encode(bodyText).slice(0, 200));
    message = `HTTP ${status}: ${head}`;
  }
  const cls = classForStatus(status);
  return new cls(message, { status, code });
}

/**
 * errorFromAbort is the typed error an NDJSON stream ended with: its "abort"
 * event, sent when the sandbox stopped during the call (410 gone:
 * SandboxGoneError naming why), as if the request had failed before it began.
 */
export function errorFromAbort(abort: { status?: unknown; code?: unknown; message?: unknown } | undefined): LizardError {
  const status = typeof abort?.status === 'number' ? abort.status : 410;
  return errorFromResponse(status, JSON.stringify({ code: abort?.code, message: abort?.message ?? 'the sandbox stopped during the call' }));
}
