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
        while True:
            with self.lock:
                while not self.buf:
                    self.wake.wait()
            time.sleep(FLUSH_DELAY)
            with self.lock:
                self._write_locked()

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
    handlers = {"execute": execute, "import": run_silently, "renew": renew}
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
