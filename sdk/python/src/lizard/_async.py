"""A client of Lizard: AsyncCodeSandbox and its files and process helpers. The asyncio client is _async.py; the
synchronous one, _sync.py, is generated from it by scripts/gen_sync.py, so that a feature is written once.

What each call sends and how its answer is read is in _calls.py; this module sends it.

The generator drops async and await and renames each AsyncX to X, and httpx's async methods to their twins (its
RENAMES). Where the two clients differ in more than that (a thread or a task follows a watch, a sync
property may fetch), _async.py says both in a seam: the block under ``if True:  # ASYNC`` is the async
client's, the one under ``else:  # SYNC`` (or ``if False:  # SYNC``) the sync client's, and a docstring
followed by ``# SYNC docstring:`` gives the sync client the string after it. Edit _async.py, then run
``python sdk/python/scripts/gen_sync.py``; tests/test_generated.py fails until _sync.py is regenerated."""

from __future__ import annotations

import os
from types import TracebackType
from typing import (
    IO,
    Any,
    AsyncIterator,
    Callable,
    Dict,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Type,
    TypeVar,
    Union,
    overload,
)

import httpx

from . import _calls, _core
from ._async_commands import AsyncCommands, AsyncPty
from ._core import UNSET, AsyncFileData, ContextLike
from .errors import LizardError, error_from_response
from .models import (
    Context,
    DesktopViewer,
    DesktopWindow,
    EntryInfo,
    Event,
    EventPage,
    Execution,
    ExecutionError,
    FilesystemEvent,
    ProcessResult,
    Result,
    SandboxInfo,
    NetworkLogEntry,
    SandboxMetric,
    SecretInfo,
    SnapshotInfo,
    TemplateInfo,
    VolumeInfo,
)

if True:  # ASYNC
    import asyncio
    from typing import Awaitable, Coroutine, Generator
else:  # SYNC
    import socket
    import threading

__all__ = ["AsyncNetwork", "AsyncCodeSandbox", "AsyncFiles", "AsyncProcess", "AsyncVolume", "AsyncTemplate",
           "AsyncWatchHandle", "AsyncEvents", "AsyncEventStream"]

_CHUNK = 64 * 1024
T = TypeVar("T")


if True:  # ASYNC
    # A callback of the async client may be a plain function or a coroutine function.
    AsyncCallback = Callable[[Any], Union[Any, Awaitable[Any]]]


class _AsyncHttp:
    """One connection pool to a Lizard server; maps failures to the SDK's errors."""

    def __init__(
        self,
        api_url: str,
        api_key: str,
        request_timeout: Optional[float],
        transport: Optional[httpx.AsyncBaseTransport],
    ) -> None:
        self.api_url = api_url
        self.api_key = api_key
        self.request_timeout = request_timeout
        self.transport = transport
        self.client = httpx.AsyncClient(
            base_url=api_url,
            headers=_core.headers(api_key),
            timeout=_core.timeout(request_timeout),
            transport=transport,
            event_hooks={"request": [_core.ainject_trace]},
        )

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Any = None,
        content: Any = None,
        timeout: Any = UNSET,
    ) -> httpx.Response:
        kwargs: Dict[str, Any] = {"json": json, "params": params, "content": content}
        if timeout is not UNSET:
            kwargs["timeout"] = _core.timeout(timeout)
        try:
            resp = await self.client.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise _core.transport_error(exc, self.api_url) from exc
        if resp.status_code >= 300:
            raise error_from_response(resp.status_code, resp.content)
        return resp

    async def call(self, call: _calls.Call[T]) -> T:
        """Send a call and read its answer."""
        try:
            resp = await self.request(call.method, call.path, json=call.json, params=call.params,
                                      content=call.content, timeout=call.timeout)
        except LizardError as err:
            if call.rescue is None:
                raise
            return call.rescue(err)
        return call.read(resp)

    async def stream(self, stream: _calls.Stream[T]) -> T:
        """Send a stream's POST, feed it each event as it comes and call the callbacks it names (and await
        what they return, in the async client)."""
        splitter = _core.LineSplitter()
        timeout = _core.timeout(self.request_timeout, stream.read_timeout)

        async def on_event(event: Dict[str, Any]) -> None:
            call = stream.feed(event)
            if call is not None:
                await _core.acallback(stream.callbacks.get(call[0]), call[1])

        try:
            async with self.client.stream("POST", stream.path, json=stream.json, timeout=timeout) as resp:
                if resp.status_code >= 300:
                    raise error_from_response(resp.status_code, await resp.aread())
                async for chunk in resp.aiter_bytes():
                    for event in splitter.feed(chunk):
                        await on_event(event)
                for event in splitter.close():
                    await on_event(event)
        except httpx.TransportError as exc:
            raise _core.transport_error(exc, self.api_url) from exc
        return stream.finish()

    async def open(self, follow: _calls.Open) -> httpx.Response:
        """Send a GET whose body is read as it comes; the caller closes the response."""
        timeout = _core.timeout(self.request_timeout, follow.read_timeout)
        req = self.client.build_request("GET", follow.path, params=follow.params, timeout=timeout)
        try:
            resp = await self.client.send(req, stream=True)
        except httpx.TransportError as exc:
            raise _core.transport_error(exc, self.api_url) from exc
        if resp.status_code >= 300:
            try:
                raise error_from_response(resp.status_code, await resp.aread())
            finally:
                await resp.aclose()
        return resp

    def clone(self) -> "_AsyncHttp":
        """A new pool with the same settings, for another sandbox."""
        return _AsyncHttp(self.api_url, self.api_key, self.request_timeout, self.transport)

    async def close(self) -> None:
        await self.client.aclose()


async def _once(
    send: Union[_calls.Call[T], _calls.Stream[T]],
    api_key: Optional[str],
    api_url: Optional[str],
    request_timeout: Optional[float] = _core.DEFAULT_REQUEST_TIMEOUT,
    transport: Optional[httpx.AsyncBaseTransport] = None,
) -> T:
    """Send one call (or stream) of the key's project on a pool of its own."""
    url, key = _core.resolve_config(api_key, api_url)
    http = _AsyncHttp(url, key, request_timeout, transport)
    try:
        return await (http.stream(send) if isinstance(send, _calls.Stream) else http.call(send))
    finally:
        await http.close()


