"""Every request of the Lizard API, written once for both clients.

A feature of the SDK is a request: what to send (method, path, query, body, timeout, checked arguments) and
how to read the answer (the model it becomes, an error that is an answer such as kill's "already gone").
This module says that once, as a :class:`Call` (one request, one answer), a :class:`Stream` (a POST whose
answer is NDJSON events assembled into a result, with callbacks) or an :class:`Open` (a GET followed as it
comes). The clients only send them: ``_async._AsyncHttp`` and ``_sync._Http`` have the same four methods
(``call``, ``stream``, ``open``, ``close``), and a method of ``AsyncCodeSandbox`` is its signature, its
docstring and one line::

    async def get_info(self) -> SandboxInfo:           # _async.py
        return await self._http.call(_calls.get_info(self.sandbox_id))

from which scripts/gen_sync.py generates its twin in ``CodeSandbox`` (_sync.py), ``async`` and ``await``
dropped. So a new endpoint is one function here and that one line in _async.py; the tests run every unit test
against both clients (tests/test_unit.py) and check both signatures against the API (tests/test_spec.py).
Everything the clients share — requests, checks, parsing, error mapping (errors.py), the decoding of event
streams and the models (_core.py, models.py) — has one place. Nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Generic, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union
from urllib.parse import quote

import httpx

from . import _core
from ._core import UNSET, ContextLike
from .errors import InvalidArgumentError, LizardError, NotFoundError, SandboxGoneError
from .models import (
    Context,
    DesktopViewer,
    DesktopWindow,
    EntryInfo,
    EventPage,
    Execution,
    ExecutionError,
    NetworkLogEntry,
    ProcessInfo,
    ProcessResult,
    Result,
    SandboxInfo,
    SandboxMetric,
    SecretInfo,
    SnapshotInfo,
    TemplateInfo,
    VolumeInfo,
)

T = TypeVar("T")
M = TypeVar("M")

# A callback of a stream: plain functions in the sync client, plain or coroutine functions in the async one.
Callbacks = Mapping[str, Optional[Callable[[Any], Any]]]


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and how to read its answer."""

    method: str
    path: str
    read: Callable[[httpx.Response], T]
    json: Any = None
    params: Any = None
    content: Any = None
    # Seconds for the whole request (None: no limit); UNSET keeps the client's request_timeout.
    timeout: Any = UNSET
    # Turns an error answer into a result (or raises it again): kill's "already gone", exists' "no".
    rescue: Optional[Callable[[LizardError], T]] = None


@dataclass(frozen=True)
class Stream(Generic[T]):
    """A POST whose answer is NDJSON events: each goes to feed, which names the callback it calls
    (``("stdout", text)``...); the result is finish() once the stream ends."""

    path: str
    json: Any
    read_timeout: Optional[float]
    feed: Callable[[Dict[str, Any]], Optional[_core.Callback]]
    finish: Callable[[], T]
    callbacks: Callbacks = field(default_factory=dict)


@dataclass(frozen=True)
class Open:
    """A GET whose answer is read as it comes (a file, a watch, a process's output, events); the caller
    closes the response."""

    path: str
    params: Any = None
    # Seconds a read may wait (None: as long as it takes); UNSET keeps the client's request_timeout.
    read_timeout: Any = None


def _nothing(resp: httpx.Response) -> None:
    return None


def _one(from_json: Callable[[Any], M]) -> Callable[[httpx.Response], M]:
    return lambda resp: from_json(resp.json())


def _many(from_json: Callable[[Any], M], key: str) -> Callable[[httpx.Response], List[M]]:
    return lambda resp: [from_json(x) for x in resp.json().get(key) or []]


def _policy(resp: httpx.Response) -> Dict[str, Any]:
    return dict(resp.json())


def _none_if_missing(err: LizardError) -> None:
    if isinstance(err, NotFoundError):  # a gone sandbox too: there is nothing left to kill or clear
        return None
    raise err


def _name(name: str) -> str:
    return quote(name, safe="")


# Sandboxes ----------------------------------------------------------------------------------------------


def sandbox_path(sandbox_id: str, rest: str = "") -> str:
    return f"/v1/sandboxes/{_name(sandbox_id)}{rest}"


