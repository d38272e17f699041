"""Logic shared by the sync and async clients: configuration, request bodies, error mapping and the
assembly of NDJSON streams into results. Nothing here does I/O; _calls.py puts these together into the
API's requests."""


from __future__ import annotations

import asyncio
import base64
import inspect
import json
import os
from urllib.parse import quote, urlsplit
from typing import (IO, Any, AsyncIterator, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple,
                    Union)

import httpx
from websockets.exceptions import InvalidHandshake, InvalidStatus

from .errors import (
    AuthenticationError,
    ConflictError,
    InvalidArgumentError,
    LizardConnectionError,
    LizardError,
    RequestTimeoutError,
    SandboxError,
    SandboxGoneError,
    TemplateBuildError,
    error_from_abort,
    error_from_response,
)
from .models import Context, Execution, ExecutionError, FilesystemEvent, ProcessInfo, ProcessResult, Result
from ._version import __version__

DEFAULT_API_URL = "http://127.0.0.1:8080"
# Ordinary requests (info, contexts, files) answer quickly; a minute leaves room for a busy machine.
DEFAULT_REQUEST_TIMEOUT = 60.0
# The first create on a server builds the interpreter template, which takes minutes.
DEFAULT_CREATE_TIMEOUT = 900.0
# run_code waits this much longer than the code's own timeout, so the kernel's interrupt and the
# "TimeoutError" result arrive before the HTTP read gives up.
STREAM_TIMEOUT_MARGIN = 30.0
USER_AGENT = f"lizard-sdk-python/{__version__}"
# A template build copies its base and runs every step: minutes, and silent while a step is.
DEFAULT_BUILD_TIMEOUT = 1800.0

ContextLike = Union[Context, str]
# What files.write takes; the async client takes async file objects and iterables too.
FileData = Union[str, bytes, bytearray, memoryview, IO[bytes], IO[str], Iterable[bytes]]
AsyncFileData = Union[FileData, IO[Any], AsyncIterator[bytes]]
# What a process's stdin and a terminal take.
Data = Union[str, bytes, bytearray, memoryview]
# The size of the chunks a file is uploaded and read in.
UPLOAD_CHUNK = 64 * 1024

# Sentinel for "the caller did not pass request_timeout", so create can use a longer default.
class _Unset:
    def __repr__(self) -> str:
        return "<default>"


UNSET: Any = _Unset()


def resolve_config(api_key: Optional[str], api_url: Optional[str]) -> Tuple[str, str]:
    """Return (api_url, api_key): explicit values win, then LIZARD_API_URL and LIZARD_API_KEY."""
    url = api_url or os.environ.get("LIZARD_API_URL") or DEFAULT_API_URL
    key = api_key or os.environ.get("LIZARD_API_KEY")
    if not key:
        raise AuthenticationError("no API key: set LIZARD_API_KEY or pass api_key")
    return url.rstrip("/"), key


def headers(api_key: str) -> Dict[str, str]:
    """Headers sent with every request."""
    return {"Authorization": f"Bearer {api_key}", "User-Agent": USER_AGENT}


def trace_context() -> Dict[str, str]:
    """The caller's W3C trace context (traceparent, tracestate) when the calling program uses OpenTelemetry:
    a request carrying it continues the caller's trace through Lizard (docs/traces.md). Empty when the
    opentelemetry package is not installed or no span is active; it is never a dependency."""
    try:
        from opentelemetry import propagate
    except ImportError:
        return {}
    carrier: Dict[str, str] = {}
    try:
        propagate.inject(carrier)
    except Exception:  # a broken propagator must not break the call
        return {}
    return {k: v for k, v in carrier.items() if k in ("traceparent", "tracestate")}


def inject_trace(request: httpx.Request) -> None:
    """An httpx request hook: adds trace_context() to every request."""
    request.headers.update(trace_context())


async def ainject_trace(request: httpx.Request) -> None:
    """inject_trace for the async client."""
    inject_trace(request)


def callback(cb: Optional[Callable[[Any], Any]], arg: Any) -> None:
    """Call a user's callback, if given, with arg."""
    if cb is not None:
        cb(arg)


