"""Background processes and terminals of the asyncio client: ``sandbox.commands`` and ``sandbox.pty``
(docs/processes.md), the same calls as the synchronous ones; each attached handle follows its output in a
task of its own, and callbacks may be coroutine functions."""

from __future__ import annotations

import asyncio
import inspect
import json
from typing import TYPE_CHECKING, Any, Callable, List, Mapping, Optional, Sequence, Union

import httpx
from websockets.asyncio.client import ClientConnection, connect as ws_connect
from websockets.exceptions import ConnectionClosed

from . import _calls, _core
from ._commands import Data
from .errors import LizardError
from .models import ProcessInfo, ProcessResult

if TYPE_CHECKING:
    from ._async import AsyncCodeSandbox

__all__ = ["AsyncCommands", "AsyncCommandHandle", "AsyncPty", "AsyncPtyHandle"]


async def _call(cb: Optional[Callable[[Any], Any]], arg: Any) -> None:
    if cb is None:
        return
    res = cb(arg)
    if inspect.isawaitable(res):
        await res


class AsyncCommands:
    """Background processes of a sandbox (``sandbox.commands``); see :class:`lizard.Commands`."""

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
        (``on_stdout``/``on_stderr`` get it in a task)."""
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
        """Reattach to a background process: the callbacks get the output it kept, then what comes."""
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
        """Write to a process's stdin (started with ``stdin=True``); returns once it took the bytes."""
        await self._sandbox._http.call(_calls.send_stdin(self._sandbox.sandbox_id, pid, data))

    async def close_stdin(self, pid: int) -> None:
        """End a process's stdin (it reads end of file)."""
        await self._sandbox._http.call(_calls.close_stdin(self._sandbox.sandbox_id, pid))

    async def kill(self, pid: int, signal: Union[str, int] = _core.DEFAULT_SIGNAL) -> None:
        """Send a signal (a name such as ``"TERM"`` or a number) to a process's group."""
        await self._sandbox._http.call(_calls.signal_process(self._sandbox.sandbox_id, pid, signal))

    async def wait_exit(self, pid: int) -> ProcessInfo:
        """Wait until a process has ended and return it with its exit code (no output)."""
        return await self._sandbox._http.call(_calls.wait_exit(self._sandbox.sandbox_id, pid))


class AsyncCommandHandle:
    """A background process this client follows; see :class:`lizard.CommandHandle`."""

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
        self.pid = info.pid
        self.tag = info.tag
        self._disconnected = False
        self._asm = _core.OutputAssembler()
        self.error: Optional[Exception] = None
        callbacks = {"stdout": on_stdout, "stderr": on_stderr}
        api_url = commands._sandbox._http.api_url

        async def run() -> None:
            splitter = _core.LineSplitter()
            try:
                async for chunk in resp.aiter_bytes():
                    for event in splitter.feed(chunk):
                        call = self._asm.feed(event)
                        if call is not None:
                            await _call(callbacks.get(call[0]), call[1])
            except asyncio.CancelledError:
                pass
            except Exception as exc:  # the connection's failure, the sandbox's end, or a callback's own error
                if not self._disconnected:
                    self.error = _core.follow_error(exc, api_url)
            finally:
                await resp.aclose()

        self._task = asyncio.get_running_loop().create_task(run())

    @property
    def stdout(self) -> str:
        """The standard output received so far."""
        return self._asm.result().stdout

    @property
    def stderr(self) -> str:
        """The standard error received so far."""
        return self._asm.result().stderr

    async def wait(self) -> ProcessResult:
        """Wait for the process to end; return its exit code and the output this handle received."""
        await asyncio.wait([self._task])
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
        """Stop following its output; the process runs on."""
        self._disconnected = True
        if self._task is not asyncio.current_task():
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass


class AsyncPty:
    """Terminals of a sandbox (``sandbox.pty``); see :class:`lizard.Pty`."""

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
        """Start a terminal of cols x rows running ``cmd`` (default: the user's login shell) and attach to
        it: ``on_data`` gets its output as raw bytes."""
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
        return AsyncPtyHandle(self._commands, info, ws, on_data)

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
    """A terminal this client is attached to; see :class:`lizard.PtyHandle`."""

    def __init__(
        self, commands: AsyncCommands, info: ProcessInfo, ws: ClientConnection, on_data: Callable[[bytes], Any]
    ) -> None:
        self._commands = commands
        self.info = info
        self.pid = info.pid
        self.tag = info.tag
        self._ws = ws
        self._disconnected = False
        self.exit_code: Optional[int] = None
        self.error: Optional[Exception] = None

        async def run() -> None:
            try:
                while True:
                    msg = await ws.recv()
                    if isinstance(msg, bytes):
                        await _call(on_data, msg)
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

    async def send_input(self, data: Data) -> None:
        """Type into the terminal."""
        await self._send(_core.stdin_bytes(data))

    async def resize(self, cols: int, rows: int) -> None:
        """Give the terminal a new size."""
        await self._send(json.dumps({"type": "resize", **_core.size_body(cols, rows)}))

    async def _send(self, message: Union[str, bytes]) -> None:
        try:
            await self._ws.send(message)
        except ConnectionClosed as exc:
            await self._task
            raise self.error or LizardError("the terminal's connection is closed") from exc

    async def kill(self) -> None:
        """Kill the terminal's process group (SIGKILL)."""
        await self._commands.kill(self.pid, "KILL")

    async def wait(self) -> int:
        """Wait for the terminal's program to end and return its exit code."""
        await self._task
        if self.error is not None:
            raise self.error
        if self.exit_code is None:
            code = (await self._commands.wait_exit(self.pid)).exit_code
            return -1 if code is None else code
        return self.exit_code

    async def disconnect(self) -> None:
        """Close this connection; the terminal runs on."""
        self._disconnected = True
        await self._ws.close()
        await self._task