if True:  # ASYNC
    class _PendingSandbox:
        """What ``AsyncCodeSandbox.create`` returns: await it, or use it in ``async with`` directly."""

        def __init__(self, coro: Coroutine[Any, Any, "AsyncCodeSandbox"]) -> None:
            self._coro = coro
            self._sandbox: Optional[AsyncCodeSandbox] = None

        def __await__(self) -> Generator[Any, None, "AsyncCodeSandbox"]:
            return self._coro.__await__()

        async def __aenter__(self) -> "AsyncCodeSandbox":
            self._sandbox = await self._coro
            return self._sandbox

        async def __aexit__(
            self,
            exc_type: Optional[Type[BaseException]],
            exc: Optional[BaseException],
            tb: Optional[TracebackType],
        ) -> None:
            if self._sandbox is not None:
                await self._sandbox.__aexit__(exc_type, exc, tb)


class AsyncCodeSandbox:
    """A Lizard sandbox running the code interpreter, driven with asyncio.

    It has the same methods as :class:`~lizard.CodeSandbox`, as coroutines. Make one with
    ``await AsyncCodeSandbox.create(...)`` or ``async with AsyncCodeSandbox.create(...) as sandbox:``
    (which kills it on exit), or with :meth:`connect`.
    """
    # SYNC docstring:
    """A Lizard sandbox running the code interpreter, driven synchronously.

    Make one with :meth:`create` or :meth:`connect`. Used as a context manager, it kills the sandbox on
    exit. Errors raised by the code are returned in ``Execution.error``; failures of the requests raise
    :class:`~lizard.LizardError` subclasses.
    """

    def __init__(self, sandbox_id: str, *, _http: _AsyncHttp) -> None:
        """Wrap an existing sandbox; use :meth:`create` or :meth:`connect` instead."""
        self.sandbox_id = sandbox_id
        self._http = _http
        self._prefix = _calls.sandbox_path(sandbox_id)  # for raw requests (bench/bench.py)
        self.files = AsyncFiles(self)
        self.process = AsyncProcess(self)
        self.commands = AsyncCommands(self)
        self.pty = AsyncPty(self)
        self.network = AsyncNetwork(self)
        self.desktop = AsyncDesktop(self)
        self._info: Optional[SandboxInfo] = None

    # Lifecycle -----------------------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        project_id: Optional[str] = None,
        timeout_ms: int = 300_000,
        template: str = "interpreter",
        envs: Optional[Mapping[str, str]] = None,
        metadata: Optional[Mapping[str, str]] = None,
        lizard_token: bool = False,
        api_key: Optional[str] = None,
        api_url: Optional[str] = None,
        request_timeout: Optional[float] = UNSET,
        *,
        snapshot_id: Optional[str] = None,
        volumes: Optional[Sequence[Mapping[str, str]]] = None,
        public_ports: bool = False,
        memory_mb: Optional[int] = None,
        cpus: Optional[float] = None,
        disk_mb: Optional[int] = None,
        on_timeout: Optional[str] = None,
        allow_internet: Optional[bool] = None,
        network: Optional[Mapping[str, Any]] = None,
        pause_memory: Optional[bool] = None,
        ports_host: Optional[str] = None,
        transport: Optional[httpx.AsyncBaseTransport] = None,
    ) -> "_PendingSandbox":
        """Create a sandbox; await the result, or use it in ``async with``.

        The arguments are those of :meth:`lizard.CodeSandbox.create`.
        """
        # SYNC docstring:
        """Create a sandbox and return it once it runs.

        Args:
            project_id: the project the sandbox must belong to. The API key decides the project; when the
                new sandbox's project differs, it is killed and InvalidArgumentError is raised.
            timeout_ms: the sandbox's lifetime in milliseconds; 0 means it never ends by itself.
            template: the template to boot.
            envs: environment variables for all code in the sandbox. Put no secrets here that the code
                should not see.
            metadata: labels to find the sandbox by with :meth:`list`.
            lizard_token: give the sandbox a fresh API key scoped to its project (``LIZARD_API_KEY``
                inside), revoked when it ends. Code in the sandbox can then change the project.
            api_key: the API key; default ``LIZARD_API_KEY``.
            api_url: the server's URL; default ``LIZARD_API_URL``, else ``http://127.0.0.1:8080``.
            request_timeout: seconds for each ordinary HTTP request (None: no limit). The create request
                itself defaults to 900 s because a server builds its template on first use.
            snapshot_id: restore the sandbox from this snapshot (see :meth:`snapshot`) instead of booting
                template: its variables, files and processes are the snapshot's; envs and lizard_token
                cannot be used with it.
            volumes: the project's volumes to mount, ``[{"name": "data", "path": "/home/user/data"}]`` (see
                :class:`Volume`); their files outlive the sandbox.
            public_ports: let anyone with a :meth:`get_host` URL reach the sandbox's ports, without the API key
                or its access token.
            ports_host: the ``Host`` header requests to the sandbox's ports carry in place of the caller's (which
                goes in ``X-Forwarded-Host``), ``${PORT}`` replaced by the port: ``"localhost:${PORT}"`` for a
                program that answers only its own name (docs/ports.md).
            memory_mb: the sandbox's memory in MiB; default and maximum are the server's.
            cpus: its CPU time in cores (1.5 = one and a half); default and maximum are the server's.
            disk_mb: the size of its writable layer in MiB; default and maximum are the server's. Another size
                than the default boots cold instead of from the template's snapshot.
            on_timeout: what happens when the timeout passes: ``"kill"`` (the default) or ``"pause"``.
            pause_memory: False has its pauses (at its timeout, and :meth:`pause` without ``memory``) keep its
                disk alone: no memory, a fresh boot at resume (see :meth:`pause`).
            allow_internet: False takes all network egress away from the sandbox; None or True leaves what the
                server allows.
            network: its network policy by domain name, such as ``{"default": "deny", "allow": ["pypi.org",
                "*.pythonhosted.org"]}`` (docs/network.md); change it later with ``sandbox.network.update``.
            transport: an httpx transport to send requests through (tests, custom networking).
        """
        url, key = _core.resolve_config(api_key, api_url)
        body = _core.create_body(template, timeout_ms, envs, metadata, lizard_token, snapshot_id, volumes, public_ports,
                                 memory_mb=memory_mb, cpus=cpus, disk_mb=disk_mb, on_timeout=on_timeout,
                                 allow_internet=allow_internet, network=network, pause_memory=pause_memory,
                                 ports_host=ports_host)
        if True:  # ASYNC
            return _PendingSandbox(cls._create(project_id, body, url, key, request_timeout, transport))
        else:  # SYNC
            return cls._create(project_id, body, url, key, request_timeout, transport)

    @classmethod
    async def _create(
        cls,
        project_id: Optional[str],
        body: Dict[str, Any],
        url: str,
        key: str,
        request_timeout: Optional[float],
        transport: Optional[httpx.AsyncBaseTransport],
    ) -> "AsyncCodeSandbox":
        http = _AsyncHttp(url, key, _calls.client_timeout(request_timeout), transport)
        try:
            info = await http.call(_calls.create(body, request_timeout))
            sandbox = cls(info.sandbox_id, _http=http)
            sandbox._info = info
            wrong = _calls.wrong_project(project_id, info)
            if wrong is not None:
                await sandbox._kill_quietly()
                raise wrong
            return sandbox
        except BaseException:
            await http.close()
            raise

    @classmethod
    async def connect(
        cls,
        sandbox_id: str,
        api_key: Optional[str] = None,
        api_url: Optional[str] = None,
        request_timeout: Optional[float] = _core.DEFAULT_REQUEST_TIMEOUT,
        *,
        transport: Optional[httpx.AsyncBaseTransport] = None,
    ) -> "AsyncCodeSandbox":
        """Attach to an existing sandbox by id.

        Raises NotFoundError when no such sandbox exists in the key's project, and SandboxGoneError when it
        has already ended.
        """
        url, key = _core.resolve_config(api_key, api_url)
        http = _AsyncHttp(url, key, request_timeout, transport)
        try:
            sandbox = cls(sandbox_id, _http=http)
            if _calls.check_connectable(sandbox_id, await sandbox.get_info()):
                await sandbox.resume()
            return sandbox
        except BaseException:
            await http.close()
            raise

    @classmethod
    async def list_snapshots(
        cls,
        name: Optional[str] = None,
        api_key: Optional[str] = None,
        api_url: Optional[str] = None,
        request_timeout: Optional[float] = _core.DEFAULT_REQUEST_TIMEOUT,
        *,
        transport: Optional[httpx.AsyncBaseTransport] = None,
    ) -> List[SnapshotInfo]:
        """The key's project's snapshots, newest first; with ``name``, the one of that name (or none)."""
        return await _once(_calls.list_snapshots(name), api_key, api_url, request_timeout, transport)

    @classmethod
    async def list(
        cls,
        metadata: Optional[Mapping[str, str]] = None,
        state: Optional[str] = None,
        api_key: Optional[str] = None,
        api_url: Optional[str] = None,
        request_timeout: Optional[float] = _core.DEFAULT_REQUEST_TIMEOUT,
        *,
        transport: Optional[httpx.AsyncBaseTransport] = None,
    ) -> List[SandboxInfo]:
        """List the sandboxes of the key's project, filtered by metadata (all pairs must match) and state."""
        return await _once(_calls.list_sandboxes(metadata, state), api_key, api_url, request_timeout, transport)

    async def get_info(self) -> SandboxInfo:
        """Return what the server knows about this sandbox."""
        self._info = await self._http.call(_calls.get_info(self.sandbox_id))
        return self._info

    if False:  # SYNC
        def _known(self) -> SandboxInfo:
            return self._info if self._info is not None else self.get_info()

    @property
    def access_token(self) -> Optional[str]:
        """The token that opens this sandbox's ports, as of create, connect or the last get_info."""
        # SYNC docstring:
        """The token that opens this sandbox's ports (and nothing else): send it as
        ``?lizard_access_token=...`` or the ``X-Lizard-Access-Token`` header."""
        if True:  # ASYNC
            return self._info.access_token if self._info is not None else None
        else:  # SYNC
            return self._known().access_token

    def get_host(self, port: int) -> str:
        """The URL of ``port`` inside the sandbox, served through Lizard (see
        :meth:`lizard.CodeSandbox.get_host`)."""
        # SYNC docstring:
        """The URL at which a server listening on ``port`` inside the sandbox (on 0.0.0.0) is reached
        through Lizard, HTTP and WebSocket: ``{api_url}/v1/sandboxes/{id}/ports/{port}/``, or
        ``http://{port}-{id}.{domain}/`` when the server has a ports domain. Requests need the API key
        (``Authorization: Bearer``) or :attr:`access_token`, unless the sandbox was created with
        ``public_ports=True``."""
        if True:  # ASYNC
            domain = self._info.ports_domain if self._info is not None else None
        else:  # SYNC
            domain = self._known().ports_domain
        return _core.port_url(self._http.api_url, self.sandbox_id, port, domain)

    async def set_timeout(self, timeout_ms: int) -> None:
        """Reset the sandbox's deadline to timeout_ms from now; 0 means it never ends by itself."""
        await self._http.call(_calls.set_timeout(self.sandbox_id, timeout_ms))

    async def get_metrics(self) -> List[SandboxMetric]:
        """The sandbox's CPU, memory and disk samples of the last 5 minutes, oldest first (one every 5 s;
        none while it is paused or in its first seconds)."""
        return await self._http.call(_calls.get_metrics(self.sandbox_id))

    async def kill(self) -> None:
        """End the sandbox now. Killing a sandbox that is already gone is not an error."""
        await self._http.call(_calls.kill(self.sandbox_id))

    async def _kill_quietly(self) -> None:
        try:
            await self.kill()
        except LizardError:
            pass

    async def pause(self, wait_durable: bool = False, memory: Optional[bool] = None) -> None:
        """Pause the sandbox: its memory, kernel variables, processes and files are saved to the server's
        disk and it stops using CPU and memory. Its timeout clock stops too. Any call on it (run_code,
        commands, files), :meth:`resume` or ``connect`` resumes it. Raises ConflictError when a call
        is still running after 10 s.

        The image is copied to the server's image store in the background; ``wait_durable=True``
        returns only once it is there (``durable``), so that the sandbox outlives the machine that
        paused it, and raises SandboxError (503) if that takes over 5 minutes.

        ``memory=False`` keeps its disk alone — its files, not its memory, kernel variables or
        processes — a far smaller image; the resume boots it fresh over that disk, with its envs,
        metadata and ID. It holds for the sandbox's later pauses too (those at its timeout);
        ``None`` keeps the sandbox's setting."""
        await self._http.call(_calls.pause(self.sandbox_id, wait_durable, memory))

    async def resume(self, timeout_ms: Optional[int] = None, memory: Optional[bool] = None) -> None:
        """Resume a paused sandbox (a running one is left as is). timeout_ms, when given, replaces the time
        it had left when paused. Raises SandboxGoneError when its image could not be restored. ``memory=False``
        asks for a fresh boot over its disk, as a sandbox paused with ``memory=False`` resumes anyway; one
        paused with its memory raises ConflictError and stays paused."""
        await self._http.call(_calls.resume(self.sandbox_id, timeout_ms, memory))

    async def snapshot(self, name: Optional[str] = None) -> SnapshotInfo:
        """Save the sandbox, kernel state included, without stopping it. Create sandboxes from it with
        ``create(snapshot_id=...)``; delete it with :meth:`delete_snapshot`. A ``name`` names it in the
        project: ``create(snapshot_id=name)`` and ``list_snapshots(name=name)`` take it, and a name given
        again moves to the newer snapshot (the older one keeps its ID)."""
        return await self._http.call(_calls.snapshot(self.sandbox_id, name))

    async def delete_snapshot(self, snapshot_id: str) -> None:
        """Delete a snapshot of the key's project and its image."""
        await self._http.call(_calls.delete_snapshot(snapshot_id))

    @overload
    async def fork(self, *, timeout_ms: Optional[int] = ..., metadata: Optional[Mapping[str, str]] = ...) -> "AsyncCodeSandbox": ...

    @overload
    async def fork(
        self, count: int, *, timeout_ms: Optional[int] = ..., metadata: Optional[Mapping[str, str]] = ...
    ) -> List["AsyncCodeSandbox"]: ...

    async def fork(
        self,
        count: Optional[int] = None,
        *,
        timeout_ms: Optional[int] = None,
        metadata: Optional[Mapping[str, str]] = None,
    ) -> Union["AsyncCodeSandbox", List["AsyncCodeSandbox"]]:
        """Copy the sandbox as it is now (variables, files, processes) into new, independent sandboxes.

        ``fork()`` returns one new sandbox; ``fork(count=N)`` (1 to 16) returns a list of N. Each fork
        has its own address, and Python's ``random`` and NumPy's global generator are reseeded in each.
        """
        ids = await self._http.call(_calls.fork(self.sandbox_id, count, timeout_ms, metadata))
        forks = [type(self)(sandbox_id, _http=self._http.clone()) for sandbox_id in ids]
        return forks if count is not None else forks[0]

    async def close(self) -> None:
        """Close the HTTP connections without killing the sandbox."""
        await self._http.close()

    async def __aenter__(self) -> "AsyncCodeSandbox":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        try:
            if exc_type is None:
                await self.kill()
            else:
                # The body's exception matters more than a failure to clean up after it.
                await self._kill_quietly()
        finally:
            await self.close()

    def __repr__(self) -> str:
        return f"AsyncCodeSandbox(sandbox_id={self.sandbox_id!r}, api_url={self._http.api_url!r})"

    # Code ----------------------------------------------------------------------------------------------

    async def run_code(
        self,
        code: str,
        *,
        language: Optional[str] = None,
        context: Optional[ContextLike] = None,
        timeout_ms: int = 60_000,
        envs: Optional[Mapping[str, str]] = None,
        on_stdout: Optional[Callable[[str], Any]] = None,
        on_stderr: Optional[Callable[[str], Any]] = None,
        on_result: Optional[Callable[[Result], Any]] = None,
        on_error: Optional[Callable[[ExecutionError], Any]] = None,
    ) -> Execution:
        """Run code and return its Execution; see :meth:`lizard.CodeSandbox.run_code`.

        Callbacks may be plain functions or coroutine functions; they are awaited in order.
        """
        # SYNC docstring:
        """Run code and return its Execution. Errors in the code are in ``Execution.error``, not raised.

        Args:
            code: the code to run.
            language: ``"python"`` (default), ``"javascript"``, ``"bash"``, ``"r"`` or ``"java"`` (R and Java
                run in a kernel that keeps its state: IRkernel, JShell); defaults to the context's.
            context: a Context (or its id) to run in; default the language's default context.
            timeout_ms: bound on this call; on expiry a Python, R or Java kernel is interrupted, its state kept, and
                ``error.name`` is ``"TimeoutError"``. 0 means no bound.
            envs: environment variables for this call only.
            on_stdout, on_stderr, on_result, on_error: called as output arrives, in order, while the code
                runs.
        """
        return await self._http.stream(_calls.run_code(self.sandbox_id, code, language, context, timeout_ms, envs,
                                                       on_stdout, on_stderr, on_result, on_error))

    async def create_context(self, language: str = "python", cwd: Optional[str] = None) -> Context:
        """Start a new context: its own kernel, variables and working directory (default the home)."""
        return await self._http.call(_calls.create_context(self.sandbox_id, language, cwd))

    async def list_contexts(self) -> List[Context]:
        """List the sandbox's contexts, default ones included."""
        return await self._http.call(_calls.list_contexts(self.sandbox_id))

    async def restart_context(self, context: ContextLike) -> Context:
        """Restart a context's kernel, dropping its variables."""
        return await self._http.call(_calls.restart_context(self.sandbox_id, context))

    async def delete_context(self, context: ContextLike) -> None:
        """Delete a context and stop its kernel."""
        await self._http.call(_calls.delete_context(self.sandbox_id, context))