async def acallback(cb: Optional[Callable[[Any], Any]], arg: Any) -> None:
    """callback for the async client, whose callbacks may be coroutine functions: their result is awaited."""
    if cb is None:
        return
    res = cb(arg)
    if inspect.isawaitable(res):
        await res


async def stop_task(task: "asyncio.Task[Any]") -> None:
    """Cancel task, a handle's follower, and wait for it to end; not when it is the caller (a callback of its own
    that stops its handle), which ends by itself once the handle says stopped."""
    if task is not asyncio.current_task():
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass


def upload_body(data: FileData) -> Union[bytes, Iterator[bytes]]:
    """The upload body for data: bytes as they are, a file-like object read lazily in chunks."""
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    if hasattr(data, "read"):
        def gen() -> Iterator[bytes]:
            while True:
                chunk = data.read(UPLOAD_CHUNK)
                if not chunk:
                    return
                yield chunk.encode("utf-8") if isinstance(chunk, str) else bytes(chunk)

        return gen()
    if hasattr(data, "__iter__"):
        def chunks() -> Iterator[bytes]:
            for chunk in data:  # type: ignore[union-attr]
                yield chunk.encode("utf-8") if isinstance(chunk, str) else bytes(chunk)

        return chunks()
    raise InvalidArgumentError(
        f"data must be str, bytes, a readable file object or an iterable of bytes, not {type(data).__name__}"
    )


def aupload_body(data: AsyncFileData) -> Union[bytes, AsyncIterator[bytes]]:
    """upload_body for the async client: async file objects (aiofiles') and async iterables too."""
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    if hasattr(data, "read"):
        async def gen() -> AsyncIterator[bytes]:
            while True:
                chunk = data.read(UPLOAD_CHUNK)
                if inspect.isawaitable(chunk):  # an async file object, such as aiofiles'
                    chunk = await chunk
                if not chunk:
                    return
                yield chunk.encode("utf-8") if isinstance(chunk, str) else bytes(chunk)

        return gen()
    if hasattr(data, "__aiter__") or hasattr(data, "__iter__"):
        async def chunks() -> AsyncIterator[bytes]:
            if hasattr(data, "__aiter__"):
                async for chunk in data:  # type: ignore[union-attr]
                    yield chunk.encode("utf-8") if isinstance(chunk, str) else bytes(chunk)
            else:
                for chunk in data:  # type: ignore[union-attr]
                    yield chunk.encode("utf-8") if isinstance(chunk, str) else bytes(chunk)

        return chunks()
    raise InvalidArgumentError(
        f"data must be str, bytes, a readable file object or an (async) iterable of bytes, not {type(data).__name__}"
    )


def timeout(request_timeout: Optional[float], read: Any = UNSET) -> httpx.Timeout:
    """An httpx timeout: request_timeout for connecting, writing and the pool, read for reading."""
    return httpx.Timeout(request_timeout, read=request_timeout if read is UNSET else read)


def stream_read_timeout(timeout_ms: Optional[int]) -> Optional[float]:
    """The HTTP read timeout for a stream whose work is bounded by timeout_ms (None or 0: no bound)."""
    if not timeout_ms:
        return None
    return timeout_ms / 1000.0 + STREAM_TIMEOUT_MARGIN


def follow_error(exc: Exception, api_url: str) -> Exception:
    """Why following a response (a watch, a process's output) ended: a broken connection as the SDK's error;
    the sandbox's end (an "abort" line) or a callback's own error as it is."""
    if isinstance(exc, httpx.TransportError):
        return transport_error(exc, api_url)
    return exc


def transport_error(exc: Exception, api_url: str) -> LizardError:
    """Map an httpx transport exception to the SDK's error."""
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
        return LizardConnectionError(
            f"cannot reach Lizard at {api_url} ({exc or type(exc).__name__}); "
            "is `lizard serve` running? Set LIZARD_API_URL or pass api_url"
        )
    if isinstance(exc, httpx.TimeoutException):
        return RequestTimeoutError(f"request to Lizard at {api_url} timed out ({type(exc).__name__})")
    return LizardConnectionError(f"connection to Lizard at {api_url} failed: {exc or type(exc).__name__}")


