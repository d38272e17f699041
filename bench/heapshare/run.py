#!/usr/bin/env python3
"""Issue 37's first lever, measured with raw runsc: the template's Python heap shared from a file.

    bench/heapshare/run.py [--held N] NAME=MODE@RUNSC ...     (as root; gcc and objcopy on the host)

    e.g. bench/heapshare/run.py --held 8 base=0@bin/runsc share=2@/tmp/runsc.nocow share-cow=2@bin/runsc

Each variant boots a raw sandbox of the interpreter template's rootfs (bench.py's raw runsc flags) running
guest.py with HEAPSHARE=MODE (guest.py says what each does), with /heap a bind mount of a host directory of
its own, checkpoints it with --exclude-committed-zero-pages, and prints its image's files and the heap
file. Then N restores of each (the variants alternated, each in a memory cgroup of its own below this run's,
all held): create + restore until the first answer, their CPU (cgroup, +1 s), PSS of all their processes, the
memory cgroup's shmem/rss/cache; the first calls through IPython in restores 4..N, timed in the guest, and
the memory after each; the memory of restore 3 after three 1+1, a DataFrame and a chart; and the checks
(a DataFrame, mutating a preloaded module's objects, del of modules, malloc_trim and calloc) in restores 1
and 2, then what restore 3 sees of their writes. make runsc's bin/runsc has build/runsc/cow-4k.patch
(moved there for `lizard serve --share-heap`); a runsc without it, or with cow-64k.patch instead, is
built from a copy of build/runsc with the patch removed or replaced, e.g.

    mkdir /tmp/b && cp build/runsc/* /tmp/b && rm /tmp/b/cow-4k.patch && cp bench/heapshare/cow-64k.patch /tmp/b
    /tmp/b/build.sh $(sed -n 's/^GVISOR_VERSION := //p' Makefile) /tmp/runsc.cow64k /tmp/b/work

Hold at most ~50 restores at once on a shared machine (each variant holds --held)."""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import bench  # noqa: E402
import runsc_ab  # noqa: E402

CHECKS = {
    "dataframe": "import pandas as pd\ndf = pd.DataFrame({'a': range(1000), 'b': [i*2 for i in range(1000)]})\n"
                 "result = (df.groupby(df.a % 7).b.sum().tolist(), df.describe().round(3).to_dict()['b'])",
    "mutate": "import numpy, pandas\nbefore = (getattr(numpy, '_hs', None), numpy.e, pandas.DataFrame.__doc__[:20])\n"
              "numpy._hs = 'mine'; numpy.e = 1.5; pandas.DataFrame.__doc__ = 'x'\nresult = (before, numpy._hs, numpy.e)",
    "del_modules": "import sys, gc\nfor m in [m for m in sys.modules if m.startswith('pandas')]: del sys.modules[m]\n"
                   "gc.collect()\nimport pandas\nresult = int(pandas.DataFrame({'x': [1, 2, 3]}).x.sum())",
    "trim_calloc": "import ctypes, numpy, gc\nxs = [bytearray(3000) for _ in range(20000)]\ndel xs\ngc.unfreeze(); gc.collect()\n"
                   "t = ctypes.CDLL(None).malloc_trim(0)\n"
                   "zs = [numpy.zeros(n) for n in (10, 1000, 40000, 200000, 10**6) for _ in range(20)]\n"
                   "bs = [bytes(5000) for _ in range(2000)]\n"
                   "result = (all(not z.any() for z in zs), all(b == bytes(5000) for b in bs), int(numpy.arange(10**6).sum()))",
}
TIMED = "import time\nt = time.monotonic()\nr = shell.run_cell(%r)\nresult = (r.success, round((time.monotonic() - t) * 1000, 1))"
CHART = "import matplotlib.pyplot as plt\nplt.plot([1,2,3])\nplt.savefig('/tmp/x.png')\nplt.close('all')"
CALLS = (("IPython 1+1", "1+1"),
         ("first DataFrame call", "import pandas as pd\ndf = pd.DataFrame({'a': range(1000), 'b': [str(i) for i in range(1000)]})\n"
                                  "df.groupby(df.a % 7).a.sum().tolist()"),
         ("first chart", CHART), ("second chart", CHART))


