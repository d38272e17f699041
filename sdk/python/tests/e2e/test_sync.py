"""End-to-end tests of CodeSandbox against a real `lizard serve` (see conftest.py)."""

from __future__ import annotations

import base64
import time
from typing import Iterator, List, Tuple

import pytest

import lizard
from lizard import CodeSandbox

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def sandbox(lizard_server: object) -> Iterator[CodeSandbox]:
    """One sandbox shared by the tests of this module that do not end it."""
    with CodeSandbox.create(project_id="proj_123", timeout_ms=600_000, metadata={"suite": "sync"}) as sb:
        yield sb


def test_seed_example() -> None:
    with CodeSandbox.create(project_id="proj_123", timeout_ms=300_000) as sandbox:
        sandbox.run_code('import pandas as pd\ndf = pd.DataFrame({"x": [1, 2, 3]})')
        run = sandbox.run_code("df.x.sum()")
        assert run.results[0].data == "np.int64(6)"
        assert run.results[0].mime == "text/plain" and run.results[0].type == "result"
        assert sandbox.run_code("1/0").error.name == "ZeroDivisionError"


def test_execution_fields(sandbox: CodeSandbox) -> None:
    run = sandbox.run_code("import sys\nprint('out')\nprint('err', file=sys.stderr)\n40 + 2")
    assert run.stdout == "out\n" and run.stderr == "err\n"
    assert [(r.type, r.mime, r.data) for r in run.results] == [("result", "text/plain", "42")]
    assert run.error is None and isinstance(run.execution_count, int) and run.execution_count > 0
    bad = sandbox.run_code("def f():\n    raise ValueError('nope')\nf()")
    assert bad.error is not None
    assert (bad.error.name, bad.error.message) == ("ValueError", "nope")
    assert "raise ValueError" in bad.error.traceback and bad.results == []


def test_state_persists(sandbox: CodeSandbox) -> None:
    sandbox.run_code("counter = 1")
    sandbox.run_code("counter += 1")
    assert sandbox.run_code("counter").results[0].data == "2"


def test_dataframe_is_html_only(sandbox: CodeSandbox) -> None:
    run = sandbox.run_code('import pandas as pd\npd.DataFrame({"x": [1, 2, 3]})')
    assert [r.mime for r in run.results] == ["text/html"], run.results
    assert "<table" in run.results[0].data


def test_chart_png(sandbox: CodeSandbox) -> None:
    run = sandbox.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])\nplt.show()")
    pngs = [r for r in run.results if r.mime == "image/png"]
    assert len(pngs) == 1, run.results
    assert pngs[0].type == "display"
    assert base64.b64decode(pngs[0].data).startswith(PNG_MAGIC)


def test_streaming_callbacks_in_order_while_running(sandbox: CodeSandbox) -> None:
    events: List[Tuple[str, str, float]] = []
    start = time.monotonic()

    def rec(kind: str):  # type: ignore[no-untyped-def]
        return lambda v: events.append((kind, v if isinstance(v, str) else getattr(v, "data", getattr(v, "name", "")),
                                        time.monotonic() - start))

    code = (
        "import sys, time\n"
        "print('first', flush=True)\n"
        "time.sleep(1)\n"
        "print('warn', file=sys.stderr, flush=True)\n"
        "time.sleep(0.5)\n"
        "print('second', flush=True)\n"
        "'value'\n"
    )
    run = sandbox.run_code(code, on_stdout=rec("stdout"), on_stderr=rec("stderr"), on_result=rec("result"),
                           on_error=rec("error"))
    returned = time.monotonic() - start
    assert [(k, v) for k, v, _ in events] == [("stdout", "first\n"), ("stderr", "warn\n"),
                                              ("stdout", "second\n"), ("result", "'value'")]
    first_at = events[0][2]
    assert returned - first_at >= 1.0, f"first callback at {first_at:.2f}s, call returned at {returned:.2f}s"
    assert run.stdout == "first\nsecond\n"
    errors: List[str] = []
    sandbox.run_code("1/0", on_error=lambda e: errors.append(e.name))
    assert errors == ["ZeroDivisionError"]


