"""Unit tests of the SDK against a fake server (httpx.MockTransport), for both the sync and async clients."""

from __future__ import annotations

import builtins
import io
import json
import re
from typing import Any, List

import httpx
import pytest

import lizard
from lizard import AsyncCodeSandbox, CodeSandbox
from fake import SANDBOX, FakeServer, ndjson, r

PREFIX = "/v1/sandboxes/sbx_1"


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LIZARD_API_URL", raising=False)
    monkeypatch.setenv("LIZARD_API_KEY", "env-key")


def cls(mode: str) -> Any:
    return CodeSandbox if mode == "sync" else AsyncCodeSandbox


def server(mode: str) -> FakeServer:
    srv = FakeServer(mode)
    srv.route("POST", "/v1/sandboxes", status=201, json=SANDBOX)
    srv.route("DELETE", PREFIX, status=204)
    return srv


async def sandbox(srv: FakeServer, **kwargs: Any) -> Any:
    return await r(cls(srv.mode).create(transport=srv.transport(), **kwargs))


# Configuration ------------------------------------------------------------------------------------------


async def test_missing_key_raises_before_any_request(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LIZARD_API_KEY")
    srv = server(mode)
    for call in (
        lambda: cls(mode).create(transport=srv.transport()),
        lambda: cls(mode).connect("sbx_1", transport=srv.transport()),
        lambda: cls(mode).list(transport=srv.transport()),
    ):
        with pytest.raises(lizard.AuthenticationError, match="set LIZARD_API_KEY or pass api_key"):
            await r(call())
    assert srv.requests == [], "no request may be sent without a key"


async def test_env_config_and_default_url(mode: str) -> None:
    srv = server(mode)
    sb = await sandbox(srv)
    req = srv.last("POST", "/v1/sandboxes")
    assert req.headers["authorization"] == "Bearer env-key"
    assert sb._http.api_url == "http://127.0.0.1:8080"
    assert sb.sandbox_id == "sbx_1"


async def test_explicit_config_wins_over_env(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIZARD_API_URL", "http://env.invalid:1")
    srv = server(mode)
    sb = await sandbox(srv, api_key="explicit", api_url="http://127.0.0.1:9999/")
    assert srv.last("POST", "/v1/sandboxes").headers["authorization"] == "Bearer explicit"
    assert sb._http.api_url == "http://127.0.0.1:9999"


# Trace context ------------------------------------------------------------------------------------------


async def test_traceparent_of_the_callers_span(mode: str) -> None:
    """With an OpenTelemetry span active, every call (a create, a runCode's stream) carries its traceparent."""
    from opentelemetry import context, trace

    span = trace.NonRecordingSpan(
        trace.SpanContext(
            trace_id=0x4BF92F3577B34DA6A3CE929D0E0E4736,
            span_id=0x00F067AA0BA902B7,
            is_remote=False,
            trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
        )
    )
    srv = server(mode)
    srv.route("POST", PREFIX + "/execute", content=ndjson({"type": "end"}))
    token = context.attach(trace.set_span_in_context(span))
    try:
        sb = await sandbox(srv)
        await r(sb.run_code("1"))
    finally:
        context.detach(token)
    want = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    assert srv.last("POST", "/v1/sandboxes").headers.get("traceparent") == want
    assert srv.last("POST", PREFIX + "/execute").headers.get("traceparent") == want
    # Without an active span, nothing is sent.
    await r(sb.run_code("1"))
    assert "traceparent" not in srv.last("POST", PREFIX + "/execute").headers


async def test_no_traceparent_without_opentelemetry(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The opentelemetry package is optional: without it calls go out as ever."""
    import sys

    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # import fails
    srv = server(mode)
    await sandbox(srv)
    assert "traceparent" not in srv.last("POST", "/v1/sandboxes").headers


async def test_env_url(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIZARD_API_URL", "http://127.0.0.2:7000")
    sb = await sandbox(server(mode))
    assert sb._http.api_url == "http://127.0.0.2:7000"


# Lifecycle ----------------------------------------------------------------------------------------------


async def test_create_body(mode: str) -> None:
    srv = server(mode)
    await sandbox(srv, project_id="proj_123", timeout_ms=0, envs={"A": "1"}, metadata={"k": "v"},
                  lizard_token=True)
    body = srv.last("POST", "/v1/sandboxes").json()
    assert body == {"template": "interpreter", "timeoutMs": 0, "envs": {"A": "1"}, "metadata": {"k": "v"},
                    "lizardToken": True}, "project_id is not sent: the key decides the project"
    # The create request gets a long timeout: the server may be building its template.
    assert srv.last("POST", "/v1/sandboxes").timeout["read"] == 900.0


async def test_create_defaults(mode: str) -> None:
    srv = server(mode)
    await sandbox(srv)
    assert srv.last("POST", "/v1/sandboxes").json() == {"template": "interpreter", "timeoutMs": 300000}


async def test_create_resources(mode: str) -> None:
    srv = server(mode)
    srv.route("POST", "/v1/sandboxes", status=201, json={**SANDBOX, "memoryMb": 512, "cpus": 1, "diskMb": 1024})
    sb = await sandbox(srv, memory_mb=512, cpus=1, disk_mb=1024, on_timeout="pause", allow_internet=False)
    assert srv.last("POST", "/v1/sandboxes").json() == {
        "template": "interpreter", "timeoutMs": 300000, "memoryMb": 512, "cpus": 1, "diskMb": 1024,
        "onTimeout": "pause", "allowInternet": False}
    info = sb._info
    assert (info.memory_mb, info.cpus, info.disk_mb) == (512, 1.0, 1024)


@pytest.mark.parametrize("kwargs", [{"memory_mb": 0}, {"memory_mb": 1.5}, {"cpus": -1}, {"disk_mb": True},
                                    {"on_timeout": "stop"}])
async def test_create_rejects_bad_resources(mode: str, kwargs: Any) -> None:
    srv = server(mode)
    with pytest.raises(lizard.InvalidArgumentError):
        await sandbox(srv, **kwargs)
    assert srv.requests == []


async def test_create_project_mismatch_kills_and_raises(mode: str) -> None:
    srv = server(mode)
    with pytest.raises(lizard.InvalidArgumentError, match="proj_other.*proj_123"):
        await sandbox(srv, project_id="proj_other")
    srv.last("DELETE", PREFIX)


async def test_create_rejects_negative_timeout(mode: str) -> None:
    srv = server(mode)
    with pytest.raises(lizard.InvalidArgumentError):
        await sandbox(srv, timeout_ms=-1)
    assert srv.requests == []


async def test_get_info_parses_sandbox(mode: str) -> None:
    srv = server(mode)
    srv.route("GET", PREFIX, json=SANDBOX)
    info = await r((await sandbox(srv)).get_info())
    assert info.sandbox_id == "sbx_1" and info.project_id == "proj_123" and info.state == "running"
    assert info.timeout_ms == 300000 and info.metadata == {"k": "v"}
    assert info.created_at is not None and info.created_at.microsecond == 123456
    assert info.expires_at is not None and info.expires_at.minute == 9
    assert info.ended_at is None


async def test_connect(mode: str) -> None:
    srv = server(mode)
    srv.route("GET", PREFIX, json=SANDBOX)
    sb = await r(cls(mode).connect("sbx_1", transport=srv.transport()))
    assert sb.sandbox_id == "sbx_1"


async def test_connect_unknown_and_ended(mode: str) -> None:
    srv = server(mode)
    srv.route("GET", "/v1/sandboxes/nope", status=404, json={"code": "not_found", "message": "no sandbox nope"})
    with pytest.raises(lizard.NotFoundError, match="no sandbox nope"):
        await r(cls(mode).connect("nope", transport=srv.transport()))
    srv.route("GET", PREFIX, json={**SANDBOX, "state": "killed"})
    with pytest.raises(lizard.SandboxGoneError):
        await r(cls(mode).connect("sbx_1", transport=srv.transport()))


async def test_list(mode: str) -> None:
    srv = server(mode)
    srv.route("GET", "/v1/sandboxes", json={"sandboxes": [SANDBOX, {**SANDBOX, "sandboxId": "sbx_2"}]})
    got = await r(cls(mode).list(metadata={"a": "1", "b": "2"}, state="running", transport=srv.transport()))
    assert [s.sandbox_id for s in got] == ["sbx_1", "sbx_2"]
    assert srv.last("GET", "/v1/sandboxes").params == [("metadata", "a=1"), ("metadata", "b=2"), ("state", "running")]


async def test_set_timeout_and_kill(mode: str) -> None:
    srv = server(mode)
    srv.route("POST", PREFIX + "/timeout", json=SANDBOX)
    sb = await sandbox(srv)
    await r(sb.set_timeout(0))
    assert srv.last("POST", PREFIX + "/timeout").json() == {"timeoutMs": 0}
    await r(sb.kill())
    srv.last("DELETE", PREFIX)


async def test_kill_of_gone_sandbox_is_quiet(mode: str) -> None:
    srv = server(mode)
    sb = await sandbox(srv)
    srv.route("DELETE", PREFIX, status=410, json={"code": "gone", "message": "sandbox ended"})
    await r(sb.kill())
    srv.route("DELETE", PREFIX, status=404, json={"code": "not_found", "message": "no sandbox"})
    await r(sb.kill())


async def test_context_manager_kills_on_exit(mode: str) -> None:
    srv = server(mode)
    if mode == "sync":
        with CodeSandbox.create(transport=srv.transport()) as sb:
            assert sb.sandbox_id == "sbx_1"
    else:
        async with AsyncCodeSandbox.create(transport=srv.transport()) as sb:
            assert sb.sandbox_id == "sbx_1"
        async with await AsyncCodeSandbox.create(transport=srv.transport()) as sb2:
            assert sb2.sandbox_id == "sbx_1"
    assert [r.method for r in srv.requests].count("DELETE") == (1 if mode == "sync" else 2)


async def test_context_manager_keeps_body_exception(mode: str) -> None:
    srv = server(mode)
    srv.route("DELETE", PREFIX, status=500, json={"code": "internal", "message": "boom"})
    with pytest.raises(KeyError):
        if mode == "sync":
            with CodeSandbox.create(transport=srv.transport()):
                raise KeyError("body")
        else:
            async with AsyncCodeSandbox.create(transport=srv.transport()):
                raise KeyError("body")


@pytest.mark.parametrize("method,path", [("pause", "/pause"), ("resume", "/resume"), ("snapshot", "/snapshots"),
                                         ("fork", "/fork")])
async def test_lifecycle_endpoints_surface_server_errors(mode: str, method: str, path: str) -> None:
    srv = server(mode)
    sb = await sandbox(srv)
    with pytest.raises(lizard.NotFoundError):
        await r(getattr(sb, method)())
    srv.last("POST", PREFIX + path)


async def test_fork_returns_new_sandboxes(mode: str) -> None:
    srv = server(mode)
    srv.route("POST", PREFIX + "/fork", status=201, json={"sandboxes": [{**SANDBOX, "sandboxId": "sbx_2"}]})
    fork = await r((await sandbox(srv)).fork())
    assert fork.sandbox_id == "sbx_2"
    srv.route("POST", PREFIX + "/fork", status=201,
              json={"sandboxes": [{**SANDBOX, "sandboxId": "sbx_3"}, {**SANDBOX, "sandboxId": "sbx_4"}]})
    forks = await r((await sandbox(srv)).fork(2))
    assert [f.sandbox_id for f in forks] == ["sbx_3", "sbx_4"]


async def test_snapshot_returns_info(mode: str) -> None:
    srv = server(mode)
    srv.route("POST", PREFIX + "/snapshots", status=201, json={
        "snapshotId": "snap-1", "sandboxId": "sbx_1", "projectId": "p", "template": "interpreter",
        "createdAt": "2026-01-01T00:00:00Z", "sizeBytes": 42})
    snap = await r((await sandbox(srv)).snapshot())
    assert isinstance(snap, lizard.SnapshotInfo) and snap.snapshot_id == "snap-1" and snap.size_bytes == 42


async def test_named_snapshots(mode: str) -> None:
    srv = server(mode)
    snap = {"snapshotId": "snap-1", "sandboxId": "sbx_1", "projectId": "p", "template": "interpreter",
            "createdAt": "2026-01-01T00:00:00Z", "sizeBytes": 42, "name": "golden"}
    srv.route("POST", PREFIX + "/snapshots", status=201, json=snap)
    srv.route("GET", "/v1/snapshots", json={"snapshots": [snap]})
    got = await r((await sandbox(srv)).snapshot(name="golden"))
    assert got.name == "golden" and srv.last("POST", PREFIX + "/snapshots").json() == {"name": "golden"}
    listed = await r(cls(mode).list_snapshots(name="golden", transport=srv.transport()))
    assert [s.name for s in listed] == ["golden"] and srv.last("GET", "/v1/snapshots").params == [("name", "golden")]
    await r(cls(mode).list_snapshots(transport=srv.transport()))
    assert srv.last("GET", "/v1/snapshots").params == []


async def test_file_metadata(mode: str) -> None:
    srv = server(mode)
    srv.route("PUT", PREFIX + "/files", json={**ENTRY, "metadata": {"author": "al"}})
    info = await r((await sandbox(srv)).files.write("a.txt", "x", metadata={"author": "al"}))
    assert info.metadata == {"author": "al"}
    assert srv.last("PUT", PREFIX + "/files").params == [("path", "a.txt"), ("metadata[author]", "al")]
    ev = lizard.FilesystemEvent.from_json({"type": "write", "name": "a.txt", "entry": {**ENTRY, "metadata": {"k": "v"}}})
    assert ev.entry is not None and ev.entry.metadata == {"k": "v"}


# Errors -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "status,code,want",
    [
        (400, "invalid_argument", lizard.InvalidArgumentError),
        (401, "unauthenticated", lizard.AuthenticationError),
        (403, "forbidden", lizard.PermissionDeniedError),
        (404, "not_found", lizard.NotFoundError),
        (409, "conflict", lizard.ConflictError),
        (410, "gone", lizard.SandboxGoneError),
        (413, "too_large", lizard.InvalidArgumentError),
        (429, "rate_limited", lizard.RateLimitError),
        (500, "internal", lizard.SandboxError),
        (503, "unavailable", lizard.SandboxError),
        (507, "disk_full", lizard.DiskFullError),
        (502, None, lizard.SandboxError),
        (418, None, lizard.LizardError),
    ],
)
async def test_error_mapping(mode: str, status: int, code: Any, want: type) -> None:
    srv = server(mode)
    body = {"code": code, "message": "told by server"} if code else None
    srv.route("GET", PREFIX, status=status, json=body, content=b"<html>proxy says no</html>")
    sb = await sandbox(srv)
    with pytest.raises(want) as info:
        await r(sb.get_info())
    err = info.value
    assert type(err) is want, f"got {type(err).__name__}, want {want.__name__}"
    assert err.status == status and err.code == code
    if code:
        assert err.message == "told by server" and str(err) == "told by server"
    else:
        assert err.message == f"HTTP {status}: <html>proxy says no</html>"


def test_hierarchy() -> None:
    assert issubclass(lizard.SandboxGoneError, lizard.NotFoundError)
    assert issubclass(lizard.DiskFullError, lizard.SandboxError)
    for name in lizard.errors.__all__:
        assert issubclass(getattr(lizard, name), lizard.LizardError)
    assert issubclass(lizard.LizardConnectionError, builtins.ConnectionError)


async def test_connection_refused(mode: str) -> None:
    srv = server(mode)
    sb = await sandbox(srv)
    srv.raise_exc = httpx.ConnectError("Connection refused")
    with pytest.raises(lizard.LizardConnectionError, match=r"cannot reach Lizard at http://127.0.0.1:8080.*LIZARD_API_URL"):
        await r(sb.get_info())
    with pytest.raises(ConnectionError):
        await r(sb.run_code("1"))


async def test_real_unreachable_server(mode: str) -> None:
    # Port 1 on loopback: nothing listens there, so the connection is refused at once.
    with pytest.raises(lizard.LizardConnectionError, match="is `lizard serve` running"):
        await r(cls(mode).create(api_url="http://127.0.0.1:1", request_timeout=5))


async def test_read_timeout(mode: str) -> None:
    srv = server(mode)
    sb = await sandbox(srv)
    srv.raise_exc = httpx.ReadTimeout("slow")
    with pytest.raises(lizard.RequestTimeoutError):
        await r(sb.get_info())


# run_code -----------------------------------------------------------------------------------------------


EVENTS = [
    {"type": "stdout", "text": "hello\n"},
    {"type": "stderr", "text": "warn\n"},
    {"type": "stdout", "text": "wor\u0085ld\n"},
    {"type": "result", "result": {"type": "display", "mime": "image/png", "data": "iVBOR"}},
    {"type": "result", "result": {"type": "result", "mime": "text/plain", "data": "np.int64(6)"},
     "executionCount": 3},
    {"type": "mystery", "text": "from a newer server"},
    {"type": "end", "executionCount": 3},
]


async def test_run_code_assembles_execution(mode: str) -> None:
    srv = server(mode)
    raw = ndjson(*EVENTS)
    # Split the stream at awkward places: mid-line and mid-UTF-8 sequence.
    srv.route("POST", PREFIX + "/execute", chunks=[raw[:7], raw[7:40], raw[40:41], raw[41:]])
    ex = await r((await sandbox(srv)).run_code("df.x.sum()"))
    assert ex.stdout == "hello\nwor\u0085ld\n"
    assert ex.stderr == "warn\n"
    assert [(x.type, x.mime, x.data) for x in ex.results] == [
        ("display", "image/png", "iVBOR"), ("result", "text/plain", "np.int64(6)")]
    assert ex.results[0].data == "iVBOR" and ex.error is None and ex.execution_count == 3


async def test_run_code_error_is_returned_not_raised(mode: str) -> None:
    srv = server(mode)
    srv.route("POST", PREFIX + "/execute", chunks=[ndjson(
        {"type": "error", "error": {"name": "ZeroDivisionError", "message": "division by zero",
                                    "traceback": "Traceback...\nZeroDivisionError: division by zero"}},
        {"type": "end", "executionCount": 1})])
    ex = await r((await sandbox(srv)).run_code("1/0"))
    assert ex.error.name == "ZeroDivisionError" and ex.error.message == "division by zero"
    assert "Traceback" in ex.error.traceback and ex.results == []


async def test_run_code_request_body_and_timeouts(mode: str) -> None:
    srv = server(mode)
    srv.route("POST", PREFIX + "/execute", chunks=[ndjson({"type": "end"})])
    sb = await sandbox(srv)
    await r(sb.run_code("x", language="bash", context=lizard.Context("ctx_1", "bash", "/tmp"), timeout_ms=5000,
                        envs={"A": "b"}))
    req = srv.last("POST", PREFIX + "/execute")
    assert req.json() == {"code": "x", "language": "bash", "contextId": "ctx_1", "timeoutMs": 5000, "envs": {"A": "b"}}
    assert req.timeout["read"] == 35.0, "the HTTP read timeout must exceed the code timeout"
    assert req.timeout["connect"] == 60.0
    await r(sb.run_code("x", context="ctx_2", timeout_ms=0))
    req = srv.last("POST", PREFIX + "/execute")
    assert req.json() == {"code": "x", "contextId": "ctx_2", "timeoutMs": 0}
    assert req.timeout["read"] is None, "timeout_ms=0 means no read timeout"
    await r(sb.run_code("x"))
    assert srv.last("POST", PREFIX + "/execute").json() == {"code": "x", "timeoutMs": 60000}


async def test_run_code_stream_without_end_raises(mode: str) -> None:
    srv = server(mode)
    srv.route("POST", PREFIX + "/execute", chunks=[ndjson({"type": "stdout", "text": "partial"})])
    with pytest.raises(lizard.SandboxError, match="without an end event"):
        await r((await sandbox(srv)).run_code("x"))


async def test_run_code_malformed_stream_raises(mode: str) -> None:
    srv = server(mode)
    srv.route("POST", PREFIX + "/execute", chunks=[b'{"type": "stdout"\n'])
    with pytest.raises(lizard.SandboxError, match="malformed"):
        await r((await sandbox(srv)).run_code("x"))


async def test_run_code_http_error(mode: str) -> None:
    srv = server(mode)
    srv.route("POST", PREFIX + "/execute", status=410, json={"code": "gone", "message": "sandbox expired"})
    with pytest.raises(lizard.SandboxGoneError, match="sandbox expired"):
        await r((await sandbox(srv)).run_code("x"))


async def test_callbacks_fire_in_order_while_streaming(mode: str) -> None:
    srv = server(mode)
    log: List[str] = []

    def later(event: dict, note: str) -> Any:
        def produce() -> bytes:
            log.append(note)
            return ndjson(event)
        return produce

    srv.route("POST", PREFIX + "/execute", chunks=[
        ndjson({"type": "stdout", "text": "a"}),
        later({"type": "stderr", "text": "b"}, "server sends b"),
        later({"type": "result", "result": {"type": "result", "mime": "text/plain", "data": "c"}}, "server sends c"),
        later({"type": "error", "error": {"name": "E", "message": "d", "traceback": ""}}, "server sends d"),
        later({"type": "stdout", "text": "e"}, "server sends e"),
        later({"type": "end"}, "server sends end"),
    ])
    sb = await sandbox(srv)
    if mode == "sync":
        await r(sb.run_code("x", on_stdout=lambda t: log.append("stdout " + t),
                            on_stderr=lambda t: log.append("stderr " + t),
                            on_result=lambda res: log.append("result " + res.data),
                            on_error=lambda e: log.append("error " + e.message)))
    else:
        async def on_stderr(t: str) -> None:
            log.append("stderr " + t)

        async def on_error(e: lizard.ExecutionError) -> None:
            log.append("error " + e.message)

        await r(sb.run_code("x", on_stdout=lambda t: log.append("stdout " + t), on_stderr=on_stderr,
                            on_result=lambda res: log.append("result " + res.data), on_error=on_error))
    assert log == ["stdout a", "server sends b", "stderr b", "server sends c", "result c", "server sends d",
                   "error d", "server sends e", "stdout e", "server sends end"]


async def test_callback_exception_propagates(mode: str) -> None:
    srv = server(mode)
    srv.route("POST", PREFIX + "/execute", chunks=[ndjson({"type": "stdout", "text": "a"}, {"type": "end"})])

    def boom(_: str) -> None:
        raise RuntimeError("from callback")

    with pytest.raises(RuntimeError, match="from callback"):
        await r((await sandbox(srv)).run_code("x", on_stdout=boom))


# Contexts -----------------------------------------------------------------------------------------------


async def test_contexts(mode: str) -> None:
    srv = server(mode)
    ctx = {"id": "ctx_1", "language": "python", "cwd": "/tmp"}
    srv.route("POST", PREFIX + "/contexts", status=201, json=ctx)
    srv.route("GET", PREFIX + "/contexts", json={"contexts": [ctx]})
    srv.route("POST", PREFIX + "/contexts/ctx_1/restart", json=ctx)
    srv.route("DELETE", PREFIX + "/contexts/ctx_1", status=204)
    sb = await sandbox(srv)
    got = await r(sb.create_context(cwd="/tmp"))
    assert got == lizard.Context("ctx_1", "python", "/tmp")
    assert srv.last("POST", PREFIX + "/contexts").json() == {"language": "python", "cwd": "/tmp"}
    assert await r(sb.list_contexts()) == [got]
    assert await r(sb.restart_context(got)) == got
    await r(sb.delete_context("ctx_1"))
    srv.last("DELETE", PREFIX + "/contexts/ctx_1")
    with pytest.raises(lizard.InvalidArgumentError):
        await r(sb.delete_context(""))


# process.exec -------------------------------------------------------------------------------------------


async def test_process_exec(mode: str) -> None:
    srv = server(mode)
    srv.route("POST", PREFIX + "/process", chunks=[ndjson(
        {"type": "stdout", "text": "out"}, {"type": "stderr", "text": "err"}, {"type": "end", "exitCode": 3})])
    sb = await sandbox(srv)
    seen: List[str] = []
    res = await r(sb.process.exec("echo hi; exit 3", cwd="/tmp", envs={"A": "1"}, timeout_ms=1000,
                                  on_stdout=seen.append, on_stderr=seen.append))
    assert (res.stdout, res.stderr, res.exit_code, res.error) == ("out", "err", 3, None)
    assert seen == ["out", "err"]
    assert srv.last("POST", PREFIX + "/process").json() == {"cmd": "echo hi; exit 3", "cwd": "/tmp",
                                                            "envs": {"A": "1"}, "timeoutMs": 1000}
    assert srv.last("POST", PREFIX + "/process").timeout["read"] == 31.0
    await r(sb.process.exec(["ls", "-l"]))
    req = srv.last("POST", PREFIX + "/process")
    assert req.json() == {"args": ["ls", "-l"]} and req.timeout["read"] is None


async def test_process_exec_start_failure(mode: str) -> None:
    srv = server(mode)
    srv.route("POST", PREFIX + "/process", chunks=[ndjson({"type": "end", "error": "timed out"})])
    res = await r((await sandbox(srv)).process.exec("sleep 10", timeout_ms=10))
    assert res.exit_code == -1 and res.error == "timed out"


# background commands --------------------------------------------------------------------------------------

PROC = {"pid": 42, "tag": "web", "cmd": "serve", "args": ["bash", "-c", "serve"], "cwd": "/home/user",
        "user": "user", "startedAt": "2026-01-02T03:04:05Z", "stdin": True, "running": True}


async def test_commands(mode: str) -> None:
    srv = server(mode)
    srv.route("POST", PREFIX + "/processes", status=201, json=PROC)
    srv.route("GET", PREFIX + "/processes", json={"processes": [
        PROC, {**PROC, "pid": 7, "running": False, "exitCode": 143, "pty": {"cols": 80, "rows": 24}}]})
    srv.route("GET", PREFIX + "/processes/42", json=PROC)
    srv.route("GET", PREFIX + "/processes/42/output", chunks=[ndjson(
        {"type": "stdout", "text": "a"}, {"type": "dropped", "dropped": 9}, {"type": "stderr", "text": "b"},
        {"type": "end", "exitCode": 3})])
    for sub in ("/stdin", "/stdin/close", "/signal"):
        srv.route("POST", PREFIX + "/processes/42" + sub, status=204)
    sb = await sandbox(srv)
    seen: List[str] = []
    h = await r(sb.commands.start("serve", cwd="/tmp", envs={"A": "1"}, stdin=True, timeout_ms=5, tag="web",
                                  user="root", on_stdout=seen.append, on_stderr=seen.append))
    assert srv.last("POST", PREFIX + "/processes").json() == {
        "cmd": "serve", "cwd": "/tmp", "envs": {"A": "1"}, "stdin": True, "timeoutMs": 5, "tag": "web", "user": "root"}
    assert (h.pid, h.tag, h.info.started_at.year) == (42, "web", 2026)
    res = await r(h.wait())
    assert (res.stdout, res.stderr, res.exit_code) == ("a", "b", 3) and seen == ["a", "b"]
    await r(h.send_stdin("hé"))
    assert srv.last("POST", PREFIX + "/processes/42/stdin").body == "hé".encode()
    await r(h.close_stdin())
    await r(h.kill())
    assert srv.last("POST", PREFIX + "/processes/42/signal").json() == {"signal": "KILL"}
    await r(sb.commands.kill(42, "TERM"))
    assert srv.last("POST", PREFIX + "/processes/42/signal").json() == {"signal": "TERM"}
    procs = await r(sb.commands.list())
    assert [(p.pid, p.running, p.exit_code, p.pty) for p in procs] == [
        (42, True, None, None), (7, False, 143, lizard.PtySize(80, 24))]
    await r(sb.commands.start(["ls", "-l"]))
    assert srv.last("POST", PREFIX + "/processes").json() == {"args": ["ls", "-l"]}
    for bad in ([], ""):
        with pytest.raises(lizard.InvalidArgumentError, match="cmd"):
            await r(sb.commands.start(bad))
    with pytest.raises(lizard.InvalidArgumentError, match="rows"):
        await r(sb.pty.create(80, 1001, on_data=print))
    with pytest.raises(lizard.InvalidArgumentError, match="signal"):
        await r(sb.commands.kill(42, ""))


async def test_commands_output_abort(mode: str) -> None:
    srv = server(mode)
    srv.route("GET", PREFIX + "/processes/42", json=PROC)
    srv.route("GET", PREFIX + "/processes/42/output", chunks=[ndjson(
        {"type": "stdout", "text": "a"}, {"type": "abort", "abort": {"status": 410, "code": "gone", "message": "killed"}})])
    h = await r((await sandbox(srv)).commands.connect(42))
    with pytest.raises(lizard.SandboxGoneError, match="killed"):
        await r(h.wait())
    assert h.stdout == "a"


def test_socket_helpers() -> None:
    from lizard import _core

    assert _core.ws_url("https://h:1/x", "/v1/p") == "wss://h:1/x/v1/p"
    assert _core.ws_url("http://h", "/v1/p") == "ws://h/v1/p"
    assert _core.ws_subprotocols("k") == ["lizard", "lizard.bearer.k"]
    assert _core.ws_close_error(1000, "") is None
    assert isinstance(_core.ws_close_error(4410, "killed"), lizard.SandboxGoneError)
    paused = _core.ws_close_error(4409, "paused")
    assert isinstance(paused, lizard.ConflictError) and paused.status == 409
    assert type(_core.ws_close_error(1011, "x")) is lizard.SandboxError
    assert _core.ws_control('{"type":"end","exitCode":3}') == {"type": "end", "exitCode": 3}
    assert _core.ws_control("nope") is None
    assert _core.ws_exit_code('{"type":"end","exitCode":3}') == 3 and _core.ws_exit_code('{"type":"x"}') is None
    assert str(_core.ws_closed_early(1000, "")) == "the terminal's connection closed before its end"
    assert isinstance(_core.ws_closed_early(4410, "killed"), lizard.SandboxGoneError)
    assert _core.ws_options("k", 5.0)["subprotocols"] == ["lizard", "lizard.bearer.k"]
    from websockets.datastructures import Headers
    from websockets.exceptions import InvalidStatus
    from websockets.http11 import Response

    refused = InvalidStatus(Response(404, "Not Found", Headers(), b'{"code":"not_found","message":"no process 9"}'))
    err = _core.ws_connect_error(refused, "http://h")
    assert isinstance(err, lizard.NotFoundError) and "no process 9" in str(err)
    assert isinstance(_core.ws_connect_error(OSError("refused"), "http://h"), lizard.LizardConnectionError)
    assert isinstance(refused, _core.WS_CONNECT_ERRORS)


# files --------------------------------------------------------------------------------------------------

ENTRY = {"name": "a.txt", "path": "/home/user/a.txt", "type": "file", "size": 3, "mode": 420,
         "modTime": "2026-01-02T03:04:05+02:00"}


async def test_files(mode: str) -> None:
    srv = server(mode)
    srv.route("GET", PREFIX + "/files", content="héllo".encode())
    srv.route("PUT", PREFIX + "/files", json=ENTRY)
    srv.route("GET", PREFIX + "/files/list", json={"entries": [ENTRY]})
    srv.route("GET", PREFIX + "/files/stat", json=ENTRY)
    srv.route("POST", PREFIX + "/files/mkdir", json={**ENTRY, "type": "dir"})
    srv.route("DELETE", PREFIX + "/files", status=204)
    sb = await sandbox(srv)
    f = sb.files
    assert await r(f.read("a.txt")) == "héllo"
    assert await r(f.read("a.txt", format="bytes")) == "héllo".encode()
    assert srv.last("GET", PREFIX + "/files").params == [("path", "a.txt")]

    for data, want in [(b"\x00\xff", b"\x00\xff"), ("text", b"text"), (io.BytesIO(b"x" * 200_000), b"x" * 200_000),
                       (io.StringIO("s" * 70_000), b"s" * 70_000)]:
        info = await r(f.write("dir/a.txt", data))
        assert info.size == 3 and info.mod_time is not None and info.mod_time.utcoffset().total_seconds() == 7200
        assert srv.last("PUT", PREFIX + "/files").body == want
    assert [e.name for e in await r(f.list("/home/user"))] == ["a.txt"]
    assert (await r(f.stat("a.txt"))).type == "file"
    assert await r(f.exists("a.txt")) is True
    assert (await r(f.make_dir("d"))).type == "dir"
    await r(f.remove("a.txt"))
    assert srv.last("DELETE", PREFIX + "/files").params == [("path", "a.txt")]
    srv.route("GET", PREFIX + "/files/stat", status=404, json={"code": "not_found", "message": "no such file"})
    assert await r(f.exists("nope")) is False
    srv.route("GET", PREFIX + "/files/stat", status=410, json={"code": "gone", "message": "ended"})
    with pytest.raises(lizard.SandboxGoneError):
        await r(f.exists("nope"))
    with pytest.raises(lizard.InvalidArgumentError):
        await r(f.read("a", format="json"))


async def test_file_upload_is_streamed(mode: str) -> None:
    # A file object must be sent in chunks (chunked transfer), not read into memory first.
    srv = server(mode)
    srv.route("PUT", PREFIX + "/files", json=ENTRY)
    sb = await sandbox(srv)
    await r(sb.files.write("big", io.BytesIO(b"y" * 100)))
    req = srv.last("PUT", PREFIX + "/files")
    assert req.headers.get("transfer-encoding") == "chunked"
    await r(sb.files.write("small", b"abc"))
    assert srv.last("PUT", PREFIX + "/files").headers.get("content-length") == "3"


async def test_files_user(mode: str) -> None:
    # Every file call names its user only when asked: the default is the sandbox user (the server's
    # default), "root" is sent as user=root, anything else is refused before any request.
    srv = server(mode)
    for method, sub in (("GET", ""), ("PUT", ""), ("DELETE", ""), ("GET", "/list"), ("GET", "/stat"),
                        ("POST", "/mkdir"), ("POST", "/rename")):
        srv.route(method, PREFIX + "/files" + sub, json={"entries": []} if sub == "/list" else ENTRY)
    sb = await sandbox(srv)
    f = sb.files
    calls = [
        (lambda **kw: f.read("/etc/x", **kw), "GET", ""),
        (lambda **kw: f.read("/etc/x", format="bytes", **kw), "GET", ""),
        (lambda **kw: f.write("/etc/x", b"x", **kw), "PUT", ""),
        (lambda **kw: f.remove("/etc/x", **kw), "DELETE", ""),
        (lambda **kw: f.list("/etc", **kw), "GET", "/list"),
        (lambda **kw: f.stat("/etc/x", **kw), "GET", "/stat"),
        (lambda **kw: f.get_info("/etc/x", **kw), "GET", "/stat"),
        (lambda **kw: f.exists("/etc/x", **kw), "GET", "/stat"),
        (lambda **kw: f.make_dir("/etc/d", **kw), "POST", "/mkdir"),
        (lambda **kw: f.rename("/etc/x", "/etc/y", **kw), "POST", "/rename"),
    ]
    for call, method, sub in calls:
        await r(call())
        params = dict(srv.last(method, PREFIX + "/files" + sub).params)
        assert "user" not in params, (method, sub, params)
        await r(call(user="root"))
        params = dict(srv.last(method, PREFIX + "/files" + sub).params)
        assert params["user"] == "root" and params["path"].startswith("/etc"), (method, sub, params)
        await r(call(user="user"))
        assert dict(srv.last(method, PREFIX + "/files" + sub).params)["user"] == "user"
        n = len(srv.requests)
        with pytest.raises(lizard.InvalidArgumentError):
            await r(call(user="mallory"))
        assert len(srv.requests) == n, "a bad user is refused before any request"
    assert dict(srv.last("POST", PREFIX + "/files/rename").params) == {"path": "/etc/x", "to": "/etc/y", "user": "user"}


def test_line_splitter() -> None:
    from lizard._core import LineSplitter
    s = LineSplitter()
    assert s.feed(b'{"a"') == []
    assert s.feed(b': 1}\n\n{"b": 2}\r\n{"c"') == [{"a": 1}, {"b": 2}]
    assert s.feed(b": 3}") == []
    assert s.close() == [{"c": 3}], "a last line without a newline still counts"
    assert s.close() == []


def test_port_url_and_volume_bodies() -> None:
    from lizard import _core

    assert _core.port_url("http://127.0.0.1:8080", "abc", 8000, None) == "http://127.0.0.1:8080/v1/sandboxes/abc/ports/8000/"
    assert _core.port_url("http://127.0.0.1:8080/", "abc", 80, "sb.example.com") == "http://80-abc.sb.example.com:8080/"
    assert _core.port_url("https://lizard.example.com", "abc", 3000, "sb.example.com") == "https://3000-abc.sb.example.com/"
    for bad in (0, 65536, "80", True):
        with pytest.raises(lizard.InvalidArgumentError):
            _core.port_url("http://x", "abc", bad, None)  # type: ignore[arg-type]
    body = _core.create_body("interpreter", None, None, None, False, None, [{"name": "d", "path": "/mnt/d"}], True)
    assert body["volumes"] == [{"name": "d", "path": "/mnt/d"}] and body["publicPorts"] is True
    assert "portsHost" not in body
    body = _core.create_body("interpreter", None, None, None, False, ports_host="localhost:${PORT}")
    assert body["portsHost"] == "localhost:${PORT}"
    assert lizard.SandboxInfo.from_json({"portsHost": "localhost:${PORT}"}).ports_host == "localhost:${PORT}"
    with pytest.raises(lizard.InvalidArgumentError):
        _core.create_body("interpreter", None, None, None, False, None, [{"name": "d"}])
    assert _core.volume_body("d", 16) == {"name": "d", "sizeMb": 16}
    with pytest.raises(lizard.InvalidArgumentError):
        _core.volume_body("d", 0)


async def test_secret_set_sends_hosts(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Secret.set takes the hosts a secret may be sent to (required) and allow_http, sends them as the
    spec's hosts and allowHttp, and SecretInfo gives them back; no hosts is refused before any request."""
    srv = FakeServer(mode)
    srv.route("PUT", "/v1/secrets/K", json={"name": "K", "hosts": ["api.openai.com", "*.example.com"], "allowHttp": True,
                                             "createdAt": "2025-01-01T00:00:00Z", "updatedAt": "2025-01-01T00:00:00Z"})
    mod, name = (lizard._sync, "_Http") if mode == "sync" else (lizard._async, "_AsyncHttp")
    real = getattr(mod, name)
    monkeypatch.setattr(mod, name, lambda url, key, timeout, _t: real(url, key, timeout, srv.transport()))
    sec: Any = lizard.Secret if mode == "sync" else lizard.AsyncSecret
    got = await r(sec.set("K", "v", hosts=["api.openai.com", "*.example.com"], allow_http=True))
    assert srv.last("PUT", "/v1/secrets/K").json() == {"value": "v", "hosts": ["api.openai.com", "*.example.com"], "allowHttp": True}
    assert got.hosts == ["api.openai.com", "*.example.com"] and got.allow_http is True
    await r(sec.set("K", "v", hosts=("api.openai.com",)))
    assert srv.last("PUT", "/v1/secrets/K").json() == {"value": "v", "hosts": ["api.openai.com"]}, "allowHttp is sent only when asked"
    sent = len(srv.requests)
    for bad in ([], "api.openai.com", [3]):
        with pytest.raises(lizard.InvalidArgumentError, match="hosts"):
            await r(sec.set("K", "v", hosts=bad))
    with pytest.raises(TypeError):
        sec.set("K", "v")  # hosts is required
    assert len(srv.requests) == sent, "a refused set sent nothing"
    old = lizard.SecretInfo.from_json({"name": "OLD", "createdAt": None, "updatedAt": None})
    assert old.hosts == [] and old.allow_http is False


def test_template_body_encodes_file_contents() -> None:
    from lizard import _core

    body = _core.template_body("t", {"pip": ["six"], "files": [{"path": "/a", "content": "hé"}, {"path": "/b", "content": b"\x00\x01"}]})
    assert body == {"name": "t", "recipe": {"pip": ["six"], "files": [{"path": "/a", "content": "aMOp"}, {"path": "/b", "content": "AAE="}]}}
    with pytest.raises(lizard.InvalidArgumentError):
        _core.template_body("t", {"files": [{"path": "/a", "content": 3}]})
    steps = _core.template_body("t", {"start": "s", "ready": "r", "steps": [{"user": "user"}, {"copy": [{"path": "/c", "content": "x"}]}]})
    assert steps == {"name": "t", "recipe": {"start": "s", "ready": "r", "steps": [{"user": "user"}, {"copy": [{"path": "/c", "content": "eA=="}]}]}}
    with pytest.raises(lizard.InvalidArgumentError, match=r"steps\[0\]\.copy\[0\]"):
        _core.template_body("t", {"steps": [{"copy": [{"path": "/a", "content": 3}]}]})


def test_template_build_outcome() -> None:
    from lizard import _core

    ok = _core.TemplateBuild(None)
    for e in [{"type": "step", "step": 1, "total": 2, "name": "x"}, {"type": "done", "cached": True, "template": {"name": "t"}}]:
        ok.feed(e)
    assert ok.finish() == {"name": "t"} and ok.cached
    bad = _core.TemplateBuild(None)
    bad.feed({"type": "error", "code": "invalid_argument", "message": "the build failed", "name": "run: x", "log": "boom"})
    with pytest.raises(lizard.TemplateBuildError) as exc:
        bad.finish()
    assert (exc.value.code, exc.value.step, exc.value.log) == ("invalid_argument", "run: x", "boom")
    with pytest.raises(lizard.SandboxError):
        _core.TemplateBuild(None).finish()


def test_requests_are_written_once_in_calls() -> None:
    """Every request of the API is spelled in _calls.py alone: the sync and async clients send its Calls and
    name no path and make no request of their own, so a feature is written once for both."""
    from pathlib import Path

    src = Path(lizard.__file__).parent
    for name in ("_sync.py", "_async.py", "_commands.py", "_async_commands.py"):
        text = (src / name).read_text()
        assert not re.search(r"""["']/v1/""", text), f"{name} names an API path; put the request in _calls.py"
        assert "http.request(" not in text, f"{name} makes a request of its own; send a _calls.Call"


def test_version() -> None:
    """lizard.__version__ is Lizard's version (internal/version/VERSION) and the one the SDK sends as its User-Agent."""
    import pathlib

    from lizard import _core

    root = pathlib.Path(__file__).resolve().parents[3]
    assert lizard.__version__ == (root / "internal/version/VERSION").read_text().strip()
    assert re.fullmatch(r"\d+\.\d+\.\d+", lizard.__version__)
    assert _core.USER_AGENT == f"lizard-sdk-python/{lizard.__version__}"


def test_template_body_from_an_image_with_registry_credentials() -> None:
    from lizard import _core

    body = _core.template_body("t", {"from": "registry.example.com/app:1"}, {"username": "me", "password": "pw"})
    assert body == {"name": "t", "recipe": {"from": "registry.example.com/app:1"},
                    "registry": {"username": "me", "password": "pw"}}
    assert "registry" not in _core.template_body("t", {"from": "python:3.12"})
    with pytest.raises(lizard.InvalidArgumentError):
        _core.template_body("t", {"from": "x"}, {"user": "me"})
    # The password named by a secret of the project (docs/secrets.md), not both.
    body = _core.template_body("t", {"from": "x"}, {"username": "me", "passwordSecret": "REG"})
    assert body["registry"] == {"username": "me", "passwordSecret": "REG"}
    with pytest.raises(lizard.InvalidArgumentError):
        _core.template_body("t", {"from": "x"}, {"username": "me", "password": "pw", "passwordSecret": "REG"})


def test_template_body_skip_cache() -> None:
    from lizard import _core

    assert _core.template_body("t", {"base": "my-base"}, None, True) == {"name": "t", "recipe": {"base": "my-base"}, "skipCache": True}
    assert "skipCache" not in _core.template_body("t", {})


def test_template_info_digest() -> None:
    info = lizard.TemplateInfo.from_json({"name": "t", "base": "", "key": "k", "digest": "sha256:" + "a" * 64, "recipe": {"from": "x"}})
    assert info.digest == "sha256:" + "a" * 64
    assert lizard.TemplateInfo.from_json({"name": "t"}).digest == ""
