#!/usr/bin/env python3
"""Two runsc binaries side by side in one run: CPU-seconds of a raw `runsc create` + `runsc restore
--background` of a python+pandas image (bench.py's raw restore baseline) until 2 s after the restore
returned, alternating the binaries pair by pair so that the machine's load falls on both alike.

    bench/runsc_ab.py OLD_RUNSC NEW_RUNSC [RUNS]     (as root; RUNS pairs, default 30)

For a change to how runsc is built (docs/architecture.md, "How runsc is built"): keep the old binary
(cp bin/runsc bin/runsc.old before make runsc). OLD_RUNSC and NEW_RUNSC may carry runsc flags after the
path, for a change of flags: 'bin/runsc --app-huge-pages=false' bin/runsc. Each side restores an image it
checkpointed itself (a flag may change what the image holds). The CPU is the cpuacct (cgroup v1) or
cpu.stat (v2) usage of a cgroup of this run holding the runsc commands and, below it, each sandbox (Sentry,
gofer, stubs). Prints each side's median and mean, the paired difference with its standard error, and, 2 s
after each restore, the median PSS of the sandbox's processes and the shmem + anonymous memory of its memory
cgroup (the memory file's pages count there whether or not a process maps them)."""
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import List

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402

CODE = ("import numpy, pandas, matplotlib\nmatplotlib.use('agg')\nimport matplotlib.pyplot\n"
        "open('/tmp/ready', 'w').close()\nimport time\nwhile True: time.sleep(3600)\n")


class Cgroup:
    """A cgroup of this run: v1's cpuacct hierarchy, or v2's."""

    def __init__(self) -> None:
        name = f"lizard-runsc-ab-{os.getpid()}"
        v1 = Path("/sys/fs/cgroup/cpuacct")
        self.v1 = v1.is_dir()
        self.path = (v1 if self.v1 else Path("/sys/fs/cgroup")) / name
        self.path.mkdir()
        self.name = name
        bench.CLEANUP.push(f"removing cgroup {name}", self.remove)

    def usage(self) -> float:
        if self.v1:
            return int((self.path / "cpuacct.usage").read_text()) / 1e9
        for line in (self.path / "cpu.stat").read_text().splitlines():
            if line.startswith("usage_usec "):
                return int(line.split()[1]) / 1e6
        raise RuntimeError("no usage_usec in cpu.stat")

    def join(self) -> None:
        """In a child before exec: move it here."""
        (self.path / "cgroup.procs").write_text("0")

    def remove(self) -> None:
        # runsc leaves its sandboxes' parents (this name) in the other v1 hierarchies.
        for c in Path("/sys/fs/cgroup").glob(f"*/{self.name}") if self.v1 else [self.path]:
            for sub in [p for p in c.iterdir() if p.is_dir()]:
                sub.rmdir()
            c.rmdir()


class FlaggedRunsc(bench.RawRunsc):
    """RawRunsc with global flags of its own: "PATH [FLAG...]"."""

    def __init__(self, argv: str, rootfs: str) -> None:
        runsc, *self.flags = shlex.split(argv)
        super().__init__(runsc, rootfs)

    def cmd(self, bundle: Path, *args: str) -> List[str]:
        c = super().cmd(bundle, *args)
        return c[:1] + self.flags + c[1:]


def pss_mib(cgroup: Path) -> float:
    """PSS of the processes in cgroup and below it, in MiB."""
    kb = 0
    for procs in cgroup.rglob("cgroup.procs"):
        for pid in procs.read_text().split():
            try:
                for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                    if line.startswith("Pss:"):
                        kb += int(line.split()[1])
            except (FileNotFoundError, ProcessLookupError):
                pass
    return kb / 1024


def memcg_mib(name: str) -> float:
    """The shmem and anonymous memory charged to cgroup v1 memory/NAME and below it, in MiB (0 without v1):
    the memory file's pages, mapped or not, which PSS counts only where a process maps them."""
    stat = Path("/sys/fs/cgroup/memory", name, "memory.stat")
    if not stat.exists():
        return 0.0
    kv = dict(line.split() for line in stat.read_text().splitlines())
    return (int(kv["total_shmem"]) + int(kv["total_rss"])) / 2**20


