"""A fake Lizard server for unit tests: an httpx.MockTransport with canned routes that records requests."""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Dict, Iterator, List, Optional, Tuple, Union

import httpx

SANDBOX = {
    "sandboxId": "sbx_1",
    "projectId": "proj_123",
    "template": "interpreter",
    "state": "running",
    "timeoutMs": 300000,
    "metadata": {"k": "v"},
    "createdAt": "2026-01-02T03:04:05.123456789Z",
    "expiresAt": "2026-01-02T03:09:05Z",
}


def ndjson(*events: Dict[str, Any]) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events)


@dataclass
class Recorded:
    method: str
    path: str
    params: List[Tuple[str, str]]
    headers: httpx.Headers
    body: bytes
    timeout: Dict[str, Optional[float]]

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Route:
    status: int = 200
    json: Any = None
    content: bytes = b""
    # chunks are sent one by one; a callable chunk is called when the client reaches it (to log order).
    chunks: Optional[List[Union[bytes, Callable[[], bytes]]]] = None


@dataclass
class FakeServer:
    mode: str = "sync"
    routes: Dict[Tuple[str, str], Route] = field(default_factory=dict)
    requests: List[Recorded] = field(default_factory=list)
    raise_exc: Optional[Exception] = None

    def route(self, method: str, path: str, **kwargs: Any) -> None:
        self.routes[(method, path)] = Route(**kwargs)

    def _respond(self, request: httpx.Request, body: bytes) -> httpx.Response:
        self.requests.append(
            Recorded(
                request.method,
                request.url.path,
                list(request.url.params.multi_items()),
                request.headers,
                body,
                dict(request.extensions.get("timeout", {})),
            )
        )
        if self.raise_exc is not None:
            raise self.raise_exc
        route = self.routes.get((request.method, request.url.path))
        if route is None:
            return httpx.Response(404, json={"code": "not_found", "message": f"no route {request.url.path}"})
        if route.chunks is not None:
            chunks = route.chunks
            if self.mode == "sync":
                def gen() -> Iterator[bytes]:
                    for c in chunks:
                        yield c() if callable(c) else c

                return httpx.Response(route.status, content=gen(),
                                      headers={"Content-Type": "application/x-ndjson"})

            async def agen() -> AsyncIterator[bytes]:
                for c in chunks:
                    yield c() if callable(c) else c

            return httpx.Response(route.status, content=agen(), headers={"Content-Type": "application/x-ndjson"})
        if route.json is not None:
            return httpx.Response(route.status, json=route.json)
        return httpx.Response(route.status, content=route.content)

    def transport(self) -> Union[httpx.MockTransport, Any]:
        if self.mode == "sync":
            def handler(request: httpx.Request) -> httpx.Response:
                return self._respond(request, request.read())

            return httpx.MockTransport(handler)

        async def ahandler(request: httpx.Request) -> httpx.Response:
            return self._respond(request, await request.aread())

        return httpx.MockTransport(ahandler)

    def last(self, method: str, path: str) -> Recorded:
        for r in reversed(self.requests):
            if r.method == method and r.path == path:
                return r
        raise AssertionError(f"no {method} {path} among {[(r.method, r.path) for r in self.requests]}")


async def r(value: Any) -> Any:
    """Await value if it is awaitable: lets one test body drive both the sync and the async client."""
    if inspect.isawaitable(value):
        return await value
    return value
