"""E2B's Desktop SDK (PyPI e2b-desktop 2.7.2) unchanged against a real `lizard serve` (docs/desktop.md).

The project's `desktop` template is built from templates/desktop/recipe.yaml with `lizard template build`
(conftest's desktop_template: found in the template cache by its key after the first build, a few seconds;
the first build on an empty cache takes minutes). `Sandbox.create()` then starts from the template snapshot with the desktop running;
the SDK's own Xvfb and startxfce4 on every create must leave it as it is. The browser opens a local page
(no internet), a button found in a screenshot is clicked by its coordinates, text is typed into a field and
the page's effect is read back from the browser window's title.
"""

from __future__ import annotations

import base64
import io
import os
import socket
import time
from typing import Any, Callable, Optional

import httpx
import pytest
from desktop_page import magenta_centre
from e2b import CommandExitException
from e2b_desktop import Sandbox
from PIL import Image


PAGE = """<!doctype html>
<html><head><title>waiting</title><style>
body { margin: 0; background: #ffffff; }
#go { position: absolute; left: 0; top: 0; width: 100%; height: 200px; border: 0; background: #ff00ff; }
#f { position: absolute; left: 20px; top: 260px; width: 400px; font-size: 24px; }
</style></head><body>
<button id="go" onclick="document.getElementById('f').focus(); document.title = 'clicked'"></button>
<input id="f" onkeydown="if (event.key === 'Enter') { document.title = 'typed:' + this.value; }">
</body></html>
"""


