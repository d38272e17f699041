# Lizard's Python kernel: IPython's own InteractiveShell (the engine
# ipykernel wraps), driven by the agent over two pipes instead of ZeroMQ.
# The protocol is in docs/kernel-protocol.md; the Go side is
# internal/pykernel. The agent starts it as `python -c BOOTSTRAP`, and the
# bootstrap reads this program from fd 3 as the first request frame.
#
# fd 3: requests from the agent. fd 4: frames to the agent. fds 1 and 2 are
# pipes the agent reads too: what subprocesses and C code write there
# reaches the caller as stdout and stderr.
#
# Frames both ways: 4-byte big-endian length of the rest, then (to the
# agent) a kind byte and a 4-byte big-endian request id, then the payload.
# Kinds: b"o" stdout text, b"e" stderr text (UTF-8), b"m" a JSON message.
# Requests are JSON objects with an "op".

import builtins
import datetime
import fcntl
import getpass
import importlib
import json
import math
import numbers
import os
import signal
import sys
import termios
import threading
import time
from binascii import b2a_base64

REQ_FD, EV_FD = 3, 4
# Frames never reach the code's subprocesses.
os.set_inheritable(REQ_FD, False)
os.set_inheritable(EV_FD, False)

MAX_FRAME = 64 << 10   # largest text payload in one frame
FLUSH_SIZE = 64 << 10  # pending output past this is written at once
FLUSH_DELAY = 0.01     # other output waits at most this long, so it streams
QUIET = 0.002          # output after this long without any is written at once


class State:
    running = False            # user code is running: SIGINT interrupts it
    main_writing = 0           # the main thread is inside the Channel
    pending_interrupt = False  # SIGINT came meanwhile
    bundle = False             # the call wants every representation (E2B)


state = State()


class Channel:
    """Frames to the agent. Text and display output are coalesced in one
    buffer (so their order is kept) and written within FLUSH_DELAY by a
    flusher thread, or at once when the buffer is large or a call ends.
    Writes block when the agent does not read: output is bounded by the
    pipe, not buffered without end."""

    def __init__(self, fd):
        self.fd = fd
        self.lock = threading.Lock()
        self.wake = threading.Condition(self.lock)
        self.buf = bytearray()
        self.kind = None     # kind of the text frame still open at the end of buf, or None
        self.head = 0        # where that frame's header starts in buf
        self.id = 0          # request whose output this is; 0 between requests
        self.flusher = None
        self.forked = False
        self.last_write = 0.0

    def _frame(self, kind, payload):
        self.buf += (len(payload) + 5).to_bytes(4, "big") + kind + self.id.to_bytes(4, "big")
        self.buf += payload

    def text(self, kind, data):
        if self.forked:
            self._forked_text(kind, data)
            return
        with self.lock:
            was_empty = not self.buf
            while data:
                if self.kind == kind:
                    room = MAX_FRAME - (len(self.buf) - self.head - 9)
                    if room > 0:
                        chunk, data = data[:room], data[room:]
                        self.buf += chunk
                        n = len(self.buf) - self.head - 4
                        self.buf[self.head:self.head + 4] = n.to_bytes(4, "big")
                        continue
                self.head, self.kind = len(self.buf), kind
                chunk, data = data[:MAX_FRAME], data[MAX_FRAME:]
                self._frame(kind, chunk)
                if len(self.buf) >= FLUSH_SIZE:
                    self._write_locked()
            if len(self.buf) >= FLUSH_SIZE:
                self._write_locked()
            elif self.buf:
                # A line after a quiet spell goes at once, whole (print
                # writes the text, then "\n": one event, as under
                # ipykernel); bursts and partial lines gather and the
                # flusher writes them.
                if self.buf.endswith(b"\n") and time.monotonic() - self.last_write > QUIET:
                    self._write_locked()
                elif was_empty:
                    self._nudge()

    def send(self, msg, now=False, nudge=True):
        if self.forked:
            return  # displays from a forked child have no call to go to
        # ASCII JSON: a lone surrogate in a string becomes an escape the
        # agent decodes as U+FFFD instead of an error in the code's display().
        payload = json.dumps(msg, default=_json_default).encode("ascii")
        with self.lock:
            was_empty = not self.buf
            self.kind = None
            self._frame(b"m", payload)
            if now or len(self.buf) >= FLUSH_SIZE:
                self._write_locked()
            elif was_empty and nudge:
                self._nudge()

    def flush(self):
        if self.forked:
            self._forked_text(None, b"")
            return
        with self.lock:
            self._write_locked()

    def _forked_text(self, kind, data):
        # Line-buffered straight to fd 1 or 2, as a terminal would have it,
        # so lines of processes sharing the fd do not interleave mid-line.
        with self.lock:
            if self.buf and (kind != self.kind or not data):
                _write_all(1 if self.kind == b"o" else 2, self.buf)
                self.buf = bytearray()
            self.kind = kind
            self.buf += data
            end = self.buf.rfind(b"\n") + 1
            if end or len(self.buf) >= FLUSH_SIZE:
                end = end or len(self.buf)
                _write_all(1 if kind == b"o" else 2, self.buf[:end])
                del self.buf[:end]

    def _nudge(self):
        if self.flusher is None:
            self.flusher = threading.Thread(target=self._flush_loop, name="lizard-flush", daemon=True)
            self.flusher.start()
        self.wake.notify()

    def _flush_loop(self):
        me = threading.current_thread()
        while True:
            with self.lock:
                while not self.buf:
                    if self.flusher is not me:
                        return  # stopped (stop_flusher)
                    self.wake.wait()
            time.sleep(FLUSH_DELAY)
            with self.lock:
                self._write_locked()

    def stop_flusher(self):
        """Writes what is pending and ends the flusher thread (the next
        output starts another); returns it, joined, or None."""
        with self.lock:
            self._write_locked()
            t, self.flusher = self.flusher, None
            self.wake.notify_all()
        if t is not None:
            t.join()
        return t

    def _write_locked(self):
        if not self.buf:
            return
        data, self.buf, self.kind = self.buf, bytearray(), None
        self.last_write = time.monotonic()
        try:
            _write_all(self.fd, data)
        except BrokenPipeError:
            os._exit(0)  # the agent has gone


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def guarded(method):
    """Runs a Channel method with SIGINT held off in the main thread: an
    interrupt landing halfway through a frame would break the stream for
    good, so it is raised once the method is done."""

    def run(*args, **kwargs):
        if threading.current_thread() is not MAIN:
            return method(*args, **kwargs)
        state.main_writing += 1
        try:
            return method(*args, **kwargs)
        finally:
            state.main_writing -= 1
            if state.pending_interrupt and not state.main_writing:
                state.pending_interrupt = False
                raise KeyboardInterrupt

    return run


