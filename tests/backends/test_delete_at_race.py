"""A conditional delete (``delete_agent_at``: a retention purge, a governed delete on an
engine without one commit for the entry and the change) must delete only the stream at
the head it names. The default implementation compared the head, then deleted whatever
was there: an append by another writer landing between the two (its write
acknowledged) was deleted with the agent, and the delete reported done — no error
anywhere. The tiered backend now runs the durable tier's own conditional delete (one
commit there); so does its demotion to the cold tier. S3 (no transaction over several
objects) first claims the commit slot the next append at that head would take."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.errors import ConflictError

from ._services import fresh_url


def before_the_delete(backend: Any, agent_id: str, write: Callable[[], Awaitable[Any]]) -> None:
    """Run ``write`` once, just before ``backend`` deletes ``agent_id`` by any call."""
    armed = [True]
    for name in ("delete_agent", "delete_agent_at"):
        real = getattr(backend, name)

        async def hooked(agent: str, *args: Any, _real: Any = real) -> Any:
            if agent == agent_id and armed[0]:
                armed[0] = False
                await write()
            return await _real(agent, *args)

        setattr(backend, name, hooked)
    real_together = getattr(backend, "append_together", None)

    async def together(requests: Any, changes: Any = ()) -> Any:
        # (a tiered demotion's delete of the stream, in one commit with its marker)
        if armed[0] and any(c.agent_id == agent_id and c.delete_at for c in changes):
            armed[0] = False
            await write()
        return await real_together(requests, changes)  # type: ignore[misc]

    if real_together is not None:
        backend.append_together = together


async def test_tiered_delete_at_keeps_a_write_landing_before_the_delete(tmp_path: Path) -> None:
    with fresh_url("tiered", tmp_path) as url:
        async with StateStore(url) as store, StateStore(url) as other:
            await store.save("a", {"i": 0})
            await store.save("a", {"i": 1})

            async def another_write() -> None:  # another process on the same tiers
                await other.save("a", {"i": 2})

            before_the_delete(store.backend.durable, "a", another_write)  # type: ignore[attr-defined]
            with pytest.raises(ConflictError) as caught:
                await store.backend.delete_agent_at("a", 2)
            assert (caught.value.expected_seq, caught.value.current_seq) == (2, 3)
            assert await other.backend.head("a") == 3
            assert (await other.load("a")).data == {"i": 2}  # the acknowledged write


async def test_tiered_delete_at_of_a_demoted_agent(tmp_path: Path) -> None:
    with fresh_url("tiered", tmp_path) as url:
        async with StateStore(url) as store:
            await store.save("a", {"i": 0})
            await store.save("a", {"i": 1})
            backend: Any = store.backend
            assert await backend.demote("a")
            with pytest.raises(ConflictError):
                await backend.delete_agent_at("a", 1)
            assert (await store.load("a")).data == {"i": 1}
            assert await backend.delete_agent_at("a", 2)
            assert await backend.head("a") == 0
            assert await backend.cold.head("a") == 0
            assert [a.agent_id for a in await store.list_agents()] == []


async def test_tiered_demotion_keeps_a_write_landing_before_its_delete(tmp_path: Path) -> None:
    """Demotion copies the agent to the cold tier, writes its marker, then deletes the
    durable stream: an append from another process before that delete was deleted with
    it (the cold copy, older, came back on the next read)."""
    with fresh_url("tiered", tmp_path) as url:
        async with StateStore(url) as store, StateStore(url) as other:
            await store.save("a", {"i": 0})

            async def another_write() -> None:
                await other.save("a", {"i": 1})

            backend: Any = store.backend
            before_the_delete(backend.durable, "a", another_write)
            assert not await backend.demote("a")
            assert await other.backend.head("a") == 2
            assert (await other.load("a")).data == {"i": 1}
            assert (await store.load("a")).data == {"i": 1}


def after_the_check(backend: Any, agent_id: str, write: Callable[[], Awaitable[Any]]) -> None:
    """Run ``write`` once, right after ``backend`` (S3) read the newest commit of
    ``agent_id`` (the head a conditional delete compares), from its worker thread."""
    loop = asyncio.get_running_loop()
    real = backend._tip_layout
    armed = [True]

    def hooked(agent: str) -> Any:
        found = real(agent)
        if agent == agent_id and armed[0]:
            armed[0] = False
            asyncio.run_coroutine_threadsafe(write(), loop).result()
        return found

    backend._tip_layout = hooked


async def test_s3_delete_at_keeps_a_write_landing_after_its_check(tmp_path: Path) -> None:
    with fresh_url("s3", tmp_path) as url:
        async with StateStore(url) as store, StateStore(url) as other:
            await store.save("a", {"i": 0})
            await store.save("a", {"i": 1})

            async def another_write() -> None:  # another process on the same bucket
                await other.save("a", {"i": 2})

            after_the_check(store.backend, "a", another_write)
            with pytest.raises(ConflictError) as caught:
                await store.backend.delete_agent_at("a", 2)
            assert (caught.value.expected_seq, caught.value.current_seq) == (2, 3)
            assert await other.backend.head("a") == 3
            assert (await other.load("a")).data == {"i": 2}  # the acknowledged write
            assert await other.backend.delete_agent_at("a", 3)  # no claim left behind
            assert await other.backend.head("a") == 0


async def test_s3_delete_at_whose_process_died_after_its_claim(tmp_path: Path) -> None:
    """The claim written, the process killed before the deletions: the stream still
    reads as it was, an append finishes the delete first (and conflicts: the agent is
    gone), a new stream can be created, and nothing of the old one shows."""
    with fresh_url("s3", tmp_path) as url:
        async with StateStore(url) as store, StateStore(url) as other:
            await store.save("a", {"i": 0})
            await store.save("a", {"i": 1})
            backend: Any = store.backend

            def killed(agent_id: str) -> None:
                raise RuntimeError("killed")

            backend._finish_delete = killed
            with pytest.raises(RuntimeError, match="killed"):
                await backend.delete_agent_at("a", 2)
            assert await other.backend.head("a") == 2
            assert (await other.load("a")).data == {"i": 1}
            with pytest.raises(ConflictError) as caught:
                await other.save("a", {"i": 2}, expected_seq=2)
            assert caught.value.current_seq == 0
            assert await other.backend.head("a") == 0
            await other.save("a", {"new": True})
            assert (await other.load("a")).data == {"new": True}
            assert [e.seq for e in await other.backend.read("a")] == [1]


async def test_s3_delete_at_sent_again_after_its_claim(tmp_path: Path) -> None:
    """A try of the delete sent again (its first reply lost after the claim) finishes
    it and reports it done, not a conflict with its own claim."""
    with fresh_url("s3", tmp_path) as url:
        async with StateStore(url) as store:
            await store.save("a", {"i": 0})
            backend: Any = store.backend
            real = backend._finish_delete
            backend._finish_delete = lambda agent_id: (_ for _ in ()).throw(OSError("lost"))
            with pytest.raises(OSError):
                await backend.delete_agent_at("a", 1)
            backend._finish_delete = real
            assert await backend.delete_agent_at("a", 1)
            assert await backend.head("a") == 0
            assert await store.list_agents() == []


async def test_s3_delete_and_an_append_landing_after_it_listed_the_stream(
    tmp_path: Path,
) -> None:
    """``delete_agent`` on S3 listed the agent's objects and deleted them: a commit an
    append made after the listing survived alone — a stream starting at its seq, with
    no base, whose state cannot be read. Now the delete claims the stream first (as
    ``delete_agent_at``): the append lands before it (and is deleted with the stream)
    or conflicts."""
    with fresh_url("s3", tmp_path) as url:
        async with StateStore(url) as store, StateStore(url) as other:
            await store.save("a", {"i": 0})
            await store.save("a", {"i": 1})
            landed: list[bool] = []

            async def another_write() -> None:
                try:
                    await other.save("a", {"i": 2}, expected_seq=2)
                    landed.append(True)
                except ConflictError:
                    landed.append(False)

            backend: Any = store.backend
            loop = asyncio.get_running_loop()
            armed = [True]
            for name in ("_list", "_tip_layout"):  # the delete's first look at the stream
                real = getattr(backend, name)

                def hooked(agent: str, *args: Any, _real: Any = real, **kw: Any) -> Any:
                    found = _real(agent, *args, **kw)
                    if armed[0] and backend._agent_root("a") in (agent, backend._agent_root(agent)):
                        armed[0] = False
                        asyncio.run_coroutine_threadsafe(another_write(), loop).result()
                    return found

                setattr(backend, name, hooked)
            existed = await backend.delete_agent("a")
            assert landed and not armed[0]
            assert existed
            assert await other.backend.head("a") == 0
            assert await other.backend.read("a") == []
            await other.save("a", {"new": True})  # a new stream, from seq 1
            assert (await other.load("a")).data == {"new": True}


async def test_s3_a_claimed_stream_of_a_keyed_store_reads_as_before(tmp_path: Path) -> None:
    """A keyed store authenticates its head (the head tag on the newest commit): the
    claim, the newest commit until the delete is done, carries the same tag, so the
    stream reads as before meanwhile (and after a process died there), not as a head
    whose tag is missing."""
    from statekeeper.security import Keyring

    keyring = Keyring({"k1": "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="})
    with fresh_url("s3", tmp_path) as url:
        async with StateStore(url, keyring=keyring) as store:
            await store.save("a", {"i": 0})
            await store.save("a", {"i": 1})
            backend: Any = store.backend
            tagged = await backend.head_tag("a")
            assert tagged[1] is not None

            def killed(agent_id: str) -> None:
                raise RuntimeError("killed")

            backend._finish_delete = killed
            with pytest.raises(RuntimeError, match="killed"):
                await backend.delete_agent_at("a", 2)
        async with StateStore(url, keyring=keyring) as other:
            assert await other.backend.head_tag("a") == tagged
            assert (await other.load("a")).data == {"i": 1}
            assert (await other.verify()).ok
