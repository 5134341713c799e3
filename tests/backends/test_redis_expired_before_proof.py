"""A Redis store written by a statekeeper from before the agent index's proof entry
(``identity.py``), whose agents expired under its ``ttl=`` (that version recorded the
ttl nowhere), opened by this one without ``ttl=``: the index still listed the expired
agents, the open added the proof entry, and from then on each was reported lost —
``AgentLost`` on its load and save, and on every listing of the store. What the store
held before it was proven is what the server holds: the open takes those entries off
(with or without the identity marker, which older versions did not write either)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from statekeeper import StateStore
from statekeeper.backends.redis.identity import PROOF
from statekeeper.backends.redis.keys import Layout
from statekeeper.errors import AgentNotFound

from ._services import REDIS_URL, fresh_url

pytest.importorskip("redis")


@pytest.mark.parametrize("marker", [True, False], ids=["with-marker", "before-markers"])
@pytest.mark.parametrize("shards", [None, 3], ids=["plain", "sharded"])
async def test_an_agent_expired_before_the_index_was_proven_is_not_lost(
    tmp_path: Path, marker: bool, shards: int | None
) -> None:
    import redis

    with fresh_url("redis", tmp_path) as url:
        if shards is not None:
            url += f"&shards={shards}"
        async with StateStore(url) as store:
            for agent in ("alpha", "beta", "gamma"):
                await store.save(agent, {"n": 1})
        prefix = parse_qs(urlsplit(url).query)["prefix"][0].encode()
        layout = Layout(prefix, shards)
        with redis.Redis.from_url(REDIS_URL) as client:
            # as the version before left it: no proof entries (nor markers)
            for shard in layout.shard_keys:
                client.zrem(shard.index, PROOF)
                if not marker:
                    client.delete(shard.epoch)
            # "beta" expired under that version's ttl: its keys gone, its entry kept
            beta = layout.agent("beta")
            client.delete(beta.hash, beta.snapshots)
            assert client.zscore(beta.shard.index, b"beta") is not None
        async with StateStore(url) as store:
            assert [a.agent_id for a in await store.list_agents()] == ["alpha", "gamma"]
            with pytest.raises(AgentNotFound):
                await store.load("beta")
            assert (await store.save("beta", {"n": 2})).first_seq == 1  # a new one
            assert (await store.load("alpha")).data == {"n": 1}
        with redis.Redis.from_url(REDIS_URL) as client:
            for shard in layout.shard_keys:  # proven again
                assert client.zscore(shard.index, PROOF) is not None
