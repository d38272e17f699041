"""Background processes and terminals: ``sandbox.commands`` and ``sandbox.pty`` (docs/processes.md). Each
attached handle follows its output in a task (asyncio client) or a thread (synchronous client) of its own;
the async client's callbacks may be coroutine functions.

The synchronous client's module is generated from the asyncio client's by scripts/gen_sync.py, with the
seams that _async.py's docstring describes."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Callable, List, Mapping, Optional, Sequence, Union

import httpx
from websockets.exceptions import ConnectionClosed

from . import _calls, _core
from ._core import Data
from .errors import LizardError
from .models import ProcessInfo, ProcessResult

if True:  # ASYNC
    import asyncio

    from websockets.asyncio.client import ClientConnection, connect as ws_connect
else:  # SYNC
    import socket
    import threading

    from websockets.sync.client import ClientConnection, connect as ws_connect

if TYPE_CHECKING:
    if True:  # ASYNC
        from ._async import AsyncCodeSandbox
    else:  # SYNC
        from ._sync import CodeSandbox

__all__ = ["AsyncCommands", "AsyncCommandHandle", "AsyncPty", "AsyncPtyHandle"]


class AsyncCommands:
    """Background processes of a sandbox (``sandbox.commands``): started, they run on when the client
    disconnects, and any client can list them, reattach to their output, feed their stdin and signal them."""

    def __init__(self, sandbox: "AsyncCodeSandbox") -> None:
        """Bind to a sandbox; reach it as ``sandbox.commands``."""
        self._sandbox = sandbox

    async def start(
        self,
        cmd: Union[str, Sequence[str]],
        *,
        cwd: Optional[str] = None,
        envs: Optional[Mapping[str, str]] = None,
        stdin: bool = False,
        timeout_ms: Optional[int] = None,
        tag: Optional[str] = None,
        user: Optional[str] = None,
        on_stdout: Optional[Callable[[str], Any]] = None,
        on_stderr: Optional[Callable[[str], Any]] = None,
    ) -> "AsyncCommandHandle":
        """Start a command in the background and return at once with its handle, which follows its output
        (``on_stdout``/``on_stderr`` get it in a task). A string runs with ``bash -c``; a list runs as is.
        ``stdin=True`` keeps its stdin open for :meth:`AsyncCommandHandle.send_stdin`; ``timeout_ms`` kills it
        after that long (exit code 124); ``user="root"`` runs it as root."""
        # SYNC docstring:
        """Start a command in the background and return at once with its handle, which follows its output
        (``on_stdout``/``on_stderr`` get it in a thread). A string runs with ``bash -c``; a list runs as is.
        ``stdin=True`` keeps its stdin open for :meth:`CommandHandle.send_stdin`; ``timeout_ms`` kills it
        after that long (exit code 124); ``user="root"`` runs it as root."""
        s = self._sandbox
        info = await s._http.call(_calls.start_process(s.sandbox_id, cmd, cwd, envs, stdin, timeout_ms, tag, user))
        return await self._attach(info, on_stdout, on_stderr)

    async def list(self) -> List[ProcessInfo]:
        """The sandbox's background processes: running ones first, then the last 64 that ended."""
        return await self._sandbox._http.call(_calls.list_processes(self._sandbox.sandbox_id))

    async def get(self, pid: int) -> ProcessInfo:
        """One background process; raises NotFoundError for an unknown pid."""
        return await self._sandbox._http.call(_calls.get_process(self._sandbox.sandbox_id, pid))

    async def connect(
        self,
        pid: int,
        *,
        on_stdout: Optional[Callable[[str], Any]] = None,
        on_stderr: Optional[Callable[[str], Any]] = None,
    ) -> "AsyncCommandHandle":
        """Reattach to a background process: the callbacks get the output it kept (its last 1 MiB), then
        what comes. Raises NotFoundError for an unknown pid."""
        return await self._attach(await self.get(pid), on_stdout, on_stderr)

    async def _attach(
        self,
        info: ProcessInfo,
        on_stdout: Optional[Callable[[str], Any]],
        on_stderr: Optional[Callable[[str], Any]],
    ) -> "AsyncCommandHandle":
        resp = await self._sandbox._http.open(_calls.process_output(self._sandbox.sandbox_id, info.pid))
        return AsyncCommandHandle(self, info, resp, on_stdout, on_stderr)

    async def send_stdin(self, pid: int, data: Data) -> None:
        """Write to a process's stdin (started with ``stdin=True``); returns once it took the bytes. Raises
        ConflictError when its stdin is closed, NotFoundError when it ended."""
        await self._sandbox._http.call(_calls.send_stdin(self._sandbox.sandbox_id, pid, data))

    async def close_stdin(self, pid: int) -> None:
        """End a process's stdin (it reads end of file)."""
        await self._sandbox._http.call(_calls.close_stdin(self._sandbox.sandbox_id, pid))

    async def kill(self, pid: int, signal: Union[str, int] = _core.DEFAULT_SIGNAL) -> None:
        """Send a signal (``"TERM"``, ``"INT"``, ``"KILL"``, ``"HUP"``, ``"USR1"``... or a number) to a
        process's group. Raises NotFoundError when it ended."""
        await self._sandbox._http.call(_calls.signal_process(self._sandbox.sandbox_id, pid, signal))

    async def wait_exit(self, pid: int) -> ProcessInfo:
        """Wait until a process has ended and return it with its exit code (no output)."""
        return await self._sandbox._http.call(_calls.wait_exit(self._sandbox.sandbox_id, pid))


