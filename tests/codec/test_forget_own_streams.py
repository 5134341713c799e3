"""A store's own streams in a key vault shared by several stores (issue 15 item 4).

The audit log (``\\x01sk-audit/log``) is sealed by a codec of no store: with the data
key of its id alone, the same id in every store — one key for every audit log of the
vault. ``statekeeper forget`` refuses the id (reserved), but :meth:`Keyring.forget_in`
and :meth:`Keyring.forget` took it: forgetting it "in" store A destroyed that key, and
store B's audit log (another store) was unreadable from then on (``audit verify``:
"agent '\\x01sk-audit/log' was forgotten"). Both now refuse an id of a store's own
streams (``InvalidAgentId``, nothing destroyed), and a lineage never leads to one.
(Sharing the audit log's key between stores exposes nothing: the master key that
wraps it opens every key of the vault anyway. The legal holds stream is sealed by the
store's codec: its own key family's key.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.codec.datakeys import SqliteKeyVault
from statekeeper.codec.keys import Keyring
from statekeeper.errors import InvalidAgentId
from statekeeper.governance import Audit, AuditLog, parse_policy

POLICY = parse_policy('[principals.ops]\nadmin = ["**"]\n')
AUDIT = "\x01sk-audit/log"


def _governed(url: str, keys: Keyring) -> StateStore:
    return StateStore(url, keyring=keys, principal="ops", policy=POLICY, audit=Audit())


async def test_forgetting_a_stores_own_stream_is_refused(tmp_path: Path) -> None:
    keys = Keyring({"k1": bytes(range(32))}, data_keys=SqliteKeyVault(tmp_path / "vault.db"))
    a_url, b_url = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    async with _governed(a_url, keys) as a, _governed(b_url, keys) as b:
        await a.save("x", {"n": 1})
        await b.save("x", {"n": 1})
        family = await a.backend.feed_id()
        with pytest.raises(InvalidAgentId, match="own streams"):  # was: ['legacy']
            keys.forget_in(family, AUDIT)
        with pytest.raises(InvalidAgentId, match="own streams"):
            keys.forget(AUDIT)
        keys.link("x", AUDIT)  # (a lineage naming one: never followed)
        assert keys.forget_in(family, "x") == [family]
    again = Keyring({"k1": bytes(range(32))}, data_keys=SqliteKeyVault(tmp_path / "vault.db"))
    for url in (a_url, b_url):
        async with StateStore(url, keyring=again) as store:
            report = await AuditLog(store.backend, again).verify()
            assert report.ok, report.problems  # was: B's (and A's) log forgotten


async def test_the_plan_of_a_forget_follows_what_it_destroys(tmp_path: Path) -> None:
    """:meth:`Keyring.forget_scopes_in` (the families a forget's audit entry names,
    written before the keys go) refuses a store's own stream and never follows a
    lineage to one, as :meth:`Keyring.forget_in` does. Was: it planned the audit log's
    key of a lineage naming it (the entry said "legacy", a key the forget then left)
    and planned a forget of the audit log itself instead of refusing it."""
    keys = Keyring({"k1": bytes(range(32))}, data_keys=SqliteKeyVault(tmp_path / "vault.db"))
    async with _governed(f"sqlite:///{tmp_path / 'a.db'}", keys) as a:
        await a.save("x", {"n": 1})
        family = await a.backend.feed_id()
        with pytest.raises(InvalidAgentId, match="own streams"):
            keys.forget_scopes_in(family, AUDIT)
        keys.link("x", AUDIT)  # (a lineage naming one)
        planned = keys.forget_scopes_in(family, "x")
        assert planned == keys.forget_in(family, "x") == [family]
        report = await AuditLog(a.backend, keys).verify()
        assert report.ok, report.problems