class AsyncNetwork:
    """A sandbox's network policy by domain name (docs/network.md): ``sandbox.network``."""

    def __init__(self, sandbox: "AsyncCodeSandbox") -> None:
        self._sandbox = sandbox

    async def update(
        self,
        *,
        default: Optional[str] = None,
        allow: Optional[Sequence[str]] = None,
        deny: Optional[Sequence[str]] = None,
        ports: Optional[Sequence[int]] = None,
        inject: Optional[Sequence[Mapping[str, Any]]] = None,
        cut: bool = False,
    ) -> Dict[str, Any]:
        """Change the policy while the sandbox runs; each argument given replaces that part of it.

        New connections follow it at once; open ones go on unless ``cut``. Returns the policy now in force.
        Raises InvalidArgumentError naming the field for a bad rule, ConflictError for a sandbox created
        without a policy.
        """
        s = self._sandbox
        return await s._http.call(_calls.update_network(s.sandbox_id, default, allow, deny, ports, inject, cut))

    async def log(self) -> List[NetworkLogEntry]:
        """The sandbox's newest egress decisions (at most 1000), oldest first."""
        return await self._sandbox._http.call(_calls.network_log(self._sandbox.sandbox_id))

    @staticmethod
    async def get_default(*, api_key: Optional[str] = None, api_url: Optional[str] = None) -> Optional[Dict[str, Any]]:
        """The key's project's default policy, which sandboxes created without ``network`` get; None when
        the project has none (they get the server's ``--network-default``)."""
        return await _once(_calls.get_network_default(), api_key, api_url)

    @staticmethod
    async def set_default(policy: Mapping[str, Any], *, api_key: Optional[str] = None,
                          api_url: Optional[str] = None) -> Dict[str, Any]:
        """Set the project's default policy, such as ``{"default": "deny", "allow": ["pypi.org"]}``, for
        sandboxes created from now on; InvalidArgumentError naming the field for a bad rule or one looser
        than the server permits."""
        return await _once(_calls.set_network_default(policy), api_key, api_url)

    @staticmethod
    async def clear_default(*, api_key: Optional[str] = None, api_url: Optional[str] = None) -> None:
        """Clear the project's default policy: new sandboxes get the server's again."""
        await _once(_calls.clear_network_default(), api_key, api_url)


