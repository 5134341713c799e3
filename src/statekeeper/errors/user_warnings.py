"""The warnings statekeeper gives (each also a :class:`StatekeeperError`).

Part of :mod:`statekeeper.errors` (import every name from there).
"""

from __future__ import annotations

import shlex

from statekeeper.errors.base import StatekeeperError


class StatekeeperWarning(StatekeeperError, UserWarning):
    """Root of the warnings statekeeper issues (through :mod:`warnings`)."""


class UnsavedChangesWarning(StatekeeperWarning):
    """A store was closed while durable agents it opened still had changes to ``data``
    that were never written (``agent_ids`` lists them). Those changes are lost."""

    def __init__(self, agent_ids: list[str] | str) -> None:
        if isinstance(agent_ids, str):
            # a message already made (``warnings.warn(text, UnsavedChangesWarning)``):
            # kept as it is, not read as a list of one-character agent ids
            self.agent_ids: list[str] = []
            super().__init__(agent_ids)
            return
        self.agent_ids = list(agent_ids)
        shown = ", ".join(repr(a[:60]) for a in agent_ids[:5])
        more = f" and {len(agent_ids) - 5} more" if len(agent_ids) > 5 else ""
        super().__init__(
            f"store closed with unsaved changes to the data of agent(s) {shown}{more}: "
            "they were not written (call agent.save(), or agent.refresh() to drop them)"
        )


class KeyFileOpenToOthers(StatekeeperWarning):
    """A key file (``path``) that users other than its owner may read or write: its
    mode (``mode``, e.g. ``0o644``) gives group or others access. The keys were loaded
    and used all the same; run ``chmod 600 path`` (the message says it; it never shows
    a key). Files statekeeper writes (``keys generate``) are mode 0600."""

    def __init__(self, path: str, mode: int = 0o644) -> None:
        self.path = path
        self.mode = mode
        super().__init__(
            f"key file {path} is open to other users (mode {mode & 0o777:04o}): "
            f"anyone in its group or on this machine may read the keys; "
            f"run 'chmod 600 {shlex.quote(path)}'"
        )


class UnreplicatedLeaseTokens(StatekeeperWarning):
    """Leases are granted on a Redis master that has replicas (``replicas``, read from
    ``INFO replication``) by a store that does not wait for them (no ``wait_replicas``):
    a failover that promotes a replica which missed a grant loses it, and the next grant
    hands its fencing token out again — two holders with one token, and a system outside
    the store that refuses tokens at or below the last one it saw accepts both. Redis
    offers nothing a grant could read that a promotion raises, so only
    ``?wait_replicas=1`` keeps tokens unique (docs/scale.md "Durability and failover").
    Issued once per backend, at its first grant; ``location`` is the masked URL."""

    def __init__(self, location: str, replicas: int = 1) -> None:
        self.location = location
        self.replicas = replicas
        super().__init__(
            f"leases on Redis at {location}, a master with {replicas} replica(s), without "
            "wait_replicas: a failover that loses a grant hands its fencing token out "
            "again (add ?wait_replicas=1 to the URL to keep tokens unique)"
        )


class UnflushedWritesWarning(StatekeeperWarning):
    """A store with ``durability="async"`` was garbage-collected (or its event loop
    closed under it) while writes it had acknowledged were still in its write-behind
    buffer: ``events`` events of ``agents`` agents were never stored and are lost.
    Flush or close the store (a LangGraph saver: ``aclose``) before its loop ends."""

    def __init__(self, agents: int | str, events: int = 0) -> None:
        if isinstance(agents, str):  # a message already made
            self.agents, self.events = 0, events
            super().__init__(agents)
            return
        self.agents, self.events = agents, events
        super().__init__(
            f"a store with durability='async' was dropped with {events} buffered event(s) "
            f"of {agents} agent(s) never written: they are lost (await store.flush() or "
            "store.close() before its event loop ends)"
        )


class UndeclaredKeysDropped(StatekeeperWarning):
    """A typed write could not carry the undeclared keys of some stored items of a
    list (``paths``) of agent ``agent_id`` (model ``model``): the write changed items
    there *and* inserted or removed others, so which new item is which stored one is
    not known (see :mod:`statekeeper.schema.carry`). The write went through; those
    items' undeclared keys (never shown: they may be secrets) are not in it. Write the
    edits and the inserts/removals in two saves to keep them."""

    def __init__(
        self, agent_id: str | None, model: str = "", paths: list[str] | None = None
    ) -> None:
        self.agent_id = agent_id
        self.model = model
        self.paths = list(paths or [])
        shown = ", ".join(self.paths[:5]) + (" ..." if len(self.paths) > 5 else "")
        who = f"agent {agent_id!r}" if agent_id else "a typed write"
        super().__init__(
            f"{who}: keys that model {model} does not declare were dropped from stored"
            f" items of {shown}: the write edited items there and also inserted, removed or"
            " moved others, so they could not be matched (save the edits and the other"
            " changes separately to keep them)"
        )
