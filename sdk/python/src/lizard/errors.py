"""Exceptions raised by the Lizard SDK.

The hierarchy mirrors the TypeScript SDK; docs/sdk-errors.md is the shared description. Errors raised by
the user's code are never exceptions: they are ``Execution.error``.
"""

from __future__ import annotations

import builtins
import json
from typing import Dict, Optional, Type

__all__ = [
    "LizardError",
    "AuthenticationError",
    "PermissionDeniedError",
    "InvalidArgumentError",
    "NotFoundError",
    "SandboxGoneError",
    "ConflictError",
    "RateLimitError",
    "SandboxError",
    "DiskFullError",
    "LizardConnectionError",
    "RequestTimeoutError",
    "TemplateBuildError",
]


class LizardError(Exception):
    """Base class of every exception the SDK raises.

    Attributes:
        message: a human-readable message, the server's when it sent one.
        status: the HTTP status, or None when no response was received.
        code: the server's error code (such as ``"not_found"``), or None.
    """

    def __init__(self, message: str, *, status: Optional[int] = None, code: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, status={self.status!r}, code={self.code!r})"


class AuthenticationError(LizardError):
    """The API key is missing, unknown or revoked (HTTP 401)."""


class PermissionDeniedError(LizardError):
    """The key may not do this whatever the request says (HTTP 403 ``forbidden``): a key minted for a sandbox
    (``lizardToken``) asking for what only a project key may, such as setting or listing secrets or widening
    a network policy."""


class InvalidArgumentError(LizardError):
    """The request was rejected as malformed or too large (HTTP 400 and 413), or failed a client-side check."""


class NotFoundError(LizardError):
    """The sandbox, context or file does not exist (HTTP 404)."""


class SandboxGoneError(NotFoundError):
    """The sandbox existed but has ended: killed, expired or failed (HTTP 410)."""


class ConflictError(LizardError):
    """The request conflicts with the resource's state (HTTP 409)."""


class RateLimitError(LizardError):
    """Too many requests or sandboxes for the project (HTTP 429)."""


class SandboxError(LizardError):
    """The server or the sandbox failed (HTTP 5xx), or a response stream ended early."""


class DiskFullError(SandboxError):
    """The server's disk is full (HTTP 507 ``disk_full``): running sandboxes go on, but nothing that needs more
    disk (create, fork, snapshot, pause, volume) can be done until the operator frees space; retry then."""


class LizardConnectionError(LizardError, builtins.ConnectionError):
    """The Lizard server could not be reached, or the connection broke during a response."""


class TemplateBuildError(LizardError):
    """A template build failed after it began: ``step`` is the step that failed and ``log`` its last
    output (``code`` ``"invalid_argument"``: fix the recipe), or the server failed (another code).

    Attributes:
        step: the name of the failing step, or None.
        log: the failing step's last output, or None.
    """

    def __init__(self, message: str, *, code: Optional[str] = None, step: Optional[str] = None,
                 log: Optional[str] = None) -> None:
        super().__init__(message, status=None, code=code)
        self.step = step
        self.log = log


class RequestTimeoutError(LizardError):
    """The HTTP request took longer than its timeout. A slow cell is not this: see ``Execution.error``."""


_BY_STATUS: Dict[int, Type[LizardError]] = {
    400: InvalidArgumentError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    410: SandboxGoneError,
    413: InvalidArgumentError,
    429: RateLimitError,
    507: DiskFullError,
}


def error_from_response(status: int, body: bytes) -> LizardError:
    """Build the typed error for a non-2xx response with the given status and body."""
    code: Optional[str] = None
    message: Optional[str] = None
    try:
        parsed = json.loads(body)
        if isinstance(parsed, dict):
            if isinstance(parsed.get("code"), str):
                code = parsed["code"]
            if isinstance(parsed.get("message"), str):
                message = parsed["message"]
    except ValueError:
        pass
    if not message:
        text = body[:200].decode("utf-8", "replace").strip()
        message = f"HTTP {status}: {text}" if text else f"HTTP {status}"
    cls = _BY_STATUS.get(status)
    if cls is None:
        cls = SandboxError if status >= 500 else LizardError
    return cls(message, status=status, code=code)


def error_from_abort(abort: object) -> LizardError:
    """Build the typed error an NDJSON stream ended with: its "abort" event, sent when the
    sandbox stopped during the call (410 gone: SandboxGoneError naming why)."""
    if not isinstance(abort, dict):
        return SandboxGoneError("the sandbox stopped during the call", status=410, code="gone")
    status = abort.get("status") if isinstance(abort.get("status"), int) else 410
    return error_from_response(status, json.dumps({"code": abort.get("code"), "message": abort.get("message")}).encode())
