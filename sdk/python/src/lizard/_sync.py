"""The synchronous client: CodeSandbox and its files and process helpers."""

from __future__ import annotations

import os
import socket
import threading
from types import TracebackType
from typing import (
    IO,
    Any,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Type,
    Union,
    overload,
)
from urllib.parse import quote

import httpx

from . import _core
from ._commands import Commands, Pty
from ._core import UNSET, ContextLike
from .errors import InvalidArgumentError, LizardError, NotFoundError, SandboxGoneError, error_from_response
from .models import (
    Context,
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

__all__ = ["Network", "CodeSandbox", "Files", "Process", "Volume", "Template", "WatchHandle", "Events", "EventStream"]

_CHUNK = 64 * 1024
FileData = Union[str, bytes, bytearray, memoryview, IO[bytes], IO[str], Iterable[bytes]]


class _Http:
    """One connection pool to a Lizard server; maps failures to the SDK's errors."""

    def __init__(
        self,
        api_url: str,
        api_key: str,
        request_timeout: Optional[float],
        transport: Optional[httpx.BaseTransport],
    ) -> None:
        self.api_url = api_url
        self.api_key = api_key
        self.request_timeout = request_timeout
        self.transport = transport
        self.client = httpx.Client(
            base_url=api_url,
            headers=_core.headers(api_key),
            timeout=_core.timeout(request_timeout),
            transport=transport,
            event_hooks={"request": [_core.inject_trace]},
        )

    def request(
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
            resp = self.client.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise _core.transport_error(exc, self.api_url) from exc
        if resp.status_code >= 300:
            raise error_from_response(resp.status_code, resp.content)
        return resp

    def stream(
        self,
        path: str,
        body: Any,
        read_timeout: Optional[float],
        on_event: Callable[[Dict[str, Any]], None],
    ) -> None:
        splitter = _core.LineSplitter()
        timeout = _core.timeout(self.request_timeout, read_timeout)
        try:
            with self.client.stream("POST", path, json=body, timeout=timeout) as resp:
                if resp.status_code >= 300:
                    raise error_from_response(resp.status_code, resp.read())
                for chunk in resp.iter_bytes():
                    for event in splitter.feed(chunk):
                        on_event(event)
                for event in splitter.close():
                    on_event(event)
        except httpx.TransportError as exc:
            raise _core.transport_error(exc, self.api_url) from exc

    def open(self, path: str, params: Any, read_timeout: Optional[float]) -> httpx.Response:
        """Send a GET whose body is read as it comes; the caller closes the response."""
        req = self.client.build_request("GET", path, params=params, timeout=_core.timeout(self.request_timeout, read_timeout))
        try:
            resp = self.client.send(req, stream=True)
        except httpx.TransportError as exc:
            raise _core.transport_error(exc, self.api_url) from exc
        if resp.status_code >= 300:
            try:
                raise error_from_response(resp.status_code, resp.read())
            finally:
                resp.close()
        return resp

    def clone(self) -> "_Http":
        """A new pool with the same settings, for another sandbox."""
        return _Http(self.api_url, self.api_key, self.request_timeout, self.transport)

    def close(self) -> None:
        self.client.close()


def _sandbox_path(sandbox_id: str) -> str:
    return f"/v1/sandboxes/{quote(sandbox_id, safe='')}"


def _chunks(data: FileData) -> Union[bytes, Iterator[bytes]]:
    """The upload body for data: bytes as they are, a file-like object read lazily in chunks."""
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    if hasattr(data, "read"):
        def gen() -> Iterator[bytes]:
            while True:
                chunk = data.read(_CHUNK)
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


class CodeSandbox:
    """A Lizard sandbox running the code interpreter, driven synchronously.

    Make one with :meth:`create` or :meth:`connect`. Used as a context manager, it kills the sandbox on
    exit. Errors raised by the code are returned in ``Execution.error``; failures of the requests raise
    :class:`~lizard.LizardError` subclasses.
    """

    def __init__(self, sandbox_id: str, *, _http: _Http) -> None:
        """Wrap an existing sandbox; use :meth:`create` or :meth:`connect` instead."""
        self.sandbox_id = sandbox_id
        self._http = _http
        self._prefix = _sandbox_path(sandbox_id)
        self.files = Files(self)
        self.process = Process(self)
        self.commands = Commands(self)
        self.pty = Pty(self)
        self.network = Network(self)
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
        transport: Optional[httpx.BaseTransport] = None,
    ) -> "CodeSandbox":
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
            memory_mb: the sandbox's memory in MiB; default and maximum are the server's.
            cpus: its CPU time in cores (1.5 = one and a half); default and maximum are the server's.
            disk_mb: the size of its writable layer in MiB; default and maximum are the server's. Another size
                than the default boots cold instead of from the template's snapshot.
            on_timeout: what happens when the timeout passes: ``"kill"`` (the default) or ``"pause"``.
            allow_internet: False takes all network egress away from the sandbox; None or True leaves what the
                server allows.
            network: its network policy by domain name, such as ``{"default": "deny", "allow": ["pypi.org",
                "*.pythonhosted.org"]}`` (docs/network.md); change it later with ``sandbox.network.update``.
            transport: an httpx transport to send requests through (tests, custom networking).
        """
        url, key = _core.resolve_config(api_key, api_url)
        body = _core.create_body(template, timeout_ms, envs, metadata, lizard_token, snapshot_id, volumes, public_ports,
                                 memory_mb=memory_mb, cpus=cpus, disk_mb=disk_mb, on_timeout=on_timeout,
                                 allow_internet=allow_internet, network=network)
        http = _Http(url, key, _core.DEFAULT_REQUEST_TIMEOUT if request_timeout is UNSET else request_timeout, transport)
        try:
            create_timeout = _core.DEFAULT_CREATE_TIMEOUT if request_timeout is UNSET else request_timeout
            resp = http.request("POST", "/v1/sandboxes", json=body, timeout=create_timeout)
            info = SandboxInfo.from_json(resp.json())
            sandbox = cls(info.sandbox_id, _http=http)
            sandbox._info = info
            if project_id is not None and info.project_id and info.project_id != project_id:
                sandbox._kill_quietly()
                raise InvalidArgumentError(
                    f"project_id {project_id!r} does not match the API key's project {info.project_id!r}"
                )
            return sandbox
        except BaseException:
            http.close()
            raise

    @classmethod
    def connect(
        cls,
        sandbox_id: str,
        api_key: Optional[str] = None,
        api_url: Optional[str] = None,
        request_timeout: Optional[float] = _core.DEFAULT_REQUEST_TIMEOUT,
        *,
        transport: Optional[httpx.BaseTransport] = None,
    ) -> "CodeSandbox":
        """Attach to an existing sandbox by id.

        Raises NotFoundError when no such sandbox exists in the key's project, and SandboxGoneError when it
        has already ended.
        """
        url, key = _core.resolve_config(api_key, api_url)
        http = _Http(url, key, request_timeout, transport)
        try:
            sandbox = cls(sandbox_id, _http=http)
            info = sandbox.get_info()
            if info.state in ("killed", "expired", "failed"):
                raise SandboxGoneError(f"sandbox {sandbox_id} has ended ({info.state})", status=None, code="gone")
            if info.state == "paused":
                sandbox.resume()
            return sandbox
        except BaseException:
            http.close()
            raise

    @classmethod
    def list(
        cls,
        metadata: Optional[Mapping[str, str]] = None,
        state: Optional[str] = None,
        api_key: Optional[str] = None,
        api_url: Optional[str] = None,
        request_timeout: Optional[float] = _core.DEFAULT_REQUEST_TIMEOUT,
        *,
        transport: Optional[httpx.BaseTransport] = None,
    ) -> List[SandboxInfo]:
        """List the sandboxes of the key's project, filtered by metadata (all pairs must match) and state."""
        url, key = _core.resolve_config(api_key, api_url)
        http = _Http(url, key, request_timeout, transport)
        try:
            resp = http.request("GET", "/v1/sandboxes", params=_core.list_params(metadata, state))
            return [SandboxInfo.from_json(s) for s in resp.json().get("sandboxes") or []]
        finally:
            http.close()

    def get_info(self) -> SandboxInfo:
        """Return what the server knows about this sandbox."""
        self._info = SandboxInfo.from_json(self._http.request("GET", self._prefix).json())
        return self._info

    def _known(self) -> SandboxInfo:
        return self._info if self._info is not None else self.get_info()

    @property
    def access_token(self) -> Optional[str]:
        """The token that opens this sandbox's ports (and nothing else): send it as
        ``?lizard_access_token=...`` or the ``X-Lizard-Access-Token`` header."""
        return self._known().access_token

    def get_host(self, port: int) -> str:
        """The URL at which a server listening on ``port`` inside the sandbox (on 0.0.0.0) is reached
        through Lizard, HTTP and WebSocket: ``{api_url}/v1/sandboxes/{id}/ports/{port}/``, or
        ``http://{port}-{id}.{domain}/`` when the server has a ports domain. Requests need the API key
        (``Authorization: Bearer``) or :attr:`access_token`, unless the sandbox was created with
        ``public_ports=True``."""
        return _core.port_url(self._http.api_url, self.sandbox_id, port, self._known().ports_domain)

    def set_timeout(self, timeout_ms: int) -> None:
        """Reset the sandbox's deadline to timeout_ms from now; 0 means it never ends by itself."""
        _core.check_ms("timeout_ms", timeout_ms)
        self._http.request("POST", f"{self._prefix}/timeout", json={"timeoutMs": timeout_ms})

    def get_metrics(self) -> List[SandboxMetric]:
        """The sandbox's CPU, memory and disk samples of the last 5 minutes, oldest first (one every 5 s;
        none while it is paused or in its first seconds)."""
        data = self._http.request("GET", f"{self._prefix}/metrics").json()
        return [SandboxMetric.from_json(m) for m in data.get("metrics") or []]

    def kill(self) -> None:
        """End the sandbox now. Killing a sandbox that is already gone is not an error."""
        try:
            self._http.request("DELETE", self._prefix)
        except NotFoundError:
            pass

    def _kill_quietly(self) -> None:
        try:
            self.kill()
        except LizardError:
            pass

    def pause(self, wait_durable: bool = False) -> None:
        """Pause the sandbox: its memory, kernel variables, processes and files are saved to the server's
        disk and it stops using CPU and memory. Its timeout clock stops too. Any call on it (run_code,
        commands, files), :meth:`resume` or ``connect`` resumes it. Raises ConflictError when a call
        is still running after 10 s.

        The image is copied to the server's image store in the background; ``wait_durable=True``
        returns only once it is there (``durable``), so that the sandbox outlives the machine that
        paused it, and raises SandboxError (503) if that takes over 5 minutes."""
        body = {"waitDurable": True} if wait_durable else {}
        self._http.request("POST", f"{self._prefix}/pause", json=body, timeout=_core.DEFAULT_CREATE_TIMEOUT)

    def resume(self, timeout_ms: Optional[int] = None) -> None:
        """Resume a paused sandbox (a running one is left as is). timeout_ms, when given, replaces the time
        it had left when paused. Raises SandboxGoneError when its image could not be restored."""
        _core.check_ms("timeout_ms", timeout_ms)
        body = {"timeoutMs": timeout_ms} if timeout_ms is not None else {}
        self._http.request("POST", f"{self._prefix}/resume", json=body, timeout=_core.DEFAULT_CREATE_TIMEOUT)

    def snapshot(self) -> SnapshotInfo:
        """Save the sandbox, kernel state included, without stopping it. Create sandboxes from it with
        ``create(snapshot_id=...)``; delete it with :meth:`delete_snapshot`."""
        resp = self._http.request("POST", f"{self._prefix}/snapshots", timeout=_core.DEFAULT_CREATE_TIMEOUT)
        return SnapshotInfo.from_json(resp.json())

    def delete_snapshot(self, snapshot_id: str) -> None:
        """Delete a snapshot of the key's project and its image."""
        self._http.request("DELETE", f"/v1/snapshots/{quote(snapshot_id, safe='')}")

    @overload
    def fork(self, *, timeout_ms: Optional[int] = ..., metadata: Optional[Mapping[str, str]] = ...) -> "CodeSandbox": ...

    @overload
    def fork(
        self, count: int, *, timeout_ms: Optional[int] = ..., metadata: Optional[Mapping[str, str]] = ...
    ) -> List["CodeSandbox"]: ...

    def fork(
        self,
        count: Optional[int] = None,
        *,
        timeout_ms: Optional[int] = None,
        metadata: Optional[Mapping[str, str]] = None,
    ) -> Union["CodeSandbox", List["CodeSandbox"]]:
        """Copy the sandbox as it is now (variables, files, processes) into new, independent sandboxes.

        ``fork()`` returns one new sandbox; ``fork(count=N)`` (1 to 16) returns a list of N. Each fork
        has its own address, and Python's ``random`` and NumPy's global generator are reseeded in each.
        """
        body = _core.fork_body(count, timeout_ms, metadata)
        resp = self._http.request("POST", f"{self._prefix}/fork", json=body, timeout=_core.DEFAULT_CREATE_TIMEOUT)
        forks = [type(self)(SandboxInfo.from_json(s).sandbox_id, _http=self._http.clone())
                 for s in resp.json().get("sandboxes") or []]
        return forks if count is not None else forks[0]

    def close(self) -> None:
        """Close the HTTP connections without killing the sandbox."""
        self._http.close()

    def __enter__(self) -> "CodeSandbox":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        try:
            if exc_type is None:
                self.kill()
            else:
                # The body's exception matters more than a failure to clean up after it.
                self._kill_quietly()
        finally:
            self.close()

    def __repr__(self) -> str:
        return f"CodeSandbox(sandbox_id={self.sandbox_id!r}, api_url={self._http.api_url!r})"

    # Code ----------------------------------------------------------------------------------------------

    def run_code(
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
        """Run code and return its Execution. Errors in the code are in ``Execution.error``, not raised.

        Args:
            code: the code to run.
            language: ``"python"`` (default), ``"javascript"`` or ``"bash"``; defaults to the context's.
            context: a Context (or its id) to run in; default the language's default context.
            timeout_ms: bound on this call; on expiry the kernel is interrupted, its state kept, and
                ``error.name`` is ``"TimeoutError"``. 0 means no bound.
            envs: environment variables for this call only.
            on_stdout, on_stderr, on_result, on_error: called as output arrives, in order, while the code
                runs.
        """
        body = _core.execute_body(code, language, context, timeout_ms, envs)
        asm = _core.ExecutionAssembler()
        callbacks: Dict[str, Optional[Callable[[Any], Any]]] = {
            "stdout": on_stdout,
            "stderr": on_stderr,
            "result": on_result,
            "error": on_error,
        }

        def on_event(event: Dict[str, Any]) -> None:
            call = asm.feed(event)
            if call is not None:
                cb = callbacks[call[0]]
                if cb is not None:
                    cb(call[1])

        self._http.stream(f"{self._prefix}/execute", body, _core.stream_read_timeout(timeout_ms), on_event)
        return asm.finish()

    def create_context(self, language: str = "python", cwd: Optional[str] = None) -> Context:
        """Start a new context: its own kernel, variables and working directory (default the home)."""
        body: Dict[str, Any] = {"language": language}
        if cwd:
            body["cwd"] = cwd
        return Context.from_json(self._http.request("POST", f"{self._prefix}/contexts", json=body).json())

    def list_contexts(self) -> List[Context]:
        """List the sandbox's contexts, default ones included."""
        resp = self._http.request("GET", f"{self._prefix}/contexts")
        return [Context.from_json(c) for c in resp.json().get("contexts") or []]

    def restart_context(self, context: ContextLike) -> Context:
        """Restart a context's kernel, dropping its variables."""
        cid = quote(_core.context_id(context), safe="")
        return Context.from_json(self._http.request("POST", f"{self._prefix}/contexts/{cid}/restart").json())

    def delete_context(self, context: ContextLike) -> None:
        """Delete a context and stop its kernel."""
        cid = quote(_core.context_id(context), safe="")
        self._http.request("DELETE", f"{self._prefix}/contexts/{cid}")


class Network:
    """A sandbox's network policy by domain name (docs/network.md): ``sandbox.network``."""

    def __init__(self, sandbox: "CodeSandbox") -> None:
        self._sandbox = sandbox

    def update(
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
        body = _core.network_update(default, allow, deny, ports, inject, cut)
        resp = self._sandbox._http.request("PATCH", f"{self._sandbox._prefix}/network", json=body)
        return dict(resp.json())

    def log(self) -> List[NetworkLogEntry]:
        """The sandbox's newest egress decisions (at most 1000), oldest first."""
        resp = self._sandbox._http.request("GET", f"{self._sandbox._prefix}/network/log")
        return [NetworkLogEntry.from_json(e) for e in resp.json().get("entries") or []]

    @staticmethod
    def get_default(*, api_key: Optional[str] = None, api_url: Optional[str] = None) -> Optional[Dict[str, Any]]:
        """The key's project's default policy, which sandboxes created without ``network`` get; None when
        the project has none (they get the server's ``--network-default``)."""
        try:
            return dict(Volume._call("GET", "/v1/network/default", api_key, api_url).json())
        except NotFoundError:
            return None

    @staticmethod
    def set_default(policy: Mapping[str, Any], *, api_key: Optional[str] = None,
                    api_url: Optional[str] = None) -> Dict[str, Any]:
        """Set the project's default policy, such as ``{"default": "deny", "allow": ["pypi.org"]}``, for
        sandboxes created from now on; InvalidArgumentError naming the field for a bad rule or one looser
        than the server permits."""
        body = _core.network_policy(policy, "policy")
        return dict(Volume._call("PUT", "/v1/network/default", api_key, api_url, json=body).json())

    @staticmethod
    def clear_default(*, api_key: Optional[str] = None, api_url: Optional[str] = None) -> None:
        """Clear the project's default policy: new sandboxes get the server's again."""
        Volume._call("DELETE", "/v1/network/default", api_key, api_url)


class Volume:
    """Persistent volumes of the key's project: ``Volume.create("data")``, then
    ``CodeSandbox.create(volumes=[{"name": "data", "path": "/home/user/data"}])``."""

    @staticmethod
    def _call(method: str, path: str, api_key: Optional[str], api_url: Optional[str], json: Any = None) -> httpx.Response:
        url, key = _core.resolve_config(api_key, api_url)
        http = _Http(url, key, _core.DEFAULT_REQUEST_TIMEOUT, None)
        try:
            return http.request(method, path, json=json)
        finally:
            http.close()

    @staticmethod
    def create(name: str, size_mb: Optional[int] = None, *, api_key: Optional[str] = None,
               api_url: Optional[str] = None) -> VolumeInfo:
        """Make a volume of size_mb MiB (default the server's, 1024); the size is its filesystem's."""
        resp = Volume._call("POST", "/v1/volumes", api_key, api_url, json=_core.volume_body(name, size_mb))
        return VolumeInfo.from_json(resp.json())

    @staticmethod
    def list(*, api_key: Optional[str] = None, api_url: Optional[str] = None) -> List[VolumeInfo]:
        """The project's volumes, by name."""
        resp = Volume._call("GET", "/v1/volumes", api_key, api_url)
        return [VolumeInfo.from_json(v) for v in resp.json().get("volumes") or []]

    @staticmethod
    def get(name: str, *, api_key: Optional[str] = None, api_url: Optional[str] = None) -> VolumeInfo:
        """One volume; NotFoundError when the project has none of that name."""
        return VolumeInfo.from_json(Volume._call("GET", f"/v1/volumes/{quote(name, safe='')}", api_key, api_url).json())

    @staticmethod
    def delete(name: str, *, api_key: Optional[str] = None, api_url: Optional[str] = None) -> None:
        """Delete a volume and its data; ConflictError while a live sandbox mounts it."""
        Volume._call("DELETE", f"/v1/volumes/{quote(name, safe='')}", api_key, api_url)

class Secret:
    """Secrets of the key's project (docs/secrets.md): ``Secret.set("OPENAI_API_KEY", value,
    hosts=["api.openai.com"])``, then a sandbox's network policy injects it into its requests to those hosts;
    no call returns a value. They need a project key: a sandbox's own key gets PermissionDeniedError."""

    @staticmethod
    def set(
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
        body = _core.secret_body(name, value, hosts, allow_http)
        return SecretInfo.from_json(Volume._call("PUT", f"/v1/secrets/{quote(name, safe='')}", api_key, api_url, json=body).json())

    @staticmethod
    def list(*, api_key: Optional[str] = None, api_url: Optional[str] = None) -> List[SecretInfo]:
        """The project's secrets by name: names and times, never values."""
        resp = Volume._call("GET", "/v1/secrets", api_key, api_url)
        return [SecretInfo.from_json(s) for s in resp.json().get("secrets") or []]

    @staticmethod
    def delete(name: str, *, api_key: Optional[str] = None, api_url: Optional[str] = None) -> None:
        """Delete secret name; NotFoundError when the project has none of that name."""
        Volume._call("DELETE", f"/v1/secrets/{quote(name, safe='')}", api_key, api_url)


class Events:
    """The key's project's sandbox lifecycle events (docs/events.md): ``Events.list(...)`` for a page,
    ``for ev in Events.follow(...)`` to see them as they happen."""

    @staticmethod
    def list(
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
        params = _core.event_params(sandbox_id, types, metadata, after, limit, False)
        url, key = _core.resolve_config(api_key, api_url)
        http = _Http(url, key, _core.DEFAULT_REQUEST_TIMEOUT, None)
        try:
            return EventPage.from_json(http.request("GET", "/v1/events", params=params).json())
        finally:
            http.close()

    @staticmethod
    def follow(
        *,
        sandbox_id: Optional[str] = None,
        types: Optional[Sequence[str]] = None,
        metadata: Optional[Mapping[str, str]] = None,
        after: Optional[int] = None,
        api_key: Optional[str] = None,
        api_url: Optional[str] = None,
    ) -> "EventStream":
        """Follow events as they are recorded: from now, or after event ``after``. The server follows once
        this returns; iterate the stream (it never ends by itself) and close it, or use it in ``with``."""
        params = _core.event_params(sandbox_id, types, metadata, after, None, True)
        url, key = _core.resolve_config(api_key, api_url)
        http = _Http(url, key, _core.DEFAULT_REQUEST_TIMEOUT, None)
        try:
            resp = http.open("/v1/events", params, None)
        except BaseException:
            http.close()
            raise
        return EventStream(http, resp, after or 0)


class EventStream:
    """A live follow of events (:meth:`Events.follow`): iterate it for :class:`Event` values."""

    def __init__(self, http: _Http, resp: httpx.Response, after: int) -> None:
        self._http = http
        self._resp = resp
        self._events = self._read()
        self.last = after
        """The ID of the last event returned: ``Events.follow(after=stream.last)`` resumes without a gap."""

    def _read(self) -> Iterator[Event]:
        splitter = _core.LineSplitter()
        try:
            for chunk in self._resp.iter_bytes():
                for obj in splitter.feed(chunk):
                    yield Event.from_json(obj)
        except httpx.TransportError as exc:
            raise _core.transport_error(exc, self._http.api_url) from exc

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        ev = next(self._events)
        self.last = ev.id
        return ev

    def close(self) -> None:
        """Stop following."""
        self._resp.close()
        self._http.close()

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Template:
    """Custom templates of the key's project (docs/templates.md): ``Template.build("my-tpl", {...})``,
    then ``CodeSandbox.create(template="my-tpl")``."""

    @staticmethod
    def build(
        name: str,
        recipe: Mapping[str, Any],
        *,
        on_event: Optional[Callable[[Dict[str, Any]], Any]] = None,
        api_key: Optional[str] = None,
        api_url: Optional[str] = None,
        timeout: Optional[float] = _core.DEFAULT_BUILD_TIMEOUT,
    ) -> TemplateInfo:
        """Build (or find in the cache) template name from recipe, in the wire form of the API's
        TemplateRecipe, except that files give their ``content`` as str or bytes (the SDK encodes it).
        on_event gets each progress event (``{"type": "step"|"log", ...}``) as it comes.

        Raises TemplateBuildError when a step fails (its ``step`` and ``log``), InvalidArgumentError
        when the request is refused.
        """
        url, key = _core.resolve_config(api_key, api_url)
        http = _Http(url, key, _core.DEFAULT_REQUEST_TIMEOUT, None)
        follow = _core.TemplateBuild(on_event)

        def handle(event: Dict[str, Any]) -> None:
            follow.feed(event)
            if on_event is not None:
                on_event(event)

        try:
            http.stream("/v1/templates", _core.template_body(name, recipe), timeout, handle)
        finally:
            http.close()
        return TemplateInfo.from_json(follow.finish())

    @staticmethod
    def list(*, api_key: Optional[str] = None, api_url: Optional[str] = None) -> List[TemplateInfo]:
        """The project's custom templates, by name (built-in ones are not listed)."""
        resp = Volume._call("GET", "/v1/templates", api_key, api_url)
        return [TemplateInfo.from_json(t) for t in resp.json().get("templates") or []]

    @staticmethod
    def get(name: str, *, api_key: Optional[str] = None, api_url: Optional[str] = None) -> TemplateInfo:
        """One template; NotFoundError when the project has none of that name."""
        return TemplateInfo.from_json(Volume._call("GET", f"/v1/templates/{quote(name, safe='')}", api_key, api_url).json())

    @staticmethod
    def delete(name: str, *, api_key: Optional[str] = None, api_url: Optional[str] = None) -> None:
        """Delete a template; ConflictError while live sandboxes of the project use it."""
        Volume._call("DELETE", f"/v1/templates/{quote(name, safe='')}", api_key, api_url)


class Process:
    """Runs commands in a sandbox, each in its own process (``sandbox.process``)."""

    def __init__(self, sandbox: CodeSandbox) -> None:
        """Bind to a sandbox; reach it as ``sandbox.process``."""
        self._sandbox = sandbox

    def exec(
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
        body = _core.process_body(cmd, cwd, envs, timeout_ms, stdin)
        asm = _core.ProcessAssembler()
        callbacks = {"stdout": on_stdout, "stderr": on_stderr}

        def on_event(event: Dict[str, Any]) -> None:
            call = asm.feed(event)
            if call is not None:
                cb = callbacks.get(call[0])
                if cb is not None:
                    cb(call[1])

        s = self._sandbox
        s._http.stream(f"{s._prefix}/process", body, _core.stream_read_timeout(timeout_ms), on_event)
        return asm.finish()


class Files:
    """Reads and writes files in a sandbox (``sandbox.files``). Relative paths start at ``/home/user``.

    Every call takes ``user``: who it acts as, the sandbox user (the default) or ``"root"``. A call may do
    what its user may (writing under ``/etc`` as the sandbox user raises InvalidArgumentError saying
    permission was denied), and what it makes belongs to its user."""

    def __init__(self, sandbox: CodeSandbox) -> None:
        """Bind to a sandbox; reach it as ``sandbox.files``."""
        self._sandbox = sandbox

    def _request(self, method: str, sub: str, path: str, user: Optional[str], **kwargs: Any) -> httpx.Response:
        s = self._sandbox
        return s._http.request(method, f"{s._prefix}/files{sub}", params=_core.file_params(path, user), **kwargs)

    @overload
    def read(self, path: str, format: Literal["text"] = "text", *, user: Optional[str] = None) -> str: ...

    @overload
    def read(self, path: str, format: Literal["bytes"], *, user: Optional[str] = None) -> bytes: ...

    @overload
    def read(self, path: str, format: Literal["stream"], *, user: Optional[str] = None) -> Iterator[bytes]: ...

    def read(self, path: str, format: str = "text", *, user: Optional[str] = None) -> Union[str, bytes, Iterator[bytes]]:
        """Read a file: whole, as text (UTF-8) or bytes, or as a stream of chunks (``format="stream"``), which
        holds no more than a chunk of it at a time. The stream is opened at once (a missing file raises
        here); iterate it to the end or close it."""
        if format not in ("text", "bytes", "stream"):
            raise InvalidArgumentError(f"format must be 'text', 'bytes' or 'stream', not {format!r}")
        if format == "stream":
            return self._stream(path, user)
        data = self._request("GET", "", path, user).content
        return data.decode("utf-8") if format == "text" else data

    def _stream(self, path: str, user: Optional[str] = None) -> Iterator[bytes]:
        s = self._sandbox
        resp = s._http.open(f"{s._prefix}/files", _core.file_params(path, user), s._http.request_timeout)

        def chunks() -> Iterator[bytes]:
            try:
                yield from resp.iter_bytes(_CHUNK)
            except httpx.TransportError as exc:
                raise _core.transport_error(exc, s._http.api_url) from exc
            finally:
                resp.close()

        return chunks()

    def download(self, path: str, dest: Union[str, "os.PathLike[str]", IO[bytes]], *, user: Optional[str] = None) -> int:
        """Stream a file into dest (a local path, or a binary file object) and return its size."""
        n = 0
        stream = self._stream(path, user)
        if isinstance(dest, (str, os.PathLike)):
            with open(dest, "wb") as f:
                for chunk in stream:
                    f.write(chunk)
                    n += len(chunk)
            return n
        for chunk in stream:
            dest.write(chunk)
            n += len(chunk)
        return n

    def write(self, path: str, data: FileData, *, user: Optional[str] = None) -> EntryInfo:
        """Write a file, creating parent directories. A file object or an iterable of bytes is streamed in
        chunks, so a file of any size passes through; the file appears whole once all of it is written."""
        return EntryInfo.from_json(self._request("PUT", "", path, user, content=_chunks(data)).json())

    def rename(self, old_path: str, new_path: str, *, user: Optional[str] = None) -> EntryInfo:
        """Rename or move a file or directory, as rename(2): a file at new_path is replaced. Returns the entry
        at its new path."""
        s = self._sandbox
        resp = s._http.request("POST", f"{s._prefix}/files/rename", params=_core.file_params(old_path, user, to=new_path))
        return EntryInfo.from_json(resp.json())

    def get_info(self, path: str, *, user: Optional[str] = None) -> EntryInfo:
        """Describe a file or directory (owner, group, permissions, symlink target...); raises
        NotFoundError when it does not exist. The same as :meth:`stat`."""
        return self.stat(path, user=user)

    def watch_dir(
        self,
        path: str,
        on_event: Callable[[FilesystemEvent], Any],
        *,
        recursive: bool = False,
        on_exit: Optional[Callable[[Optional[Exception]], Any]] = None,
        user: Optional[str] = None,
    ) -> "WatchHandle":
        """Watch a directory for changes: ``on_event`` gets each :class:`FilesystemEvent` in a background
        thread. Returns once the watch is in place (every change after it is reported). The watch ends with
        :meth:`WatchHandle.stop`, when the directory is removed, or when the sandbox ends; ``on_exit`` then
        gets None, or the error (SandboxGoneError when the sandbox ended). A missing directory raises
        NotFoundError here, a file InvalidArgumentError."""
        s = self._sandbox
        resp = s._http.open(
            f"{s._prefix}/files/watch", _core.file_params(path, user, recursive="true" if recursive else "false"), None
        )
        return WatchHandle(resp, s._http.api_url, on_event, on_exit)

    def list(self, path: str = ".", *, user: Optional[str] = None) -> List[EntryInfo]:
        """List a directory."""
        return [EntryInfo.from_json(e) for e in self._request("GET", "/list", path, user).json().get("entries") or []]

    def stat(self, path: str, *, user: Optional[str] = None) -> EntryInfo:
        """Describe a file or directory; raises NotFoundError when it does not exist."""
        return EntryInfo.from_json(self._request("GET", "/stat", path, user).json())

    def exists(self, path: str, *, user: Optional[str] = None) -> bool:
        """Whether a file or directory exists."""
        try:
            self.stat(path, user=user)
        except SandboxGoneError:
            raise
        except NotFoundError:
            return False
        return True

    def remove(self, path: str, *, user: Optional[str] = None) -> None:
        """Remove a file or a directory tree."""
        self._request("DELETE", "", path, user)

    def make_dir(self, path: str, *, user: Optional[str] = None) -> EntryInfo:
        """Make a directory and its parents."""
        return EntryInfo.from_json(self._request("POST", "/mkdir", path, user).json())



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
            except httpx.TransportError as exc:
                if not self._stopped.is_set():
                    err = _core.transport_error(exc, api_url)
            except Exception as exc:  # the sandbox's end, or on_event's own error
                if not self._stopped.is_set():
                    err = exc
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
