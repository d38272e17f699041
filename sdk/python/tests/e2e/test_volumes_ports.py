"""End-to-end tests of persistent volumes and exposed ports against a real `lizard serve` (conftest.py):
a volume written by one sandbox and read by the next after a kill, its size enforced, traversal refused;
`python -m http.server` and a WebSocket echo inside a sandbox reached through get_host, refused without a
key, and closed with the sandbox."""

from __future__ import annotations

import base64
import os
import socket
import struct
import time
import uuid
from pathlib import Path
from typing import Dict
from urllib.parse import urlsplit

import httpx
import pytest

from lizard import AsyncCodeSandbox, AsyncVolume, CodeSandbox, ConflictError, InvalidArgumentError, NotFoundError, Volume

WSECHO = Path(__file__).resolve().parents[4] / "e2e" / "testdata" / "wsecho.py"


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_volume_outlives_the_sandbox_full_at_its_size_and_closed_to_the_host(tmp_path: Path) -> None:
    name = _name("py")
    vol = Volume.create(name, size_mb=16)
    assert (vol.name, vol.size_mb) == (name, 16) and vol.volume_id.startswith("vol_")
    assert name in [v.name for v in Volume.list()]
    mount = [{"name": name, "path": "/home/user/data"}]

    with CodeSandbox.create(project_id="proj_123", volumes=mount) as first:
        assert first.get_info().volumes == mount
        first.run_code("open('/home/user/data/note.txt', 'w').write('kept')")
    # killed on exit; the next sandbox finds the file
    with CodeSandbox.create(project_id="proj_123", volumes=mount) as second:
        assert second.run_code("print(open('/home/user/data/note.txt').read())").stdout == "kept\n"
        # The size is the filesystem's.
        full = second.run_code(
            "import errno\n"
            "try:\n"
            "    with open('/home/user/data/big', 'wb') as f:\n"
            "        for _ in range(32):\n"
            "            f.write(b'x' * (1 << 20)); f.flush()\n"
            "except OSError as e:\n"
            "    print(errno.errorcode[e.errno])\n"
        )
        assert full.stdout == "ENOSPC\n"
        # A symlink to a host file resolves inside the sandbox, not on the host.
        secret = tmp_path / "host-secret"
        secret.write_text("HOST-SECRET")
        out = second.run_code(
            "import os\n"
            f"os.symlink({str(secret)!r}, '/home/user/data/link')\n"
            "try:\n"
            "    print(open('/home/user/data/link').read())\n"
            "except OSError as e:\n"
            "    print(type(e).__name__)\n"
        )
        assert out.stdout == "FileNotFoundError\n"
        with pytest.raises(ConflictError):
            Volume.delete(name)
    # Traversal in names and paths is refused before anything is made.
    with pytest.raises(InvalidArgumentError):
        Volume.create("../etc")
    with pytest.raises(InvalidArgumentError):
        CodeSandbox.create(volumes=[{"name": name, "path": "/home/user/../../etc"}])
    with pytest.raises(InvalidArgumentError):
        CodeSandbox.create(volumes=[{"name": name, "path": "/proc/self"}])
    Volume.delete(name)
    with pytest.raises(NotFoundError):
        Volume.get(name)


def _start_servers(sb: CodeSandbox) -> None:
    sb.files.write("/home/user/wsecho.py", WSECHO.read_bytes())
    sb.run_code(
        "import subprocess, sys\n"
        "open('/home/user/index.html', 'w').write('hello from the sandbox')\n"
        "for args in (['-m', 'http.server', '8000', '--bind', '0.0.0.0'], ['/home/user/wsecho.py', '8765']):\n"
        "    subprocess.Popen([sys.executable] + args, cwd='/home/user', start_new_session=True,\n"
        "                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
    )


def _wait_ok(url: str, headers: Dict[str, str]) -> httpx.Response:
    deadline = time.monotonic() + 30
    while True:
        resp = httpx.get(url, headers=headers, timeout=30)
        if resp.status_code == 200 or time.monotonic() > deadline:
            return resp
        time.sleep(0.2)


