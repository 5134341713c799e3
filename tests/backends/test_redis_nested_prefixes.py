"""Two stores whose prefixes nest in each other's agent keys are refused at open.

The store at ``p:``'s agent ``a:x`` and the store at ``p:a:``'s agent ``x`` were the
same Redis hash (``p:a:x``): a write of one landed in the other's agent, and ``p:``'s
``unlisted_agents`` (so its backups) and ``drop_all`` took in ``p:a:``'s keys — no
error anywhere. Now the second store to open is refused (``ConfigurationError`` naming
both prefixes), whichever was created first; prefixes merely sharing a start
(``p:`` and ``p:v2:``) still open side by side."""

from __future__ import annotations

import pytest

pytest.importorskip("redis")

from statekeeper import StateStore
from statekeeper.errors import ConfigurationError

from ._services import REDIS_URL


def _url(prefix: str, shards: int | None) -> str:
    return f"{REDIS_URL}?prefix={prefix}" + (f"&shards={shards}" if shards else "")


@pytest.mark.parametrize("kind", ["a:", "s:", "l:", "d:"])
@pytest.mark.parametrize("shards", [None, 3], ids=["plain", "sharded"])
async def test_an_inner_store_opened_after_the_outer_is_refused(
    prefix: str, kind: str, shards: int | None
) -> None:
    async with StateStore(_url(prefix, shards), witness=False) as outer:
        await outer.save("a:x", {"outer": 1})
    inner_prefix = prefix + ("{0.0}" if shards else "") + kind
    async with StateStore(_url(inner_prefix, None), witness=False) as inner:
        with pytest.raises(ConfigurationError) as caught:
            await inner.save("x", {"inner": 1})
    assert repr(prefix) in str(caught.value) and repr(inner_prefix) in str(caught.value)
    async with StateStore(_url(prefix, shards), witness=False) as outer:
        state = await outer.load("a:x")
        assert (state.seq, state.data) == (1, {"outer": 1})
        assert await outer.backend.unlisted_agents() == []


@pytest.mark.parametrize("shards", [None, 3], ids=["plain", "sharded"])
async def test_an_outer_store_created_after_the_inner_is_refused(
    prefix: str, shards: int | None
) -> None:
    inner_prefix = prefix + "a:"
    async with StateStore(_url(inner_prefix, shards), witness=False) as inner:
        await inner.save("x", {"inner": 1})
    async with StateStore(_url(prefix, None), witness=False) as outer:
        with pytest.raises(ConfigurationError) as caught:
            await outer.save("a:x", {"outer": 1})
    assert repr(prefix) in str(caught.value) and repr(inner_prefix) in str(caught.value)
    async with StateStore(_url(inner_prefix, shards), witness=False) as inner:
        state = await inner.load("x")
        assert (state.seq, state.data) == (1, {"inner": 1})


async def test_prefixes_sharing_a_start_still_open_side_by_side(prefix: str) -> None:
    for p in (prefix + "v2:", prefix, prefix + "a", prefix + "app:"):
        async with StateStore(_url(p, None), witness=False) as store:
            await store.save("x", {"p": p})
    for p in (prefix + "v2:", prefix, prefix + "a", prefix + "app:"):
        async with StateStore(_url(p, None), witness=False) as store:
            assert (await store.load("x")).data == {"p": p}
