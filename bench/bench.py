"""Lizard's benchmark harness (`make bench`, issue 6).

Measures, in ONE run on this machine, Lizard through the Python SDK beside its baselines (raw `runsc run`,
raw `runsc checkpoint`/`restore`, a direct `jupyter_client` round trip to a local ipykernel), prints a
markdown table of p50/p95 and the ratios to the baselines, and writes the JSON under bench/results/.
Issue 25's sections come last: a burst of concurrent creates without and with a warm pool, the CPU
seconds per create→run→kill cycle, and density (idle sandboxes held in steps until memory runs low or
one stops answering within 1 s).

The machine is shared and noisy: read the ratios (same run, same load), not the milliseconds alone.
docs/performance.md explains every figure. Run as root from the repository root:

    .cache/testvenv/bin/python bench/bench.py [--scale 50] [--sustain 20s] [--warm-pool N]
    .cache/testvenv/bin/python bench/bench.py --only density,burst,sustain --density-max 50 --burst 10
    .cache/testvenv/bin/python bench/bench.py --only e2b --runs 5 --code-runs 50
    .cache/testvenv/bin/python bench/bench.py --only images --image-runs 3 --runs 10
    .cache/testvenv/bin/python bench/bench.py --only desktop --desktop-runs 5 --desktop-shots 30
    .cache/testvenv/bin/python bench/bench.py --only burst,sustain --baseline-bin-dir /tmp/main-bin --ab-rounds 3

Everything the bench makes (the server, its sandboxes, raw runsc containers, temp dirs) is removed at the
end, also when it fails or is interrupted (SIGINT, SIGTERM, SIGHUP).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

REPO = Path(__file__).resolve().parents[1]
# Apart from the Go end-to-end tests (169.254.200.0/22 and up) and the SDK e2e tests (169.254.236.0/22,
# 169.254.244.0/22), so the bench can run beside them.
ADDRESS_POOL = "169.254.160.0/20"
PY_IN_TEMPLATE = "/opt/lizard/venv/bin/python"

# Code the figures run, the same for Lizard and the direct kernel.
DATAFRAME_SETUP = "import pandas as pd"
DATAFRAME_CODE = 'pd.DataFrame({"x": range(20), "y": [i * i for i in range(20)]})'
CHART_SETUP = "%matplotlib inline\nimport matplotlib.pyplot as plt"
# Runs in a sandbox: round trips to a kernel started there, the kernel-side floor of runCode.
IN_SANDBOX_KERNEL = """
import json, sys, time
from jupyter_client.manager import start_new_kernel
km, kc = start_new_kernel(kernel_name="python3")
try:
    out = []
    for i in range(int(sys.argv[1]) + 10):
        t0 = time.perf_counter()
        kc.execute_interactive("1+1", output_hook=lambda m: None, timeout=60)
        if i >= 10:
            out.append((time.perf_counter() - t0) * 1000)
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=True)
json.dumps(out)
"""
CHART_CODE = "plt.figure(figsize=(4, 3))\nplt.plot([1, 3, 2, 4])\nplt.show()"
# Runs in a sandbox: the agent's own kernel (internal/pykernel/kernel.py) started there and driven over its
# pipes the way the agent drives it (docs/kernel-protocol.md), from Python: the kernel round trip inside the
# sandbox, agent → kernel → agent, without the HTTP path. BOOT is proc.go's bootstrap.
PYKERNEL_SOURCE = REPO / "internal" / "pykernel" / "kernel.py"
IN_SANDBOX_PYKERNEL = r"""
import fcntl, json, os, sys, time
BOOT = ("import os\nb=b''\nwhile len(b)<4 or len(b)<4+int.from_bytes(b[:4],'big'):\n"
        " c=os.read(3,1<<16)\n if not c: raise SystemExit(1)\n b+=c\nexec(compile(b[4:],'<lizard-kernel>','exec'))\n")
r1, w1 = os.pipe(); r2, w2 = os.pipe()
r1, w2 = fcntl.fcntl(r1, fcntl.F_DUPFD_CLOEXEC, 10), fcntl.fcntl(w2, fcntl.F_DUPFD_CLOEXEC, 10)
env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
pid = os.posix_spawn(sys.executable, [sys.executable, "-c", BOOT], env, file_actions=[
    (os.POSIX_SPAWN_DUP2, r1, 3), (os.POSIX_SPAWN_DUP2, w2, 4),
    (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0), (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)])
os.close(r1); os.close(w2)
def send(b):
    os.write(w1, len(b).to_bytes(4, "big") + b)
buf = bytearray()
def until(t):
    global buf
    while True:
        while len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[:4], "big"):
            n = int.from_bytes(buf[:4], "big"); f = bytes(buf[4:4 + n]); del buf[:4 + n]
            if f[:1] == b"m" and json.loads(f[5:])["t"] == t:
                return
        c = os.read(r2, 1 << 16)
        if not c:
            raise RuntimeError("kernel exited")
        buf += c
try:
    send(SOURCE)
    until("ready")
    out = []
    for i in range(RUNS + 10):
        t0 = time.perf_counter()
        send(json.dumps({"op": "execute", "id": i + 1, "code": "1+1"}).encode())
        until("done")
        if i >= 10:
            out.append((time.perf_counter() - t0) * 1000)
finally:
    os.close(w1); os.kill(pid, 9); os.waitpid(pid, 0)
json.dumps(out)
"""


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- cleanup that survives failures and signals ------------------------------------------------------


class Interrupted(BaseException):
    """A signal asked the bench to stop; finally blocks and the cleanup stack still run."""


class Cleanup:
    """A stack of undo actions, run once in reverse order at the end whatever happened."""

    def __init__(self) -> None:
        self._stack: List[tuple] = []
        self._lock = threading.Lock()

    def push(self, what: str, fn: Callable[[], None]) -> Callable[[], None]:
        entry = (what, fn)
        with self._lock:
            self._stack.append(entry)

        def done() -> None:  # run it now, and not again at the end
            with self._lock:
                if entry in self._stack:
                    self._stack.remove(entry)
            fn()

        return done

    def run(self) -> None:
        # A second Ctrl-C must not cut the cleanup short and leave sandboxes behind.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        while True:
            with self._lock:
                if not self._stack:
                    return
                what, fn = self._stack.pop()
            try:
                fn()
            except Exception as exc:  # keep cleaning the rest
                log(f"cleanup: {what}: {exc!r}")


CLEANUP = Cleanup()


def _on_signal(signum: int, _frame: Any) -> None:
    raise Interrupted(f"signal {signal.Signals(signum).name}")


# --- figures -------------------------------------------------------------------------------------------


def pct(samples: List[float], p: float) -> float:
    """The nearest-rank percentile p (0..100) of samples."""
    s = sorted(samples)
    if not s:
        return float("nan")
    k = max(0, min(len(s) - 1, -(-len(s) * p // 100) - 1))
    return s[int(k)]


@dataclass
class Figure:
    name: str
    samples_ms: List[float] = field(default_factory=list)
    baseline: str = ""  # the name of the figure this one is compared with
    unit: str = "ms"
    note: str = ""  # "not available", or what the figure is
    value: Optional[float] = None  # a single figure (scale results) instead of samples

    def to_json(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"name": self.name, "unit": self.unit}
        if self.baseline:
            d["baseline"] = self.baseline
        if self.note:
            d["note"] = self.note
        if self.value is not None:
            d["value"] = round(self.value, 3)
        if self.samples_ms:
            d.update(n=len(self.samples_ms), p50=round(self.p50, 3), p95=round(self.p95, 3),
                     samples=[round(x, 3) for x in self.samples_ms])
        return d

    @property
    def p50(self) -> float:
        return pct(self.samples_ms, 50)

    @property
    def p95(self) -> float:
        return pct(self.samples_ms, 95)


class Results:
    def __init__(self) -> None:
        self.figures: List[Figure] = []
        self.density: List[Dict[str, Any]] = []  # one row per step of the density section

    def add(self, fig: Figure) -> Figure:
        self.figures.append(fig)
        if fig.samples_ms:
            log(f"{fig.name}: n={len(fig.samples_ms)} p50={fig.p50:.1f} ms p95={fig.p95:.1f} ms")
        elif fig.value is not None:
            log(f"{fig.name}: {fig.value:.2f} {fig.unit}")
        else:
            log(f"{fig.name}: {fig.note}")
        return fig

    def insert(self, index: int, fig: Figure) -> Figure:
        """add, at a place in the table (a baseline measured later, beside what it is the baseline of)."""
        self.add(fig)
        self.figures.insert(index, self.figures.pop())
        return fig

    def get(self, name: str) -> Optional[Figure]:
        return next((f for f in self.figures if f.name == name), None)

    def table(self) -> str:
        rows = ["| figure | n | p50 | p95 | compared with | p50 ratio (difference) | note |",
                "| --- | ---: | ---: | ---: | --- | ---: | --- |"]
        for f in self.figures:
            if f.samples_ms:
                n, p50, p95 = str(len(f.samples_ms)), f"{f.p50:.1f} {f.unit}", f"{f.p95:.1f} {f.unit}"
            elif f.value is not None:
                n, p50, p95 = "1", f"{f.value:.2f} {f.unit}", ""
            else:
                n, p50, p95 = "0", f.note or "not available", ""
            base, ratio = "", ""
            b = self.get(f.baseline) if f.baseline else None
            if b is not None and b.samples_ms and f.samples_ms and b.p50 > 0:
                base = b.name
                ratio = f"{f.p50 / b.p50:.2f}× ({f.p50 - b.p50:+.1f} ms)"
            elif b is not None and b.value and f.value is not None:
                base = b.name
                ratio = f"{f.value / b.value:.2f}× ({f.value - b.value:+.1f} {f.unit})"
            elif f.baseline:
                base = f.baseline
            note = "" if p50 == f.note else f.note
            rows.append(f"| {f.name} | {n} | {p50} | {p95} | {base} | {ratio} | {note} |")
        return "\n".join(rows)

    def density_table(self) -> str:
        """The density section's steps, one row each (empty when it did not run)."""
        if not self.density:
            return ""
        rows = ["| idle sandboxes held | started in | creates/s | PSS each (Sentry + gofer) | MemAvailable drop each | MemAvailable left "
                "| idle CPU each | host tasks each | runCode(\"1+1\") p50 / max over all held | answered within 1 s | load average | stopped because |",
                "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
        for d in self.density:
            rows.append(f"| {d['held']}{d.get('tag', '')} | {d['startS']:.1f} s | {d['createsPerS']:.2f} | {d['pssMiB']:.1f} ({d['pssRunscMiB']:.1f}) MiB "
                        f"| {d['dropMiB']:.1f} MiB | {d['availGiB']:.1f} GiB | {d['idleCpuMsPerS']:.2f} ms/s | {d.get('tasksEach', 0):.1f} "
                        f"| {d['probeP50Ms']:.1f} / {d['probeMaxMs']:.0f} ms "
                        f"| {d['answered']}/{d['held']} | {d['load']} | {d.get('stop', '')} |")
        return "\n".join(rows)


def timed(fn: Callable[[], Any]) -> tuple:
    t0 = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t0) * 1000, out


# --- raw runsc baselines -------------------------------------------------------------------------------


def oci_spec(rootfs: str, args: List[str]) -> Dict[str, Any]:
    """A bundle like Lizard's (internal/sandbox/gvisor/spec.go) minus its network namespace and cgroup."""
    caps = ["CAP_AUDIT_WRITE", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
            "CAP_MKNOD", "CAP_NET_BIND_SERVICE", "CAP_NET_RAW", "CAP_SETFCAP", "CAP_SETGID", "CAP_SETPCAP",
            "CAP_SETUID", "CAP_SYS_CHROOT"]
    return {
        "ociVersion": "1.0.2",
        "process": {
            "user": {"uid": 0, "gid": 0}, "args": args, "cwd": "/",
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"],
            "capabilities": {"bounding": caps, "effective": caps, "permitted": caps},
        },
        "root": {"path": rootfs, "readonly": False},
        "hostname": "lizard",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
             "options": ["nosuid", "noexec", "nodev", "mode=1777"]},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777"]},
        ],
        "linux": {"namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount", "network")]},
    }


class RawRunsc:
    """Raw runsc containers in a temp directory, with the platform and overlay flags Lizard uses and
    --network=none (no Lizard network namespace)."""

    def __init__(self, runsc: str, rootfs: str) -> None:
        self.runsc, self.rootfs = runsc, rootfs
        self.dir = Path(tempfile.mkdtemp(prefix="lizard-bench-raw-"))
        self.state = self.dir / "state"
        self.state.mkdir()
        self.live: List[str] = []
        CLEANUP.push(f"removing {self.dir}", self.remove_dir)
        CLEANUP.push("deleting raw runsc containers", self.delete_all)
        self.n = 0

    def bundle(self, args: List[str]) -> Path:
        self.n += 1
        b = self.dir / f"bundle-{self.n}"
        (b / "overlay").mkdir(parents=True)
        (b / "config.json").write_text(json.dumps(oci_spec(self.rootfs, args)))
        return b

    def cmd(self, bundle: Path, *args: str) -> List[str]:
        # --gofer-network-namespace=new as Lizard: the default bind-mounts a shared empty namespace into
        # the state directory, which then cannot be removed.
        return [self.runsc, "--root", str(self.state), "--platform=systrap", "--network=none",
                "--gofer-network-namespace=new", f"--overlay2=root:dir={bundle / 'overlay'}", *args]

    def run(self, argv: List[str], detach: bool = False, **kw: Any) -> subprocess.CompletedProcess:
        if detach:
            # A detached sandbox inherits stdout and stderr and would keep pipes open forever: a file.
            with open(self.dir / "console.log", "a+") as f:
                off = f.tell()
                p = subprocess.run(argv, stdout=f, stderr=f, stdin=subprocess.DEVNULL, start_new_session=True, **kw)
                f.seek(off)
                err = f.read()
        else:
            p = subprocess.run(argv, capture_output=True, text=True, start_new_session=True, **kw)
            err = p.stderr
        if p.returncode != 0:
            i = next(k for k, x in enumerate(argv) if not x.startswith("-") and k > 0 and argv[k - 1] != "--root")
            raise RuntimeError(f"runsc {argv[i]}: exit {p.returncode}: {err.strip()[-1500:]}")
        return p

    def delete(self, cid: str) -> None:
        subprocess.run([self.runsc, "--root", str(self.state), "delete", "--force", cid],
                       capture_output=True, timeout=60, start_new_session=True)
        if cid in self.live:
            self.live.remove(cid)

    def remove_dir(self) -> None:
        # Should runsc have bind-mounted a namespace into its state directory, unmount it (ours only).
        for ns in self.state.glob("*netns*"):
            subprocess.run(["umount", str(ns)], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)

    def delete_all(self) -> None:
        for cid in list(self.live):
            self.delete(cid)

    def cid(self) -> str:
        return f"lizard-bench-{os.getpid()}-{self.n}-{len(self.live)}"

    def run_true(self, runs: int) -> List[float]:
        """`runsc run` of /bin/true, start to exit."""
        b = self.bundle(["/bin/true"])
        out = []
        for i in range(runs):
            cid = f"lizard-bench-{os.getpid()}-true-{i}"
            self.live.append(cid)
            ms, _ = timed(lambda: self.run(self.cmd(b, "run", "--bundle", str(b), cid), timeout=120))
            out.append(ms)
            self.delete(cid)
        return out

    def run_kernel_import(self, runs: int) -> List[float]:
        """`runsc run` of the template's python importing ipykernel's kernel app: the floor of a kernel
        start in a sandbox that boots instead of restoring."""
        b = self.bundle([PY_IN_TEMPLATE, "-c", "import ipykernel.kernelapp"])
        out = []
        for i in range(runs):
            cid = f"lizard-bench-{os.getpid()}-ipk-{i}"
            self.live.append(cid)
            ms, _ = timed(lambda: self.run(self.cmd(b, "run", "--bundle", str(b), cid), timeout=120))
            out.append(ms)
            self.delete(cid)
        return out

    def checkpoint_restore(self, runs: int) -> tuple:
        """Boot python with numpy, pandas and matplotlib imported, then `runsc checkpoint` it and
        `runsc create` + `runsc restore --detach` it (as Lizard's runtime restores), runs times."""
        code = ("import numpy, pandas, matplotlib\nmatplotlib.use('agg')\nimport matplotlib.pyplot\n"
                "open('/tmp/ready', 'w').close()\nimport time\nwhile True: time.sleep(3600)\n")
        b = self.bundle([PY_IN_TEMPLATE, "-c", code])
        cid = f"lizard-bench-{os.getpid()}-py-0"
        self.live.append(cid)
        self.run(self.cmd(b, "run", "--detach", "--bundle", str(b), cid), detach=True, timeout=120)
        deadline = time.monotonic() + 120
        while True:  # ready when the file exists inside the sandbox
            p = subprocess.run(self.cmd(b, "exec", cid, "/bin/sh", "-c", "test -e /tmp/ready"),
                               capture_output=True, start_new_session=True, timeout=60)
            if p.returncode == 0:
                break
            if time.monotonic() > deadline:
                raise RuntimeError("raw python sandbox never imported pandas")
            time.sleep(0.2)
        checkpoints, restores, image_mb = [], [], []
        for i in range(runs):
            img = self.dir / f"image-{i}"
            img.mkdir()
            # The flags Lizard's runtime uses (internal/sandbox/gvisor), so the ratio is Lizard's own cost.
            ms, _ = timed(lambda: self.run(self.cmd(b, "checkpoint", "--image-path", str(img),
                                                    "--exclude-committed-zero-pages", cid), timeout=300))
            checkpoints.append(ms)
            image_mb.append(sum(f.stat().st_size for f in img.rglob("*") if f.is_file()) / 2**20)
            self.delete(cid)
            if i > 0:
                shutil.rmtree(self.dir / f"image-{i - 1}", ignore_errors=True)
            b = self.bundle([PY_IN_TEMPLATE, "-c", code])  # a fresh bundle and overlay, as Lizard's restore
            cid = f"lizard-bench-{os.getpid()}-py-{i + 1}"
            self.live.append(cid)

            def restore() -> None:
                self.run(self.cmd(b, "create", "--bundle", str(b), cid), detach=True, timeout=120)
                self.run(self.cmd(b, "restore", "--detach", "--background", "--image-path", str(img), "--bundle",
                                  str(b), cid), detach=True, timeout=300)

            ms, _ = timed(restore)
            restores.append(ms)
            st = json.loads(self.run(self.cmd(b, "state", cid), timeout=60).stdout)
            if st.get("status") != "running":
                raise RuntimeError(f"restored raw sandbox is {st.get('status')}")
        self.delete(cid)
        return checkpoints, restores, sum(image_mb) / len(image_mb)


# --- direct jupyter_client baseline ------------------------------------------------------------------