def context_id(ctx: ContextLike) -> str:
    """The id of a Context or of a context id."""
    if isinstance(ctx, Context):
        return ctx.id
    if isinstance(ctx, str) and ctx:
        return ctx
    raise InvalidArgumentError(f"context must be a Context or a non-empty id, not {ctx!r}")


def check_ms(name: str, value: Optional[int]) -> None:
    """Reject negative or non-integer millisecond values before they reach the server."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(f"{name} must be a non-negative integer of milliseconds, not {value!r}")


def create_body(
    template: str,
    timeout_ms: Optional[int],
    envs: Optional[Mapping[str, str]],
    metadata: Optional[Mapping[str, str]],
    lizard_token: bool,
    snapshot_id: Optional[str] = None,
    volumes: Optional[Sequence[Mapping[str, str]]] = None,
    public_ports: bool = False,
    *,
    memory_mb: Optional[int] = None,
    cpus: Optional[float] = None,
    disk_mb: Optional[int] = None,
    on_timeout: Optional[str] = None,
    allow_internet: Optional[bool] = None,
    network: Optional[Mapping[str, Any]] = None,
    pause_memory: Optional[bool] = None,
    ports_host: Optional[str] = None,
) -> Dict[str, Any]:
    """The body of POST /v1/sandboxes."""
    check_ms("timeout_ms", timeout_ms)
    for name, value in (("memory_mb", memory_mb), ("disk_mb", disk_mb)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise InvalidArgumentError(f"{name} must be a positive integer of MiB, not {value!r}")
    if cpus is not None and (isinstance(cpus, bool) or not isinstance(cpus, (int, float)) or cpus <= 0):
        raise InvalidArgumentError(f"cpus must be a positive number of cores, not {cpus!r}")
    if on_timeout is not None and on_timeout not in ("kill", "pause"):
        raise InvalidArgumentError(f'on_timeout must be "kill" or "pause", not {on_timeout!r}')
    body: Dict[str, Any] = {"template": template}
    if snapshot_id:
        # The snapshot decides the template.
        body = {"snapshotId": snapshot_id}
    if timeout_ms is not None:
        body["timeoutMs"] = timeout_ms
    if envs:
        body["envs"] = dict(envs)
    if metadata:
        body["metadata"] = dict(metadata)
    if lizard_token:
        body["lizardToken"] = True
    if volumes:
        body["volumes"] = volume_mounts(volumes)
    if public_ports:
        body["publicPorts"] = True
    if ports_host:
        body["portsHost"] = ports_host
    if memory_mb is not None:
        body["memoryMb"] = memory_mb
    if cpus is not None:
        body["cpus"] = cpus
    if disk_mb is not None:
        body["diskMb"] = disk_mb
    if on_timeout is not None:
        body["onTimeout"] = on_timeout
    if pause_memory is not None:
        body["pauseMemory"] = bool(pause_memory)
    if allow_internet is not None:
        body["allowInternet"] = bool(allow_internet)
    if network is not None:
        body["network"] = network_policy(network, "network")
    return body


_POLICY_FIELDS = ("default", "allow", "deny", "ports", "inject")


def network_policy(policy: Mapping[str, Any], name: str) -> Dict[str, Any]:
    """A network policy (docs/network.md) as the API takes it; the server checks the rules."""
    if not isinstance(policy, Mapping):
        raise InvalidArgumentError(f"{name} must be a mapping such as {{'default': 'deny', 'allow': ['pypi.org']}}")
    unknown = [k for k in policy if k not in _POLICY_FIELDS]
    if unknown:
        raise InvalidArgumentError(f"{name}: unknown field {unknown[0]!r}; the fields are {', '.join(_POLICY_FIELDS)}")
    return {k: (list(v) if isinstance(v, (list, tuple)) else v) for k, v in policy.items() if v is not None}


def network_update(
    default: Optional[str],
    allow: Optional[Sequence[str]],
    deny: Optional[Sequence[str]],
    ports: Optional[Sequence[int]],
    inject: Optional[Sequence[Mapping[str, Any]]],
    cut: bool,
) -> Dict[str, Any]:
    """The body of PATCH /v1/sandboxes/{id}/network: only the fields given."""
    body: Dict[str, Any] = network_policy({"default": default, "allow": allow, "deny": deny, "ports": ports,
                                           "inject": inject}, "update")
    if isinstance(allow, str) or isinstance(deny, str):
        raise InvalidArgumentError("allow and deny are lists of rules, not one string")
    if cut:
        body["cut"] = True
    return body


def volume_mounts(volumes: Sequence[Mapping[str, str]]) -> List[Dict[str, str]]:
    """The wire form of create's volumes: ``[{"name": ..., "path": ...}]``."""
    out = []
    for v in volumes:
        if not isinstance(v, Mapping) or not isinstance(v.get("name"), str) or not isinstance(v.get("path"), str):
            raise InvalidArgumentError(f'each volume must be {{"name": str, "path": str}}, not {v!r}')
        out.append({"name": v["name"], "path": v["path"]})
    return out


