"""End-to-end tests of lifecycle events against a real `lizard serve` (conftest.py): a follow sees a
sandbox's create, pause, resume and kill in order, sync and async; pages filter by sandbox, type and
metadata; a bad filter is InvalidArgumentError naming it."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import List

import pytest

from lizard import AsyncCodeSandbox, AsyncEvents, CodeSandbox, Event, Events, InvalidArgumentError


def test_follow_and_list_events() -> None:
    run = uuid.uuid4().hex
    with Events.follow(metadata={"run": run}) as stream:
        sandbox = CodeSandbox.create(metadata={"run": run}, timeout_ms=300_000)
        sandbox.pause()
        sandbox.resume()
        sandbox.kill()
        # A follow never ends by itself: close it if the events do not come.
        timer = threading.Timer(30, stream.close)
        timer.start()
        seen: List[Event] = []
        for ev in stream:
            seen.append(ev)
            if len(seen) == 4:
                break
        timer.cancel()
    assert [e.type for e in seen] == ["sandbox.created", "sandbox.paused", "sandbox.resumed", "sandbox.killed"]
    assert {e.sandbox_id for e in seen} == {sandbox.sandbox_id}
    assert all(e.metadata == {"run": run} and e.project_id == "proj_123" for e in seen)
    assert seen[0].data["state"] == "running" and seen[3].data["state"] == "killed"
    assert stream.last == seen[3].id and [e.id for e in seen] == sorted(e.id for e in seen)

    page = Events.list(sandbox_id=sandbox.sandbox_id, limit=3)
    assert [e.id for e in page.events] == [e.id for e in seen[:3]] and page.has_more
    rest = Events.list(sandbox_id=sandbox.sandbox_id, after=page.next)
    assert [e.type for e in rest.events] == ["sandbox.killed"] and not rest.has_more
    paused = Events.list(types=["sandbox.paused"], metadata={"run": run})
    assert [e.id for e in paused.events] == [seen[1].id]

    with pytest.raises(InvalidArgumentError, match="type"):
        Events.list(types=["sandbox.nope"])
    with pytest.raises(InvalidArgumentError, match="limit"):
        Events.list(limit=0)


async def test_follow_and_list_events_async() -> None:
    run = uuid.uuid4().hex
    stream = await AsyncEvents.follow(metadata={"run": run}, types=["sandbox.created", "sandbox.killed"])
    async with stream:
        sandbox = await AsyncCodeSandbox.create(metadata={"run": run}, timeout_ms=300_000)
        await sandbox.kill()
        seen: List[Event] = []

        async def two() -> None:
            async for ev in stream:
                seen.append(ev)
                if len(seen) == 2:
                    return

        await asyncio.wait_for(two(), 30)
    assert [(e.type, e.sandbox_id) for e in seen] == [
        ("sandbox.created", sandbox.sandbox_id), ("sandbox.killed", sandbox.sandbox_id)]
    page = await AsyncEvents.list(sandbox_id=sandbox.sandbox_id)
    assert [e.id for e in page.events] == [e.id for e in seen]
    with pytest.raises(InvalidArgumentError, match="metadata"):
        await AsyncEvents.list(metadata={"": "x"})
