"""A restore's checking pass over one store image in a single merged scan of its rows.

The general checking pass (:func:`.restore._check`) reads a file backup's image stream
by stream (:func:`~statekeeper.backends.sqlite.export.merge_streams` builds a
``StreamRows`` of each, :func:`.filecopy.checked_entries` an entry list, then
:func:`~statekeeper.codec.chaincheck.follow_chain` opens its records): ~2/3 of a
restore's CPU, most of it per record and per stream in Python (docs/benchmarks.md
"restore", "restorecheck"). :func:`check_image` makes the same checks in one pass:
the image's heads compared with the manifest's as two lists (one comparison in C), then
one ordered scan of the events, each record authenticated and decrypted with the
target's keys and its link hashed as it is read (no per-stream bundle), each stream's
head tag made at its last record, the latest snapshot opened where one is.

It takes only the common case and never decides a refusal: anything else (a stream
compacted by retention, a head without a tag, a tag of another key, a version-0 or
legacy-link record, a compressed record without a key, a deleted stream, rows out of
order, a gap, an extra or a missing row, any record that does not authenticate or whose
chain breaks)
makes it return None, and the general pass then checks the image and names what is
wrong, as before. So a backup it accepts is one the general pass accepts, with the
same plans; a backup it does not accept costs the scan up to the doubt and then the
general pass.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from hmac import compare_digest
from itertools import islice
from typing import TYPE_CHECKING, Any

from ...backends.sqlite.files import connect_read_only
from ...backends.sqlite.importing import stray_key
from ...codec import ZERO_LINK
from ...codec.chaincheck import _learn
from ...codec.pipeline import _FP, _NONCE, _PLAIN_ANY, FLAG_DATA_KEY, _prefixed, _seq_ts
from ...errors import StatekeeperError
from ...store.body import SNAPSHOT_TYPE
from .filecopy import GROUP_AGENTS, GROUP_BYTES
from .fileformat import HEAD_TAGS, FrameReader
from .wholesnaps import is_delta

if TYPE_CHECKING:
    from ...store import StateStore
    from .restore import _Plan

__all__ = ["check_image"]

_HEADS = "SELECT agent_id, head_seq, head_tag FROM sk_agents WHERE head_seq > 0 ORDER BY agent_id"
_EVENTS = (
    "SELECT agent_id, seq, kind, ts, CAST(payload AS BLOB), CAST(checksum AS BLOB)"
    " FROM sk_events ORDER BY agent_id, seq"
)
_SNAPSHOTS = (
    "SELECT agent_id, seq, ts, CAST(payload AS BLOB), CAST(checksum AS BLOB)"
    " FROM sk_snapshots ORDER BY agent_id, seq"
)


#: the header of no record (longer than a payload): the first record's is learnt
_NONE = b"\xff" * 1024


class _Doubt(StatekeeperError):
    """The merged pass does not take this image: the general pass checks it (never
    leaves :func:`check_image`)."""


def check_image(
    store: StateStore,
    reader: FrameReader,
    image: str,
    number: int,
    plan: Callable[[int], _Plan],
    tagging: tuple[bytes, Callable[[str, int, bytes], bytes]],
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, _Plan] | None:
    """The plans of every stream of ``image`` (the store image of ``reader``'s backup,
    file ``number`` of the restore), checked as :func:`.restore._check` checks them, or
    None: not the common case, or something is wrong (the general pass then checks the
    image and names it; see the module documentation). ``plan(number)`` makes an empty
    plan; ``tagging``: the target's head-tag prefix and its tagger."""
    if reader.header.version not in HEAD_TAGS or reader.compacted():
        return None
    if reader.manifest.get("deleted") or reader.untagged():
        return None
    conn = connect_read_only(image)
    try:
        conn.execute(f"PRAGMA mmap_size = {os.path.getsize(image)}")
        return _scan(store, conn, reader, number, plan, tagging, progress)
    except _Doubt:
        return None
    except Exception:  # anything unexpected: the general pass decides (and names it)
        return None
    finally:
        conn.close()


