#!/usr/bin/env python3
"""Two builds of Lizard side by side in one run: a lizard serve of each at the same time, one
create → runCode("1+1") → kill at a time, alternating the two servers pair by pair (A then B, B then A)
so that the machine's load falls on both alike.

    bench/create_ab.py A_BIN_DIR B_BIN_DIR [PAIRS] [--a-cache DIR] [--b-cache DIR] [--address-pool CIDR]
                       [--a-serve-flag F ...] [--b-serve-flag F ...] [--then CODE]
                                                    (as root; PAIRS default 40; the pool is split in two)

The two sides may be one build under other serve flags (bin bin --b-serve-flag=--share-heap), and --then
times a second call after the first runCode (e.g. a first DataFrame op) before the kill.

For a few milliseconds on a create, which a burst or the sustained loop cannot show on a shared machine:
their seconds swing by a third with other engineers' load (docs/performance.md, "The 50-create burst,
26ea272 → main"), a paired difference does not. Prints each step's median on each side and the paired
difference B − A (median, mean and its standard error), then the same for the server's own "sandbox up"
(the runtime's restore) and "sandbox restored" (the whole provision) lines of its log. CPU is in CPU-ms: the
restore's (the sandbox's cgroup until the create returns, and the runsc restore process the server reaped), its
first call's and --then's (the cgroup's growth over each)."""
import argparse
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402


def log_took(path: Path, msg: str, n: int) -> List[float]:
    """The last n took= of the server log's lines with msg, for restores of the template snapshot."""
    out = [bench.go_duration_ms(m.group(1)) for line in path.read_text(errors="replace").splitlines()
           if f'msg="{msg}"' in line and "interpreter-" in line and (m := re.search(r" took=(\S+)", line))]
    return out[-n:]


def paired(name: str, a: List[float], b: List[float], unit: str = "ms") -> None:
    d = [y - x for x, y in zip(a, b)]
    se = statistics.stdev(d) / len(d) ** 0.5 if len(d) > 1 else float("nan")
    print(f"{name}: A p50 {statistics.median(a):.1f} {unit}, B p50 {statistics.median(b):.1f} {unit}; B − A per pair "
          f"p50 {statistics.median(d):+.1f} {unit}, mean {statistics.mean(d):+.1f} ± {se:.1f} {unit} "
          f"({statistics.mean(d) / statistics.mean(a):+.1%}; n {len(d)})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a_bin", type=Path)
    ap.add_argument("b_bin", type=Path)
    ap.add_argument("pairs", type=int, nargs="?", default=40)
    ap.add_argument("--a-cache", default="/var/cache/lizard", help="template cache of A's server")
    ap.add_argument("--b-cache", default="/var/cache/lizard", help="template cache of B's server")
    ap.add_argument("--address-pool", default="169.254.240.0/22", help="split in two halves, one per server")
    ap.add_argument("--a-serve-flag", action="append", default=[], help="one more lizard serve flag of A's server")
    ap.add_argument("--b-serve-flag", action="append", default=[], help="one more lizard serve flag of B's server")
    ap.add_argument("--then", default="", help="Python code of a second call to time after the first runCode")
    a = ap.parse_args()
    from ipaddress import ip_network

    from lizard import CodeSandbox

    halves = list(ip_network(a.address_pool).subnets(prefixlen_diff=1))
    keep = Path(tempfile.mkdtemp(prefix="create-ab-"))
    srvs: Dict[str, bench.Server] = {}
    steps = ("create", "runCode") + (("then",) if a.then else ()) + ("kill",)
    cpus = ("restore CPU", "first call CPU") + (("then CPU",) if a.then else ())
    t: Dict[str, Dict[str, List[float]]] = {k: {step: [] for step in steps + cpus} for k in "AB"}
    try:
        sides = (("A", a.a_bin, a.a_cache, a.a_serve_flag), ("B", a.b_bin, a.b_cache, a.b_serve_flag))
        for (side, bin_dir, cache, flags), pool in zip(sides, halves):
            bench.ADDRESS_POOL = str(pool)
            srvs[side] = bench.Server(bin_dir, cache, ["--warm-pool", "0"] + flags, f"create-ab-{side}")
        for s in srvs.values():
            bench.wait_snapshot(s)
            bench.warm_up(s)
        bench.log(f"{a.pairs} pairs, load {bench.loadavg()}")
        for i in range(a.pairs):
            for k in ("AB" if i % 2 == 0 else "BA"):
                runsc0 = bench.server_cpu(srvs[k])[1]
                t0 = time.perf_counter()
                sb = CodeSandbox.create(**srvs[k].sdk(), timeout_ms=600_000)
                t1 = time.perf_counter()
                # The restore's CPU: the sandbox's cgroup so far and the runsc
                # restore the server ran and reaped (its children's CPU).
                c1 = bench.sandbox_cpu_s(sb.sandbox_id)
                runsc = bench.server_cpu(srvs[k])[1] - runsc0
                bench.must_result(sb.run_code("1+1"), "text/plain")
                t2 = time.perf_counter()
                c2 = bench.sandbox_cpu_s(sb.sandbox_id)
                if a.then:
                    ex = sb.run_code(a.then)
                    if ex.error:
                        raise RuntimeError(f"--then failed: {ex.error}")
                t3 = time.perf_counter()
                c3 = bench.sandbox_cpu_s(sb.sandbox_id)
                for step, v in (("restore CPU", c1 + runsc), ("first call CPU", c2 - c1), ("then CPU", c3 - c2)):
                    if step in t[k]:
                        t[k][step].append(v * 1000)
                sb.kill()
                sb.close()
                t4 = time.perf_counter()
                for step, v in (("create", t1 - t0), ("runCode", t2 - t1), ("then", t3 - t2), ("kill", t4 - t3)):
                    if step in t[k]:
                        t[k][step].append(v * 1000)
        bench.log(f"done, load {bench.loadavg()}")
        for k, s in srvs.items():
            shutil.copy(s.log_path, keep / f"{k}.serve.log")
    finally:
        bench.CLEANUP.run()
    for step in steps:
        paired(step, t["A"][step], t["B"][step])
    for step in cpus:
        paired(step, t["A"][step], t["B"][step], "CPU-ms")
    for msg in ("sandbox up", "sandbox restored"):
        paired(f'server log "{msg}"', log_took(keep / "A.serve.log", msg, a.pairs), log_took(keep / "B.serve.log", msg, a.pairs))
    print(f"server logs: {keep}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