class DirectKernel:
    """An ipykernel on the host driven by `jupyter_client`: the floor for runCode. Its round trips
    (execute request → idle, outputs collected) are taken interleaved with Lizard's own in
    lizard_code, call for call, so that both see the same load on this shared machine."""

    def __init__(self) -> None:
        from jupyter_client.manager import start_new_kernel

        self.km, self.kc = start_new_kernel(kernel_name="python3")
        self.close = CLEANUP.push("stopping the direct ipykernel",
                                  lambda: (self.kc.stop_channels(), self.km.shutdown_kernel(now=True)))

    def rt(self, code: str, mime: Optional[str] = None) -> float:
        outs: List[Dict[str, Any]] = []
        ms, reply = timed(lambda: self.kc.execute_interactive(code, output_hook=outs.append, timeout=60))
        if reply["content"]["status"] != "ok":
            raise RuntimeError(f"direct kernel: {code!r}: {reply['content']}")
        got = {m for o in outs for m in o.get("content", {}).get("data", {})}
        if mime and mime not in got:
            raise RuntimeError(f"direct kernel: {code!r}: want a {mime} output, got {got}")
        return ms


# --- the Lizard server -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """`bin/lizard serve` on a free loopback port with a temp data dir and a project of its own."""

    def __init__(self, bin_dir: Path, cache_dir: str, extra: List[str], label: str, runtime: str = "gvisor") -> None:
        self.bin = str(bin_dir / "lizard")
        self.runtime = runtime
        extra = unlimited_flags(self.bin) + extra
        self.dir = Path(tempfile.mkdtemp(prefix=f"lizard-bench-{label}-"))
        self.keep = False
        CLEANUP.push(f"removing {self.dir}",
                     lambda: None if self.keep else shutil.rmtree(self.dir, ignore_errors=True))
        out = subprocess.run([self.bin, "admin", "create-project", "--data-dir", str(self.dir), "--id", "bench",
                              "--json"], capture_output=True, text=True, timeout=120, check=True)
        self.key = json.loads(out.stdout)["apiKey"]
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log_path = self.dir / "serve.log"
        args = [self.bin, "serve", "--listen", self.url[len("http://"):], "--data-dir", str(self.dir),
                "--cache-dir", cache_dir, "--address-pool", ADDRESS_POOL, "--log-level", "debug", *extra]
        with open(self.log_path, "wb") as logf:
            # Its own session: a Ctrl-C on the terminal reaches the bench only, which then kills the
            # sandboxes through the API before stopping the server.
            self.proc = subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        self.stop = CLEANUP.push(f"stopping lizard serve (pid {self.proc.pid})", self._stop)
        import httpx

        deadline = time.monotonic() + 900  # a first start may build the template
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"lizard serve exited ({self.proc.returncode}):\n{self.logs()}")
            try:
                if httpx.get(self.url + "/v1/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"lizard serve never became healthy:\n{self.logs()}")
            time.sleep(0.05)
        log(f"lizard serve pid {self.proc.pid} on {self.url}, data {self.dir} {' '.join(extra)}")

    def logs(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-6000:]
        except OSError:
            return ""

    def sandbox_dir(self) -> Path:
        return self.dir / self.runtime / "sandboxes"

    def kill_all(self) -> None:
        """Kill every sandbox of the project through the API (the server keeps them on SIGTERM)."""
        import httpx

        with httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.key}"}, timeout=120) as c:
            resp = c.get("/v1/sandboxes")
            resp.raise_for_status()
            live = [s["sandboxId"] for s in resp.json().get("sandboxes") or []
                    if s.get("state") in ("starting", "running", "paused")]
            with cf.ThreadPoolExecutor(8) as ex:
                list(ex.map(lambda i: c.delete(f"/v1/sandboxes/{i}"), live))
            if live:
                log(f"killed {len(live)} leftover sandboxes")

    def _stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.kill_all()
            except Exception as exc:
                log(f"killing sandboxes through the API: {exc!r}")
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        left = list(self.sandbox_dir().glob("*")) if self.sandbox_dir().exists() else []
        if left:
            self.keep = True
            log(f"WARNING: {len(left)} sandboxes of {self.dir} remain (server log: {self.log_path}); "
                "keeping the data dir so `lizard serve --data-dir` can reconcile them")
            raise RuntimeError("sandboxes left behind")

    def sdk(self) -> Dict[str, str]:
        return {"api_url": self.url, "api_key": self.key}

    def runsc_pids(self) -> List[int]:
        """The pids of the runsc processes (sandbox, gofer, systrap stubs) of this server's sandboxes:
        their command lines hold the sandbox's bundle directory."""
        mark = str(self.sandbox_dir()) + "/"
        # A QEMU VM's command line names only its sockets' directory (under /run, short enough for a
        # socket's path), so its pid comes from the pid file in its sandbox directory ("PID START").
        pids = []
        for f in self.sandbox_dir().glob("*/qemu.pid"):
            try:
                pids.append(int(f.read_text().split()[0]))
            except (OSError, ValueError, IndexError):
                pass
        if pids:
            return pids
        for p in Path("/proc").iterdir():
            if not p.name.isdigit():
                continue
            try:
                if mark in (p / "cmdline").read_bytes().decode(errors="replace"):
                    pids.append(int(p.name))
            except OSError:
                pass
        return pids

    def log_timings(self) -> Dict[str, Dict[str, float]]:
        """Per sandbox: the runtime's boot ("sandbox up took", netns + runsc) and the whole server-side
        create ("sandbox running took", boot + waiting for the agent), in ms, from the server log."""
        out: Dict[str, Dict[str, float]] = {}
        for line in self.log_path.read_text(errors="replace").splitlines():
            # The server logs a create's end as "sandbox running" (boot), "sandbox restored" (template
            # snapshot, snapshot, fork) or "sandbox claimed from the warm pool".
            line = re.sub(r'msg="sandbox (restored|claimed from the warm pool)"', 'msg="sandbox running"', line)
            m = re.search(r'msg="sandbox (up|running)".*?sandbox_id=(\S+).*?took=(\S+)', line) or \
                re.search(r'sandbox_id=(\S+).*?msg="sandbox (up|running)".*?took=(\S+)', line)
            if not m:
                continue
            a, b, took = m.groups()
            kind, sid = (a, b) if a in ("up", "running") else (b, a)
            out.setdefault(sid, {})[kind] = go_duration_ms(took)
            if kind == "up":
                out[sid]["restored"] = 0.0 if 'restored_from=""' in line or "restored_from= " in line else 1.0
        return out


# Per-project limits of `lizard serve` (issue 7) that would measure the limit instead of the system: 50
# concurrent creates exceed the create burst, and the sustained loop the creates per second; the disk
# promised per project (issue 20) bounds live sandboxes too. 0 = no bound.
UNLIMITED = {"--creates-per-second": "0", "--requests-per-second": "0", "--max-sandboxes-per-project": "0",
             "--max-disk-per-project-mb": "0"}


def serve_help(bin_path: str) -> str:
    h = subprocess.run([bin_path, "serve", "--help"], capture_output=True, text=True, timeout=60)
    return h.stdout + h.stderr


def unlimited_flags(bin_path: str) -> List[str]:
    text = serve_help(bin_path)
    return [x for flag, v in UNLIMITED.items() if re.search(rf"^\s*-{flag[2:]}\b", text, re.M) for x in (flag, v)]


def go_duration_ms(s: str) -> float:
    total = 0.0
    for num, unit in re.findall(r"([0-9.]+)(ns|µs|us|ms|s|m|h)", s):
        total += float(num) * {"ns": 1e-6, "µs": 1e-3, "us": 1e-3, "ms": 1, "s": 1e3, "m": 6e4, "h": 3.6e6}[unit]
    return total


def unavailable(exc: Exception) -> bool:
    """The server has no such endpoint yet (issue 5 not landed): 404/405/501."""
    return getattr(exc, "status", None) in (404, 405, 501)


# --- Lizard figures ------------------------------------------------------------------------------------


def must_result(run: Any, mime: str) -> None:
    if run.error is not None or not any(r.mime == mime for r in run.results):
        raise RuntimeError(f"expected a {mime} result, got {run!r}")


def lizard_lifecycle(res: Results, srv: Server, runs: int, label: str, gap: float = 0.0) -> List[str]:
    """Sequential create → first run_code("1+1") → kill; returns the sandbox ids."""
    from lizard import CodeSandbox

    first, creates, runs1, kills, ids = [], [], [], [], []
    for _ in range(runs):
        if gap:
            time.sleep(gap)
        t0 = time.perf_counter()
        sb = CodeSandbox.create(**srv.sdk(), timeout_ms=600_000)
        t1 = time.perf_counter()
        try:
            run = sb.run_code("1+1")
            t2 = time.perf_counter()
            must_result(run, "text/plain")
        finally:
            ms, _ = timed(sb.kill)
            sb.close()
        ids.append(sb.sandbox_id)
        first.append((t2 - t0) * 1000)
        creates.append((t1 - t0) * 1000)
        runs1.append((t2 - t1) * 1000)
        kills.append(ms)
    res.add(Figure(f"create → first runCode(\"1+1\") result{label}", first, baseline="raw runsc run /bin/true"))
    res.add(Figure(f"  create (API answered, agent healthy){label}", creates, baseline="raw runsc run /bin/true"))
    res.add(Figure(f"  first runCode after create (kernel start){label}", runs1,
                   baseline="raw runsc run python -c 'import ipykernel.kernelapp'"))
    if not label:
        res.add(Figure("kill", kills))
    return ids


def lizard_profile(res: Results, srv: Server, ids: List[str]) -> None:
    """Split the server's create time with its own log: runtime boot vs waiting for the agent."""
    t = srv.log_timings()
    up = [t[i]["up"] for i in ids if "up" in t.get(i, {})]
    agent = [t[i]["running"] - t[i]["up"] for i in ids if {"up", "running"} <= set(t.get(i, {}))]
    restored = sum(t[i].get("restored", 0) for i in ids if i in t)
    how = f"{int(restored)}/{len(ids)} restored from a snapshot" if restored else "booted (no template snapshot)"
    if up:
        res.add(Figure("  server: runtime up (netns + runsc run/restore)", up, baseline="raw runsc run /bin/true",
                       note=how))
    if agent:
        res.add(Figure("  server: runtime up → agent healthy", agent))


def lizard_code(res: Results, srv: Server, runs: int, chart_runs: int, direct: DirectKernel, at: int) -> None:
    """runCode round trips, each beside a direct jupyter_client round trip (alternating which goes first);
    the direct figures go into the table at `at`, with the other baselines."""
    from lizard import CodeSandbox

    def pair(i: int, code: str, mime: str, lizard: List[float], base: List[float], warm: int) -> None:
        def ours() -> float:
            ms, run = timed(lambda: sb.run_code(code))
            must_result(run, mime)
            return ms
        if i % 2 == 0:
            a = direct.rt(code, mime)
            b = ours()
        else:
            b = ours()
            a = direct.rt(code, mime)
        if i >= warm:
            base.append(a)
            lizard.append(b)

    with CodeSandbox.create(**srv.sdk(), timeout_ms=600_000) as sb:
        one, d_one = [], []
        for i in range(runs + 10):
            pair(i, "1+1", "text/plain", one, d_one, 10)
        res.insert(at, Figure("direct jupyter_client 1+1 (host ipykernel)", d_one))
        res.add(Figure("runCode(\"1+1\")", one, baseline="direct jupyter_client 1+1 (host ipykernel)"))
        # Where runCode's time goes: the HTTP path alone (SDK → server → proxy → agent over the veth),
        # and the kernel alone: jupyter_client to ipykernel inside the sandbox (ZeroMQ under gVisor, what the
        # agent used before internal/pykernel), and the agent's own kernel over its pipes.
        health = [timed(lambda: sb._http.request("GET", f"{sb._prefix}/health"))[0] for _ in range(runs + 10)][10:]
        res.add(Figure("  SDK → server → agent GET /health (the HTTP path alone)", health))
        # Started from the default kernel itself: a second kernel in the same sandbox.
        try:
            run = sb.run_code(IN_SANDBOX_KERNEL.replace("int(sys.argv[1])", str(runs)), timeout_ms=300_000)
            if run.error or not run.results:
                raise RuntimeError(f"{run.error!r} {run.stderr[-200:]}")
            inside = json.loads(run.results[-1].data.strip("'"))
            res.add(Figure("  jupyter_client 1+1 inside the sandbox (kernel under gVisor)", inside,
                           baseline="direct jupyter_client 1+1 (host ipykernel)"))
        except Exception as exc:
            res.add(Figure("  jupyter_client 1+1 inside the sandbox (kernel under gVisor)", note=f"failed: {exc}"[:120]))
        # The kernel the agent runs, driven over its pipes inside the sandbox: runCode's kernel-side floor.
        try:
            code = IN_SANDBOX_PYKERNEL.replace("RUNS", str(runs)).replace("SOURCE", repr(PYKERNEL_SOURCE.read_bytes()))
            run = sb.run_code(code, timeout_ms=300_000)
            if run.error or not run.results:
                raise RuntimeError(f"{run.error!r} {run.stderr[-200:]}")
            inside = json.loads(run.results[-1].data.strip("'"))
            res.add(Figure("  kernel 1+1 inside the sandbox (agent's kernel over its pipes)", inside,
                           baseline="direct jupyter_client 1+1 (host ipykernel)"))
        except Exception as exc:
            res.add(Figure("  kernel 1+1 inside the sandbox (agent's kernel over its pipes)", note=f"failed: {exc}"[:120]))
        for code in (DATAFRAME_SETUP, CHART_SETUP):
            sb.run_code(code)
            direct.rt(code)
        df, png, d_df, d_png = [], [], [], []
        for i in range(chart_runs + 3):
            pair(i, DATAFRAME_CODE, "text/html", df, d_df, 3)
            pair(i, CHART_CODE, "image/png", png, d_png, 3)
        res.insert(at + 1, Figure("direct jupyter_client DataFrame", d_df))
        res.insert(at + 2, Figure("direct jupyter_client chart", d_png))
        res.add(Figure("runCode pandas DataFrame (text/html)", df, baseline="direct jupyter_client DataFrame"))
        res.add(Figure("runCode matplotlib chart (image/png)", png, baseline="direct jupyter_client chart"))


def lizard_pause_fork(res: Results, srv: Server, runs: int) -> None:
    """pause, resume (→ first result, state kept), snapshot, fork (→ first result in the child)."""
    from lizard import CodeSandbox

    names = ["pause", "resume", "resume → first runCode result", "snapshot", "fork",
             "fork → first runCode result in the child"]
    base = {"pause": "raw runsc checkpoint (python+pandas)", "resume": "raw runsc restore (python+pandas)",
            "resume → first runCode result": "raw runsc restore (python+pandas)",
            "fork": "raw runsc restore (python+pandas)",
            "fork → first runCode result in the child": "raw runsc restore (python+pandas)"}
    got: Dict[str, List[float]] = {n: [] for n in names}
    missing: Dict[str, str] = {}
    notes: Dict[str, str] = {}
    with CodeSandbox.create(**srv.sdk(), timeout_ms=600_000) as sb:
        sb.run_code("import numpy, pandas, matplotlib\nx = 41")
        for i in range(runs):
            if "pause" not in missing:
                try:
                    ms, _ = timed(sb.pause)
                    got["pause"].append(ms)
                    t0 = time.perf_counter()
                    ms, _ = timed(sb.resume)
                    got["resume"].append(ms)
                    run = sb.run_code("x + 1")
                    got["resume → first runCode result"].append((time.perf_counter() - t0) * 1000)
                    if run.error or not run.results or run.results[0].data != "42":
                        raise RuntimeError(f"state lost across pause/resume: {run!r}")
                except Exception as exc:
                    if not unavailable(exc):
                        raise
                    for n in ("pause", "resume", "resume → first runCode result"):
                        missing[n] = f"not available ({getattr(exc, 'status', '')} {exc})"
            if "snapshot" not in missing:
                try:
                    ms, _ = timed(sb.snapshot)
                    got["snapshot"].append(ms)
                except Exception as exc:
                    if not unavailable(exc):
                        raise
                    missing["snapshot"] = f"not available ({getattr(exc, 'status', '')} {exc})"
            if "fork" not in missing:
                try:
                    t0 = time.perf_counter()
                    child = fork_one(sb, srv, notes)
                    got["fork"].append((time.perf_counter() - t0) * 1000)
                    try:
                        run = child.run_code("x + 1")
                        got["fork → first runCode result in the child"].append((time.perf_counter() - t0) * 1000)
                        if run.error or not run.results or run.results[0].data != "42":
                            raise RuntimeError(f"state lost across fork: {run!r}")
                    finally:
                        child.kill()
                        child.close()
                except Exception as exc:
                    if not unavailable(exc):
                        raise
                    for n in ("fork", "fork → first runCode result in the child"):
                        missing[n] = f"not available ({getattr(exc, 'status', '')} {exc})"
    for n in names:
        res.add(Figure(n, got[n], baseline=base.get(n, ""), note=missing.get(n, "")[:60] or notes.get(n, "")))


class _Api:
    """Raw HTTP to the API for what the Python SDK does not call yet (background processes, docs/processes.md)."""

    def __init__(self, srv: Server, sandbox_id: str) -> None:
        import http.client
        from urllib.parse import urlparse

        u = urlparse(srv.url)
        self.host, self.port, self.key = u.hostname, u.port, srv.key
        self.base = f"/v1/sandboxes/{sandbox_id}"
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)

    def post(self, path: str, body: Dict[str, Any]) -> Any:
        """POST a JSON body; the response object, its body not yet read."""
        self.conn.request("POST", self.base + path, json.dumps(body),
                          {"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"})
        return self.conn.getresponse()

    def get(self, path: str) -> Any:
        self.conn.request("GET", self.base + path, headers={"Authorization": f"Bearer {self.key}"})
        return self.conn.getresponse()

    def first_stdout(self, resp: Any) -> None:
        """Read NDJSON lines until the first stdout event, then the rest of the stream."""
        seen = False
        for line in resp:
            ev = json.loads(line)
            seen = seen or ev.get("type") == "stdout"
            if ev.get("type") == "end":
                break
        resp.read()  # the end of the chunked body, so the connection is reused
        if not seen:
            raise RuntimeError("the stream had no stdout event")


