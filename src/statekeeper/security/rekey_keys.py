"""Key rotation of idempotency records: ``rekey`` stores each under the active key.

An idempotency record is stored under a form of its key (:mod:`statekeeper.store.
idempotency`): in clear in a store without a key, ``hmac:<key id>:...`` with one. A
lookup computes the form from the key, so a record left in another form is not found
and a retry of its append is stored a second time: every record of a plain store
once it is encrypted, and every record under a retired key after a rotation. So
``rekey`` re-records them (:func:`rekey_keys`), agent by agent, before re-encrypting
the agent's records:

* the key of a record in clear is the stored form itself; of a record under another
  key, the key its first event carries in its (authenticated) body — and the record
  must be that key's under the other key: a record that does not match its event is
  refused (:class:`~statekeeper.errors.IntegrityError`), never laundered into a
  record under the active key;
* each agent's records are renamed in ONE atomic step
  (:meth:`~statekeeper.backends.base.Backend.rename_keys`): after a crash, each record
  is under its old form or its new one, never neither. While the old key is in the
  keyring (the documented rotation keeps it until ``rekey`` has run), lookups try its
  form too; a plain store's records are renamed before a key is needed to append to
  the agent (its records are still in clear until the walk after re-encrypts them,
  and a store with a key writes no record after a record in clear);
* a record under another key whose events a compaction removed cannot be renamed
  (its key is no longer stored anywhere): it stays under the old key, counted in
  ``RekeyStats.keys_left``.

An engine without ``Capability.KEY_RENAME`` (a third-party one) is left as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..backends.base import Capability
from ..errors import IntegrityError
from ..store.idempotency import HMAC_PREFIX, record_problem, stored_key

if TYPE_CHECKING:
    from ..codec import Codec
    from ..store.store import StateStore

__all__ = ["rekey_keys"]

_PAGE = 500


async def rekey_keys(store: StateStore, agent_id: str, codec: Codec) -> tuple[int, int]:
    """Re-record ``agent_id``'s idempotency records not under ``codec``'s active key
    (see the module docs): ``(renamed, left)`` — how many were renamed, and how many
    could not be (under another key, their events compacted away)."""
    backend = store.backend
    keyring = codec.keyring
    if (
        keyring is None
        or not backend.supports(Capability.KEY_EXPORT)
        or not backend.supports(Capability.KEY_RENAME)
    ):
        return 0, 0
    active = f"{HMAC_PREFIX}{keyring.active_id}:"
    stale = [r for r in await backend.idempotency_keys(agent_id) if not r[0].startswith(active)]
    if not stale:
        return 0, 0
    reader = codec.migrating()  # (the events may still be in clear)
    wanted = {first for _, first, _ in stale}
    carried: dict[int, object] = {}
    cursor, last = min(wanted) - 1, max(wanted)
    while cursor < last:  # the key each record's first event carries
        page = await backend.read(agent_id, cursor, last, limit=_PAGE)
        if not page:
            break
        for raw in page:
            if raw.seq in wanted:
                body, _ = reader.decode(
                    agent_id, raw.seq, raw.type, raw.timestamp, raw.payload, raw.checksum
                )
                carried[raw.seq] = body.get("key") if isinstance(body, dict) else None
        cursor = page[-1].seq
    renames: list[tuple[str, str]] = []
    left = 0
    for stored, first, _ in stale:
        clear = not stored.startswith(HMAC_PREFIX)
        if first in carried:
            body_key = carried[first]
            why = _mismatch(reader, agent_id, stored, body_key)
            if why is not None or not isinstance(body_key, str):
                raise IntegrityError(
                    agent_id,
                    first,
                    f"the idempotency record for seq {first} does not match its event:"
                    f" {why}; rekey re-records no such record (nothing of it written)",
                )
            renames.append((stored, stored_key(codec, agent_id, body_key)))
        elif clear:  # its events compacted away: the record is the key
            renames.append((stored, stored_key(codec, agent_id, stored)))
        else:
            left += 1
    renamed = await backend.rename_keys(agent_id, renames) if renames else 0
    return renamed, left


def _mismatch(reader: Codec, agent_id: str, stored: str, body_key: object) -> str | None:
    """Why the record stored as ``stored`` is not the one of the key ``body_key`` its
    event carries (None when it is, or cannot be told: made with a key no longer in
    the keyring — an earlier version's rekey left it so; the event is authenticated
    and the record is renamed to the key it carries, for the same range)."""
    if not isinstance(body_key, str):
        return "its event carries no idempotency key"
    if not stored.startswith(HMAC_PREFIX):
        return None if stored == body_key else "its event carries a different idempotency key"
    key_id = stored[len(HMAC_PREFIX) :].rpartition(":")[0]
    if reader.keyring is None or reader.keyring.get(key_id) is None:
        return None
    return record_problem(reader, agent_id, stored, body_key)