def secret_body(name: str, value: str, hosts: Sequence[str], allow_http: bool) -> Dict[str, Any]:
    """The body of PUT /v1/secrets/{name}; the server checks the name, the value's bounds and the hosts."""
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"a secret name must be a non-empty string, not {name!r}")
    if not isinstance(value, str):
        raise InvalidArgumentError(f"a secret value must be a str, not {type(value).__name__}")
    if isinstance(hosts, str) or not all(isinstance(h, str) for h in hosts) or not hosts:
        raise InvalidArgumentError(
            f"hosts must be a non-empty list of the names or *.wildcards the secret may be sent to, "
            f"such as ['api.openai.com'], not {hosts!r}")
    body: Dict[str, Any] = {"value": value, "hosts": list(hosts)}
    if allow_http:
        body["allowHttp"] = True
    return body


def volume_body(name: str, size_mb: Optional[int]) -> Dict[str, Any]:
    """The body of POST /v1/volumes."""
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"a volume name must be a non-empty string, not {name!r}")
    body: Dict[str, Any] = {"name": name}
    if size_mb is not None:
        if isinstance(size_mb, bool) or not isinstance(size_mb, int) or size_mb <= 0:
            raise InvalidArgumentError(f"size_mb must be a positive integer of MiB, not {size_mb!r}")
        body["sizeMb"] = size_mb
    return body


