"""A store opened for writing on a read-only replica (a URL naming the replica, a
master demoted by a failover) says so with :class:`BackendRejected` — never redis-py's
``ReadOnlyError`` with the store's Lua text, which a load or a snapshot (paths that open
the store outside the retry loop) raised before. A read-only opening reads. Private
servers; the replica's copy is awaited as a condition."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from statekeeper import StateStore
from statekeeper.backends import open_backend
from statekeeper.errors import BackendRejected

from ._services import private_redis

pytestmark = pytest.mark.slow


def _run(port: int, *args: object) -> Any:
    with redis.Redis(port=port) as client:
        return client.execute_command(*args)  # type: ignore[no-untyped-call]


@pytest.mark.parametrize("prefix", ["t:", "new:"])  # a stored store, an empty prefix
@pytest.mark.parametrize("first", ["load", "save"])
async def test_a_writable_store_on_a_replica_is_refused_with_a_typed_error(
    prefix: str, first: str
) -> None:
    with private_redis() as master, private_redis() as replica:
        async with StateStore(master.url + "?prefix=t:", witness=False) as store:
            await store.save("a", {"n": 1})
        _run(replica.port, "REPLICAOF", "127.0.0.1", str(master.port))
        for _ in range(3000):  # (a condition: the master sees its replica has it all)
            if int(_run(master.port, "WAIT", 1, 100)) >= 1:
                break
        else:
            raise AssertionError("the replica never connected")
        async with StateStore(f"{replica.url}?prefix={prefix}", witness=False) as store:
            with pytest.raises(BackendRejected, match="read-only replica") as caught:
                if first == "load":
                    await store.load("a")
                else:
                    await store.save("a", {"n": 2})
            assert "redis.call" not in str(caught.value)
        ro = open_backend(f"{replica.url}?prefix=t:", readonly=True)
        async with StateStore(ro, witness=False) as store:
            assert (await store.load("a")).data == {"n": 1}
