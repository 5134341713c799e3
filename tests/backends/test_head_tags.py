"""Head tags (the authenticated stream head) on the server engines and the tiered
backend: stored atomically with the head, returned by ``head_tag``, and enough for an
encrypted ``StateStore`` to run on them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from statekeeper.backends import MemoryBackend, SQLiteBackend, TieredBackend, open_backend
from statekeeper.backends.base import Backend
from statekeeper.errors import ConflictError, IntegrityError
from statekeeper.records import AppendRequest
from statekeeper.security import Keyring, generate_key
from statekeeper.store import StateStore
from statekeeper.testing import event

from ._services import fresh_url, moto_endpoint, namespace, s3_credentials


def _postgres(tmp_path: Path, stack: ExitStack) -> Backend:
    pytest.importorskip("psycopg")
    return open_backend(stack.enter_context(fresh_url("postgresql", tmp_path)))


def _redis(tmp_path: Path, stack: ExitStack) -> Backend:
    pytest.importorskip("redis")
    return open_backend(stack.enter_context(fresh_url("redis", tmp_path)))


def _s3(tmp_path: Path, stack: ExitStack) -> Backend:
    pytest.importorskip("boto3")
    from statekeeper.backends.s3 import S3Backend

    from .test_s3 import _drop_bucket

    bucket = namespace(tmp_path, "sk-t-")
    backend = S3Backend(
        bucket, "t", endpoint_url=moto_endpoint(), create_bucket=True, **s3_credentials()
    )
    stack.callback(_drop_bucket, bucket)
    return backend


def _tiered(tmp_path: Path, stack: ExitStack) -> Backend:
    return TieredBackend(
        _postgres(tmp_path, stack),
        hot=_redis(tmp_path, stack),
        cold=_s3(tmp_path, stack),
        idle_after=3600,
    )


def _tiered_local(tmp_path: Path, stack: ExitStack) -> Backend:
    return TieredBackend(SQLiteBackend(tmp_path / "d.db"), hot=MemoryBackend())


ENGINES = {
    "postgresql": _postgres,
    "redis": _redis,
    "s3": _s3,
    "tiered-redis-postgres-s3": _tiered,
    "tiered-memory-sqlite": _tiered_local,
}


@pytest.fixture(params=sorted(ENGINES))
async def backend(request: Any, tmp_path: Path) -> AsyncIterator[Backend]:
    with ExitStack() as stack:  # removes the schema, key prefix and bucket last
        made = ENGINES[request.param](tmp_path, stack)
        try:
            yield made
        finally:
            await made.close()


async def test_the_tag_is_stored_with_the_head(backend: Backend) -> None:
    assert await backend.head_tag("a") == (0, None)
    await backend.append(AppendRequest("a", 0, (event(1), event(2)), head_tag=b"tag-2"))
    assert await backend.head_tag("a") == (2, b"tag-2")
    # a conflict and a duplicate leave it alone
    with pytest.raises(ConflictError):
        await backend.append(AppendRequest("a", 1, (event(2),), head_tag=b"nope"))
    await backend.append(AppendRequest("a", 2, (event(3),), idempotency_key="k", head_tag=b"t3"))
    await backend.append(AppendRequest("a", 2, (event(3),), idempotency_key="k", head_tag=b"x"))
    assert await backend.head_tag("a") == (3, b"t3")
    # batches too; an append without a tag stores none
    await backend.append_batch(
        [AppendRequest("a", 3, (event(4),), head_tag=b"t4"), AppendRequest("b", 0, (event(1),))]
    )
    assert await backend.head_tag("a") == (4, b"t4")
    assert await backend.head_tag("b") == (1, None)
    await backend.append(AppendRequest("a", 4, (event(5),)))
    assert await backend.head_tag("a") == (5, None)


async def test_an_encrypted_store_runs_on_it(backend: Backend) -> None:
    keyring = Keyring({"k1": generate_key()})
    store = StateStore(backend, keyring=keyring, snapshot_every=3)
    for i in range(7):
        await store.save("agent", {"i": i, "secret": "s3cr3t"})
    fresh = StateStore(backend, keyring=keyring, cache_size=0)
    assert (await fresh.load("agent")).data == {"i": 6, "secret": "s3cr3t"}
    assert (await fresh.verify()).ok
    assert all(b"s3cr3t" not in e.payload for e in await backend.read("agent"))
    # without the key nothing is trusted
    with pytest.raises(IntegrityError):
        await StateStore(backend, cache_size=0).load("agent")
    await store.close()  # closes the backend; the fixture's close is a no-op then


@pytest.mark.parametrize("durability", ["sync", "group"])
async def test_a_stale_agent_never_writes_onto_a_recreated_stream(
    backend: Backend, durability: str
) -> None:
    # two stores on one engine: the other deletes the agent and re-creates it up to the
    # seq this agent object holds; the object's write is refused, nothing is mixed in
    mine, theirs = StateStore(backend, durability=durability), StateStore(backend)
    agent = await mine.agent("y")
    agent.data["mine"] = 1
    await agent.save()
    await theirs.delete("y")
    other = await theirs.agent("y")
    other.data["other"] = 2
    await other.save()
    agent.data["fresh"] = 2
    with pytest.raises(ConflictError, match="re-created"):
        await agent.save()
    assert (await theirs.load("y")).data == {"other": 2}
    await agent.refresh()
    await mine.flush()