def test_timeout_interrupts_and_keeps_state(sandbox: CodeSandbox) -> None:
    sandbox.run_code("kept = 'yes'")
    start = time.monotonic()
    run = sandbox.run_code("import time\ntime.sleep(30)", timeout_ms=1000)
    assert time.monotonic() - start < 20
    assert run.error is not None and run.error.name == "TimeoutError"
    assert sandbox.run_code("kept").results[0].data == "'yes'"
    assert sandbox.run_code("1 + 1").results[0].data == "2"


def test_contexts(sandbox: CodeSandbox) -> None:
    ctx = sandbox.create_context(cwd="/tmp")
    assert ctx.id and ctx.language == "python" and ctx.cwd == "/tmp"
    sandbox.run_code("only_here = 7", context=ctx)
    assert sandbox.run_code("only_here", context=ctx).results[0].data == "7"
    assert sandbox.run_code("only_here", context=ctx.id).results[0].data == "7"
    assert sandbox.run_code("only_here").error.name == "NameError"
    assert sandbox.run_code("import os\nos.getcwd()", context=ctx).results[0].data == "'/tmp'"
    assert ctx.id in [c.id for c in sandbox.list_contexts()]
    restarted = sandbox.restart_context(ctx)
    assert restarted.id == ctx.id
    assert sandbox.run_code("only_here", context=ctx).error.name == "NameError"
    sandbox.delete_context(ctx)
    assert ctx.id not in [c.id for c in sandbox.list_contexts()]
    with pytest.raises(lizard.NotFoundError):
        sandbox.run_code("1", context=ctx)


def test_javascript_and_bash(sandbox: CodeSandbox) -> None:
    js = sandbox.run_code("const a = 1 + 2; console.log(a); console.error('e')", language="javascript")
    assert (js.stdout, js.stderr, js.results, js.error) == ("3\n", "e\n", [], None)
    assert sandbox.run_code("console.log(process.version)", language="javascript").stdout.startswith("v22.")
    assert sandbox.run_code("typeof a", language="javascript").results == []
    sh = sandbox.run_code("X=5; echo $((X * 2))", language="bash")
    assert (sh.stdout, sh.results) == ("10\n", [])
    assert sandbox.run_code("echo ${X:-unset}", language="bash").stdout == "unset\n"


def test_process_exec(sandbox: CodeSandbox) -> None:
    out: List[str] = []
    err: List[str] = []
    res = sandbox.process.exec("echo out; echo err >&2; exit 3", on_stdout=out.append, on_stderr=err.append)
    assert (res.stdout, res.stderr, res.exit_code) == ("out\n", "err\n", 3)
    assert (out, err) == (["out\n"], ["err\n"])  # two pipes: no order between them
    res = sandbox.process.exec("pwd; echo $GREETING", cwd="/tmp", envs={"GREETING": "hi"})
    assert (res.stdout, res.exit_code) == ("/tmp\nhi\n", 0)
    assert sandbox.process.exec(["printf", "%s-%s", "a", "b"]).stdout == "a-b"
    # Every sandbox has sudo, on Lizard's own API as on E2B's (docs/security.md, "sudo in sandboxes").
    assert sandbox.process.exec("whoami; sudo whoami").stdout == "user\nroot\n"
    assert sandbox.run_code("sudo id -u", language="bash").stdout == "0\n"
    slow = sandbox.process.exec("sleep 30", timeout_ms=500)
    assert slow.exit_code != 0 or slow.error


def test_files_round_trip(sandbox: CodeSandbox) -> None:
    blob = bytes(range(256)) * 1000
    info = sandbox.files.write("e2e/dir/blob.bin", blob)
    assert info.size == len(blob) and info.type == "file" and info.path == "/home/user/e2e/dir/blob.bin"
    assert sandbox.files.read("e2e/dir/blob.bin", format="bytes") == blob
    sandbox.files.write("/home/user/e2e/hello.txt", "héllo\n")
    assert sandbox.files.read("e2e/hello.txt") == "héllo\n"
    assert sandbox.run_code("open('/home/user/e2e/hello.txt').read()").results[0].data == "'héllo\\n'"
    assert sandbox.files.exists("e2e/hello.txt") and not sandbox.files.exists("e2e/missing")
    assert sandbox.files.stat("e2e/dir").type == "dir"
    assert sorted(e.name for e in sandbox.files.list("e2e")) == ["dir", "hello.txt"]
    assert sandbox.files.make_dir("e2e/a/b").type == "dir"
    assert sandbox.files.exists("e2e/a/b")
    sandbox.files.remove("e2e")
    assert not sandbox.files.exists("e2e")
    with pytest.raises(lizard.NotFoundError):
        sandbox.files.read("e2e/hello.txt")