def _after_fork_in_child():
    # A child forked from the kernel (multiprocessing, os.fork) must not
    # write frames: its writes would interleave with the kernel's and break
    # the stream, and its copy of the pipe would hide the kernel's death.
    # Its output goes to fds 1 and 2, which the agent forwards as well.
    chan.lock = threading.Lock()
    chan.wake = threading.Condition(chan.lock)
    chan.buf, chan.kind, chan.flusher = bytearray(), None, None
    chan.forked = True
    for fd in (REQ_FD, EV_FD):
        try:
            os.close(fd)
        except OSError:
            pass


def _flush_before_child():
    if not chan.forked:
        chan.flush()
        _wait_read()


def _wait_read(bound=0.2):
    # A child writes to fds 1 and 2, which the agent reads apart from the
    # frame pipe: when both have something, it cannot tell which came
    # first. So the child starts only once the agent has read what was
    # flushed (FIONREAD on the pipe's write end counts the bytes not read
    # yet); bounded, for an agent that is slow to read.
    deadline = time.monotonic() + bound
    buf = bytearray(4)
    while time.monotonic() < deadline:
        try:
            fcntl.ioctl(chan.fd, termios.FIONREAD, buf)
        except OSError:
            return
        if int.from_bytes(buf, sys.byteorder) == 0:
            return
        time.sleep(0.0005)


# What the kernel printed goes out before anything a child writes to fds 1
# and 2: flush before forks, os.system and subprocesses (which may not
# run fork hooks).
os.register_at_fork(before=_flush_before_child, after_in_child=_after_fork_in_child)


def _flushing(f):
    def run(*args, **kwargs):
        _flush_before_child()
        return f(*args, **kwargs)

    return run


os.system = _flushing(os.system)
import subprocess  # noqa: E402

subprocess.Popen._execute_child = _flushing(subprocess.Popen._execute_child)
MAIN = threading.main_thread()
for _name in ("text", "send", "flush"):
    setattr(Channel, _name, guarded(getattr(Channel, _name)))


def _json_default(o):
    # As jupyter_client's session encoder: images and other bytes as
    # base64, dates as ISO 8601, numbers of other types as numbers.
    if isinstance(o, (bytes, bytearray, memoryview)):
        return b2a_base64(bytes(o), newline=False).decode("ascii")
    if isinstance(o, (datetime.datetime, datetime.date)):
        return o.isoformat()
    if isinstance(o, numbers.Integral):
        return int(o)
    if isinstance(o, numbers.Real):
        return float(o)
    return repr(o)


chan = Channel(EV_FD)


class OutStream:
    """sys.stdout and sys.stderr: text goes to the agent as frames, in order
    with displays and errors. fileno() is the real fd (a pipe the agent
    reads), for faulthandler and code that writes to it directly."""

    encoding = "utf-8"
    errors = "strict"
    newlines = None
    line_buffering = False

    def __init__(self, kind, fd, name):
        self.kind, self.fd, self.name = kind, fd, name
        self.closed = False

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        if s:
            chan.text(self.kind, s.encode("utf-8", "replace"))  # lone surrogates: "?"
        return len(s)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        chan.flush()

    def fileno(self):
        return self.fd

    def isatty(self):
        return False

    def readable(self):
        return False

    def writable(self):
        return True

    def seekable(self):
        return False

    def close(self):
        pass


