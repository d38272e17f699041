"""Lizard's own desktop API through the SDK's ``sandbox.desktop`` against a real `lizard serve` (docs/desktop.md).

A sandbox of the `desktop` template (conftest's desktop_template): a screenshot of the asked size, a local
page opened in Chromium (no internet), its button found in a screenshot and clicked by coordinates, text
with a shell's metacharacters typed into its field and read back from the window title in the windows
list; the stream's per-viewer tokens (view-only enforced by the VNC server, revoked, another sandbox's
refused, the ninth viewer refused); a sandbox without a desktop told so; bad coordinates and keys refused.
"""

from __future__ import annotations

import io
import struct
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

import pytest
from PIL import Image
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from desktop_page import magenta_centre
from lizard import AsyncCodeSandbox, CodeSandbox, ConflictError, InvalidArgumentError

PAGE = """<!doctype html>
<html><head><title>waiting</title><style>
body { margin: 0; background: #ffffff; }
#go { position: absolute; left: 0; top: 0; width: 100%; height: 200px; border: 0; background: #ff00ff; }
#f { position: absolute; left: 20px; top: 260px; width: 600px; font-size: 24px; }
</style></head><body>
<button id="go" onclick="document.getElementById('f').focus(); document.title = 'clicked'"></button>
<input id="f" onkeydown="if (event.key === 'Enter') { document.title = 'typed:' + this.value; }">
</body></html>
"""

# Typed into the page's field as data: a shell would run the $(...) and the backticks.
HOSTILE_TEXT = "a$(touch /tmp/pwned1)`touch /tmp/pwned2`;|&<>'\"\\ -- --help"


@pytest.fixture(scope="module")
def desktop(desktop_template: None) -> Iterator[CodeSandbox]:
    sb = CodeSandbox.create(template="desktop", timeout_ms=600_000)
    try:
        yield sb
    finally:
        sb.kill()


def _until(what: str, probe: Callable[[], Optional[Any]], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.5)


def _title(sb: CodeSandbox, prefix: str) -> Optional[str]:
    for w in sb.desktop.windows():
        if w.title.startswith(prefix):
            return w.title
    return None


def test_desktop_drives_the_browser(desktop: CodeSandbox) -> None:
    sb = desktop
    assert sb.desktop.screen_size() == (1024, 768)
    png = sb.desktop.screenshot()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and Image.open(io.BytesIO(png)).size == (1024, 768)
    part = sb.desktop.screenshot(region=(10, 20, 300, 200))
    assert Image.open(io.BytesIO(part)).size == (300, 200)

    sb.files.write("/home/user/page.html", PAGE)
    sb.desktop.open("/home/user/page.html")
    _until("the browser's window of the page", lambda: _title(sb, "waiting"))
    x, y = _until("the page painted", lambda: magenta_centre(sb.desktop.screenshot()))
    assert sb.desktop.click(x, y) == (x, y)
    assert sb.desktop.cursor_position() == (x, y)
    _until("the click's effect", lambda: _title(sb, "clicked"), 20)
    sb.desktop.type(HOSTILE_TEXT)
    sb.desktop.press("enter")
    title = _until("the typed text's effect", lambda: _title(sb, "typed:"), 20)
    assert title.startswith("typed:" + HOSTILE_TEXT), title
    assert sb.process.exec("ls /tmp/pwned1 /tmp/pwned2 2>/dev/null | wc -l").stdout.strip() == "0"
    active = [w for w in sb.desktop.windows() if w.active]
    assert active and active[0].title.startswith("typed:"), active

    # The other mouse actions answer where the pointer ends.
    assert sb.desktop.move(100, 300) == (100, 300)
    assert sb.desktop.drag((100, 300), (200, 350)) == (200, 350)
    assert sb.desktop.scroll("down", 2) == (200, 350)


def test_desktop_refuses_bad_input(desktop: CodeSandbox) -> None:
    for x, y in ((-1, 10), (10, -5), (10**9, 10), (16384, 0)):
        with pytest.raises(InvalidArgumentError, match="off any screen"):
            desktop.desktop.click(x, y)
    with pytest.raises(InvalidArgumentError, match="X key names"):
        desktop.desktop.press("ctrl+c; touch /tmp/pwned3")
    with pytest.raises(InvalidArgumentError, match="X key names"):
        desktop.desktop.press("--window")
    with pytest.raises(InvalidArgumentError, match="starts with -"):
        desktop.desktop.open("--help")
    with pytest.raises(InvalidArgumentError, match="inside the 1024x768 screen"):
        desktop.desktop.screenshot(region=(1000, 0, 100, 100))
    assert desktop.process.exec("ls /tmp/pwned3 2>/dev/null | wc -l").stdout.strip() == "0"


