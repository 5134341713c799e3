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
**Lineage.** A renewal first sets a store-level marker ``store-id-was:<id>`` (the id
the store had: :func:`renewing`, before the new one is made), kept in the store as
its other markers are. A witness file of one of those ids is this store's from before
a restore (a restore run by the CLI, which does not know the application's
``witness=PATH``; or one stopped between the renewal and the file's): it is taken
over at the opening (:func:`adopt_renewed`, a warning says so) and its marks checked
as the store's — a restore writes only agents the store did not hold. A witness of an
id the store never had still raises.

The identity is outside the file's seal (which the exported witness shares with
``statekeeper witness check``): like the seal, it catches mistakes, not a forger.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from ..backends.identity import store_identity
from ..errors import AccessDenied

if TYPE_CHECKING:
    from ..backends.base import Backend
    from .highwater import HighWater

__all__ = [
    "PREVIOUS",
    "Identity",
    "adopt_renewed",
    "another_store",
    "describe",
    "differs",
    "identify",
    "parse_store",
    "reidentified",
    "renewed",
    "renewing",
]

#: the store-level marker a renewal of the store's id sets first, naming the id it had
#: (``store-id-was:<id>``): a witness file of that id is this store's (:func:`adopt_renewed`)
PREVIOUS = "store-id-was:"

logger = logging.getLogger("statekeeper.witness")

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


async def reidentified(witness: HighWater) -> bool:
    """Before an alarm names the witness file's store as another than this one: the
    store's id read again — another process's restore renewed it (and the file's) since
    this process cached it. True when it changed (the alarm is made again)."""
    if witness.identify is None or not differs(witness.filed_store, witness.store):
        return False
    was, witness.store = witness.store, await witness.identify()
    return witness.store != was


async def renewing(backend: Backend) -> None:
    """Before the store's id is renewed: mark the id it has now as one it had
    (:data:`PREVIOUS`), durably, so that a witness file still naming it — the
    application's own (``witness=PATH``, which a CLI restore does not know), or one a
    restore stopped before renewing — is taken for this store's (:func:`adopt_renewed`)."""
    now = await backend.feed_id()
    if now is None:
        return
    try:
        await backend.set_marker(PREVIOUS + now)
    except AccessDenied:  # (a database role that may renew the id but set no marker)
        logger.warning(
            "the store's id %s was not recorded as one it had (this database role may not"
            " set store markers): a witness file naming it will be refused after the"
            " restore (WitnessStoreMismatch; move it away then)",
            now,
        )


async def adopt_renewed(witness: HighWater, backend: Backend) -> bool:
    """The witness file names an id this store had before a renewal (a restore): the
    file records this store's id from now on, its marks kept and checked (a restore
    writes only agents the store did not hold), and a warning says so. True when
    taken over; False (nothing done) for a file of this store, of none, or of another
    store (that one still raises :class:`~statekeeper.errors.WitnessStoreMismatch`)."""
    filed, ours = witness.filed_store, witness.store
    if filed is None or ours is None or not differs(filed, ours):
        return False
    if not await backend.read_marker(PREVIOUS + filed["id"]):
        return False
    logger.warning(
        "the witness file %s was written for store id %s, which this store had before a"
        " restore renewed its id: taken over for %s (its marks are checked as this"
        " store's)",
        witness.path,
        filed["id"],
        describe(ours),
    )
    witness._adopt = True
    try:
        await asyncio.to_thread(witness._merge, {})
    except Exception as exc:  # (read-only location: taken over in memory, written later)
        logger.error("cannot write the witness file %s: %s", witness.path, exc)
    witness.filed_store = dict(ours)
    return True


async def renewed(witness: HighWater, backend: Backend) -> None:
    """The store's id was renewed (a restore into it, ``renew_store_id``): the witness
    file records the new one now, its marks kept (a restore writes only agents the
    store did not hold). Before, the next opening would have found another store."""
    witness.store = await identify(backend)
    witness._adopt = True
    await asyncio.to_thread(witness._merge, {})
