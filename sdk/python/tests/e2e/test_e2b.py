"""E2B's own SDKs (PyPI e2b 2.63.0, e2b-code-interpreter 2.11.5) against a real `lizard serve`, with nothing
set but E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY (docs/e2b.md): the code is what an E2B user already
has. Sandboxes, run_code with every result kind, errors, state, contexts, streaming callbacks, timeouts,
listing, kill, a wrong key, and a sandbox killed while its code runs."""

from __future__ import annotations

import base64
import re
import struct
import threading
import time
import uuid
from datetime import datetime, timezone
from typing import Iterator, List

import httpx
import pytest
from e2b import ALL_TRAFFIC, AuthenticationException, CommandExitException, NotFoundException, SandboxException, TimeoutException
from e2b_code_interpreter import AsyncSandbox, Sandbox, SandboxQuery, SandboxState
from e2b_code_interpreter.charts import (
    BarChart,
    BoxAndWhiskerChart,
    ChartType,
    LineChart,
    PieChart,
    ScatterChart,
    SuperChart,
)


@pytest.fixture(autouse=True)
def _e2b_env(lizard_server, monkeypatch: pytest.MonkeyPatch) -> None:
    """The three variables of docs/e2b.md, and nothing else of E2B's."""
    for var in ("E2B_DOMAIN", "E2B_DEBUG", "E2B_ACCESS_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("E2B_API_URL", f"{lizard_server.url}/e2b")
    monkeypatch.setenv("E2B_SANDBOX_URL", f"{lizard_server.url}/e2b/sandbox")
    monkeypatch.setenv("E2B_API_KEY", lizard_server.api_key)


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    sb = Sandbox.create()
    try:
        yield sb
    finally:
        sb.kill()


def test_run_code_results_errors_and_state(sandbox: Sandbox) -> None:
    ex = sandbox.run_code("print('hello')\n1 + 1")
    assert ex.logs.stdout == ["hello\n"] and ex.error is None
    assert ex.results[0].text == "2" and ex.results[0].is_main_result and ex.text == "2"

    sandbox.run_code("x = 41")
    assert sandbox.run_code("x + 1").text == "42"
    assert sandbox.run_code("'quoted'").text == "quoted"  # E2B unquotes a string's repr

    ex = sandbox.run_code("1 / 0")
    assert ex.error is not None and ex.error.name == "ZeroDivisionError" and ex.error.value == "division by zero"
    assert "ZeroDivisionError" in ex.error.traceback

    ex = sandbox.run_code("import sys\nprint('oops', file=sys.stderr)")
    assert ex.logs.stderr == ["oops\n"]


def test_every_representation(sandbox: Sandbox) -> None:
    ex = sandbox.run_code(
        "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title('squares')\nplt.show()"
    )
    assert len(ex.results) == 1
    chart = ex.results[0]
    assert chart.png and chart.text and chart.text.startswith("<Figure") and not chart.is_main_result
    assert "png" in chart.formats()

    sandbox.run_code(
        """
class Rich:
    def _repr_html_(self): return '<b>rich</b>'
    def _repr_markdown_(self): return '**rich**'
    def _repr_json_(self): return {'rich': True}
    def _repr_latex_(self): return '$rich$'
    def _repr_svg_(self): return '<svg xmlns="http://www.w3.org/2000/svg"/>'
    def _repr_javascript_(self): return 'console.log(1)'
    def _repr_mimebundle_(self, include=None, exclude=None): return {'application/x-custom': 'mine'}
    def __repr__(self): return 'Rich()'
"""
    )
    r = sandbox.run_code("Rich()").results[0]
    assert r.is_main_result
    assert (r.text, r.html, r.markdown, r.latex) == ("Rich()", "<b>rich</b>", "**rich**", "$rich$")
    assert r.json == {"rich": True} and r.svg and r.javascript == "console.log(1)"
    assert r.extra == {"application/x-custom": "mine"}

    df = sandbox.run_code("import pandas as pd\npd.DataFrame({'a': [1, 2]})").results[0]
    assert df.html and "<table" in df.html and df.text and "a" in df.text
    # E2B's data: the columns as lists, times in ISO 8601, a missing value null.
    assert df.data == {"a": [1, 2]} and "data" in df.formats()
    df = sandbox.run_code(
        "pd.DataFrame({'t': pd.to_datetime(['2024-01-02']), 'x': [float('nan')]})"
    ).results[0]
    assert df.data == {"t": ["2024-01-02T00:00:00"], "x": [None]}
    # A frame past 500,000 cells keeps its (truncated) views and no data, which would be every cell.
    big = sandbox.run_code("import numpy as np\npd.DataFrame(np.zeros((60_000, 10)))").results[0]
    assert big.data is None and big.html and "<table" in big.html
    # A list or dict is also JSON, as E2B's template makes it (numpy values too); text stays.
    r = sandbox.run_code("import numpy as np\n{'a': [1, 2], 'n': np.int64(3), 'v': np.array([1.5])}").results[0]
    assert r.json == {"a": [1, 2], "n": 3, "v": [1.5]} and r.text
    assert sandbox.run_code("[1, 'two']").results[0].json == [1, "two"]
    assert sandbox.run_code("[float('nan')]").results[0].json is None  # no JSON says NaN: text alone


def test_charts(sandbox: Sandbox) -> None:
    """result.chart as E2B's code interpreter gives it (e2b-charts in the template), beside the PNG."""
    ex = sandbox.run_code(
        "import matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3], [1, 4, 9], label='squares')\n"
        "plt.title('growth'); plt.xlabel('n'); plt.ylabel('n squared')\n"
        "plt.show()"
    )
    assert ex.error is None and len(ex.results) == 1 and ex.results[0].png
    line = ex.results[0].chart
    assert isinstance(line, LineChart) and line.type == ChartType.LINE
    assert (line.title, line.x_label, line.y_label) == ("growth", "n", "n squared")
    assert [e.label for e in line.elements] == ["squares"]
    assert [tuple(map(float, p)) for p in line.elements[0].points] == [(1, 1), (2, 4), (3, 9)]

    ex = sandbox.run_code(
        "plt.bar(['a', 'b', 'c'], [3, 5, 7], label='sold')\nplt.title('sales')\nplt.show()"
    )
    bar = ex.results[0].chart
    assert isinstance(bar, BarChart) and bar.type == ChartType.BAR and bar.title == "sales"
    assert [(e.label, float(e.value), e.group) for e in bar.elements] == [("a", 3, "sold"), ("b", 5, "sold"), ("c", 7, "sold")]


def test_more_charts(sandbox: Sandbox) -> None:
    """Scatter, pie, box-and-whisker and composite (subplots) charts, as e2b-charts reads them."""
    ex = sandbox.run_code(
        "import matplotlib.pyplot as plt\n"
        "plt.scatter([1, 2, 3], [4, 5, 6], label='dots')\n"
        "plt.title('scattered'); plt.xlabel('x'); plt.ylabel('y')\n"
        "plt.show()"
    )
    sc = ex.results[0].chart
    assert isinstance(sc, ScatterChart) and sc.type == ChartType.SCATTER, sc
    assert (sc.title, sc.x_label, sc.y_label) == ("scattered", "x", "y")
    assert [e.label for e in sc.elements] == ["dots"]
    assert [tuple(map(float, p)) for p in sc.elements[0].points] == [(1, 4), (2, 5), (3, 6)]

    ex = sandbox.run_code(
        "plt.pie([1, 3], labels=['small', 'big'])\nplt.title('shares')\nplt.show()"
    )
    pie = ex.results[0].chart
    assert isinstance(pie, PieChart) and pie.type == ChartType.PIE and pie.title == "shares", pie
    assert [e.label for e in pie.elements] == ["small", "big"]
    assert [round(float(e.angle)) for e in pie.elements] == [90, 270]

    # Boxes drawn as patches, as E2B's docs draw them (without patch_artist they are lines to e2b-charts),
    # labelled with labels=, matplotlib 3.10's name (E2B's interpreter's) that 3.11 dropped for tick_labels.
    ex = sandbox.run_code(
        "fig, ax = plt.subplots()\n"
        "ax.boxplot([[1, 2, 3, 4, 5, 20], [2, 3, 4]], labels=['a', 'b'], patch_artist=True)\n"
        "ax.set_title('spread')\nplt.show()"
    )
    assert ex.error is None, ex.error
    box = ex.results[0].chart
    assert isinstance(box, BoxAndWhiskerChart) and box.type == ChartType.BOX_AND_WHISKER, box
    assert [e.label for e in box.elements] == ["a", "b"]
    a = box.elements[0]
    assert [float(v) for v in (a.min, a.first_quartile, a.median, a.third_quartile, a.max)] == [1, 2.25, 3.5, 4.75, 5]
    assert [float(o) for o in a.outliers] == [20] and box.elements[1].outliers == []

    ex = sandbox.run_code(
        "fig, (left, right) = plt.subplots(1, 2)\n"
        "left.plot([1, 2], [3, 4]); left.set_title('lines')\n"
        "right.bar(['x', 'y'], [1, 2]); right.set_title('bars')\n"
        "fig.suptitle('both')\n"
        "plt.show()"
    )
    sup = ex.results[0].chart
    assert isinstance(sup, SuperChart) and sup.type == ChartType.SUPERCHART and sup.title == "both", sup
    assert [(type(c), c.title) for c in sup.elements] == [(LineChart, "lines"), (BarChart, "bars")]
    assert [float(e.value) for e in sup.elements[1].elements] == [1, 2]


def test_pil_images(sandbox: Sandbox) -> None:
    """A PIL image shown (Image.show(), display()) or left as the cell's value is a PNG result, as on E2B."""
    sandbox.run_code("from PIL import Image\nimg = Image.new('RGB', (8, 4), 'red')")
    shown = sandbox.run_code("img.show()")
    assert shown.error is None and len(shown.results) == 1 and shown.results[0].png, shown
    assert not shown.results[0].is_main_result
    displayed = sandbox.run_code("display(img)")
    assert len(displayed.results) == 1 and displayed.results[0].png
    last = sandbox.run_code("img").results
    assert len(last) == 1 and last[0].png and last[0].is_main_result
    png = base64.b64decode(last[0].png)
    assert png.startswith(b"\x89PNG") and struct.unpack(">II", png[16:24]) == (8, 4)
    # Saved to a path, it is shown too, as E2B's interpreter does (its suite's test_get_image_on_save).
    saved = sandbox.run_code("img.save('/tmp/red.png')\nprint('saved')")
    assert saved.error is None and len(saved.results) == 1 and saved.results[0].png, saved
    assert bytes(sandbox.files.read("/tmp/red.png", format="bytes")).startswith(b"\x89PNG")


def test_javascript_and_typescript_keep_variables_without_a_context(sandbox: Sandbox) -> None:
    """E2B's default JavaScript kernel keeps its variables between run_code calls; so does TypeScript's."""
    assert sandbox.run_code("const n = 20", language="js").error is None
    ex = sandbox.run_code("n * 2 + 2", language="javascript")
    assert ex.error is None and ex.text == "42" and ex.results[0].is_main_result
    assert sandbox.run_code("await Promise.resolve(n)", language="js").text == "20"
    ex = sandbox.run_code("interface P { x: number }\nconst p: P = { x: 6 }\nenum E { A = 7 }", language="ts")
    assert ex.error is None, ex.error
    ex = sandbox.run_code("p.x * E.A as number", language="typescript")
    assert ex.error is None and ex.text == "42", (ex.error, ex.text)
    ex = sandbox.run_code("const bad: number = 'x'; undefinedThing", language="ts")
    assert ex.error is not None and ex.error.name == "ReferenceError"  # types are stripped, not checked
    ex = sandbox.run_code("let x: = 1", language="ts")
    assert ex.error is not None and ex.error.name == "SyntaxError", ex.error
    ts = sandbox.create_code_context(language="typescript")
    assert ts.language == "typescript"
    sandbox.run_code("const t: string = 'ctx'", context=ts)
    assert sandbox.run_code("t.toUpperCase()", context=ts).text == "CTX"


def test_javascript_imports_and_top_level_await(sandbox: Sandbox) -> None:
    """E2B's JavaScript kernel takes static imports (bindings kept for later calls) and top-level await."""
    ex = sandbox.run_code("\n    import { readFileSync } from 'fs'\n    console.log(typeof readFileSync)\n    ", language="js")
    assert ex.error is None and ex.logs.stdout == ["function\n"], (ex.error, ex.logs)
    ex = sandbox.run_code("import * as path from 'node:path'\nimport os, { EOL } from 'os'", language="js")
    assert ex.error is None and ex.results == [], (ex.error, ex.results)
    assert sandbox.run_code("typeof readFileSync + path.join('a', 'b') + EOL.length", language="js").text == "functiona/b1"
    assert sandbox.run_code("\n    await Promise.resolve('Hello World!')\n    ", language="js").text == "Hello World!"
    ts = sandbox.create_code_context(language="ts")
    sandbox.run_code("import { join } from 'path'\nconst j: string = join('x', 'y')", context=ts)
    assert sandbox.run_code("j", context=ts).text == "x/y"


def test_callbacks_stream_as_the_code_runs(sandbox: Sandbox) -> None:
    seen: List[tuple] = []
    results = []
    errors = []
    ex = sandbox.run_code(
        "import time, sys\nprint('one', flush=True)\ntime.sleep(1)\nprint('two', file=sys.stderr)\n3\nraise ValueError('v')",
        on_stdout=lambda m: seen.append(("out", m.line, time.monotonic())),
        on_stderr=lambda m: seen.append(("err", m.line, time.monotonic())),
        on_result=results.append,
        on_error=errors.append,
    )
    assert [(k, line) for k, line, _ in seen] == [("out", "one\n"), ("err", "two\n")]
    assert seen[1][2] - seen[0][2] > 0.5, "stdout reached the callback only at the end"
    assert results == [] and errors and errors[0].name == "ValueError" and ex.error.name == "ValueError"


def test_contexts(sandbox: Sandbox) -> None:
    ctx = sandbox.create_code_context()
    assert ctx.language == "python" and ctx.id
    assert ctx.id in [c.id for c in sandbox.list_code_contexts()]

    sandbox.run_code("y = 5", context=ctx)
    assert sandbox.run_code("y", context=ctx).text == "5"
    assert sandbox.run_code("y").error.name == "NameError"  # the default context is another kernel

    sandbox.restart_code_context(ctx)
    assert sandbox.run_code("y", context=ctx).error.name == "NameError"

    sandbox.remove_code_context(ctx)
    assert ctx.id not in [c.id for c in sandbox.list_code_contexts()]

    js = sandbox.run_code("console.log(6 * 7)", language="javascript")
    assert js.logs.stdout == ["42\n"]
    assert sandbox.run_code("echo $((6*7))", language="bash").logs.stdout == ["42\n"]


def test_contexts_run_as_root(sandbox: Sandbox) -> None:
    """E2B's interpreter runs its kernels as root: contexts made through E2B's surface do too, in /root if asked."""
    ctx = sandbox.create_code_context(language="python", cwd="/root")
    assert ctx.cwd == "/root" and ctx.id in [c.id for c in sandbox.list_code_contexts()]
    ex = sandbox.run_code("import os\nos.getcwd(), os.getuid(), os.environ['HOME']", context=ctx)
    assert ex.error is None and ex.text == "('/root', 0, '/root')", (ex.error, ex.text)
    js = sandbox.create_code_context(language="js", cwd="/root")
    assert sandbox.run_code("[process.cwd(), process.getuid()]", context=js).text == "[ '/root', 0 ]"
    sh = sandbox.create_code_context(language="bash", cwd="/root")
    assert sandbox.run_code("echo $(pwd) $(id -u)", context=sh).logs.stdout == ["/root 0\n"]
    # The default contexts, shared with Lizard's own API, stay the sandbox user's.
    assert sandbox.run_code("import os\nos.getuid()").text != "0"


def test_interpreter_health_inside_and_kernel_killed(sandbox: Sandbox) -> None:
    """E2B's interpreter answers GET http://0.0.0.0:49999/health inside its sandbox (its suite checks it before and
    after killing the interpreter as root); so does the agent there, that path alone. Every kernel killed as root —
    the default Python one, a context's, the JavaScript ones — is back within 30 s, as E2B's suite expects of its
    interpreter: the next call runs in a new kernel and says so on stderr."""
    get = (
        "python3 -c \"import sys, urllib.request as u, urllib.error as e\n"
        "try: print(u.urlopen('http://0.0.0.0:49999' + sys.argv[1]).status)\n"
        "except e.HTTPError as x: print(x.code)\" "
    )
    assert sandbox.commands.run(get + "/health").stdout == "200\n"
    assert sandbox.commands.run(get + "/execute").stdout == "404\n"
    py = sandbox.create_code_context(language="python")
    js = sandbox.create_code_context(language="javascript")
    calls = {"default": {}, "context": {"context": py}, "javascript": {"context": js}, "default javascript": {"language": "javascript"}}
    for kw in calls.values():
        assert sandbox.run_code("y = 2", **kw).error is None
    try:
        sandbox.commands.run("kill -9 $(pgrep -f 'lizard-kernel|jsrepl')", user="root")
    except CommandExitException:
        pass  # the kill may take the command's own shell, whose line names the kernel too
    started = time.monotonic()
    for name, kw in calls.items():
        died = False
        while True:
            ex = sandbox.run_code("x = 1; x" if "javascript" not in name else "typeof y === 'undefined'", **kw)
            if ex.error is None:
                break
            # A call that reaches a kernel dying as it is sent says so and starts a new one.
            assert ex.error.name == "KernelDiedError", (name, ex.error)
            died = True
            assert time.monotonic() - started < 30, f"no {name} kernel 30 s after the kill"
        assert ex.text == ("1" if "javascript" not in name else "true"), (name, ex.text)
        # The call that found the kernel gone says so: a KernelDiedError, or, when it started the new kernel
        # itself, "restarted" on its stderr (after a KernelDiedError the kernel is already new, and nothing says it).
        assert died or any("restarted" in line for line in ex.logs.stderr), (name, ex.logs.stderr)
    assert time.monotonic() - started < 30
    assert sandbox.commands.run(get + "/health").stdout == "200\n"


def test_mask_request_host(lizard_server) -> None:
    """network={"mask_request_host": ...}: requests to the sandbox's ports carry that Host, ${PORT} the port, and the
    caller's in X-Forwarded-Host, as E2B's proxy gives them; get_info shows it."""
    sb = Sandbox.create(network={"mask_request_host": "localhost:${PORT}"})
    try:
        assert sb.get_info().network["mask_request_host"] == "localhost:${PORT}"
        sb.commands.run(
            "python3 -c \"import http.server as h\n"
            "class H(h.BaseHTTPRequestHandler):\n"
            " def do_GET(s):\n"
            "  b = (s.headers['Host'] + ' ' + s.headers['X-Forwarded-Host']).encode()\n"
            "  s.send_response(200); s.send_header('Content-Length', str(len(b))); s.end_headers(); s.wfile.write(b)\n"
            "h.HTTPServer(('0.0.0.0', 8000), H).serve_forever()\"",
            background=True,
        )
        url = f"{lizard_server.url}/v1/sandboxes/{sb.sandbox_id}/ports/8000/"
        headers = {"Authorization": f"Bearer {lizard_server.api_key}"}
        deadline = time.monotonic() + 30
        while True:
            r = httpx.get(url, headers=headers)
            if r.status_code == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert r.status_code == 200, r.text
        assert r.text == "localhost:8000 " + lizard_server.url.removeprefix("http://")
    finally:
        sb.kill()
    with pytest.raises(SandboxException, match="portsHost"):
        Sandbox.create(network={"mask_request_host": "bad host\r\nX: 1"})


def test_javascript_context(sandbox: Sandbox) -> None:
    """E2B's JavaScript kernel keeps its variables: so does a JavaScript context here."""
    js = sandbox.create_code_context(language="javascript")
    assert js.language == "javascript"
    assert sandbox.run_code("const a = 20", context=js).results == []
    ex = sandbox.run_code("a * 2 + 2", context=js)
    assert ex.error is None and ex.text == "42" and ex.results[0].is_main_result
    assert sandbox.run_code("await Promise.resolve(5)", context=js).text == "5"
    ex = sandbox.run_code("console.log('hi', a)", context=js)
    assert ex.logs.stdout == ["hi 20\n"] and ex.results == []
    ex = sandbox.run_code("null.x", context=js)
    assert ex.error is not None and ex.error.name == "TypeError" and "null" in ex.error.value
    sandbox.restart_code_context(js)
    assert sandbox.run_code("typeof a", context=js).text == "undefined"


def test_info_list_timeout_and_kill() -> None:
    tag = uuid.uuid4().hex[:8]
    sb = Sandbox.create(metadata={"suite": "e2b", "tag": tag}, timeout=120)
    try:
        info = sb.get_info()
        assert info.sandbox_id == sb.sandbox_id and info.metadata == {"suite": "e2b", "tag": tag}
        assert info.state == SandboxState.RUNNING
        before = info.end_at
        sb.set_timeout(600)
        assert sb.get_info().end_at > before

        listed = Sandbox.list(query=SandboxQuery(metadata={"tag": tag})).next_items()
        assert [s.sandbox_id for s in listed] == [sb.sandbox_id]
        assert Sandbox.list(query=SandboxQuery(metadata={"tag": "nobody-" + tag})).next_items() == []
        assert sb.is_running()
    finally:
        assert sb.kill()
    assert not Sandbox.kill(sb.sandbox_id)  # already gone: the SDK's False
    with pytest.raises(NotFoundException):
        Sandbox.get_info(sb.sandbox_id)
    assert sb.sandbox_id not in [s.sandbox_id for s in Sandbox.list().next_items()]


def test_pause_and_connect_resumes(sandbox: Sandbox) -> None:
    sandbox.run_code("kept = 'across a pause'")
    assert sandbox.pause()
    assert Sandbox.get_info(sandbox.sandbox_id).state == SandboxState.PAUSED
    # Not running to E2B's SDK, as E2B's proxy answers (502), and the check does not resume it.
    assert not sandbox.is_running()
    assert Sandbox.get_info(sandbox.sandbox_id).state == SandboxState.PAUSED
    # A sandbox paused with its memory has no disk alone to reboot from: refused by name (409),
    # not answered as a memory restore.
    with pytest.raises(SandboxException, match="paused with its memory"):
        Sandbox.connect(sandbox.sandbox_id, on_resume="reboot")
    again = Sandbox.connect(sandbox.sandbox_id)
    info = again.get_info()
    assert info.state == SandboxState.RUNNING
    # connect() sends no timeout: E2B's v2 default of 5 minutes, not 15 seconds.
    assert 290 <= (info.end_at - datetime.now(timezone.utc)).total_seconds() <= 301
    assert again.run_code("kept").text == "across a pause"


def test_filesystem_only_pause(sandbox: Sandbox) -> None:
    """pause(keep_memory=False) (and mode="filesystem") keeps the disk alone: after the resume,
    a cold boot, files, envs, metadata and the ID remain and the kernel's variables are gone;
    connect(on_resume="reboot") resumes it. An auto-pause with mode "filesystem" does the same."""
    sandbox.run_code("gone = 'with the memory'")
    sandbox.files.write("/home/user/kept.txt", "on disk")
    boot_before = sandbox.commands.run("cat /proc/sys/kernel/random/boot_id").stdout.strip()
    assert sandbox.pause(keep_memory=False)
    assert not sandbox.is_running()
    assert Sandbox.get_info(sandbox.sandbox_id).state == SandboxState.PAUSED
    again = Sandbox.connect(sandbox.sandbox_id, on_resume="reboot")
    assert again.sandbox_id == sandbox.sandbox_id
    assert again.files.read("/home/user/kept.txt") == "on disk"
    assert again.run_code("'gone' in globals()").text == "False"
    assert again.commands.run("echo $LIZARD_SANDBOX_ID").stdout.strip() == sandbox.sandbox_id
    # A fresh kernel boot id: booted cold, not restored from memory.
    assert again.commands.run("cat /proc/sys/kernel/random/boot_id").stdout.strip() not in ("", boot_before)
    assert again.pause(mode="filesystem")
    again = Sandbox.connect(sandbox.sandbox_id)  # a plain connect boots it over its disk too
    assert again.files.read("/home/user/kept.txt") == "on disk"

    auto = Sandbox.create(timeout=120, lifecycle={"on_timeout": {"action": "pause", "mode": "filesystem"}},
                          envs={"MY_VAR": "kept"}, metadata={"k": "v"})
    try:
        auto.files.write("/home/user/auto.txt", "auto")
        auto.run_code("gone = 1")
        auto.set_timeout(0)  # E2B's: its time is up now, so it auto-pauses
        deadline = time.monotonic() + 15
        while Sandbox.get_info(auto.sandbox_id).state != SandboxState.PAUSED and time.monotonic() < deadline:
            time.sleep(0.5)
        assert Sandbox.get_info(auto.sandbox_id).state == SandboxState.PAUSED
        auto = Sandbox.connect(auto.sandbox_id, timeout=60)
        assert auto.files.read("/home/user/auto.txt") == "auto"
        assert auto.run_code("'gone' in globals()").text == "False"
        assert auto.commands.run("echo $MY_VAR").stdout.strip() == "kept"
        assert auto.get_info().metadata == {"k": "v"}
    finally:
        auto.kill()


def test_auto_pause_and_auto_resume() -> None:
    """An auto-paused sandbox is not running (E2B's proxy's 502) until connect(); one created with
    auto_resume is resumed by the next call into it, as E2B's proxy resumes it on traffic."""
    sb = Sandbox.create(timeout=120, lifecycle={"on_timeout": "pause"})
    auto = Sandbox.create(timeout=300, lifecycle={"on_timeout": "pause", "auto_resume": True}, metadata={"k": "v"})
    try:
        sb.run_code("kept = 7")
        sb.set_timeout(0)  # E2B's: its time is up now, so it auto-pauses (Lizard's own 0 is "never")
        deadline = time.monotonic() + 10
        while Sandbox.get_info(sb.sandbox_id).state != SandboxState.PAUSED and time.monotonic() < deadline:
            time.sleep(0.5)
        assert Sandbox.get_info(sb.sandbox_id).state == SandboxState.PAUSED
        assert not sb.is_running()
        with pytest.raises(SandboxException):
            sb.run_code("kept")
        sb = Sandbox.connect(sb.sandbox_id, timeout=60)
        assert sb.is_running() and sb.run_code("kept").text == "7"

        auto.run_code("kept = 8")
        assert auto.pause()
        assert auto.is_running()  # the call resumed it
        assert Sandbox.get_info(auto.sandbox_id).state == SandboxState.RUNNING
        assert auto.run_code("kept").text == "8"
        assert auto.get_info().metadata == {"k": "v"}
    finally:
        sb.kill()
        auto.kill()


def test_fork_and_snapshots(sandbox: Sandbox) -> None:
    sandbox.run_code("state = 'copied'")
    forks = sandbox.fork(count=2, timeout=120)
    try:
        assert len(forks) == 2 and all(isinstance(f, Sandbox) for f in forks), forks
        assert {f.run_code("state").text for f in forks} == {"copied"}  # type: ignore[union-attr]
    finally:
        for f in forks:
            if isinstance(f, Sandbox):
                f.kill()

    snap = sandbox.create_snapshot()
    assert snap.snapshot_id
    assert snap.snapshot_id in [s.snapshot_id for s in sandbox.list_snapshots().next_items()]
    copy = Sandbox.create(snap.snapshot_id)
    try:
        assert copy.run_code("state").text == "copied"
    finally:
        copy.kill()
    assert Sandbox.delete_snapshot(snap.snapshot_id)
    assert not Sandbox.delete_snapshot(snap.snapshot_id)


def _native_network(server, sandbox_id: str):  # type: ignore[no-untyped-def]
    """The sandbox's policy by name as Lizard's own API gives it."""
    resp = httpx.get(f"{server.url}/v1/sandboxes/{sandbox_id}", headers={"Authorization": f"Bearer {server.api_key}"}, timeout=30)
    resp.raise_for_status()
    return resp.json().get("network")


def test_network_options_are_lizards_policy(lizard_server) -> None:  # type: ignore[no-untyped-def]
    """E2B's allow_out/deny_out (allow wins, then deny, then the rest allowed) become Lizard's policy by
    name (docs/e2b.md), read back through Lizard's API; update_network replaces them; what Lizard cannot
    say is refused naming the field. This suite's server has no internet, so enforcement is
    e2e/e2b_test.go's TestE2BNetwork."""
    sb = Sandbox.create(network={"allow_out": ["Allowed.test", "*.wild.test"], "deny_out": [ALL_TRAFFIC]})
    try:
        assert _native_network(lizard_server, sb.sandbox_id) == {"default": "deny", "allow": ["allowed.test", "*.wild.test"]}
        sb.update_network({"deny_out": ["203.0.113.0/24"]})
        assert _native_network(lizard_server, sb.sandbox_id) == {"default": "allow", "deny": ["203.0.113.0/24"]}
        sb.update_network({"allow_out": ["allowed.test"], "allow_internet_access": False})
        assert _native_network(lizard_server, sb.sandbox_id) == {"default": "deny", "allow": ["allowed.test"]}
        with pytest.raises(SandboxException, match=r"^400: network\.denyOut\[0\]: .*domain name"):
            sb.update_network({"deny_out": ["evil.test"]})
        with pytest.raises(SandboxException, match=r"^501: network\.egressProxy"):
            sb.update_network({"allow_out": ["allowed.test"], "egress_proxy": {"address": "127.0.0.1:1080"}})
        assert _native_network(lizard_server, sb.sandbox_id) == {"default": "deny", "allow": ["allowed.test"]}  # nothing applied
    finally:
        sb.kill()
    with pytest.raises(SandboxException, match=r"^400: network\.allowOut\[1\]"):
        Sandbox.create(network={"allow_out": ["ok.test", "api.*.test"], "deny_out": [ALL_TRAFFIC]})
    with pytest.raises(SandboxException, match=r"^501: network\.allowOut\[0\] .*overlaps network\.denyOut\[0\]"):
        Sandbox.create(network={"allow_out": ["10.1.2.3"], "deny_out": ["10.0.0.0/8"]})
    plain = Sandbox.create()
    try:
        with pytest.raises(SandboxException, match="without a network policy"):
            plain.update_network({"allow_out": ["allowed.test"], "deny_out": [ALL_TRAFFIC]})
    finally:
        plain.kill()


def test_wrong_key_is_authentication_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("E2B_API_KEY", "lz_00000000_" + "0" * 64)
    with pytest.raises(AuthenticationException):
        Sandbox.create()
    with pytest.raises(AuthenticationException):
        Sandbox.list().next_items()


def test_key_in_the_e2b_form(lizard_server, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """E2B's SDKs 2.25 to 2.45 refuse a key that is not e2b_ and hex before sending it (docs/e2b.md): the
    Lizard key lz_<id>_<secret> is taken as e2b_<id><secret> too, on the control API and the sandbox URL."""
    key_id, secret = lizard_server.api_key.removeprefix("lz_").split("_")
    e2b_key = f"e2b_{key_id}{secret}"
    assert re.fullmatch(r"e2b_[0-9a-f]+", e2b_key)  # those SDKs' own check
    monkeypatch.setenv("E2B_API_KEY", e2b_key)
    sb = Sandbox.create()
    try:
        assert sb.run_code("6 * 7").text == "42"
        assert sb.sandbox_id in [s.sandbox_id for s in Sandbox.list().next_items()]
    finally:
        sb.kill()
    monkeypatch.setenv("E2B_API_KEY", f"e2b_{key_id}{'0' * 64}")
    with pytest.raises(AuthenticationException):
        Sandbox.list().next_items()


def test_sandbox_killed_mid_run_ends_promptly(sandbox: Sandbox) -> None:
    killed_at: List[float] = []

    def kill() -> None:
        time.sleep(2)
        killed_at.append(time.monotonic())
        Sandbox.kill(sandbox.sandbox_id)

    threading.Thread(target=kill, daemon=True).start()
    with pytest.raises(TimeoutException, match="killed"):
        sandbox.run_code("import time\nprint('started', flush=True)\ntime.sleep(120)")
    assert killed_at and time.monotonic() - killed_at[0] < 2, "the run outlived its sandbox by 2 s or more"


async def test_async_sandbox() -> None:
    sb = await AsyncSandbox.create()
    try:
        seen: List[str] = []
        ex = await sb.run_code("print('a', flush=True)\n6 * 7", on_stdout=lambda m: seen.append(m.line))
        assert ex.text == "42" and seen == ["a\n"]
        ctx = await sb.create_code_context()
        await sb.run_code("z = 1", context=ctx)
        assert (await sb.run_code("z + 1", context=ctx)).text == "2"
        assert ctx.id in [c.id for c in await sb.list_code_contexts()]
    finally:
        await sb.kill()
    assert not await sb.is_running()
