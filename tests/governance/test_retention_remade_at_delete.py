"""A retention TTL purge deletes the agent whose head record it verified, not a new
agent of the same id made between its last look and the delete. h/review9 read the
head record again just before the delete (``check_unchanged``), but the delete itself
was conditional on the head seq alone: an agent deleted and written again by another
process up to the same head *after* that second read was purged — "done, not written
for 1h", the new agent's acknowledged writes gone. Now the delete is conditional on the
head event's stored checksum too, in the engine's atomic step: skipped, "written since".
The interleaving is made exact by running the other process's delete and writes from
each look the purge takes before it deletes (``refuse_if_held``, before which h/review9
re-read the head record; ``check_unchanged``, that re-read), after it passed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.governance import Audit, parse_policy
from statekeeper.governance.retention import RetentionPolicy, apply_retention
from statekeeper.governance.retention_idle import check_unchanged
from statekeeper.store.holds import refuse_if_held

from ..backends._services import fresh_url
from ._keyring import KEYRING

T0 = 1_000_000.0
ADMIN = parse_policy('[principals.ops]\nadmin = ["**"]\n')

ENGINES = [
    "memory",
    "sqlite",
    "postgresql",
    "redis",
    pytest.param("s3", marks=pytest.mark.slow),
]


#: the purge's looks at the agent before its delete: the held check (h/review9 read the
#: head record again after it) and the head record's own re-check, the last look
LOOKS: dict[str, Callable[..., Awaitable[None]]] = {
    "refuse_if_held": refuse_if_held,
    "check_unchanged": check_unchanged,
}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("governed", [False, True], ids=["plain", "governed"])
@pytest.mark.parametrize("look", sorted(LOOKS))
async def test_an_agent_made_again_after_a_look_is_not_purged(
    tmp_path: Path, engine: str, governed: bool, look: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [T0]
    options: dict[str, Any] = (
        {"keyring": KEYRING, "principal": "ops", "policy": ADMIN, "audit": Audit()}
        if governed
        else {}
    )
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url, clock=lambda: clock[0], **options) as store:
            for i in range(2):
                await store.save("acme/b", {"old": i})
            made_again: list[int] = []

            async def looked_then_made_again(*args: Any) -> None:
                await LOOKS[look](*args)  # passes: not held, the record verified
                if not made_again:  # another process, right after that look
                    made_again.append(1)
                    await store.delete("acme/b")
                    clock[0] = T0 + 7100
                    await store.save("acme/b", {"new": 1})
                    await store.save("acme/b", {"new": 2})  # head 2 again

            monkeypatch.setattr(f"statekeeper.governance.retention.{look}", looked_then_made_again)
            report = await apply_retention(
                store, RetentionPolicy.parse("acme ttl=1h\n"), now=T0 + 7200
            )
            monkeypatch.undo()
            assert made_again
            assert [(a.agent_id, a.outcome) for a in report.actions] == [("acme/b", "skipped")]
            assert (await store.load("acme/b")).data == {"new": 2}  # acknowledged, kept
            # the agent verified idle is still purged when nothing else happened
            clock[0] = T0 + 7200 + 3600 * 2
            report = await apply_retention(
                store, RetentionPolicy.parse("acme ttl=1h\n"), now=clock[0] + 1
            )
            assert [(a.agent_id, a.outcome) for a in report.actions] == [("acme/b", "done")]
            assert await store.head("acme/b") == 0
