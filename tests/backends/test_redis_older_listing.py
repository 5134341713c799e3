"""A Redis store listed by a statekeeper from before the agent index's proof entry
(``identity.py``), still running beside this one (a rolling deploy): that version's
``list_agents`` takes off every index entry whose hash holds no head, the proof entry
``"\\0"`` included, and this version's next listing raises ``StoreLost``: a lost index
cannot be told from one whose proof entry alone was taken off (an index evicted and
written again by an older process's appends lists the new agents only). Refused on
purpose, but the error named only eviction and deletion: an operator with all the
agents still listed looked for a memory policy. It now names the older process too,
and what to do; the store opened again (no older process left) lists every agent and
finds a lost index again. (A store an older version wrote, opened by this one, opens:
tests/backends/test_redis_expired_before_proof.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("redis")

import redis

from statekeeper import StateStore
from statekeeper.errors import StoreLost

from ._services import REDIS_URL, delete_prefix, namespace, require_redis


@pytest.fixture
def prefix(tmp_path: Path) -> Iterator[str]:
    require_redis()
    name = namespace(tmp_path, "sk_oldls_") + ":"
    yield name
    delete_prefix(name)


def _older_listing(prefix: str) -> list[str]:
    """What ``list_agents`` of a statekeeper before proof entries did to a plain store's
    index: each entry whose hash holds no head (``h``) is taken off as an expired
    agent; the agents it listed are returned."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        index = f"{prefix}agents"
        listed: list[str] = []
        stale: list[bytes] = []
        for raw in client.zrangebylex(index, b"-", b"+"):
            member = raw if isinstance(raw, bytes) else str(raw).encode()
            if client.hget(f"{prefix}a:".encode() + member, b"h") is None:
                stale.append(member)
            else:
                listed.append(member.decode())
        if stale:
            client.zrem(index, *stale)
        return listed
    finally:
        client.close()


async def test_an_older_processes_listing_is_named_by_the_error(prefix: str) -> None:
    url = f"{REDIS_URL}?prefix={prefix}"
    async with StateStore(url) as store:
        for agent_id in ("a", "b", "c"):
            await store.save(agent_id, {"n": 1})
        assert _older_listing(prefix) == ["a", "b", "c"]  # (and its proof entry gone)
        with pytest.raises(StoreLost, match="index") as raised:
            await store.list_agents()
        reason = str(raised.value)
        assert "statekeeper from before proof entries" in reason  # (eviction alone, before)
        assert "stop every such process" in reason
        assert (await store.load("a")).data == {"n": 1}  # stored agents go on
    async with StateStore(url) as again:  # no older process left: proven again
        assert [a.agent_id for a in await again.list_agents()] == ["a", "b", "c"]
        client = redis.Redis.from_url(REDIS_URL)
        try:
            client.delete(f"{prefix}agents")
        finally:
            client.close()
        with pytest.raises(StoreLost, match="index"):  # a lost index is found again
            await again.list_agents()