sys.stdout = OutStream(b"o", 1, "<stdout>")
sys.stderr = OutStream(b"e", 2, "<stderr>")
sys.stdin = open(os.devnull, encoding="utf-8")

import faulthandler  # noqa: E402

# A segfault leaves a Python traceback on fd 2, which the caller sees.
faulthandler.enable(file=sys.__stderr__ or 2, all_threads=False)

# As ipykernel does: matplotlib draws inline (PNG displays on plt.show()
# and for figures left open at the end of a cell), pagers never wait.
if not os.environ.get("MPLBACKEND"):
    os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
os.environ.setdefault("PAGER", "cat")
os.environ.setdefault("GIT_PAGER", "cat")

from IPython.core.displayhook import DisplayHook  # noqa: E402
from IPython.core.displaypub import DisplayPublisher  # noqa: E402
from IPython.core.error import StdinNotImplementedError  # noqa: E402
from IPython.core.formatters import BaseFormatter, JSONFormatter  # noqa: E402
from IPython.core.interactiveshell import InteractiveShell  # noqa: E402
from traitlets import ObjectName, Type, Unicode  # noqa: E402
from traitlets.config import Config  # noqa: E402


class ResultHook(DisplayHook):
    """The value of a cell's last expression: an execute_result."""

    def start_displayhook(self):
        self.data = None

    def write_output_prompt(self):
        pass

    def write_format_data(self, format_dict, md_dict=None):
        self.data = format_dict

    def finish_displayhook(self):
        if self.data:
            # The call's end follows at once: no need to wake the flusher.
            chan.send({"t": "result", "data": self.data}, nudge=False)
        self.data = None


class Publisher(DisplayPublisher):
    """display(), plt.show(), figures left open: display_data."""

    def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
        msg = {"t": "display", "data": data}
        if transient and transient.get("display_id") is not None:
            msg["displayId"] = str(transient["display_id"])
        if update:
            msg["update"] = True
        chan.send(msg)

    def clear_output(self, wait=False):
        chan.send({"t": "clear", "wait": bool(wait)})


class ChartFormatter(BaseFormatter):
    """E2B's chart data (e2b/chart) of a matplotlib figure, as E2B's code
    interpreter gives it (its template's startup script registers the same
    formatter over the same package, e2b_charts). Only calls that want the
    whole bundle get it: the E2B surface's. Lizard's own API sends one MIME
    type per result and should not pay for the extraction."""

    format_type = Unicode("e2b/chart")
    print_method = ObjectName("_repr_e2b_chart_")
    _return_type = (dict, str)

    def __call__(self, obj):
        mpl = sys.modules.get("matplotlib.figure")
        if not state.bundle or mpl is None or not isinstance(obj, mpl.Figure):
            return super().__call__(obj)
        try:
            from e2b_charts import chart_figure_to_dict

            return chart_figure_to_dict(obj)
        except Exception:  # noqa: BLE001 - as E2B: a figure it cannot read has an empty chart
            return {}


# MAX_DATA_CELLS bounds the DataFrames that carry e2b/data (about 10 bytes of
# JSON a cell, well within api.MaxResultBytes).
MAX_DATA_CELLS = 500_000


class DataFormatter(BaseFormatter):
    """E2B's data (e2b/data) of a pandas DataFrame: its columns as lists, times in ISO 8601, as E2B's
    template's startup script gives it. Only for the E2B surface's calls, as ChartFormatter."""

    format_type = Unicode("e2b/data")
    print_method = ObjectName("_repr_e2b_data_")
    _return_type = (dict, str)

    def __call__(self, obj):
        pandas = sys.modules.get("pandas")
        if not state.bundle or pandas is None or not isinstance(obj, pandas.DataFrame):
            return super().__call__(obj)
        if obj.size > MAX_DATA_CELLS:
            # Its HTML and text are pandas' truncated views, its data would be
            # every cell: past the run's results budget, the whole result
            # would become an error. The views stay.
            return None
        data = obj.to_dict(orient="list")
        return {str(k): [_data_value(pandas, v) for v in col] for k, col in data.items()}


def _data_value(pandas, v):
    if isinstance(v, pandas.Timestamp):
        return v.isoformat()
    if isinstance(v, float) and not math.isfinite(v):
        return None  # a missing value (NaN) is null, as orjson writes it; NaN is no JSON
    return v


class ListJSONFormatter(JSONFormatter):
    """A list or dict is also application/json (result.json) for the E2B surface's calls, as E2B's
    template makes it (numpy values as lists and numbers); one JSON cannot say stays text alone."""

    def __call__(self, obj):
        if state.bundle and isinstance(obj, (list, dict)):
            try:
                return json.loads(json.dumps(obj, default=_numpy_json, allow_nan=False))
            except (TypeError, ValueError):
                pass
        return super().__call__(obj)