def create(body: Dict[str, Any], request_timeout: Optional[float]) -> Call[SandboxInfo]:
    """POST /v1/sandboxes with create_body's body. It waits the longer DEFAULT_CREATE_TIMEOUT unless the
    caller gave request_timeout: the first create on a server builds its template."""
    timeout = _core.DEFAULT_CREATE_TIMEOUT if request_timeout is UNSET else request_timeout
    return Call("POST", "/v1/sandboxes", _one(SandboxInfo.from_json), json=body, timeout=timeout)


def client_timeout(given: Optional[float]) -> Optional[float]:
    """The request_timeout of a client made by create: the caller's, else DEFAULT_REQUEST_TIMEOUT."""
    return _core.DEFAULT_REQUEST_TIMEOUT if given is UNSET else given


def wrong_project(project_id: Optional[str], info: SandboxInfo) -> Optional[InvalidArgumentError]:
    """The error for a new sandbox that is not in the project the caller named (the key decides the
    project; the caller then kills the sandbox and raises this)."""
    if project_id is not None and info.project_id and info.project_id != project_id:
        return InvalidArgumentError(f"project_id {project_id!r} does not match the API key's project {info.project_id!r}")
    return None


def check_connectable(sandbox_id: str, info: SandboxInfo) -> bool:
    """For connect: raise SandboxGoneError for an ended sandbox; return whether it must be resumed."""
    if info.state in ("killed", "expired", "failed"):
        raise SandboxGoneError(f"sandbox {sandbox_id} has ended ({info.state})", status=None, code="gone")
    return info.state == "paused"


def list_sandboxes(metadata: Optional[Mapping[str, str]], state: Optional[str]) -> Call[List[SandboxInfo]]:
    return Call("GET", "/v1/sandboxes", _many(SandboxInfo.from_json, "sandboxes"),
                params=_core.list_params(metadata, state))


def get_info(sandbox_id: str) -> Call[SandboxInfo]:
    return Call("GET", sandbox_path(sandbox_id), _one(SandboxInfo.from_json))


def set_timeout(sandbox_id: str, timeout_ms: int) -> Call[None]:
    _core.check_ms("timeout_ms", timeout_ms)
    return Call("POST", sandbox_path(sandbox_id, "/timeout"), _nothing, json={"timeoutMs": timeout_ms})


def get_metrics(sandbox_id: str) -> Call[List[SandboxMetric]]:
    return Call("GET", sandbox_path(sandbox_id, "/metrics"), _many(SandboxMetric.from_json, "metrics"))


def kill(sandbox_id: str) -> Call[None]:
    """DELETE the sandbox; one that is already gone is not an error."""
    return Call("DELETE", sandbox_path(sandbox_id), _nothing, rescue=_none_if_missing)


def pause(sandbox_id: str, wait_durable: bool, memory: Optional[bool] = None) -> Call[None]:
    body: Dict[str, Any] = {"waitDurable": True} if wait_durable else {}
    if memory is not None:
        body["memory"] = memory
    return Call("POST", sandbox_path(sandbox_id, "/pause"), _nothing, json=body, timeout=_core.DEFAULT_CREATE_TIMEOUT)


def resume(sandbox_id: str, timeout_ms: Optional[int], memory: Optional[bool] = None) -> Call[None]:
    _core.check_ms("timeout_ms", timeout_ms)
    body: Dict[str, Any] = {"timeoutMs": timeout_ms} if timeout_ms is not None else {}
    if memory is not None:
        body["memory"] = memory
    return Call("POST", sandbox_path(sandbox_id, "/resume"), _nothing, json=body, timeout=_core.DEFAULT_CREATE_TIMEOUT)


def snapshot(sandbox_id: str, name: Optional[str]) -> Call[SnapshotInfo]:
    return Call("POST", sandbox_path(sandbox_id, "/snapshots"), _one(SnapshotInfo.from_json),
                json={"name": name} if name else {}, timeout=_core.DEFAULT_CREATE_TIMEOUT)


def list_snapshots(name: Optional[str]) -> Call[List[SnapshotInfo]]:
    return Call("GET", "/v1/snapshots", _many(SnapshotInfo.from_json, "snapshots"),
                params={"name": name} if name else None)


def delete_snapshot(snapshot_id: str) -> Call[None]:
    return Call("DELETE", f"/v1/snapshots/{_name(snapshot_id)}", _nothing)


