"""Part of the backend contract, the whole-store and per-stream copies (exports, images,
page snapshots, bulk copy): the abstract methods and defaults
:class:`~statekeeper.backends.base.Backend` takes from :class:`CopiesContract`."""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ...records import (
    StreamExport,
    StreamRows,
)

if TYPE_CHECKING:
    from ..sqlite.pages import PageSnapshot
from .capabilities import Capability

if TYPE_CHECKING:
    from .part import ContractPart
else:
    ContractPart = abc.ABC  # (the type checker sees what the other parts declare)


class CopiesContract(ContractPart):
    async def export_streams(self, ranges: Sequence[tuple[str, int, int]]) -> list[StreamExport]:
        """For each ``(agent_id, after_seq, to_seq)``: a :class:`StreamExport` of that
        slice (what a backup copies). The default reads each agent on its own; engines
        override it with a few statements per batch (SQLite).

        Each export is consistent on its own only as far as the engine's reads are:
        a caller checks that the events run gap-free up to ``to_seq``.
        """
        out: list[StreamExport] = []
        keyed = self.supports(Capability.KEY_EXPORT)
        for agent_id, after_seq, to_seq in ranges:
            events = await self.read(agent_id, max(after_seq - 1, 0), to_seq)
            snap = await self.latest_snapshot(agent_id, to_seq) if to_seq > 0 else None
            head, tag = await self.head_tag(agent_id)
            keys = await self.idempotency_keys(agent_id) if keyed else []
            out.append(StreamExport(agent_id, head, tag, events, snap, keys))
        return out

    async def copy_to_file(self, dest: str, prefix: str = "") -> bool:
        """Write a consistent point-in-time copy of the streams (as stored) whose ids
        start with ``prefix`` (``"ns/"``; every stream if empty) into the new file
        ``dest``, as a SQLite file of the SQLite backend's schema, without reading its
        rows into Python. False (nothing written) when the engine cannot (the
        default): a backup then reads rows (:meth:`export_rows`)."""
        return False

    async def import_image(
        self, image: str, expected: tuple[int, int, int], *, raise_floor: bool = False
    ) -> bool:
        """Write the streams of ``image`` (a SQLite store file a restore decrypted and
        checked: every record opened with this store's keys, every head tag its own)
        into this store, which holds no stream yet, as the engine's own bulk copy (no
        row read into Python, :mod:`~.sqlite_import`); ``expected`` is what the restore
        checked (agents, events, snapshots). False, nothing written, when the engine
        cannot (the default) or the store holds a stream: the restore then appends the
        records one stream at a time. ``raise_floor``: the change feed's floor raised
        through the first event of each stream compacted by retention in the same
        write, as :meth:`append_from_base` does for one."""
        return False

    async def page_snapshot(self, prefix: str = "") -> PageSnapshot | None:
        """An open point-in-time image of the store's file, read as pages, when the
        engine keeps its streams in one SQLite file and ``prefix`` is empty (the whole
        store): see :mod:`~.sqlite_pages` (the caller closes it). None (the default):
        a backup copies the streams instead (:meth:`copy_to_file`, :meth:`copy_out`,
        or rows)."""
        return None

    async def copy_out(self, prefix: str, write: Callable[[bytes], None]) -> dict[str, Any] | None:
        """Stream a consistent point-in-time copy of the streams (as stored) whose ids
        start with ``prefix`` (``"ns/"``; every stream if empty) to ``write``, as the
        engine's own bulk export (PostgreSQL: ``COPY ... TO STDOUT (FORMAT binary)``
        of the stream tables under one ``REPEATABLE READ`` snapshot, see
        :mod:`.postgres.export`), without reading its rows into Python; returns what
        the backup's manifest needs (``tables``: each section's name and size,
        ``heads``: ``(agent, head seq, head checksum)`` in id order, ``events``,
        ``snapshots``, ``compacted``: as
        :func:`~.sqlite_export.compacted_streams`), read in the same snapshot. None
        (nothing written) when the engine cannot (the default)."""
        return None

    def in_place(self) -> contextlib.AbstractContextManager[None]:
        """Within it, this task's reads leave every agent where it is stored: a tiered
        store answers a demoted agent from its cold tier instead of bringing it back
        (what ``verify`` and a backup need: reading is not using). The engines that
        keep an agent in one place have nothing to change (the default)."""
        return contextlib.nullcontext()

    async def export_rows(self, ranges: Sequence[tuple[str, int, int]]) -> list[StreamRows]:
        """:meth:`export_streams` with the records as plain tuples (what a backup
        packs). The default converts :meth:`export_streams`; SQLite reads its rows
        straight into them (one range scan per table for a page of whole streams)."""
        return [
            StreamRows(
                e.agent_id,
                e.head,
                bytes(e.head_tag) if e.head_tag is not None else None,
                [
                    (r.seq, r.type, r.timestamp, bytes(r.payload), bytes(r.checksum))
                    for r in e.events
                ],
                (
                    (
                        e.snapshot.seq,
                        e.snapshot.timestamp,
                        bytes(e.snapshot.payload),
                        bytes(e.snapshot.checksum),
                    )
                    if e.snapshot is not None
                    else None
                ),
                list(e.keys),
            )
            for e in await self.export_streams(ranges)
        ]