if False:  # SYNC
    def _shutdown(resp: httpx.Response) -> None:
        # Closing a response does not wake a read blocked in another thread; shutting its socket down does.
        stream = resp.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        resp.close()


class AsyncCommandHandle:
    """A background process this client follows (``commands.start``, ``commands.connect``)."""

    def __init__(
        self,
        commands: AsyncCommands,
        info: ProcessInfo,
        resp: httpx.Response,
        on_stdout: Optional[Callable[[str], Any]],
        on_stderr: Optional[Callable[[str], Any]],
    ) -> None:
        self._commands = commands
        self.info = info
        """The process as it was when this handle was made."""
        self.pid = info.pid
        self.tag = info.tag
        if True:  # ASYNC
            self._disconnected = False
        else:  # SYNC
            self._resp = resp
            self._disconnected = threading.Event()
        self._asm = _core.OutputAssembler()
        self.error: Optional[Exception] = None
        """Why following the output failed, if it did (SandboxGoneError when the sandbox ended)."""
        callbacks = {"stdout": on_stdout, "stderr": on_stderr}
        api_url = commands._sandbox._http.api_url

        if True:  # ASYNC
            async def run() -> None:
                splitter = _core.LineSplitter()
                try:
                    async for chunk in resp.aiter_bytes():
                        for event in splitter.feed(chunk):
                            call = self._asm.feed(event)
                            if call is not None:
                                await _core.acallback(callbacks.get(call[0]), call[1])
                except asyncio.CancelledError:
                    pass
                except Exception as exc:  # the connection's failure, the sandbox's end, or a callback's own error
                    if not self._disconnected:
                        self.error = _core.follow_error(exc, api_url)
                finally:
                    await resp.aclose()

            self._task = asyncio.get_running_loop().create_task(run())
        else:  # SYNC
            def run() -> None:
                splitter = _core.LineSplitter()
                try:
                    for chunk in resp.iter_bytes():
                        for event in splitter.feed(chunk):
                            call = self._asm.feed(event)
                            if call is not None:
                                _core.callback(callbacks.get(call[0]), call[1])
                except Exception as exc:  # the connection's failure, the sandbox's end, or a callback's own error
                    if not self._disconnected.is_set():
                        self.error = _core.follow_error(exc, api_url)
                finally:
                    resp.close()

            self._thread = threading.Thread(target=run, name=f"lizard-process-{self.pid}", daemon=True)
            self._thread.start()

    @property
    def stdout(self) -> str:
        """The standard output received so far."""
        return self._asm.result().stdout

    @property
    def stderr(self) -> str:
        """The standard error received so far."""
        return self._asm.result().stderr

    async def wait(self) -> ProcessResult:
        """Wait for the process to end; return its exit code and the output this handle received. A
        non-zero exit is not an exception. Raises SandboxGoneError when the sandbox ended first; after
        :meth:`disconnect` it waits for the exit code alone."""
        if True:  # ASYNC
            await asyncio.wait([self._task])
        else:  # SYNC
            self._thread.join()
        if self.error is not None:
            raise self.error
        if not self._asm.ended:
            return self._asm.exited(await self._commands.wait_exit(self.pid))
        return self._asm.result()

    async def send_stdin(self, data: Data) -> None:
        """Write to its stdin (started with ``stdin=True``)."""
        await self._commands.send_stdin(self.pid, data)

    async def close_stdin(self) -> None:
        """End its stdin."""
        await self._commands.close_stdin(self.pid)

    async def kill(self, signal: Union[str, int] = _core.DEFAULT_SIGNAL) -> None:
        """Send it a signal (to its process group); default KILL."""
        await self._commands.kill(self.pid, signal)

    async def disconnect(self) -> None:
        """Stop following its output; the process runs on (``commands.connect`` finds it again)."""
        if True:  # ASYNC
            self._disconnected = True
            await _core.stop_task(self._task)
        else:  # SYNC
            self._disconnected.set()
            _shutdown(self._resp)
            if threading.current_thread() is not self._thread:
                self._thread.join()