class _Socket:
    """A minimal WebSocket client (RFC 6455): the bench's venv has no WebSocket library, and the
    figure is a round trip of one byte, which needs nothing more than a frame each way."""

    def __init__(self, host: str, port: int, path: str, key: str) -> None:
        import base64

        self.sock = socket.create_connection((host, port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        nonce = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {nonce}\r\nSec-WebSocket-Version: 13\r\n"
                           f"Authorization: Bearer {key}\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise RuntimeError(f"WebSocket handshake: connection closed after {head!r}")
            head += chunk
        head, self.buf = head.split(b"\r\n\r\n", 1)
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise RuntimeError(f"WebSocket handshake refused: {head.decode(errors='replace')}")

    def send(self, data: bytes, opcode: int = 2) -> None:
        mask = os.urandom(4)
        n = len(data)
        hdr = bytes([0x80 | opcode]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + n.to_bytes(2, "big"))
        self.sock.sendall(hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _need(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RuntimeError("WebSocket closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv(self) -> tuple:
        """One frame: (opcode, payload)."""
        b0, b1 = self._need(2)
        n = b1 & 0x7F
        if n == 126:
            n = int.from_bytes(self._need(2), "big")
        elif n == 127:
            n = int.from_bytes(self._need(8), "big")
        return b0 & 0x0F, self._need(n)

    def until(self, want: bytes) -> None:
        got = b""
        while want not in got:
            op, data = self.recv()
            if op == 8:
                raise RuntimeError(f"WebSocket closed waiting for {want!r}: {data!r}")
            if op == 2:
                got += data

    def close(self) -> None:
        self.sock.close()


def surface(res: Results, other_build: bool, what: str, measure: Callable[[], None]) -> None:
    """measure(); for another build than this checkout's, a failure is a row saying the build lacks what,
    not the end of the run (this build's own failures still end it)."""
    try:
        measure()
    except Exception as exc:  # noqa: BLE001 - any failure of an older build's surface
        if not other_build:
            raise
        log(f"{what}: not measured on this build ({type(exc).__name__}: {exc})")
        res.add(Figure(f"{what}", note=f"not measured: this build failed it ({type(exc).__name__}: {exc})"[:300]))


def lizard_processes(res: Results, srv: Server, runs: int) -> None:
    """Background processes and terminals (issue 22): process.start → first output beside exec's, and a
    terminal keystroke → its echo through the server's WebSocket proxy."""
    from lizard import CodeSandbox

    exec_ms: List[float] = []
    start_ms: List[float] = []
    key_ms: List[float] = []
    with CodeSandbox.create(**srv.sdk(), timeout_ms=600_000) as sb:
        a = _Api(srv, sb.sandbox_id)
        for i in range(runs + 3):
            t0 = time.perf_counter()
            a.first_stdout(a.post("/process", {"cmd": "echo x"}))
            ms_exec = (time.perf_counter() - t0) * 1000
            t0 = time.perf_counter()
            r = a.post("/processes", {"cmd": "echo x"})
            pid = json.loads(r.read())["pid"]
            a.first_stdout(a.get(f"/processes/{pid}/output"))
            ms_start = (time.perf_counter() - t0) * 1000
            if i >= 3:  # the first calls warm connections and the agent
                exec_ms.append(ms_exec)
                start_ms.append(ms_start)
        r = a.post("/processes", {"args": ["cat"], "pty": {"cols": 80, "rows": 24}})
        pid = json.loads(r.read())["pid"]
        ws = _Socket(a.host, a.port, f"{a.base}/processes/{pid}/ws", a.key)
        try:
            for i in range(runs * 10 + 10):
                ch = bytes([ord("a") + i % 26])
                t0 = time.perf_counter()
                ws.send(ch)
                ws.until(ch)
                if i >= 10:
                    key_ms.append((time.perf_counter() - t0) * 1000)
        finally:
            ws.close()
    res.add(Figure("process.exec → first output", exec_ms, note="POST /process echo x, to its stdout event"))
    res.add(Figure("process.start → first output", start_ms, baseline="process.exec → first output",
                   note="POST /processes + GET output (target ≤ 1.2× exec)"))
    res.add(Figure("terminal keystroke → echo", key_ms,
                   note="one byte over the WebSocket to a pty and its echo back (target p50 ≤ 5 ms)"))


def lizard_files(res: Results, srv: Server, runs: int, size_mb: int = 256) -> None:
    """Files (issue 22): a change → its watch event, and streamed upload and download through the Python SDK
    (an iterator up, a stream down; the SDK holds a chunk at a time)."""
    import queue

    from lizard import CodeSandbox

    lat_ms: List[float] = []
    size = size_mb << 20
    with CodeSandbox.create(**srv.sdk(), timeout_ms=600_000, disk_mb=max(2048, 2 * size_mb + 512)) as sb:
        sb.files.make_dir("watched")
        events: "queue.Queue[Any]" = queue.Queue()
        handle = sb.files.watch_dir("watched", events.put)
        try:
            for i in range(runs + 3):
                name = f"f{i}"
                t0 = time.perf_counter()
                sb.files.write(f"watched/{name}", b"x")
                while True:
                    ev = events.get(timeout=10)
                    if ev.type == "create" and ev.name == name:
                        break
                if i >= 3:
                    lat_ms.append((time.perf_counter() - t0) * 1000)
        finally:
            handle.stop()
        block = os.urandom(1 << 20)

        def chunks() -> Any:
            for _ in range(size_mb):
                yield block

        t0 = time.perf_counter()
        sb.files.write("big.bin", chunks())
        up = time.perf_counter() - t0
        t0 = time.perf_counter()
        n = sum(len(c) for c in sb.files.read("big.bin", format="stream"))
        down = time.perf_counter() - t0
        if n != size:
            raise RuntimeError(f"read back {n} bytes of {size}")
    res.add(Figure("files.write → watch event", lat_ms,
                   note="a 1-byte PUT /files into a watched directory until its create event reaches the SDK (target p50 ≤ 50 ms)"))
    res.add(Figure(f"streamed upload, {size_mb} MiB", value=size / up / 1e6, unit="MB/s",
                   note="Python SDK, an iterator of 1 MiB chunks (target ≥ 200 MB/s)"))
    res.add(Figure(f"streamed download, {size_mb} MiB", value=size / down / 1e6, unit="MB/s",
                   note="Python SDK, read(format='stream') (target ≥ 200 MB/s)"))


def fork_one(sb: Any, srv: Server, notes: Dict[str, str]) -> Any:
    """One fork through the SDK. Should CodeSandbox.fork() not read the server's answer yet (issue 5's
    answer is {"sandboxes": [...]}; the SDK is updated separately), fork through the SDK's own HTTP layer
    instead and say so in the figure's note."""
    from lizard import CodeSandbox, LizardError

    if not notes.get("fork"):
        before = {s.sandbox_id for s in CodeSandbox.list(**srv.sdk())}
        try:
            child = sb.fork()
            child.get_info()
            notes["fork"] = "CodeSandbox.fork()"
            return child
        except LizardError as exc:
            if unavailable(exc) and exc.status != 404:
                raise
            # Kill the child the SDK could not name, so it skews no later figure.
            for s in CodeSandbox.list(**srv.sdk()):
                if s.sandbox_id not in before and s.state in ("starting", "running", "paused"):
                    CodeSandbox(s.sandbox_id, _http=sb._http.clone()).kill()
            notes["fork"] = "SDK fork() cannot read the answer yet: POST /fork {count: 1} via the SDK's HTTP"
    if notes["fork"] == "CodeSandbox.fork()":
        return sb.fork()
    resp = sb._http.request("POST", f"{sb._prefix}/fork", json={"count": 1}, timeout=900)
    body = resp.json()
    info = (body.get("sandboxes") or [body])[0]
    return CodeSandbox(info["sandboxId"], _http=sb._http.clone())


# --- scale ---------------------------------------------------------------------------------------------


def meminfo(key: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def proc_mem(pids: List[int]) -> tuple:
    """Summed RSS and PSS (bytes) of pids, from /proc/PID/smaps_rollup."""
    rss = pss = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Rss:"):
                    rss += int(line.split()[1]) * 1024
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1]) * 1024
        except OSError:
            pass
    return rss, pss


def cgroup_pids(sandbox_id: str) -> List[int]:
    """Every host process of a gVisor sandbox: its memory cgroup's (runsc puts the Sentry, the gofer and
    the systrap stub processes in /lizard/ID, internal/sandbox/gvisor/spec.go)."""
    for path in (f"/sys/fs/cgroup/memory/lizard/{sandbox_id}/cgroup.procs", f"/sys/fs/cgroup/lizard/{sandbox_id}/cgroup.procs"):
        try:
            return [int(x) for x in Path(path).read_text().split()]
        except OSError:
            pass
    return []


_LIBC: Any = None


def same_mm(a: int, b: int) -> bool:
    """Whether processes a and b share one address space (kcmp KCMP_VM). systrap runs each guest address
    space in several stub processes sharing one mm: their smaps are the same pages, counted once."""
    global _LIBC
    if _LIBC is None:
        import ctypes

        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC.syscall(312, a, b, 1, 0, 0) == 0  # SYS_kcmp on x86-64, KCMP_VM


def sandbox_pss(ids: List[str]) -> tuple:
    """Summed PSS (bytes) of every host process of the gVisor sandboxes ids, each address space once
    (with the systrap stubs, which map the guest's memory too), and the number of processes. The
    "runsc processes" figures count the Sentry and the gofer only (the processes whose command line
    names the bundle): they miss the stubs' share of the guest's pages."""
    total, n = 0, 0
    for sid in ids:
        spaces: List[int] = []
        for pid in cgroup_pids(sid):
            n += 1
            if any(same_mm(pid, q) for q in spaces):
                continue
            spaces.append(pid)
            total += proc_mem([pid])[1]
    return total, n


def sandbox_memcg(ids: List[str]) -> int:
    """Summed shmem + anonymous memory (bytes) charged to the gVisor sandboxes ids' memory cgroups: the
    Sentry's memory file (the guest's memory, a memfd) whether or not a process maps its pages, which PSS
    counts only where one does (a restore that writes the pages into the memfd leaves most unmapped,
    build/runsc/pages-write.patch), and the processes' own heaps and stacks."""
    total = 0
    for sid in ids:
        for path, keys in ((f"/sys/fs/cgroup/memory/lizard/{sid}/memory.stat", ("total_shmem", "total_rss")),
                           (f"/sys/fs/cgroup/lizard/{sid}/memory.stat", ("shmem", "anon"))):
            try:
                kv = dict(line.split() for line in Path(path).read_text().splitlines())
            except FileNotFoundError:
                continue
            total += sum(int(kv[k]) for k in keys)
            break
    return total


def scale(res: Results, srv: Server, n: int) -> None:
    """n sandboxes created at once; time to all answering run_code("1+1"); memory per idle sandbox."""
    from lizard import CodeSandbox

    time.sleep(2)
    avail0 = meminfo("MemAvailable")
    sandboxes: List[Any] = []
    lock = threading.Lock()

    def one() -> float:
        t0 = time.perf_counter()
        sb = CodeSandbox.create(**srv.sdk(), timeout_ms=600_000)
        with lock:
            sandboxes.append(sb)
        must_result(sb.run_code("1+1"), "text/plain")
        return (time.perf_counter() - t0) * 1000

    log(f"creating {n} sandboxes at once")
    errors: List[str] = []
    lat: List[float] = []
    try:
        t0 = time.perf_counter()
        with cf.ThreadPoolExecutor(n) as ex:
            for f in cf.as_completed([ex.submit(one) for _ in range(n)]):
                try:
                    lat.append(f.result())
                except Exception as exc:
                    errors.append(repr(exc))
        total = time.perf_counter() - t0
        note = f"{len(lat)}/{n} ready" + (f"; errors: {errors[0][:80]}" if errors else "")
        res.add(Figure(f"scale: {n} concurrent creates, all answering runCode", value=total, unit="s", note=note))
        res.add(Figure(f"scale: each of {n} concurrent create → first result", lat))
        time.sleep(3)  # let the kernels settle into idle
        pids = srv.runsc_pids()
        rss, pss = proc_mem(pids)
        drop = avail0 - meminfo("MemAvailable")
        k = max(1, len(lat))
        res.add(Figure("scale: memory per idle sandbox, PSS of its runsc processes", value=pss / k / 2**20,
                       unit="MiB", note=f"{len(pids)} processes"))
        res.add(Figure("scale: memory per idle sandbox, RSS of its runsc processes", value=rss / k / 2**20,
                       unit="MiB"))
        res.add(Figure("scale: memory per idle sandbox, host MemAvailable drop", value=drop / k / 2**20,
                       unit="MiB"))
        every, procs = sandbox_pss([sb.sandbox_id for sb in sandboxes])
        res.add(Figure("scale: memory per idle sandbox, PSS of all its processes", value=every / k / 2**20,
                       unit="MiB", note=f"{procs} processes (Sentry, gofer, systrap stubs), each address space once"))
    finally:
        t1 = time.perf_counter()
        with cf.ThreadPoolExecutor(16) as ex:
            list(ex.map(lambda s: (s.kill(), s.close()), sandboxes))
        res.add(Figure(f"scale: kill {len(sandboxes)} sandboxes (16 at a time)", value=time.perf_counter() - t1,
                       unit="s"))


def sustained(res: Results, srv: Server, seconds: float, workers: int, label: str = "") -> None:
    from lizard import CodeSandbox

    stop_at = time.monotonic() + seconds
    cycles: List[float] = []
    errors: List[str] = []
    lock = threading.Lock()
    box_cpu = [0.0]  # the sandboxes' cgroups, each read just before its kill

    def worker() -> None:
        while time.monotonic() < stop_at:
            t0 = time.perf_counter()
            try:
                with CodeSandbox.create(**srv.sdk(), timeout_ms=600_000) as sb:
                    must_result(sb.run_code("1+1"), "text/plain")
                    cpu = sandbox_cpu_s(sb.sandbox_id)
                with lock:
                    cycles.append((time.perf_counter() - t0) * 1000)
                    box_cpu[0] += cpu
            except Exception as exc:
                with lock:
                    errors.append(repr(exc))
                time.sleep(0.5)

    load = loadavg()
    cpu0 = server_cpu(srv)
    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    time.sleep(2)  # the kills' background removals
    own, kids = (b - a for a, b in zip(cpu0, server_cpu(srv)))
    cpu = own + kids + box_cpu[0]
    note = f"{len(cycles)} cycles in {elapsed:.1f} s, {workers} workers, load {load}" + (
        f", {len(errors)} errors" if errors else "")
    res.add(Figure(f"sustained create → runCode → kill{label}", value=len(cycles) / elapsed, unit="sandboxes/s",
                   note=note))
    res.add(Figure(f"  sustained: one cycle{label}", cycles))
    k = max(1, len(cycles))
    res.add(Figure(f"  sustained: CPU per cycle{label}", value=cpu / k, unit="CPU-s",
                   note=f"lizard serve {own / k:.2f}, its runsc children {kids / k:.2f}, the sandbox's cgroup (read before its kill) {box_cpu[0] / k:.2f}"))


# --- CPU accounting ----------------------------------------------------------------------------------

CLK_TCK = os.sysconf("SC_CLK_TCK")


def server_cpu(srv: Server) -> tuple:
    """CPU seconds of lizard serve itself (utime + stime) and of the children it waited for (runsc
    create, restore, delete...: cutime + cstime), from /proc/PID/stat. The sandboxes' own processes
    are not its children once their runsc has exited; sandbox_cpu_s counts them."""
    f = Path(f"/proc/{srv.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / CLK_TCK, (int(f[13]) + int(f[14])) / CLK_TCK


def sandbox_cpu_s(sandbox_id: str) -> float:
    """CPU seconds of one sandbox so far: its cgroup's (the Sentry, its systrap stubs and the gofer; runsc
    puts them all in /lizard/ID, internal/sandbox/gvisor/spec.go). 0 once the cgroup is gone."""
    for path, scale in ((f"/sys/fs/cgroup/cpuacct/lizard/{sandbox_id}/cpuacct.usage", 1e-9),
                        (f"/sys/fs/cgroup/cpu,cpuacct/lizard/{sandbox_id}/cpuacct.usage", 1e-9)):
        try:
            return int(Path(path).read_text()) * scale
        except OSError:
            pass
    try:  # cgroup v2
        for line in Path(f"/sys/fs/cgroup/lizard/{sandbox_id}/cpu.stat").read_text().splitlines():
            if line.startswith("usage_usec "):
                return int(line.split()[1]) * 1e-6
    except OSError:
        pass
    return 0.0


def sandbox_tasks(sandbox_id: str) -> int:
    """Host tasks (threads) of one gVisor sandbox: its pids cgroup's pids.current (the Sentry's threads, the
    gofer's, the systrap stubs). Each counts against the host's kernel.pid_max. 0 once the cgroup is gone."""
    for path in (f"/sys/fs/cgroup/pids/lizard/{sandbox_id}/pids.current", f"/sys/fs/cgroup/lizard/{sandbox_id}/pids.current"):
        try:
            return int(Path(path).read_text())
        except (OSError, ValueError):
            pass
    return 0


def own_cpu_s() -> float:
    """CPU seconds of this bench process so far (its client threads)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def sandboxes_cpu_s() -> Dict[str, float]:
    """sandbox_cpu_s of every sandbox cgroup on the host now, by ID (the bench's and anyone else's)."""
    out: Dict[str, float] = {}
    for root in ("/sys/fs/cgroup/cpuacct/lizard", "/sys/fs/cgroup/cpu,cpuacct/lizard", "/sys/fs/cgroup/lizard"):
        try:
            names = [d.name for d in Path(root).iterdir() if d.is_dir()]
        except OSError:
            continue
        for name in names:
            out[name] = sandbox_cpu_s(name)
        break
    return out


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# --- density and bursts ---------------------------------------------------------------------------------


def sdk_http(srv: Server) -> Any:
    """One connection pool for calls to many sandboxes: holding hundreds of sandboxes must not hold
    hundreds of pools (and their connections) in the bench."""
    from lizard._sync import _Http

    return _Http(srv.url, srv.key, 120.0, None)


def kill_ids(srv: Server, ids: List[str]) -> None:
    """Kill sandboxes by id through the API, 16 at a time; a sandbox already gone is fine. A kill the
    server refuses ("could not kill sandbox; try again", seen with 150 kills at load ~45) is retried
    three times; what still fails is logged, and the server's stop kills it (Server.kill_all)."""
    from lizard import CodeSandbox

    http = sdk_http(srv)

    def kill(sid: str) -> None:
        for attempt in range(4):
            try:
                CodeSandbox(sid, _http=http).kill()
                return
            except Exception as exc:
                log(f"killing {sid} (attempt {attempt + 1}): {exc!r}")
                time.sleep(1 + attempt)

    try:
        with cf.ThreadPoolExecutor(16) as ex:
            list(ex.map(kill, list(ids)))
    finally:
        http.close()


def density(res: Results, srv: Server, steps: List[int], cap: int, margin_gib: float, batch: int,
            idle_s: float = 30, tag: str = "") -> None:
    """Idle interpreter sandboxes held in steps (steps, capped at cap) until host memory runs low
    (MemAvailable under margin_gib, checked before each batch of creates and projected over the batch), a
    create fails, or a held sandbox does not answer runCode("1+1") within 1 s. Per step: the sandboxes
    held, the time to start the step's new ones (batch at a time, each until its first result), PSS of
    their runsc processes and the drop of MemAvailable, each per sandbox, their CPU over idle_s seconds
    of idling and their host tasks (threads) per sandbox, and one runCode("1+1") to every held sandbox
    in turn. Everything it started is killed at the end, whatever happened."""
    from lizard import CodeSandbox

    margin = int(margin_gib * 2**30)
    time.sleep(3)  # let the previous section's removals settle
    avail0 = meminfo("MemAvailable")
    held: List[str] = []
    lock = threading.Lock()
    http = sdk_http(srv)
    done = CLEANUP.push("killing the density section's sandboxes", lambda: (kill_ids(srv, held), http.close()))

    def one() -> None:
        sb = CodeSandbox.create(**srv.sdk(), timeout_ms=3_600_000)
        with lock:
            held.append(sb.sandbox_id)
        try:
            must_result(sb.run_code("1+1"), "text/plain")
        finally:
            sb.close()

    def probe(sid: str) -> float:
        t0 = time.perf_counter()
        run = CodeSandbox(sid, _http=http).run_code("1+1", timeout_ms=10_000)
        must_result(run, "text/plain")
        return (time.perf_counter() - t0) * 1000

    targets = sorted({min(s, cap) if cap > 0 else s for s in steps})
    log(f"density: steps {targets}, stopping under {margin_gib:g} GiB of MemAvailable "
        f"({avail0 / 2**30:.1f} GiB now), {batch} creates at a time")
    best = 0
    stop = ""
    try:
        for target in targets:
            t0 = time.perf_counter()
            before = len(held)
            while len(held) < target and not stop:
                avail = meminfo("MemAvailable")
                each = (avail0 - avail) / len(held) if held else 150 * 2**20
                n = min(batch, target - len(held), int((avail - margin) / max(each, 1)))
                if n <= 0:
                    stop = f"memory: {avail / 2**30:.1f} GiB available, margin {margin_gib:g} GiB"
                    break
                with cf.ThreadPoolExecutor(n) as ex:
                    for f in [ex.submit(one) for _ in range(n)]:
                        try:
                            f.result()
                        except Exception as exc:
                            stop = stop or f"a create failed: {exc!r}"[:160]
            start_s = time.perf_counter() - t0
            started = len(held) - before
            if started == 0 and stop:
                break
            time.sleep(5)  # into idle
            c0, t1 = sum(sandbox_cpu_s(i) for i in held), time.perf_counter()
            time.sleep(idle_s)  # idle: what the held sandboxes burn doing nothing
            idle = (sum(sandbox_cpu_s(i) for i in held) - c0) / (time.perf_counter() - t1)
            tasks = sum(sandbox_tasks(i) for i in held)
            pids = srv.runsc_pids()
            _, pss = proc_mem(pids)
            every, procs = sandbox_pss(list(held))
            memcg = sandbox_memcg(list(held))
            avail = meminfo("MemAvailable")
            lat: List[float] = []
            slow = 0
            for sid in list(held):
                try:
                    ms = probe(sid)
                except Exception as exc:
                    log(f"density: {sid} did not answer: {exc!r}")
                    ms = float("inf")
                lat.append(ms)
                slow += ms > 1000
            row = {"held": len(held), "startS": start_s, "createsPerS": started / start_s if start_s else 0.0,
                   "pssMiB": every / len(held) / 2**20, "pssRunscMiB": pss / len(held) / 2**20,
                   "memcgMiB": memcg / len(held) / 2**20, "dropMiB": (avail0 - avail) / len(held) / 2**20,
                   "availGiB": avail / 2**30, "probeP50Ms": pct(lat, 50), "probeMaxMs": max(lat),
                   "answered": len(held) - slow, "load": loadavg(), "processes": procs,
                   "idleCpuMsPerS": idle * 1000 / len(held), "tasksEach": tasks / len(held), "tag": tag}
            if slow:
                stop = stop or f"{slow} did not answer runCode within 1 s"
            else:
                best = len(held)
            if stop:
                row["stop"] = stop
            res.density.append(row)
            log(f"density: {row}")
            if stop:
                break
        if not stop:
            stop = f"the last step ({targets[-1]}; --density-max caps it)" if cap > 0 else "the last step"
        last = res.density[-1] if res.density else None
        res.add(Figure(f"density: most idle sandboxes held, every one answering runCode(\"1+1\") within 1 s{tag}",
                       value=best, unit="sandboxes", note=f"stopped at {stop}"[:200]))
        if last:
            res.add(Figure(f"density: memory per idle sandbox at {last['held']}, PSS of all its processes{tag}",
                           value=last["pssMiB"], unit="MiB", note=f"Sentry and gofer alone: {last['pssRunscMiB']:.1f} MiB"))
            res.add(Figure(f"density: memory per idle sandbox at {last['held']}, its memory cgroup's shmem + anonymous{tag}",
                           value=last["memcgMiB"], unit="MiB", note="the memory file counted whether mapped or not"))
            res.add(Figure(f"density: memory per idle sandbox at {last['held']}, host MemAvailable drop{tag}",
                           value=last["dropMiB"], unit="MiB"))
            res.add(Figure(f"density: idle CPU per sandbox at {last['held']}{tag}", value=last["idleCpuMsPerS"],
                           unit="ms/s", note=f"over {idle_s:g} s"))
            res.add(Figure(f"density: host tasks per idle sandbox at {last['held']}{tag}", value=last["tasksEach"],
                           unit="tasks", note="its pids cgroup's pids.current: Sentry, gofer and systrap stub threads"))
    finally:
        t1 = time.perf_counter()
        n = len(held)
        done()
        log(f"density: killed {n} sandboxes in {time.perf_counter() - t1:.1f} s")


def burst(res: Results, srv: Server, n: int, label: str) -> None:
    """n concurrent creates, each until its first runCode("1+1") result; the time until all answered,
    and the CPU seconds it took per create: lizard serve's (with its runsc children) plus each sandbox's
    cgroup, read before the kill. With a warm pool the restores were done before (and their CPU is in
    the sandboxes' cgroups, read before the burst and taken off: the row is the burst's own CPU, the
    claims' reseeds and first calls); the pool's refill after the burst is not counted."""
    import httpx
    from lizard import CodeSandbox

    ids: List[str] = []
    lock = threading.Lock()
    # Each client's connection pool is made before the burst, as an application holds its SDK client:
    # making one (its TLS context) is ~25 ms of CPU here, under the bench's one GIL, which spread the
    # 50 creates' arrival at the server over half a second and was most of the pooled burst's time.
    transports = [httpx.HTTPTransport() for _ in range(n)]

    def one(transport: Any) -> float:
        t0 = time.perf_counter()
        sb = CodeSandbox.create(**srv.sdk(), timeout_ms=600_000, transport=transport)
        with lock:
            ids.append(sb.sandbox_id)
        try:
            must_result(sb.run_code("1+1"), "text/plain")
        finally:
            sb.close()
        return (time.perf_counter() - t0) * 1000

    done = CLEANUP.push(f"killing the burst's sandboxes{label}", lambda: kill_ids(srv, ids))
    lat: List[float] = []
    errors: List[str] = []
    try:
        load = loadavg()
        boxes0 = sandboxes_cpu_s()
        cpu0 = server_cpu(srv)
        client0 = own_cpu_s()
        t0 = time.perf_counter()
        with cf.ThreadPoolExecutor(n) as ex:
            for f in cf.as_completed([ex.submit(one, t) for t in transports]):
                try:
                    lat.append(f.result())
                except Exception as exc:
                    errors.append(repr(exc))
        total = time.perf_counter() - t0
        own, kids = (b - a for a, b in zip(cpu0, server_cpu(srv)))
        client = own_cpu_s() - client0
        boxes = sum(sandbox_cpu_s(i) - boxes0.get(i, 0.0) for i in ids)
        cpu = own + kids + boxes
        note = f"{len(lat)}/{n} ready, load {load}" + (f"; errors: {errors[0][:80]}" if errors else "")
        res.add(Figure(f"burst: {n} concurrent creates until all answer runCode{label}", value=total, unit="s",
                       note=note))
        res.add(Figure(f"  burst: each create → first result{label}", lat))
        k = max(1, len(ids))
        res.add(Figure(f"  burst: CPU per create → first result{label}", value=cpu / k, unit="CPU-s",
                       note=f"lizard serve {own / k:.2f}, its runsc children {kids / k:.2f}, the sandbox's cgroup {boxes / k:.2f}; "
                       f"not counted: the bench's own clients (one Python process) {client / k:.3f}"))
    finally:
        done()


def pool_server(bin_dir: Path, cache_dir: str, size: int, extra: List[str]) -> Server:
    """A server with --warm-pool size, returned once its pool holds size ready sandboxes (its metrics'
    lizard_warm_pool_ready)."""
    import httpx

    port = free_port()
    srv = Server(bin_dir, cache_dir, ["--warm-pool", str(size), "--metrics-listen", f"127.0.0.1:{port}", *extra],
                 f"pool{size}")
    log(f"waiting for a warm pool of {size}")
    t0 = time.monotonic()
    while True:
        try:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            m = re.search(r'^lizard_warm_pool_ready\{template="interpreter"\} (\S+)', text, re.M)
            if m and float(m.group(1)) >= size:
                break
        except httpx.HTTPError:
            pass
        if srv.proc.poll() is not None or time.monotonic() - t0 > 1800:
            raise RuntimeError(f"the warm pool never held {size}:\n{srv.logs()}")
        time.sleep(1)
    log(f"warm pool of {size} ready after {time.monotonic() - t0:.0f} s")
    time.sleep(5)  # its last restores into idle
    return srv


# --- main ----------------------------------------------------------------------------------------------


def parse_duration(s: str) -> float:
    m = re.fullmatch(r"([0-9.]+)\s*(ms|s|m)?", s.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"bad duration {s!r} (e.g. 20s)")
    return float(m.group(1)) * {"ms": 1e-3, "s": 1, "m": 60, None: 1}[m.group(2)]


def machine() -> Dict[str, Any]:
    def sh(*a: str) -> str:
        try:
            return subprocess.run(a, capture_output=True, text=True, timeout=30).stdout.strip()
        except OSError:
            return ""

    return {"host": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count(),
            "memTotalGiB": round(meminfo("MemTotal") / 2**30, 1), "uptime": sh("uptime"),
            "commit": sh("git", "-C", str(REPO), "rev-parse", "--short", "HEAD")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20, help="sandboxes for the create/kill figures (default 20)")
    ap.add_argument("--code-runs", type=int, default=200, help="runCode(\"1+1\") calls (default 200)")
    ap.add_argument("--chart-runs", type=int, default=30, help="DataFrame and chart round trips (default 30)")
    ap.add_argument("--raw-runs", type=int, default=20, help="raw runsc run /bin/true (default 20)")
    ap.add_argument("--snapshot-runs", type=int, default=5,
                    help="raw checkpoint/restore cycles and Lizard pause/resume/fork cycles (default 5)")
    ap.add_argument("--scale", type=int, default=50, help="sandboxes created at once (default 50, 0 skips)")
    ap.add_argument("--sustain", type=parse_duration, default=20.0,
                    help="length of the create→run→kill loop (default 20s, 0 skips)")
    ap.add_argument("--workers", type=int, default=4, help="concurrent workers of the loop (default 4)")
    ap.add_argument("--warm-pool", type=int, default=2,
                    help="pool size for the 'with warm pool' figures when lizard serve has --warm-pool (default 2)")
    ap.add_argument("--warm-pool-gap", type=parse_duration, default=1.0,
                    help="pause between creates with the warm pool, to let it refill (default 1s)")
    ap.add_argument("--qemu", action="store_true",
                    help="measure the QEMU backend too (--runtime qemu; needs make qemu), beside gVisor")
    ap.add_argument("--qemu-runs", type=int, default=3,
                    help="QEMU cold boots and template-snapshot creates (default 3; slow under TCG)")
    ap.add_argument("--qemu-code-runs", type=int, default=50, help="QEMU runCode(\"1+1\") calls (default 50)")
    ap.add_argument("--qemu-idle", type=int, default=4, help="idle QEMU VMs for the memory figures (default 4)")
    ap.add_argument("--qemu-ksm", type=parse_duration, default=0.0,
                    help="with the idle VMs held, turn KSM on (/sys/kernel/mm/ksm/run) for this long and measure "
                         "their memory again and ksmd's CPU, then set it back (default 0: not measured)")
    ap.add_argument("--only", type=lambda v: set(v.split(",")) - {""}, default=set(),
                    help="run only these sections, comma-separated: core (the raw runsc floors, create, runCode, "
                         "pause/resume/fork, processes, files, scale, the sustained loop, cold boots and the warm "
                         "pool: what a run without --only measures before its other sections; with --qemu, the "
                         "QEMU column too), density, burst, sustain (issue 25), "
                         "e2b (E2B's SDK beside Lizard's, issue 23), egress (the network policy proxy, issue 24), "
                         "secrets (HTTPS with a secret set by the node, issue 24), "
                         "qemu (the QEMU rows with gVisor's create → first result beside them, issue 25), "
                         "reclaim (idle memory to swap, --idle-reclaim beside the flag off, issue 37), "
                         "heapshare (the preloaded heap shared from a file, --share-heap beside the flag off, issue 37), "
                         "levers (issue 37's density levers alone and together in one run: default, --preload \"\", "
                         "--share-heap, --idle-reclaim and both), "
                         "images (templates from an OCI image, issue 36), desktop (the desktop template beside the "
                         "interpreter, issue 39) "
                         "(default: the whole bench)")
    ap.add_argument("--serve-flag", action="append", default=[],
                    help="a flag for the lizard serve of the density, burst and sustain sections (repeat for more), "
                         "to measure a lever beside the default, e.g. --serve-flag=--preload=")
    ap.add_argument("--image-runs", type=int, default=3,
                    help="builds of the images section's ~200 MB image, cold and with its layers cached (default 3)")
    ap.add_argument("--desktop-runs", type=int, default=5,
                    help="creates → first screenshot of the desktop section, of each kind (default 5)")
    ap.add_argument("--desktop-shots", type=int, default=30, help="screenshot round trips of the desktop section (default 30)")
    ap.add_argument("--desktop-idle", type=int, default=3,
                    help="idle sandboxes of each template held for the desktop section's memory figures (default 3)")
    ap.add_argument("--density-steps", type=lambda v: [int(x) for x in v.split(",")], default=[25, 50, 100, 200, 400, 800],
                    help="idle sandboxes held at each step of the density section (default 25,50,100,200,400,800)")
    ap.add_argument("--density-max", type=int, default=0,
                    help="most idle sandboxes the density section holds (default 0: as many as memory allows; "
                         "-1 skips the section)")
    ap.add_argument("--density-margin-gib", type=float, default=2.0,
                    help="the density section stops before MemAvailable falls under this (default 2 GiB)")
    ap.add_argument("--density-batch", type=int, default=10, help="concurrent creates of the density section (default 10)")
    ap.add_argument("--density-idle", type=float, default=30,
                    help="seconds over which each density step measures the held sandboxes' idle CPU (default 30)")
    ap.add_argument("--reclaim-n", type=int, default=40,
                    help="idle sandboxes of the idle-reclaim section, with and without --idle-reclaim (default 40)")
    ap.add_argument("--levers-n", type=int, default=40,
                    help="idle sandboxes of each configuration of the levers section (default 40)")
    ap.add_argument("--heapshare-n", type=int, default=40,
                    help="sandboxes of the heap-share section, with and without --share-heap (default 40)")
    ap.add_argument("--reclaim-after", type=parse_duration, default=20.0,
                    help="the --idle-reclaim of that section's server (default 20s)")
    ap.add_argument("--reclaim-zram", default="",
                    help="turn swap on /dev/zram0 on for the idle-reclaim section, this size (e.g. 8G), and off after; "
                         "default: the host's swap as it is (none: the section is not run)")
    ap.add_argument("--reclaim-runtime", choices=("gvisor", "qemu"), default="gvisor",
                    help="the idle-reclaim section's backend (default gvisor; qemu: --runtime qemu --qemu-accel tcg, "
                         "each VM's QEMU process measured instead of a memory cgroup)")
    ap.add_argument("--burst", type=int, default=50,
                    help="concurrent creates of the burst rows, without and with a warm pool that size (default 50, 0 skips)")
    ap.add_argument("--baseline-bin-dir", default="",
                    help="with --only burst, sustain and/or density: measure them for the binaries of this directory and "
                         "--bin-dir's in turn, interleaved, --ab-rounds times; with --only qemu: the QEMU create "
                         "and idle-memory rows of these binaries first, each of --bin-dir's rows beside theirs (issue 25)")
    ap.add_argument("--ab-rounds", type=int, default=3, help="rounds of --baseline-bin-dir (default 3)")
    ap.add_argument("--baseline-cache-dir", default="",
                    help="the template cache of --baseline-bin-dir's servers (default --cache-dir): a build whose "
                         "template differs from this one's builds its own there instead of beside this one's")
    ap.add_argument("--address-pool", default=ADDRESS_POOL,
                    help=f"address pool of the bench's servers (default {ADDRESS_POOL})")
    ap.add_argument("--bin-dir", default=str(REPO / "bin"))
    ap.add_argument("--cache-dir", default=os.environ.get("LIZARD_CACHE_DIR", "/var/cache/lizard"))
    ap.add_argument("--out", default=str(REPO / "bench" / "results"))
    a = ap.parse_args()
    sections = {"core", "density", "burst", "sustain", "e2b", "egress", "secrets", "qemu", "images", "reclaim", "heapshare", "levers", "desktop"}
    if a.only - sections:
        ap.error(f"--only: unknown section {sorted(a.only - sections)}")
    if a.baseline_bin_dir and not (a.only and a.only <= {"burst", "sustain", "density", "qemu"}):
        ap.error("--baseline-bin-dir: give --only with burst, sustain, density or qemu")
    globals()["ADDRESS_POOL"] = a.address_pool
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    if os.geteuid() != 0:
        print("bench: needs root (runsc, network namespaces)", file=sys.stderr)
        return 2
    bin_dir = Path(a.bin_dir)
    res = Results()
    info = machine()
    log(f"load before: {info['uptime']}")
    started = datetime.now(timezone.utc)
    try:
        # The hook for the warm pool of issue 6: measured with and without it once serve has the flag.
        has_pool = bool(re.search(r"^\s*-warm-pool\b", serve_help(str(bin_dir / "lizard")), re.M))
        # The template (and its snapshot, once issue 6 lands) must exist before anything is timed.
        # `lizard admin build-template` since 52b4bf1 (2026-12-01); older builds (an A/B baseline) had `template build`.
        build = [str(bin_dir / "lizard"), "admin", "build-template", "--cache-dir", a.cache_dir, "interpreter"]
        if subprocess.run(build, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0:
            subprocess.run([str(bin_dir / "lizard"), "template", "build", "--cache-dir", a.cache_dir, "interpreter"],
                           check=True, stdout=subprocess.DEVNULL)
        rootfs = sorted(Path(a.cache_dir, "templates").glob("interpreter-*/rootfs"),
                        key=lambda p: p.stat().st_mtime)[-1]
        raw = RawRunsc(str(bin_dir / "runsc"), str(rootfs))

        if not a.only or "egress" in a.only:
            egress_figures(res)
        if not a.only or "core" in a.only:
            log("baseline: raw runsc run /bin/true")
            res.add(Figure("raw runsc run /bin/true", raw.run_true(a.raw_runs)))
            res.add(Figure("raw runsc run python -c 'import ipykernel.kernelapp'",
                           raw.run_kernel_import(max(3, a.raw_runs // 4)), baseline="raw runsc run /bin/true"))
            log("baseline: raw runsc checkpoint/restore of python with pandas imported")
            cps, rss, img_mb = raw.checkpoint_restore(a.snapshot_runs)
            res.add(Figure("raw runsc checkpoint (python+pandas)", cps, note=f"image {img_mb:.0f} MiB"))
            res.add(Figure("raw runsc restore (python+pandas)", rss))
            log("baseline: a direct jupyter_client kernel on the host (measured beside runCode, call for call)")
            direct, direct_at = DirectKernel(), len(res.figures)

            # Without the warm pool: the server's own create path (boot, or the template snapshot).
            srv = Server(bin_dir, a.cache_dir, ["--warm-pool", "0"] if has_pool else [], "nopool")
            warm_up(srv)
            log("Lizard: create → first result, kill")
            ids = lizard_lifecycle(res, srv, a.runs, "")
            lizard_profile(res, srv, ids)
            log("Lizard: runCode round trips")
            lizard_code(res, srv, a.code_runs, a.chart_runs, direct, direct_at)
            direct.close()
            log("Lizard: pause, resume, snapshot, fork")
            lizard_pause_fork(res, srv, a.snapshot_runs)
            # An older build (an A/B's baseline) may lack these surfaces: its rows say so and the run goes on.
            other = bin_dir.resolve() != (REPO / "bin").resolve()
            surface(res, other, "background processes and terminals", lambda: lizard_processes(res, srv, a.code_runs))
            log("Lizard: files (watch events, streamed transfers)")
            surface(res, other, "files: watch events, streamed transfers", lambda: lizard_files(res, srv, a.code_runs))
            surface(res, other, "E2B's SDK", lambda: e2b_figures(res, srv, a.runs, a.code_runs))
            if a.scale > 0:
                scale(res, srv, a.scale)
            if a.sustain > 0:
                log(f"Lizard: sustained create→run→kill for {a.sustain:.0f} s, {a.workers} workers")
                sustained(res, srv, a.sustain, a.workers)
            srv.stop()

            # The boot path without the template snapshot: runsc boot, agent, kernel start. Issue 2's
            # figure, beside raw runsc run in the same run.
            srv = Server(bin_dir, a.cache_dir, ["--template-snapshot=false", "--warm-pool", "0"], "cold")
            log("Lizard with --template-snapshot=false (cold boot): create → first result, kill")
            warm_up(srv)
            lizard_lifecycle(res, srv, a.runs, " (cold boot)")
            srv.stop()

            name = f"create → first runCode(\"1+1\") result (warm pool {a.warm_pool})"
            if has_pool and a.warm_pool > 0:
                srv = Server(bin_dir, a.cache_dir, ["--warm-pool", str(a.warm_pool)], "pool")
                time.sleep(max(2.0, a.warm_pool_gap))
                log(f"Lizard with --warm-pool {a.warm_pool}: create → first result")
                warm_up(srv)
                lizard_lifecycle(res, srv, a.runs, f" (warm pool {a.warm_pool})", gap=a.warm_pool_gap)
                srv.stop()
            elif has_pool:
                res.add(Figure(name, note="skipped (--warm-pool 0)"))
            else:
                res.add(Figure(name, note="not available (lizard serve has no --warm-pool)"))
            if a.qemu:
                qemu_column(res, bin_dir, a)
        if "e2b" in a.only:
            e2b_section(res, a, bin_dir)
        if "qemu" in a.only:
            gvisor_first(res, bin_dir, a.cache_dir, a.runs)
            qemu_column(res, bin_dir, a)
        if not a.only or "images" in a.only:
            log("Lizard: templates from an OCI image (pull + build, cold and cached; create → first command)")
            image_section(res, a, bin_dir, rootfs)
        if not a.only or "secrets" in a.only:
            log("Lizard: HTTPS with a secret set by the node, beside direct")
            secrets_section(res, a, bin_dir)
        if not a.only or "reclaim" in a.only:
            log("Lizard: idle memory to swap (--idle-reclaim), beside the flag off")
            reclaim_section(res, a, bin_dir)
        if not a.only or "heapshare" in a.only:
            log("Lizard: the preloaded heap shared from a file (--share-heap), beside the flag off")
            heapshare_section(res, a, bin_dir)
        if not a.only or "levers" in a.only:
            log("Lizard: the density levers alone and together (default, --preload \"\", --share-heap, --idle-reclaim, both)")
            levers_section(res, a, bin_dir)
        if not a.only or "desktop" in a.only:
            log("Lizard: the desktop template beside the interpreter (create → first screenshot, round trips, idle memory)")
            desktop_section(res, a, bin_dir)
        if a.baseline_bin_dir:
            if a.only & {"burst", "sustain", "density"}:
                ab_sections(res, a, bin_dir, Path(a.baseline_bin_dir))
        else:
            density_sections(res, a, bin_dir)
    except (Interrupted, KeyboardInterrupt) as exc:
        log(f"interrupted ({exc}); cleaning up")
        CLEANUP.run()
        return 130
    except BaseException:
        CLEANUP.run()
        raise
    CLEANUP.run()

    info["uptimeAfter"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    table = res.table()
    print(f"\n## Lizard benchmark {started:%Y-%m-%d %H:%M} UTC, {info['host']}, {info['cpus']} CPUs, "
          f"{info['memTotalGiB']} GiB, commit {info['commit']}\n")
    print(f"load before: `{info['uptime']}`  \nload after: `{info['uptimeAfter']}`\n")
    print(table)
    if res.density:
        print(f"\n### Density (idle interpreter sandboxes held in steps)\n\n{res.density_table()}")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"bench-{started:%Y%m%d-%H%M%S}.json"
    path.write_text(json.dumps({"started": started.isoformat(), "machine": info,
                                "flags": {k: sorted(v) if isinstance(v, set) else v for k, v in vars(a).items()}, "hasWarmPoolFlag": has_pool,
                                "figures": [f.to_json() for f in res.figures], "table": table,
                                "density": res.density},
                               indent=1, ensure_ascii=False) + "\n")
    print(f"\nresults: {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")
    return 0


# --- the egress proxy (issue 24) ----------------------------------------------------------------------


def egress_figures(res: Results, requests: int = 300, mib: int = 2048) -> None:
    """The network policy proxy (internal/egress) on loopback, beside the same work without it in the same
    run (bench/egress, a Go program: the proxy is a Go library): an HTTPS request on a new connection (TLS
    handshake, GET, answer) through it and direct, interleaved; then MB/s carried through it and direct."""
    log("egress proxy: HTTPS through the policy proxy vs direct, and throughput on loopback")
    out = subprocess.run(["go", "run", "./bench/egress", "--requests", str(requests), "--mib", str(mib)],
                         cwd=REPO, check=True, capture_output=True, text=True).stdout
    d = json.loads(out)
    direct = res.add(Figure("HTTPS request, new connection, direct (loopback)", d["directMs"]))
    proxied = res.add(Figure("HTTPS request through the egress policy proxy (SNI checked, no TLS termination)", d["proxyMs"],
                             baseline=direct.name))
    proxied.note = f"p50 {proxied.p50 - direct.p50:+.3f} ms over direct (target ≤ 1 ms)"
    res.add(Figure(f"TCP throughput direct, loopback, {mib} MiB", value=d["directMBps"], unit="MB/s"))
    res.add(Figure(f"TCP throughput through the egress proxy, loopback, {mib} MiB", value=d["proxyMBps"], unit="MB/s",
                   note=f"{d['proxyMBps'] / d['directMBps']:.2f}× direct (target ≥ 500 MB/s)"))


# --- E2B's SDK on Lizard ---------------------------------------------------------------------------------


def e2b_figures(res: Results, srv: Server, runs: int, code_runs: int) -> None:
    """E2B's SDK (e2b-code-interpreter, test/requirements.txt) on Lizard's /e2b surface with only the three
    variables of docs/e2b.md, beside Lizard's own Python SDK call for call (alternating which goes first):
    run_code("1+1") round trips on one sandbox each, and create → first result → kill (issue 23)."""
    from lizard import CodeSandbox

    for var in ("E2B_DOMAIN", "E2B_ACCESS_TOKEN", "E2B_DEBUG"):
        os.environ.pop(var, None)
    os.environ.update(E2B_API_URL=f"{srv.url}/e2b", E2B_SANDBOX_URL=f"{srv.url}/e2b/sandbox", E2B_API_KEY=srv.key)
    from e2b_code_interpreter import Sandbox as E2BSandbox

    def e2b_run(sb: Any) -> None:
        ex = sb.run_code("1+1")
        if ex.error is not None or ex.text != "2":
            raise RuntimeError(f"E2B run_code(\"1+1\") gave {ex!r}")

    def e2b_first() -> float:
        t0 = time.perf_counter()
        sb = E2BSandbox.create(timeout=600)
        try:
            e2b_run(sb)
            return (time.perf_counter() - t0) * 1000
        finally:
            sb.kill()

    def lizard_first() -> float:
        t0 = time.perf_counter()
        sb = CodeSandbox.create(**srv.sdk(), timeout_ms=600_000)
        try:
            must_result(sb.run_code("1+1"), "text/plain")
            return (time.perf_counter() - t0) * 1000
        finally:
            sb.kill()
            sb.close()

    log("E2B's SDK on Lizard beside Lizard's SDK: create → first result, run_code(\"1+1\")")
    ours, theirs = [], []
    for i in range(runs):
        for fn, out in ((lizard_first, ours), (e2b_first, theirs))[:: 1 if i % 2 == 0 else -1]:
            out.append(fn())
    base = "create → first runCode(\"1+1\") result, Lizard SDK (beside E2B's)"
    res.add(Figure(base, ours))
    res.add(Figure("create → first run_code(\"1+1\") result, E2B SDK on Lizard", theirs, baseline=base))

    e2b_sb = E2BSandbox.create(timeout=600)
    try:
        with CodeSandbox.create(**srv.sdk(), timeout_ms=600_000) as sb:
            def lizard_rt() -> float:
                ms, run = timed(lambda: sb.run_code("1+1"))
                must_result(run, "text/plain")
                return ms
            ours, theirs = [], []
            for i in range(code_runs + 10):
                pair = ((lizard_rt, ours), (lambda: timed(lambda: e2b_run(e2b_sb))[0], theirs))
                for fn, out in pair[:: 1 if i % 2 == 0 else -1]:
                    ms = fn()
                    if i >= 10:
                        out.append(ms)
    finally:
        e2b_sb.kill()
    base = "runCode(\"1+1\"), Lizard SDK (beside E2B's)"
    res.add(Figure(base, ours))
    res.add(Figure("run_code(\"1+1\"), E2B SDK on Lizard", theirs, baseline=base, note="target ≤ 1.2×"))


# The secrets section's "internet": a namespace of the bench's own with one address, named only by the node
# resolver's test records, serving HTTPS with a CA made for the run (docs/secrets.md). No packet leaves.
SECRETS_NS, SECRETS_IF, SECRETS_HOST_ADDR, SECRETS_ADDR = "lizb-sec", "lzb-sec0", "198.51.100.29", "203.0.113.29"
SECRETS_NAME = "bench.secret.test"

# The upstream, run in the namespace by the host's python3: HTTPS on 443, "ok" to every GET, with the
# Authorization it got checked (a 403 without the secret, so a run that injects nothing shows).
SECRETS_UPSTREAM = r"""
import http.server, socketserver, ssl, sys
want = "Bearer " + sys.argv[3]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    def do_GET(self):
        ok = self.path != "/secret" or self.headers.get("Authorization") == want
        body = b"ok" if ok else b"no secret"
        # One write: the head and the body in one segment, as a real server sends a small answer.
        self.wfile.write(b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n\r\n%s" % (200 if ok else 403, len(body), body))
    def log_message(self, *a): pass
class S(http.server.ThreadingHTTPServer):
    def server_bind(self):  # without HTTPServer's reverse lookup of the address: no DNS in the namespace
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = sys.argv[1], 443
srv = S((sys.argv[1], 443), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[2])
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
"""

# Timed inside the sandbox, so that only the network path differs: n HTTPS GETs, each on a new
# connection (TCP, the TLS handshake, the request, the answer), to ADDR with SNI NAME.
SECRETS_CLIENT = r"""
import json, socket, ssl, time
def _bench(path, ctx, n):
    out = []
    for _ in range(n):
        t = time.perf_counter()
        s = ctx.wrap_socket(socket.create_connection(("%(addr)s", 443), timeout=10), server_hostname="%(name)s")
        s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: %(name)s\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
        s.close()
        if not data.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(data[:400])
        out.append((time.perf_counter() - t) * 1000)
    return out
"""


def secrets_section(res: Results, a: argparse.Namespace, bin_dir: Path) -> None:
    """--only secrets (and the whole bench): an HTTPS request whose header the node sets from a secret (TLS
    terminated with the sandbox's CA, the upstream verified) against the same request straight to the
    upstream, call for call in one sandbox each, the connection new each time (issue 24: ≤ 3 ms p50 over
    direct)."""
    import httpx
    from lizard import CodeSandbox

    tmp = Path(tempfile.mkdtemp(prefix="lizard-bench-secrets-"))
    undo = [CLEANUP.push(f"removing {tmp}", lambda: shutil.rmtree(tmp, ignore_errors=True))]
    # A CA and a certificate for the name, made for this run.
    ca_key, ca, key, csr, crt = (tmp / n for n in ("ca.key", "ca.pem", "leaf.key", "leaf.csr", "leaf.pem"))
    ossl = lambda *args: subprocess.run(["openssl", *args], check=True, capture_output=True)
    ossl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(ca_key),
         "-out", str(ca), "-days", "1", "-subj", "/CN=lizard bench CA",
         "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    ossl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(key), "-out", str(csr),
         "-subj", f"/CN={SECRETS_NAME}")
    (tmp / "ext").write_text(f"subjectAltName=DNS:{SECRETS_NAME}\nextendedKeyUsage=serverAuth\n"
                             "keyUsage=critical,digitalSignature\nauthorityKeyIdentifier=keyid\nsubjectKeyIdentifier=hash\n")
    ossl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial", "-out", str(crt),
         "-days", "1", "-extfile", str(tmp / "ext"))
    (tmp / "chain.pem").write_text(crt.read_text() + key.read_text())

    ip = lambda *args: subprocess.run(["ip", *args], check=True, capture_output=True)
    subprocess.run(["ip", "netns", "del", SECRETS_NS], capture_output=True)
    subprocess.run(["ip", "link", "del", SECRETS_IF], capture_output=True)
    ip("netns", "add", SECRETS_NS)
    undo.append(CLEANUP.push(f"deleting namespace {SECRETS_NS}", lambda: subprocess.run(["ip", "netns", "del", SECRETS_NS])))
    ip("link", "add", SECRETS_IF, "type", "veth", "peer", "name", "lzb-peer", "netns", SECRETS_NS)
    undo.append(CLEANUP.push(f"deleting link {SECRETS_IF}",
                             lambda: subprocess.run(["ip", "link", "del", SECRETS_IF], capture_output=True)))
    ip("addr", "add", SECRETS_HOST_ADDR + "/32", "dev", SECRETS_IF)
    ip("link", "set", SECRETS_IF, "up")
    subprocess.run(["sysctl", "-qw", f"net.ipv4.conf.{SECRETS_IF}.forwarding=1"], check=True)
    for args in (("link", "set", "lo", "up"), ("link", "set", "lzb-peer", "up"),
                 ("addr", "add", SECRETS_ADDR + "/32", "dev", "lzb-peer"),
                 ("route", "add", SECRETS_HOST_ADDR + "/32", "dev", "lzb-peer"),
                 ("route", "add", "default", "via", SECRETS_HOST_ADDR, "dev", "lzb-peer", "onlink")):
        ip("-n", SECRETS_NS, *args)
    ip("route", "add", SECRETS_ADDR + "/32", "dev", SECRETS_IF)
    value = "bench-" + os.urandom(12).hex()
    up = subprocess.Popen(["ip", "netns", "exec", SECRETS_NS, "python3", "-c", SECRETS_UPSTREAM, SECRETS_ADDR,
                           str(tmp / "chain.pem"), value], start_new_session=True)
    undo.append(CLEANUP.push(f"stopping the upstream (pid {up.pid})", lambda: (up.kill(), up.wait())))

    srv = Server(bin_dir, a.cache_dir, ["--warm-pool", "0", "--egress=internet", "--egress-allow=203.0.113.28/30",
                                        f"--egress-test-hosts={SECRETS_NAME}={SECRETS_ADDR}",
                                        f"--egress-extra-roots={ca}"], "secrets")
    with httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {srv.key}"}, timeout=60) as c:
        c.put("/v1/secrets/BENCH_TOKEN", json={"value": value, "hosts": [SECRETS_NAME]}).raise_for_status()
    inject = [{"domain": SECRETS_NAME, "headers": {"Authorization": "Bearer {{ secrets.BENCH_TOKEN }}"}}]
    client = SECRETS_CLIENT % {"addr": SECRETS_ADDR, "name": SECRETS_NAME}
    with CodeSandbox.create(**srv.sdk(), timeout_ms=600_000,
                            network={"default": "deny", "allow": [SECRETS_NAME], "inject": inject}) as via, \
            CodeSandbox.create(**srv.sdk(), timeout_ms=600_000) as direct:
        via.run_code(client + "_ctx = ssl.create_default_context()")  # the system bundle, with its CA
        direct.run_code(client + f"_ctx = ssl.create_default_context(cadata={ca.read_text()!r})")
        ours: List[float] = []
        base: List[float] = []
        n, rounds = max(10, a.code_runs // 10), 10
        for i in range(rounds + 1):  # round 0 warms both paths (leaf certificate, sessions) and is dropped
            for sb, path, into in ((via, "/secret", ours), (direct, "/", base)):
                run = sb.run_code(f"print(json.dumps(_bench({path!r}, _ctx, {n})))")
                if run.error:
                    raise RuntimeError(f"secrets bench: {run.error.name}: {run.error.message}")
                if i:
                    into.extend(json.loads(run.stdout))
    srv.stop()
    for done in reversed(undo):
        done()
    direct_name = "HTTPS GET on a new connection, direct"
    res.add(Figure(direct_name, base))
    res.add(Figure("HTTPS GET on a new connection, secret header set by the node (TLS terminated)", ours,
                   baseline=direct_name, note="target ≤ 3 ms over direct (p50)"))

def e2b_section(res: Results, a: argparse.Namespace, bin_dir: Path) -> None:
    """--only e2b: E2B's figures alone, on a server of their own (no warm pool) after a warm-up."""
    srv = Server(bin_dir, a.cache_dir, ["--warm-pool", "0"], "e2b")
    warm_up(srv)
    e2b_figures(res, srv, a.runs, a.code_runs)
    srv.stop()


def image_section(res: Results, a: argparse.Namespace, bin_dir: Path, rootfs: Path) -> None:
    """--only images (and the whole bench), issue 36: a template built on an OCI image of about 200 MB (cut by
    bench/images from the interpreter template's files and served by go-containerregistry's registry on
    loopback), pull + build timed through Template.build, cold (a server and an image repository of its own per run:
    no layer cached) and with the layers cached (the same image again with another recipe, so a new build); the
    templates are deleted at the end of each run (built ones live in the shared cache directory); then
    create → first command (`true`) of a sandbox of that template beside one of the interpreter template,
    alternating, on the same server."""
    from lizard import CodeSandbox, Template

    tmp = Path(tempfile.mkdtemp(prefix="lizard-bench-images-"))
    CLEANUP.push(f"removing {tmp}", lambda: shutil.rmtree(tmp, ignore_errors=True))
    subprocess.run(["go", "build", "-o", str(tmp / "images"), "./bench/images"], cwd=REPO, check=True)
    reg = subprocess.Popen([str(tmp / "images"), "--rootfs", str(rootfs), "--repos", str(a.image_runs)], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True, start_new_session=True)

    def stop_registry() -> None:
        reg.stdin.close()  # it serves until its stdin closes
        try:
            reg.wait(timeout=10)
        except subprocess.TimeoutExpired:
            reg.kill()
            reg.wait()
    stop = CLEANUP.push(f"stopping the image registry (pid {reg.pid})", stop_registry)
    line = reg.stdout.readline()
    if not line:
        raise RuntimeError(f"bench/images exited ({reg.wait()}) without serving its image")
    img = json.loads(line)
    size = f"{img['bytes'] / 1e6:.0f} MB in {img['layers']} layers, {img['compressedBytes'] / 1e6:.0f} MB gzipped"
    log(f"image {img['digest']} ({size}) on {img['registry']} in {len(img['refs'])} repositories")

    def drop_layers() -> None:
        # The servers' layer cache is the cache directory's, shared, one directory per repository
        # (internal/oci, Puller.scope: the first 8 bytes of the SHA-256 of its name, hex): the bench's go.
        import hashlib
        for ref in img["refs"]:
            scope = hashlib.sha256(ref.rsplit(":", 1)[0].encode()).hexdigest()[:16]
            shutil.rmtree(Path(a.cache_dir, "oci", "blobs", scope), ignore_errors=True)
    CLEANUP.push("removing the bench image's layers from the layer cache", drop_layers)

    cold, cached, server_cold, server_cached, on_image, on_interp, restored = [], [], [], [], [], [], []
    pull_cold: List[float] = []
    pull_cached: List[float] = []

    def build(srv: Server, name: str, recipe: Dict[str, Any], want_cached: int) -> tuple:
        texts: List[str] = []
        pulled: List[float] = []  # when the build said it had the image's files (its "pulled ..." line)
        t0 = time.perf_counter()

        def event(ev: Dict[str, Any]) -> None:
            texts.append(f"{ev.get('name', '')}{ev.get('text', '')}")
            if texts[-1].startswith("pulled "):
                pulled.append((time.perf_counter() - t0) * 1000)
        ms, info = timed(lambda: Template.build(name, recipe, **srv.sdk(), timeout=1800, on_event=event))
        hits = sum(": cached" in t for t in texts)
        if info.digest != img["digest"] or info.build_ms == 0 or hits != want_cached:
            raise RuntimeError(f"building {name}: digest {info.digest}, build_ms {info.build_ms}, {hits} layers "
                               f"cached (want {img['digest']}, a fresh build, {want_cached}):\n" + "\n".join(texts))
        if not pulled:
            raise RuntimeError(f"building {name}: no \"pulled\" event:\n" + "\n".join(texts))
        return ms, info.build_ms, pulled[0]

    def first_command(srv: Server, template: Optional[str]) -> float:
        t0 = time.perf_counter()
        sb = CodeSandbox.create(**srv.sdk(), timeout_ms=600_000, **({"template": template} if template else {}))
        try:
            r = sb.process.exec("true")
            if r.exit_code != 0:
                raise RuntimeError(f"`true` in a sandbox of {template or 'interpreter'} exited {r.exit_code}")
            return (time.perf_counter() - t0) * 1000
        finally:
            sb.kill()
            sb.close()

    for i in range(a.image_runs):
        srv = Server(bin_dir, a.cache_dir, ["--warm-pool", "0", "--registry-allow", img["registry"],
                                            "--template-builds-per-hour", "0"], f"images{i}")
        # Built templates and pulled layers sit in the cache directory all servers share: a recipe new to
        # it (a run's nonce) so that each build is one, a repository of the run's own so that its pull is cold.
        nonce = os.urandom(6).hex()
        ms, server_ms, pull_ms = build(srv, "bench-image", {"from": img["refs"][i], "env": {"BENCH_RUN": nonce}}, 0)
        cold.append(ms)
        server_cold.append(server_ms)
        pull_cold.append(pull_ms)
        ms, server_ms, pull_ms = build(srv, "bench-image-env", {"from": img["refs"][i], "env": {"BENCH_RUN": nonce + "-2"}},
                                       img["layers"])
        cached.append(ms)
        server_cached.append(server_ms)
        pull_cached.append(pull_ms)
        if i == a.image_runs - 1:  # creates on the last run's server, once its interpreter snapshot is there
            wait_snapshot(srv)
            warm_up(srv)
            first_command(srv, "bench-image")  # first-use costs out, as warm_up's
            for j in range(a.runs):
                pair = ((lambda: first_command(srv, None), on_interp), (lambda: first_command(srv, "bench-image"), on_image))
                for fn, out in pair[:: 1 if j % 2 == 0 else -1]:
                    out.append(fn())
            timings = srv.log_timings()
            restored = [t.get("restored", 0.0) for t in timings.values()]
        srv.kill_all()
        for name in ("bench-image", "bench-image-env"):  # frees them in the shared cache directory
            Template.delete(name, **srv.sdk())
        srv.stop()
    stop()

    base = f"template from a {img['bytes'] / 1e6:.0f} MB OCI image: pull + build, cold (Template.build)"
    res.add(Figure(base, cold, note=f"{size}, loopback registry; server's build_ms p50 {pct(server_cold, 50):.0f} ms"))
    res.add(Figure(f"template from the same image, layers cached: pull + build (Template.build)", cached, baseline=base,
                   note=f"a new recipe on the same image; server's build_ms p50 {pct(server_cached, 50):.0f} ms"))
    pull = f"the {img['bytes'] / 1e6:.0f} MB image's pull alone (to the build's \"pulled\" line), cold"
    res.add(Figure(pull, pull_cold, note="fetched, checked, unpacked into the build's root"))
    res.add(Figure("the same image's pull alone, layers cached", pull_cached, baseline=pull,
                   note="unpacked from the cache"))
    interp = "create → first command (`true`), interpreter template (beside the image template)"
    res.add(Figure(interp, on_interp))
    res.add(Figure(f"create → first command (`true`), template from the {img['bytes'] / 1e6:.0f} MB image", on_image,
                   baseline=interp, note=f"{sum(restored):.0f} of {len(restored)} creates restored a snapshot"))


def desktop_section(res: Results, a: argparse.Namespace, bin_dir: Path) -> None:
    """--only desktop (and the whole bench), issue 39: the desktop template (templates/desktop/recipe.yaml, Xvfb,
    Xfce, Chromium) beside the interpreter template on one server of its own. The template is built (its time and
    size a note: a project's own build, minutes) and its snapshot waited for; then, alternating which goes first,
    create → first command (`true`) of an interpreter sandbox beside create → first screenshot of a desktop one,
    through Lizard's SDK (scrot, then the PNG read back) and through E2B's Desktop SDK (`Sandbox.create()`, which
    also runs its Xvfb, xdpyinfo and startxfce4 round trips, and `screenshot()`); screenshot round trips on one
    desktop sandbox beside a command round trip on an interpreter one; and the memory of idle sandboxes of each
    template, held a few at a time (PSS of every process of each, the memory charged to its cgroup, the host's
    MemAvailable drop: the last is the machine's, shared and noisy). The template is deleted at the end."""
    from lizard import CodeSandbox

    def png(b: bytes) -> bytes:
        if bytes(b[:8]) != b"\x89PNG\r\n\x1a\n":
            raise RuntimeError(f"a screenshot that is no PNG: {bytes(b[:16])!r}")
        return b

    def lizard_shot(sb: Any) -> None:
        r = sb.process.exec("scrot --pointer --overwrite /tmp/bench-shot.png")
        if r.exit_code != 0:
            raise RuntimeError(f"scrot exited {r.exit_code}: {r.stderr}")
        png(sb.files.read("/tmp/bench-shot.png", format="bytes"))

    def exec_true(sb: Any) -> None:
        if (r := sb.process.exec("true")).exit_code != 0:
            raise RuntimeError(f"`true` exited {r.exit_code}")

    srv = Server(bin_dir, a.cache_dir, ["--warm-pool", "0", "--template-builds-per-hour", "0"], "desktop")
    env = dict(os.environ, LIZARD_API_URL=srv.url, LIZARD_API_KEY=srv.key)
    lizard = [str(bin_dir / "lizard")]
    delete = CLEANUP.push("deleting the bench's desktop template (its 2 GiB build in the cache directory)", lambda: subprocess.run(
        lizard + ["template", "delete", "desktop"], env=env, capture_output=True, timeout=120))
    log("desktop: building templates/desktop/recipe.yaml (minutes)")
    build_ms, out = timed(lambda: subprocess.run(lizard + ["template", "build", "--quiet", "-f", str(REPO / "templates" / "desktop" / "recipe.yaml")],
                                                 env=env, capture_output=True, text=True, timeout=3600))
    if out.returncode != 0:
        raise RuntimeError(f"building the desktop template:\n{out.stdout}\n{out.stderr}")
    built = out.stdout.strip().splitlines()[0] if out.stdout.strip() else ""
    # A custom template's snapshot is made on its first use: one create boots it cold and starts that.
    t0 = time.perf_counter()
    with CodeSandbox.create(**srv.sdk(), timeout_ms=600_000, template="desktop") as sb:
        exec_true(sb)
    cold_ms = (time.perf_counter() - t0) * 1000
    deadline = time.monotonic() + 1800
    while not re.search(r'msg="template snapshot (made|found)" template=desktop@', srv.log_path.read_text(errors="replace")):
        if srv.proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"no template snapshot of the desktop:\n{srv.logs()}")
        time.sleep(1)
    snap = re.findall(r'msg="template snapshot made" template=desktop@\S+ image=\S+ took=(\S+)', srv.log_path.read_text(errors="replace"))

    for var in ("E2B_DOMAIN", "E2B_ACCESS_TOKEN", "E2B_DEBUG"):
        os.environ.pop(var, None)
    os.environ.update(E2B_API_URL=f"{srv.url}/e2b", E2B_SANDBOX_URL=f"{srv.url}/e2b/sandbox", E2B_API_KEY=srv.key)
    from e2b_desktop import Sandbox as Desktop

    def first(template: Optional[str], then: Callable[[Any], None]) -> float:
        t0 = time.perf_counter()
        sb = CodeSandbox.create(**srv.sdk(), timeout_ms=600_000, **({"template": template} if template else {}))
        try:
            then(sb)
            return (time.perf_counter() - t0) * 1000
        finally:
            sb.kill()
            sb.close()

    def e2b_first() -> float:
        t0 = time.perf_counter()
        sb = Desktop.create(timeout=600)
        try:
            png(sb.screenshot())
            return (time.perf_counter() - t0) * 1000
        finally:
            sb.kill()

    warm_up(srv)
    first("desktop", lizard_shot)  # first-use costs out (the template's pages), as warm_up's
    log("desktop: create → first screenshot beside create → first command of the interpreter template")
    interp, ours, theirs = [], [], []
    for i in range(a.desktop_runs):
        trio = ((lambda: first(None, exec_true), interp), (lambda: first("desktop", lizard_shot), ours), (e2b_first, theirs))
        for fn, out_ in trio[:: 1 if i % 2 == 0 else -1]:
            out_.append(fn())
    base = "create → first command (`true`), interpreter template (beside the desktop)"
    res.add(Figure(base, interp))
    res.add(Figure("create → first screenshot, desktop template, Lizard SDK (exec scrot, read the PNG)", ours, baseline=base,
                   note=f"build {build_ms / 1000:.0f} s ({built}); the first create, cold: {cold_ms / 1000:.0f} s; "
                        f"the snapshot {snap[-1] if snap else '?'}"))
    res.add(Figure("create → first screenshot, desktop template, E2B Desktop SDK (Sandbox.create(), screenshot())", theirs,
                   baseline=base, note="create runs the SDK's Xvfb, xdpyinfo, startxfce4 and pgrep round trips"))

    log("desktop: screenshot round trips beside command round trips")
    rt_true, rt_ours, rt_theirs = [], [], []
    e2b_sb = Desktop.create(timeout=600)
    try:
        with CodeSandbox.create(**srv.sdk(), timeout_ms=600_000) as isb, \
                CodeSandbox.create(**srv.sdk(), timeout_ms=600_000, template="desktop") as dsb:
            for i in range(a.desktop_shots + 3):
                trio = ((lambda: timed(lambda: exec_true(isb))[0], rt_true), (lambda: timed(lambda: lizard_shot(dsb))[0], rt_ours),
                        (lambda: timed(lambda: png(e2b_sb.screenshot()))[0], rt_theirs))
                for fn, out_ in trio[:: 1 if i % 2 == 0 else -1]:
                    ms = fn()
                    if i >= 3:
                        out_.append(ms)
            size = len(dsb.files.read("/tmp/bench-shot.png", format="bytes"))
    finally:
        e2b_sb.kill()
    base = "command round trip (`true`), interpreter template, Lizard SDK (beside the screenshots)"
    res.add(Figure(base, rt_true))
    res.add(Figure("screenshot round trip, desktop, Lizard SDK (exec scrot, read the PNG)", rt_ours, baseline=base,
                   note=f"1024×768 PNG of the idle desktop, {size / 1024:.0f} KiB"))
    res.add(Figure("screenshot round trip, desktop, E2B Desktop SDK (screenshot(): scrot, read, remove)", rt_theirs, baseline=base))

    def idle(template: Optional[str]) -> tuple:
        """k idle sandboxes of template held: per sandbox PSS, cgroup memory, MemAvailable drop (MiB)."""
        time.sleep(3)
        avail0 = meminfo("MemAvailable")
        held = [CodeSandbox.create(**srv.sdk(), timeout_ms=600_000, **({"template": template} if template else {}))
                for _ in range(a.desktop_idle)]
        try:
            for sb in held:
                exec_true(sb)
            time.sleep(10)  # past the restore's page-ins and the desktop's first repaints
            ids = [sb.sandbox_id for sb in held]
            pss, procs = sandbox_pss(ids)
            k = len(held) * 2**20
            return pss / k, sandbox_memcg(ids) / k, (avail0 - meminfo("MemAvailable")) / k, procs // len(held)
        finally:
            for sb in held:
                sb.kill()
                sb.close()

    log(f"desktop: memory of {a.desktop_idle} idle sandboxes of each template")
    ipss, imcg, idrop, iprocs = idle(None)
    dpss, dmcg, ddrop, dprocs = idle("desktop")
    held = f"{a.desktop_idle} held at once, 10 s after create"
    rows = (("PSS of all its host processes", ipss, dpss, f"; {iprocs} and {dprocs} processes each (Sentry, gofer, systrap stubs), each address space once"),
            ("memory charged to its cgroup (shmem + anon)", imcg, dmcg, ""),
            ("host MemAvailable drop", idrop, ddrop, "; the machine's: other work moves it"))
    for what, i_, d_, extra in rows:
        base = f"idle memory per sandbox, interpreter template: {what}"
        res.add(Figure(base, value=i_, unit="MiB", note=held))
        res.add(Figure(f"idle memory per sandbox, desktop template: {what}", value=d_, unit="MiB", baseline=base, note=held + extra))
    srv.kill_all()
    delete()
    srv.stop()


def wait_snapshot(srv: Server, seconds: float = 1800) -> None:
    """Wait until the server has its template snapshot, so that creates restore (made, or found)."""
    deadline = time.monotonic() + seconds
    while not re.search(r'msg="template snapshot (made|found)"', srv.log_path.read_text(errors="replace")):
        if srv.proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"lizard serve never made its template snapshot:\n{srv.logs()}")
        time.sleep(0.5)


# --- idle memory to swap (issue 37) ---------------------------------------------------------------------


def swap_kib() -> int:
    """The size of the host's swap devices (/proc/swaps), KiB."""
    lines = Path("/proc/swaps").read_text().splitlines()[1:]
    return sum(int(line.split()[2]) for line in lines if len(line.split()) >= 3)


_ZRAM_ON = False


def zram_on(size: str) -> None:
    """--reclaim-zram: swap on /dev/zram0 (lz4) for the section, turned off and reset at the end — the
    operator's step of docs/operations.md, taken only when asked and said in the log. zram0 must be unused. Once
    per run: a second section asking for it finds it on."""
    global _ZRAM_ON
    if _ZRAM_ON:
        return
    z = Path("/sys/block/zram0")
    if not z.exists() or int((z / "disksize").read_text()) != 0:
        raise RuntimeError("--reclaim-zram: /dev/zram0 is missing or in use (disksize not 0); set swap up yourself "
                           "(docs/operations.md) and leave the flag out")
    algos = (z / "comp_algorithm").read_text()
    for algo in ("zstd", "lz4"):
        if algo in algos.replace("[", " ").replace("]", " ").split():
            (z / "comp_algorithm").write_text(algo)
            break
    (z / "disksize").write_text(size)
    subprocess.run(["mkswap", "/dev/zram0"], check=True, capture_output=True)
    subprocess.run(["swapon", "/dev/zram0"], check=True)

    def off() -> None:
        subprocess.run(["swapoff", "/dev/zram0"], check=False)
        (z / "reset").write_text("1")
        log("idle-reclaim: zram swap turned off and /dev/zram0 reset")

    CLEANUP.push("turning the bench's zram swap off", off)
    _ZRAM_ON = True
    log(f"idle-reclaim: TURNED ON swap on /dev/zram0 ({size}, {(z / 'comp_algorithm').read_text().strip()}) for this "
        "section (--reclaim-zram); it is turned off at the end")


def cgroup_swap(sid: str) -> int:
    """Bytes of sandbox sid's memory in swap: its v1 memory cgroup's swap, or v2's memory.swap.current."""
    try:
        return int(Path(f"/sys/fs/cgroup/lizard/{sid}/memory.swap.current").read_text())
    except (FileNotFoundError, ValueError):
        pass
    try:
        kv = dict(line.split() for line in Path(f"/sys/fs/cgroup/memory/lizard/{sid}/memory.stat").read_text().splitlines())
        return int(kv.get("swap", 0))
    except FileNotFoundError:
        return 0


def qemu_pid(sid: str) -> int:
    """The QEMU process of sandbox sid (its -name is lizard-ID), 0 if none."""
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd and cmd[0].endswith(b"qemu-system-x86_64") and f"lizard-{sid}".encode() in cmd:
            return int(p.name)
    return 0


def proc_status_kib(pid: int, key: str) -> int:
    """A /proc/PID/status field (VmSwap, VmRSS...), in bytes; 0 if the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class ReclaimMeter:
    """What the idle-reclaim section reads of a sandbox, by backend: gVisor's memory cgroup (swap, its charge,
    shmem + anonymous), or QEMU's process (VmSwap, private memory — what each further VM costs — and PSS)."""

    def __init__(self, runtime: str) -> None:
        self.runtime, self.pids = runtime, {}  # type: str, Dict[str, int]

    def pid(self, sid: str) -> int:
        if sid not in self.pids:
            self.pids[sid] = qemu_pid(sid)
        return self.pids[sid]

    def swap(self, sid: str) -> int:
        return cgroup_swap(sid) if self.runtime == "gvisor" else proc_status_kib(self.pid(sid), "VmSwap")

    def charged(self, ids: List[str]) -> int:
        if self.runtime == "gvisor":
            return cgroup_usage(ids)
        rollups = [smaps(self.pid(i)) for i in ids]
        return sum(r.get("Private_Clean", 0) + r.get("Private_Dirty", 0) for r in rollups)

    def resident(self, ids: List[str]) -> int:
        return sandbox_memcg(ids) if self.runtime == "gvisor" else sum(smaps(self.pid(i)).get("Pss", 0) for i in ids)


def zram_used() -> int:
    """Bytes of RAM /dev/zram0 takes (mm_stat's mem_used_total): what the squeezed pages cost compressed. 0 without
    zram."""
    try:
        return int(Path("/sys/block/zram0/mm_stat").read_text().split()[2])
    except (FileNotFoundError, IndexError, ValueError):
        return 0


def cgroup_usage(ids: List[str]) -> int:
    """Summed memory charged to sandboxes ids' memory cgroups (v1 memory.usage_in_bytes: RAM of every kind, the
    page cache and the kernel's own included; v2 memory.current)."""
    total = 0
    for sid in ids:
        for path in (f"/sys/fs/cgroup/memory/lizard/{sid}/memory.usage_in_bytes", f"/sys/fs/cgroup/lizard/{sid}/memory.current"):
            try:
                total += int(Path(path).read_text())
                break
            except (FileNotFoundError, ValueError):
                continue
    return total


def proc_cpu_s(pid: int) -> float:
    """utime + stime of process pid, seconds: a squeeze is the writer's CPU (lizard serve's)."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def reclaim_section(res: Results, a: argparse.Namespace, bin_dir: Path) -> None:
    """Issue 37's idle memory to swap: --reclaim-n idle interpreter sandboxes (default preloads) on a server
    without --idle-reclaim, then on one with --idle-reclaim --reclaim-after, in the same run. For each: the
    host's MemAvailable drop per sandbox once idle (without the flag after the same idle time the other waits
    for its squeezes), the first run_code("1+1") after the idle time in a third of them, the first
    `import pandas; pd.DataFrame(...)` in another third and a kernel restart (restart_context of the default
    Python context) with its first run_code("1+1") in the last, each checked (a variable set at create must read
    back). With the flag, also the drop before the squeezes, what stays resident and what is in swap, and
    lizard serve's CPU per squeeze. Needs swap (the operator's step; --reclaim-zram takes it for the run).
    --reclaim-runtime qemu: the same on QEMU VMs under TCG, where "by account" is each QEMU's private memory
    and the resident figure its PSS."""
    from lizard import CodeSandbox

    if a.reclaim_zram:
        zram_on(a.reclaim_zram)
    if swap_kib() == 0:
        res.add(Figure("idle-reclaim: MemAvailable drop per idle sandbox", note="not run: the host has no swap "
                       "(docs/operations.md, or --reclaim-zram 8G to take zram swap for the run)"))
        return
    n, after = a.reclaim_n, a.reclaim_after
    rt = getattr(a, "reclaim_runtime", "gvisor")
    m = ReclaimMeter(rt)
    backend = ["--runtime", "qemu", "--qemu-accel", "tcg"] if rt == "qemu" else []
    rows: Dict[str, Dict[str, Any]] = {}
    for side, flags in (("off", []), ("on", ["--idle-reclaim", f"{after:g}s"])):
        srv = Server(bin_dir, a.cache_dir, [*backend, "--warm-pool", "0", *flags], f"reclaim-{side}", runtime=rt)
        wait_snapshot(srv)
        warm_up(srv)
        time.sleep(3)
        avail0, zram0 = meminfo("MemAvailable"), zram_used()
        held: List[str] = []
        lock = threading.Lock()
        http = sdk_http(srv)
        done = CLEANUP.push("killing the idle-reclaim section's sandboxes", lambda: (kill_ids(srv, held), http.close()))

        def one() -> None:
            sb = CodeSandbox.create(**srv.sdk(), timeout_ms=3_600_000)
            with lock:
                held.append(sb.sandbox_id)
            try:
                must_result(sb.run_code("kept = 41 + 1\n1+1"), "text/plain")
            finally:
                sb.close()

        log(f"idle-reclaim ({side}): {n} idle sandboxes, {a.density_batch} creates at a time")
        with cf.ThreadPoolExecutor(a.density_batch) as ex:
            for f in [ex.submit(one) for _ in range(n)]:
                f.result()
        time.sleep(5)
        avail1 = meminfo("MemAvailable")
        row: Dict[str, Any] = {"held": len(held), "dropBeforeMiB": (avail0 - avail1) / len(held) / 2**20,
                               "chargedBeforeMiB": m.charged(list(held)) / len(held) / 2**20, "loadCreated": loadavg()}
        cpu0, t0 = proc_cpu_s(srv.proc.pid), time.perf_counter()
        # Idle for `after`, then the sweeps (every after/4, at least 1 s) squeeze one sandbox at a time.
        deadline = t0 + after + 10 + 5 * n
        if side == "on":
            while time.perf_counter() < deadline and sum(m.swap(i) >= 16 << 20 for i in held) < len(held):
                time.sleep(1)
            # The first squeeze leaves what was touched just before it; the next sweeps after `after` take it.
            time.sleep(after + 5)
        else:
            time.sleep(after + 10)
        row["waitS"] = time.perf_counter() - t0
        row["serveCpuEachS"] = (proc_cpu_s(srv.proc.pid) - cpu0) / len(held)
        time.sleep(3)
        avail2 = meminfo("MemAvailable")
        row["dropMiB"] = (avail0 - avail2) / len(held) / 2**20
        # MemAvailable moves with the other users of a shared host by gigabytes: the same sandboxes' change over
        # the idle wait (the squeezes, with the flag) is the tighter figure, and what the host holds for them by
        # account — their cgroups' charge and zram's RAM — the steadiest.
        row["freedOverIdleMiB"] = (avail2 - avail1) / len(held) / 2**20
        row["chargedMiB"] = m.charged(list(held)) / len(held) / 2**20
        row["zramMiB"] = (zram_used() - zram0) / len(held) / 2**20
        row["residentMiB"] = m.resident(list(held)) / len(held) / 2**20
        row["swapMiB"] = sum(m.swap(i) for i in held) / len(held) / 2**20
        row["squeezed"] = sum(m.swap(i) >= 16 << 20 for i in held)
        row["loadIdle"] = loadavg()
        first, pandas, restart, nexts = [], [], [], []
        for k, sid in enumerate(list(held)):
            sb = CodeSandbox(sid, _http=http)
            t1 = time.perf_counter()
            if k % 3 == 2:
                # A kernel restart: a fresh Python (IPython, no preloads) started in the squeezed sandbox, whose
                # Sentry's page cache of those files went to swap with the rest, then its first call.
                sb.restart_context("default-python")
                run = sb.run_code("1+1", timeout_ms=60_000)
                restart.append((time.perf_counter() - t1) * 1000)
                if run.error or not run.results or run.results[0].data != "2":
                    raise RuntimeError(f"idle-reclaim ({side}): {sid} answered {run!r} to 1+1 after a restart")
                continue
            code = "1+1" if k % 3 == 0 else "import pandas as pd\nint(pd.DataFrame({'a': range(100)})['a'].sum())"
            run = sb.run_code(code, timeout_ms=30_000)
            (first if k % 3 == 0 else pandas).append((time.perf_counter() - t1) * 1000)
            want = "2" if k % 3 == 0 else "4950"
            if run.error or not run.results or run.results[0].data != want:
                raise RuntimeError(f"idle-reclaim ({side}): {sid} answered {run!r} to {code!r}; want {want}")
            kept = sb.run_code("kept", timeout_ms=30_000)
            if kept.error or not kept.results or kept.results[0].data != "42":
                raise RuntimeError(f"idle-reclaim ({side}): {sid} lost its kernel's variable: {kept!r}")
            if k % 3 == 0:
                # The calls after: how soon a squeezed sandbox is back to its speed (the pages the first call
                # did not bring back come with the next ones).
                for _ in range(5):
                    t2 = time.perf_counter()
                    must_result(sb.run_code("1+1", timeout_ms=30_000), "text/plain")
                    nexts.append((time.perf_counter() - t2) * 1000)
        row["loadProbes"] = loadavg()
        row["first"], row["pandas"], row["restart"], row["next"] = first, pandas, restart, nexts
        rows[side] = row
        log(f"idle-reclaim ({side}): {row}")
        done()
        srv.stop()
    off, on = rows["off"], rows["on"]
    tag = f", {n} held" + (", QEMU (TCG)" if rt == "qemu" else "")
    account = "its QEMU's private memory" if rt == "qemu" else "its cgroup's charge"
    resident = "PSS" if rt == "qemu" else "shmem + anon"
    qtag = ", QEMU (TCG)" if rt == "qemu" else ""
    res.add(Figure(f"idle-reclaim: MemAvailable drop per idle sandbox{tag}, flag off", value=off["dropMiB"], unit="MiB",
                   note=f"{off['dropBeforeMiB']:.1f} MiB before the idle wait, {off['freedOverIdleMiB']:+.1f} MiB each over it; "
                        f"{resident} {off['residentMiB']:.1f} MiB each; load {off['loadIdle']}"))
    res.add(Figure(f"idle-reclaim: MemAvailable drop per idle sandbox{tag}, --idle-reclaim {after:g}s", value=on["dropMiB"],
                   unit="MiB", note=f"{on['dropMiB'] / off['dropMiB']:.2f}× off; {on['dropBeforeMiB']:.1f} MiB before the "
                                    f"squeezes, {on['freedOverIdleMiB']:+.1f} MiB each over them; {on['squeezed']}/{on['held']} "
                                    f"squeezed; load {on['loadIdle']}"))
    for side, r in (("flag off", off), (f"--idle-reclaim {after:g}s", on)):
        res.add(Figure(f"idle-reclaim: host memory per idle sandbox by account{tag}, {side}", value=r["chargedMiB"] + r["zramMiB"],
                       unit="MiB", note=f"{account} {r['chargedMiB']:.1f} MiB ({resident} {r['residentMiB']:.1f}) "
                                        f"+ zram's RAM {r['zramMiB']:.1f} MiB for its {r['swapMiB']:.1f} MiB in swap"))
    res.add(Figure(f"idle-reclaim: lizard serve CPU per sandbox while squeezing{tag}", value=on["serveCpuEachS"], unit="CPU-s",
                   note=f"flag off over the same idle: {off['serveCpuEachS']:.3f}; waited {on['waitS']:.0f} s"))
    b1 = res.add(Figure(f"idle-reclaim: first run_code(\"1+1\") after idle, flag off{qtag}", off["first"],
                        note=f"load {off['loadProbes']}"))
    res.add(Figure(f"idle-reclaim: first run_code(\"1+1\") after a squeeze{qtag}", on["first"], baseline=b1.name,
                   note=f"load {on['loadProbes']}"))
    b4 = res.add(Figure(f"idle-reclaim: run_code(\"1+1\") ×5 after that first call, flag off{qtag}", off["next"]))
    res.add(Figure(f"idle-reclaim: run_code(\"1+1\") ×5 after that first call, squeezed{qtag}", on["next"], baseline=b4.name))
    b2 = res.add(Figure(f"idle-reclaim: first import pandas; pd.DataFrame(...) after idle, flag off{qtag}", off["pandas"]))
    res.add(Figure(f"idle-reclaim: first import pandas; pd.DataFrame(...) after a squeeze{qtag}", on["pandas"], baseline=b2.name))
    b3 = res.add(Figure(f"idle-reclaim: kernel restart (restart_context) → first run_code(\"1+1\") after idle, flag off{qtag}",
                        off["restart"]))
    res.add(Figure(f"idle-reclaim: kernel restart (restart_context) → first run_code(\"1+1\") after a squeeze{qtag}", on["restart"],
                   baseline=b3.name))


def heapshare_section(res: Results, a: argparse.Namespace, bin_dir: Path) -> None:
    """Issue 37's preloaded heap shared from a file: --heapshare-n interpreter sandboxes (default preloads) on a
    server without --share-heap, then on one with it, in the same run. For each: create → first
    run_code("kept = 42\n1+1") (the first call of a new sandbox: with the flag, every page it writes is copied
    from the shared file then), the sandbox's CPU once restored (its cgroup's, and lizard serve's children's —
    runsc restore — per create), the host's MemAvailable drop per idle sandbox, its memory cgroup's shmem +
    anonymous memory and its PSS, then the first DataFrame call (a groupby of 1,000 rows) and the one after it
    in half of them, the first chart in a few, and the cgroup's memory after those calls. Every answer is
    checked, and `kept` must read back."""
    from lizard import CodeSandbox

    n = a.heapshare_n
    df = ("import pandas as pd\nd = pd.DataFrame({'a': range(1000)})\n"
          "int(d.groupby(d['a'] % 7)['a'].sum().sum())")
    chart = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()"
    rows: Dict[str, Dict[str, Any]] = {}
    for side, flags in (("off", []), ("on", ["--share-heap"])):
        srv = Server(bin_dir, a.cache_dir, ["--warm-pool", "0", *flags], f"heapshare-{side}")
        wait_snapshot(srv)
        warm_up(srv)
        time.sleep(3)
        avail0 = meminfo("MemAvailable")
        held: List[str] = []
        creates, firsts, cpus = [], [], []
        lock = threading.Lock()
        http = sdk_http(srv)
        done = CLEANUP.push("killing the heap-share section's sandboxes", lambda: (kill_ids(srv, held), http.close()))

        def one() -> None:
            t0 = time.perf_counter()
            sb = CodeSandbox.create(**srv.sdk(), timeout_ms=3_600_000)
            t1 = time.perf_counter()
            cpu = sandbox_cpu_s(sb.sandbox_id)
            try:
                must_result(sb.run_code("kept = 42\n1+1", timeout_ms=60_000), "text/plain")
            finally:
                sb.close()
            t2 = time.perf_counter()
            with lock:
                held.append(sb.sandbox_id)
                creates.append((t1 - t0) * 1000)
                firsts.append((t2 - t1) * 1000)
                cpus.append((cpu, sandbox_cpu_s(sb.sandbox_id)))

        log(f"heap share ({side}): {n} sandboxes, {a.density_batch} creates at a time")
        children0 = server_cpu(srv)[1]
        with cf.ThreadPoolExecutor(a.density_batch) as ex:
            for f in [ex.submit(one) for _ in range(n)]:
                f.result()
        row: Dict[str, Any] = {"held": len(held), "create": creates, "first": firsts, "loadCreated": loadavg(),
                               "restoreCpuS": sum(c for c, _ in cpus) / len(cpus),
                               "firstCpuS": sum(f - c for c, f in cpus) / len(cpus),
                               "runscCpuS": (server_cpu(srv)[1] - children0) / len(held)}
        time.sleep(10)
        row["dropMiB"] = (avail0 - meminfo("MemAvailable")) / len(held) / 2**20
        row["memcgMiB"] = sandbox_memcg(held) / len(held) / 2**20
        row["pssMiB"] = sandbox_pss(held)[0] / len(held) / 2**20
        row["loadIdle"] = loadavg()
        frames, again, charts = [], [], []
        for k, sid in enumerate(list(held)):
            sb = CodeSandbox(sid, _http=http)
            if k % 2 == 0:
                for out in (frames, again):
                    t = time.perf_counter()
                    run = sb.run_code(df, timeout_ms=60_000)
                    out.append((time.perf_counter() - t) * 1000)
                    if run.error or not run.results or run.results[0].data != "499500":
                        raise RuntimeError(f"heap share ({side}): {sid} answered {run!r} to the DataFrame call")
            elif len(charts) < 5:
                t = time.perf_counter()
                run = sb.run_code(chart, timeout_ms=60_000)
                charts.append((time.perf_counter() - t) * 1000)
                if run.error or not any(r.mime == "image/png" for r in run.results):
                    raise RuntimeError(f"heap share ({side}): {sid} drew no chart: {run!r}")
            kept = sb.run_code("kept", timeout_ms=30_000)
            if kept.error or not kept.results or kept.results[0].data != "42":
                raise RuntimeError(f"heap share ({side}): {sid} lost its kernel's variable: {kept!r}")
        row["memcgAfterMiB"] = sandbox_memcg([s for k, s in enumerate(held) if k % 2 == 0]) / len(held[::2]) / 2**20
        row.update(frames=frames, again=again, charts=charts, loadProbes=loadavg())
        rows[side] = row
        log(f"heap share ({side}): { {k: v for k, v in row.items() if not isinstance(v, list)} }")
        done()
        srv.stop()
    off, on = rows["off"], rows["on"]
    tag = f", {n} held"
    avail = 20_070  # MiB: this 24 GiB machine's available memory less the density section's 2 GiB margin
    res.add(Figure(f"heap share: MemAvailable drop per idle sandbox{tag}, flag off", value=off["dropMiB"], unit="MiB",
                   note=f"~{avail / off['dropMiB']:.0f} per 24 GiB; load {off['loadIdle']}"))
    res.add(Figure(f"heap share: MemAvailable drop per idle sandbox{tag}, --share-heap", value=on["dropMiB"], unit="MiB",
                   note=f"{on['dropMiB'] / off['dropMiB']:.2f}× off; ~{avail / on['dropMiB']:.0f} per 24 GiB; load {on['loadIdle']}"))
    for side, r in (("flag off", off), ("--share-heap", on)):
        res.add(Figure(f"heap share: memory cgroup shmem + anon per idle sandbox{tag}, {side}", value=r["memcgMiB"], unit="MiB",
                       note=f"PSS of its processes {r['pssMiB']:.1f} MiB; after a DataFrame call and the next "
                            f"{r['memcgAfterMiB']:.1f} MiB"))
        res.add(Figure(f"heap share: CPU per restore{tag}, {side}", value=r["restoreCpuS"] + r["runscCpuS"], unit="CPU-s",
                       note=f"the sandbox's cgroup {r['restoreCpuS']:.3f} + runsc's {r['runscCpuS']:.3f}; its first call "
                            f"{r['firstCpuS']:.3f} more (the heap's pages it copies, with the flag); load {r['loadCreated']}"))
    pairs = (("create (restore)", "create"), ("first run_code(\"kept = 42\\n1+1\") of a new sandbox", "first"),
             ("first DataFrame call (groupby of 1,000 rows)", "frames"), ("the DataFrame call after it", "again"),
             ("first chart", "charts"))
    for what, k in pairs:
        b = res.add(Figure(f"heap share: {what}, flag off", off[k], note=f"load {off['loadProbes']}"))
        res.add(Figure(f"heap share: {what}, --share-heap", on[k], baseline=b.name, note=f"load {on['loadProbes']}"))


LEVERS = (("default", []), ("--preload \"\"", ["--preload="]), ("--share-heap", ["--share-heap"]),
          ("--idle-reclaim", ["--idle-reclaim", "AFTER"]), ("--share-heap --idle-reclaim", ["--share-heap", "--idle-reclaim", "AFTER"]))


def levers_section(res: Results, a: argparse.Namespace, bin_dir: Path) -> None:
    """Issue 37's density table by lever, alone and together, in one run: for each configuration of LEVERS (the
    --idle-reclaim ones only with swap: --reclaim-zram takes zram for the run) --levers-n interpreter sandboxes on a
    server of its own, each created and its first run_code("kept = 42\n1+1") timed; then the same idle time for
    every configuration (--reclaim-after + 10 s, and with --idle-reclaim until every sandbox was squeezed and once
    more); then per idle sandbox the host's MemAvailable drop, what the host holds for it by account (its memory
    cgroup's charge and zram's RAM for what it has in swap) and its resident shmem + anonymous memory; then a first
    run_code("1+1") after the idle time in every sandbox, timed, and `kept` read back."""
    from lizard import CodeSandbox

    if a.reclaim_zram:
        zram_on(a.reclaim_zram)
    n, after = a.levers_n, a.reclaim_after
    m = ReclaimMeter("gvisor")
    rows: List[Dict[str, Any]] = []
    for label, flags in LEVERS:
        reclaim = "--idle-reclaim" in flags
        if reclaim and swap_kib() == 0:
            res.add(Figure(f"levers: MemAvailable drop per idle sandbox, {label}", note="not run: the host has no swap "
                           "(--reclaim-zram 8G takes zram swap for the run)"))
            continue
        flags = [f"{after:g}s" if f == "AFTER" else f for f in flags]
        srv = Server(bin_dir, a.cache_dir, ["--warm-pool", "0", *flags], "levers-" + re.sub(r"[^a-z]+", "-", label.lower()).strip("-"))
        wait_snapshot(srv)
        warm_up(srv)
        time.sleep(3)
        avail0, zram0 = meminfo("MemAvailable"), zram_used()
        held: List[str] = []
        firsts: List[float] = []
        lock = threading.Lock()
        http = sdk_http(srv)
        done = CLEANUP.push("killing the levers section's sandboxes", lambda: (kill_ids(srv, held), http.close()))

        def one() -> None:
            sb = CodeSandbox.create(**srv.sdk(), timeout_ms=3_600_000)
            t = time.perf_counter()
            try:
                must_result(sb.run_code("kept = 42\n1+1", timeout_ms=60_000), "text/plain")
            finally:
                sb.close()
            with lock:
                held.append(sb.sandbox_id)
                firsts.append((time.perf_counter() - t) * 1000)

        log(f"levers ({label}): {n} sandboxes, {a.density_batch} creates at a time")
        t0 = time.perf_counter()
        with cf.ThreadPoolExecutor(a.density_batch) as ex:
            for f in [ex.submit(one) for _ in range(n)]:
                f.result()
        row: Dict[str, Any] = {"label": label, "held": len(held), "startS": time.perf_counter() - t0, "first": firsts,
                               "loadCreated": loadavg()}
        t1 = time.perf_counter()
        if reclaim:
            deadline = t1 + after + 10 + 5 * n
            while time.perf_counter() < deadline and sum(m.swap(i) >= 16 << 20 for i in held) < len(held):
                time.sleep(1)
            row["squeezed"] = sum(m.swap(i) >= 16 << 20 for i in held)
            time.sleep(after + 5)  # the next sweeps take what the first squeeze left
        else:
            time.sleep(after + 10)
        row["idleS"] = time.perf_counter() - t1
        avail = meminfo("MemAvailable")
        row["dropMiB"] = (avail0 - avail) / len(held) / 2**20
        row["chargedMiB"] = m.charged(list(held)) / len(held) / 2**20
        row["zramMiB"] = (zram_used() - zram0) / len(held) / 2**20
        row["residentMiB"] = m.resident(list(held)) / len(held) / 2**20
        row["loadIdle"] = loadavg()
        after_idle: List[float] = []
        for k, sid in enumerate(list(held)):
            sb = CodeSandbox(sid, _http=http)
            t = time.perf_counter()
            must_result(sb.run_code("1+1", timeout_ms=30_000), "text/plain")
            after_idle.append((time.perf_counter() - t) * 1000)
            if k % 4 == 0:
                kept = sb.run_code("kept", timeout_ms=30_000)
                if kept.error or not kept.results or kept.results[0].data != "42":
                    raise RuntimeError(f"levers ({label}): {sid} lost its kernel's variable: {kept!r}")
        row["afterIdle"], row["loadProbes"] = after_idle, loadavg()
        rows.append(row)
        log(f"levers ({label}): { {k: v for k, v in row.items() if not isinstance(v, list)} }")
        done()
        srv.stop()
    if not rows:
        return
    avail_mib = 20_070  # this 24 GiB machine's available memory less the density section's 2 GiB margin
    base = rows[0]
    for r in rows:
        tag = f"{r['label']}, {r['held']} held"
        res.add(Figure(f"levers: MemAvailable drop per idle sandbox, {tag}", value=r["dropMiB"], unit="MiB",
                       note=f"{r['dropMiB'] / base['dropMiB']:.2f}× {base['label']}; ~{avail_mib / r['dropMiB']:.0f} per "
                            f"24 GiB; idle {r['idleS']:.0f} s" + (f", {r['squeezed']}/{r['held']} squeezed" if "squeezed" in r else "")
                            + f"; load {r['loadIdle']}"))
        res.add(Figure(f"levers: host memory per idle sandbox by account, {tag}", value=r["chargedMiB"] + r["zramMiB"],
                       unit="MiB", note=f"its cgroup's charge {r['chargedMiB']:.1f} MiB + zram's RAM {r['zramMiB']:.1f} MiB; "
                                        f"resident shmem + anon {r['residentMiB']:.1f} MiB; "
                                        f"~{avail_mib / (r['chargedMiB'] + r['zramMiB']):.0f} per 24 GiB by account"))
    for r in rows:
        res.add(Figure(f"levers: first run_code(\"kept = 42\\n1+1\") of a new sandbox, {r['label']}", r["first"],
                       baseline=f"levers: first run_code(\"kept = 42\\n1+1\") of a new sandbox, {base['label']}"
                       if r is not base else "", note=f"load {r['loadCreated']}"))
    for r in rows:
        res.add(Figure(f"levers: first run_code(\"1+1\") after the idle time, {r['label']}", r["afterIdle"],
                       baseline=f"levers: first run_code(\"1+1\") after the idle time, {base['label']}"
                       if r is not base else "", note=f"load {r['loadProbes']}"))


def density_sections(res: Results, a: argparse.Namespace, bin_dir: Path, want=None, tag: str = "",
                     label: str = "Lizard", name: str = "density") -> None:
    """Issue 25's figures, each on a server of its own with creates restoring the template snapshot: the
    burst without a warm pool, the sustained loop's CPU per cycle (with --only sustain; the whole bench
    measures it on its main server), the density steps, then the burst again with a warm pool of its
    size. Last in the run: the density section fills the host's memory. want picks the sections (default:
    --only's); tag ends each row's name, label each log line, name the servers' data directories."""
    if want is None:
        want = (lambda s: s in a.only) if a.only else (lambda s: s != "sustain")
    bursts, sustain = want("burst") and a.burst > 0, want("sustain") and a.sustain > 0
    dense = want("density") and a.density_max >= 0
    if bursts or sustain or dense:
        srv = Server(bin_dir, a.cache_dir, ["--warm-pool", "0", *a.serve_flag], name)
        wait_snapshot(srv)
        warm_up(srv)
        if bursts:
            log(f"{label}: a burst of {a.burst} concurrent creates, no warm pool")
            burst(res, srv, a.burst, f" (no warm pool){tag}")
        if sustain:
            log(f"{label}: sustained create→run→kill for {a.sustain:.0f} s, {a.workers} workers")
            sustained(res, srv, a.sustain, a.workers, tag)
        if dense:
            density(res, srv, a.density_steps, a.density_max, a.density_margin_gib, a.density_batch, a.density_idle, tag)
        srv.stop()
    if bursts:
        srv = pool_server(bin_dir, a.cache_dir, a.burst, a.serve_flag)
        log(f"{label}: a burst of {a.burst} concurrent creates, warm pool {a.burst}")
        burst(res, srv, a.burst, f" (warm pool {a.burst}){tag}")
        srv.stop()


def ab_sections(res: Results, a: argparse.Namespace, bin_dir: Path, base_dir: Path) -> None:
    """--baseline-bin-dir: the burst (without and with a warm pool), sustained and density sections, each on a server
    of its own, for the baseline's binaries and these in turn, --ab-rounds times, the order swapped every
    round so that the load of the moment falls on both alike. Rows end in [baseline] or [this] and #round."""
    want = (lambda s: s in a.only) if a.only else (lambda s: s in ("burst", "sustain"))
    for r in range(a.ab_rounds):
        sides = [(base_dir, "baseline"), (bin_dir, "this")]
        for d, side in sides if r % 2 == 0 else sides[::-1]:
            density_sections(res, baseline_args(a) if side == "baseline" else a, d, want, f" [{side}] #{r + 1}",
                             f"A/B round {r + 1}, {side}", f"ab-{side}")


def baseline_args(a: argparse.Namespace) -> argparse.Namespace:
    """a, with the template cache of --baseline-bin-dir's servers."""
    return argparse.Namespace(**{**vars(a), "cache_dir": a.baseline_cache_dir or a.cache_dir})


# --- QEMU ------------------------------------------------------------------------------------------------


def gvisor_first(res: Results, bin_dir: Path, cache_dir: str, runs: int) -> None:
    """gVisor's create → first result, the QEMU rows' baseline, when the main section does not run."""
    srv = Server(bin_dir, cache_dir, ["--warm-pool", "0"], "nopool")
    warm_up(srv)
    log("Lizard (gVisor): create → first result, kill")
    lizard_lifecycle(res, srv, runs, "")
    srv.stop()


def smaps(pid: int) -> Dict[str, int]:
    """/proc/PID/smaps_rollup in bytes (Rss, Pss, Shared_Clean, Private_Dirty...)."""
    out: Dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
            k, v = line.split(":", 1)
            out[k] = int(v.split()[0]) * 1024
    except OSError:
        pass
    return out


def wait_log(srv: Server, text: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while text not in srv.log_path.read_text(errors="replace"):
        if srv.proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"lizard serve never logged {text!r}:\n{srv.logs()}")
        time.sleep(0.5)


def smaps_parts(pid: int) -> Dict[str, int]:
    """PSS (bytes) of a QEMU process by what its mappings hold: the guest's RAM (the lizard memfds), TCG's
    translated code (its one anonymous executable mapping), and everything else of QEMU's."""
    out = {"guest": 0, "tcg": 0, "other": 0}
    part = "other"
    try:
        for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
            head = line.split(None, 5)
            if len(head) >= 5 and "-" in head[0] and ":" not in head[0]:
                name = head[5] if len(head) > 5 else ""
                part = ("guest" if name.startswith("/memfd:lizard-") else
                        "tcg" if not name and "x" in head[1] else "other")
            elif line.startswith("Pss:"):
                out[part] += int(line.split()[1]) * 1024
    except OSError:
        pass
    return out


def ksmd_cpu_s() -> float:
    """CPU-seconds ksmd has used since boot."""
    for p in Path("/proc").glob("[0-9]*"):
        try:
            if (p / "comm").read_text().strip() == "ksmd":
                f = (p / "stat").read_text().rsplit(")", 1)[1].split()
                return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            continue
    raise RuntimeError("no ksmd thread")


def qemu_column(res: Results, bin_dir: Path, a: argparse.Namespace) -> None:
    """The QEMU backend (--runtime qemu) beside gVisor in the same run: boot, restore, runCode and memory
    per idle VM, each row compared with gVisor's figure of the same kind. Under TCG (no usable KVM) every
    figure is software emulation's, which says nothing of KVM's (docs/qemu.md). With --baseline-bin-dir the
    restore and memory rows are measured for those binaries too, each of this build's rows beside theirs."""
    from lizard import CodeSandbox

    # Cold boots: the VM's boot to its first process, from the runtime's own log line.
    srv = Server(bin_dir, a.cache_dir, ["--runtime", "qemu", "--template-snapshot=false", "--warm-pool", "0"],
                 "qemu-cold", runtime="qemu")
    accel = "KVM" if "using KVM" in srv.logs() else "TCG"
    log(f"QEMU ({accel}): {a.qemu_runs} cold boots")
    ids = []
    for _ in range(a.qemu_runs):
        with CodeSandbox.create(**srv.sdk(), timeout_ms=600_000) as sb:
            ids.append(sb.sandbox_id)
    t = srv.log_timings()
    srv.stop()
    res.add(Figure(f"qemu ({accel}): boot, VM start → first process (agent)", [t[i]["up"] for i in ids if "up" in t.get(i, {})],
                   baseline="  server: runtime up (netns + runsc run/restore)",
                   note="gVisor's row is a template-snapshot restore; with --template-snapshot=false gVisor boots in ~0.3 s"))
    res.add(Figure(f"qemu ({accel}): boot → agent healthy", [t[i]["running"] - t[i]["up"] for i in ids
                                                             if {"up", "running"} <= set(t.get(i, {}))]))
    base = f"qemu ({accel}, {a.baseline_bin_dir})" if a.baseline_bin_dir else ""
    if base:
        qemu_restored(res, Path(a.baseline_bin_dir), baseline_args(a), base, "")
    qemu_restored(res, bin_dir, a, f"qemu ({accel})", base)


def qemu_restored(res: Results, bin_dir: Path, a: argparse.Namespace, label: str, beside: str) -> None:
    """Creates from the template snapshot, runCode and the memory of idle restored VMs of bin_dir's
    lizard serve --runtime qemu, rows named after label; with beside, each memory row is compared with
    beside's row of the same kind."""
    from lizard import CodeSandbox

    srv = Server(bin_dir, a.cache_dir, ["--runtime", "qemu", "--warm-pool", "0"], "qemu", runtime="qemu")
    log(f"{label}: waiting for the template snapshot")
    wait_log(srv, "template snapshot made", 1800)
    warm_up(srv)
    log(f"{label}: create (template-snapshot restore) → first result, kill")
    first, ids = [], []
    for _ in range(a.qemu_runs):
        t0 = time.perf_counter()
        sb = CodeSandbox.create(**srv.sdk(), timeout_ms=600_000)
        try:
            must_result(sb.run_code("1+1"), "text/plain")
            first.append((time.perf_counter() - t0) * 1000)
        finally:
            sb.kill()
            sb.close()
        ids.append(sb.sandbox_id)
    res.add(Figure(f"{label}: create → first runCode(\"1+1\") result", first,
                   baseline="create → first runCode(\"1+1\") result"))
    t = srv.log_timings()
    res.add(Figure(f"{label}:   server: restore, VM up and re-addressed", [t[i]["up"] for i in ids if "up" in t.get(i, {})],
                   baseline="  server: runtime up (netns + runsc run/restore)"))
    log(f"{label}: runCode round trips, memory of {a.qemu_idle} idle VMs")
    time.sleep(2)
    avail0 = meminfo("MemAvailable")
    sandboxes = [CodeSandbox.create(**srv.sdk(), timeout_ms=3_600_000) for _ in range(max(1, a.qemu_idle))]
    try:
        sb = sandboxes[0]
        must_result(sb.run_code("1+1"), "text/plain")
        one = []
        for _ in range(a.qemu_code_runs):
            ms, run = timed(lambda: sb.run_code("1+1"))
            must_result(run, "text/plain")
            one.append(ms)
        res.add(Figure(f"{label}: runCode(\"1+1\")", one, baseline="runCode(\"1+1\")"))
        for s in sandboxes[1:]:
            must_result(s.run_code("1+1"), "text/plain")
        time.sleep(5)  # let the guests settle into idle
        pids = srv.runsc_pids()  # QEMU's command line names the sandbox directory too
        k = len(sandboxes)

        def mem_rows(when: str) -> None:
            mem = [smaps(p) for p in pids]
            parts = [smaps_parts(p) for p in pids]

            def each(*keys: str) -> float:
                return sum(m.get(key, 0) for m in mem for key in keys) / k / 2**20

            def add(what: str, value: float, note: str = "") -> None:
                res.add(Figure(f"{label}: memory per idle VM{when}, {what}", value=value, unit="MiB", note=note,
                               baseline=f"{beside}: memory per idle VM{when}, {what}" if beside else ""))

            add("PSS of its QEMU process", each("Pss"),
                f"{k} VMs from one template snapshot: pages shared with the others count 1/{k}")
            for part, what in (("guest", "guest RAM"), ("tcg", "TCG's translated code"), ("other", "QEMU's own")):
                add(f"  PSS: {what}", sum(p[part] for p in parts) / k / 2**20)
            add("private (its own COW copies, QEMU, TCG code)", each("Private_Clean", "Private_Dirty"))
            add("RSS of its QEMU process", each("Rss"), "shared template pages in full")
            add("host MemAvailable drop", (avail0 - meminfo("MemAvailable")) / k / 2**20,
                f"{k} VMs made after the first creates, so without the template's RAM (next row)")

        mem_rows("")
        rams = list(srv.dir.glob("templates/interpreter-*/ram"))
        if rams:
            res.add(Figure(f"{label}: template RAM every VM maps copy-on-write, held once",
                           value=rams[0].stat().st_blocks * 512 / 2**20, unit="MiB",
                           note="the snapshot's RAM file, loaded into one sealed memfd per server"))
        if a.qemu_ksm > 0:
            ksm = Path("/sys/kernel/mm/ksm")
            was = (ksm / "run").read_text().strip()
            cpu0 = ksmd_cpu_s()
            log(f"{label}: KSM on for {a.qemu_ksm:.0f} s (was run={was})")
            (ksm / "run").write_text("1")
            try:
                time.sleep(a.qemu_ksm)
                mem_rows(f" with KSM after {a.qemu_ksm:.0f} s")
                sharing = int((ksm / "pages_sharing").read_text())
                res.add(Figure(f"{label}: KSM: ksmd CPU", value=(ksmd_cpu_s() - cpu0) * 1000 / a.qemu_ksm, unit="ms/s",
                               note=f"pages_to_scan {(ksm / 'pages_to_scan').read_text().strip()}, sleep "
                                    f"{(ksm / 'sleep_millisecs').read_text().strip()} ms; {sharing * 4096 / 2**20:.0f} MiB "
                                    f"deduplicated over {k} VMs"))
            finally:
                (ksm / "run").write_text(was)
                log(f"KSM set back to run={was}")
    finally:
        for s in sandboxes:
            s.kill()
            s.close()
    srv.stop()


def warm_up(srv: Server) -> None:
    """One throwaway create → run → kill, so that first-use costs (the template's page cache, the
    server's first connections) stay out of the figures."""
    from lizard import CodeSandbox

    with CodeSandbox.create(**srv.sdk(), timeout_ms=120_000) as sb:
        must_result(sb.run_code("1+1"), "text/plain")


if __name__ == "__main__":
    sys.exit(main())
