"""The sandbox's side of run.py: the template's Python with the kernel's preloads and an IPython shell, then,
with HEAPSHARE set, the heap shared from a file (issue 37's first lever); then it runs the Python files the
host drops into /io (cmd.py) and answers in /io/out.txt.

HEAPSHARE: 0 as today; 1 the private anonymous regions (Python's arenas, malloc's heap and mappings) written
to /heap/heap and mapped back from it MAP_PRIVATE|MAP_FIXED; 2 also the private writable mappings of files
(.so data, already copied on write); 3 as 2 with every object the collector reaches made immortal first
(refcount writes then leave its pages alone)."""
import gc
import os
import time

import matplotlib
import numpy  # noqa: F401
import pandas  # noqa: F401

matplotlib.use("agg")
import matplotlib.pyplot  # noqa: E402,F401
from IPython.core.interactiveshell import InteractiveShell  # noqa: E402
from traitlets.config import Config  # noqa: E402

MODE = os.environ.get("HEAPSHARE", "0")
cfg = Config()
cfg.HistoryManager.enabled = False  # as kernel.py
shell = InteractiveShell.instance(config=cfg, colors="nocolor")
shell.run_cell("0")


def regions():
    """The writable private regions to share: anonymous ones and [heap] (and with MODE ≥ 2 private file
    mappings), never a stack: [stack] has a name, and a thread's stack has its guard page just below it."""
    out, prev_end, prev_perm = [], None, None
    for line in open("/proc/self/maps"):
        f = line.split()
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        name = f[5] if len(f) > 5 else ""
        guarded = prev_end == lo and prev_perm == "---p"
        prev_end, prev_perm = hi, f[1]
        if f[1] != "rw-p" or guarded:
            continue
        if name in ("", "[heap]") or (MODE >= "2" and name.startswith("/") and not name.startswith(("/dev/", "/heap/"))):
            out.append((lo, hi - lo))
    return out


def share():
    """Writes each region to /heap/heap and maps it back over itself, in one native call (share.c, built by
    run.py into /io/share.hex) that holds the GIL: nothing of this process runs between a region's write and
    its map, so no write to it is lost."""
    import ctypes
    import mmap

    gc.collect()
    immortal = 0
    if MODE == "3":
        objs = gc.get_objects()
        seen = {id(o): o for o in objs}
        for o in objs:
            for r in gc.get_referents(o):
                seen.setdefault(id(r), r)
        for a in seen:
            ctypes.c_uint32.from_address(a).value = 0xFFFFFFFF  # Python 3.13's immortal refcount
        immortal = len(seen)
        del objs, seen
    gc.freeze()  # the collector must not write into every frozen object again
    code = bytes.fromhex(open("/io/share.hex").read().strip())
    page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(code)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(page))
    libc = ctypes.CDLL(None)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    if libc.mprotect(addr, mmap.PAGESIZE, mmap.PROT_READ | mmap.PROT_EXEC):  # not writable: not a region
        raise OSError(ctypes.get_errno(), "mprotect")
    fd = os.open("/heap/heap", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o444)
    rs = regions()
    ops = ((ctypes.c_ulong * 3) * len(rs))()
    off = 0
    for i, (lo, n) in enumerate(rs):
        ops[i][0], ops[i][1], ops[i][2] = lo, n, off
        off += n
    os.ftruncate(fd, off)
    fn = ctypes.PYFUNCTYPE(ctypes.c_long, ctypes.c_void_p, ctypes.c_long, ctypes.c_long)(addr)
    t = time.monotonic()
    rc = fn(ctypes.addressof(ops), len(rs), fd)
    ms = (time.monotonic() - t) * 1000
    os.close(fd)
    return {"rc": rc, "regions": len(rs), "bytes": off, "ms": round(ms, 1), "immortal": immortal}


info = share() if MODE != "0" else {}
open("/io/ready", "w").write(repr(info))
while True:
    try:
        src = open("/io/cmd.py").read()
    except FileNotFoundError:
        time.sleep(0.05)
        continue
    os.unlink("/io/cmd.py")
    try:
        ns = {"shell": shell}
        exec(src, ns)
        res = repr(ns.get("result"))
    except BaseException:  # noqa: BLE001 - reported to the host
        import traceback

        res = "ERROR " + traceback.format_exc()
    open("/io/out.tmp", "w").write(res)
    os.rename("/io/out.tmp", "/io/out.txt")