def fork(sandbox_id: str, count: Optional[int], timeout_ms: Optional[int],
         metadata: Optional[Mapping[str, str]]) -> Call[List[str]]:
    """POST /fork; reads the new sandboxes' ids (the client wraps each in a sandbox of its own)."""
    body = _core.fork_body(count, timeout_ms, metadata)
    return Call("POST", sandbox_path(sandbox_id, "/fork"), _many(lambda s: SandboxInfo.from_json(s).sandbox_id, "sandboxes"),
                json=body, timeout=_core.DEFAULT_CREATE_TIMEOUT)


# Code ---------------------------------------------------------------------------------------------------


def run_code(
    sandbox_id: str,
    code: str,
    language: Optional[str],
    context: Optional[ContextLike],
    timeout_ms: int,
    envs: Optional[Mapping[str, str]],
    on_stdout: Optional[Callable[[str], Any]],
    on_stderr: Optional[Callable[[str], Any]],
    on_result: Optional[Callable[[Result], Any]],
    on_error: Optional[Callable[[ExecutionError], Any]],
) -> Stream[Execution]:
    body = _core.execute_body(code, language, context, timeout_ms, envs)
    asm = _core.ExecutionAssembler()
    return Stream(sandbox_path(sandbox_id, "/execute"), body, _core.stream_read_timeout(timeout_ms), asm.feed,
                  asm.finish, {"stdout": on_stdout, "stderr": on_stderr, "result": on_result, "error": on_error})


def create_context(sandbox_id: str, language: str, cwd: Optional[str]) -> Call[Context]:
    body: Dict[str, Any] = {"language": language}
    if cwd:
        body["cwd"] = cwd
    return Call("POST", sandbox_path(sandbox_id, "/contexts"), _one(Context.from_json), json=body)


def list_contexts(sandbox_id: str) -> Call[List[Context]]:
    return Call("GET", sandbox_path(sandbox_id, "/contexts"), _many(Context.from_json, "contexts"))


def restart_context(sandbox_id: str, context: ContextLike) -> Call[Context]:
    cid = _name(_core.context_id(context))
    return Call("POST", sandbox_path(sandbox_id, f"/contexts/{cid}/restart"), _one(Context.from_json))


def delete_context(sandbox_id: str, context: ContextLike) -> Call[None]:
    cid = _name(_core.context_id(context))
    return Call("DELETE", sandbox_path(sandbox_id, f"/contexts/{cid}"), _nothing)


def exec_process(
    sandbox_id: str,
    cmd: Union[str, Sequence[str]],
    cwd: Optional[str],
    envs: Optional[Mapping[str, str]],
    timeout_ms: Optional[int],
    stdin: Optional[str],
    on_stdout: Optional[Callable[[str], Any]],
    on_stderr: Optional[Callable[[str], Any]],
) -> Stream[ProcessResult]:
    body = _core.process_body(cmd, cwd, envs, timeout_ms, stdin)
    asm = _core.ProcessAssembler()
    return Stream(sandbox_path(sandbox_id, "/process"), body, _core.stream_read_timeout(timeout_ms), asm.feed,
                  asm.finish, {"stdout": on_stdout, "stderr": on_stderr})


# Network ------------------------------------------------------------------------------------------------


def update_network(
    sandbox_id: str,
    default: Optional[str],
    allow: Optional[Sequence[str]],
    deny: Optional[Sequence[str]],
    ports: Optional[Sequence[int]],
    inject: Optional[Sequence[Mapping[str, Any]]],
    cut: bool,
) -> Call[Dict[str, Any]]:
    body = _core.network_update(default, allow, deny, ports, inject, cut)
    return Call("PATCH", sandbox_path(sandbox_id, "/network"), _policy, json=body)


def network_log(sandbox_id: str) -> Call[List[NetworkLogEntry]]:
    return Call("GET", sandbox_path(sandbox_id, "/network/log"), _many(NetworkLogEntry.from_json, "entries"))


def get_network_default() -> Call[Optional[Dict[str, Any]]]:
    """The project's default policy; None when it has none."""
    return Call("GET", "/v1/network/default", _policy, rescue=_none_if_missing)


def set_network_default(policy: Mapping[str, Any]) -> Call[Dict[str, Any]]:
    return Call("PUT", "/v1/network/default", _policy, json=_core.network_policy(policy, "policy"))


def clear_network_default() -> Call[None]:
    return Call("DELETE", "/v1/network/default", _nothing)


# Desktop (docs/desktop.md) ------------------------------------------------------------------------------


