"""E2B's own SDK (PyPI e2b 2.63.0) against a real `lizard serve`, with nothing set but E2B_API_URL,
E2B_SANDBOX_URL and E2B_API_KEY (docs/e2b.md): sandbox.commands, sandbox.pty and sandbox.files, which
go through Lizard's envd (internal/e2b/envd) to the sandbox's agent."""

from __future__ import annotations

import asyncio
import re
import threading
import time
import urllib.parse
from typing import Iterator

import httpx
import pytest
from packaging.version import Version

from e2b import (
    AsyncSandbox,
    AuthenticationException,
    CommandExitException,
    ConnectionConfig,
    FileType,
    FilesystemEventType,
    InvalidArgumentException,
    NotFoundException,
    PtySize,
    Sandbox,
    SandboxNotRunningException,
    TimeoutException,
)


@pytest.fixture(autouse=True)
def _e2b_env(lizard_server, monkeypatch: pytest.MonkeyPatch) -> None:
    """The three variables of docs/e2b.md, and nothing else of E2B's."""
    for var in ("E2B_DOMAIN", "E2B_DEBUG", "E2B_ACCESS_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("E2B_API_URL", f"{lizard_server.url}/e2b")
    monkeypatch.setenv("E2B_SANDBOX_URL", f"{lizard_server.url}/e2b/sandbox")
    monkeypatch.setenv("E2B_API_KEY", lizard_server.api_key)


@pytest.fixture
def sbx() -> Iterator[Sandbox]:
    sb = Sandbox.create()
    try:
        yield sb
    finally:
        sb.kill()


def test_commands(sbx: Sandbox) -> None:
    r = sbx.commands.run("echo hi")
    assert (r.stdout, r.stderr, r.exit_code) == ("hi\n", "", 0)
    r = sbx.commands.run("echo err >&2; pwd; echo $X", cwd="/tmp", envs={"X": "from-envs"})
    assert (r.stdout, r.stderr) == ("/tmp\nfrom-envs\n", "err\n")
    with pytest.raises(CommandExitException) as exc:
        sbx.commands.run("exit 3")
    assert exc.value.exit_code == 3
    assert sbx.commands.run("whoami", user="root").stdout == "root\n"
    assert sbx.commands.run("whoami").stdout != "root\n"
    # E2B's templates have git, and agent code uses it (sandbox.git too).
    assert sbx.commands.run("git --version").stdout.startswith("git version ")

    seen = []
    sbx.commands.run("for i in 1 2 3; do echo $i; sleep 0.2; done", on_stdout=seen.append)
    assert "".join(seen) == "1\n2\n3\n"

    began = time.monotonic()
    with pytest.raises((TimeoutException, CommandExitException)):
        sbx.commands.run("sleep 30", timeout=1)
    assert time.monotonic() - began < 10


def test_deadline_kills_the_command_alone(sbx: Sandbox) -> None:
    """At a command's deadline envd kills its process, not what that started: E2B Desktop's open() runs
    xdg-open under a 60 s deadline, and the browser it opened lives on (docs/desktop.md)."""
    with pytest.raises((TimeoutException, CommandExitException)):
        sbx.commands.run("sleep 300 & echo $! > /tmp/child.pid; wait", timeout=2)
    pid = sbx.files.read("/tmp/child.pid").strip()
    time.sleep(1)
    assert sbx.commands.run(f"kill -0 {pid} && echo alive").stdout == "alive\n"
    sbx.commands.run(f"kill {pid}")


def test_background_list_connect_kill(sbx: Sandbox) -> None:
    h = sbx.commands.run("echo started; sleep 120", background=True)
    listed = [p for p in sbx.commands.list() if p.pid == h.pid]
    assert len(listed) == 1, sbx.commands.list()
    assert listed[0].cmd.endswith("bash") and listed[0].args[-1] == "echo started; sleep 120"
    c = sbx.commands.connect(h.pid)
    for out, _, _ in c:
        if out and "started" in out:
            break
    assert sbx.commands.kill(h.pid) is True
    with pytest.raises(CommandExitException) as exc:
        c.wait()
    assert exc.value.exit_code != 0 and "started" in exc.value.stdout
    assert h.pid not in [p.pid for p in sbx.commands.list()]
    assert sbx.commands.kill(999999) is False


def test_stdin(sbx: Sandbox) -> None:
    h = sbx.commands.run("cat", background=True, stdin=True)
    sbx.commands.send_stdin(h.pid, "hello stdin\n")
    sbx.commands.close_stdin(h.pid)
    assert h.wait().stdout == "hello stdin\n"

    h = sbx.commands.run("cat", background=True, stdin=True)
    sbx.commands.stream_input(h.pid, ["one\n", b"two\n"])
    sbx.commands.close_stdin(h.pid)
    assert h.wait().stdout == "one\ntwo\n"


def test_pty(sbx: Sandbox) -> None:
    out = bytearray()
    t = sbx.pty.create(PtySize(rows=24, cols=80))
    sbx.pty.send_stdin(t.pid, b"echo $((6*7))\n")
    sbx.pty.resize(t.pid, PtySize(rows=40, cols=120))
    sbx.pty.send_stdin(t.pid, b"stty size\n")
    sbx.pty.send_stdin(t.pid, b"exit\n")
    t.wait(on_pty=out.extend)
    text = out.decode(errors="replace")
    assert "42" in text and "40 120" in text, text
    t = sbx.pty.create(PtySize(rows=24, cols=80))
    assert sbx.pty.kill(t.pid) is True


def test_files(sbx: Sandbox) -> None:
    info = sbx.files.write("/tmp/e2b/a.txt", "alpha")
    assert (info.path, info.name) == ("/tmp/e2b/a.txt", "a.txt")
    assert sbx.files.read("/tmp/e2b/a.txt") == "alpha"
    assert bytes(sbx.files.read("/tmp/e2b/a.txt", format="bytes")) == b"alpha"
    sbx.files.write_files([
        {"path": "/tmp/e2b/b.txt", "data": "beta"},
        {"path": "/tmp/e2b/sub/c.bin", "data": b"\x00\x01"},
    ])
    assert bytes(sbx.files.read("/tmp/e2b/sub/c.bin", format="bytes")) == b"\x00\x01"
    sbx.files.write("/tmp/e2b/z.txt", "zipped " * 100, gzip=True)
    assert sbx.files.read("/tmp/e2b/z.txt", gzip=True) == "zipped " * 100
    assert sorted(e.name for e in sbx.files.list("/tmp/e2b")) == ["a.txt", "b.txt", "sub", "z.txt"]
    assert "/tmp/e2b/sub/c.bin" in [e.path for e in sbx.files.list("/tmp/e2b", depth=2)]
    assert sbx.files.make_dir("/tmp/e2b/newdir") is True
    assert sbx.files.make_dir("/tmp/e2b/newdir") is False
    assert sbx.files.rename("/tmp/e2b/a.txt", "/tmp/e2b/newdir/a2.txt").path == "/tmp/e2b/newdir/a2.txt"
    assert sbx.files.exists("/tmp/e2b/newdir/a2.txt") and not sbx.files.exists("/tmp/e2b/a.txt")
    gi = sbx.files.get_info("/tmp/e2b/newdir/a2.txt")
    assert gi.type == FileType.FILE and gi.size == 5 and gi.permissions.startswith("-")
    assert sbx.files.get_info("/tmp/e2b/newdir").type == FileType.DIR
    sbx.files.remove("/tmp/e2b/newdir")
    assert not sbx.files.exists("/tmp/e2b/newdir")
    with pytest.raises(NotFoundException):
        sbx.files.read("/tmp/e2b/none.txt")
    with pytest.raises(NotFoundException):
        sbx.files.get_info("/tmp/e2b/none.txt")


def test_files_as_envd(sbx: Sandbox) -> None:
    # envd's remove is RemoveAll: a missing path is removed already.
    sbx.files.remove("/tmp/e2b-none/nothing.txt")
    sbx.files.remove("/tmp/e2b-none")
    # A /proc file stats as 0 bytes and is read to its real end, and the next command runs (it failed
    # INTERNAL when the agent's connection closed under it).
    for _ in range(10):
        status = sbx.files.read("/proc/self/status")
        assert "Name:" in status and "Pid:" in status, status
        assert sbx.commands.run("echo after").stdout == "after\n"
    assert sbx.files.read("/proc/cpuinfo").strip() != ""
    # A symlink is described as envd 0.5.x does: its target's type and mode, and the target's resolved
    # absolute path (no is_symlink, which this SDK would show as SYMLINK).
    sbx.files.write("/tmp/e2b-links/real/f.txt", "target")
    sbx.commands.run("cd /tmp/e2b-links && chmod 640 real/f.txt && chmod 750 real && ln -s real/f.txt link && ln -s link chain"
                     " && ln -s /tmp/e2b-links/real dirlink && ln -s nowhere dangling")
    link = sbx.files.get_info("/tmp/e2b-links/link")
    assert (link.type, link.mode, link.symlink_target, link.path) == (
        FileType.FILE, 0o640, "/tmp/e2b-links/real/f.txt", "/tmp/e2b-links/link"), link
    by_name = {e.name: e for e in sbx.files.list("/tmp/e2b-links")}
    assert (by_name["chain"].mode, by_name["chain"].symlink_target) == (0o640, "/tmp/e2b-links/real/f.txt")
    assert (by_name["dirlink"].type, by_name["dirlink"].mode, by_name["dirlink"].symlink_target) == (
        FileType.DIR, 0o750, "/tmp/e2b-links/real")
    # A dangling link's type is envd's unknown, which the SDK's list leaves out; get_info names it itself.
    assert "dangling" not in by_name
    dangling = sbx.files.get_info("/tmp/e2b-links/dangling")
    assert (dangling.mode, dangling.symlink_target) == (0, "/tmp/e2b-links/dangling")
    assert by_name["real"].symlink_target is None and by_name["real"].type == FileType.DIR
    # A link to a directory is listed, not entered.
    assert "/tmp/e2b-links/dirlink/f.txt" not in [e.path for e in sbx.files.list("/tmp/e2b-links", depth=3)]


def test_signed_file_urls(sbx: Sandbox, lizard_server) -> None:  # type: ignore[no-untyped-def]
    """upload_url/download_url: E2B's signature of the sandbox's token stands in for it. With
    E2B_SANDBOX_URL the SDK's URL names no sandbox (it is that URL's host + /files): the server finds
    the sandbox whose token made the signature and serves it there, as the same query to
    /e2b/sandbox/files with the sandbox headers is (the host form's URL as is: e2e TestE2BHostForm)."""
    heads = {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "49983"}

    def via(u: str) -> str:
        return f"{lizard_server.url}/e2b/sandbox/files?{urllib.parse.urlsplit(u).query}"

    up = sbx.upload_url("/tmp/signed.txt")
    assert urllib.parse.urlsplit(up).path == "/files"  # the SDK's URL, as it is
    assert httpx.post(up, files={"file": ("signed.txt", b"signed")}).status_code == 200
    down = sbx.download_url("/tmp/signed.txt", use_signature_expiration=60)
    assert httpx.get(down).text == "signed" and sbx.files.read("/tmp/signed.txt") == "signed"
    assert httpx.get(via(down), headers=heads).text == "signed"
    # Refused: an upload's signature to read, another path's, an expired one (envd's words), another
    # sandbox's — in either form.
    for u, h in ((lambda u: u, {}), (via, heads)):
        assert httpx.get(u(up), headers=h).status_code == 401
        assert httpx.get(u(down).replace("signed.txt", "other.txt"), headers=h).status_code == 401
        r = httpx.get(u(sbx.download_url("/tmp/signed.txt", use_signature_expiration=-5)), headers=h)
        assert r.status_code == 401 and r.json() == {"code": 401, "message": "signature is already expired"}
    other = Sandbox.create(timeout=60)
    try:
        other.files.write("/tmp/signed.txt", "other's")
        r = httpx.get(via(down), headers={**heads, "E2b-Sandbox-Id": other.sandbox_id})
        assert r.status_code == 401
        # Without the header, each signature reaches its own sandbox.
        assert httpx.get(other.download_url("/tmp/signed.txt")).text == "other's"
        assert httpx.get(down, headers={"E2b-Sandbox-Id": other.sandbox_id}).text == "signed"
    finally:
        other.kill()
    # Once the sandbox has ended, its URLs open nothing.
    sbx.kill()
    assert httpx.get(down).status_code == 401


def test_watch_polled_and_streamed(sbx: Sandbox) -> None:
    # The sync SDK polls (CreateWatcher, GetWatcherEvents, RemoveWatcher).
    sbx.files.make_dir("/tmp/w")
    w = sbx.files.watch_dir("/tmp/w")
    sbx.files.write("/tmp/w/new.txt", "x")
    events = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(e.name == "new.txt" and e.type == FilesystemEventType.WRITE for e in events):
        events += w.get_new_events()
        time.sleep(0.2)
    # As envd's: the file's create, chmod (envd chowns it) and write; not the agent's temporary file.
    assert [e.type for e in events] == [FilesystemEventType.CREATE, FilesystemEventType.CHMOD, FilesystemEventType.WRITE], events
    assert all(e.name == "new.txt" for e in events), events
    # Written again: envd's chmod, write (the truncation), write.
    sbx.files.write("/tmp/w/new.txt", "xy")
    events = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(events) < 3:
        events += w.get_new_events()
        time.sleep(0.2)
    time.sleep(0.3)
    events += w.get_new_events()
    w.stop()
    assert [(e.name, e.type) for e in events] == [
        ("new.txt", FilesystemEventType.CHMOD), ("new.txt", FilesystemEventType.WRITE), ("new.txt", FilesystemEventType.WRITE)], events

    # The async SDK streams (WatchDir).
    async def streamed() -> list:
        a = await AsyncSandbox.connect(sbx.sandbox_id)
        got: list = []
        done = asyncio.Event()

        def on_event(e) -> None:
            got.append(e)
            if e.name == "streamed.txt" and e.type == FilesystemEventType.WRITE:
                done.set()

        h = await a.files.watch_dir("/tmp/w", on_event=on_event, recursive=True)
        await a.files.write("/tmp/w/streamed.txt", "y")
        await asyncio.wait_for(done.wait(), 10)
        await h.stop()
        return got

    got = asyncio.run(streamed())
    assert [(e.name, e.type) for e in got] == [
        ("streamed.txt", FilesystemEventType.CREATE), ("streamed.txt", FilesystemEventType.CHMOD), ("streamed.txt", FilesystemEventType.WRITE)], got


def test_wrong_access_token(sbx: Sandbox) -> None:
    bad = Sandbox(
        sandbox_id=sbx.sandbox_id,
        sandbox_domain=None,
        envd_version=Version("0.5.7"),
        envd_access_token="wrong",
        connection_config=ConnectionConfig(extra_sandbox_headers={
            "E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "49983", "X-Access-Token": "wrong"}),
    )
    for call in (
        lambda: bad.commands.run("echo hi"),
        lambda: bad.commands.list(),
        lambda: bad.files.read("/etc/hostname"),
        lambda: bad.files.list("/tmp"),
    ):
        with pytest.raises(AuthenticationException):
            call()


def test_sandbox_killed_under_a_command() -> None:
    sbx = Sandbox.create()
    caught: dict = {}

    def follow() -> None:
        try:
            sbx.commands.run("sleep 120", timeout=0)
        except Exception as e:  # noqa: BLE001 - its type is what is checked
            caught["err"], caught["at"] = e, time.monotonic()

    th = threading.Thread(target=follow)
    th.start()
    time.sleep(1.5)
    killed_at = time.monotonic()
    sbx.kill()
    th.join(10)
    assert "err" in caught, "the command outlived its sandbox"
    assert isinstance(caught["err"], SandboxNotRunningException), repr(caught["err"])
    # The connection dropped, as E2B's proxy drops it: the SDK asked /health (502) and says what E2B's says.
    assert "killed or reached its end of life" in str(caught["err"]), str(caught["err"])
    assert caught["at"] - killed_at < 2, caught["at"] - killed_at


def test_sandbox_killed_under_a_background_command() -> None:
    """As E2B's own test: a background command's wait() on a sandbox killed under it."""
    sbx = Sandbox.create()
    h = sbx.commands.run("sleep 60", background=True, timeout=0)
    sbx.kill()
    with pytest.raises(TimeoutException, match="killed or reached its end of life"):
        h.wait()
    assert not sbx.is_running()


def test_pause_ends_a_followed_command(sbx: Sandbox) -> None:
    """A pause does not wait for a command being followed: it ends its stream (CANCELED naming the pause,
    the SDK's TimeoutException) within 2 s; the next call is E2B's proxy's 502 (not running), and
    connect() resumes the sandbox."""
    h = sbx.commands.run("sleep 120", background=True, timeout=0)
    caught: dict = {}

    def follow() -> None:
        try:
            h.wait()
        except Exception as e:  # noqa: BLE001 - its type is what is checked
            caught["err"], caught["at"] = e, time.monotonic()

    th = threading.Thread(target=follow)
    th.start()
    time.sleep(1)
    began = time.monotonic()
    sbx.pause()
    th.join(10)
    assert "err" in caught, "the followed command kept the pause waiting"
    assert isinstance(caught["err"], TimeoutException) and "paused" in str(caught["err"]), repr(caught["err"])
    assert caught["at"] - began < 2, caught["at"] - began
    assert not sbx.is_running()
    with pytest.raises(SandboxNotRunningException, match="is paused"):
        sbx.commands.run("echo back")
    assert Sandbox.get_info(sbx.sandbox_id).state.value == "paused"
    sbx.connect()
    assert sbx.is_running()
    assert sbx.commands.run("echo back").stdout == "back\n"


def test_file_metadata_and_watch_entries(sbx: Sandbox) -> None:
    """envd 0.6.x, which the sandbox reports (the SDK refuses these below 0.6.2 to 0.6.4): an upload's
    metadata is kept as the file's user.e2b.* extended attributes — shown by write, get_info, list and
    rename, read and set by code in the sandbox too, gone when the file is written again without it —
    and a watch with include_entry gives each event's entry."""
    assert sbx._envd_version >= Version("0.6.4")
    info = sbx.files.write("/tmp/meta/a.txt", "a", metadata={"Author": "mish", "purpose": "up load"})
    assert info.metadata == {"author": "mish", "purpose": "up load"}  # keys lowercased, as envd's
    assert sbx.files.get_info("/tmp/meta/a.txt").metadata == info.metadata
    got = sbx.commands.run("python3 -c \"import os; print(os.getxattr('/tmp/meta/a.txt', 'user.e2b.author').decode())\"")
    assert got.stdout.strip() == "mish"
    sbx.commands.run("python3 -c \"import os; os.setxattr('/tmp/meta/a.txt', 'user.e2b.tag', b'inside')\"")
    assert sbx.files.get_info("/tmp/meta/a.txt").metadata == {"author": "mish", "purpose": "up load", "tag": "inside"}
    infos = sbx.files.write_files([{"path": "/tmp/meta/b.txt", "data": "b"}, {"path": "/tmp/meta/c.txt", "data": "c"}],
                                  metadata={"source": "suite"})
    assert [i.metadata for i in infos] == [{"source": "suite"}] * 2
    listed = {e.name: e.metadata for e in sbx.files.list("/tmp/meta")}
    assert listed["b.txt"] == {"source": "suite"} and listed["a.txt"]["tag"] == "inside"
    assert sbx.files.rename("/tmp/meta/b.txt", "/tmp/meta/d.txt").metadata == {"source": "suite"}
    assert sbx.files.write("/tmp/meta/d.txt", "again").metadata is None
    assert sbx.files.get_info("/tmp/meta/d.txt").metadata is None
    # Over the 4 KiB a file keeps: refused, nothing written.
    with pytest.raises(InvalidArgumentException):
        sbx.files.write("/tmp/meta/big.txt", "x", metadata={"k": "v" * 5000})
    assert not sbx.files.exists("/tmp/meta/big.txt")

    w = sbx.files.watch_dir("/tmp/meta", include_entry=True, allow_network_mounts=True)
    sbx.files.write("/tmp/meta/a.txt", "changed", metadata={"v": "2"})
    events: list = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(e.type == FilesystemEventType.WRITE for e in events):
        events += w.get_new_events()
        time.sleep(0.2)
    w.stop()
    write = next(e for e in events if e.type == FilesystemEventType.WRITE)
    assert write.entry is not None and (write.entry.name, write.entry.path, write.entry.type) == (
        "a.txt", "/tmp/meta/a.txt", FileType.FILE), write
    assert write.entry.metadata == {"v": "2"}
    # Kept through a pause: the attributes are in the checkpoint of the overlay's upper layer.
    sbx.pause()
    again = Sandbox.connect(sbx.sandbox_id)
    assert again.files.get_info("/tmp/meta/a.txt").metadata == {"v": "2"}


def test_sudo(sbx: Sandbox, lizard_server) -> None:  # type: ignore[no-untyped-def]
    """Passwordless sudo for the sandbox user, as E2B's templates have, with no set-user-ID bit: the
    sandbox's /usr/bin/sudo asks the agent (internal/agent/sudo, docs/security.md)."""
    run = sbx.commands.run
    assert run("whoami").stdout == "user\n"
    assert run("sudo whoami").stdout == "root\n"
    uid = run("id -u").stdout
    assert run("sudo -u user id -u").stdout == uid
    assert run("echo hi | sudo tee /root/x && sudo cat /root/x").stdout == "hi\nhi\n"
    with pytest.raises(CommandExitException) as exc:
        run("cat /root/x")  # the file is root's: the command above was not run as the user
    with pytest.raises(CommandExitException) as exc:
        run("sudo false")
    assert exc.value.exit_code == 1
    with pytest.raises(CommandExitException) as exc:
        run("sudo sh -c 'echo out; echo err >&2; exit 7'")
    assert (exc.value.exit_code, exc.value.stdout, exc.value.stderr) == (7, "out\n", "err\n")
    assert run("sudo sh -c 'echo $SUDO_USER $HOME $X'", envs={"X": "dropped"}).stdout == "user /root\n"
    assert run("sudo -E sh -c 'echo $X'", envs={"X": "kept"}).stdout == "kept\n"
    assert run('sudo echo "$FOO"').stdout == "\n"  # a command's envs are its own (E2B's test_env_vars)
    assert run("sudo DEBIAN_FRONTEND=noninteractive sh -c 'echo $DEBIAN_FRONTEND'").stdout == "noninteractive\n"
    assert run("sudo -n -S -H whoami < /dev/null").stdout == "root\n"
    assert run("sudo -i pwd").stdout == "/root\n"
    assert run("sudo -s whoami").stdout == "root\n"
    assert run("sudo -- id -un").stdout == "root\n"
    assert run("command -v sudo").stdout == "/usr/bin/sudo\n"
    with pytest.raises(CommandExitException) as exc:
        run("sudo -x id")
    assert exc.value.exit_code == 1 and exc.value.stderr.startswith("sudo: invalid option -- 'x'\nusage: sudo")
    # Who asks is the kernel's word (SO_PEERCRED), so a user not in E2B's sudoers cannot use it.
    with pytest.raises(CommandExitException) as exc:
        run("sudo -u nobody sudo whoami")
    assert exc.value.exit_code == 1 and "nobody is not in the sudoers file" in exc.value.stderr

    # A sudo killed with its command (E2B's commands.kill: SIGKILL to the shell's group) takes the
    # command it started with it; a signal sudo gets reaches the command.
    h = run("sudo sleep 313", background=True)
    deadline = time.monotonic() + 30
    while run("pgrep -x sleep || true").stdout == "" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sbx.commands.kill(h.pid) is True
    deadline = time.monotonic() + 30
    while run("pgrep -fx 'sleep 313' || true").stdout != "" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert run("pgrep -fx 'sleep 313' || true").stdout == ""
    with pytest.raises(CommandExitException) as exc:
        run("sudo sh -c 'trap \"exit 42\" TERM; sleep 100 & wait' & sleep 2; kill -TERM $!; wait $!")
    assert exc.value.exit_code == 42

    # A flood is bounded: 64 sudo sessions at once per sandbox (connections still sending their request
    # count), and past them each is refused at once. Held open here by a program that sends nothing.
    flood = sbx.files.write("/tmp/flood.py", """
import socket, subprocess, time
conns = []
for _ in range(80):
    s = socket.socket(socket.AF_UNIX)
    s.connect("/run/lizard/sudo.sock")
    conns.append(s)
time.sleep(1)
held, refused = [], 0
for s in conns:
    s.setblocking(False)
    try:
        refused += b"sudo commands run in this sandbox already" in s.recv(4096)
    except BlockingIOError:
        held.append(s)
r = subprocess.run(["sudo", "whoami"], capture_output=True, text=True)
print(len(held), refused, r.returncode, r.stderr.strip())
for s in held:
    s.close()
time.sleep(0.5)
print(subprocess.run(["sudo", "whoami"], capture_output=True, text=True).stdout.strip())
""")
    r = run(f"python3 {flood.path}")
    assert r.stdout == "64 16 1 sudo: 64 sudo commands run in this sandbox already, its bound: wait for one to end\nroot\n"
    assert run("sudo whoami").stdout == "root\n"

    # The socket is the sandbox's own: gVisor keeps it in the Sentry, and no file of it is on the host.
    if lizard_server.data_dir.exists():
        found = [p for p in lizard_server.data_dir.rglob("*") if p.name == "sudo.sock"]
        assert found == []


def test_sudo_on_a_terminal(sbx: Sandbox) -> None:
    """A terminal running sudo stays interactive: `sudo -i` gives root's login shell, whose input and
    output sudo relays, and ^C reaches the command sudo runs."""
    out = bytearray()
    t = sbx.pty.create(PtySize(rows=24, cols=80))
    # In the background sudo leaves the shell's terminal alone (a change would stop it: SIGTTOU).
    sbx.pty.send_stdin(t.pid, b"sudo sh -c 'echo bg-$((6*7))' & wait\n")
    sbx.pty.send_stdin(t.pid, b"sudo -i\n")
    time.sleep(1)
    sbx.pty.send_stdin(t.pid, b"whoami; pwd; stty size\n")
    time.sleep(1)
    sbx.pty.resize(t.pid, PtySize(rows=40, cols=120))
    time.sleep(0.5)
    sbx.pty.send_stdin(t.pid, b"stty size\n")
    sbx.pty.send_stdin(t.pid, b"sleep 100\n")
    time.sleep(1)
    sbx.pty.send_stdin(t.pid, b"\x03")
    sbx.pty.send_stdin(t.pid, b"echo after-$((20+22))\n")
    sbx.pty.send_stdin(t.pid, b"exit\n")
    time.sleep(0.5)
    sbx.pty.send_stdin(t.pid, b"whoami\n")
    sbx.pty.send_stdin(t.pid, b"exit\n")
    began = time.monotonic()
    t.wait(on_pty=out.extend)
    assert time.monotonic() - began < 30
    # Without bash's escapes (bracketed paste, the title, colours).
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07", "", out.decode(errors="replace"))
    lines = [line.strip() for line in text.splitlines()]
    assert "root" in lines and "/root" in lines and "24 80" in lines and "40 120" in lines, text
    assert "after-42" in lines and "bg-42" in lines, text
    # After sudo's shell exits, the terminal is the user's again.
    assert lines.index("user") > lines.index("after-42"), text