def template_rootfs() -> Path:
    return sorted(Path(os.environ.get("LIZARD_CACHE_DIR", "/var/cache/lizard"), "templates")
                  .glob("interpreter-*/rootfs"), key=lambda p: p.stat().st_mtime)[-1]


def checkpoint_image(r: bench.RawRunsc) -> Path:
    """The python+pandas image: a sandbox of r's runsc that imported them, checkpointed into r's directory."""
    b = r.bundle([bench.PY_IN_TEMPLATE, "-c", CODE])
    cid = f"lizard-runsc-ab-{os.getpid()}-src"
    r.live.append(cid)
    r.run(r.cmd(b, "run", "--detach", "--bundle", str(b), cid), detach=True, timeout=120)
    deadline = time.monotonic() + 120
    while subprocess.run(r.cmd(b, "exec", cid, "/bin/sh", "-c", "test -e /tmp/ready"),
                         capture_output=True, start_new_session=True, timeout=60).returncode:
        if time.monotonic() > deadline:
            raise RuntimeError("the python sandbox never imported pandas")
        time.sleep(0.5)
    img = r.dir / "image"
    img.mkdir()
    r.run(r.cmd(b, "checkpoint", "--image-path", str(img), "--exclude-committed-zero-pages", cid), timeout=300)
    r.delete(cid)
    return img


def main() -> int:
    if len(sys.argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        return 2
    old, new = sys.argv[1], sys.argv[2]
    runs = int(sys.argv[3]) if len(sys.argv) == 4 else 30
    rootfs = template_rootfs()
    try:
        cg = Cgroup()
        raws = {"old": FlaggedRunsc(old, str(rootfs)), "new": FlaggedRunsc(new, str(rootfs))}
        imgs = {name: checkpoint_image(r) for name, r in raws.items()}

        cpu = {"old": [], "new": []}
        pss = {"old": [], "new": []}
        mem = {"old": [], "new": []}
        for i in range(runs):
            for name in ("old", "new") if i % 2 == 0 else ("new", "old"):
                r = raws[name]
                b = r.bundle([bench.PY_IN_TEMPLATE, "-c", CODE])
                cid = f"lizard-runsc-ab-{os.getpid()}-{name}-{i}"
                spec = json.loads((b / "config.json").read_text())
                spec["linux"]["cgroupsPath"] = f"/{cg.name}/{cid}"  # below ours, as Lizard's /lizard/ID
                (b / "config.json").write_text(json.dumps(spec))
                r.live.append(cid)
                u0 = cg.usage()
                for args in (("create", "--bundle", str(b), cid),
                             ("restore", "--detach", "--background", "--image-path", str(imgs[name]), "--bundle", str(b), cid)):
                    with open(r.dir / "console.log", "a") as f:
                        subprocess.run(r.cmd(b, *args), stdout=f, stderr=f, stdin=subprocess.DEVNULL, check=True,
                                       start_new_session=True, preexec_fn=cg.join, timeout=300)
                time.sleep(2)
                cpu[name].append(cg.usage() - u0)
                pss[name].append(pss_mib(cg.path / cid))
                mem[name].append(memcg_mib(f"{cg.name}/{cid}"))
                r.delete(cid)
        for name, path in (("old", old), ("new", new)):
            print(f"{name} ({path}): CPU-s per create + restore (+2 s): median {statistics.median(cpu[name]):.3f}, "
                  f"mean {statistics.mean(cpu[name]):.3f} (n={runs}); PSS median {statistics.median(pss[name]):.1f} MiB, "
                  f"shmem + anonymous memory median {statistics.median(mem[name]):.1f} MiB")
        diff = [a - b for a, b in zip(cpu["old"], cpu["new"])]
        print(f"old − new, paired: mean {statistics.mean(diff):.4f} CPU-s, standard error "
              f"{statistics.stdev(diff) / len(diff) ** 0.5:.4f}; new lower in {sum(d > 0 for d in diff)} of {runs}; "
              f"new/old (means) {statistics.mean(cpu['new']) / statistics.mean(cpu['old']):.3f}")
    finally:
        bench.CLEANUP.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
