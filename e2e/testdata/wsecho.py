"""A WebSocket echo server for the exposed-ports tests (Go e2e, Python and TypeScript SDK e2e).

Run inside a sandbox: python wsecho.py PORT. Serves /ws (echoes each message back) and / (plain
text "wsecho"), on 0.0.0.0, with tornado (in the interpreter template).
"""

import asyncio
import sys

import tornado.web
import tornado.websocket


class Echo(tornado.websocket.WebSocketHandler):
    def check_origin(self, origin):  # type: ignore[no-untyped-def]
        return True

    def on_message(self, message):  # type: ignore[no-untyped-def]
        self.write_message(message, binary=isinstance(message, bytes))


class Root(tornado.web.RequestHandler):
    def get(self):  # type: ignore[no-untyped-def]
        self.write("wsecho")


async def main() -> None:
    app = tornado.web.Application([(r"/ws", Echo), (r"/", Root)])
    app.listen(int(sys.argv[1]), address="0.0.0.0")
    await asyncio.Event().wait()


asyncio.run(main())