class AsyncEvents:
    """The key's project's sandbox lifecycle events, with asyncio (see :class:`lizard.Events`)."""
    # SYNC docstring:
    """The key's project's sandbox lifecycle events (docs/events.md): ``Events.list(...)`` for a page,
    ``for ev in Events.follow(...)`` to see them as they happen."""

    @staticmethod
    async def list(
        *,
        sandbox_id: Optional[str] = None,
        types: Optional[Sequence[str]] = None,
        metadata: Optional[Mapping[str, str]] = None,
        after: Optional[int] = None,
        limit: Optional[int] = None,
        api_key: Optional[str] = None,
        api_url: Optional[str] = None,
    ) -> EventPage:
        """One page of events, oldest first, filtered by sandbox, types and metadata (all must match).
        Pass the page's ``next`` as ``after`` for the following one while ``has_more``."""
        return await _once(_calls.list_events(sandbox_id, types, metadata, after, limit), api_key, api_url)

    @staticmethod
    async def follow(
        *,
        sandbox_id: Optional[str] = None,
        types: Optional[Sequence[str]] = None,
        metadata: Optional[Mapping[str, str]] = None,
        after: Optional[int] = None,
        api_key: Optional[str] = None,
        api_url: Optional[str] = None,
    ) -> "AsyncEventStream":
        """Follow events as they are recorded: from now, or after event ``after``. The server follows once
        this returns; ``async for`` over the stream and close it, or use it in ``async with``."""
        # SYNC docstring:
        """Follow events as they are recorded: from now, or after event ``after``. The server follows once
        this returns; iterate the stream (it never ends by itself) and close it, or use it in ``with``."""
        follow = _calls.follow_events(sandbox_id, types, metadata, after)
        url, key = _core.resolve_config(api_key, api_url)
        http = _AsyncHttp(url, key, _core.DEFAULT_REQUEST_TIMEOUT, None)
        try:
            resp = await http.open(follow)
        except BaseException:
            await http.close()
            raise
        return AsyncEventStream(http, resp, after or 0)