class AsyncPty:
    """Terminals of a sandbox (``sandbox.pty``): background processes with a pseudo-terminal, followed over
    a WebSocket as raw bytes."""

    def __init__(self, sandbox: "AsyncCodeSandbox") -> None:
        """Bind to a sandbox; reach it as ``sandbox.pty``."""
        self._sandbox = sandbox
        self._commands = AsyncCommands(sandbox)

    async def create(
        self,
        cols: int,
        rows: int,
        *,
        on_data: Callable[[bytes], Any],
        cwd: Optional[str] = None,
        envs: Optional[Mapping[str, str]] = None,
        cmd: Union[None, str, Sequence[str]] = None,
        timeout_ms: Optional[int] = None,
        tag: Optional[str] = None,
        user: Optional[str] = None,
    ) -> "AsyncPtyHandle":
        """Start a terminal of cols x rows running ``cmd`` (default: the user's login shell, with
        TERM=xterm-256color) and attach to it: ``on_data`` gets its output as raw bytes in a task."""
        # SYNC docstring:
        """Start a terminal of cols x rows running ``cmd`` (default: the user's login shell, with
        TERM=xterm-256color) and attach to it: ``on_data`` gets its output as raw bytes in a thread."""
        s = self._sandbox
        info = await s._http.call(_calls.start_process(s.sandbox_id, cmd, cwd, envs, False, timeout_ms, tag, user,
                                                       (cols, rows)))
        return await self._attach(info, on_data)

    async def connect(self, pid: int, on_data: Callable[[bytes], Any]) -> "AsyncPtyHandle":
        """Reattach to a terminal: ``on_data`` gets the output it kept, then what comes."""
        return await self._attach(await self._commands.get(pid), on_data)

    async def _attach(self, info: ProcessInfo, on_data: Callable[[bytes], Any]) -> "AsyncPtyHandle":
        http = self._sandbox._http
        url = _core.ws_url(http.api_url, _calls.terminal_path(self._sandbox.sandbox_id, info.pid))
        try:
            ws = await ws_connect(url, **_core.ws_options(http.api_key, http.request_timeout))
        except _core.WS_CONNECT_ERRORS as exc:
            raise _core.ws_connect_error(exc, http.api_url) from exc
        if True:  # ASYNC
            return AsyncPtyHandle(self._commands, info, ws, on_data)
        else:  # SYNC
            # The handle owns the connection as a `with` would (websockets 17 warns about a connection used
            # without one) and closes it when its thread ends or on disconnect.
            return AsyncPtyHandle(self._commands, info, ws.__enter__(), on_data)

    async def send_input(self, pid: int, data: Data) -> None:
        """Type into a terminal without attaching to it."""
        await self._commands.send_stdin(pid, data)

    async def resize(self, pid: int, cols: int, rows: int) -> None:
        """Give a terminal a new size without attaching to it."""
        await self._sandbox._http.call(_calls.resize(self._sandbox.sandbox_id, pid, cols, rows))

    async def kill(self, pid: int) -> None:
        """Kill a terminal's process group (SIGKILL)."""
        await self._commands.kill(pid, "KILL")


