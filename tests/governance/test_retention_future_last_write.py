"""A last-write time in the future does not keep an agent out of TTL retention.

Before, an agent whose listed last write (``sk_agents.updated_at``, Redis' ``u``) was
moved into the future — by an edit of the head row, or by a writer whose clock ran
ahead — was never idle to ``ttl=``: retention passed over it on every run, without a
word, for as long as the date stayed ahead. Now a listed time ahead of the run's clock
is not trusted: the authenticated record at the head dates the last write (an idle
agent is purged), and when that record is dated ahead too (a writer's clock ahead) the
action fails, naming it, instead of passing over it; ``verify`` names such a record."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.governance.retention import RetentionPolicy, apply_retention
from statekeeper.security import Keyring, generate_key

from ..backends._services import fresh_url
from .test_retention_altered_last_write import YEAR, _age_the_head_row


@pytest.mark.parametrize("keyed", [True, False], ids=["with-key", "without-key"])
@pytest.mark.parametrize("engine", ["sqlite", "postgresql", "redis"])
async def test_a_future_last_write_does_not_defeat_the_ttl(
    tmp_path: Path, engine: str, keyed: bool
) -> None:
    keyring = Keyring({"k1": generate_key()}) if keyed else None
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url, keyring=keyring, clock=lambda: time.time() - YEAR) as store:
            await store.save("edited", {"n": 1})  # really written a year ago...
            await store.save("idle", {"n": 1})
        async with StateStore(url, keyring=keyring, clock=lambda: time.time() + 10 * YEAR) as store:
            await store.save("skewed", {"n": 1})  # a writer whose clock is 10 years ahead
        async with StateStore(url, keyring=keyring) as store:
            await store.save("live", {"n": 1})
        _age_the_head_row(engine, url, "edited", by=-11 * YEAR)  # ...its head row moved ahead
        async with StateStore(url, keyring=keyring) as store:
            listed = {a.agent_id: a.updated_at for a in await store.list_agents()}
            assert listed["edited"] > time.time() + 9 * YEAR
            report = await apply_retention(store, RetentionPolicy.parse("* ttl=30d\n"))
            outcomes = {a.agent_id: (a.kind, a.outcome) for a in report.actions}
            assert outcomes == {
                "edited": ("purge", "done"),  # (passed over, before)
                "idle": ("purge", "done"),
                "skewed": ("purge", "failed"),  # (passed over, before)
            }
            skewed = next(a for a in report.actions if a.agent_id == "skewed")
            assert "ahead of this clock" in skewed.reason
            assert [a.agent_id for a in await store.list_agents()] == ["live", "skewed"]
            problems = (await store.verify()).problems
            assert [(p.agent_id, p.seq) for p in problems] == [("skewed", 1)]
            assert "in the future" in problems[0].reason
