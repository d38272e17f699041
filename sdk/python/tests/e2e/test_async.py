"""End-to-end tests of AsyncCodeSandbox against a real `lizard serve` (see conftest.py)."""

from __future__ import annotations

import asyncio
import base64
import time
from typing import List

import pytest

import lizard
from lizard import AsyncCodeSandbox


async def test_seed_example_async() -> None:
    async with AsyncCodeSandbox.create(project_id="proj_123", timeout_ms=300_000) as sandbox:
        await sandbox.run_code('import pandas as pd\ndf = pd.DataFrame({"x": [1, 2, 3]})')
        run = await sandbox.run_code("df.x.sum()")
        assert run.results[0].data == "np.int64(6)"
        assert (await sandbox.run_code("1/0")).error.name == "ZeroDivisionError"


async def test_async_surface() -> None:
    sandbox = await AsyncCodeSandbox.create(timeout_ms=300_000, metadata={"suite": "async"})
    async with sandbox:
        # Streaming with an async callback: the first line arrives while the code still runs.
        seen: List[float] = []
        start = time.monotonic()

        async def on_stdout(text: str) -> None:
            seen.append(time.monotonic() - start)
            await asyncio.sleep(0)

        run = await sandbox.run_code("import time\nprint(1, flush=True)\ntime.sleep(2)\nprint(2)",
                                     on_stdout=on_stdout)
        assert run.stdout == "1\n2\n" and len(seen) == 2
        # Measured between the two lines, not against the call's end: on a loaded machine the call's
        # own overhead shrinks the margin after the last line, while the 2 s sleep still separates them.
        assert seen[1] - seen[0] >= 1.0, "the first line must arrive while the code sleeps"

        chart = await sandbox.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()")
        png = next(r.data for r in chart.results if r.mime == "image/png")
        assert base64.b64decode(png).startswith(b"\x89PNG")

        timed_out = await sandbox.run_code("import time\ntime.sleep(30)", timeout_ms=1000)
        assert timed_out.error is not None and timed_out.error.name == "TimeoutError"
        assert (await sandbox.run_code("3 * 3")).results[0].data == "9"

        ctx = await sandbox.create_context()
        await sandbox.run_code("v = 'ctx'", context=ctx)
        assert (await sandbox.run_code("v", context=ctx)).results[0].data == "'ctx'"
        assert ctx.id in [c.id for c in await sandbox.list_contexts()]
        await sandbox.restart_context(ctx)
        await sandbox.delete_context(ctx)

        js = await sandbox.run_code("console.log('js')", language="javascript")
        assert js.stdout == "js\n" and js.results == []

        res = await sandbox.process.exec("echo hi; exit 2")
        assert (res.stdout, res.exit_code) == ("hi\n", 2)

        await sandbox.files.write("async/b.bin", b"\x00\x01\x02")
        assert await sandbox.files.read("async/b.bin", format="bytes") == b"\x00\x01\x02"
        assert await sandbox.files.exists("async/b.bin")
        assert [e.name for e in await sandbox.files.list("async")] == ["b.bin"]
        await sandbox.files.remove("async")
        assert not await sandbox.files.exists("async")

        info = await sandbox.get_info()
        assert info.state == "running" and info.metadata == {"suite": "async"}
        listed = await AsyncCodeSandbox.list(metadata={"suite": "async"})
        assert [s.sandbox_id for s in listed] == [sandbox.sandbox_id]
        await sandbox.set_timeout(120_000)
        other = await AsyncCodeSandbox.connect(sandbox.sandbox_id)
        await other.close()
    # Leaving `async with` killed it.
    with pytest.raises(lizard.NotFoundError):
        await AsyncCodeSandbox.connect(sandbox.sandbox_id)


async def test_async_typed_errors() -> None:
    with pytest.raises(lizard.AuthenticationError):
        await AsyncCodeSandbox.create(api_key="lz_bad_key")
    with pytest.raises(lizard.NotFoundError):
        await AsyncCodeSandbox.connect("sbx_doesnotexist")
    with pytest.raises(lizard.LizardConnectionError):
        await AsyncCodeSandbox.create(api_url="http://127.0.0.1:1", request_timeout=5)
