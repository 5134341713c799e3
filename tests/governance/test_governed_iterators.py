"""A store opened as a principal takes the same ``agent_ids`` a plain store takes: an
iterator (a generator of ids) is checked against the policy AND then read or verified.

Before, the governed ``verify``, ``witness_problems`` and ``head_states`` consumed an
iterator checking it, then handed the exhausted iterator on: ``verify`` reported
``agents=0``, no problems — a clean verification of nothing — and ``head_states``
answered ``[]``, where the plain store checks and answers for every agent."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from statekeeper import StateStore
from statekeeper.errors import AccessDenied

Make = Callable[..., StateStore]


async def test_an_iterator_of_ids_is_checked_and_then_read(as_principal: Make) -> None:
    ops = as_principal("ops")
    await ops.save("acme/support/t1", {"n": 1})
    await ops.save("acme/billing/b1", {"n": 1})
    await ops.save("globex/eu/g1", {"n": 1})
    alice = as_principal("alice")  # reads acme
    ids = ["acme/support/t1", "acme/billing/b1"]

    report = await alice.verify(iter(ids))
    assert report.agents == 2 and report.events == 2 and report.ok
    assert report == await alice.verify(list(ids))
    heads = await alice.head_states(a for a in ids)  # type: ignore[arg-type]
    assert [h.agent_id if h else None for h in heads] == ids
    assert await alice.witness_problems(iter(ids)) == []
    # an unreadable id in an iterator is refused as in a list
    for call in (
        lambda: alice.verify(iter(["globex/eu/g1"])),
        lambda: alice.head_states(iter(["globex/eu/g1"])),  # type: ignore[arg-type]
        lambda: alice.witness_problems(iter(["globex/eu/g1"])),
    ):
        with pytest.raises(AccessDenied):
            await call()
