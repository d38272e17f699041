"""End-to-end tests of watch_dir, rename, get_info, streamed reads and writes and get_metrics, sync and
async, against a real `lizard serve` (see conftest.py)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import queue
import time
import tracemalloc
from pathlib import Path
from typing import Iterator, List, Optional

import pytest

from lizard import AsyncCodeSandbox, CodeSandbox, FilesystemEvent, InvalidArgumentError, NotFoundError, SandboxGoneError

SIZE = 64 << 20  # streamed through the SDK with a few MiB of Python memory at most
BOUND = 8 << 20


def _chunks(seed: bytes, size: int) -> Iterator[bytes]:
    """size deterministic bytes in 1 MiB pieces, made as they are asked for."""
    block = hashlib.sha256(seed).digest() * (1 << 15)
    for _ in range(size // len(block)):
        yield block


def _wait(events: "queue.Queue[FilesystemEvent]", want: List[str], timeout: float = 5.0) -> None:
    seen: List[str] = []
    deadline = time.monotonic() + timeout
    while want:
        try:
            ev = events.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"saw {seen}, still want {want}") from None
        seen.append(f"{ev.type} {ev.name}")
        if seen[-1] == want[0]:
            want = want[1:]


def test_watch_rename_info_stream_metrics(tmp_path: Path) -> None:
    with CodeSandbox.create(timeout_ms=600_000, metadata={"suite": "files"}) as sb:
        sb.files.make_dir("w")
        events: "queue.Queue[FilesystemEvent]" = queue.Queue()
        exited: "queue.Queue[Optional[Exception]]" = queue.Queue()
        handle = sb.files.watch_dir("w", events.put, recursive=True, on_exit=exited.put)
        sb.process.exec("echo hi > ~/w/a.txt && mv ~/w/a.txt ~/w/b.txt && mkdir -p ~/w/d && touch ~/w/d/f && rm ~/w/b.txt")
        _wait(events, ["create a.txt", "write a.txt", "rename a.txt", "create b.txt", "create d", "create d/f", "remove b.txt"])
        handle.stop()
        assert exited.get(timeout=5) is None

        with pytest.raises(NotFoundError):
            sb.files.watch_dir("nothing", events.put)
        sb.process.exec("echo 12345 > ~/r.txt && chmod 640 ~/r.txt && ln -s r2.txt ~/link")
        with pytest.raises(InvalidArgumentError):
            sb.files.watch_dir("r.txt", events.put)
        info = sb.files.rename("r.txt", "r2.txt")
        assert (info.path, info.size, info.owner, info.group, info.permissions) == (
            "/home/user/r2.txt", 6, "user", "user", "-rw-r-----")
        link = sb.files.get_info("link")
        assert link.type == "symlink" and link.symlink_target == "r2.txt"
        with pytest.raises(NotFoundError):
            sb.files.rename("nothing", "x")

        # Streamed up from an iterator and down to a file, with the SDK's memory flat.
        tracemalloc.start()
        try:
            sb.files.write("big.bin", _chunks(b"py", SIZE))
            stream = sb.files.read("big.bin", format="stream")
            digest = hashlib.sha256()
            n = 0
            for chunk in stream:
                digest.update(chunk)
                n += len(chunk)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        want = hashlib.sha256()
        for chunk in _chunks(b"py", SIZE):
            want.update(chunk)
        assert n == SIZE and digest.digest() == want.digest()
        assert peak < BOUND, f"the SDK held {peak >> 20} MiB moving {SIZE >> 20} MiB"
        dest = tmp_path / "big.bin"
        assert sb.files.download("big.bin", dest) == SIZE
        assert os.path.getsize(dest) == SIZE
        with open(dest, "rb") as f:  # a file object uploads streamed too
            assert sb.files.write("copy.bin", f).size == SIZE

        # Metrics: a sample comes every 5 s, so one taken after both writes (disk_used counts them) comes
        # within 20 s; the newest sample when the writes end may predate the second.
        deadline = time.monotonic() + 20
        metrics = sb.get_metrics()
        while (not metrics or metrics[-1].disk_used < 2 * SIZE) and time.monotonic() < deadline:
            time.sleep(1)
            metrics = sb.get_metrics()
        assert metrics, "no metrics within 20 s"
        m = metrics[-1]
        assert m.cpu_count > 0 and m.mem_total > 0 and 0 < m.mem_used <= m.mem_total
        assert m.disk_used >= 2 * SIZE and m.disk_total > m.disk_used and m.timestamp is not None

        # A watch ends with the typed gone error when its sandbox does.
        handle = sb.files.watch_dir("w", events.put, on_exit=exited.put)
        sb.kill()
        assert isinstance(exited.get(timeout=5), SandboxGoneError)


async def test_watch_rename_info_stream_metrics_async() -> None:
    async with await AsyncCodeSandbox.create(timeout_ms=600_000, metadata={"suite": "files-async"}) as sb:
        await sb.files.make_dir("w")
        events: "queue.Queue[FilesystemEvent]" = queue.Queue()
        exited: "asyncio.Queue[Optional[Exception]]" = asyncio.Queue()

        async def on_event(ev: FilesystemEvent) -> None:
            events.put(ev)

        handle = await sb.files.watch_dir("w", on_event, recursive=True, on_exit=exited.put)
        await sb.process.exec("echo hi > ~/w/a.txt && mv ~/w/a.txt ~/w/b.txt && rm ~/w/b.txt")
        await asyncio.to_thread(_wait, events, ["create a.txt", "write a.txt", "rename a.txt", "create b.txt", "remove b.txt"])
        await handle.stop()
        assert await asyncio.wait_for(exited.get(), 5) is None

        info = await sb.files.write("a.txt", "abc")
        info = await sb.files.rename("a.txt", "b.txt")
        assert info.name == "b.txt" and (await sb.files.get_info("b.txt")).permissions == "-rw-r--r--"

        async def agen() -> "asyncio.AsyncIterator[bytes]":
            for chunk in _chunks(b"async", 8 << 20):
                yield chunk

        assert (await sb.files.write("big.bin", agen())).size == 8 << 20
        n = 0
        async for chunk in await sb.files.read("big.bin", format="stream"):
            n += len(chunk)
        assert n == 8 << 20

        metrics = await sb.get_metrics()
        for _ in range(20):
            if metrics:
                break
            await asyncio.sleep(1)
            metrics = await sb.get_metrics()
        assert metrics and metrics[-1].mem_total > 0

        handle = await sb.files.watch_dir("w", on_event, on_exit=exited.put)
        await sb.kill()
        assert isinstance(await asyncio.wait_for(exited.get(), 5), SandboxGoneError)




def test_read_proc_files_whole() -> None:
    # A /proc file stats as 0 bytes: it is read to its real end, and the next call on the agent's
    # connection works (it was closed under it when the stat's length was declared).
    with CodeSandbox.create(timeout_ms=300_000, metadata={"suite": "files-proc"}) as sb:
        for _ in range(5):
            status = sb.files.read("/proc/self/status")
            assert "Name:" in status and "Pid:" in status, status
            assert sb.process.exec("echo after").stdout == "after\n"
        assert sb.files.read("/proc/meminfo").startswith("MemTotal:")


def test_watch_sees_writes_not_temporaries() -> None:
    # files.write goes through a temporary file renamed over the path; a watch sees the file's own
    # events (as E2B's envd's in-place write makes them), never the temporary's .lizard-upload-* name.
    with CodeSandbox.create(timeout_ms=300_000, metadata={"suite": "files-watch-write"}) as sb:
        sb.files.make_dir("/home/user/wd")
        events: "queue.Queue[FilesystemEvent]" = queue.Queue()
        handle = sb.files.watch_dir("/home/user/wd", events.put)

        def next3() -> List[str]:
            return [f"{ev.type} {ev.name}" for ev in (events.get(timeout=5) for _ in range(3))]

        sb.files.write("/home/user/wd/watched.txt", "one")
        assert next3() == ["create watched.txt", "chmod watched.txt", "write watched.txt"]
        sb.files.write("/home/user/wd/watched.txt", "two")
        assert next3() == ["chmod watched.txt", "write watched.txt", "write watched.txt"]
        time.sleep(0.5)
        handle.stop()
        rest = []
        while not events.empty():
            rest.append(events.get())
        assert rest == [], rest


def test_metadata_and_watch_entries() -> None:
    # A file's metadata (its user.e2b.* extended attributes) written, read back by stat, list and a
    # watch's entries, set in the sandbox too, and gone when the file is written again without it.
    with CodeSandbox.create(timeout_ms=300_000, metadata={"suite": "files-metadata"}) as sb:
        sb.files.make_dir("/home/user/md")
        events: "queue.Queue[FilesystemEvent]" = queue.Queue()
        handle = sb.files.watch_dir("/home/user/md", events.put, include_entry=True)
        info = sb.files.write("/home/user/md/a.txt", "one", metadata={"Author": "al", "step": "1"})
        assert info.metadata == {"Author": "al", "step": "1"}
        ev = events.get(timeout=5)
        while ev.type != "write":
            ev = events.get(timeout=5)
        assert ev.entry is not None and ev.entry.path == "/home/user/md/a.txt" and ev.entry.metadata == info.metadata
        handle.stop()
        sb.process.exec("python3 -c \"import os; os.setxattr('/home/user/md/a.txt', 'user.e2b.tag', b'inside')\"")
        assert sb.files.get_info("/home/user/md/a.txt").metadata == {"Author": "al", "step": "1", "tag": "inside"}
        assert [e.metadata for e in sb.files.list("/home/user/md")] == [{"Author": "al", "step": "1", "tag": "inside"}]
        assert sb.files.write("/home/user/md/a.txt", "two").metadata is None
        assert sb.files.get_info("/home/user/md/a.txt").metadata is None
        with pytest.raises(InvalidArgumentError):
            sb.files.write("/home/user/md/b.txt", "x", metadata={"bad\nkey": "v"})
        assert not sb.files.exists("/home/user/md/b.txt")