@pytest.fixture(autouse=True)
def _e2b_env(lizard_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The three variables of docs/e2b.md, and nothing else of E2B's."""
    for var in ("E2B_DOMAIN", "E2B_DEBUG", "E2B_ACCESS_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("E2B_API_URL", f"{lizard_server.url}/e2b")
    monkeypatch.setenv("E2B_SANDBOX_URL", f"{lizard_server.url}/e2b/sandbox")
    monkeypatch.setenv("E2B_API_KEY", lizard_server.api_key)


def _until(what: str, probe: Callable[[], Optional[Any]], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = probe()
        except CommandExitException:
            got = None
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.5)


def _one(sb: Sandbox, name: str) -> None:
    """Exactly one process named name (the X server: the real /usr/bin/Xvfb, not the template's wrapper
    of the name, which waits for the server it started): the SDK's own start on create opened no second one."""
    pgrep = "pgrep -f '^/usr/bin/Xvfb '" if name == "Xvfb" else f"pgrep -x {name}"
    out = sb.commands.run(f"{pgrep} | wc -l").stdout.strip()
    assert out == "1", f"{out} processes named {name}; want the template's one"


def test_desktop_sdk_drives_the_browser(desktop_template: None) -> None:
    begin = time.monotonic()
    sb = Sandbox.create(timeout=300)
    try:
        created = time.monotonic() - begin
        # E2B's SDK started Xvfb and startxfce4 again: the template's desktop is the only one.
        for name in ("Xvfb", "xfce4-session", "xfwm4", "xfdesktop"):
            _one(sb, name)
        assert sb.get_screen_size() == (1024, 768)
        assert sb.get_cursor_position() == (512, 384)
        png = sb.screenshot()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and Image.open(io.BytesIO(png)).size == (1024, 768)

        sb.files.write("/home/user/page.html", PAGE)
        sb.open("/home/user/page.html")
        win = _until("the browser's window of the page",
                     lambda: sb.commands.run("xdotool search --onlyvisible --name '^waiting'").stdout.split()[0])
        # Where the button is, from a screenshot (the page may still be painting at first).
        x, y = _until("the page painted", lambda: magenta_centre(sb.screenshot()))
        sb.left_click(x, y)
        assert sb.get_cursor_position() == (x, y)
        _until("the click's effect", lambda: sb.get_window_title(win).startswith("clicked"), 20)
        sb.write("hello lizard")
        sb.press("enter")
        title = _until("the typed text's effect",
                       lambda: (t := sb.get_window_title(win)).startswith("typed:") and t, 20)
        assert title.startswith("typed:hello lizard"), title
        print(f"create with the desktop running: {created:.1f} s; whole test {time.monotonic() - begin:.1f} s")
    finally:
        sb.kill()


def test_desktop_sdk_resolution_asked_at_create(desktop_template: None) -> None:
    sb = Sandbox.create(resolution=(1280, 800), dpi=120, timeout=120)
    try:
        assert sb.get_screen_size() == (1280, 800)
        _one(sb, "Xvfb")
        _one(sb, "xfce4-session")
        png = sb.screenshot()
        assert Image.open(io.BytesIO(png)).size == (1280, 800)
    finally:
        sb.kill()


def test_desktop_sdk_stream_through_the_port_proxy(lizard_server: Any, desktop_template: None) -> None:
    """stream.start() runs x11vnc and Debian's noVNC (/opt/noVNC); both answer only through Lizard's
    authenticated port proxy: noVNC's page, and its WebSocket to the VNC server (the RFB greeting)."""
    sb = Sandbox.create(timeout=120)
    try:
        sb.stream.start()
        assert sb.stream.get_url().startswith(f"https://6080-{sb.sandbox_id}.")
        base = f"{lizard_server.url}/v1/sandboxes/{sb.sandbox_id}/ports/6080"
        key = {"Authorization": f"Bearer {lizard_server.api_key}"}
        assert httpx.get(f"{base}/vnc.html", timeout=30).status_code == 401
        page = httpx.get(f"{base}/vnc.html", headers=key, timeout=30)
        assert page.status_code == 200 and "noVNC" in page.text
        assert _rfb_greeting(lizard_server.url, f"/v1/sandboxes/{sb.sandbox_id}/ports/6080/websockify", key).startswith(b"RFB 003.")
        sb.stream.stop()
        _until("x11vnc ended", lambda: sb.commands.run("pgrep -x x11vnc || echo gone").stdout.strip() == "gone", 20)
    finally:
        sb.kill()


def _rfb_greeting(url: str, path: str, headers: dict) -> bytes:  # type: ignore[type-arg]
    """The first WebSocket message of websockify's VNC proxy: the VNC server's version line."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        req = (f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {base64.b64encode(os.urandom(16)).decode()}\r\nSec-WebSocket-Version: 13\r\n"
               f"Sec-WebSocket-Protocol: binary\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n")
        s.sendall(req.encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = s.recv(4096)
            assert chunk, f"the upgrade was not answered: {buf!r}"
            buf += chunk
        head, _, rest = buf.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101"), head
        while len(rest) < 2 or len(rest) < 2 + (rest[1] & 0x7F):
            chunk = s.recv(4096)
            assert chunk, "no WebSocket frame"
            rest += chunk
        assert rest[0] & 0x0F == 2, f"not a binary frame: {rest[:2]!r}"  # websockify sends binary frames
        return rest[2:2 + (rest[1] & 0x7F)]


# A page whose state lives in the browser's memory: each line typed (Enter) is appended to a yellow box, the
# field emptied and left (no blinking caret in the screenshots), and the window's title says the box's text.
STATE_PAGE = """<!doctype html>
<html><head><title>waiting</title><style>
body { margin: 0; background: #ffffff; }
#go { position: absolute; left: 0; top: 0; width: 100%; height: 200px; border: 0; background: #ff00ff; }
#f { position: absolute; left: 20px; top: 240px; width: 300px; font-size: 20px; }
#out { position: absolute; left: 20px; top: 300px; width: 600px; height: 60px; background: #ffff00;
       font: 32px monospace; color: #000000; }
</style></head><body>
<button id="go" onclick="document.getElementById('f').focus(); document.title = 'focused'"></button>
<input id="f" onkeydown="if (event.key === 'Enter') { const o = document.getElementById('out');
  o.textContent += '[' + this.value + ']'; this.value = ''; this.blur(); document.title = 'typed:' + o.textContent; }">
<div id="out"></div>
</body></html>
"""


def _yellow_box(png: bytes) -> Optional[tuple[int, int, int, int]]:
    """The bounding box of the page's yellow box in a screenshot (None if not painted)."""
    img = Image.open(io.BytesIO(png)).convert("RGB")
    px, (w, h) = img.load(), img.size
    xs, ys = [], []
    for y in range(0, h, 2):
        for x in range(0, w, 2):
            if px[x, y] == (255, 255, 0):
                xs.append(x)
                ys.append(y)
    if len(xs) < 100:
        return None
    return min(xs), min(ys), max(xs) + 1, max(ys) + 1


def _crop(png: bytes, box: tuple[int, int, int, int]) -> bytes:
    return Image.open(io.BytesIO(png)).convert("RGB").crop(box).tobytes()


def _windows(sb: Sandbox) -> set[tuple[str, str]]:
    """The visible top-level windows: (id, name) of each xdotool finds."""
    ids = sb.commands.run("xdotool search --onlyvisible --name '.*' || true").stdout.split()
    return {(i, sb.commands.run(f"xdotool getwindowname {i} || true").stdout.strip()) for i in ids}


def _title(sb: Sandbox, win: str) -> str:
    """The page's title: the window's name without the browser's " - Chromium"."""
    return sb.get_window_title(win).rsplit(" - ", 1)[0]


def _type_line(sb: Sandbox, win: str, text: str, want_title: str) -> None:
    """Click the page's button (it focuses the field), type text and Enter; wait for the title."""
    x, y = _until("the page painted", lambda: magenta_centre(sb.screenshot()))
    sb.left_click(x, y)
    _until("the click's effect", lambda: _title(sb, win) == "focused", 20)
    sb.write(text)
    sb.press("enter")
    _until(f"the title {want_title!r}", lambda: _title(sb, win) == want_title, 20)
    sb.move_mouse(1000, 700)  # the pointer out of the page's box: scrot draws it


def _desktop_with_state(sb: Sandbox) -> tuple[str, tuple[int, int, int, int], bytes]:
    """Chromium on STATE_PAGE with "[before]" typed; its window, the yellow box and the box's pixels."""
    sb.files.write("/home/user/state.html", STATE_PAGE)
    sb.open("/home/user/state.html")
    win = _until("the browser's window of the page",
                 lambda: sb.commands.run("xdotool search --onlyvisible --name '^waiting'").stdout.split()[0])
    _type_line(sb, win, "before", "typed:[before]")
    box = _until("the yellow box painted with its text", lambda: _yellow_box(sb.screenshot()))
    # The box's pixels once they stop changing (the text painted).
    last = b""
    for _ in range(20):
        now = _crop(sb.screenshot(), box)
        if now == last:
            return win, box, now
        last = now
        time.sleep(0.5)
    raise AssertionError("the yellow box never stopped changing")


def _desktop_pids(sb: Sandbox) -> dict[str, str]:
    return {name: sb.commands.run(f"pgrep -x {name} | head -1").stdout.strip()
            for name in ("Xvfb", "xfce4-session", "xfwm4", "chromium")}


def test_desktop_pause_resume_keeps_windows_and_state(lizard_server: Any, desktop_template: None) -> None:
    """A desktop paused with its memory and resumed has the same X server, windows and page state: the
    window list, the typed text in the page's pixels (identical), the title; input still works, the clock
    is the host's, and the stream's VNC server (a listening socket from before the pause) still answers."""
    sb = Sandbox.create(timeout=300)
    try:
        win, box, pixels = _desktop_with_state(sb)
        windows, pids = _windows(sb), _desktop_pids(sb)
        assert win in {i for i, _ in windows}, windows
        sb.stream.start()

        assert sb.pause()
        time.sleep(2)
        sb.connect(timeout=300)

        assert _desktop_pids(sb) == pids, "the desktop's processes changed across the pause"
        assert _windows(sb) == windows, "the windows changed across the pause"
        assert _title(sb, win) == "typed:[before]"
        assert _crop(sb.screenshot(), box) == pixels, "the page's typed text is not the same pixels after the resume"
        skew = abs(float(sb.commands.run("date +%s.%N").stdout) - time.time())
        assert skew < 5, f"the sandbox's clock is {skew:.1f} s off the host's after the resume"
        key = {"Authorization": f"Bearer {lizard_server.api_key}"}
        assert _rfb_greeting(lizard_server.url, f"/v1/sandboxes/{sb.sandbox_id}/ports/6080/websockify", key).startswith(b"RFB 003.")

        _type_line(sb, win, "after", "typed:[before][after]")
        assert _crop(sb.screenshot(), box) != pixels, "typing after the resume did not repaint the box"
    finally:
        sb.kill()


def test_desktop_fork_keeps_windows_and_state(desktop_template: None) -> None:
    """A fork of a desktop has the parent's windows and page state (the same pixels); typing in the child
    changes the child alone, and the parent still takes input after it."""
    sb = Sandbox.create(timeout=300)
    child: Optional[Sandbox] = None
    try:
        win, box, pixels = _desktop_with_state(sb)
        windows = _windows(sb)
        forks = sb.fork(count=1, timeout=300)
        assert len(forks) == 1 and isinstance(forks[0], Sandbox), forks
        child = forks[0]
        assert child.sandbox_id != sb.sandbox_id

        assert _windows(child) == windows, "the child's windows are not the parent's"
        assert _title(child, win) == "typed:[before]"
        assert _crop(child.screenshot(), box) == pixels, "the child's page is not the parent's pixels"
        _one(child, "Xvfb")

        _type_line(child, win, "child", "typed:[before][child]")
        assert _title(sb, win) == "typed:[before]", "typing in the child changed the parent"
        assert _crop(sb.screenshot(), box) == pixels, "typing in the child repainted the parent"
        _type_line(sb, win, "parent", "typed:[before][parent]")
        assert _title(child, win) == "typed:[before][child]", "typing in the parent changed the child"
    finally:
        if child is not None:
            child.kill()
        sb.kill()
