"""What every part of the backend contract shares: the engine hooks a test file
provides (:meth:`Contract.make_backend`, :meth:`~Contract.open_peer`,
:meth:`~Contract.open_readonly`), the ``backend`` and ``peer`` fixtures, and the record
builders the tests (and third-party suites) use. The tests themselves are grouped by
part of the contract in the sibling modules; :class:`~statekeeper.testing.BackendConformance`
runs them all."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from statekeeper.backends.base import Backend, Capability
from statekeeper.errors import RewriteBelowPrunedBase
from statekeeper.records import (
    AppendRequest,
    RawEvent,
    RawSnapshot,
    RewriteRequest,
    StreamChange,
)

__all__ = ["Contract", "event", "fenced", "request", "snapshot", "tagged", "untagged_at"]


def _old_name(function: str, old: str, new: str) -> None:
    warnings.warn(
        f"{function}({old}=...) is deprecated: use {function}({new}=...)",
        DeprecationWarning,
        stacklevel=3,
    )


def event(
    seq: int,
    *,
    timestamp: float | None = None,
    event_type: str = "patch",
    body: bytes = b"",
    kind: str | None = None,
    ts: float | None = None,
) -> RawEvent:
    """A raw event whose payload and checksum name its seq (so reads can be checked).
    ``body`` is the payload to store; ``timestamp`` defaults to the seq. ``kind`` and
    ``ts`` are the deprecated names of ``event_type`` and ``timestamp``."""
    if kind is not None:
        _old_name("event", "kind", "event_type")
        event_type = kind
    if ts is not None:
        _old_name("event", "ts", "timestamp")
        timestamp = ts
    payload = body or f"payload-{seq}".encode()
    stamp = float(seq) if timestamp is None else timestamp
    return RawEvent(seq, event_type, stamp, payload, b"sum-%d" % seq)


def snapshot(
    seq: int, *, timestamp: float | None = None, tag: bytes = b"", ts: float | None = None
) -> RawSnapshot:
    """A raw snapshot at ``seq`` (``timestamp`` defaults to the seq; ``ts`` is its
    deprecated name)."""
    if ts is not None:
        _old_name("snapshot", "ts", "timestamp")
        timestamp = ts
    stamp = float(seq) if timestamp is None else timestamp
    return RawSnapshot(seq, stamp, b"state@%d%s" % (seq, tag), b"ck")


def untagged_at(expected_seq: int) -> AppendRequest:
    """An append to agent "a" after ``expected_seq`` that expects a head with no tag."""
    return dataclasses.replace(request("a", expected_seq), expected_tag=None, check_tag=True)


def request(
    agent_id: str,
    expected_seq: int,
    count: int = 1,
    *,
    key: str | None = None,
    snap_at: int | None = None,
    timestamp: float | None = None,
    ts: float | None = None,
) -> AppendRequest:
    """Append ``count`` events after ``expected_seq`` (optionally with a snapshot),
    stamped ``timestamp`` (default: their seqs; ``ts`` is its deprecated name)."""
    if ts is not None:
        _old_name("request", "ts", "timestamp")
        timestamp = ts
    seqs = range(expected_seq + 1, expected_seq + count + 1)
    events = tuple(event(s, timestamp=timestamp) for s in seqs)
    snap = snapshot(snap_at) if snap_at is not None else None
    return AppendRequest(agent_id, expected_seq, events, snap, key)


def _needs(backend: Backend, capability: Capability) -> None:
    """Skip the calling test unless ``backend`` offers ``capability`` (the refusal of an
    undeclared one is checked by ``test_undeclared_capabilities_are_refused_not_ignored``)."""
    if not backend.supports(capability):
        pytest.skip(f"{type(backend).__name__} does not offer {capability.value}")


async def _rewrite_refused(
    backend: Backend, bad: RewriteRequest, match: str, *, seq: int, base: int, record: str
) -> None:
    """``bad`` (a rewrite of agent "a") refused with
    :class:`~statekeeper.errors.RewriteBelowPrunedBase` matching ``match`` and naming
    ``seq``, ``base`` and ``record`` alone (``rewrite``), in a page (``rewrite_many``)
    and, where the engine commits a change with appends (``append_together``), there
    too with the appends of that commit (agent "b"'s create) written neither."""
    with pytest.raises(RewriteBelowPrunedBase, match=match) as refused:
        await backend.rewrite(bad)
    assert (refused.value.agent_id, refused.value.seq) == ("a", seq)
    assert (refused.value.base, refused.value.record) == (base, record)
    with pytest.raises(RewriteBelowPrunedBase, match=match):
        await backend.rewrite_many([bad])
    if backend.appends_together and backend.changes_leases_and_rewrites:
        with pytest.raises(RewriteBelowPrunedBase, match=match):
            await backend.append_together([request("b", 0)], [StreamChange("a", rewrite=bad)])
        assert await backend.head("b") == 0


def fenced(
    agent_id: str,
    expected_seq: int,
    fence: tuple[str, int],
    count: int = 1,
    *,
    key: str | None = None,
    snap_at: int | None = None,
) -> AppendRequest:
    """Like :func:`request`, made under the lease ``fence`` = (holder, token)."""
    base = request(agent_id, expected_seq, count, key=key, snap_at=snap_at)
    return AppendRequest(
        base.agent_id, base.expected_seq, base.events, base.snapshot, base.idempotency_key, fence
    )


def tagged(req: AppendRequest, head_tag: bytes | None) -> AppendRequest:
    """``req`` carrying ``head_tag`` (the authenticated stream head after it)."""
    return dataclasses.replace(req, head_tag=head_tag)


class Contract:
    """The hooks and fixtures of the conformance suite (see :class:`BackendConformance`)."""

    # -- what an engine's test file provides ---------------------------------------

    async def make_backend(self, tmp_path: Path) -> Backend:
        """A fresh, empty backend."""
        raise NotImplementedError

    async def open_peer(self, tmp_path: Path) -> Backend | None:
        """A second instance on the same storage as :meth:`make_backend`, or None."""
        return None

    async def open_readonly(self, tmp_path: Path) -> Backend | None:
        """An instance opened with ``readonly=True`` on the same storage as
        :meth:`make_backend`, or None when the engine cannot open read-only."""
        return None

    # -- fixtures ------------------------------------------------------------------

    @pytest.fixture
    async def backend(self, tmp_path: Path) -> AsyncIterator[Backend]:
        backend = await self.make_backend(tmp_path)
        try:
            yield backend
        finally:
            await backend.close()

    @pytest.fixture
    async def peer(self, backend: Backend, tmp_path: Path) -> AsyncIterator[Backend]:
        other = await self.open_peer(tmp_path)
        if other is None:
            pytest.skip(f"{type(backend).__name__} has no shared storage")
        try:
            yield other
        finally:
            await other.close()
