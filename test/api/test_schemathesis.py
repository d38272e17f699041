"""schemathesis against a real `lizard serve`, with the server's own api/openapi.yaml.

The test starts bin/lizard serve with a data directory, a project and a key of its own, its own
address pool (169.254.104.0/22) and no egress, makes the sandboxes the sandbox-scoped operations
are pointed at (schemathesis.toml), and runs every schemathesis check with a bounded number of
examples per operation. Any 5xx, any response the spec does not describe and any refused valid or
accepted invalid request fails it. At the end every sandbox of the project is killed through the
API, the server is stopped, and nothing of its runtime may be left under DATA/gvisor.

`make test-api` runs it (`make test` does too). LIZARD_TEST_ST_EXAMPLES sets the examples per
operation (default 6), LIZARD_TEST_ST_SEED the seed (default fixed, so runs are repeatable).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, Iterator

import httpx
import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
BIN = Path(os.environ.get("LIZARD_TEST_BIN_DIR") or REPO / "bin") / "lizard"
SPEC = REPO / "api" / "openapi.yaml"
PROJECT = "proj_st"
ADDRESS_POOL = os.environ.get("LIZARD_TEST_ADDRESS_POOL") or "169.254.104.0/22"
HEALTH_TIMEOUT = 600  # seconds; a first start may build the template
# Sandboxes the test makes end on their own after this, should the teardown itself fail.
SANDBOX_TIMEOUT_MS = 20 * 60 * 1000


def _missing(reason: str) -> None:
    if os.environ.get("LIZARD_TEST_STRICT") == "1":
        pytest.fail(f"LIZARD_TEST_STRICT=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, url: str, key: str, data_dir: Path, log_path: Path) -> None:
        self.url, self.key, self.data_dir, self.log_path = url, key, data_dir, log_path

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.key}"}, timeout=120)

    def logs(self) -> str:
        """The server log's errors and warnings, then its tail."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        bad = [line for line in text.splitlines() if "level=ERROR" in line or "level=WARN" in line]
        return "\n".join(bad[-60:]) + "\n...\n" + text[-6000:]


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    if os.geteuid() != 0:
        _missing("the schemathesis suite needs root (lizard serve runs gVisor sandboxes)")
    if not os.access(BIN, os.X_OK):
        _missing(f"no {BIN} (run `make build`)")
    data_dir = Path(tempfile.mkdtemp(prefix="lizard-st-"))
    log_path = data_dir / "serve.log"
    proc = None
    try:
        out = subprocess.run([str(BIN), "admin", "create-project", "--data-dir", str(data_dir), "--id", PROJECT, "--json"],
                             capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            pytest.fail(f"admin create-project failed ({out.returncode}): {out.stderr}", pytrace=False)
        key = json.loads(out.stdout)["apiKey"]
        port = _free_port()
        args = [str(BIN), "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", str(data_dir),
                "--address-pool", ADDRESS_POOL, "--egress=none",
                # Few sandboxes at once on a small machine; creates past this are 429s, as specified.
                "--max-sandboxes-per-project", "10",
                # One template build that is not found in the cache, then 429s, as specified: each
                # build copies the base template and boots a build sandbox.
                "--template-builds-per-hour", "1",
                # A recipe's from names a registry the server would reach: none here.
                "--registry-allow", "127.0.0.1:9"]
        if os.environ.get("LIZARD_CACHE_DIR"):
            args += ["--cache-dir", os.environ["LIZARD_CACHE_DIR"]]
        with open(log_path, "wb") as log:
            # npm steps' packages are fetched on the host: from nowhere here (a refused port, no retry).
            env = dict(os.environ, npm_config_registry="http://127.0.0.1:9/", npm_config_fetch_retries="0")
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        srv = Server(f"http://127.0.0.1:{port}", key, data_dir, log_path)
        deadline = time.monotonic() + HEALTH_TIMEOUT
        while True:
            if proc.poll() is not None:
                pytest.fail(f"lizard serve exited early ({proc.returncode}):\n{srv.logs()}", pytrace=False)
            try:
                if httpx.get(srv.url + "/v1/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"lizard serve did not become healthy:\n{srv.logs()}", pytrace=False)
            time.sleep(0.2)
        try:
            yield srv
        finally:
            _kill_all(srv)
            _delete_templates(srv)
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        left = _runtime_leftovers(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)
        if left:
            pytest.fail(f"the server left runtime sandboxes behind under DATA/gvisor: {left}", pytrace=False)


def _kill_all(srv: Server) -> None:
    """Kill every live sandbox of the project (what the suite and schemathesis made)."""
    with srv.client() as c:
        for _ in range(3):
            live = [sb["sandboxId"] for sb in c.get("/v1/sandboxes").json()["sandboxes"]]
            if not live:
                return
            for sid in live:
                r = c.delete(f"/v1/sandboxes/{sid}")
                if r.status_code not in (204, 404):
                    print(f"killing {sid}: {r.status_code} {r.text}", file=sys.stderr)
    raise AssertionError(f"sandboxes still live after killing them: {live}")


def _delete_templates(srv: Server) -> None:
    """Delete the templates schemathesis built: their builds live in the shared template cache."""
    with srv.client() as c:
        for t in c.get("/v1/templates").json()["templates"]:
            r = c.delete(f"/v1/templates/{t['name']}")
            assert r.status_code in (204, 404), f"deleting template {t['name']}: {r.status_code} {r.text}"


def _runtime_leftovers(data_dir: Path) -> list:
    """Runtime sandboxes (DATA/gvisor/sandboxes/ID) and processes of the server's still there."""
    left = []
    boxes = data_dir / "gvisor" / "sandboxes"
    if boxes.is_dir():
        left += sorted(p.name for p in boxes.iterdir())
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(data_dir) in cmdline:
            left.append(f"pid {proc.name}: {cmdline[:200]}")
    return left


def _make_targets(srv: Server) -> Dict[str, str]:
    """The sandboxes and the snapshot schemathesis.toml points operations at."""
    env: Dict[str, str] = {}
    with srv.client() as c:
        def create(**extra: object) -> str:
            r = c.post("/v1/sandboxes", json={"timeoutMs": SANDBOX_TIMEOUT_MS, **extra})
            assert r.status_code == 201, f"create: {r.status_code} {r.text}"
            return r.json()["sandboxId"]

        for name in ("WORK", "KILL", "TIMEOUT", "PAUSE", "SNAP"):
            env[f"LZ_{name}_ID"] = create()
        env["LZ_NET_ID"] = create(network={"default": "deny", "allow": ["pypi.org"]})
        r = c.post(f"/v1/sandboxes/{env['LZ_SNAP_ID']}/snapshots")
        assert r.status_code == 201, f"snapshot: {r.status_code} {r.text}"
        env["LZ_SNAPSHOT_ID"] = r.json()["snapshotId"]
    return env


def test_api_matches_spec(server: Server, tmp_path: Path) -> None:
    env = dict(os.environ)
    env.update(_make_targets(server))
    env["SCHEMATHESIS_HOOKS"] = "st_hooks"
    env["PYTHONPATH"] = str(HERE) + os.pathsep + env.get("PYTHONPATH", "")
    st = Path(sys.executable).with_name("schemathesis")
    cmd = [str(st), "--config-file", str(HERE / "schemathesis.toml"), "run", str(SPEC),
           "--url", server.url, "-H", f"Authorization: Bearer {server.key}",
           "--checks", "all", "--phases", "examples,coverage,fuzzing,stateful",
           "--max-examples", os.environ.get("LIZARD_TEST_ST_EXAMPLES", "6"),
           "--seed", os.environ.get("LIZARD_TEST_ST_SEED", "20261130"),
           # One worker: this suite holds the API to its spec; races between calls are the
           # chaos suite's (a create from a snapshot racing its delete is a known 500).
           "--workers", "1", "--no-color",
           "--report", "junit", "--report-dir", str(tmp_path)]
    started = time.monotonic()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    took = time.monotonic() - started
    report = out.stdout + out.stderr
    print(report[-20000:])
    print(f"schemathesis took {took:.0f} s")
    assert out.returncode == 0, f"schemathesis found failures (exit {out.returncode}):\n{report[-20000:]}\n\nserver log:\n{server.logs()}"