def port_url(api_url: str, sandbox_id: str, port: int, ports_domain: Optional[str]) -> str:
    """The URL at which port of the sandbox is served through the API: host-based under the server's
    ports domain when it has one, else path-based."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise InvalidArgumentError(f"port must be an integer from 1 to 65535, not {port!r}")
    u = urlsplit(api_url)
    if ports_domain:
        host = f"{port}-{sandbox_id}.{ports_domain}"
        if u.port:
            host += f":{u.port}"
        return f"{u.scheme}://{host}/"
    return f"{api_url.rstrip('/')}/v1/sandboxes/{quote(sandbox_id, safe='')}/ports/{port}/"


def file_params(path: str, user: Optional[str], **extra: str) -> Dict[str, str]:
    """The query of a file call: its path, its user unless the default (the sandbox user), and extra."""
    params = {"path": path}
    if user is not None:
        if user not in ("user", "root"):
            raise InvalidArgumentError(f"user must be 'user' (the sandbox user) or 'root', not {user!r}")
        params["user"] = user
    params.update(extra)
    return params


def list_params(metadata: Optional[Mapping[str, str]], state: Optional[str]) -> List[Tuple[str, str]]:
    """Query parameters of GET /v1/sandboxes."""
    params = [("metadata", f"{k}={v}") for k, v in (metadata or {}).items()]
    if state:
        params.append(("state", state))
    return params


def event_params(
    sandbox_id: Optional[str],
    types: Optional[Sequence[str]],
    metadata: Optional[Mapping[str, str]],
    after: Optional[int],
    limit: Optional[int],
    follow: bool,
) -> List[Tuple[str, str]]:
    """Query parameters of GET /v1/events."""
    params: List[Tuple[str, str]] = []
    if sandbox_id:
        params.append(("sandbox", sandbox_id))
    if isinstance(types, str):
        types = [types]
    params += [("type", t) for t in types or []]
    params += [("metadata", f"{k}={v}") for k, v in (metadata or {}).items()]
    if after is not None:
        params.append(("after", str(after)))
    if limit is not None:
        params.append(("limit", str(limit)))
    if follow:
        params.append(("follow", "1"))
    return params


def execute_body(
    code: str,
    language: Optional[str],
    context: Optional[ContextLike],
    timeout_ms: Optional[int],
    envs: Optional[Mapping[str, str]],
) -> Dict[str, Any]:
    """The body of POST /execute."""
    check_ms("timeout_ms", timeout_ms)
    body: Dict[str, Any] = {"code": code}
    if language:
        body["language"] = language
    if context is not None:
        body["contextId"] = context_id(context)
    if timeout_ms is not None:
        body["timeoutMs"] = timeout_ms
    if envs:
        body["envs"] = dict(envs)
    return body


def process_body(
    cmd: Union[str, Sequence[str]],
    cwd: Optional[str],
    envs: Optional[Mapping[str, str]],
    timeout_ms: Optional[int],
    stdin: Optional[str],
) -> Dict[str, Any]:
    """The body of POST /process: a string runs with bash -c, a sequence runs as is."""
    check_ms("timeout_ms", timeout_ms)
    body: Dict[str, Any]
    if isinstance(cmd, str):
        body = {"cmd": cmd}
    else:
        args = list(cmd)
        if not args:
            raise InvalidArgumentError("cmd must not be empty")
        body = {"args": args}
    if cwd:
        body["cwd"] = cwd
    if envs:
        body["envs"] = dict(envs)
    if timeout_ms is not None:
        body["timeoutMs"] = timeout_ms
    if stdin:
        body["stdin"] = stdin
    return body


class LineSplitter:
    """Splits a byte stream into NDJSON objects.

    It splits on b"\\n" only: httpx's line iterator also splits on characters such as U+0085 that JSON
    may carry unescaped inside strings.
    """

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> List[Dict[str, Any]]:
        """Add bytes; return the objects of the lines they completed."""
        self._buf += chunk
        if b"\n" not in chunk:
            return []
        *lines, self._buf = self._buf.split(b"\n")
        return [obj for obj in map(_parse_line, lines) if obj is not None]

    def close(self) -> List[Dict[str, Any]]:
        """Return the object of a last line that had no newline, if any."""
        rest, self._buf = self._buf, b""
        obj = _parse_line(rest)
        return [] if obj is None else [obj]


def _parse_line(line: bytes) -> Optional[Dict[str, Any]]:
    line = line.strip()
    if not line:
        return None
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise SandboxError(f"malformed line in response stream: {line[:200]!r}") from exc
    if not isinstance(obj, dict):
        raise SandboxError(f"unexpected line in response stream: {line[:200]!r}")
    return obj


# An event to hand to a callback: ("stdout" | "stderr", str), ("result", Result), ("error", ExecutionError).
Callback = Tuple[str, Any]


class ExecutionAssembler:
    """Builds an Execution from /execute events and says which callback each event calls."""

    def __init__(self) -> None:
        self.execution = Execution()
        self.ended = False
        self._stdout: List[str] = []
        self._stderr: List[str] = []

    def feed(self, event: Mapping[str, Any]) -> Optional[Callback]:
        """Take one event; return the callback it triggers, if any."""
        count = event.get("executionCount")
        if isinstance(count, int) and count:
            self.execution.execution_count = count
        kind = event.get("type")
        if kind in ("stdout", "stderr"):
            text = str(event.get("text") or "")
            (self._stdout if kind == "stdout" else self._stderr).append(text)
            return (kind, text)
        if kind == "result" and isinstance(event.get("result"), dict):
            result = Result.from_json(event["result"])
            self.execution.results.append(result)
            return ("result", result)
        if kind == "error" and isinstance(event.get("error"), dict):
            error = ExecutionError.from_json(event["error"])
            self.execution.error = error
            return ("error", error)
        if kind == "end":
            self.ended = True
        if kind == "abort":
            raise error_from_abort(event.get("abort"))
        # Unknown event types are skipped so that newer servers can add some.
        return None

    def finish(self) -> Execution:
        """Return the Execution; raise SandboxError when the stream had no "end" event."""
        if not self.ended:
            raise SandboxError("execution stream ended without an end event (the sandbox may have died)")
        self.execution.stdout = "".join(self._stdout)
        self.execution.stderr = "".join(self._stderr)
        return self.execution


class ProcessAssembler:
    """Builds a ProcessResult from /process events and says which callback each event calls."""

    def __init__(self) -> None:
        self.ended = False
        self.exit_code = -1
        self.error: Optional[str] = None
        self._stdout: List[str] = []
        self._stderr: List[str] = []

    def feed(self, event: Mapping[str, Any]) -> Optional[Callback]:
        """Take one event; return the callback it triggers, if any."""
        kind = event.get("type")
        if kind in ("stdout", "stderr"):
            text = str(event.get("text") or "")
            (self._stdout if kind == "stdout" else self._stderr).append(text)
            return (kind, text)
        if kind == "abort":
            raise error_from_abort(event.get("abort"))
        if kind == "end":
            self.ended = True
            code = event.get("exitCode")
            if isinstance(code, int):
                self.exit_code = code
            if event.get("error"):
                self.error = str(event["error"])
        return None

    def result(self) -> ProcessResult:
        """The output so far and the exit code (-1 before the end)."""
        return ProcessResult(
            stdout="".join(self._stdout), stderr="".join(self._stderr), exit_code=self.exit_code, error=self.error
        )

    def finish(self) -> ProcessResult:
        """Return the ProcessResult; raise SandboxError when the stream had no "end" event."""
        if not self.ended:
            raise SandboxError("process stream ended without an end event (the sandbox may have died)")
        return self.result()


def fork_body(count: Optional[int], timeout_ms: Optional[int], metadata: Optional[Mapping[str, str]]) -> Dict[str, Any]:
    """The body of POST /v1/sandboxes/{id}/fork."""
    check_ms("timeout_ms", timeout_ms)
    body: Dict[str, Any] = {}
    if count is not None:
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 16:
            raise ValueError(f"count must be an int from 1 to 16, got {count!r}")
        body["count"] = count
    if timeout_ms is not None:
        body["timeoutMs"] = timeout_ms
    if metadata:
        body["metadata"] = dict(metadata)
    return body


def template_body(name: str, recipe: Mapping[str, Any],
                  registry: Optional[Mapping[str, str]] = None, skip_cache: bool = False) -> Dict[str, Any]:
    """The body of POST /v1/templates: recipe's files (and its copy steps' files) carry their content
    as str or bytes, which is base64-encoded here (the wire form); registry is
    ``{"username", "password"}`` for the registry of the recipe's ``from`` image, sent with this build
    only, or ``{"username", "passwordSecret"}`` naming the project's secret that holds the password."""

    def encode(files: Any, field: str) -> List[Dict[str, Any]]:
        out = []
        for i, f in enumerate(files or []):
            f = dict(f)
            content = f.get("content", b"")
            if isinstance(content, str):
                content = content.encode("utf-8")
            if not isinstance(content, (bytes, bytearray, memoryview)):
                raise InvalidArgumentError(f"recipe {field}[{i}].content must be str or bytes, not {type(content).__name__}")
            f["content"] = base64.b64encode(bytes(content)).decode("ascii")
            out.append(f)
        return out

    body = dict(recipe)
    files = encode(body.get("files"), "files")
    if files:
        body["files"] = files
    if body.get("steps") is not None:
        body["steps"] = [
            {**s, "copy": encode(s["copy"], f"steps[{i}].copy")} if "copy" in s else dict(s) for i, s in enumerate(body["steps"])
        ]
    out: Dict[str, Any] = {"name": name, "recipe": body}
    if registry is not None:
        keys = set(registry)
        if keys not in ({"username", "password"}, {"username", "passwordSecret"}):
            raise InvalidArgumentError('registry must be {"username": ..., "password": ...} or {"username": ..., "passwordSecret": ...}')
        out["registry"] = {k: str(v) for k, v in registry.items()}
    if skip_cache:
        out["skipCache"] = True
    return out