def _numpy_json(o):
    if hasattr(o, "tolist"):  # numpy arrays and scalars
        return o.tolist()
    raise TypeError(f"{type(o).__name__} is not JSON")


class Shell(InteractiveShell):
    displayhook_class = Type(ResultHook)
    display_pub_class = Type(Publisher)

    def _showtraceback(self, etype, evalue, stb):
        chan.send({"t": "error", "ename": str(etype.__name__), "evalue": str(evalue), "traceback": stb})

    def enable_gui(self, gui=None):
        pass  # no GUI event loops without a display

    def ask_exit(self):
        # exit() and quit(): the kernel lives as long as its context.
        print("exit() does not end this kernel; restart the context for a fresh one", file=sys.stderr)


class PatchFinder:
    """Patches modules as they are imported (PATCHES), so that a kernel
    that never imports them pays nothing. Each patch runs once, after the
    module's own code; one that fails leaves the module as it is."""

    def find_spec(self, name, path=None, target=None):
        patch = PATCHES.pop(name, None)
        if patch is None:
            return None
        if not PATCHES:
            sys.meta_path.remove(self)
        import importlib.util

        # find_spec does not come back here: name is out of PATCHES.
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            load = spec.loader.exec_module

            def exec_module(module):
                load(module)
                try:
                    patch(module)
                except Exception:  # noqa: BLE001 - a patch is a nicety, never the module's failure
                    pass

            spec.loader.exec_module = exec_module
        return spec


def display_on_save(image_module):
    """As E2B's interpreter does (its startup script 0003_images.py): an
    image saved to a path (img.save("chart.png")) is also shown, so the
    call has its PNG without a display(img) — E2B's suite and code written
    for it expect one."""
    save = image_module.Image.save

    def shown_save(self, fp, format=None, **params):
        if isinstance(fp, (str, os.PathLike)):
            from IPython.display import display

            display(self)
        return save(self, fp, format, **params)

    shown_save.__doc__ = save.__doc__
    shown_save.__wrapped__ = save
    image_module.Image.save = shown_save


def boxplot_labels(axes_module):
    """boxplot(labels=...) as matplotlib 3.9 and 3.10 took it (renamed
    tick_labels in 3.9, the old name removed in 3.11): E2B's interpreter has
    matplotlib 3.10, and code written for it (E2B's own box-and-whisker
    example) passes labels=, a TypeError on the template's 3.11."""
    for owner in (axes_module.Axes,):
        boxplot = owner.boxplot

        def renamed(self, *args, _boxplot=boxplot, **kwargs):
            if "labels" in kwargs and "tick_labels" not in kwargs:
                kwargs["tick_labels"] = kwargs.pop("labels")
            return _boxplot(self, *args, **kwargs)

        renamed.__doc__ = boxplot.__doc__
        renamed.__wrapped__ = boxplot
        owner.boxplot = renamed


def pyplot_boxplot_labels(pyplot):
    """plt.boxplot(labels=...): pyplot's wrapper names its parameters, so it
    refuses labels= before Axes.boxplot sees it (boxplot_labels)."""
    boxplot = pyplot.boxplot

    def renamed(*args, **kwargs):
        if "labels" in kwargs and "tick_labels" not in kwargs:
            kwargs["tick_labels"] = kwargs.pop("labels")
        return boxplot(*args, **kwargs)

    renamed.__doc__ = boxplot.__doc__
    renamed.__wrapped__ = boxplot
    pyplot.boxplot = renamed


def fonts_in_memory(fm):
    import io
    import types

    real = fm.ft2font
    files = {}

    class FontBytes(io.BytesIO):
        """What FT2Font reads: the file's bytes. Not os.PathLike, or FT2Font
        would open the path itself."""

        def __init__(self, path):
            data = files.get(path)
            if data is None:
                with open(path, "rb") as f:
                    data = files[path] = f.read()
            super().__init__(data)
            self.name = path

        def __str__(self):
            return self.name

    class FontFile(FontBytes):
        """What font.fname is once the font is made (the file object it was
        read from, in matplotlib 3.11): a path again, equal to and hashed as
        its path, for the PDF and PS backends that embed the font file."""

        def __fspath__(self):
            return self.name

        def __eq__(self, other):
            if isinstance(other, (str, os.PathLike)):
                return self.name == os.fspath(other)
            return NotImplemented

        def __hash__(self):
            return hash(self.name)

    def FT2Font(filename, *args, **kwargs):
        if not isinstance(filename, (str, bytes, os.PathLike)):
            return real.FT2Font(filename, *args, **kwargs)
        try:
            data = FontBytes(os.fsdecode(filename))
        except OSError:
            return real.FT2Font(filename, *args, **kwargs)  # it says what is wrong
        font = real.FT2Font(data, *args, **kwargs)
        data.__class__ = FontFile
        return font

    shim = types.ModuleType(real.__name__)
    shim.__dict__.update(real.__dict__)
    shim.FT2Font = FT2Font
    fm.ft2font = shim