def _scan(
    store: StateStore,
    conn: sqlite3.Connection,
    reader: FrameReader,
    number: int,
    plan: Callable[[int], _Plan],
    tagging: tuple[bytes, Callable[[str, int, bytes], bytes]],
    progress: Callable[[str, int, int], None] | None,
) -> dict[str, _Plan]:
    heads = conn.execute(_HEADS).fetchall()
    # every stream the manifest lists, with its head seq and tag, in the same order
    if heads != reader.heads():
        raise _Doubt
    if stray_key(conn) is not None:
        raise _Doubt  # an idempotency record outside every stream: the general pass names it
    mine, tagger = tagging
    width = len(mine)
    codec = store.codec
    keys: dict[bytes, Any] = {}  # how to open each master-key header (codec.chaincheck)
    events = conn.execute(_EVENTS)
    snaps = conn.execute(_SNAPSHOTS)
    snap = next(snaps, None)
    pack = _seq_ts.pack
    join = b"".join
    plans: dict[str, _Plan] = {}
    total = len(heads)
    group = group_bytes = group_agents = 0
    # the header of the records last opened: (its bytes, where the nonce starts and
    # ends, AES-GCM, canonical header, hash, compression, an agent's data key)
    hdr = aad = _NONE
    cut = start = 0
    aead: Any = None
    canon = b""
    hasher: Any = None
    comp = 0
    owned = False
    own: dict[bytes, Any] = {}  # this agent's data-key headers
    for done, (agent_id, head, tag) in enumerate(heads, 1):
        if type(tag) is not bytes or tag[:width] != mine:
            raise _Doubt  # another key's tag, or none: checked by the general pass
        # the latest snapshot at or below the head (as merge_streams picks it)
        latest = None
        while snap is not None and snap[0] <= agent_id:
            if snap[0] != agent_id or snap[1] > head:
                raise _Doubt  # a snapshot of no listed stream, or past a head
            latest = snap
            snap = next(snaps, None)
        mark = latest[1] if latest is not None else None
        agent = _prefixed(agent_id)
        if own:  # another agent's data keys: learnt again for this one
            hdr, owned, own = _NONE, False, {}
        kind_now: Any = None
        idents = named = b""
        link = ZERO_LINK
        at: bytes | None = None
        expect = 1
        size = 0
        checksum = b""
        for row_agent, seq, kind, ts, payload, checksum in islice(events, head):
            if seq != expect or row_agent != agent_id:
                raise _Doubt  # a gap, a row out of place: the general pass names it
            expect += 1
            size += len(payload)
            if kind != kind_now:
                kind_now = kind
                idents = agent + _prefixed(kind)
                named = b"sk-link/1" + idents
            if not payload.startswith(hdr) and not payload[2]:
                # no key: a record stored as its canonical plaintext (what it hashes)
                hasher = None if codec._strict else _PLAIN_ANY.get(payload[:3])
                if hasher is None:
                    raise _Doubt  # compressed, legacy, or plain in a keyed store
                hdr, aead, owned = payload[:3], None, False
            elif not payload.startswith(hdr):
                cut = 3 + payload[2] + _FP
                start = cut + _NONCE
                hdr = payload[:cut]
                aad = b"sk-aead/1" + hdr
                owned = bool(payload[1] & FLAG_DATA_KEY)
                learnt = own if owned else keys
                if hdr not in learnt:
                    # a header not seen yet (for a data key: not for this agent):
                    # ``open`` checks it (its key and fingerprint), then its records
                    # are opened here
                    opened = codec.open(agent_id, seq, kind, ts, payload, checksum)
                    if opened.key_id is None or opened.prev is None:
                        raise _Doubt  # no key, or a legacy link: the general pass
                    _learn(codec, agent_id, seq, payload, learnt)
                aead, canon, hasher, comp = learnt[hdr]
            seq_ts = pack(seq, ts)
            if aead is None:  # plain: no key, no secret, plain comparisons
                new = hasher(join((named, seq_ts, payload))).digest()
                if new != checksum or payload[3:35] != link:
                    raise _Doubt
                link = new
                if seq == mark:
                    at = link
                continue
            nonce = payload[cut:start]
            plain = aead.decrypt(
                nonce, payload[start:] + checksum, join((aad, nonce, idents, seq_ts))
            )
            if len(plain) < 32 or not plain.startswith(link):
                raise _Doubt  # the chain breaks here (or the record is truncated)
            if comp:
                body = codec._decompress(plain[32:], comp, agent_id, seq, kind)
                link = hasher(join((named, seq_ts, canon, plain[:32], body))).digest()
            else:
                link = hasher(join((named, seq_ts, canon, plain))).digest()
            if seq == mark:
                at = link
        if expect != head + 1:
            raise _Doubt  # fewer events than the head: the general pass names it
        made = tagger(agent_id, head, link)
        if not compare_digest(made, tag):
            raise _Doubt
        if group_agents and (group_agents >= GROUP_AGENTS or group_bytes + size > GROUP_BYTES):
            group, group_bytes, group_agents = group + 1, 0, 0
        group_agents += 1
        group_bytes += size
        got = plans[agent_id] = plan(number)
        got.head = got.events = head
        got.link = link
        got.tag = made
        got.ends[head] = checksum
        if latest is not None:
            _, seq, ts, payload, checksum = latest
            opened = codec.open(agent_id, seq, SNAPSHOT_TYPE, ts, payload, checksum)
            if at is None or (opened.prev is not None and opened.prev != at):
                raise _Doubt
            got.snapshot, got.snap_link = (seq, number, group), (seq, at)
            got.delta = is_delta(codec, agent_id, seq, opened)
        if progress is not None and done % 256 == 0:
            progress("verify", done, total)
    if next(events, None) is not None or snap is not None:
        raise _Doubt  # events (or snapshots) of no listed stream, or past a head
    return plans
