"""Drive Lizard's MCP server with the official MCP Python client (PyPI mcp):
`lizard mcp` over stdio and /mcp over streamable HTTP, each through the same
session: list tools, create a sandbox, pandas, a matplotlib chart, an error
with its traceback, the sandbox killed; then a wrong key refused. Prints
"ok" last; e2e/mcp_test.go runs it against a real lizard serve.

Env: LIZARD_BIN, LIZARD_API_URL, LIZARD_API_KEY."""

import asyncio
import os
import re
from datetime import timedelta

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client

URL = os.environ["LIZARD_API_URL"]
KEY = os.environ["LIZARD_API_KEY"]
TIMEOUT = timedelta(seconds=120)


def texts(res):
    return "\n".join(c.text for c in res.content if c.type == "text")


async def scenario(s: ClientSession, name: str):
    await s.initialize()
    tools = {t.name for t in (await s.list_tools()).tools}
    for want in ("create_sandbox", "run_code", "run_command", "read_file", "write_file", "list_files",
                 "list_sandboxes", "kill_sandbox", "pause_sandbox", "resume_sandbox", "use_sandbox"):
        assert want in tools, (name, want, tools)

    res = await s.call_tool("create_sandbox", {"timeout_seconds": 300}, read_timeout_seconds=TIMEOUT)
    assert not res.isError, (name, texts(res))
    sandbox_id = re.search(r"sandbox_id: (\S+)", texts(res)).group(1)

    # No sandbox_id: the session's pinned sandbox.
    res = await s.call_tool("run_code", {"code": 'import pandas as pd; pd.DataFrame({"x":[1,2,3]}).x.sum()'},
                            read_timeout_seconds=TIMEOUT)
    assert not res.isError and "np.int64(6)" in texts(res), (name, res)

    res = await s.call_tool("run_code", {"code": "import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])\nplt.show()"},
                            read_timeout_seconds=TIMEOUT)
    images = [c for c in res.content if c.type == "image"]
    assert not res.isError and len(images) == 1 and images[0].mimeType == "image/png", (name, res)
    assert images[0].data.startswith("iVBOR"), (name, images[0].data[:20])  # base64 of the PNG magic

    res = await s.call_tool("run_code", {"code": "def f():\n    return 1/0\nf()"}, read_timeout_seconds=TIMEOUT)
    assert res.isError, (name, res)
    assert "ZeroDivisionError" in texts(res) and "f()" in texts(res), (name, texts(res))

    res = await s.call_tool("run_command", {"command": "echo hi from $BASH_VERSION; exit 3"}, read_timeout_seconds=TIMEOUT)
    assert res.isError and "exit code: 3" in texts(res) and "hi from 5" in texts(res), (name, texts(res))

    res = await s.call_tool("run_code", {"code": "print(1)", "language": "cobol"})
    assert res.isError and "language" in texts(res), (name, texts(res))

    res = await s.call_tool("kill_sandbox", {}, read_timeout_seconds=TIMEOUT)
    assert not res.isError and sandbox_id in texts(res), (name, texts(res))
    res = await s.call_tool("list_sandboxes", {})
    assert f"{sandbox_id}\trunning" not in texts(res), (name, texts(res))


async def stdio(key: str):
    params = StdioServerParameters(command=os.environ["LIZARD_BIN"], args=["mcp"],
                                   env={"LIZARD_API_URL": URL, "LIZARD_API_KEY": key, "PATH": os.environ["PATH"]})
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            if key == KEY:
                await scenario(s, "stdio")
                return
            await s.initialize()
            res = await s.call_tool("list_sandboxes", {})
            assert res.isError and "unauthenticated" in texts(res).lower(), texts(res)


async def http(key: str):
    headers = {"Authorization": f"Bearer {key}"}
    async with streamablehttp_client(URL + "/mcp", headers=headers) as (r, w, _):
        async with ClientSession(r, w) as s:
            await scenario(s, "http")


async def http_refused():
    try:
        async with streamablehttp_client(URL + "/mcp", headers={"Authorization": "Bearer wrong"}) as (r, w, _):
            async with ClientSession(r, w) as s:
                await s.initialize()
    except BaseException as e:  # the client raises an ExceptionGroup from its task group
        assert "401" in repr(e) or "Unauthorized" in repr(e), repr(e)
        return
    raise AssertionError("a wrong key opened an MCP session over HTTP")


async def main():
    await stdio(KEY)
    await stdio("wrong")
    await http(KEY)
    await http_refused()
    print("ok")


asyncio.run(main())