# PATCHES are applied by PatchFinder as each module is imported. The fonts
# one: FreeType reads a font file through many small seeks and reads (about
# 800 system calls per chart); under gVisor each is a trap, which made
# rendering a chart in a sandbox twice as slow as on the host, so the files
# are read once per kernel instead.
PATCHES = {
    "matplotlib.font_manager": fonts_in_memory,
    "matplotlib.axes._axes": boxplot_labels,
    "matplotlib.pyplot": pyplot_boxplot_labels,
    "PIL.Image": display_on_save,
}


def no_input(*args, **kwargs):
    raise StdinNotImplementedError(
        "input() is not supported: the code runs with no terminal or client to type an answer; "
        "put the value in the code, in an environment variable (envs) or in a file instead"
    )


def on_sigint(signum, frame):
    if not state.running:
        return  # an interrupt that came after its call ended
    if state.main_writing:
        state.pending_interrupt = True  # raised once the frame is whole
        return
    raise KeyboardInterrupt


def execute(req):
    envs = req.get("envs") or {}
    saved = {k: os.environ.get(k) for k in envs}
    count = shell.execution_count
    status = "error"
    try:
        try:
            os.environ.update(envs)
        except (TypeError, ValueError) as e:  # a NUL byte, say
            chan.send({"t": "error", "ename": type(e).__name__, "evalue": f"setting envs: {e}", "traceback": []})
            count = 0  # the code never ran
            return
        state.running = True
        state.bundle = bool(req.get("bundle"))
        try:
            res = shell.run_cell(req["code"], store_history=True)
        finally:
            state.running = False
        status = "ok" if res.success else "error"
    except KeyboardInterrupt:
        status = "interrupted"  # landed between user code and here
    finally:
        state.running = False
        state.bundle = False
        state.pending_interrupt = False
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        chan.send({"t": "done", "count": count, "status": status}, now=True)


def run_silently(req):
    msg = {"t": "done", "status": "ok"}
    try:
        for m in req.get("modules") or []:
            importlib.import_module(m)
    except BaseException as e:  # noqa: BLE001 - reported to the agent
        msg.update(status="error", ename=type(e).__name__, evalue=str(e))
    chan.send(msg, now=True)


def renew(req):
    os.environ.update(req.get("set") or {})
    for k in req.get("unset") or []:
        os.environ.pop(k, None)
    if req.get("reseed"):
        import random

        random.seed()
        if "numpy" in sys.modules:
            try:
                sys.modules["numpy"].random.seed()
            except Exception:  # noqa: BLE001 - a broken numpy is the code's business
                pass