class _WebSocket:
    """A minimal WebSocket client (text frames), enough to test the proxy without another dependency."""

    def __init__(self, url: str, headers: Dict[str, str]) -> None:
        u = urlsplit(url)
        self.sock = socket.create_connection((u.hostname or "127.0.0.1", u.port or 80), timeout=15)
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [f"GET {u.path}{'?' + u.query if u.query else ''} HTTP/1.1", f"Host: {u.netloc}", "Upgrade: websocket",
                 "Connection: Upgrade", "Sec-WebSocket-Version: 13", f"Sec-WebSocket-Key: {key}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                break
            head += chunk
        self.status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else 0

    def send(self, text: str) -> None:
        data, mask = text.encode(), os.urandom(4)
        self.sock.sendall(bytes([0x81, 0x80 | len(data)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _read(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed")
            out += chunk
        return out

    def recv(self) -> str:
        b0, b1 = self._read(2)
        n = b1 & 0x7F
        if n == 126:
            (n,) = struct.unpack(">H", self._read(2))
        payload = self._read(n)
        if b0 & 0x0F == 0x8:
            raise ConnectionError("close frame")
        return payload.decode()

    def close(self) -> None:
        self.sock.close()


def test_get_host_serves_http_and_websocket_with_a_key_or_token(lizard_server: object) -> None:
    key = os.environ["LIZARD_API_KEY"]
    sb = CodeSandbox.create(project_id="proj_123")
    try:
        _start_servers(sb)
        url = sb.get_host(8000)
        assert url == f"{os.environ['LIZARD_API_URL'].rstrip('/')}/v1/sandboxes/{sb.sandbox_id}/ports/8000/"
        resp = _wait_ok(url + "index.html", {"Authorization": f"Bearer {key}"})
        assert (resp.status_code, resp.text) == (200, "hello from the sandbox")
        refused = httpx.get(url + "index.html")
        assert refused.status_code == 401 and "access token" in refused.json()["message"]
        token = sb.access_token
        assert token
        assert httpx.get(url + "index.html", params={"lizard_access_token": token}).text == "hello from the sandbox"
        closed = httpx.get(sb.get_host(8001), headers={"Authorization": f"Bearer {key}"})
        assert closed.status_code == 502 and "nothing listens on port 8001" in closed.json()["message"]

        ws_url = sb.get_host(8765) + "ws"
        _wait_ok(sb.get_host(8765), {"X-Lizard-Access-Token": token})
        assert _WebSocket(ws_url, {}).status == 401
        ws = _WebSocket(ws_url, {"X-Lizard-Access-Token": token})
        assert ws.status == 101
        for msg in ("hello", "streamed"):
            ws.send(msg)
            assert ws.recv() == msg
        sb.kill()
        with pytest.raises(ConnectionError):  # closed by the kill, not a timeout (an OSError too)
            ws.recv()
        ws.close()
        assert httpx.get(url, headers={"Authorization": f"Bearer {key}"}).status_code == 410
    finally:
        sb.kill()


async def test_async_get_host_and_volumes() -> None:
    name = _name("pya")
    await AsyncVolume.create(name, size_mb=16)
    try:
        assert name in [v.name for v in await AsyncVolume.list()]
        async with AsyncCodeSandbox.create(volumes=[{"name": name, "path": "/mnt/v"}], public_ports=True) as sb:
            assert sb.get_host(8000).endswith(f"/v1/sandboxes/{sb.sandbox_id}/ports/8000/")
            assert sb.access_token
            await sb.run_code(
                "import subprocess, sys\n"
                "open('/mnt/v/index.html', 'w').write('public')\n"
                "subprocess.Popen([sys.executable, '-m', 'http.server', '8000'], cwd='/mnt/v', start_new_session=True,\n"
                "                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
            )
            # Public: no credential at all.
            resp = _wait_ok(sb.get_host(8000) + "index.html", {})
            assert (resp.status_code, resp.text) == (200, "public")
    finally:
        await AsyncVolume.delete(name)