class TemplateBuild:
    """Follows a template build's NDJSON events: calls on_event with each, keeps the outcome."""

    def __init__(self, on_event: Optional[Callable[[Dict[str, Any]], Any]]) -> None:
        self.on_event = on_event
        self.template: Optional[Dict[str, Any]] = None
        self.cached = False
        self.error: Optional[Dict[str, Any]] = None

    def feed(self, event: Dict[str, Any]) -> Optional[Callback]:
        """Take one event; every event goes to on_event (``("event", event)``)."""
        kind = event.get("type")
        if kind == "done":
            self.template = event.get("template") or {}
            self.cached = bool(event.get("cached"))
        elif kind == "error":
            self.error = event
        return ("event", event)

    def finish(self) -> Dict[str, Any]:
        """The built template's wire form; raises TemplateBuildError when the build failed."""
        if self.error is not None:
            e = self.error
            raise TemplateBuildError(str(e.get("message") or "the template build failed"), code=e.get("code"),
                                     step=e.get("name"), log=e.get("log"))
        if self.template is None:
            raise SandboxError("the template build's stream ended without its outcome")
        return self.template


def watch_event(event: Mapping[str, Any]) -> Optional[FilesystemEvent]:
    """The FilesystemEvent of one /files/watch line; raises the sandbox's end carried by an "abort" line."""
    kind = event.get("type")
    if kind == "abort":
        raise error_from_abort(event.get("abort"))
    if not kind:
        return None
    return FilesystemEvent.from_json(event)