class AsyncEventStream:
    """A live follow of events (:meth:`AsyncEvents.follow`): ``async for`` it for :class:`Event` values."""
    # SYNC docstring:
    """A live follow of events (:meth:`Events.follow`): iterate it for :class:`Event` values."""

    def __init__(self, http: _AsyncHttp, resp: httpx.Response, after: int) -> None:
        self._http = http
        self._resp = resp
        self._events = self._read()
        self.last = after
        """The ID of the last event returned: ``AsyncEvents.follow(after=stream.last)`` resumes without a gap."""

    async def _read(self) -> AsyncIterator[Event]:
        splitter = _core.LineSplitter()
        try:
            async for chunk in self._resp.aiter_bytes():
                for obj in splitter.feed(chunk):
                    yield Event.from_json(obj)
        except httpx.TransportError as exc:
            raise _core.transport_error(exc, self._http.api_url) from exc

    def __aiter__(self) -> AsyncIterator[Event]:
        return self

    async def __anext__(self) -> Event:
        ev = await self._events.__anext__()
        self.last = ev.id
        return ev

    async def close(self) -> None:
        """Stop following."""
        await self._resp.aclose()
        await self._http.close()

    async def __aenter__(self) -> "AsyncEventStream":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


class AsyncVolume:
    """Persistent volumes of the key's project: ``AsyncVolume.create("data")``, then
    ``AsyncCodeSandbox.create(volumes=[{"name": "data", "path": "/home/user/data"}])``."""


    @staticmethod
    async def create(name: str, size_mb: Optional[int] = None, *, api_key: Optional[str] = None,
                     api_url: Optional[str] = None) -> VolumeInfo:
        """Make a volume of size_mb MiB (default the server's, 1024); the size is its filesystem's."""
        return await _once(_calls.create_volume(name, size_mb), api_key, api_url)

    @staticmethod
    async def list(*, api_key: Optional[str] = None, api_url: Optional[str] = None) -> List[VolumeInfo]:
        """The project's volumes, by name."""
        return await _once(_calls.list_volumes(), api_key, api_url)

    @staticmethod
    async def get(name: str, *, api_key: Optional[str] = None, api_url: Optional[str] = None) -> VolumeInfo:
        """One volume; NotFoundError when the project has none of that name."""
        return await _once(_calls.get_volume(name), api_key, api_url)

    @staticmethod
    async def delete(name: str, *, api_key: Optional[str] = None, api_url: Optional[str] = None) -> None:
        """Delete a volume and its data; ConflictError while a live sandbox mounts it."""
        await _once(_calls.delete_volume(name), api_key, api_url)

class AsyncSecret:
    """Secrets of the key's project (docs/secrets.md): ``AsyncSecret.set("OPENAI_API_KEY", value,
    hosts=["api.openai.com"])``, then a sandbox's network policy injects it into its requests to those hosts;
    no call returns a value. They need a project key: a sandbox's own key gets PermissionDeniedError."""

    @staticmethod
    async def set(
        name: str,
        value: str,
        *,
        hosts: Sequence[str],
        allow_http: bool = False,
        api_key: Optional[str] = None,
        api_url: Optional[str] = None,
    ) -> SecretInfo:
        """Seal value as secret name, to be sent to ``hosts`` alone (names or ``*.`` wildcards, as network
        rules name them) and over HTTPS only unless ``allow_http``, replacing any value and hosts it had;
        InvalidArgumentError for a name that is not an identifier, a value over 64 KiB or no hosts."""
        return await _once(_calls.set_secret(name, value, hosts, allow_http), api_key, api_url)

    @staticmethod
    async def list(*, api_key: Optional[str] = None, api_url: Optional[str] = None) -> List[SecretInfo]:
        """The project's secrets by name: names and times, never values."""
        return await _once(_calls.list_secrets(), api_key, api_url)

    @staticmethod
    async def delete(name: str, *, api_key: Optional[str] = None, api_url: Optional[str] = None) -> None:
        """Delete secret name; NotFoundError when the project has none of that name."""
        await _once(_calls.delete_secret(name), api_key, api_url)