def test_envs_at_create_and_per_call() -> None:
    with CodeSandbox.create(envs={"FROM_CREATE": "c"}, timeout_ms=120_000) as sb:
        assert sb.run_code("import os\nos.environ.get('FROM_CREATE')").results[0].data == "'c'"
        run = sb.run_code("echo $PER_CALL", language="bash", envs={"PER_CALL": "p"})
        assert run.stdout == "p\n"


def test_create_resources() -> None:
    """The resources asked for at create are the sandbox's, on its info and across a pause."""
    with CodeSandbox.create(timeout_ms=120_000, memory_mb=512, cpus=1, disk_mb=1024, on_timeout="pause") as sb:
        assert sb.run_code("1 + 1").results[0].data == "2"
        info = sb.get_info()
        assert (info.memory_mb, info.cpus, info.disk_mb) == (512, 1.0, 1024)
        sb.pause()
        sb.resume()
        info = sb.get_info()
        assert (info.state, info.memory_mb, info.cpus, info.disk_mb) == ("running", 512, 1.0, 1024)


def test_lifecycle_info_list_timeout_connect_kill() -> None:
    sb = CodeSandbox.create(timeout_ms=120_000, metadata={"suite": "lifecycle"})
    try:
        info = sb.get_info()
        assert (info.sandbox_id, info.project_id, info.template, info.state) == (
            sb.sandbox_id, "proj_123", "interpreter", "running")
        assert info.metadata == {"suite": "lifecycle"} and info.expires_at is not None
        listed = CodeSandbox.list(metadata={"suite": "lifecycle"}, state="running")
        assert [s.sandbox_id for s in listed] == [sb.sandbox_id]
        assert CodeSandbox.list(metadata={"suite": "no-such-suite"}) == []
        sb.set_timeout(0)
        assert sb.get_info().expires_at is None
        sb.set_timeout(60_000)
        expires = sb.get_info().expires_at
        assert expires is not None and expires > info.created_at  # type: ignore[operator]
        same = CodeSandbox.connect(sb.sandbox_id)
        same.run_code("shared = 1")
        assert sb.run_code("shared").results[0].data == "1"
        same.close()
    finally:
        sb.kill()
    info_after = _info_or_none(sb)
    assert info_after is None or info_after.state == "killed"  # type: ignore[attr-defined]
    with pytest.raises(lizard.NotFoundError):  # SandboxGoneError is a NotFoundError
        sb.run_code("1")
    sb.kill()  # already gone: not an error
    sb.close()


def _info_or_none(sb: CodeSandbox) -> object:
    try:
        return sb.get_info()
    except lizard.NotFoundError:
        return None


def test_sandbox_expires() -> None:
    sb = CodeSandbox.create(timeout_ms=2_000)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        info = _info_or_none(sb)
        if info is None or info.state == "expired":  # type: ignore[attr-defined]
            break
        time.sleep(0.5)
    else:
        sb.kill()
        pytest.fail("sandbox with timeout_ms=2000 still alive after 30 s")
    sb.close()


def test_project_id_mismatch() -> None:
    with pytest.raises(lizard.InvalidArgumentError, match="proj_other"):
        CodeSandbox.create(project_id="proj_other", metadata={"suite": "mismatch"})
    assert CodeSandbox.list(metadata={"suite": "mismatch"}, state="running") == [], "the sandbox must be killed"


def test_typed_request_errors() -> None:
    with pytest.raises(lizard.AuthenticationError):
        CodeSandbox.create(api_key="lz_bad_key")
    with pytest.raises(lizard.AuthenticationError):
        CodeSandbox.list(api_key="lz_bad_key")
    with pytest.raises(lizard.NotFoundError):
        CodeSandbox.connect("sbx_doesnotexist")