# Signals by name: what commands.kill sends by default, and what a terminal's kill sends.
DEFAULT_SIGNAL = "KILL"
# A WebSocket message may carry up to the 1 MiB of output a process keeps; the margin is the framing's.
WS_MAX_MESSAGE = 4 << 20


def start_body(
    cmd: Union[None, str, Sequence[str]],
    cwd: Optional[str],
    envs: Optional[Mapping[str, str]],
    stdin: bool,
    timeout_ms: Optional[int],
    tag: Optional[str],
    user: Optional[str],
    pty: Optional[Tuple[int, int]],
) -> Dict[str, Any]:
    """The body of POST /processes: a string runs with bash -c, a sequence runs as is; a terminal (pty, as
    (cols, rows)) without either runs the user's login shell."""
    check_ms("timeout_ms", timeout_ms)
    body: Dict[str, Any] = {}
    if isinstance(cmd, str):
        if not cmd:
            raise InvalidArgumentError("cmd must not be empty")
        body["cmd"] = cmd
    elif cmd is not None:
        args = list(cmd)
        if not args:
            raise InvalidArgumentError("cmd must not be empty")
        body["args"] = args
    elif pty is None:
        raise InvalidArgumentError("cmd is required: a command line or a list of arguments")
    if cwd:
        body["cwd"] = cwd
    if envs:
        body["envs"] = dict(envs)
    if stdin:
        body["stdin"] = True
    if timeout_ms is not None:
        body["timeoutMs"] = timeout_ms
    if tag:
        body["tag"] = tag
    if user:
        body["user"] = user
    if pty is not None:
        body["pty"] = size_body(*pty)
    return body


def size_body(cols: int, rows: int) -> Dict[str, int]:
    """A terminal size, checked as the server checks it (1..1000 each)."""
    for name, v in (("cols", cols), ("rows", rows)):
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1000:
            raise InvalidArgumentError(f"{name} must be an integer from 1 to 1000, not {v!r}")
    return {"cols": cols, "rows": rows}


def signal_body(signal: Union[str, int]) -> Dict[str, str]:
    """The body of POST /processes/{pid}/signal: a name (TERM, SIGINT...) or a number."""
    if isinstance(signal, bool) or not isinstance(signal, (str, int)) or signal == "":
        raise InvalidArgumentError(f"signal must be a name such as 'TERM' or a number, not {signal!r}")
    return {"signal": str(signal)}


def stdin_bytes(data: Union[str, bytes, bytearray, memoryview]) -> bytes:
    """Bytes to send to a process's stdin or terminal; a str is encoded as UTF-8."""
    if isinstance(data, str):
        return data.encode()
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise InvalidArgumentError(f"data must be str or bytes, not {type(data).__name__}")