def memcg(name):
    kv = dict(line.split() for line in Path("/sys/fs/cgroup/memory", name, "memory.stat").read_text().splitlines())
    return {k: int(kv["total_" + k]) / 2**20 for k in ("shmem", "rss", "cache", "mapped_file")}


def wait_file(p, timeout=180):
    deadline = time.monotonic() + timeout
    while not p.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {p}")
        time.sleep(0.05)


def ask(io, code):
    (io / "cmd.tmp").write_text(code)
    os.rename(io / "cmd.tmp", io / "cmd.py")
    wait_file(io / "out.txt", 120)
    out = (io / "out.txt").read_text()
    (io / "out.txt").unlink()
    return out


def share_hex(dst):
    """share.c as the bytes of its one function (no relocations, no libc)."""
    with tempfile.TemporaryDirectory() as d:
        subprocess.run(["gcc", "-O2", "-fPIC", "-fno-asynchronous-unwind-tables", "-fno-stack-protector",
                        "-fno-tree-vectorize", "-nostdlib", "-c", str(HERE / "share.c"), "-o", f"{d}/share.o"], check=True)
        subprocess.run(["objcopy", "-O", "binary", "-j", ".text", f"{d}/share.o", f"{d}/share.bin"], check=True)
        dst.write_text(Path(f"{d}/share.bin").read_bytes().hex())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--held", type=int, default=8)
    ap.add_argument("variants", nargs="+", metavar="NAME=MODE@RUNSC")
    a = ap.parse_args()
    if a.held < 4:
        ap.error("--held must be at least 4")
    variants = {}
    for v in a.variants:
        name, rest = v.split("=", 1)
        mode, runsc = rest.split("@", 1)
        variants[name] = (mode, runsc)
    rootfs = runsc_ab.template_rootfs()
    root = Path(tempfile.mkdtemp(prefix="lizard-heapshare-"))
    bench.CLEANUP.push(f"removing {root}", lambda: shutil.rmtree(root, ignore_errors=True))
    try:
        cg = runsc_ab.Cgroup()
        share_hex(root / "share.hex")
        raws = {v: bench.RawRunsc(runsc, str(rootfs)) for v, (_, runsc) in variants.items()}

        def bundle(v, heap, io, mode, cid=None):
            b = raws[v].bundle([bench.PY_IN_TEMPLATE, "/io/guest.py"])
            spec = json.loads((b / "config.json").read_text())
            spec["mounts"] += [{"destination": "/heap", "type": "bind", "source": str(heap), "options": ["rbind", "rw"]},
                               {"destination": "/io", "type": "bind", "source": str(io), "options": ["rbind", "rw"]}]
            spec["process"]["env"].append(f"HEAPSHARE={mode}")
            if cid:
                spec["linux"]["cgroupsPath"] = f"/{cg.name}/{cid}"
            (b / "config.json").write_text(json.dumps(spec))
            return b

        imgs, heaps = {}, {}
        for v, (mode, _) in variants.items():
            r = raws[v]
            heap, io = root / f"heap-{v}", root / f"io-{v}-template"
            heap.mkdir()
            io.mkdir()
            io.chmod(0o777)
            shutil.copy(HERE / "guest.py", io)
            shutil.copy(root / "share.hex", io)
            b = bundle(v, heap, io, mode)
            cid = f"heapshare-{os.getpid()}-{v}-template"
            r.live.append(cid)
            r.run(r.cmd(b, "run", "--detach", "--bundle", str(b), cid), detach=True, timeout=120)
            wait_file(io / "ready")
            img = root / f"image-{v}"
            img.mkdir()
            r.run(r.cmd(b, "checkpoint", "--image-path", str(img), "--exclude-committed-zero-pages", cid), timeout=300)
            r.delete(cid)
            imgs[v], heaps[v] = img, heap
            hf = heap / "heap"
            print(f"{v}: share {(io / 'ready').read_text()}; image files (bytes) "
                  f"{ {p.name: p.stat().st_size for p in sorted(img.iterdir())} }; heap file "
                  + (f"{hf.stat().st_size} bytes, {hf.stat().st_blocks * 512} on disk" if hf.exists() else "none"))

        took = {v: [] for v in variants}
        cpu = {v: [] for v in variants}
        live = {v: [] for v in variants}
        for i in range(a.held):
            for v in list(variants) if i % 2 == 0 else list(variants)[::-1]:
                r = raws[v]
                io = root / f"io-{v}-{i}"
                io.mkdir()
                io.chmod(0o777)
                cid = f"heapshare-{os.getpid()}-{v}-{i}"
                b = bundle(v, heaps[v], io, "restored", cid)
                r.live.append(cid)
                u0, t0 = cg.usage(), time.monotonic()
                for args in (("create", "--bundle", str(b), cid),
                             ("restore", "--detach", "--background", "--image-path", str(imgs[v]), "--bundle", str(b), cid)):
                    with open(r.dir / "console.log", "a") as f:
                        subprocess.run(r.cmd(b, *args), stdout=f, stderr=f, stdin=subprocess.DEVNULL, check=True,
                                       start_new_session=True, preexec_fn=cg.join, timeout=300)
                ask(io, "result = 1+1")
                took[v].append((time.monotonic() - t0) * 1000)
                time.sleep(1)
                cpu[v].append(cg.usage() - u0)
                live[v].append((cid, io))
        time.sleep(3)
        for v in variants:
            pss = [runsc_ab.pss_mib(cg.path / cid) for cid, _ in live[v]]
            mem = [memcg(f"{cg.name}/{cid}") for cid, _ in live[v]]
            print(f"{v}: {a.held} held; create + restore + first answer, ms median {statistics.median(took[v]):.0f} "
                  f"(all {[round(x) for x in took[v]]}); CPU-s per restore (+1 s) median {statistics.median(cpu[v]):.3f}")
            print(f"{v}: idle, PSS of all processes median {statistics.median(pss):.1f} MiB; memory cgroup median "
                  + ", ".join(f"{k} {statistics.median(m[k] for m in mem):.1f}" for k in ("shmem", "rss", "cache", "mapped_file"))
                  + f" MiB; shmem + rss {statistics.median(m['shmem'] + m['rss'] for m in mem):.1f} MiB")
        for what, cell in CALLS:
            for v in variants:
                outs = [eval(ask(io, TIMED % cell)) for _, io in live[v][3:]]
                mem = [memcg(f"{cg.name}/{cid}") for cid, _ in live[v][3:]]
                print(f"{v}: {what} in restores 4..{a.held}: ok {all(o[0] for o in outs)}, ms median "
                      f"{statistics.median(o[1] for o in outs)} (all {[o[1] for o in outs]}); shmem + rss after it median "
                      f"{statistics.median(m['shmem'] + m['rss'] for m in mem):.1f} MiB")
        for v in variants:
            cid, io = live[v][2]
            seq = []
            for code in ("for _ in range(3): r = shell.run_cell('1+1')", "r = shell.run_cell(%r)" % CALLS[1][1],
                         "r = shell.run_cell(%r)" % CHART):
                ask(io, code + "\nresult = r.success")
                m = memcg(f"{cg.name}/{cid}")
                seq.append(round(m["shmem"] + m["rss"], 1))
            print(f"{v}: restore 3, shmem + rss after three 1+1, a DataFrame call, a chart: {seq} MiB")
        for v in variants:
            for name, code in CHECKS.items():
                print(f"{v} check {name}: restores 1, 2: {[ask(io, code)[:160] for _, io in live[v][:2]]}")
            print(f"{v} check what restore 3 sees after 1 and 2 mutated: {ask(live[v][2][1], CHECKS['mutate'])[:160]}")
        print("load average", open("/proc/loadavg").read().strip())
    finally:
        bench.CLEANUP.run()


if __name__ == "__main__":
    main()
