"""Which stream a witness mark is of: its *incarnation*, kept with the mark.

A mark said ``(agent, seq, digest of the chain link)``, and nothing of which stream of
the agent it was made in. Two gaps followed (both were expected failures):

- a process sharing the witness file, whose copy of the file predated a mark another
  process made of seq N, wrote another record at seq N after the server lost the
  first (a lossy failover); its newer mark replaced the lost one in the file, newest
  wins, and the process holding the lost mark took the file's for a delete and a new
  stream: the rollback served, no error (tests/store/test_witness_held_stale.py);
- on a store that expires its agents (Redis ``ttl=``), a stream gone back in time whose
  first record a writer stamped with a clock ahead of the checking process's, by less
  than the time since, read as a stream made again after the mark expired: served,
  no error (tests/store/test_witness_ttl_expiry.py).

Now a mark records ``"c"``: the time of the stream's first record (the state's
``created_at``, which the store holds at every save: no read is added to the save
path). A stream deleted (or expired) and made again has another first record. So:

- a newer mark in the file explains a mark that no longer holds only when it is of
  another incarnation, or the stream was reset since the older mark was made (a
  deletion or a rewrite's, :func:`reset_kept`), or either mark says nothing of its
  incarnation (a rewrite's mark, a file written before, a process of an older
  version): :func:`same_stream` is False then;
- on a ``ttl=`` store, a stream whose first record is the marked incarnation's did not
  expire: it went back in time (:mod:`.expiry`).

``"r"`` (optional) is the time of the newest reset of the stream the file knows: the
deletion the file held of the agent before this incarnation's marks replaced it (a
delete, a schema rewrite), or the time the writing process's append at seq 1 began the
stream (:func:`begun_kept`), whichever is newer. An incarnation made again at the very
time of the one deleted or expired (a ``clock=`` that stands still, freezegun's frozen
``time.time``: every stream of the agent has the same ``c``) is still told from a
rollback by it — also on a store that expires its agents, where the server deletes
them without a deletion in the file (was: the process holding the expired stream's
mark raised ``RollbackDetected`` on reading the stream made again elsewhere,
tests/store/test_witness_frozen_clock.py).

``"d"`` (optional) is the time of the deletion (a delete's, a rewrite's) the file held
of the agent right before this incarnation's first mark replaced it: a newer mark of
another incarnation explains a mark that no longer holds only with a deletion made
after it, in the file (``"d"``) or in the store (a feed tombstone): :mod:`.ended`.
A mark of an incarnation begun by an older version carries none: the store's
tombstone proves its delete then.

The file format stays ``statekeeper_witness: 1``: the fields are optional, so a file
written before is read as it was (its marks checked as before: no incarnation known),
and a process of an older version reads and merges a file that has them (it keeps the
entries it does not replace, their fields included; its own marks have none).
"""

from __future__ import annotations

from typing import Any

__all__ = ["Dirty", "begun_kept", "begun_written", "needs_proof", "reset_kept", "same_stream"]

#: a mark noted and not yet written: (seq, chain link, when, the stream's first
#: record's time or None); a deletion is (0, None, when, None)
Dirty = tuple[int, bytes | None, float, float | None]


def reset_kept(mark: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
    """``mark``, replacing the file's entry ``old`` of its agent, with the time of the
    stream's last reset (``"r"``): ``old``'s when it was a deletion, or the reset
    ``old`` carried unless the two are of different incarnations (either one of none
    known, a rewrite's mark or an older version's, keeps it: a reset only ever makes
    the check more lenient). And the time of the deletion the file held before this
    incarnation (``"d"``: :func:`needs_proof`), carried likewise; none when it held
    none (no key: the file's size and merge cost as before for every other agent)."""
    if old is None:
        return mark
    same = None in (old.get("c"), mark.get("c")) or old["c"] == mark["c"]
    if int(old["seq"]) < 1:
        mark["r"] = mark["d"] = float(old["t"])
    elif same:
        if "r" in old:
            mark["r"] = float(old["r"])
        if "d" in old:
            mark["d"] = float(old["d"])
    return mark


def needs_proof(older: dict[str, Any], newer: dict[str, Any]) -> bool:
    """True when ``newer`` (the file's mark of ``older``'s agent, made after it) holding
    explains ``older`` not holding only if ``older``'s incarnation was ended: ``newer``
    is of another incarnation, and the file held no deletion of the agent made after
    ``older``'s incarnation began (its ``"c"``) right before that incarnation's first
    mark (its ``"d"``). A stream wholly lost (a lossy failover) and begun again by a
    process whose copy of the file never held ``older`` reads the same as a stream
    deleted and made again: only a durable record of the delete tells them apart
    (:mod:`.ended`). False when either incarnation is not known (newest wins then, as
    before)."""
    created, other = older.get("c"), newer.get("c")
    if created is None or other is None or other == created:
        return False
    # (made after ``older``'s incarnation began, not after ``older``: the deletion is
    # stamped by the deleting process's clock, and older was by then, in real time, no
    # other incarnation's to end; was: compared with ``older``'s time, and a delete by a
    # process whose clock is behind, made right after the mark, read as a rollback)
    # (or after ``older`` itself: the begin is the store clock's, the mark and the
    # deletion time.time's, which a test may freeze)
    return float(newer.get("d", float("-inf"))) < min(float(created), float(older["t"]))


def same_stream(older: dict[str, Any], newer: dict[str, Any]) -> bool:
    """True when ``newer`` (a mark made after ``older``) is of ``older``'s incarnation
    and the stream was not reset since ``older`` was made: then ``newer`` holding does
    not explain ``older`` not holding — the stream went back and was written again."""
    created = older.get("c")
    if created is None or newer.get("c") != created:
        return False  # (another incarnation, or one not known: as before, newest wins)
    return float(newer.get("r", float("-inf"))) < float(older["t"])


def begun_kept(mark: dict[str, Any], begun: Dirty | None) -> dict[str, Any]:
    """``mark`` with its stream's begin as its last reset (``"r"``) when this process
    began that stream: ``begun`` is the mark it noted of seq 1 (the agent absent when it
    was written: deleted, expired, never made), of ``mark``'s incarnation. A mark of the
    stream this process began is no evidence about any mark made before it began."""
    reset = float(mark.get("r", float("-inf")))
    if begun is not None and begun[3] == mark.get("c") and begun[2] > reset:
        mark["r"] = begun[2]
    return mark


def begun_written(begun: dict[str, Dirty], dirty: dict[str, Dirty]) -> None:
    """After ``dirty`` was merged into the file: the streams begun that it covered (their
    begin in the file now, or of another incarnation) are forgotten."""
    for agent_id, (_, _, t, _) in dirty.items():
        noted = begun.get(agent_id)
        if noted is not None and noted[2] <= t:
            begun.pop(agent_id, None)
