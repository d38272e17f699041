#!/usr/bin/env python3
"""TCG translation-cache caps for restored QEMU VMs, side by side in one `lizard serve --runtime qemu`:
idle memory and call latency of VMs restored with `-accel tcg,tb-size=N` against VMs without a cap.

    sudo .cache/testvenv/bin/python bench/qemu_tbsize.py [--caps 20,24,28] [--rounds 4]

One server, one template snapshot (booted with QEMU's default cache), and a wrapper named
qemu-system-x86_64 first on the server's PATH that rewrites a restored VM's (`-incoming`)
`-machine q35,accel=tcg,…` into `-machine q35,… -accel tcg,tb-size=N`, N read from a file at each exec
(0: unchanged). Round by round, in an order rotated each round, one VM per cap (and one uncapped) is
created → first runCode("1+1"), then 10× runCode("1+1"), and held; so the load of the moment falls on all
alike, and all share one template. Then, with every VM idle: PSS, private memory and the PSS of TCG's
translated code per VM (bench.smaps_parts); then each VM's first DataFrame call (a groupby of 1,000 rows),
five more in a row, 10× runCode("1+1") again, and the memory again. /proc/loadavg beside each stage. Every
VM's QEMU command line is checked for the cap it was meant to have."""
import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402

WRAPPER = r"""#!/bin/bash
# bench/qemu_tbsize.py: a restored VM's TCG cache capped at the MiB in CAPFILE (0 or none: unchanged).
cap=$(cat CAPFILE 2>/dev/null || echo 0)
incoming=0
for a in "$@"; do [ "$a" = "-incoming" ] && incoming=1; done
if [ "$incoming" = 1 ] && [ "$cap" != 0 ]; then
  args=()
  for a in "$@"; do args+=("${a/q35,accel=tcg,/q35,}"); done
  exec REAL "${args[@]}" -accel "tcg,tb-size=$cap"
fi
exec REAL "$@"
"""

DATAFRAME = ("import pandas as pd\ndf = pd.DataFrame({'k': [i % 7 for i in range(1000)], 'v': range(1000)})\n"
             "df.groupby('k').v.sum().to_frame()")


