"""What an agent's objects hold and how a listing of them reads as a stream: a commit's
body (its records: :func:`_encode_events`, :func:`_decode_events`), an idempotency key
object's body (:func:`_key_body`), the live commits and base of one listing of
``e/`` (:class:`_Layout`, :func:`_layout_of`), the agent a key names (:func:`_agent_of`)
and whether an object is another incarnation's (:func:`_foreign`). The key names
themselves are made by :mod:`.keys`."""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Sequence

from ...errors import IntegrityError
from ...records import RawEvent
from .base import _AGENT_PARTS, _INC

_EVENT = struct.Struct(">QdHHI")  # seq, ts, len(kind), len(checksum), len(payload)
_WIDTH = 20
#: the type of the record at the base seq in the first commit of a stream made by
#: ``append_from_base``: the base snapshot travels in the commit (reads skip it)
_BASE_RECORD = "\x00base"
#: the type of the record (seq 0) an overwrite of a commit adds to its body: its token
#: (see :func:`_encode_events`)
_WRITTEN = "\x00w"


def _encode_events(events: Sequence[RawEvent], written: str = "") -> bytes:
    """A commit's body; with ``written`` (an overwrite's token) a last record of type
    :data:`_WRITTEN` holding it (reads skip it): an overwrite of a commit changes its
    bytes, hence its ETag, even when its records are the same (a rewrite of the head tag
    alone, in metadata): an ``If-Match`` on the ETag read before then catches it."""
    if written:
        events = (*events, RawEvent(0, _WRITTEN, 0.0, written.encode(), b""))
    parts: list[bytes] = []
    for e in events:
        event_type = e.type.encode()
        parts.append(
            _EVENT.pack(e.seq, e.timestamp, len(event_type), len(e.checksum), len(e.payload))
        )
        parts += (event_type, e.checksum, e.payload)
    return b"".join(parts)


def _decode_events(agent_id: str, blob: bytes) -> list[RawEvent]:
    out: list[RawEvent] = []
    at = 0
    try:
        while at < len(blob):
            seq, ts, nkind, nsum, npay = _EVENT.unpack_from(blob, at)
            at += _EVENT.size
            event_type = blob[at : at + nkind].decode()
            at += nkind
            checksum = blob[at : at + nsum]
            at += nsum
            payload = blob[at : at + npay]
            at += npay
            if len(payload) != npay:
                raise ValueError("truncated")
            # (no event has seq 0: a record of this store's own, _WRITTEN or one a
            # later version adds, its type starting with NUL)
            ours = event_type.startswith("\x00") and event_type != _BASE_RECORD
            if not (seq == 0 and ours):
                out.append(RawEvent(seq, event_type, ts, payload, checksum))
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        raise IntegrityError(agent_id, None, f"unreadable S3 commit object: {exc}") from exc
    return out


def _key_body(first: int, last: int, key: str | None) -> bytes:
    return b"%d:%d:" % (first, last) + (key.encode() if key is not None else b"")


def _key_range(body: bytes) -> tuple[int, int]:
    first, last, _ = body.split(b":", 2)
    return int(first), int(last)


#: what an expired key object of the newest commit holds (see the module documentation)
_EXPIRED = _key_body(0, 0, None)


@dataclasses.dataclass(frozen=True, slots=True)
class _Layout:
    """One listing of an agent's ``e/`` objects, read as a stream."""

    #: the live commits as (first seq, version tag), ascending: those above the base
    commits: list[tuple[int, str]]
    #: the newest base object's seq (0: none)
    base: int
    #: keys the base hides (commits at or below it, older base objects); with no live
    #: commit, every commit and base object (the leftover of an interrupted delete)
    hidden: list[str]


def _layout_of(root: str, tagged: Sequence[tuple[str, str]]) -> _Layout:
    """The stream of one listing of an agent's ``e/`` objects (``root``: their prefix)."""
    commits: list[tuple[int, str, str]] = []
    bases: list[tuple[int, str]] = []
    for key, tag in tagged:
        name = key[len(root) :]
        if name[:1] == "b":  # sorts after every commit (digits)
            bases.append((int(name[1:]), key))
        else:
            commits.append((int(name), tag, key))
    base = max((seq for seq, _ in bases), default=0)
    live = [(first, tag) for first, tag, _ in commits if first > base]
    if not live:  # no stream: what an interrupted delete left (the next creation's)
        return _Layout([], 0, [key for _, _, key in commits] + [key for _, key in bases])
    hidden = [key for first, _, key in commits if first <= base]
    hidden += [key for seq, key in bases if seq < base]
    return _Layout(live, base, hidden)


def _agent_of(hexid: str) -> str | None:
    """The agent id a key's first part under the store's ``a/`` names (its hex form),
    or None when it names none: a key of another store whose prefix lies inside this
    one's (``p/a/...`` of the store at ``p/a`` under the store at ``p``), never ours."""
    if len(hexid) % 2 or hexid.strip("0123456789abcdef"):
        return None
    try:
        return bytes.fromhex(hexid).decode()
    except (ValueError, UnicodeDecodeError):
        return None


def _agent_key(rest: str) -> bool:
    """Whether ``rest`` (a key less the store's ``a/`` root) is an agent's object:
    ``<hex id>/e|h|s|k/...``."""
    hexid, _, tail = rest.partition("/")
    return _agent_of(hexid) is not None and tail[:2] in _AGENT_PARTS


def _foreign(made: dict[str, str], tip: dict[str, str] | None) -> bool:
    """Whether an object whose metadata is ``made`` (a key object, a snapshot) is
    another incarnation's than the stream whose newest commit's metadata is ``tip``
    (None: no stream): a late write of a deleted stream's append. One without an
    incarnation (written before them, or by a restore) is not told apart."""
    inc = made.get(_INC)
    return inc is not None and (tip is None or tip.get(_INC) != inc)


def _shared_start(keys: Sequence[str]) -> str:
    """The longest string every one of ``keys`` starts with (an S3 prefix: by
    character, not by path component)."""
    low, high = min(keys), max(keys)
    n = 0
    while n < len(low) and low[n] == high[n]:
        n += 1
    return low[:n]