class AsyncTemplate:
    """Custom templates of the key's project (docs/templates.md): ``AsyncTemplate.build("my-tpl", {...})``,
    then ``AsyncCodeSandbox.create(template="my-tpl")``."""

    @staticmethod
    async def build(
        name: str,
        recipe: Mapping[str, Any],
        *,
        on_event: Optional[Callable[[Dict[str, Any]], Any]] = None,
        api_key: Optional[str] = None,
        api_url: Optional[str] = None,
        timeout: Optional[float] = _core.DEFAULT_BUILD_TIMEOUT,
        registry: Optional[Mapping[str, str]] = None,
        skip_cache: bool = False,
    ) -> TemplateInfo:
        """Build (or find in the cache) template name from recipe, in the wire form of the API's
        TemplateRecipe (``steps``, ``start`` and ``ready`` included), except that files give their ``content``
        as str or bytes (the SDK encodes it).
        on_event gets each progress event (``{"type": "step"|"log", ...}``) as it comes. A recipe
        ``{"from": "registry.example.com/team/app:1.4", ...}`` builds on that image (docs/templates.md);
        registry (``{"username": ..., "password": ...}``, or ``"passwordSecret"``: the name of the project's secret
        holding the password) pulls a private one, sent with this build only. skip_cache runs every step
        again, even when the project has a build of the recipe or of a prefix of its steps.

        Raises TemplateBuildError when a step fails (its ``step`` and ``log``), InvalidArgumentError
        when the request is refused.
        """
        return await _once(_calls.build_template(name, recipe, on_event, timeout, registry, skip_cache), api_key, api_url)

    @staticmethod
    async def list(*, api_key: Optional[str] = None, api_url: Optional[str] = None) -> List[TemplateInfo]:
        """The project's custom templates, by name (built-in ones are not listed)."""
        return await _once(_calls.list_templates(), api_key, api_url)

    @staticmethod
    async def get(name: str, *, api_key: Optional[str] = None, api_url: Optional[str] = None) -> TemplateInfo:
        """One template; NotFoundError when the project has none of that name."""
        return await _once(_calls.get_template(name), api_key, api_url)

    @staticmethod
    async def delete(name: str, *, api_key: Optional[str] = None, api_url: Optional[str] = None) -> None:
        """Delete a template; ConflictError while live sandboxes of the project use it."""
        await _once(_calls.delete_template(name), api_key, api_url)


class AsyncProcess:
    """Runs commands in a sandbox, each in its own process (``sandbox.process``)."""

    def __init__(self, sandbox: AsyncCodeSandbox) -> None:
        """Bind to a sandbox; reach it as ``sandbox.process``."""
        self._sandbox = sandbox

    async def exec(
        self,
        cmd: Union[str, Sequence[str]],
        *,
        cwd: Optional[str] = None,
        envs: Optional[Mapping[str, str]] = None,
        timeout_ms: Optional[int] = None,
        stdin: Optional[str] = None,
        on_stdout: Optional[Callable[[str], Any]] = None,
        on_stderr: Optional[Callable[[str], Any]] = None,
    ) -> ProcessResult:
        """Run a command and wait for it. A string runs with ``bash -c``; a list runs as is.

        A non-zero exit is not an exception: check ``exit_code``. timeout_ms None means no bound.
        """
        s = self._sandbox
        return await s._http.stream(_calls.exec_process(s.sandbox_id, cmd, cwd, envs, timeout_ms, stdin,
                                                        on_stdout, on_stderr))


