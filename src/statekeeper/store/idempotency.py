"""Idempotency records: what a backend stores for a key, and how a record is checked.

A backend keeps, per agent, one *idempotency record* per key: ``(stored key, first_seq,
last_seq)``, written atomically with the append that used the key. A record alone
proves nothing — anyone who can write to the database can insert one, and a later
append with that key would then be reported as a duplicate and never written. So the
store never trusts a record on its own word: the event it points at carries the key in
its checksummed (with a keyring: encrypted and authenticated), hash-chained body
(``"key"``), and :func:`check_record` confirms that every event of the record's range
carries exactly that key. A record that does not match is an
:class:`~statekeeper.errors.IntegrityError`, never a silent skip.

What the backend stores as the key (:func:`stored_key`):

* without a keyring, the key itself;
* with a keyring, ``hmac:<key id>:<hex>`` — HMAC-SHA256 of the agent id and the key
  under a subkey derived from that master key (HKDF, purpose ``idempotency key``), so
  the database never holds the key in clear and nobody without the key can tell which
  key a record is for, or make a record for a chosen key.

A record keeps the key id it was made with. After a key rotation, lookups try every
key the keyring holds (:func:`stored_keys`, active first), so a retry of an append made
before the rotation is still recognised while the old key stays in the keyring; and
``rekey`` re-records every record under the active key (a plain store's, stored in
clear, too: :mod:`statekeeper.security.rekey_keys`), so a retry is still one once the
old key is retired or the store encrypted.

A compaction (retention's ``keep_last``) keeps every record, also of the appends whose
events it removed, so a retry after it still gets the original result rather than
being stored again. The events such a record claims are gone, so it cannot be checked
against them (:func:`check_pruned`): with a keyring it is still a keyed hash nobody
without the key can make for a chosen key; without one, records are as trusted as the
unauthenticated events are.
"""

from __future__ import annotations

import hmac
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import IntegrityError

if TYPE_CHECKING:
    from ..codec import Codec

__all__ = [
    "HMAC_PREFIX",
    "check_body_keys",
    "check_pruned",
    "record_problem",
    "stored_key",
    "stored_keys",
]

#: what a keyed-hash idempotency key starts with
HMAC_PREFIX = "hmac:"
_DOMAIN = b"sk-idempotency/1"
_LEN = struct.Struct(">I")


def _message(agent_id: str, key: str) -> bytes:
    agent = agent_id.encode("utf-8", "surrogatepass")
    return b"".join((_DOMAIN, _LEN.pack(len(agent)), agent, key.encode("utf-8", "surrogatepass")))


def _mac(codec: Codec, key_id: str, agent_id: str, key: str) -> str | None:
    derived = codec.keyring.get(key_id) if codec.keyring is not None else None
    if derived is None:
        return None
    return f"{HMAC_PREFIX}{key_id}:{derived.idempotency_mac(_message(agent_id, key)).hex()}"


def stored_key(codec: Codec, agent_id: str, key: str) -> str:
    """What the backend stores for ``key`` of ``agent_id``: the key without a keyring,
    its keyed hash under the active key with one."""
    if codec.keyring is None:
        return key
    token = _mac(codec, codec.keyring.active_id, agent_id, key)
    assert token is not None  # the active key is always loaded
    return token


def stored_keys(codec: Codec, agent_id: str, key: str) -> list[str]:
    """Every form ``key`` may be stored under: the active key's first, then every other
    key loaded in the keyring (records made before a rotation)."""
    first = stored_key(codec, agent_id, key)
    if codec.keyring is None:
        return [first]
    out = [first]
    for key_id in codec.keyring.ids:
        if key_id != codec.keyring.active_id:
            token = _mac(codec, key_id, agent_id, key)
            if token is not None:
                out.append(token)
    return out


def rotating(codec: Codec) -> bool:
    """True when the keyring holds more than one key (records may be under an old one)."""
    return codec.keyring is not None and len(codec.keyring.ids) > 1


def record_problem(codec: Codec, agent_id: str, stored: str, body_key: object) -> str | None:
    """Why the record stored as ``stored`` does not belong to an event whose body holds
    ``body_key`` (None when it does)."""
    if codec.keyring is not None and not stored.startswith(HMAC_PREFIX):
        return "the key is stored in clear (a store with a keyring stores a keyed hash)"
    if not isinstance(body_key, str):
        return "its event carries no idempotency key"
    if codec.keyring is None:
        if hmac.compare_digest(
            stored.encode("utf-8", "surrogatepass"), body_key.encode("utf-8", "surrogatepass")
        ):
            return None
        return "its event carries a different idempotency key"
    key_id = stored[len(HMAC_PREFIX) :].rpartition(":")[0]
    expected = _mac(codec, key_id, agent_id, body_key)
    if expected is None:
        return f"it was made with key {key_id!r}, which is not in the keyring"
    if hmac.compare_digest(expected, stored):
        return None
    return "its event carries a different idempotency key"


def check_body_keys(
    codec: Codec,
    agent_id: str,
    stored: str,
    first_seq: int,
    last_seq: int,
    bodies: Sequence[tuple[int, object]],
) -> None:
    """Raise :class:`IntegrityError` unless ``bodies`` — ``(seq, body key)`` of the
    events ``first_seq..last_seq`` as read — are exactly that range and each carries
    the key the record is stored under."""
    seqs = [seq for seq, _ in bodies]
    if first_seq < 1 or last_seq < first_seq or seqs != list(range(first_seq, last_seq + 1)):
        raise IntegrityError(
            agent_id,
            first_seq,
            f"the idempotency record for this key claims seqs {first_seq}..{last_seq}, which"
            " are not in the stream: the record is forged or damaged (nothing was written)",
        )
    for seq, body_key in bodies:
        why = record_problem(codec, agent_id, stored, body_key)
        if why is not None:
            raise IntegrityError(
                agent_id,
                seq,
                f"the idempotency record for this key claims seq {seq}, but {why}: the record"
                " is forged or damaged (nothing was written)",
            )


def check_pruned(codec: Codec, agent_id: str, stored: str, first_seq: int) -> None:
    """Raise :class:`IntegrityError` unless a record whose events a compaction removed
    is stored in the form this store uses (with a keyring: a keyed hash, never the key
    in clear); its events are gone, so nothing else can be checked."""
    if codec.keyring is not None and not stored.startswith(HMAC_PREFIX):
        raise IntegrityError(
            agent_id,
            first_seq,
            "the idempotency record for this key is stored in clear (a store with a keyring"
            " stores a keyed hash): the record is forged or damaged (nothing was written)",
        )
