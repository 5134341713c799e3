"""Crypto-shredding: forget an agent by destroying its data key.

A store whose keyring has a key vault (``Keyring(..., data_keys=...)``) encrypts each
agent's records with a data key of its own (:mod:`statekeeper.codec.datakeys`).
:func:`forget` destroys that key: every copy of the agent's records — every tier, the
WAL, replicas, backups taken before — is then ciphertext nothing opens, and a load
raises :class:`~statekeeper.errors.AgentForgotten` instead of returning anything.

The records themselves stay in the store (they are noise now) unless ``purge=True``,
which also deletes them; either way the key vault keeps a tombstone, so the id can never
be given a new key that would make the old copies readable, and writes to it are
refused with ``AgentForgotten``. Another process that opened the agent before keeps its
cached key until it reopens its store: stop writers of the agent first.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..arguments import check_agent_id
from ..errors import AgentNotFound, ConfigurationError
from .hooks import AuditSink, GovernanceEvent, emit, require, store_sink

if TYPE_CHECKING:
    from ..store import StateStore

__all__ = ["ForgetResult", "forget"]


@dataclass(frozen=True, slots=True)
class ForgetResult:
    """What :func:`forget` did: ``destroyed`` is False when the agent had no data key
    (it was forgotten before, or never written with one); ``purged`` when its records
    were deleted too; ``head`` the stream head at the time (0: no stream)."""

    agent_id: str
    destroyed: bool
    purged: bool
    head: int
    at: float


async def forget(
    store: StateStore,
    agent_id: str,
    *,
    purge: bool = False,
    audit: AuditSink | None = None,
) -> ForgetResult:
    """Destroy ``agent_id``'s data key (see the module documentation).

    Raises :class:`~statekeeper.errors.AgentNotFound` when the agent has neither a
    stream nor a key in the vault (a mistyped id), and
    :class:`~statekeeper.errors.ConfigurationError` without a key vault."""
    check_agent_id(agent_id)
    # destroying a key is forever: it needs admin on the agent's namespace (checked
    # before anything, and the refusal is audited) on a store opened as a principal
    await require(store, agent_id, "admin", "forget")
    audit = store_sink(store, audit)
    keyring = store.codec.keyring
    if keyring is None or keyring.data_keys is None:
        raise ConfigurationError(
            "forget needs a store whose keyring has a key vault (per-agent data keys):"
            ' add "data_keys": "FILE" to the key file'
        )
    await store.flush()
    head = await store.backend.head(agent_id)
    if head == 0 and keyring.data_keys.load(agent_id) is None:
        raise AgentNotFound(agent_id)  # a typo must not leave a tombstone
    at = time.time()
    destroyed = keyring.forget(agent_id, at=at)
    store._reads.forget(agent_id)  # the decoded state cached by this store goes too
    purged = await store.delete(agent_id) if purge else False
    await emit(
        audit,
        GovernanceEvent(
            "forget",
            agent_id,
            "ok",
            1 if head else None,
            head or None,
            {"key_destroyed": destroyed, "records_purged": purged},
            at,
        ),
    )
    return ForgetResult(agent_id, destroyed, purged, head, at)