def test_sandbox_without_a_desktop_is_told_so() -> None:
    with CodeSandbox.create(timeout_ms=120_000) as sb:
        for call in (sb.desktop.screenshot, sb.desktop.screen_size, sb.desktop.windows, sb.desktop.stream.start,
                     lambda: sb.desktop.click(1, 1), lambda: sb.desktop.type("x")):
            with pytest.raises(ConflictError, match="has no desktop"):
                call()


def _ws_url(viewer_url: str, sandbox_id: Optional[str] = None) -> str:
    if sandbox_id is not None:  # the same token against another sandbox's stream
        head, _, rest = viewer_url.partition("/v1/sandboxes/")
        return head + "/v1/sandboxes/" + sandbox_id + "/" + rest.split("/", 1)[1]
    return viewer_url


@contextmanager
def _rfb(url: str) -> Iterator[ClientConnection]:
    """A VNC session over the viewer's WebSocket, past the handshake (no password: the token is the lock)."""
    with connect(url, subprotocols=["binary"], open_timeout=30, max_size=None) as ws:  # type: ignore[list-item]
        _handshake(ws)
        yield ws


def _refused(url: str) -> int:
    """The status a WebSocket to url is refused with."""
    with pytest.raises(InvalidStatus) as refused:
        with connect(url, open_timeout=30):
            pass
    return int(refused.value.response.status_code)


def _handshake(ws: ClientConnection) -> None:
    buf = bytearray()

    def read(n: int) -> bytes:
        while len(buf) < n:
            buf.extend(ws.recv(timeout=30))
        out = bytes(buf[:n])
        del buf[:n]
        return out

    assert read(12).startswith(b"RFB 003.")
    ws.send(b"RFB 003.008\n")
    types = read(read(1)[0])
    assert 1 in types, f"security types {list(types)}: want None (1)"
    ws.send(b"\x01")
    assert read(4) == b"\x00\x00\x00\x00", "security result"
    ws.send(b"\x01")  # ClientInit: shared
    w, h = struct.unpack(">HH", read(4))
    read(16)  # pixel format
    read(struct.unpack(">I", read(4))[0])  # the desktop's name
    assert (w, h) == (1024, 768)


def _point(ws: ClientConnection, x: int, y: int) -> None:
    ws.send(struct.pack(">BBHH", 5, 0, x, y))  # PointerEvent, no button


def test_stream_viewers(desktop: CodeSandbox) -> None:
    sb = desktop
    sb.desktop.move(500, 500)
    view = sb.desktop.stream.start()
    assert not view.control and view.token.startswith("lzv_") and view.websocket_url.startswith("ws://")
    assert view.token not in view.url.split("#")[0], "the console's URL carries the token in its fragment alone"

    # A view-only viewer's input is dropped by the VNC server, whatever its client sends.
    with _rfb(view.websocket_url) as ws:
        _point(ws, 50, 60)
        time.sleep(1)
        assert sb.desktop.cursor_position() == (500, 500)

    control = sb.desktop.stream.start(control=True)
    assert control.control and control.token != view.token
    with _rfb(control.websocket_url) as ws:
        _point(ws, 50, 60)
        _until("the control viewer's pointer event", lambda: sb.desktop.cursor_position() == (50, 60), 10)
        # Revoking the viewer closes its open connection and refuses the token.
        sb.desktop.stream.revoke(control.viewer_id)
        with pytest.raises(ConnectionClosed):
            for _ in range(100):
                ws.recv(timeout=10)
    assert _refused(control.websocket_url) == 401

    # The token opens its own sandbox's stream alone; a wrong one opens nothing.
    with CodeSandbox.create(timeout_ms=120_000) as other:
        assert _refused(_ws_url(view.websocket_url, other.sandbox_id)) == 401
    assert _refused(view.websocket_url.replace(view.token, "lzv_forged")) == 401

    # At most 8 viewers per sandbox: view and 7 more, then the ninth is refused.
    viewers = [sb.desktop.stream.start(ttl_seconds=60) for _ in range(7)]
    with pytest.raises(ConflictError, match="its most"):
        sb.desktop.stream.start()
    sb.desktop.stream.revoke(viewers[0].viewer_id)
    viewers[0] = sb.desktop.stream.start()

    # Stopping the stream revokes them all; a new viewer starts it again.
    sb.desktop.stream.stop()
    for v in [view] + viewers:
        assert _refused(v.websocket_url) == 401
    again = sb.desktop.stream.start()
    with _rfb(again.websocket_url):
        pass


async def test_async_desktop(desktop: CodeSandbox) -> None:
    sb = await AsyncCodeSandbox.connect(desktop.sandbox_id)
    assert await sb.desktop.screen_size() == (1024, 768)
    assert await sb.desktop.move(321, 123) == (321, 123)
    png = await sb.desktop.screenshot(region=(0, 0, 64, 32))
    assert Image.open(io.BytesIO(png)).size == (64, 32)
    viewer = await sb.desktop.stream.start()
    await sb.desktop.stream.revoke(viewer.viewer_id)
