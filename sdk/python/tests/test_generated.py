"""The sync client is generated from the async one (scripts/gen_sync.py): a feature is written once."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def gen_sync() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_sync", ROOT / "scripts" / "gen_sync.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_sync_client_is_generated_from_the_async_one() -> None:
    """_sync.py and _commands.py are exactly what scripts/gen_sync.py makes of _async.py and
    _async_commands.py: an edit to a generated module alone, or a source not regenerated, fails here."""
    src = ROOT / "src" / "lizard"
    gen = gen_sync()
    assert gen.MODULES == {"_async.py": "_sync.py", "_async_commands.py": "_commands.py"}
    for source, target in gen.MODULES.items():
        want = gen.generate((src / source).read_text(), source)
        assert (src / target).read_text() == want, (
            f"src/lizard/{target} is generated from {source} and differs from it: edit {source}, then run "
            "python sdk/python/scripts/gen_sync.py"
        )


def test_generator_rules() -> None:
    """async and await go (continuation lines aligned after them move left too), names are renamed (in
    strings too), and each seam keeps its # SYNC side."""
    source = '''class AsyncFiles:
    """A thing, async."""
    # SYNC docstring:
    """A thing."""

    async def read(self) -> "AsyncFiles":
        """Read (AsyncFiles.read)."""
        async with self.client.stream() as resp:
            async for chunk in resp.aiter_bytes():
                await self.feed(chunk)
        if True:  # ASYNC
            await asyncio.sleep(1)
        else:  # SYNC
            time.sleep(1)
        if True:  # ASYNC
            self.task = 1

        if False:  # SYNC
            self.thread = 2
        return await self.done(1, 2,
                               3)
'''
    got = gen_sync().generate(source)
    assert got == gen_sync().HEADER.format(source="_async.py") + '''class Files:
    """A thing."""

    def read(self) -> "Files":
        """Read (Files.read)."""
        with self.client.stream() as resp:
            for chunk in resp.iter_bytes():
                self.feed(chunk)
        time.sleep(1)

        self.thread = 2
        return self.done(1, 2,
                         3)
'''