def _desktop(sandbox_id: str, sub: str) -> str:
    return sandbox_path(sandbox_id, "/desktop" + sub)


def _point(resp: httpx.Response) -> Tuple[int, int]:
    obj = resp.json()
    return int(obj["x"]), int(obj["y"])


def _size(resp: httpx.Response) -> Tuple[int, int]:
    obj = resp.json()
    return int(obj["width"]), int(obj["height"])


def _some(**fields: Any) -> Dict[str, Any]:
    """The JSON body of the fields given (the API refuses nulls)."""
    return {k: v for k, v in fields.items() if v is not None}


def desktop_screenshot(sandbox_id: str, region: Optional[Tuple[int, int, int, int]]) -> Call[bytes]:
    """The screen (or region: x, y, width, height) as PNG bytes."""
    params = None
    if region is not None:
        if len(region) != 4:
            raise InvalidArgumentError("region must be (x, y, width, height)")
        params = dict(zip(("x", "y", "width", "height"), (int(v) for v in region)))
    return Call("GET", _desktop(sandbox_id, "/screenshot"), lambda resp: resp.content, params=params)


def desktop_screen(sandbox_id: str) -> Call[Tuple[int, int]]:
    return Call("GET", _desktop(sandbox_id, "/screen"), _size)


def desktop_cursor(sandbox_id: str) -> Call[Tuple[int, int]]:
    return Call("GET", _desktop(sandbox_id, "/cursor"), _point)


def desktop_mouse(sandbox_id: str, action: str, x: Optional[int], y: Optional[int], to_x: Optional[int],
                  to_y: Optional[int], button: Optional[str], count: Optional[int],
                  direction: Optional[str]) -> Call[Tuple[int, int]]:
    body = _some(action=action, x=x, y=y, toX=to_x, toY=to_y, button=button, count=count, direction=direction)
    return Call("POST", _desktop(sandbox_id, "/mouse"), _point, json=body)


def desktop_keyboard(sandbox_id: str, action: str, text: Optional[str], keys: Optional[Sequence[str]],
                     delay_ms: Optional[int]) -> Call[None]:
    body = _some(action=action, text=text, keys=list(keys) if keys is not None else None, delayMs=delay_ms)
    # Typing takes up to 60 s on the server (delay_ms per character).
    return Call("POST", _desktop(sandbox_id, "/keyboard"), _nothing, json=body, timeout=90)


def desktop_open(sandbox_id: str, target: str) -> Call[None]:
    return Call("POST", _desktop(sandbox_id, "/open"), _nothing, json={"target": target})


def desktop_launch(sandbox_id: str, app: str) -> Call[None]:
    return Call("POST", _desktop(sandbox_id, "/launch"), _nothing, json={"app": app})


def desktop_windows(sandbox_id: str) -> Call[List[DesktopWindow]]:
    return Call("GET", _desktop(sandbox_id, "/windows"), _many(DesktopWindow.from_json, "windows"))


def desktop_stream_start(sandbox_id: str, control: bool, ttl_seconds: Optional[int]) -> Call[DesktopViewer]:
    body = _some(control=control or None, ttlSeconds=ttl_seconds)
    return Call("POST", _desktop(sandbox_id, "/stream"), _one(DesktopViewer.from_json), json=body)


def desktop_stream_stop(sandbox_id: str) -> Call[None]:
    return Call("DELETE", _desktop(sandbox_id, "/stream"), _nothing)


def desktop_stream_revoke(sandbox_id: str, viewer_id: str) -> Call[None]:
    return Call("DELETE", _desktop(sandbox_id, "/stream/viewers/" + _name(viewer_id)), _nothing)


# Files --------------------------------------------------------------------------------------------------


def _files(sandbox_id: str, sub: str = "") -> str:
    return sandbox_path(sandbox_id, "/files" + sub)


def read_file(sandbox_id: str, path: str, format: str, user: Optional[str]) -> Call[Union[str, bytes]]:
    """A whole file, as text (UTF-8) or bytes; format "stream" is open_file."""
    if format not in ("text", "bytes", "stream"):
        raise InvalidArgumentError(f"format must be 'text', 'bytes' or 'stream', not {format!r}")
    read: Callable[[httpx.Response], Union[str, bytes]] = (
        (lambda resp: resp.content.decode("utf-8")) if format == "text" else (lambda resp: resp.content))
    return Call("GET", _files(sandbox_id), read, params=_core.file_params(path, user))


