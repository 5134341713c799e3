"""The live view's verdict on what an open agent page shows: ``head`` when the stream
only grew (the page appends the new events), ``rewritten`` when anything the page shows
changed under it (it reloads) — also when the stream grew in the same poll interval."""

from __future__ import annotations

from collections.abc import AsyncIterator

from statekeeper import StateStore
from statekeeper.inspector.live import head_events, head_version
from statekeeper.schema import TypedStates
from statekeeper.schema.migrate import migrate
from tests.schema import apps


async def _never() -> bool:
    return False


async def _next_verdict(events: AsyncIterator[bytes]) -> str:
    """The next ``event:`` name (``idle`` for a keep-alive)."""
    while True:
        chunk = (await events.__anext__()).decode()
        if chunk.startswith("event: "):
            return chunk.split("\n", 1)[0].removeprefix("event: ")
        if chunk.startswith(": idle"):
            return "idle"


async def _page_open_on(store: StateStore, agent_id: str) -> AsyncIterator[bytes]:
    seq, version = await head_version(store, agent_id)
    events = head_events(store, agent_id, seq, version, 0.0, _never)
    assert await _next_verdict(events) == "idle"  # the page is current
    return events


async def test_a_new_event_alone_is_a_head_move() -> None:
    async with StateStore("memory://") as store:
        await store.save("a", {"n": 1})
        events = await _page_open_on(store, "a")
        await store.save("a", {"n": 2})
        assert await _next_verdict(events) == "head"
        assert await _next_verdict(events) == "idle"


async def test_a_migration_followed_by_a_write_reloads_the_page() -> None:
    # a running agent writes right after the migration rewrote its head (the usual case
    # when a schema changes under live agents): the page showed the pre-migration record
    # at seq 1 and kept it, only adding seq 2 (the docs: a rewrite in place reloads)
    async with StateStore("memory://") as store:
        await TypedStates(store, apps.support_v1).create("t", apps.SupportV1(customer_name="A"))
        events = await _page_open_on(store, "t")
        assert (await migrate(store, apps.support_v2)).changed == 1
        agent = await store.agent("t", model=apps.support_v2)
        agent.state.escalated = True
        await agent.save()
        assert await _next_verdict(events) == "rewritten"


async def test_an_agent_deleted_and_written_again_reloads_the_page() -> None:
    # another stream under the same id, longer than the one shown: its first events are
    # not the ones the page shows
    async with StateStore("memory://") as store:
        await store.save("a", {"who": "first"})
        events = await _page_open_on(store, "a")
        await store.delete("a")
        for n in range(3):
            await store.save("a", {"who": "second", "n": n})
        assert await _next_verdict(events) == "rewritten"
