"""Crypto-shredding: forget an agent by destroying its data key.

A store whose keyring has a key vault (``Keyring(..., data_keys=...)``) encrypts each
agent's records with a data key of its own (:mod:`statekeeper.codec.datakeys`).
:func:`forget` destroys that key: every copy of the agent's records — every tier, the
WAL, replicas, backups taken before — is then ciphertext nothing opens, and a load
raises :class:`~statekeeper.errors.AgentForgotten` instead of returning anything.

The records themselves stay in the store (they are noise now) unless ``purge=True``,
which also deletes them; either way the key vault keeps a tombstone, so the id can never
be given a new key that would make the old copies readable, and writes to it are
refused with ``AgentForgotten``. Another process that opened the agent before keeps its
cached key until it reopens its store: stop writers of the agent first.

The change feed gets a tombstone of the agent (``FeedEvent.deleted``, ``forgotten``
True; :mod:`statekeeper.store.feed_deletes`): read models built from the feed drop what
they derived from its events, which are copies too.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..arguments import check_agent_id
from ..errors import AgentNotFound, ConfigurationError, StatekeeperError
from ..store import feed_deletes, feed_intents
from ..store.keyguard import key_family
from ..store.namespaced import NamespacedStateStore
from .holds import refuse_if_held
from .hooks import AuditSink, GovernanceEvent, announce, emit, require, store_sink

if TYPE_CHECKING:
    from ..codec.keys import Keyring
    from ..store import StateStore

__all__ = ["ForgetResult", "forget", "init_vault"]

_PAGE = 500


@dataclass(frozen=True, slots=True)
class ForgetResult:
    """What :func:`forget` did: ``destroyed`` is False when the agent had no data key
    (it was forgotten before, or never written with one); ``purged`` when its records
    were deleted too; ``head`` the stream head at the time (0: no stream)."""

    agent_id: str
    destroyed: bool
    purged: bool
    head: int
    at: float
    #: the key families whose data key of the agent was destroyed (``"legacy"``: its key
    #: from before key families); see :mod:`statekeeper.codec.keyscope`
    scopes: tuple[str, ...] = ()


async def forget(
    store: StateStore,
    agent_id: str,
    *,
    purge: bool = False,
    audit: AuditSink | None = None,
) -> ForgetResult:
    """Destroy ``agent_id``'s data key (see the module documentation).

    Raises :class:`~statekeeper.errors.AgentNotFound` when the agent has neither a
    stream nor a key in the vault (a mistyped id), and
    :class:`~statekeeper.errors.ConfigurationError` without a key vault."""
    check_agent_id(agent_id)
    listed = agent_id
    if isinstance(store, NamespacedStateStore):
        # a store opened in a namespace: the caller's id is relative; the key, the
        # stream, the policy and the audit log all use the stored id
        agent_id = store.qualify(agent_id)
    try:
        return await _forget(store, agent_id, listed, purge, audit)
    except StatekeeperError as exc:
        if isinstance(store, NamespacedStateStore):
            store.relative_error(exc)
        raise


async def _forget(
    store: StateStore, agent_id: str, listed: str, purge: bool, audit: AuditSink | None
) -> ForgetResult:
    # destroying a key is forever: it needs admin on the agent's namespace (checked
    # before anything, and the refusal is audited) on a store opened as a principal
    await require(store, agent_id, "admin", "forget")
    # a legal hold exempts the agent from every purge: refused before anything is read
    await refuse_if_held(store, agent_id, "forget")
    given = audit
    audit = await store_sink(store, audit)
    keyring = store.codec.keyring
    if keyring is None or keyring.data_keys is None:
        raise ConfigurationError(
            "forget needs a store whose keyring has a key vault (per-agent data keys):"
            ' add "data_keys": "FILE" to the key file'
        )
    await store.flush()
    family = await key_family(store.backend, store.codec)
    head = await store.backend.head(agent_id)
    if head == 0 and not _has_key(keyring, family, agent_id):
        raise AgentNotFound(agent_id)  # a typo must not leave a tombstone
    fingerprints: set[bytes] = set()
    readable = await _without_data_key(store, agent_id, fingerprints) if head else 0
    if readable:
        # destroying a data key leaves them as readable as before: refused, nothing done
        # (it reported "forgotten" and exit 0 while every such record still opened)
        raise ConfigurationError(
            f"cannot forget {listed!r}: {readable} of its stored records are not "
            "encrypted with a data key of its own (written before the key vault was set "
            "up, or in the clear), so destroying its key would leave them readable. Run "
            "'statekeeper rekey' first (it re-encrypts them under the agent's data key), "
            "then forget it; copies in backups taken before stay readable with the "
            "master key"
        )
    at = time.time()
    # on a governed store the entry goes first (a crash cannot destroy a key unrecorded);
    # it names the key families whose keys go (store ids, no key material): which
    # stores' copies are shredded
    planned = keyring.forget_scopes_in(family, agent_id, fingerprints=frozenset(fingerprints))
    announced = await announce(
        store,
        given,
        GovernanceEvent(
            "forget",
            agent_id,
            "ok",
            1 if head else None,
            head or None,
            {"purge": purge, "key_scopes": planned},
            at,
        ),
    )
    try:
        # the feed's consumers drop what they derived: a tombstone, through an intent
        # written before the key is destroyed (a crash in between leaves the intent,
        # which the next forget or delete, or verify's report, finishes: see
        # store/feed_intents.py); the purge's delete writes another, with the delete
        async def purged() -> bool:
            store._reads.forget(agent_id)  # the decoded state cached by this store goes
            if not purge:
                return False
            token = feed_deletes.forgetting.set(True)
            try:
                return await store.delete(listed)
            finally:
                feed_deletes.forgetting.reset(token)

        scopes: list[str] = []

        def shred() -> bool:
            scopes.extend(
                keyring.forget_in(family, agent_id, fingerprints=frozenset(fingerprints), at=at)
            )
            return bool(scopes)

        destroyed, purged_it = await feed_intents.forget_with_intent(
            store.backend, store.codec, agent_id, head, shred, purged
        )
    except BaseException as exc:
        if announced is not None:
            await announced.failed(exc)
        raise
    if announced is not None:
        return ForgetResult(listed, destroyed, purged_it, head, at, tuple(scopes))
    await emit(
        audit,
        GovernanceEvent(
            "forget",
            agent_id,
            "ok",
            1 if head else None,
            head or None,
            {"key_destroyed": destroyed, "records_purged": purged_it, "key_scopes": scopes},
            at,
        ),
    )
    return ForgetResult(listed, destroyed, purged_it, head, at, tuple(scopes))


def _has_key(keyring: Keyring, family: str | None, agent_id: str) -> bool:
    """Whether the vault holds a key or tombstone of ``agent_id`` for the store of key
    family ``family`` (its own, a family it continues, or a legacy one)."""
    scoped = keyring.scoped
    if family is None or scoped is None:
        assert keyring.data_keys is not None
        return keyring.data_keys.load(agent_id) is not None
    families = scoped.families(family)
    return any(e.family is None or e.family in families for e in scoped.entries(agent_id))


async def _without_data_key(store: StateStore, agent_id: str, fingerprints: set[bytes]) -> int:
    """How many of the agent's stored records (events, snapshots) are not encrypted with
    its data key (master-key, clear or version-0 records), read from the clear headers;
    the fingerprints of the data keys the others name are added to ``fingerprints``."""
    from ..codec.pipeline import _FP, Codec

    backend = store.backend

    def readable(payload: bytes) -> bool:
        header = Codec.header(payload)
        if header is None or not header.data_key:
            return True
        end = 3 + payload[2]
        fingerprints.add(bytes(payload[end : end + _FP]))
        return False

    count = 0
    cursor = 0
    while True:
        page = await backend.read(agent_id, cursor, None, limit=_PAGE)
        count += sum(readable(raw.payload) for raw in page)
        if len(page) < _PAGE:
            break
        cursor = page[-1].seq
    below: int | None = None
    while (snap := await backend.latest_snapshot(agent_id, below)) is not None:
        count += readable(snap.payload)
        if snap.seq <= 1:
            break
        below = snap.seq - 1
    return count


def init_vault(
    key_file: str | os.PathLike[str], vault: str | os.PathLike[str] | None = None
) -> tuple[bool, Path]:
    """Give the key file ``key_file`` a key vault (``statekeeper keys vault init``): a
    new :class:`~statekeeper.codec.datakeys.SqliteKeyVault` at ``vault`` (default: the
    key file's name with ``.vault.db``, next to it), named in the key file (``"data_keys"``,
    relative to it) so every store opened with that key file gives each agent a data key.

    Returns ``(made, path)``: ``made`` False when the key file already names that vault
    (nothing changed). Refused with :class:`~statekeeper.errors.ConfigurationError`,
    before anything is written: a key file that is not one, one that names another vault
    (moving it would orphan the data keys in it), a vault path in a missing folder, a
    folder, or an existing file that is not a key vault. The key file is read and
    written back under :func:`~statekeeper._files.folder_locked`, as ``keys generate``
    adds a key to it: neither run writes back a file without the other's change."""
    from .._files import folder_locked

    key_path = Path(key_file)
    if key_path.is_dir():
        raise ConfigurationError(f"key file {key_path} is a folder")
    with folder_locked(key_path):
        return _init_vault(key_path, vault)