def open_file(sandbox_id: str, path: str, user: Optional[str]) -> Open:
    """A file read as it comes, a chunk at a time."""
    return Open(_files(sandbox_id), _core.file_params(path, user), read_timeout=UNSET)


def write_file(sandbox_id: str, path: str, user: Optional[str], content: Any,
               metadata: Optional[Mapping[str, str]] = None) -> Call[EntryInfo]:
    """PUT a file; content is bytes or an iterator of them (each client makes it from what the caller gave).
    metadata goes as metadata[key]=value parameters, kept as the file's extended attributes."""
    params = _core.file_params(path, user)
    for k, v in (metadata or {}).items():
        params[f"metadata[{k}]"] = v
    return Call("PUT", _files(sandbox_id), _one(EntryInfo.from_json), params=params, content=content)


def rename_file(sandbox_id: str, old_path: str, new_path: str, user: Optional[str]) -> Call[EntryInfo]:
    return Call("POST", _files(sandbox_id, "/rename"), _one(EntryInfo.from_json),
                params=_core.file_params(old_path, user, to=new_path))


def list_dir(sandbox_id: str, path: str, user: Optional[str]) -> Call[List[EntryInfo]]:
    return Call("GET", _files(sandbox_id, "/list"), _many(EntryInfo.from_json, "entries"),
                params=_core.file_params(path, user))


def stat(sandbox_id: str, path: str, user: Optional[str]) -> Call[EntryInfo]:
    return Call("GET", _files(sandbox_id, "/stat"), _one(EntryInfo.from_json), params=_core.file_params(path, user))


def _false_if_missing(err: LizardError) -> bool:
    if isinstance(err, NotFoundError) and not isinstance(err, SandboxGoneError):
        return False
    raise err


def exists(sandbox_id: str, path: str, user: Optional[str]) -> Call[bool]:
    """A stat that answers False for a missing file (but raises for a gone sandbox)."""
    return Call("GET", _files(sandbox_id, "/stat"), lambda resp: True, params=_core.file_params(path, user),
                rescue=_false_if_missing)


def remove(sandbox_id: str, path: str, user: Optional[str]) -> Call[None]:
    return Call("DELETE", _files(sandbox_id), _nothing, params=_core.file_params(path, user))


def make_dir(sandbox_id: str, path: str, user: Optional[str]) -> Call[EntryInfo]:
    return Call("POST", _files(sandbox_id, "/mkdir"), _one(EntryInfo.from_json), params=_core.file_params(path, user))


def watch_dir(sandbox_id: str, path: str, recursive: bool, user: Optional[str], include_entry: bool = False) -> Open:
    extra = {"recursive": "true" if recursive else "false"}
    if include_entry:
        extra["includeEntry"] = "true"
    return Open(_files(sandbox_id, "/watch"), _core.file_params(path, user, **extra))


# Background processes and terminals ---------------------------------------------------------------------


def _processes(sandbox_id: str, pid: Optional[int] = None, rest: str = "") -> str:
    base = sandbox_path(sandbox_id, "/processes")
    return base if pid is None else f"{base}/{int(pid)}{rest}"


def start_process(
    sandbox_id: str,
    cmd: Union[None, str, Sequence[str]],
    cwd: Optional[str],
    envs: Optional[Mapping[str, str]],
    stdin: bool,
    timeout_ms: Optional[int],
    tag: Optional[str],
    user: Optional[str],
    pty: Optional[Tuple[int, int]] = None,
) -> Call[ProcessInfo]:
    """POST /processes: a command, or a terminal of pty = (cols, rows)."""
    body = _core.start_body(cmd, cwd, envs, stdin, timeout_ms, tag, user, pty)
    return Call("POST", _processes(sandbox_id), _one(ProcessInfo.from_json), json=body)


def list_processes(sandbox_id: str) -> Call[List[ProcessInfo]]:
    return Call("GET", _processes(sandbox_id), _many(ProcessInfo.from_json, "processes"))


def get_process(sandbox_id: str, pid: int) -> Call[ProcessInfo]:
    return Call("GET", _processes(sandbox_id, pid), _one(ProcessInfo.from_json))


def process_output(sandbox_id: str, pid: int) -> Open:
    return Open(_processes(sandbox_id, pid, "/output"))