# The machine code of native/heapshare_amd64.c, run by share_heap
# (TestHeapShareCode checks it is that file's; `go test ./internal/pykernel
# -run TestHeapShareCode -update` regenerates it).
HEAPSHARE_AMD64 = "415741ba080000004531c04531c94156b80e0000004155415455534889fb4881ecb0020000488d54241048897c24c8488d742408bf0200000048c7442408ffffffff48c74424100000000048895424d00f05488b03488b4b284c8b7b104c8b631848894424b8488b430848894c24d8488b4b2048894424a048894c24c0483d001000000f8f3c040000488d8424a8000000488d9424a80200000f1f800000000048c700000000004883c0084839c275f048837c24a0000f8e1504000048c74424b0000000004c8b6c24b848c74424980000000048c7442490000000004c896424e8498b7d00498b5d084531d24531c04d8b65104531c9b81a000000ba0100000048897c24a84889de0f054885c00f84e0010000488b4c2490ba010000004889c848d3e248c1f806480994c4a8000000488b4424984c01e34839d8480f43d84883442490014983c518488b44249048895c249848394424a075884c8b6424e8bb010100004531c04531c9ba4100080048c7c59cffffff41ba800100004889d84c89e64889ef0f054889c74885c00f882203000031d24531d24531c04531c9b8030000004889d60f054c8d642418b8e4000000bf010000004c89e60f05488b4c24204889ef49bedb34b6d782de1b434869742418e80300004889c848c1f93f49f7ee4889d0ba0000080048c1f8124829c84801f0488b7424c04989c74889d80f054889c74885c00f89e9020000bde4000000e99400000031db4531d24531c04531c94889e8bf010000004c89e64889da0f0548694c2418e8030000488b7424204889f048c1fe3f49f7ee4889d048c1f8124829f04801c84c29f848394424d80f8e85020000b8230000004c89e74889de4889da48c74424180000000048c744242040420f000f05b801010000488b7424c0ba0000080048c7c79cffffff0f054889c74885c00f894b0200004883fffe0f8462ffffff48f7df4889fb80cf3048f7db488b7424d041ba080000004531c031d24531c9b80e000000bf020000000f054881c4b00200004889d85b5d415c415d415e415fc34c8d041f488d8f0010000031ed4c39c70f8326feffff48895c24e04889e84989ce4889fd4c896424f04c89ff4d89eb4c89c14989c74889e831d20f1f00480b104883c0084939c675f44885d20f85b30000004d85ff0f85b60000004881c5001000004981c6001000004839cd72c74c89fd488b5c24e04c8b6424f04989c84989ff4d89dd4885ed0f84affdffff488b4c24a8498b43104531f64829c84801e84929e848894424e04c894424a87442488b4424e0488b5424a84531c04531c94a8d7435004e8d14304c29f2b8120000000f054883f8fc740c4885c00f8ec30000004901c6488b4424a84939c672c14989ff488b4c24a848014c24b0e93dfdffff660f1f4400004d85ff4c0f44fde94affffff4d8b6b10488b4424a84989ec31db4929c54d01fd4d29fc744e48894c24f848892c244c89dd0f1f80000000004c89e24a8d343b4d8d541d004531c04829da4531c9b8120000000f054883f8fc74084885c07e214801c34c39e372d14989eb488b4c24f8488b2c244c016424b04531ffe9d6feffff48c7c3fbefffff0f843afeffff48f7d84889c380cf1048f7dbe929feffff48c7c3fbefffff0f841cfeffff48f7d880cc1048f7d84889c3e90bfeffff48f7df4889fb80cf2048f7dbe9fafdffff48c7c3f9efffffe9eefdffff48c74424b00000000048c744249800000000e976fcffff48c7c392cfffffe9cbfdffff4531d24531c04531c931d2b8050000004c89e60f054889c34885c00f85a9000000488b44249848394424480f82f00000004531ed4531f648837c24a0004989f84c8b6424b87e574c89e84489e948c1f8064c8bbcc4a800000049d3ef4183e701752a498b742408498b3c24b80900000041ba120000004d8b4c2410ba030000000f05493b042475634983c6014983c5014983c4184c396c24a075ac4c89c731d24531d24531c04531c9b8030000004889d60f05488b4424c8488b7424b04c89703848897030e901fdffff4531d24531c04531c9b8030000004889d60f0548f7db80cf4048f7dbe9e0fcffff4c89c74889c54531d24531c04531c9b8030000004c89fe4c89fa0f054889eb488b4424c848f7db80cf504c89703848f7dbe9aafcffff4531d24531c04531c9b8030000004889de4889da0f0548c7c3eabfffffe988fcffff"
HEAPSHARE_MAX_REGIONS = 4096  # its MAXOPS
HEAPSHARE_STAGES = {1: "writing the dump", 2: "making the ready marker", 3: "waiting for the map file",
                    4: "the map file is shorter than the dump", 5: "mapping a region back"}
heap_shared = False


def share_heap(req):
    """The share request (docs/kernel-protocol.md): the heap shared from a
    file, at a template's build."""
    msg = {"t": "done", "status": "ok"}
    try:
        msg.update(_share_heap(req["dump"], req["ready"], req["map"], float(req.get("timeout") or 60)))
    except BaseException as e:  # noqa: BLE001 - reported to the agent
        msg.update(status="error", ename=type(e).__name__, evalue=str(e))
    else:
        try:
            warm_up()
        except BaseException as e:  # noqa: BLE001 - the share stands; first calls pay as before
            print(f"lizard kernel: warm-up: {type(e).__name__}: {e}", file=sys.__stderr__, flush=True)
    chan.send(msg, now=True)


# What warm_up runs, each as a call of its own: (code, bundle). A first call
# of Lizard's API and of E2B's (its bundle: every representation). Not a
# DataFrame's: with one and a groupby the first DataFrame call of a sandbox
# took 25-35 ms less, but every idle sandbox held the 4.2 MiB they copy,
# and --share-heap is there for idle sandboxes' memory (docs/performance.md).
WARM_UPS = [("1+1", False), ("1+1", True)]


def warm_up():
    """Runs a first call's path once (execute: run_cell with its history,
    the displayhook, the formatters, the channel's framing) with its output
    discarded and every trace of it undone. Run after the heap is shared:
    the pages of the shared heap that every first call writes (reference
    counts, IPython's caches, pymalloc's pools) are copied here, once, into
    the template's memory, which a restore loads up front, instead of being
    copied page by page, each a fault, by every new sandbox's first call."""
    saved = _kernel_state()
    sink = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    fd, chan.fd = chan.fd, sink
    try:
        for code, bundle in WARM_UPS:
            execute({"code": code, "bundle": bundle})
    finally:
        chan.stop_flusher()  # its writes went to the sink
        chan.fd = fd
        os.close(sink)
        _restore_kernel_state(saved)
    import gc

    gc.collect()  # the calls' own garbage, not the frozen preloads