def _init_vault(key_path: Path, vault: str | os.PathLike[str] | None) -> tuple[bool, Path]:
    from ..codec.datakeys import SqliteKeyVault
    from ..codec.keys import Keyring

    ring = Keyring.from_file(key_path)  # a valid key file (opens its vault, if it has one)
    doc = json.loads(key_path.read_text(encoding="utf-8"))
    target = Path(vault) if vault is not None else key_path.with_name(key_path.stem + ".vault.db")
    named = doc.get("data_keys")
    if isinstance(named, str):
        current = key_path.parent / named
        if vault is None or _same_file(current, target):
            return False, current
        raise ConfigurationError(
            f"{key_path} already uses the key vault {current}: a new vault would orphan "
            "the data keys in it"
        )
    if not target.parent.is_dir():
        raise ConfigurationError(f"cannot create the key vault {target}: no such folder")
    if target.is_dir():
        raise ConfigurationError(f"cannot create the key vault {target}: it is a folder")
    if target.exists() and not _is_vault(target):
        raise ConfigurationError(
            f"refusing to use {target} as a key vault: it is not one statekeeper wrote"
        )
    SqliteKeyVault(target).close()
    relative = os.path.relpath(target.resolve(), key_path.parent.resolve())
    keys = {str(k): str(v) for k, v in doc["keys"].items()}
    Keyring.write_file(key_path, keys, ring.active_id, relative)
    return True, target


def _same_file(a: Path, b: Path) -> bool:
    return a.resolve() == b.resolve()


def _is_vault(path: Path) -> bool:
    """True for a SQLite file holding only the vault's ``data_keys`` table."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        finally:
            db.close()
    except sqlite3.Error:
        return False
    from ..codec.datakeys import VAULT_TABLES

    return "data_keys" in names and names <= VAULT_TABLES
