"""Code written for E2B's Python SDKs (`pip install e2b-code-interpreter`), nothing of Lizard's in it.

Run it against Lizard with the three variables of docs/e2b.md and nothing else:

    E2B_API_URL=http://HOST:PORT/e2b E2B_SANDBOX_URL=http://HOST:PORT/e2b/sandbox E2B_API_KEY=lz_... \
        python example.py

It uses the code interpreter (a result, an error, a chart), commands (run, background + wait), a PTY
(create, input, output, resize, kill), files (write, read, list, watch) and pause/resume, checks every
answer, and exits non-zero at the first one that is not what E2B's SDK documents.
"""

import sys
import time

from e2b import CommandExitException, PtySize
from e2b_code_interpreter import Sandbox
from e2b_code_interpreter.charts import ChartType


def check(what: str, ok: bool, got: object = None) -> None:
    if not ok:
        print(f"FAIL {what}: got {got!r}", file=sys.stderr)
        sys.exit(1)
    print(f"ok   {what}")


sbx = Sandbox.create(timeout=300)
try:
    # Code interpreter: a result, state between calls, an error, a chart.
    ex = sbx.run_code("import math\nradius = 2\nround(math.pi * radius ** 2, 2)")
    check("run_code result", ex.text == "12.57" and ex.results[0].is_main_result, ex.text)
    check("run_code keeps variables", sbx.run_code("radius * 21").text == "42")
    ex = sbx.run_code("{}['missing']")
    check("run_code error", ex.error is not None and ex.error.name == "KeyError", ex.error)
    ex = sbx.run_code(
        "import matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3], [2, 4, 8], label='doubling')\n"
        "plt.title('growth')\n"
        "plt.show()"
    )
    chart = ex.results[0].chart if ex.results else None
    check("run_code chart", chart is not None and chart.type == ChartType.LINE and chart.title == "growth", chart)
    check("run_code chart png", bool(ex.results[0].png))
    out: list = []
    sbx.run_code("print('streamed')", on_stdout=lambda m: out.append(m.line))
    check("run_code on_stdout", out == ["streamed\n"], out)

    # Commands: run, a failing one, background + wait.
    r = sbx.commands.run("echo hello from $SHELL_NAME", envs={"SHELL_NAME": "bash"})
    check("commands.run", (r.stdout, r.exit_code) == ("hello from bash\n", 0), r)
    try:
        sbx.commands.run("exit 7")
        check("commands.run exit code", False, "no CommandExitException")
    except CommandExitException as e:
        check("commands.run exit code", e.exit_code == 7, e.exit_code)
    h = sbx.commands.run("sleep 1; echo done in background", background=True)
    check("commands.list", h.pid in [p.pid for p in sbx.commands.list()])
    r = h.wait()
    check("background wait", r.stdout == "done in background\n", r.stdout)

    # PTY: create, send input, read output, resize, kill.
    term = bytearray()
    t = sbx.pty.create(PtySize(rows=24, cols=80))
    sbx.pty.send_stdin(t.pid, b"echo $((6*7))\n")
    sbx.pty.resize(t.pid, PtySize(rows=50, cols=132))
    sbx.pty.send_stdin(t.pid, b"stty size\nexit\n")
    t.wait(on_pty=term.extend)
    text = term.decode(errors="replace")
    check("pty output", "42" in text, text)
    check("pty resize", "50 132" in text, text)
    t = sbx.pty.create(PtySize(rows=24, cols=80))
    check("pty kill", sbx.pty.kill(t.pid) is True)

    # Files: write, read, list, watch.
    sbx.files.make_dir("/home/user/data")
    w = sbx.files.watch_dir("/home/user/data")
    sbx.files.write("/home/user/data/notes.txt", "first line\n")
    check("files.read", sbx.files.read("/home/user/data/notes.txt") == "first line\n")
    sbx.files.write_files([{"path": "/home/user/data/b.bin", "data": b"\x00\x01\x02"}])
    check("files.read bytes", bytes(sbx.files.read("/home/user/data/b.bin", format="bytes")) == b"\x00\x01\x02")
    names = sorted(e.name for e in sbx.files.list("/home/user/data"))
    check("files.list", names == ["b.bin", "notes.txt"], names)
    events: list = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(e.name == "notes.txt" for e in events):
        events += w.get_new_events()
        time.sleep(0.2)
    w.stop()
    check("files.watch_dir", any(e.name == "notes.txt" for e in events), events)
    ex = sbx.run_code("open('/home/user/data/notes.txt').read().strip()")
    check("code sees the files", ex.text == "first line", ex.text)

    # Pause and resume: variables survive.
    sbx.run_code("survivor = 'still here'")
    check("pause", sbx.pause() is True)
    check("paused state", Sandbox.get_info(sbx.sandbox_id).state.value == "paused")
    sbx = Sandbox.connect(sbx.sandbox_id)
    check("resume keeps variables", sbx.run_code("survivor").text == "still here")
    check("resume keeps files", sbx.files.read("/home/user/data/notes.txt") == "first line\n")
finally:
    sbx.kill()
print("ok")
