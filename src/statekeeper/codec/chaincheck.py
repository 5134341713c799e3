"""One stream's stored events verified and their chain followed in one call.

:func:`follow_chain` is :meth:`Codec.open <statekeeper.codec.pipeline.Codec.open>` of
each event of a stream plus the chain check a restore makes (each record's ``prev``
is the link of the one before), without what ``open`` pays again per record: its
argument checks, the key looked up and its fingerprint compared, the identity's names
packed, the header parsed and an :class:`~statekeeper.codec.pipeline.Opened` built.
A restore's checking pass opened 300,000 records one ``open`` each, ~45 % of the
pass (cProfile, docs/benchmarks.md, "backup16" and "backup15b").

The same checks are made, in the same order, and fail the same way: the first record
of each header (version, flags, key id and key fingerprint) goes through ``open``,
which checks the header and the key; a later record with the same header bytes is
decrypted with that key (its header is GCM associated data, as in ``open``), its body
decompressed and its link hashed here. Anything else — a record that does not
authenticate, a plain record whose checksum differs, a header not seen yet, a short
or legacy record — goes through ``open``, which raises what is wrong with it. The
record format is untouched.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..errors import IntegrityError
from .pipeline import (
    _CANON,
    _FP,
    _HASHES,
    _NONCE,
    _PLAIN_ANY,
    CHAIN_BROKEN,
    FLAG_BLAKE3,
    FLAG_DATA_KEY,
    FLAG_LEGACY_LINK,
    VERSION,
    _prefixed,
    _seq_ts,
)

if TYPE_CHECKING:
    from .keys import DerivedKey
    from .pipeline import Codec

__all__ = ["follow_chain"]

#: one stored event: (seq, record type, timestamp, payload, checksum)
_Row = Any
#: how to open the records of one header: (AES-GCM, canonical header, hash, compression)
_Opener = tuple[Any, bytes, Any, int]


def follow_chain(
    codec: Codec,
    agent_id: str,
    events: Iterable[_Row],
    link: bytes,
    mark: int | None = None,
    known: dict[bytes, _Opener] | None = None,
) -> tuple[bytes, bytes | None]:
    """Verify ``events`` (``(seq, record_type, timestamp, payload, checksum)`` rows of
    one stream, in order, the first following a record whose link is ``link``) and
    return ``(the last one's link, the link at seq mark or None)``.

    Raises what :meth:`Codec.open` raises for the first record that does not verify
    (:class:`IntegrityError`, :class:`~statekeeper.errors.KeyNotFound`,
    :class:`~statekeeper.errors.DecryptionError`,
    :class:`~statekeeper.errors.AgentForgotten`), and :class:`IntegrityError` with
    the chain-broken reason for the first one whose ``prev`` is not the link before it.
    A record that carries no ``prev`` (version 0, a legacy link) continues the chain
    with its own link, as a restore's check always did.

    ``known`` (a dict kept by the caller across the streams it checks with the same
    codec) holds how to open the records of each header encrypted with a master key,
    so that only the first record of the first stream goes through ``open``; records
    under an agent's data key are learnt per call (two agents' data keys may share a
    fingerprint, so their header bytes do not name the key).
    """
    keys: dict[bytes, _Opener] = {} if known is None else known
    own: dict[bytes, _Opener] = {}  # this agent's data-key headers
    last_type: str | None = None
    named = idents = b""
    agent = _prefixed(agent_id)
    strict = codec._strict
    pack = _seq_ts.pack
    join = b"".join
    at: bytes | None = None
    for seq, record_type, timestamp, payload, checksum in events:
        prev: bytes | None = None
        new: bytes | None = None
        if type(payload) is bytes and type(checksum) is bytes and len(payload) >= 35:
            if record_type != last_type:  # (not _names: its cache misses once per agent)
                last_type = record_type
                idents = agent + _prefixed(record_type)
                named = b"sk-link/1" + idents
            kid_len = payload[2]
            if kid_len:
                cut = 3 + kid_len + _FP
                entry = (own if payload[1] & FLAG_DATA_KEY else keys).get(payload[:cut])
                if entry is not None:
                    aead, canon, hasher, comp = entry
                    start = cut + _NONCE
                    seq_ts = pack(seq, timestamp)
                    try:
                        plain = aead.decrypt(
                            payload[cut:start],
                            payload[start:] + checksum,
                            join((b"sk-aead/1", payload[:start], idents, seq_ts)),
                        )
                    except Exception:  # InvalidTag: open, below, raises what is wrong
                        plain = b""
                    if len(plain) >= 32:
                        prev = plain[:32]
                        body = (
                            codec._decompress(plain[32:], comp, agent_id, seq, record_type)
                            if comp
                            else plain[32:]
                        )
                        new = hasher(join((named, seq_ts, canon, prev, body))).digest()
            elif not strict and (hasher := _PLAIN_ANY.get(payload[:3])) is not None:
                # stored as its canonical plaintext: the payload is what the link hashes
                digest = hasher(join((named, pack(seq, timestamp), payload))).digest()
                if digest == checksum:  # no key, no secret: a plain comparison
                    prev, new = payload[3:35], digest
        if new is None:
            opened = codec.open(agent_id, seq, record_type, timestamp, payload, checksum)
            prev, new = opened.prev, opened.link
            if opened.key_id is not None and prev is not None:
                _learn(codec, agent_id, seq, payload, own if payload[1] & FLAG_DATA_KEY else keys)
        if prev is not None and prev != link:
            raise IntegrityError(agent_id, seq, CHAIN_BROKEN)
        link = new
        if seq == mark:
            at = link
    return link, at


def _learn(
    codec: Codec,
    agent_id: str,
    seq: int,
    payload: bytes,
    keys: dict[bytes, _Opener],
) -> None:
    """Keep how to open the records whose header bytes are this one's: ``open`` has
    just verified one (its version, flags, key id, key and fingerprint)."""
    flags, kid_len = payload[1], payload[2]
    if payload[0] != VERSION or flags & FLAG_LEGACY_LINK:
        return
    cut = 3 + kid_len + _FP
    key_id = payload[3 : 3 + kid_len].decode("ascii")
    key: DerivedKey | None
    if flags & FLAG_DATA_KEY:
        key = codec._data_key(agent_id, seq, key_id, payload[cut - _FP : cut])
    else:
        key = codec.keyring.get(key_id) if codec.keyring is not None else None
    if key is None:  # pragma: no cover - open found it a moment ago
        return
    algo = flags & FLAG_BLAKE3
    fmt = flags & 0x03
    keys[payload[:cut]] = (key.aead, _CANON[fmt | algo], _HASHES[algo >> 6], (flags >> 2) & 0x03)
