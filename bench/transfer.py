"""A streamed upload's path hop by hop (issue 37): each hop of `sb.files.write(path, iterator)` measured alone.

    sudo .cache/testvenv/bin/python bench/transfer.py [--size-mb 256] [--rounds 3] [--baseline-bin-dir DIR]

Per round and server, in MB/s (the same bytes every time):
  sdk           the Python SDK, files.write(path, an iterator of 1 MiB chunks): bench.py's "streamed upload" row
  httpx         httpx.put of the same iterator to PUT /files: the SDK's HTTP client without the SDK
  curl chunked  curl -T - (Transfer-Encoding: chunked) of the same bytes to PUT /files
  curl length   curl -T FILE (Content-Length) of the same bytes to PUT /files
  dd in sandbox dd bs=1M of the same size inside the sandbox (process.exec): the sandbox's file write alone
  sdk → sink    the SDK's upload body through httpx to a loopback sink that discards it: the client alone
  download      files.read(format="stream") of the uploaded file, for comparison
With --baseline-bin-dir the rounds alternate between that build and this one's bin/, each with its own server.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402


def sink() -> str:
    """A loopback HTTP sink: reads a request's chunked body to its end, discards it, answers {}."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(4)

    def serve(c: socket.socket) -> None:
        with c:
            tail = b""
            while True:
                b = c.recv(1 << 20)
                if not b:
                    return
                tail = (tail + b[-16:])[-16:]
                if tail.endswith(b"0\r\n\r\n"):
                    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
                    tail = b""

    def accept() -> None:
        while True:
            c, _ = ls.accept()
            threading.Thread(target=serve, args=(c,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return f"http://127.0.0.1:{ls.getsockname()[1]}"


# Per hop, [server, runsc, client] CPU seconds per GB of each round (--cpu).
CPU: Dict[str, List[List[float]]] = {}


def measure(srv: bench.Server, size_mb: int, block: bytes, src: str, sink_url: str) -> Dict[str, float]:
    import httpx

    from lizard import CodeSandbox, _core

    size = size_mb << 20

    def chunks() -> Any:
        for _ in range(size_mb):
            yield block

    out: Dict[str, float] = {}

    def of(pid: int) -> float:
        try:
            f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

    def cpu() -> List[Any]:
        """CPU seconds so far of the server, of each of the sandbox's runsc processes (Sentry, gofer,
        systrap stubs) and of this process with its children (curl)."""
        t = os.times()
        return [of(srv.proc.pid), {p: of(p) for p in srv.runsc_pids()},
                t.user + t.system + t.children_user + t.children_system]

    def timed(name: str, fn: Callable[[], Any]) -> None:
        c0 = cpu()
        t0 = time.perf_counter()
        fn()
        out[name] = size / (time.perf_counter() - t0) / 1e6
        if CPU:
            c1 = cpu()
            # A stub that ended with its guest process (dd) takes its CPU along: runsc's is the sum over the
            # processes alive at both ends.
            rs = sum(c1[1][p] - c0[1][p] for p in c0[1].keys() & c1[1].keys())
            CPU.setdefault(name, []).append([x / (size / 1e9) for x in (c1[0] - c0[0], rs, c1[2] - c0[2])])

    with CodeSandbox.create(**srv.sdk(), timeout_ms=600_000, disk_mb=max(2048, 2 * size_mb + 512)) as sb:
        url = f"{srv.url}/v1/sandboxes/{sb.sandbox_id}/files"
        auth = {"Authorization": f"Bearer {srv.key}"}
        timed("sdk", lambda: sb.files.write("big.bin", chunks()))
        with httpx.Client(headers=auth, timeout=600) as c:
            timed("httpx", lambda: c.put(url, params={"path": "big.bin"}, content=chunks()).raise_for_status())
        curl = ["curl", "-sS", "-f", "-o", "/dev/null", "-H", f"Authorization: Bearer {srv.key}"]
        timed("curl chunked", lambda: subprocess.run(
            curl + ["-T", "-", f"{url}?path=big.bin"], stdin=open(src, "rb"), check=True))
        timed("curl length", lambda: subprocess.run(curl + ["-T", src, f"{url}?path=big.bin"], check=True))
        r = sb.process.exec(f"dd if=/dev/zero of=dd.bin bs=1M count={size_mb} 2>&1 | tail -1; rm -f dd.bin",
                            timeout_ms=600_000)
        # "268435456 bytes (268 MB, 256 MiB) copied, 0.25 s, 1.1 GB/s": dd's own time, not the call's.
        out["dd in sandbox"] = size / float(r.stdout.split("copied,")[1].split()[0]) / 1e6
        timed("download", lambda: sum(len(c) for c in sb.files.read("big.bin", format="stream")))
    with httpx.Client(timeout=600) as c:
        timed("sdk → sink", lambda: c.put(sink_url, content=_core.upload_body(chunks())).raise_for_status())
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bin-dir", default=str(bench.REPO / "bin"))
    ap.add_argument("--baseline-bin-dir", default="", help="a build to alternate with (e.g. main's bin/)")
    ap.add_argument("--cache-dir", default=os.environ.get("LIZARD_CACHE_DIR", "/var/cache/lizard"))
    ap.add_argument("--address-pool", default=bench.ADDRESS_POOL)
    ap.add_argument("--cpu", action="store_true",
                    help="also print each hop's CPU seconds per GB: the server's, the sandbox's runsc processes', "
                         "the client's")
    args = ap.parse_args()
    if args.cpu:
        CPU["_"] = []
    bench.ADDRESS_POOL = args.address_pool
    builds = {"this": Path(args.bin_dir)}
    if args.baseline_bin_dir:
        builds = {"baseline": Path(args.baseline_bin_dir), **builds}
    block = os.urandom(1 << 20)
    fd, src = tempfile.mkstemp(prefix="lizard-transfer-")
    with os.fdopen(fd, "wb") as f:
        for _ in range(args.size_mb):
            f.write(block)
    bench.CLEANUP.push(f"removing {src}", lambda: os.unlink(src))
    sink_url = sink()
    results: Dict[str, List[Dict[str, float]]] = {k: [] for k in builds}
    try:
        servers = {k: bench.Server(d, args.cache_dir, [], f"transfer-{k}") for k, d in builds.items()}
        for i in range(args.rounds):
            for k, srv in servers.items():
                load = os.getloadavg()[0]
                r = measure(srv, args.size_mb, block, src, sink_url)
                results[k].append(r)
                for n, per in CPU.items():
                    if n != "_" and per:
                        s, rs, c = per.pop()
                        print(f"  {k} {n}: CPU-s/GB server {s:.2f}, runsc {rs:.2f}, client {c:.2f}")
                print(f"{time.strftime('%H:%M:%S', time.gmtime())} UTC load {load:.1f} round {i + 1} {k}: "
                      + ", ".join(f"{n} {v:.0f}" for n, v in r.items()) + " MB/s", flush=True)
    finally:
        bench.CLEANUP.run()
    for k, rs in results.items():
        names = rs[0].keys() if rs else []
        print(f"{k} median of {len(rs)}: " + ", ".join(
            f"{n} {sorted(r[n] for r in rs)[len(rs) // 2]:.0f}" for n in names) + " MB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