class OutputAssembler(ProcessAssembler):
    """Follows the events of GET /processes/{pid}/output: exec's events, and a terminal's raw bytes and the
    output a slow reader missed."""

    def __init__(self) -> None:
        super().__init__()
        self.dropped = 0

    def exited(self, info: ProcessInfo) -> ProcessResult:
        """The result of a process whose output was not followed to its end (after a disconnect): the
        output received and the exit code of info (from wait_exit)."""
        result = self.result()
        result.exit_code = info.exit_code if info.exit_code is not None else -1
        result.error = info.error
        return result

    def feed(self, event: Mapping[str, Any]) -> Optional[Callback]:
        """Take one event; return ("stdout" | "stderr", str) or ("pty", bytes) for a callback, if any."""
        kind = event.get("type")
        if kind == "pty":
            return ("pty", base64.b64decode(event.get("data") or ""))
        if kind == "dropped":
            self.dropped += int(event.get("dropped") or 0)
            return None
        return super().feed(event)


def ws_url(api_url: str, path: str) -> str:
    """The ws:// or wss:// URL of an API path."""
    if api_url.startswith("https://"):
        return "wss://" + api_url[len("https://"):] + path
    if api_url.startswith("http://"):
        return "ws://" + api_url[len("http://"):] + path
    raise InvalidArgumentError(f"api_url must start with http:// or https://, not {api_url!r}")


def ws_subprotocols(api_key: str) -> List[str]:
    """The subprotocols of a process's WebSocket: ``lizard``, and the key as ``lizard.bearer.<key>`` (the
    server takes it as the bearer key, as it does for a browser, which cannot set headers)."""
    return ["lizard", "lizard.bearer." + api_key]


def ws_options(api_key: str, open_timeout: Optional[float]) -> Dict[str, Any]:
    """The options of a terminal's WebSocket, which websockets' sync and asyncio connect both take."""
    return {"subprotocols": ws_subprotocols(api_key), "max_size": WS_MAX_MESSAGE, "open_timeout": open_timeout,
            "user_agent_header": USER_AGENT}


# What a terminal's WebSocket connect raises when it does not open.
WS_CONNECT_ERRORS = (InvalidHandshake, OSError, TimeoutError)


def ws_connect_error(exc: Exception, api_url: str) -> LizardError:
    """The SDK's error for a terminal's WebSocket that did not open: the server's refusal as its answer, else
    the connection's failure."""
    if isinstance(exc, InvalidStatus):
        return error_from_response(exc.response.status_code, bytes(exc.response.body or b""))
    return transport_error(httpx.ConnectError(str(exc)), api_url)


def ws_exit_code(message: Union[str, bytes]) -> Optional[int]:
    """The exit code a terminal's text frame carries when it is its end ({"type": "end", "exitCode": N})."""
    control = ws_control(message) or {}
    code = control.get("exitCode")
    return code if control.get("type") == "end" and isinstance(code, int) else None


def ws_control(message: Union[str, bytes]) -> Optional[Dict[str, Any]]:
    """A text frame of a process's WebSocket (ProcessControl), or None when it is not one."""
    try:
        obj = json.loads(message)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def ws_closed_early(code: Optional[int], reason: str) -> LizardError:
    """The error of a terminal's connection that closed before the terminal's end (see ws_close_error)."""
    return ws_close_error(code, reason) or LizardError("the terminal's connection closed before its end")


def ws_close_error(code: Optional[int], reason: str) -> Optional[LizardError]:
    """The error a WebSocket's close code means: None for a normal close, SandboxGoneError for 4410 (the
    sandbox ended), ConflictError for 4409 (it was paused), SandboxError else."""
    if code in (None, 1000):
        return None
    if code == 4410:
        return SandboxGoneError(reason or "the sandbox ended", status=410, code="gone")
    if code == 4409:
        return ConflictError(reason or "the sandbox was paused; connect again to resume it", status=409, code="conflict")
    return SandboxError(f"the terminal's connection closed with code {code}: {reason or 'no reason given'}")
