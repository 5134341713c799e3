"""What :mod:`.rekey` leaves as it is: a record sealed as the codec seals it now
(an agent's legacy data key: :func:`legacy_fingerprint`), and an agent whose data key
``forget`` destroyed; and what it does beside the agents it walks: the data keys of the
agents it does not walk (:func:`rewrap_unwalked`), the witness's marks still under
another key (:func:`remake_marks`)."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from ..codec import Codec
from ..codec.datakeys import uses_data_key
from ..codec.keys import DerivedKey
from ..errors import ConfigurationError, StatekeeperError
from .held import rekeyed

if TYPE_CHECKING:
    from ..codec.pipeline import Opened
    from ..store.store import StateStore
    from .highwater import HighWater

__all__ = [
    "check_rekeyable",
    "data_key_sealed",
    "forgotten",
    "legacy_fingerprint",
    "refuse_namespace",
    "remake_marks",
    "rewrap_unwalked",
    "sealed_now",
]

_logger = logging.getLogger("statekeeper.witness")


def sealed_now(
    opened: Opened, payload: bytes, active: str, own_keys: bool, legacy: bytes | None = None
) -> bool:
    """Whether a record is sealed as the codec seals it now: under the ``active`` key
    and, with a key vault (``own_keys``), with the agent's own data key. A record written
    before the vault, under the master key alone, is not: re-sealed, since ``forget``
    could not make it unreadable otherwise. Nor is, in a store with a key family
    (:mod:`statekeeper.codec.keyscope`), a record under the agent's legacy data key
    (``legacy``: its fingerprint), from before key families: shared by every store of
    the vault (``forget`` in any of them destroys it), the store's records move to its
    own family's key. (A record under another family's key — a restored copy of
    another store's — stays: it is shredded with the store it was copied from.)"""
    if opened.key_id != active or opened.version == 0:
        return False
    header = Codec.header(payload) if own_keys else None
    if header is None or not header.data_key:
        return header is None
    if legacy is None:
        return True
    end = 3 + payload[2]
    return bytes(payload[end : end + len(legacy)]) != legacy


async def forgotten(vault: Any, store: StateStore, listed: str) -> bool:
    """Whether the key vault holds a tombstone for the agent ``listed`` (as the store
    lists it: relative in a namespaced store, whose vault holds stored ids)."""
    qualify = getattr(store, "qualify", None)
    agent_id = qualify(listed) if callable(qualify) else listed
    keyring = store.codec.keyring
    if keyring is not None and keyring.data_keys is vault:  # (its family's tombstone)
        family = store.codec.key_family
        if keyring.forgotten_in(family, agent_id) is not None:
            return True
        # (the store lists the agent: a restored copy's source tombstone counts too, when
        # its records are sealed with a data key — not written before the vault, under
        # the master key alone: another store's forget of the same id left them readable)
        if keyring.forgotten_in(family, agent_id, held=True) is None:
            return False
        return await data_key_sealed(store, agent_id)
    entry = vault.load(agent_id)
    return entry is not None and entry.wrapped is None


async def data_key_sealed(store: StateStore, agent_id: str) -> bool:
    """Whether the head event of ``agent_id`` (a stored id) is sealed with a data key
    (False: under the master key alone, written before the vault, or in the clear)."""
    backend = store.backend
    head = await backend.head(agent_id)
    rows = await backend.read(agent_id, head - 1, head) if head else []
    header = Codec.header(rows[-1].payload) if rows else None
    return header is not None and header.data_key


async def rewrap_unwalked(store: StateStore) -> int:
    """Wrap the data keys of the agents the run did not walk under the active key (see
    :meth:`~statekeeper.codec.keys.Keyring.rewrap_family`); a narrower admin's run
    (``--as``, not an admin on ``**``) leaves them, as it leaves other namespaces'."""
    from ..store.governed import governance_of
    from ..store.keyguard import key_family

    keyring = store.codec.keyring
    governance = governance_of(store)
    if keyring is None or (governance is not None and not governance.store_admin()):
        return 0
    family = await key_family(store.backend, store.codec)
    return await asyncio.to_thread(keyring.rewrap_family, family)


def check_rekeyable(store: StateStore) -> Codec:
    """The store's codec, when a rekey can run on the store (a keyring; not a
    namespace's view: :func:`refuse_namespace`), else the refusal."""
    codec = store.codec
    if codec.keyring is None:
        raise ConfigurationError(
            "rekey needs a keyring whose active key is the key to re-encrypt with"
        )
    refuse_namespace(store)
    return codec


def refuse_namespace(store: StateStore) -> None:
    """:class:`~statekeeper.errors.ConfigurationError` for a store opened in a
    namespace: ``rekey`` re-encrypts the whole store (as the CLI says: it refuses
    ``--namespace``). Through such a store it walked the relative ids below the view,
    found no stream under them and re-encrypted nothing, reporting the agents done."""
    if getattr(store, "namespace", ""):
        raise ConfigurationError(
            "rekey re-encrypts the whole store: open it without a namespace (a"
            " principal's policy decides which agents a run may rekey)"
        )


def legacy_fingerprint(codec: Codec, agent_id: str) -> bytes | None:
    """The fingerprint of ``agent_id``'s live legacy data key (keyed by its id alone,
    from before key families: :mod:`statekeeper.codec.keyscope`), in a store with a
    key family (its records under it are re-sealed under the family's key); None
    without one, or when the agent has no legacy key this keyring opens."""
    keyring = codec.keyring
    scoped = keyring.scoped if keyring is not None else None
    if keyring is None or scoped is None or codec.key_family is None:
        return None
    entry = scoped.load(agent_id) if uses_data_key(agent_id) else None
    if entry is None or entry.wrapped is None or entry.master_id is None:
        return None
    master = keyring.get(entry.master_id)
    if master is None:
        return None
    try:
        return DerivedKey(entry.master_id, master.unwrap(agent_id, entry.wrapped)).fingerprint
    except StatekeeperError:
        return None


async def remake_marks(store: StateStore, witness: HighWater | None) -> None:
    """At the end of a ``rekey``: :func:`.held.rekeyed` for every mark of the witness file
    (read again) still under another key than the active one, then the file written
    before the rekey reports done. ``rekeyed`` after each agent makes its mark again in
    memory, written within ``witness_interval``, while the progress file is saved every
    half second: a run killed between the two, resumed, skipped agents whose new marks
    never reached the file — their marks stayed under the key about to be retired. A
    run as a principal that is not a store admin leaves the marks, as it leaves the
    other namespaces' records. An unreadable or unwritable file is logged, not raised
    (every use of the store reports an unusable one). No witness: nothing to do."""
    from ..store.governed import governance_of

    governance = governance_of(store)
    if witness is None or (governance is not None and not governance.store_admin()):
        return
    try:
        await asyncio.to_thread(witness.load)
        for agent_id in list(witness._known):
            await rekeyed(witness, store, agent_id)
        await witness.flush()
    except StatekeeperError as exc:
        _logger.error("the witness file %s was not made again under the key: %s", witness.path, exc)
    except OSError as exc:
        _logger.error("cannot write the witness file %s: %s", witness.path, exc)