def terminal_path(sandbox_id: str, pid: int) -> str:
    """The path of a terminal's WebSocket."""
    return _processes(sandbox_id, pid, "/ws")


def send_stdin(sandbox_id: str, pid: int, data: Union[str, bytes, bytearray, memoryview]) -> Call[None]:
    # No timeout: it returns once the process took the bytes, which a busy process may take long to.
    return Call("POST", _processes(sandbox_id, pid, "/stdin"), _nothing, content=_core.stdin_bytes(data), timeout=None)


def close_stdin(sandbox_id: str, pid: int) -> Call[None]:
    return Call("POST", _processes(sandbox_id, pid, "/stdin/close"), _nothing)


def signal_process(sandbox_id: str, pid: int, signal: Union[str, int]) -> Call[None]:
    return Call("POST", _processes(sandbox_id, pid, "/signal"), _nothing, json=_core.signal_body(signal))


def wait_exit(sandbox_id: str, pid: int) -> Call[ProcessInfo]:
    return Call("GET", _processes(sandbox_id, pid), _one(ProcessInfo.from_json), params={"wait": "1"}, timeout=None)


def resize(sandbox_id: str, pid: int, cols: int, rows: int) -> Call[None]:
    return Call("POST", _processes(sandbox_id, pid, "/resize"), _nothing, json=_core.size_body(cols, rows))


# The project's volumes, secrets, templates and events ---------------------------------------------------


def create_volume(name: str, size_mb: Optional[int]) -> Call[VolumeInfo]:
    return Call("POST", "/v1/volumes", _one(VolumeInfo.from_json), json=_core.volume_body(name, size_mb))


def list_volumes() -> Call[List[VolumeInfo]]:
    return Call("GET", "/v1/volumes", _many(VolumeInfo.from_json, "volumes"))


def get_volume(name: str) -> Call[VolumeInfo]:
    return Call("GET", f"/v1/volumes/{_name(name)}", _one(VolumeInfo.from_json))


def delete_volume(name: str) -> Call[None]:
    return Call("DELETE", f"/v1/volumes/{_name(name)}", _nothing)


def set_secret(name: str, value: str, hosts: Sequence[str], allow_http: bool) -> Call[SecretInfo]:
    body = _core.secret_body(name, value, hosts, allow_http)
    return Call("PUT", f"/v1/secrets/{_name(name)}", _one(SecretInfo.from_json), json=body)


def list_secrets() -> Call[List[SecretInfo]]:
    return Call("GET", "/v1/secrets", _many(SecretInfo.from_json, "secrets"))


def delete_secret(name: str) -> Call[None]:
    return Call("DELETE", f"/v1/secrets/{_name(name)}", _nothing)


def build_template(name: str, recipe: Mapping[str, Any], on_event: Optional[Callable[[Dict[str, Any]], Any]],
                   timeout: Optional[float], registry: Optional[Mapping[str, str]] = None,
                   skip_cache: bool = False) -> Stream[TemplateInfo]:
    """POST /v1/templates: on_event gets each progress event; the result is the template once built."""
    build = _core.TemplateBuild(on_event)
    return Stream("/v1/templates", _core.template_body(name, recipe, registry, skip_cache), timeout, build.feed,
                  lambda: TemplateInfo.from_json(build.finish()), {"event": on_event})


def list_templates() -> Call[List[TemplateInfo]]:
    return Call("GET", "/v1/templates", _many(TemplateInfo.from_json, "templates"))


def get_template(name: str) -> Call[TemplateInfo]:
    return Call("GET", f"/v1/templates/{_name(name)}", _one(TemplateInfo.from_json))


def delete_template(name: str) -> Call[None]:
    return Call("DELETE", f"/v1/templates/{_name(name)}", _nothing)


def list_events(sandbox_id: Optional[str], types: Optional[Sequence[str]], metadata: Optional[Mapping[str, str]],
                after: Optional[int], limit: Optional[int]) -> Call[EventPage]:
    params = _core.event_params(sandbox_id, types, metadata, after, limit, False)
    return Call("GET", "/v1/events", _one(EventPage.from_json), params=params)


def follow_events(sandbox_id: Optional[str], types: Optional[Sequence[str]], metadata: Optional[Mapping[str, str]],
                  after: Optional[int]) -> Open:
    return Open("/v1/events", _core.event_params(sandbox_id, types, metadata, after, None, True))
