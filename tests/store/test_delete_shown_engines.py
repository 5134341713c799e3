"""``delete_shown`` on every engine: the mark a page computes from the event at the head
it shows (``identity_at``) is the one the POST reads at the head (``head_identity``),
so a delete at the head shown deletes; a write since, or the agent deleted and made
again to the same seq, deletes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.store.delete_shown import (
    Moved,
    delete_shown,
    head_identity,
    identity_at,
    identity_mark,
)

from ..backends._services import fresh_url


@pytest.mark.parametrize("engine", ["memory", "sqlite", "postgresql", "redis", "s3", "tiered"])
async def test_delete_shown(engine: str, tmp_path: Path) -> None:
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url) as store:
            for n in range(2):
                await store.save("a", {"n": n})
            shown = identity_mark(await identity_at(store, "a", 2))  # the page
            assert shown == identity_mark(await head_identity(store, "a"))  # the POST
            await store.save("a", {"n": 2})  # written since
            assert await delete_shown(store, "a", 2, shown) == Moved(3, remade=False)
            assert await store.head("a") == 3
            shown = identity_mark(await identity_at(store, "a", 3))
            assert await store.delete("a")  # deleted and made again to seq 3
            for n in range(3):
                await store.save("a", {"n": f"new {n}"})
            assert await delete_shown(store, "a", 3, shown) == Moved(3, remade=True)
            assert (await store.load("a")).data == {"n": "new 2"}
            shown = identity_mark(await identity_at(store, "a", 3))
            assert await delete_shown(store, "a", 3, shown) is True  # as shown: deleted
            assert await store.head("a") == 0
            assert await delete_shown(store, "a", 3, shown) is False  # nothing left


async def test_a_head_rewritten_in_place_since_it_was_shown_is_not_deleted() -> None:
    """A schema migration by rewrite changed the record at the head shown (same seq):
    not the agent that was shown, nothing deleted."""
    from statekeeper.schema import TypedStates
    from statekeeper.schema.migrate import migrate
    from tests.schema import apps

    async with StateStore("memory://") as store:
        await TypedStates(store, apps.support_v1).create("t", apps.SupportV1(customer_name="A"))
        head = await store.head("t")
        shown = identity_mark(await identity_at(store, "t", head))
        assert (await migrate(store, apps.support_v2)).changed == 1
        assert await store.head("t") == head
        assert await delete_shown(store, "t", head, shown) == Moved(head, remade=True)
        assert await store.head("t") == head