class AsyncPtyHandle:
    """A terminal this client is attached to (``pty.create``, ``pty.connect``)."""

    def __init__(
        self, commands: AsyncCommands, info: ProcessInfo, ws: ClientConnection, on_data: Callable[[bytes], Any]
    ) -> None:
        self._commands = commands
        self.info = info
        """The terminal's process as it was when this handle was made."""
        self.pid = info.pid
        self.tag = info.tag
        self._ws = ws
        if True:  # ASYNC
            self._disconnected = False
        else:  # SYNC
            self._disconnected = threading.Event()
        self.exit_code: Optional[int] = None
        """Its exit code once it ended."""
        self.error: Optional[Exception] = None
        """Why the connection ended, if not with the terminal's end (SandboxGoneError when the sandbox
        ended, ConflictError when it was paused)."""

        if True:  # ASYNC
            async def run() -> None:
                try:
                    while True:
                        msg = await ws.recv()
                        if isinstance(msg, bytes):
                            await _core.acallback(on_data, msg)
                            continue
                        code = _core.ws_exit_code(msg)
                        if code is not None:
                            self.exit_code = code
                except ConnectionClosed as exc:
                    if not self._disconnected and self.exit_code is None:
                        rcvd = exc.rcvd
                        self.error = _core.ws_closed_early(rcvd.code if rcvd else 1006, rcvd.reason if rcvd else "")
                except asyncio.CancelledError:
                    pass
                except Exception as exc:  # on_data's own error
                    if not self._disconnected:
                        self.error = exc
                finally:
                    await ws.close()

            self._task = asyncio.get_running_loop().create_task(run())
        else:  # SYNC
            def run() -> None:
                try:
                    while True:
                        msg = ws.recv()
                        if isinstance(msg, bytes):
                            on_data(msg)
                            continue
                        code = _core.ws_exit_code(msg)
                        if code is not None:
                            self.exit_code = code
                except ConnectionClosed as exc:
                    if not self._disconnected.is_set() and self.exit_code is None:
                        rcvd = exc.rcvd
                        self.error = _core.ws_closed_early(rcvd.code if rcvd else 1006, rcvd.reason if rcvd else "")
                except Exception as exc:  # on_data's own error
                    if not self._disconnected.is_set():
                        self.error = exc
                finally:
                    ws.close()

            self._thread = threading.Thread(target=run, name=f"lizard-pty-{self.pid}", daemon=True)
            self._thread.start()

    async def send_input(self, data: Data) -> None:
        """Type into the terminal (keystrokes, pasted text, ``b"\\x03"`` for Ctrl-C)."""
        await self._send(_core.stdin_bytes(data))

    async def resize(self, cols: int, rows: int) -> None:
        """Give the terminal a new size (its program gets SIGWINCH)."""
        await self._send(json.dumps({"type": "resize", **_core.size_body(cols, rows)}))

    async def _send(self, message: Union[str, bytes]) -> None:
        try:
            await self._ws.send(message)
        except ConnectionClosed as exc:
            await self._join()
            raise self.error or LizardError("the terminal's connection is closed") from exc

    async def kill(self) -> None:
        """Kill the terminal's process group (SIGKILL); :meth:`wait` then returns 137."""
        await self._commands.kill(self.pid, "KILL")

    async def wait(self) -> int:
        """Wait for the terminal's program to end and return its exit code. Raises SandboxGoneError when
        the sandbox ended first, ConflictError when it was paused; after :meth:`disconnect` it waits for
        the exit code alone."""
        await self._join()
        if self.error is not None:
            raise self.error
        if self.exit_code is None:
            code = (await self._commands.wait_exit(self.pid)).exit_code
            return -1 if code is None else code
        return self.exit_code

    async def disconnect(self) -> None:
        """Close this connection; the terminal runs on (``pty.connect`` finds it again)."""
        if True:  # ASYNC
            self._disconnected = True
            await self._ws.close()
            await self._task
        else:  # SYNC
            self._disconnected.set()
            self._ws.close()
            if threading.current_thread() is not self._thread:
                self._thread.join()

    async def _join(self) -> None:
        if True:  # ASYNC
            await self._task
        else:  # SYNC
            self._thread.join()
