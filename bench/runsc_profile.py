#!/usr/bin/env python3
"""Where a raw runsc restore's CPU goes: `perf record -g` over RUNS restores of the python+pandas image of
bench/runsc_ab.py, as Lizard restores (`runsc restore --detach --background`, no `runsc create` first),
each followed by 2 s of the restored sandbox's life, then `runsc delete`.

    bench/runsc_profile.py RUNSC [RUNS] [OUT]      (as root; RUNS default 10, OUT default perf.data)

perf follows the restore's children (the Sentry, the gofer, the systrap stubs) and nothing else of the
host's; `perf report -i OUT --no-children --sort comm,dso,sym` splits them. runsc is a Go binary with its
symbols and frame pointers, so its stacks resolve.

It then prints the CPU per restore of each kind of process (the `runsc restore` command, the Sentry, the
gofer, the Sentry's `runsc umount` helper, `runsc delete`), which perf's comm cannot tell apart (all are
runsc re-executed), by the runsc command each process's stacks run, and in each its Go runtime's package
init, scheduler and collector."""
import os
import collections
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402
import runsc_ab  # noqa: E402


def main() -> int:
    if not 2 <= len(sys.argv) <= 4:
        print(__doc__, file=sys.stderr)
        return 2
    runsc = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    out = Path(sys.argv[3] if len(sys.argv) > 3 else "perf.data").resolve()
    try:
        r = bench.RawRunsc(runsc, str(runsc_ab.template_rootfs()))
        img = runsc_ab.checkpoint_image(r)
        script = []
        for i in range(runs):
            b = r.bundle([bench.PY_IN_TEMPLATE, "-c", runsc_ab.CODE])
            cid = f"lizard-runsc-profile-{os.getpid()}-{i}"
            r.live.append(cid)
            restore = r.cmd(b, "restore", "--detach", "--background", "--image-path", str(img), "--bundle", str(b), cid)
            delete = [runsc, "--root", str(r.state), "delete", "--force", cid]
            script += [shlex.join(restore) + f" >>{shlex.quote(str(r.dir / 'console.log'))} 2>&1 </dev/null",
                       "sleep 2", shlex.join(delete)]
        subprocess.run(["perf", "record", "-g", "-o", str(out), "--", "sh", "-ec", "\n".join(script)], check=True)
        print(f"{out}: perf report -i {out} --no-children --sort comm,dso,sym")
        split(out, runs)
    finally:
        bench.CLEANUP.run()
    return 0


# A process's kind: the command whose frame its last such stack has.
KINDS = [("runsc restore", "cmd.(*Restore).Execute"), ("Sentry", "sentrycmd.(*Boot).Execute"),
         ("gofer", "cmd.(*Gofer).Execute"), ("umount helper", "sentrycmd.(*Umount).Execute"),
         ("runsc delete", "cmd.(*Delete).Execute")]
# Parts of a process's CPU, by a frame of the stack (the first that matches).
PARTS = [("Go package init", ("runtime.doInit1", "runtime.schedinit")),
         ("Go collector", ("runtime.gcBgMarkWorker", "runtime.bgsweep", "runtime.bgscavenge")),
         ("Go scheduler", ("runtime.sysmon", "runtime.mcall", "runtime.mstart"))]


def split(data: Path, runs: int) -> None:
    """Prints the CPU-ms per restore of each kind of process in the profile DATA of RUNS restores."""
    text = subprocess.run(["perf", "script", "-i", str(data), "-F", "comm,pid,period,ip,sym"], check=True,
                          capture_output=True, text=True).stdout
    samples: Dict[int, List[Tuple[str, int, List[str]]]] = collections.defaultdict(list)
    for block in text.split("\n\n"):
        lines = block.strip("\n").split("\n")
        head = re.match(r"\s*(.*?)\s+(\d+)\s+(\d+)\s*$", lines[0]) if lines[0].strip() else None
        if head:
            samples[int(head.group(2))].append((head.group(1), int(head.group(3)), lines[1:]))
    total: Dict[str, float] = collections.Counter()
    parts: Dict[Tuple[str, str], float] = collections.Counter()
    for ss in samples.values():
        # The last stack that names a command: a child's samples between its fork and its exec carry
        # its parent's stack (the Sentry's for the umount helper).
        kind = next((k for _, _, stack in reversed(ss) for k, frame in KINDS if frame in "\n".join(stack)),
                    ss[0][0])
        for _, period, stack in ss:
            ms = period / 1e6 / runs
            total[kind] += ms
            st = "\n".join(stack)
            part = next((p for p, frs in PARTS if any(f in st for f in frs)), None)
            if part:
                parts[(kind, part)] += ms
    print(f"CPU-ms per restore by process (of {sum(total.values()):.1f}):")
    for kind, ms in sorted(total.items(), key=lambda kv: -kv[1]):
        detail = ", ".join(f"{p} {parts[(kind, p)]:.1f}" for p, _ in PARTS if parts[(kind, p)] >= 0.05)
        print(f"  {kind:16s} {ms:6.1f}" + (f"  ({detail})" if detail else ""))


if __name__ == "__main__":
    sys.exit(main())
