"""Starts a real `lizard serve` for the end-to-end tests of the SDK.

The session fixture picks a free loopback port and a temporary data directory, creates the project
proj_123 with `bin/lizard admin create-project`, starts `bin/lizard serve`, waits for /v1/health and
exports LIZARD_API_URL and LIZARD_API_KEY. At the end it kills every sandbox of the project through the
API, then stops the server with SIGTERM. Without root or bin/lizard the tests are skipped, or fail when
LIZARD_TEST_STRICT=1 (as `make test` sets).

To run them against a server you started yourself, set LIZARD_E2E_API_URL and LIZARD_E2E_API_KEY (a key
of project proj_123); the fixture then starts and stops nothing, but still kills the project's sandboxes.
LIZARD_E2E_KEEP_TEMPLATES=1 keeps the desktop template the desktop tests build (minutes when the cache lacks it):
`make test` sets it, so that the TypeScript and console suites after this one find the build in the template
cache (its key is the project's ID, the recipe and the base's build: the three suites use proj_123), and the
console suite, the last, deletes it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List

import httpx
import pytest

REPO = Path(__file__).resolve().parents[4]
# bin/ of the repository (make build), or LIZARD_TEST_BIN_DIR, as in the TypeScript SDK's e2e harness.
BIN_DIR = Path(os.environ.get("LIZARD_TEST_BIN_DIR") or REPO / "bin")
BIN = BIN_DIR / "lizard"
PROJECT = "proj_123"
# Our own address pool, apart from the Go end-to-end tests' (169.254.200.0/22 and up) and the TypeScript
# SDK's (169.254.244.0/22), so that servers
# started side by side never hand out the same sandbox address.
ADDRESS_POOL = "169.254.236.0/22"
HEALTH_TIMEOUT = 600  # seconds; a first start may build the template


@dataclass
class Server:
    url: str
    api_key: str
    data_dir: Path
    log_path: Path
    proc: subprocess.Popen  # type: ignore[type-arg]

    def logs(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-8000:]
        except OSError:
            return ""


def _missing(reason: str) -> None:
    if os.environ.get("LIZARD_TEST_STRICT") == "1":
        pytest.fail(f"LIZARD_TEST_STRICT=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve_args(port: int, data_dir: Path) -> List[str]:
    args = [str(BIN), "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", str(data_dir)]
    if os.environ.get("LIZARD_CACHE_DIR"):
        args += ["--cache-dir", os.environ["LIZARD_CACHE_DIR"]]
    # An address pool of our own, so servers of other suites running at the same time never hand out
    # the same addresses; and no internet egress: tests never send a packet off this machine.
    args += ["--address-pool", os.environ.get("LIZARD_TEST_ADDRESS_POOL") or ADDRESS_POOL, "--egress=none"]
    # One server serves the whole session, whose template builds (recipes, E2B's Template SDK, the
    # desktop) are more than the default 20 an hour; the bound itself is tested in Go (e2e).
    args += ["--template-builds-per-hour", "1000"]
    return args


def _server_env() -> dict:  # type: ignore[type-arg]
    env = dict(os.environ)
    # The server finds runsc in bin/ (make build); on a machine that has only the shared build, say so.
    if "LIZARD_RUNSC" not in env and not (REPO / "bin" / "runsc").exists() and Path("/tmp/runsc-bin/runsc").exists():
        env["LIZARD_RUNSC"] = "/tmp/runsc-bin/runsc"
    return env


def _kill_project_sandboxes(url: str, key: str) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
            resp = client.get("/v1/sandboxes")
            resp.raise_for_status()
            for sb in resp.json().get("sandboxes") or []:
                if sb.get("state") in ("starting", "running", "paused"):
                    client.delete(f"/v1/sandboxes/{sb['sandboxId']}")
    except httpx.HTTPError as exc:
        print(f"e2e teardown: killing sandboxes: {exc}")


@pytest.fixture(scope="session")
def lizard_server() -> Iterator[Server]:
    """A running `lizard serve` with project proj_123; LIZARD_API_URL and LIZARD_API_KEY point at it."""
    if os.environ.get("LIZARD_E2E_API_URL") and os.environ.get("LIZARD_E2E_API_KEY"):
        yield from _external_server(os.environ["LIZARD_E2E_API_URL"], os.environ["LIZARD_E2E_API_KEY"])
        return
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        _missing("the end-to-end tests need root (lizard serve runs gVisor sandboxes)")
    if not os.access(BIN, os.X_OK):
        _missing(f"no {BIN} (run `make build`, or set LIZARD_TEST_BIN_DIR)")

    data_dir = Path(tempfile.mkdtemp(prefix="lizard-sdk-e2e-"))
    log_path = data_dir / "serve.log"
    proc = None
    try:
        out = subprocess.run(
            [str(BIN), "admin", "create-project", "--data-dir", str(data_dir), "--id", PROJECT, "--json"],
            capture_output=True, text=True, timeout=120,
        )
        if out.returncode != 0:
            pytest.fail(f"admin create-project failed ({out.returncode}): {out.stderr}", pytrace=False)
        api_key = json.loads(out.stdout)["apiKey"]

        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        log = open(log_path, "wb")
        proc = subprocess.Popen(_serve_args(port, data_dir), stdout=log, stderr=subprocess.STDOUT,
                                env=_server_env(), start_new_session=True)
        log.close()
        server = Server(url, api_key, data_dir, log_path, proc)
        deadline = time.monotonic() + HEALTH_TIMEOUT
        while True:
            if proc.poll() is not None:
                pytest.fail(f"lizard serve exited early ({proc.returncode}):\n{server.logs()}", pytrace=False)
            try:
                if httpx.get(url + "/v1/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"lizard serve did not become healthy:\n{server.logs()}", pytrace=False)
            time.sleep(0.1)

        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("LIZARD_API_URL", url)
            mp.setenv("LIZARD_API_KEY", api_key)
            try:
                yield server
            finally:
                _kill_project_sandboxes(url, api_key)
    finally:
        if proc is not None and proc.poll() is not None:
            # The server ended before the suite did: its log is all there is to say why.
            print(f"lizard serve exited during the suite ({proc.returncode}); its log's tail:\n{Server('', '', data_dir, log_path, proc).logs()}")
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(data_dir, ignore_errors=True)


def _external_server(url: str, key: str) -> Iterator[Server]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LIZARD_API_URL", url)
        mp.setenv("LIZARD_API_KEY", key)
        try:
            yield Server(url, key, Path(), Path("/nonexistent"), None)  # type: ignore[arg-type]
        finally:
            _kill_project_sandboxes(url, key)


@pytest.fixture(autouse=True)
def _server(lizard_server: Server) -> Server:
    """Every end-to-end test needs the server."""
    return lizard_server


def pytest_collection_modifyitems(items: List[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)
    # The modules of the desktop tests run last, whole: their template is built once for the session and
    # deleted at its end (desktop_template), and no other test may find it among the project's templates.
    desktop = {item.module for item in items if "desktop_template" in getattr(item, "fixturenames", ())}
    items.sort(key=lambda item: getattr(item, "module", None) in desktop)


DESKTOP_RECIPE = REPO / "templates" / "desktop" / "recipe.yaml"
DESKTOP_BUILD_TIMEOUT = 1800  # seconds: a first build fetches ~260 MB of Debian packages and installs them


@pytest.fixture(scope="session")
def desktop_template(lizard_server: Server) -> Iterator[None]:
    """The project's `desktop` template, built as docs/desktop.md says (or found in the cache) once for
    the modules that use it (test_desktop.py, test_e2b_desktop.py: they run last), and deleted at the
    session's end unless LIZARD_E2E_KEEP_TEMPLATES=1."""
    env = dict(os.environ, LIZARD_API_URL=lizard_server.url, LIZARD_API_KEY=lizard_server.api_key)
    begin = time.monotonic()
    out = subprocess.run([str(BIN), "template", "build", "--quiet", "-f", str(DESKTOP_RECIPE)],
                         capture_output=True, text=True, timeout=DESKTOP_BUILD_TIMEOUT, env=env)
    assert out.returncode == 0, f"building the desktop template:\n{out.stdout}\n{out.stderr}"
    print(f"desktop template: {time.monotonic() - begin:.1f} s\n{out.stdout}")
    yield
    if os.environ.get("LIZARD_E2E_KEEP_TEMPLATES") != "1":  # make test: for the suites after this one
        # Under load 40 the delete took over a minute (a 60 s bound timed out, 2026-12-05, the 5 tests passed).
        subprocess.run([str(BIN), "template", "delete", "desktop"], capture_output=True, text=True, timeout=600, env=env)
