"""Part of the backend contract, the appends (one, a batch, the next of a run, several
streams together) and head reads: the abstract methods and defaults
:class:`~statekeeper.backends.base.Backend` takes from :class:`AppendsContract`."""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING

from ...errors import (
    CapabilityUnsupported,
    StoreClosed,
)
from ...records import (
    AppendRequest,
    AppendResult,
    RawSnapshot,
    StreamChange,
)
from .requests import (
    KeyedRow,
    NextRow,
    next_request,
    validate_next,
)

if TYPE_CHECKING:
    from .part import ContractPart
else:
    ContractPart = abc.ABC  # (the type checker sees what the other parts declare)


class AppendsContract(ContractPart):
    @abc.abstractmethod
    async def append(self, request: AppendRequest) -> AppendResult:
        """Atomically append ``request.events`` (and its snapshot) if the head matches.

        Raises :class:`~statekeeper.errors.ConflictError` (nothing written) when the
        stored head is not ``request.expected_seq`` and the idempotency key is new.
        """

    async def append_batch(
        self, requests: Sequence[AppendRequest]
    ) -> list[AppendResult | BaseException]:
        """Apply several appends, sharing one commit where the engine allows it.

        Each request succeeds or fails on its own (a conflict in one does not undo the
        others); the result list holds an :class:`AppendResult` or the exception for
        each request, in order. The default runs them one by one.
        """
        results: list[AppendResult | BaseException] = []
        for request in requests:
            try:
                results.append(await self.append(request))
            except StoreClosed:
                raise  # not a failure of one request: the whole backend is gone
            except Exception as exc:
                results.append(exc)
        return results

    async def append_next(
        self,
        agent_id: str,
        seq: int,
        timestamp: float,
        payload: bytes,
        checksum: bytes,
        head_tag: bytes | None,
        expected_tag: bytes | None,
        snapshot: RawSnapshot | None = None,
    ) -> None:
        """Append one ``patch`` event numbered ``seq`` to a head at ``seq - 1`` — the
        store's common save, in plain arguments: exactly :meth:`append` of
        ``AppendRequest(agent_id, seq - 1, (RawEvent(seq, "patch", timestamp, payload,
        checksum),), snapshot, head_tag=head_tag, expected_tag=expected_tag,
        check_tag=compares_head_tag)`` (which is what this default does), without
        the request objects. :class:`~statekeeper.errors.ConflictError`, nothing
        written, when the head moved (or, on an engine that compares head tags, carries
        another tag than ``expected_tag``); ``snapshot``, when given, sits on ``seq``.
        An engine overrides it where building the records costs (SQLite, memory)."""
        validate_next(agent_id, seq, snapshot)
        row = (agent_id, seq, timestamp, payload, checksum, head_tag, expected_tag, snapshot)
        await self.append(next_request(row, self.compares_head_tag))

    def commit_next(self, row: NextRow) -> bool:
        """:meth:`append_next` of ``row`` (its arguments, as :meth:`join_next` takes
        them) made now, as a plain call, when the engine can commit it on this thread
        without waiting: True once committed; False, with nothing done, when it cannot
        (the caller then awaits :meth:`append_next`, which handles every case: the
        default); the refusal raised as :meth:`append_next` raises it. The arguments
        are not checked (the store calls it only with a row it built on a cached
        record, as :meth:`append_next` would be called). For the store's common save
        with ``durability="sync"``: no coroutine of its own, none of
        :meth:`append_next` (docs/benchmarks.md, "seqfoot")."""
        return False

    def commit_keyed(self, row: KeyedRow) -> AppendResult | None:
        """The event ``row`` (:data:`KeyedRow`: of type ``event_type``, numbered ``seq`` > 1)
        appended now, as a plain call, to a head at ``seq - 1`` carrying
        ``expected_tag``, with the idempotency key ``key`` claimed in the same commit —
        :meth:`append` of that one-event request with ``check_tag``, when the engine
        can commit it on this thread without waiting: its result (a duplicate's, nothing
        written, when ``key`` was stored before); the
        :class:`~statekeeper.errors.ConflictError` raised, nothing written, when the
        head moved. None, with nothing done, when it cannot (the caller then makes the
        append by :meth:`append`, which handles every case): the default. The
        arguments are not checked (the store's lean append, ``store/lean.py``, builds
        them on a cached record)."""
        return None

    def join_next(self, row: NextRow) -> Awaitable[BaseException | None] | None:
        """:meth:`append_next` of ``row`` for an engine that groups appends
        (:attr:`groups_appends`), as a plain call when a commit of the running event loop
        is already filling up or in flight: the awaitable of the append's place in that
        commit (it gives None, or the refusal to raise — a
        :class:`~statekeeper.errors.ConflictError` —, without raising it). None, with
        nothing done, when the engine has no such commit open (the caller then awaits
        :meth:`append_next`): the default. The group committer's common save waits
        for it without a coroutine of its own and of :meth:`append_next`. The arguments
        are not checked, as :meth:`commit_next` does not check them (the store calls it
        only with a row it built on a cached record)."""
        return None

    async def append_together(
        self, requests: Sequence[AppendRequest], changes: Sequence[StreamChange] = ()
    ) -> list[AppendResult | None]:
        """Append every request (distinct streams) in ONE atomic commit: all of them
        or none, also across a crash. ``changes`` (other streams: deletes, snapshots;
        see :class:`~statekeeper.records.StreamChange`) are made in the same commit,
        checked before anything is written (a failed check raises
        :class:`~statekeeper.errors.ConflictError` naming its stream; nothing written).

        The first request that fails raises its error (a
        :class:`~statekeeper.errors.ConflictError` names its ``agent_id``) and nothing
        is written. A request whose idempotency key was already used writes nothing
        and makes the whole call write nothing: its result says ``duplicate=True``,
        the others' results are None. Engines without it
        (``appends_together`` false) raise
        :class:`~statekeeper.errors.CapabilityUnsupported`.
        """
        raise CapabilityUnsupported(self.name, "append_together", "an atomic multi-stream append")

    @abc.abstractmethod
    async def lookup_key(self, agent_id: str, key: str) -> AppendResult | None:
        """The result of the append that used idempotency ``key``, with
        ``duplicate=True``; None if no append of the agent used it."""

    @abc.abstractmethod
    async def head(self, agent_id: str) -> int:
        """The last seq of the agent's stream (0 when the agent has no stream)."""

    async def head_tag(self, agent_id: str) -> tuple[int, bytes | None]:
        """``(head seq, head tag)``: the stream head and the tag stored with it by the
        append (or rewrite) that set it — read together, in one consistent read.

        ``(0, None)`` when the agent has no stream; the tag is None when the head was
        written without one. The tag is opaque bytes made by the codec (the
        authenticated stream head, see :mod:`statekeeper.codec.pipeline`).

        The default returns no tag: an engine that does not store tags serves stores
        without a key only (a store with a key refuses a head it cannot authenticate).
        """
        return await self.head(agent_id), None
