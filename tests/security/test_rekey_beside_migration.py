"""``rekey`` beside a migration: a migration rewrites an agent's head event in place
(same seq, a new chain link and head tag). A rekey that had walked the stream before it
failed its compare-and-set, looked for appended records (none: the seq is the same),
and checked the head tag it read again against the link of the event as it walked it —
"the stream head does not match its records … or the head was altered", an
``IntegrityError`` on a healthy store, and the rekey stopped; a writer appending after
the migration gave "chain broken" the same way. Rekey now walks such a stream again
(the record it walked last is not the one stored any more)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.records import RewriteRequest
from statekeeper.schema import TypedStates
from statekeeper.schema.migrate import migrate
from statekeeper.security import Keyring, generate_key, key_usage, rekey

from ..schema import apps

K1, K2 = generate_key(), generate_key()
OLD = Keyring({"k1": K1})
BOTH = Keyring({"k2": K2, "k1": K1}, active="k2")


@pytest.mark.parametrize("then_written", [False, True])
async def test_rekey_beside_a_migration(tmp_path: Path, then_written: bool) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    async with StateStore(url, keyring=OLD) as store:
        states = TypedStates(store, apps.support_v1)
        for i in range(3):
            await states.create(f"s-{i}", apps.SupportV1(customer_name=f"C{i}"))
    async with StateStore(url, keyring=BOTH) as rekeying, StateStore(url, keyring=BOTH) as other:
        real = rekeying.backend.rewrite
        migrated = False

        async def rewrite(request: RewriteRequest) -> Any:
            # the migration lands between rekey's walk of the stream and its rewrite
            nonlocal migrated
            if not migrated:
                migrated = True
                assert (await migrate(other, apps.support_v2)).changed == 3
                if then_written:
                    v2 = TypedStates(other, apps.support_v2)
                    state = await v2.load(request.agent_id)
                    state.escalated = True
                    await v2.save(request.agent_id, state)
            return await real(request)

        rekeying.backend.rewrite = rewrite  # type: ignore[method-assign]
        await rekey(rekeying)
        assert migrated
    async with StateStore(url, keyring=Keyring({"k2": K2})) as store:
        # every record under k2; the pre-migration records the migration keeps in the
        # head events (for its rollback) stay under k1, and keys status says so
        kept = 2 if then_written else 3  # (one written since: kept below its head)
        usage = await key_usage(store)
        assert set(usage) == {"k1", "k2"} and usage["k1"] == kept
        assert not (await store.verify()).problems
        v2 = TypedStates(store, apps.support_v2)
        assert [(await v2.load(f"s-{i}")).customer for i in range(3)] == ["C0", "C1", "C2"]