class AsyncFiles:
    """Reads and writes files in a sandbox (``sandbox.files``). Relative paths start at ``/home/user``.

    Every call takes ``user``: who it acts as, the sandbox user (the default) or ``"root"``. A call may do
    what its user may (writing under ``/etc`` as the sandbox user raises InvalidArgumentError saying
    permission was denied), and what it makes belongs to its user."""

    def __init__(self, sandbox: AsyncCodeSandbox) -> None:
        """Bind to a sandbox; reach it as ``sandbox.files``."""
        self._sandbox = sandbox

    @overload
    async def read(self, path: str, format: Literal["text"] = "text", *, user: Optional[str] = None) -> str: ...

    @overload
    async def read(self, path: str, format: Literal["bytes"], *, user: Optional[str] = None) -> bytes: ...

    @overload
    async def read(self, path: str, format: Literal["stream"], *, user: Optional[str] = None) -> AsyncIterator[bytes]: ...

    async def read(self, path: str, format: str = "text", *, user: Optional[str] = None) -> Union[str, bytes, AsyncIterator[bytes]]:
        """Read a file: whole, as text or bytes, or as an async stream of chunks (``format="stream"``); see
        :meth:`lizard.Files.read`."""
        # SYNC docstring:
        """Read a file: whole, as text (UTF-8) or bytes, or as a stream of chunks (``format="stream"``), which
        holds no more than a chunk of it at a time. The stream is opened at once (a missing file raises
        here); iterate it to the end or close it."""
        if format == "stream":
            return await self._stream(path, user)
        s = self._sandbox
        return await s._http.call(_calls.read_file(s.sandbox_id, path, format, user))

    async def _stream(self, path: str, user: Optional[str] = None) -> AsyncIterator[bytes]:
        s = self._sandbox
        resp = await s._http.open(_calls.open_file(s.sandbox_id, path, user))

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in resp.aiter_bytes(_CHUNK):
                    yield chunk
            except httpx.TransportError as exc:
                raise _core.transport_error(exc, s._http.api_url) from exc
            finally:
                await resp.aclose()

        return chunks()

    async def download(self, path: str, dest: Union[str, "os.PathLike[str]", IO[bytes]], *, user: Optional[str] = None) -> int:
        """Stream a file into dest (a local path, or a binary file object) and return its size."""
        n = 0
        stream = await self._stream(path, user)
        if isinstance(dest, (str, os.PathLike)):
            with open(dest, "wb") as f:
                async for chunk in stream:
                    f.write(chunk)
                    n += len(chunk)
            return n
        async for chunk in stream:
            dest.write(chunk)
            n += len(chunk)
        return n

    async def write(self, path: str, data: AsyncFileData, *, user: Optional[str] = None,
                    metadata: Optional[Mapping[str, str]] = None) -> EntryInfo:
        """Write a file, creating parent directories. File-like data (sync or async) and (async) iterables
        of bytes are streamed in chunks. ``metadata``: see :meth:`lizard.Files.write`."""
        # SYNC docstring:
        """Write a file, creating parent directories. A file object or an iterable of bytes is streamed in
        chunks, so a file of any size passes through; the file appears whole once all of it is written.
        ``metadata`` is kept with the file as its extended attributes (``user.e2b.<key>``) and shown as
        :attr:`EntryInfo.metadata`; a file written again keeps only that write's."""
        s = self._sandbox
        return await s._http.call(_calls.write_file(s.sandbox_id, path, user, _core.aupload_body(data), metadata))

    async def rename(self, old_path: str, new_path: str, *, user: Optional[str] = None) -> EntryInfo:
        """Rename or move a file or directory, as rename(2): a file at new_path is replaced. Returns the entry
        at its new path."""
        s = self._sandbox
        return await s._http.call(_calls.rename_file(s.sandbox_id, old_path, new_path, user))

    async def get_info(self, path: str, *, user: Optional[str] = None) -> EntryInfo:
        """Describe a file or directory (owner, group, permissions, symlink target...); raises
        NotFoundError when it does not exist. The same as :meth:`stat`."""
        return await self.stat(path, user=user)

    async def watch_dir(
        self,
        path: str,
        on_event: Callable[[FilesystemEvent], Any],
        *,
        recursive: bool = False,
        include_entry: bool = False,
        on_exit: Optional[Callable[[Optional[Exception]], Any]] = None,
        user: Optional[str] = None,
    ) -> "AsyncWatchHandle":
        """Watch a directory for changes: ``on_event`` (a function or a coroutine function) gets each
        :class:`FilesystemEvent` from a task; see :meth:`lizard.Files.watch_dir`."""
        # SYNC docstring:
        """Watch a directory for changes: ``on_event`` gets each :class:`FilesystemEvent` in a background
        thread. Returns once the watch is in place (every change after it is reported). The watch ends with
        :meth:`WatchHandle.stop`, when the directory is removed, or when the sandbox ends; ``on_exit`` then
        gets None, or the error (SandboxGoneError when the sandbox ended). A missing directory raises
        NotFoundError here, a file InvalidArgumentError. With ``include_entry`` each create, write and
        chmod event carries the file's :class:`EntryInfo` as ``entry``."""
        s = self._sandbox
        resp = await s._http.open(_calls.watch_dir(s.sandbox_id, path, recursive, user, include_entry))
        return AsyncWatchHandle(resp, s._http.api_url, on_event, on_exit)

    async def list(self, path: str = ".", *, user: Optional[str] = None) -> List[EntryInfo]:
        """List a directory."""
        s = self._sandbox
        return await s._http.call(_calls.list_dir(s.sandbox_id, path, user))

    async def stat(self, path: str, *, user: Optional[str] = None) -> EntryInfo:
        """Describe a file or directory; raises NotFoundError when it does not exist."""
        s = self._sandbox
        return await s._http.call(_calls.stat(s.sandbox_id, path, user))

    async def exists(self, path: str, *, user: Optional[str] = None) -> bool:
        """Whether a file or directory exists."""
        s = self._sandbox
        return await s._http.call(_calls.exists(s.sandbox_id, path, user))

    async def remove(self, path: str, *, user: Optional[str] = None) -> None:
        """Remove a file or a directory tree."""
        s = self._sandbox
        await s._http.call(_calls.remove(s.sandbox_id, path, user))

    async def make_dir(self, path: str, *, user: Optional[str] = None) -> EntryInfo:
        """Make a directory and its parents."""
        s = self._sandbox
        return await s._http.call(_calls.make_dir(s.sandbox_id, path, user))


if True:  # ASYNC
    class AsyncWatchHandle:
        """A running ``files.watch_dir`` of the async client; ``await stop()`` ends it."""

        def __init__(
            self,
            resp: httpx.Response,
            api_url: str,
            on_event: Callable[[FilesystemEvent], Any],
            on_exit: Optional[Callable[[Optional[Exception]], Any]],
        ) -> None:
            self._resp = resp
            self._stopped = False
            self.error: Optional[Exception] = None
            """Why the watch ended, if it ended with an error (SandboxGoneError when the sandbox ended)."""

            async def run() -> None:
                err: Optional[Exception] = None
                splitter = _core.LineSplitter()
                try:
                    async for chunk in resp.aiter_bytes():
                        for line in splitter.feed(chunk):
                            ev = _core.watch_event(line)
                            if ev is not None:
                                await _core.acallback(on_event, ev)
                except asyncio.CancelledError:
                    pass
                except Exception as exc:  # the connection's failure, the sandbox's end, or on_event's own error
                    if not self._stopped:
                        err = _core.follow_error(exc, api_url)
                finally:
                    await resp.aclose()
                self.error = err
                await _core.acallback(on_exit, err)

            self._task = asyncio.get_running_loop().create_task(run())

        async def stop(self) -> None:
            """End the watch (on_exit, if any, has run when this returns)."""
            self._stopped = True
            await _core.stop_task(self._task)
else:  # SYNC
    class WatchHandle:
        """A running ``files.watch_dir``; :meth:`stop` ends it."""

        def __init__(
            self,
            resp: httpx.Response,
            api_url: str,
            on_event: Callable[[FilesystemEvent], Any],
            on_exit: Optional[Callable[[Optional[Exception]], Any]],
        ) -> None:
            self._resp = resp
            self._stopped = threading.Event()
            self.error: Optional[Exception] = None
            """Why the watch ended, if it ended with an error (SandboxGoneError when the sandbox ended)."""

            def run() -> None:
                err: Optional[Exception] = None
                splitter = _core.LineSplitter()
                try:
                    for chunk in resp.iter_bytes():
                        for line in splitter.feed(chunk):
                            ev = _core.watch_event(line)
                            if ev is not None:
                                on_event(ev)
                except Exception as exc:  # the connection's failure, the sandbox's end, or on_event's own error
                    if not self._stopped.is_set():
                        err = _core.follow_error(exc, api_url)
                finally:
                    resp.close()
                self.error = err
                if on_exit is not None:
                    on_exit(err)

            self._thread = threading.Thread(target=run, name="lizard-watch", daemon=True)
            self._thread.start()

        def stop(self) -> None:
            """End the watch and wait for its thread (on_exit, if any, has run when this returns)."""
            self._stopped.set()
            # Closing the response does not wake a read blocked in the thread; shutting its socket down does.
            stream = self._resp.extensions.get("network_stream")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self._resp.close()
            if threading.current_thread() is not self._thread:
                self._thread.join()


