"""``update(..., idempotency_key=)``: a retried update is applied once.

A caller that crashed (or lost the reply) after ``update`` committed retries it with the
same key: the change is not applied again, ``fn`` is not called again, and the result
is the earlier write's — across processes (here: two stores on one file), and when the
retry races the first call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.concurrency import update
from statekeeper.errors import InvalidArgument


def _adder(calls: list[int]) -> Callable[[dict[str, Any]], None]:
    def add(data: dict[str, Any]) -> None:
        calls.append(1)
        data["balance"] = data.get("balance", 0) + 10

    return add


async def test_a_retried_update_is_applied_once(
    db_url: str, open_store: Callable[..., StateStore]
) -> None:
    calls: list[int] = []
    first = open_store(db_url)
    done = await update(first, "acct", _adder(calls), idempotency_key="deposit-1")
    assert done.result is not None and not done.result.duplicate
    assert done.data == {"balance": 10} and done.seq == 1
    await first.close()  # "the process crashed before it saw the reply"

    retry = open_store(db_url)
    again = await update(retry, "acct", _adder(calls), idempotency_key="deposit-1")
    assert calls == [1]  # fn was not called again
    assert again.result is not None and again.result.duplicate
    assert (again.seq, again.data, again.attempts) == (1, {"balance": 10}, 0)
    await update(retry, "acct", _adder(calls))  # another change moves on ...
    again = await update(retry, "acct", _adder(calls), idempotency_key="deposit-1")
    assert again.data == {"balance": 10}  # ... the key still names the first write
    assert (await retry.load("acct")).data == {"balance": 20}
    other = await update(retry, "acct", _adder(calls), idempotency_key="deposit-2")
    assert other.data == {"balance": 30} and not other.result.duplicate  # type: ignore[union-attr]


async def test_a_retry_racing_the_first_call_is_applied_once(
    db_url: str, open_store: Callable[..., StateStore]
) -> None:
    a, b = open_store(db_url), open_store(db_url)
    await a.save("acct", {"balance": 0})
    raced: list[Any] = []

    async def add_while_b_retries(data: dict[str, Any]) -> None:
        if not raced:  # b's retry commits between our read and our write
            raced.append(await update(b, "acct", _adder([]), idempotency_key="deposit-1"))
        data["balance"] += 10

    done = await update(a, "acct", add_while_b_retries, idempotency_key="deposit-1")
    assert raced[0].result is not None and not raced[0].result.duplicate
    assert done.result is not None and done.result.duplicate
    assert done.seq == raced[0].seq == 2 and done.data == {"balance": 10}
    assert (await a.load("acct")).data == {"balance": 10}
    assert await a.head("acct") == 2


async def test_keyed_updates_are_not_coalesced(
    db_url: str, open_store: Callable[..., StateStore]
) -> None:
    import asyncio

    store = open_store(db_url)
    calls: list[int] = []
    results = await asyncio.gather(
        *(update(store, "acct", _adder(calls), idempotency_key=f"d-{i}") for i in range(3)),
        update(store, "acct", _adder(calls), idempotency_key="d-0"),
    )
    assert (await store.load("acct")).data == {"balance": 30}
    assert sorted(r.seq for r in results[:3]) == [1, 2, 3]
    assert results[3].result is not None and results[3].result.duplicate
    assert results[3].seq == results[0].seq
    with pytest.raises(InvalidArgument):
        await update(store, "acct", _adder(calls), idempotency_key="")