def _kernel_state():
    """What a call changes that the code or a caller can see: the
    execution count, In/Out and the _ variables, the compile cache."""
    import linecache

    hm, dh = shell.history_manager, shell.displayhook
    attrs = [(shell, ("execution_count", "last_execution_succeeded", "last_execution_result")),
             (hm, ("_i", "_ii", "_iii", "_i00")), (dh, ("_", "__", "___", "exec_result"))]
    dicts = [shell.user_ns, shell.user_ns_hidden, hm.output_hist, hm.output_hist_reprs, linecache.cache,
             getattr(shell.compile, "_filename_map", {})]
    lists = [hm.input_hist_parsed, hm.input_hist_raw, hm.db_input_cache, hm.db_output_cache]
    return ([(o, {a: getattr(o, a) for a in names}) for o, names in attrs],
            [(d, dict(d)) for d in dicts], [(lst, list(lst)) for lst in lists])


def _restore_kernel_state(saved):
    attrs, dicts, lists = saved
    for o, values in attrs:
        for a, v in values.items():
            if getattr(o, a) is not v:
                setattr(o, a, v)
    for d, was in dicts:
        for k in [k for k in d if k not in was]:
            del d[k]
        for k, v in was.items():
            if d.get(k, d) is not v:
                d[k] = v
    for lst, was in lists:
        if len(lst) != len(was) or any(x is not y for x, y in zip(lst, was)):
            lst[:] = was