def test_server_down() -> None:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound but not listening: connections are refused
        with pytest.raises(lizard.LizardConnectionError, match="cannot reach Lizard"):
            CodeSandbox.create(api_url=f"http://127.0.0.1:{port}", request_timeout=5)


def test_pause_resume_snapshot_fork(sandbox: CodeSandbox) -> None:
    sandbox.run_code("import random\nsurvives = 'pause'")
    sandbox.pause()
    assert sandbox.get_info().state == "paused"
    sandbox.resume()
    assert sandbox.get_info().state == "running"
    assert sandbox.run_code("survives").results[0].data == "'pause'"
    sandbox.pause()
    assert sandbox.run_code("survives").results[0].data == "'pause'", "a call resumes a paused sandbox"
    sandbox.pause(wait_durable=True)  # the server's disk is its image store: durable at once
    info = sandbox.get_info()
    assert info.state == "paused" and info.durable, info
    again = CodeSandbox.connect(sandbox.sandbox_id)  # not `with`: leaving it would kill the sandbox
    assert again.get_info().state == "running", "connect resumes a paused sandbox"
    again.close()
    snap = sandbox.snapshot(name="e2e-golden")
    assert isinstance(snap, lizard.SnapshotInfo) and snap.sandbox_id == sandbox.sandbox_id and snap.size_bytes > 0
    assert snap.durable and not sandbox.get_info().durable, "a snapshot is durable, a running sandbox is not"
    assert snap.name == "e2e-golden"
    try:
        assert [s.snapshot_id for s in CodeSandbox.list_snapshots(name="e2e-golden")] == [snap.snapshot_id]
        assert CodeSandbox.list_snapshots(name="no-such-name") == []
        with CodeSandbox.create(snapshot_id="e2e-golden") as restored:  # by its name
            assert restored.run_code("survives").results[0].data == "'pause'"
    finally:
        sandbox.delete_snapshot(snap.snapshot_id)
    with sandbox.fork() as fork:
        assert fork.sandbox_id != sandbox.sandbox_id
        assert fork.run_code("survives").results[0].data == "'pause'"
        fork.run_code("survives = 'fork'")
        assert sandbox.run_code("survives").results[0].data == "'pause'"
    forks = sandbox.fork(count=2)
    try:
        draws = {f.run_code("random.random()").results[0].data for f in forks}
        assert len(draws) == 2, "forks must draw different random numbers"
    finally:
        for f in forks:
            f.kill()
            f.close()
    sandbox.files.write("/home/user/kept.txt", "on disk")
    sandbox.pause(memory=False)  # the disk alone: the resume boots fresh over it
    assert sandbox.files.read("/home/user/kept.txt") == "on disk"
    assert sandbox.run_code("'survives' in globals()").results[0].data == "False"


@pytest.mark.parametrize("call", ["run_code", "process"])
def test_call_ends_when_sandbox_is_killed(call: str) -> None:
    """A call in flight ends within moments of its sandbox's kill, with SandboxGoneError naming it."""
    import threading

    sb = CodeSandbox.create(project_id="proj_123", timeout_ms=300_000)
    outcome: List[BaseException] = []

    def long_call() -> None:
        try:
            if call == "run_code":
                sb.run_code("import time; print('started', flush=True); time.sleep(300)", timeout_ms=400_000)
            else:
                sb.process.exec("echo started; sleep 300", timeout_ms=400_000)
        except BaseException as exc:  # noqa: BLE001 - the test inspects what was raised
            outcome.append(exc)

    t = threading.Thread(target=long_call)
    t.start()
    time.sleep(2)  # the call is under way
    killed_at = time.monotonic()
    CodeSandbox.connect(sb.sandbox_id).kill()
    t.join(timeout=30)
    took = time.monotonic() - killed_at
    sb.close()
    assert not t.is_alive(), "the call still hangs 30 s after its sandbox was killed"
    assert took < 5, f"the call ended {took:.1f} s after the kill"
    assert outcome and isinstance(outcome[0], lizard.SandboxGoneError), f"raised {outcome!r}"
    assert "killed" in str(outcome[0])
