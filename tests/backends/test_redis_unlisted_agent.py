"""An agent taken off the Redis agent index by hand (``ZREM <prefix>agents <id>``) is
still read and written by id, but every listing reads the index: before, a whole-store
``verify`` skipped it and said ok (with a key too), and so did export, backup and
retention. Now ``RedisBackend.orphaned_events`` scans the agents' hashes and ``verify``
names each one its index does not list (kind ``orphan``), plain or sharded."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from statekeeper import StateStore
from statekeeper.backends.redis.keys import Layout
from statekeeper.security import Keyring, generate_key

from ._services import REDIS_URL, fresh_url

pytest.importorskip("redis")


@pytest.mark.parametrize("keyed", [True, False], ids=["with-key", "without-key"])
@pytest.mark.parametrize("shards", [None, 3], ids=["plain", "sharded"])
async def test_verify_names_an_agent_taken_off_the_index(
    tmp_path: Path, keyed: bool, shards: int | None
) -> None:
    import redis

    keyring = Keyring({"k1": generate_key()}) if keyed else None
    with fresh_url("redis", tmp_path) as url:
        if shards is not None:
            url += f"&shards={shards}"
        async with StateStore(url, keyring=keyring) as store:
            for agent in ("alpha", "beta", "gamma"):
                for i in range(3):
                    await store.save(agent, {"n": i})
        prefix = parse_qs(urlsplit(url).query)["prefix"][0].encode()
        layout = Layout(prefix, shards)
        with redis.Redis.from_url(REDIS_URL) as client:
            assert client.zrem(layout.agent("beta").shard.index, b"beta") == 1
        async with StateStore(url, keyring=keyring) as store:
            assert (await store.load("beta")).data == {"n": 2}  # read by id as before
            assert [a.agent_id for a in await store.list_agents()] == ["alpha", "gamma"]
            report = await store.verify()
            assert [(p.agent_id, p.seq, p.kind) for p in report.problems] == [("beta", 1, "orphan")]
            assert "the agent index does not list" in report.problems[0].reason
            # verifying the agent by id checks its records, which are whole
            assert (await store.verify(["beta"])).problems == []