def _share_heap(dump, ready, map_path, timeout):
    global heap_shared
    machine = os.uname().machine
    if machine != "x86_64":
        raise RuntimeError(f"sharing the heap needs x86-64; this kernel runs on {machine}")
    if heap_shared:
        raise RuntimeError("this kernel's heap is shared already")
    import ctypes
    import gc
    import mmap

    # No other thread may run Python, nor wake, between a region's dump and
    # its mapping: one waking then (a sleep ending, a lock acquired) would
    # take the GIL's state and write its own, into pages of the heap or of
    # libpython's data whose writes the mapping then loses. The channel's
    # flusher is ended (the next output starts another), and waited for
    # until its OS thread is gone, since glibc's thread exit still writes
    # its lists of stacks. Threads outside Python are not seen here:
    # OpenBLAS's workers sleep on a condition variable until the next BLAS
    # call, which nothing makes meanwhile.
    flusher = chan.stop_flusher()
    if flusher is not None and flusher.native_id is not None:
        task = f"/proc/self/task/{flusher.native_id}"
        deadline = time.monotonic() + 2
        while os.path.exists(task):
            if time.monotonic() > deadline:
                raise RuntimeError("the output thread did not end; nothing was shared")
            time.sleep(0.001)
    others = {t.ident: t.name for t in threading.enumerate() if t is not MAIN}
    for ident in sys._current_frames():
        if ident != MAIN.ident:
            others.setdefault(ident, f"thread {ident}")
    if others:
        raise RuntimeError(f"other Python threads run ({', '.join(sorted(others.values()))}): the heap is shared "
                           "only while the kernel's main thread is its only thread; nothing was shared")

    class Op(ctypes.Structure):
        _fields_ = [("addr", ctypes.c_ulong), ("len", ctypes.c_ulong), ("off", ctypes.c_ulong)]

    class Args(ctypes.Structure):
        _fields_ = [("ops", ctypes.c_void_p), ("n", ctypes.c_long), ("dumpfd", ctypes.c_long),
                    ("ready", ctypes.c_char_p), ("map", ctypes.c_char_p), ("timeout_ms", ctypes.c_long),
                    ("stored", ctypes.c_ulong), ("mapped", ctypes.c_ulong)]

    # Everything the call needs is made before the regions are listed, so
    # that what is listed is still there when it runs.
    page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(bytes.fromhex(HEAPSHARE_AMD64))
    addr = ctypes.addressof(ctypes.c_char.from_buffer(page))
    mprotect = ctypes.CDLL(None, use_errno=True).mprotect
    mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    if mprotect(addr, mmap.PAGESIZE, mmap.PROT_READ | mmap.PROT_EXEC):  # no longer writable: not a region
        raise OSError(ctypes.get_errno(), "mprotect of the code's page")
    share = ctypes.PYFUNCTYPE(ctypes.c_long, ctypes.c_void_p)(addr)
    ops = (Op * HEAPSHARE_MAX_REGIONS)()
    paths = (os.fsencode(ready), os.fsencode(map_path))
    args = Args(ctypes.addressof(ops), 0, -1, paths[0], paths[1], int(timeout * 1000), 0, 0)
    fd = os.open(dump, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    enabled, rc = gc.isenabled(), None
    try:
        # The collector must not write into every object again (its
        # reference counts and links): frozen, the preloads' objects stay
        # shared pages.
        gc.collect()
        gc.freeze()
        gc.disable()
        with open("/proc/self/maps") as f:
            maps = f.read()
        regions = _heap_regions(maps, map_path)
        if len(regions) > HEAPSHARE_MAX_REGIONS:
            raise RuntimeError(f"{len(regions)} regions to share, more than {HEAPSHARE_MAX_REGIONS}; nothing was shared")
        off = 0
        for i, (lo, n) in enumerate(regions):
            ops[i].addr, ops[i].len, ops[i].off = lo, n, off
            off += n
        os.ftruncate(fd, off)
        args.n, args.dumpfd = len(regions), fd
        start = time.monotonic()
        rc = share(ctypes.addressof(args))
        ms = (time.monotonic() - start) * 1000
    finally:
        os.close(fd)
        if rc is None:
            gc.unfreeze()  # failed before the call: nothing changed
        if enabled:
            gc.enable()
    if rc:
        stage, err = -rc >> 12, -rc & 0xFFF
        what = HEAPSHARE_STAGES.get(stage, f"stage {stage}")
        if stage < 5:
            gc.unfreeze()
            if stage == 3 and err == 110:
                raise TimeoutError(f"no {map_path} within {timeout:g} s: nothing was mapped, the heap is as it was")
            raise OSError(err, f"sharing the heap: {what}: {os.strerror(err)}; nothing was mapped, the heap is as it was")
        raise OSError(err, f"sharing the heap: {what} after {args.mapped} of {len(regions)}: {os.strerror(err)} "
                           "(the regions before it were mapped, each as it was)")
    heap_shared = True
    # A region unmapped since it was listed is left out (not counted).
    return {"regions": args.mapped, "bytes": off, "stored": args.stored, "ms": round(ms)}


def _heap_regions(maps, map_path):
    """The writable private regions to share, as (address, length): the
    anonymous ones and [heap] (Python's arenas, malloc's heap and mappings)
    and private writable mappings of files (the .so files' data, copied on
    write already), never a device's, the shared heap's own, or a stack:
    [stack] has a name, and a thread's stack has its guard page just below
    it."""
    out, prev_end, prev_perm = [], None, None
    for line in maps.splitlines():
        f = line.split(None, 5)
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        name = f[5] if len(f) > 5 else ""
        guarded = prev_end == lo and prev_perm == "---p"
        prev_end, prev_perm = hi, f[1]
        if f[1] != "rw-p" or guarded:
            continue
        if name in ("", "[heap]") or (name.startswith("/") and not name.startswith(("/dev/", "/.lizard/")) and name != map_path):
            out.append((lo, hi - lo))
    return out


class Requests:
    def __init__(self, fd):
        self.fd, self.buf = fd, bytearray()

    def next(self):
        while True:
            if len(self.buf) >= 4:
                n = int.from_bytes(self.buf[:4], "big")
                if len(self.buf) >= 4 + n:
                    body = bytes(self.buf[4:4 + n])
                    del self.buf[:4 + n]
                    return json.loads(body)
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                os._exit(0)  # the agent has gone
            self.buf += chunk


def main():
    global shell
    cfg = Config()
    # No history database: its SQLite file and saving thread cost every
    # call a write and a thread wake-up. In, Out, _ and _i still work.
    cfg.HistoryManager.enabled = False
    shell = Shell.instance(config=cfg, colors="nocolor")
    shell.display_formatter.formatters["e2b/chart"] = ChartFormatter(parent=shell.display_formatter)
    shell.display_formatter.formatters["e2b/data"] = DataFormatter(parent=shell.display_formatter)
    shell.display_formatter.formatters["application/json"] = ListJSONFormatter(parent=shell.display_formatter)
    builtins.input = no_input
    getpass.getpass = no_input
    signal.signal(signal.SIGINT, on_sigint)
    for name in [n for n in PATCHES if n in sys.modules]:
        PATCHES.pop(name)(sys.modules[name])
    if PATCHES:
        sys.meta_path.insert(0, PatchFinder())
    chan.send({"t": "ready", "pid": os.getpid()}, now=True)
    reqs = Requests(REQ_FD)
    handlers = {"execute": execute, "import": run_silently, "renew": renew, "share": share_heap}
    while True:
        req = reqs.next()
        chan.id = int(req.get("id") or 0)
        try:
            handlers[req["op"]](req)
        except KeyboardInterrupt:
            pass  # an interrupt that missed its call
        except Exception as e:  # noqa: BLE001 - the kernel must outlive a bad request
            print(f"lizard kernel: {req.get('op')}: {type(e).__name__}: {e}", file=sys.__stderr__, flush=True)
        chan.id = 0


shell = None
try:
    main()
except BaseException:
    # A kernel that cannot start (IPython's profile directory on a full
    # disk) says why on fd 2 and ends now. Left to Python's exit, the
    # traceback went through the Channel, and the exit's flush of
    # sys.stderr waited for ever on the lock of the flusher thread, which
    # Python's finalization froze holding it (1 start in 4): the agent
    # waited for its start timeout.
    import traceback

    _write_all(2, traceback.format_exc().encode("utf-8", "replace"))
    os._exit(1)
