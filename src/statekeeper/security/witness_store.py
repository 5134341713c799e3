"""Which store an automatic witness file witnesses (:mod:`.highwater`).

The file held marks and nothing that said whose: the witness of one store given to
another (``witness=PATH`` reused for a second Redis prefix or PostgreSQL schema, a
copied configuration) had its marks checked against the wrong store — every mark an
alarm — and the two stores' writes merged into one file, where one store's newest
1,024 agents pushed the other's marks out: a rollback of those then went unseen.

Now the file records the store: ``"store": {"id": ..., "name": ...}`` — ``id`` the
store's own id (:meth:`Backend.feed_id`, 16 hex digits kept in the store: replicated
with it, copied with a SQLite file or a backup of it, so an older copy of the same
store, a promoted replica or a restored file is still that store and its rollback is
caught), ``name`` its URL without a password or its SQLite path
(:func:`~statekeeper.backends.identity.store_identity`), for the reader. It is noted
the first time the file is written, and never replaced by a merge (the file's store
stays the file's); a restore into the store renews the id (``renew_store_id``) and
the witness with it. When a store opens with a witness of another id, its marks are
checked as before and every ``RollbackDetected`` says the file was written for
another store; when none is found, :class:`~statekeeper.errors.WitnessStoreMismatch`
is raised: no marks of either store are trusted. ``verify`` reports it likewise.
The identity is outside the file's seal (which the exported witness shares with
``statekeeper witness check``): like the seal, it catches mistakes, not a forger.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ..backends.identity import store_identity

if TYPE_CHECKING:
    from ..backends.base import Backend
    from .highwater import HighWater

__all__ = [
    "Identity",
    "another_store",
    "describe",
    "differs",
    "identify",
    "parse_store",
    "renewed",
]

#: what the file records of its store: ``{"id": ..., "name": ...}``
Identity = dict[str, str]


async def identify(backend: Backend) -> Identity | None:
    """``backend``'s store as the witness records it; None when it keeps no id (an
    engine without one, a read-only opening of a store that has none yet)."""
    found = await backend.feed_id()
    if found is None:
        return None
    return {"id": str(found), "name": store_identity(backend) or backend.name}


def parse_store(value: Any) -> Identity | None:
    """The file's ``store`` entry (None: a file written before it was recorded).
    Raises ``ValueError`` for one that is not an identity (a damaged file)."""
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("id"), str):
        raise ValueError("its store entry is not a store identity")
    return {"id": value["id"], "name": str(value.get("name", ""))}


def describe(ident: Identity) -> str:
    """``ident`` in words: its name and id."""
    return f"{ident['name'] or 'a store'} (store id {ident['id']})"


def differs(filed: Identity | None, ours: Identity | None) -> bool:
    """True when the file names a store and ours is known and has another id."""
    return filed is not None and ours is not None and filed["id"] != ours["id"]


def another_store(filed: Identity, ours: Identity) -> str:
    """What a check says of a witness file of another store."""
    return (
        f"the witness file was written for {describe(filed)}, and this store is "
        f"{describe(ours)}: another store's witness, or this store was created again "
        "(its data lost) or replaced"
    )


async def renewed(witness: HighWater, backend: Backend) -> None:
    """The store's id was renewed (a restore into it, ``renew_store_id``): the witness
    file records the new one now, its marks kept (a restore writes only agents the
    store did not hold). Before, the next opening would have found another store."""
    witness.store = await identify(backend)
    witness._adopt = True
    await asyncio.to_thread(witness._merge, {})
