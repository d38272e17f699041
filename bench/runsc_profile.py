#!/usr/bin/env python3
"""Where a raw runsc restore's CPU goes: `perf record -g` over RUNS restores of the python+pandas image of
bench/runsc_ab.py, as Lizard restores (`runsc restore --detach --background`, no `runsc create` first),
each followed by 2 s of the restored sandbox's life, then `runsc delete`.

    bench/runsc_profile.py RUNSC [RUNS] [OUT]      (as root; RUNS default 10, OUT default perf.data)

perf follows the restore's children (the Sentry, the gofer, the systrap stubs) and nothing else of the
host's; `perf report -i OUT --no-children --sort comm,dso,sym` splits them. runsc is a Go binary with its
symbols and frame pointers, so its stacks resolve."""
import os
import shlex
import subprocess
import sys
from pathlib import Path

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
    finally:
        bench.CLEANUP.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
