"""A SQLite store that keeps an audit log, for tests of what the CLI does with one when
no principal is given: the store is saved by an admin principal (so the log exists),
then the CLI opens it with only the key file."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from statekeeper import SyncStateStore
from statekeeper.governance import Audit, parse_policy
from statekeeper.security import Keyring

#: one principal that may do anything
ADMIN_POLICY = parse_policy('[principals.ops]\nadmin = ["**"]\n')


def save_audited(db: Path, keys: Path, agents: Iterable[str]) -> None:
    """Save ``{"n": 1}`` to each of ``agents`` in the store at ``db`` (encrypted with
    the key file ``keys``) as principal ``ops``: the store keeps an audit log."""
    with SyncStateStore(
        f"sqlite:///{db}",
        keyring=Keyring.from_file(keys),
        principal="ops",
        policy=ADMIN_POLICY,
        audit=Audit(),
    ) as store:
        for agent in agents:
            store.save(agent, {"n": 1})