def cap_of(pid: int) -> int:
    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    for a in cmd:
        if a.startswith("tcg,tb-size="):
            return int(a.split("=")[1])
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--caps", default="20,24,28", help="tb-size values in MiB, beside 0 (no cap)")
    ap.add_argument("--rounds", type=int, default=4, help="VMs per cap")
    ap.add_argument("--bin-dir", default=str(Path(__file__).resolve().parent.parent / "bin"))
    ap.add_argument("--cache-dir", default=os.environ.get("LIZARD_CACHE_DIR", "/var/cache/lizard"))
    ap.add_argument("--address-pool", default=bench.ADDRESS_POOL)
    a = ap.parse_args()
    bench.ADDRESS_POOL = a.address_pool
    caps = [0] + [int(c) for c in a.caps.split(",") if c]
    from lizard import CodeSandbox

    work = Path(tempfile.mkdtemp(prefix="lizard-tbsize-"))
    capfile = work / "cap"
    capfile.write_text("0")
    (work / "bin").mkdir()
    wrapper = work / "bin" / "qemu-system-x86_64"
    wrapper.write_text(WRAPPER.replace("CAPFILE", str(capfile)).replace("REAL", "/usr/bin/qemu-system-x86_64"))
    wrapper.chmod(0o755)
    os.environ["PATH"] = f"{work / 'bin'}:{os.environ['PATH']}"
    held: Dict[int, List] = {c: [] for c in caps}
    pids: Dict[int, List[int]] = {c: [] for c in caps}
    first: Dict[int, List[float]] = {c: [] for c in caps}
    code: Dict[int, List[float]] = {c: [] for c in caps}

    def mem(stage: str) -> None:
        print(f"-- memory per VM, {stage} (load {bench.loadavg()}); {sum(map(len, pids.values()))} VMs of one template")
        for c in caps:
            m = [bench.smaps(p) for p in pids[c]]
            parts = [bench.smaps_parts(p) for p in pids[c]]
            k = len(m)
            pss = sum(x.get("Pss", 0) for x in m) / k / 2**20
            priv = sum(x.get("Private_Clean", 0) + x.get("Private_Dirty", 0) for x in m) / k / 2**20
            tcg = sum(p["tcg"] for p in parts) / k / 2**20
            guest = sum(p["guest"] for p in parts) / k / 2**20
            print(f"  tb-size {c or 'default':>7}: PSS {pss:6.1f} MiB (TCG code {tcg:5.1f}, guest RAM {guest:5.1f}), "
                  f"private {priv:6.1f} MiB")

    def calls(stage: str, fn, out: Dict[int, List[float]], order: List[int]) -> None:
        for c in order:
            for sb in held[c]:
                fn(c, sb, out)
        print(f"-- {stage} (load {bench.loadavg()})")
        for c in caps:
            v = out[c]
            print(f"  tb-size {c or 'default':>7}: p50 {statistics.median(v):8.1f} ms, max {max(v):8.1f} ms (n={len(v)})")

    try:
        srv = bench.Server(Path(a.bin_dir), a.cache_dir, ["--runtime", "qemu", "--warm-pool", "0", "--qemu-accel", "tcg"],
                           "tbsize", runtime="qemu")
        print(f"load at start {bench.loadavg()}; waiting for the template snapshot")
        bench.wait_log(srv, "template snapshot made", 1800)
        bench.warm_up(srv)
        bench.CLEANUP.push("killing the held VMs", lambda: [sb.kill() for v in held.values() for sb in v])
        for r in range(a.rounds):
            order = caps[r % len(caps):] + caps[:r % len(caps)]
            for c in order:
                capfile.write_text(str(c))
                t0 = time.perf_counter()
                sb = CodeSandbox.create(**srv.sdk(), timeout_ms=3_600_000)
                bench.must_result(sb.run_code("1+1"), "text/plain")
                first[c].append((time.perf_counter() - t0) * 1000)
                held[c].append(sb)
                pid = bench.qemu_pid(sb.sandbox_id)
                if not pid:
                    raise RuntimeError(f"no QEMU process for {sb.sandbox_id}")
                if cap_of(pid) != c:
                    raise RuntimeError(f"VM {sb.sandbox_id} has tb-size {cap_of(pid)}, meant {c}")
                pids[c].append(pid)
                for _ in range(10):
                    ms, run = bench.timed(lambda: sb.run_code("1+1"))
                    bench.must_result(run, "text/plain")
                    code[c].append(ms)
            capfile.write_text("0")
            print(f"round {r + 1} done (load {bench.loadavg()})")
        print("-- create → first runCode(\"1+1\")")
        for c in caps:
            print(f"  tb-size {c or 'default':>7}: p50 {statistics.median(first[c]):8.1f} ms, max {max(first[c]):8.1f} ms")
        print(f"-- runCode(\"1+1\") ×10 after each create (load {bench.loadavg()})")
        for c in caps:
            print(f"  tb-size {c or 'default':>7}: p50 {statistics.median(code[c]):8.1f} ms, max {max(code[c]):8.1f} ms")
        time.sleep(10)  # idle
        mem("idle after 1+1")

        def df(c: int, sb, out: Dict[int, List[float]]) -> None:
            ms, run = bench.timed(lambda: sb.run_code(DATAFRAME, timeout_ms=600_000))
            bench.must_result(run, "text/html")
            out[c].append(ms)

        def one(c: int, sb, out: Dict[int, List[float]]) -> None:
            for _ in range(10):
                ms, run = bench.timed(lambda: sb.run_code("1+1"))
                bench.must_result(run, "text/plain")
                out[c].append(ms)

        calls("first DataFrame call", df, {c: [] for c in caps}, caps)
        calls("DataFrame calls 2–6 (5 per VM, in a row)", lambda c, sb, out: [df(c, sb, out) for _ in range(5)],
              {c: [] for c in caps}, caps[::-1])
        calls("runCode(\"1+1\") ×10 after the DataFrame calls", one, {c: [] for c in caps}, caps)
        time.sleep(10)
        mem("idle after the DataFrame calls")
    finally:
        bench.CLEANUP.run()
        import shutil
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