class AsyncDesktop:
    """A desktop sandbox's screen, mouse, keyboard and windows (docs/desktop.md): ``sandbox.desktop``.

    The sandbox's template must run a desktop (templates/desktop/recipe.yaml); any other answers
    ConflictError saying it has none. Coordinates are pixels from the screen's top left.
    """

    def __init__(self, sandbox: "AsyncCodeSandbox") -> None:
        self._sandbox = sandbox
        self.stream = AsyncDesktopStream(sandbox)

    async def _call(self, call: "_calls.Call[Any]") -> Any:
        return await self._sandbox._http.call(call)

    async def screenshot(self, region: Optional[Tuple[int, int, int, int]] = None) -> bytes:
        """The screen as PNG bytes, or the part of it region = (x, y, width, height) covers."""
        return await self._call(_calls.desktop_screenshot(self._sandbox.sandbox_id, region))

    async def screen_size(self) -> Tuple[int, int]:
        """The screen's (width, height) in pixels."""
        return await self._call(_calls.desktop_screen(self._sandbox.sandbox_id))

    async def cursor_position(self) -> Tuple[int, int]:
        """Where the pointer is, (x, y)."""
        return await self._call(_calls.desktop_cursor(self._sandbox.sandbox_id))

    async def mouse(self, action: str, x: Optional[int] = None, y: Optional[int] = None, *, to_x: Optional[int] = None,
                    to_y: Optional[int] = None, button: Optional[str] = None, count: Optional[int] = None,
                    direction: Optional[str] = None) -> Tuple[int, int]:
        """One mouse action ("move", "click", "down", "up", "drag", "scroll"); returns where the pointer is
        after it. The methods below are its usual forms."""
        return await self._call(_calls.desktop_mouse(self._sandbox.sandbox_id, action, x, y, to_x, to_y, button, count,
                                                     direction))

    async def move(self, x: int, y: int) -> Tuple[int, int]:
        """Move the pointer to (x, y)."""
        return await self.mouse("move", x, y)

    async def click(self, x: Optional[int] = None, y: Optional[int] = None, *, button: str = "left",
                    count: int = 1) -> Tuple[int, int]:
        """Click button ("left", "middle", "right") count times, at (x, y) when given, else where the pointer is."""
        return await self.mouse("click", x, y, button=button, count=count)

    async def double_click(self, x: Optional[int] = None, y: Optional[int] = None) -> Tuple[int, int]:
        """A left double click."""
        return await self.mouse("click", x, y, count=2)

    async def right_click(self, x: Optional[int] = None, y: Optional[int] = None) -> Tuple[int, int]:
        """A right click."""
        return await self.mouse("click", x, y, button="right")

    async def mouse_down(self, button: str = "left") -> Tuple[int, int]:
        """Press button and hold it."""
        return await self.mouse("down", button=button)

    async def mouse_up(self, button: str = "left") -> Tuple[int, int]:
        """Release button."""
        return await self.mouse("up", button=button)

    async def drag(self, start: Tuple[int, int], end: Tuple[int, int], *, button: str = "left") -> Tuple[int, int]:
        """Press button at start, move to end, release."""
        return await self.mouse("drag", start[0], start[1], to_x=end[0], to_y=end[1], button=button)

    async def scroll(self, direction: str = "down", amount: int = 1, *, x: Optional[int] = None,
                     y: Optional[int] = None) -> Tuple[int, int]:
        """Scroll amount steps ("up", "down", "left", "right"), at (x, y) when given."""
        return await self.mouse("scroll", x, y, direction=direction, count=amount)

    async def keyboard(self, action: str, *, text: Optional[str] = None, keys: Optional[Sequence[str]] = None,
                       delay_ms: Optional[int] = None) -> None:
        """One keyboard action: "type" text, or "press" keys. type() and press() are its usual forms."""
        await self._call(_calls.desktop_keyboard(self._sandbox.sandbox_id, action, text, keys, delay_ms))

    async def type(self, text: str, *, delay_ms: Optional[int] = None) -> None:
        """Type text (at most 10,000 bytes) as if on the keyboard, delay_ms between keys (default 12)."""
        await self.keyboard("type", text=text, delay_ms=delay_ms)

    async def press(self, *keys: str) -> None:
        """Press each key combination in turn: ``press("ctrl+l")``, ``press("enter")``, ``press("alt+F4")``."""
        await self.keyboard("press", keys=list(keys))

    async def open(self, target: str) -> None:
        """Open a file's path or a URL as the desktop would (xdg-open: HTML in the browser)."""
        await self._call(_calls.desktop_open(self._sandbox.sandbox_id, target))

    async def launch(self, app: str) -> None:
        """Start an application by its desktop entry's name: ``launch("xfce4-terminal")``."""
        await self._call(_calls.desktop_launch(self._sandbox.sandbox_id, app))

    async def windows(self) -> List[DesktopWindow]:
        """The visible windows that have a title."""
        return await self._call(_calls.desktop_windows(self._sandbox.sandbox_id))


class AsyncDesktopStream:
    """The desktop's live stream (VNC over a WebSocket, for noVNC): ``sandbox.desktop.stream``."""

    def __init__(self, sandbox: "AsyncCodeSandbox") -> None:
        self._sandbox = sandbox

    async def start(self, *, control: bool = False, ttl_seconds: Optional[int] = None) -> DesktopViewer:
        """Start the stream if it does not run and mint a new viewer with a token of its own: view-only
        unless control. At most 8 viewers per sandbox (ConflictError for the ninth)."""
        return await self._sandbox._http.call(_calls.desktop_stream_start(self._sandbox.sandbox_id, control, ttl_seconds))

    async def revoke(self, viewer_id: str) -> None:
        """Revoke one viewer: its token stops working and its connections close."""
        await self._sandbox._http.call(_calls.desktop_stream_revoke(self._sandbox.sandbox_id, viewer_id))

    async def stop(self) -> None:
        """Stop the stream and revoke every viewer."""
        await self._sandbox._http.call(_calls.desktop_stream_stop(self._sandbox.sandbox_id))
