"""A restored stream whose latest snapshot is a delta gets it again whole, rebuilt by the
target from its restored events.

A backup carries one snapshot per stream, its latest at or below the head (and a
compacted stream's base). Under the default snapshot policy that one may be a tail
snapshot (:mod:`statekeeper.store.tails`), and with ``full_snapshot_every > 1`` a
delta: either holds only the change since an earlier snapshot (``base``), which the
backup does not carry. Written as it is, the target's ``verify`` reports the missing
base and every cold load logs it and replays the whole stream.

So the checking pass notes, as it opens each stream's snapshot with the target's keys,
whether it is a delta (:func:`is_delta`: a look for ``base`` at the start of the
plaintext it holds already, the body parsed only when it is there); after the writing
pass, each such
stream's snapshot is rebuilt whole at the same seq from one replay of its restored
events — the events the check authenticated, folded and encoded by the target, as
``statekeeper repair`` rebuilds a damaged snapshot (:func:`statekeeper.store.repair`:
the same rebuild, and on an audited store the same ``repair`` entry naming it). No
record of the backup that the check did not authenticate reaches the target.

Chosen over carrying the base in the backup: it restores every backup already written
(file, page and record backups, full, incremental and of a namespace, of any engine)
clean, where a new entry field would help only backups made after it, and needs no
change of format or manifest; its cost is one replay per such stream (a cumulative
tail's base is whole: at most ``snapshot_every`` events), paid once by the restore
instead of by every cold load after it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...codec import ZERO_LINK
from ...codec.pipeline import Opened
from ...errors import IntegrityError
from ...records import RawSnapshot
from ...store.body import SNAPSHOT_TYPE
from ...store.state import AgentRecord

if TYPE_CHECKING:
    from ...codec import Codec
    from ...store import StateStore

__all__ = ["is_delta", "left_as_delta", "rebuild_whole"]

_log = logging.getLogger("statekeeper.restore")

#: what every delta snapshot's body holds (its key ``base``, in msgpack and in JSON)
_BASE = b"base"
#: where in the body it is: after the state's few fixed fields (``fsm``, ``v``, the
#: times, ``tune``: store/body.py ``snapshot_body``, store/tails.py ``tail_body``) and
#: before the ops; a whole snapshot's data comes last. Looked for only there: the
#: whole body costs ~4.3 ns a byte (40 us for a 9 KB chat snapshot, ``python -m
#: timeit``), more than the body's decryption; 1 KB at most ~4 us
_WINDOW = 1024


def is_delta(codec: Codec, agent_id: str, seq: int, opened: Opened) -> bool:
    """Whether the snapshot ``opened`` (authenticated and decrypted) is a delta or a
    tail snapshot: its body names a ``base`` (looked for in its first :data:`_WINDOW`
    bytes). Most are not and hold no such bytes there: the body is parsed only when
    it does (a whole snapshot whose data says ``base`` early)."""
    if opened.body.find(_BASE, 0, _WINDOW) < 0:
        return False
    try:
        body: Any = codec.deserialize(opened.body, agent_id, seq, fmt=opened.format)
    except IntegrityError:
        return False  # (the load reports it; nothing to rebuild from here)
    return type(body) is dict and "base" in body


async def rebuild_whole(store: StateStore, snapshots: Sequence[tuple[str, int, int]]) -> None:
    """Store each ``(agent, seq, base)`` snapshot of ``store`` again whole, rebuilt from
    a replay of the agent's events (``base``: a stream compacted by retention, replayed
    from its base snapshot; 0: from seq 1). One that cannot be rebuilt (its base
    snapshot does not open whole) is left as restored and logged: loads replay past it,
    as before."""
    from ...store.repair import _store_rebuilt

    for agent_id, seq, base in snapshots:
        async with store._writes.lock(agent_id):
            try:
                raw = await _whole_at(store, agent_id, seq, base)
            except IntegrityError as exc:
                _log.warning("restore: snapshot %s of %r left as a delta: %s", seq, agent_id, exc)
                continue
            await _store_rebuilt(store, agent_id, raw)
            store._reads.forget(agent_id)


async def left_as_delta(
    store: StateStore, candidates: Sequence[tuple[str, int, int, int, bytes | None]]
) -> list[tuple[str, int, int]]:
    """Of the agents a rerun with ``skip_existing`` leaves out, given as ``(agent,
    snapshot seq, base, head, the backup's head checksum)``, those a restore stopped
    after its writes and before :func:`rebuild_whole` left: the backup's whole stream
    (its head event the backup's) under the delta snapshot restored as it was. The
    rerun writes none of them, so it rebuilds these (was: 'restored and verified',
    and ``verify`` reported the missing base). The target's own streams, and
    snapshots already whole, are left alone."""
    codec = store.codec
    found: list[tuple[str, int, int]] = []
    for agent_id, seq, base, head, checksum in candidates:
        stored = await store.backend.read(agent_id, head - 1, head)
        if checksum is None or not stored or stored[-1].checksum != checksum:
            continue
        raw = await store.backend.latest_snapshot(agent_id, seq)
        if raw is None or raw.seq != seq:
            continue
        try:
            opened = codec.open(
                agent_id, seq, SNAPSHOT_TYPE, raw.timestamp, raw.payload, raw.checksum
            )
        except IntegrityError:
            continue  # (verify and loads report it; nothing to rebuild from here)
        if is_delta(codec, agent_id, seq, opened):
            found.append((agent_id, seq, base))
    return found


async def _whole_at(store: StateStore, agent_id: str, seq: int, base: int) -> RawSnapshot:
    """A whole snapshot of ``agent_id`` at ``seq``, from one verified replay of its
    events (from its compacted ``base`` snapshot, if any; never from the delta)."""
    if base:
        raw = await store.backend.latest_snapshot(agent_id, base)
        if raw is None or raw.seq != base:
            raise IntegrityError(agent_id, base, "the base snapshot is missing")
        record = await store._reads.decode_snapshot(agent_id, raw)
        # encoded whole, whatever the target's delta rule (as repair's rebuild)
        record.full_seq, record.full_link, record.full_data, record.deltas = 0, None, None, 0
        record.tail_base = None
    else:
        record = AgentRecord(agent_id, 0, None, {}, 1, 0.0, 0.0, link=ZERO_LINK)
    await store._reads.catch_up(record, seq)
    made, _ = store._snapshots.encode(record)
    return made
