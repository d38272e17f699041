"""End-to-end tests of background commands and terminals (sandbox.commands, sandbox.pty), sync and async,
against a real `lizard serve` (see conftest.py)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Callable, List

import pytest

from lizard import (
    AsyncCodeSandbox,
    CodeSandbox,
    ConflictError,
    InvalidArgumentError,
    NotFoundError,
    SandboxGoneError,
)


class Screen:
    """A terminal's output as it arrives, for waiting on text to appear."""

    def __init__(self) -> None:
        self._buf = b""
        self._cond = threading.Condition()

    def feed(self, data: bytes) -> None:
        with self._cond:
            self._buf += data
            self._cond.notify_all()

    def text(self) -> str:
        with self._cond:
            return self._buf.decode(errors="replace")

    def wait_for(self, want: str, timeout: float = 20.0) -> None:
        with self._cond:
            ok = self._cond.wait_for(lambda: want in self._buf.decode(errors="replace"), timeout)
        assert ok, f"{want!r} never appeared; the terminal showed {self.text()[-500:]!r}"


def _until(cond: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_commands_reattach_stdin_signal() -> None:
    with CodeSandbox.create(timeout_ms=600_000, metadata={"suite": "commands"}) as sb:
        # A counter: disconnect, list, reconnect and see what it printed before, then more.
        seen: List[str] = []
        counter = sb.commands.start(
            "for i in $(seq 1 1000); do echo line-$i; sleep 0.1; done", tag="counter", on_stdout=seen.append
        )
        assert counter.pid > 0 and counter.tag == "counter"
        _until(lambda: "line-3" in "".join(seen), "the counter's third line")
        counter.disconnect()
        listed = {p.pid: p for p in sb.commands.list()}
        assert listed[counter.pid].running and listed[counter.pid].tag == "counter"
        assert listed[counter.pid].args[:2] == ["bash", "-c"] and listed[counter.pid].pty is None
        again: List[str] = []
        back = sb.commands.connect(counter.pid, on_stdout=again.append)
        # The replay starts at the first line, and the output goes on past where the first handle left.
        _until(lambda: "line-1\n" in "".join(again) and "line-8" in "".join(again), "replay then live output")
        assert "".join(again).startswith("line-1\n")
        back.kill("TERM")
        result = back.wait()
        assert result.exit_code == 143, result
        assert "line-1\n" in result.stdout
        gone = sb.commands.get(counter.pid)
        assert not gone.running and gone.exit_code == 143
        with pytest.raises(NotFoundError):
            sb.commands.kill(counter.pid, "TERM")

        # stdin through cat, and its stderr apart.
        out: List[str] = []
        cat = sb.commands.start(["bash", "-c", "cat; echo bye >&2"], stdin=True, on_stdout=out.append)
        cat.send_stdin("hello ")
        cat.send_stdin(b"world\n")
        _until(lambda: "".join(out) == "hello world\n", "cat's echo")
        cat.close_stdin()
        result = cat.wait()
        assert (result.exit_code, result.stdout, result.stderr) == (0, "hello world\n", "bye\n")
        with pytest.raises(ConflictError, match="ended"):
            sb.commands.send_stdin(cat.pid, "late")

        # stdin never opened: a conflict that says so; bad input fails before the server.
        sleeper = sb.commands.start("sleep 600", envs={"A": "1"}, cwd="/tmp")
        with pytest.raises(ConflictError, match="stdin"):
            sleeper.send_stdin("x")
        with pytest.raises(InvalidArgumentError, match="signal"):
            sb.commands.kill(sleeper.pid, "NOPE")
        with pytest.raises(InvalidArgumentError):
            sb.commands.start([])
        with pytest.raises(NotFoundError):
            sb.commands.connect(999_999)
        sleeper.kill()
        assert sleeper.wait().exit_code == 137

        # A handle that disconnected still waits for the exit code.
        short = sb.commands.start("sleep 0.5; exit 7")
        short.disconnect()
        assert short.wait().exit_code == 7


def test_pty_echo_resize_reconnect_and_sandbox_gone() -> None:
    sb = CodeSandbox.create(timeout_ms=600_000, metadata={"suite": "pty"})
    try:
        screen = Screen()
        term = sb.pty.create(80, 24, on_data=screen.feed, tag="shell")
        term.send_input("echo $((6*7))\n")
        screen.wait_for("42")
        term.send_input("stty size\n")
        screen.wait_for("24 80")
        term.resize(100, 30)
        term.send_input("stty size\n")
        screen.wait_for("30 100")
        info = {p.pid: p for p in sb.commands.list()}[term.pid]
        assert info.pty is not None and (info.pty.cols, info.pty.rows) == (100, 30) and info.tag == "shell"
        with pytest.raises(InvalidArgumentError, match="cols"):
            term.resize(0, 30)

        # Disconnect; the shell runs on, and a new connection replays what it showed.
        term.disconnect()
        replay = Screen()
        term2 = sb.pty.connect(term.pid, replay.feed)
        replay.wait_for("42")
        sb.pty.resize(term.pid, 90, 20)
        term2.send_input("stty size; exit 3\n")
        replay.wait_for("20 90")
        assert term2.wait() == 3

        # A pause ends an attached terminal with ConflictError (close code 4409); it was checkpointed running,
        # and connecting again resumes the sandbox.
        paused = sb.pty.create(80, 24, on_data=lambda _: None, cmd="sleep 600")
        sb.pause()
        with pytest.raises(ConflictError, match="pause"):
            paused.wait()
        again = Screen()
        resumed = sb.pty.connect(paused.pid, again.feed)
        assert sb.commands.get(paused.pid).running
        resumed.disconnect()

        # The sandbox killed under an attached terminal: the handle ends with SandboxGoneError within seconds.
        term3 = sb.pty.create(80, 24, on_data=lambda _: None, cmd="sleep 600")
        start = time.monotonic()
        sb.kill()
        with pytest.raises(SandboxGoneError):
            term3.wait()
        assert time.monotonic() - start < 5
    finally:
        sb.close()


async def test_async_commands_and_pty() -> None:
    async with AsyncCodeSandbox.create(timeout_ms=600_000, metadata={"suite": "commands-async"}) as sb:
        chunks: List[str] = []

        async def on_stdout(text: str) -> None:  # a coroutine callback
            chunks.append(text)

        handle = await sb.commands.start("echo one; echo two >&2; exit 5", on_stdout=on_stdout)
        result = await handle.wait()
        assert (result.exit_code, result.stdout, result.stderr) == (5, "one\n", "two\n")
        assert "".join(chunks) == "one\n"
        assert handle.pid in [p.pid for p in await sb.commands.list()]

        cat = await sb.commands.start("cat", stdin=True)
        await cat.send_stdin("piped\n")
        await cat.close_stdin()
        assert (await cat.wait()).stdout == "piped\n"

        got = bytearray()
        term = await sb.pty.create(80, 24, on_data=got.extend)
        await term.send_input("echo $((6*7)); stty size\n")
        await term.resize(120, 40)
        await term.send_input("stty size\n")
        deadline = time.monotonic() + 20
        while not ("42" in got.decode(errors="replace") and "40 120" in got.decode(errors="replace")):
            assert time.monotonic() < deadline, got.decode(errors="replace")[-500:]
            await asyncio.sleep(0.05)
        await term.kill()
        assert await term.wait() == 137

        # The sandbox killed under an attached terminal.
        term2 = await sb.pty.create(80, 24, on_data=lambda _: None, cmd=["sleep", "600"])
        await sb.kill()
        with pytest.raises(SandboxGoneError):
            await asyncio.wait_for(term2.wait(), 5)
