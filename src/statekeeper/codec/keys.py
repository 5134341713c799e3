"""Keyrings: named AES-256 keys for encryption at rest, from a file, the environment or
a callable (a KMS).

A :class:`Keyring` holds any number of named 32-byte master keys and names one of them
*active*: new records are encrypted with the active key, and every record stores the
id of the key it was encrypted with, so older keys keep decrypting older records
until ``statekeeper rekey`` has re-encrypted them (see ``docs/security.md``).

From each master key, separate subkeys are derived with HKDF-SHA256 — one for record
encryption (AES-256-GCM), one for the authenticated stream heads (HMAC-SHA256), one
for witness digests, one for idempotency keys (HMAC-SHA256, so a backend stores a
keyed hash of each key, never the key), and a 4-byte fingerprint that tells a wrong
key from a damaged record. Key material is never logged, never part of a ``repr`` or
an error message, and never stored with the data.

Sources::

    Keyring({"k1": key_bytes}, active="k1")
    Keyring.from_file("keys.json")      # {"active": "k2", "keys": {"k1": "<base64>", "k2": …}}
    Keyring.from_env()                  # $STATEKEEPER_KEYS = "k2=<base64>,k1=<base64>"
    Keyring.from_callable(kms_fetch, active="k2")   # kms_fetch("k2") -> 32 bytes

With a key vault (``data_keys=``: a :class:`~statekeeper.codec.datakeys.KeyVault` or a
file path; ``"data_keys": "vault.db"`` in a key file, relative to it), every agent's
records are encrypted with a data key of its own, wrapped by the active master key and
kept in the vault: :meth:`Keyring.forget` destroys it (crypto-shredding, see
:mod:`statekeeper.codec.datakeys`).

Over 600 lines because a keyring is one object with its master keys, its sources and
its vault's data keys (their family rules live in :mod:`.keyscope`).

>>> ring = Keyring({"k1": bytes(32)}, active="k1")
>>> ring
Keyring(active='k1', keys=['k1'])
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import re
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .._files import folder_locked, warn_if_open_to_others, write_atomically
from ..errors import AgentForgotten, BackendUnavailable, ConfigurationError, DecryptionError
from . import keyscope
from .datakeys import KeyVault, ScopedKeyVault, VaultEntry, open_vault

__all__ = ["KEY_BYTES", "DerivedKey", "Keyring", "add_key_to_file", "generate_key"]

#: length of a master key (AES-256)
KEY_BYTES = 32

_ID = re.compile(r"^[A-Za-z0-9._:@+-]{1,64}$")
ENV_KEYS = "STATEKEEPER_KEYS"
ENV_KEY_FILE = "STATEKEEPER_KEY_FILE"
ENV_ACTIVE = "STATEKEEPER_ACTIVE_KEY"


def generate_key() -> str:
    """A new random 32-byte key, base64-encoded (the form key files and env vars use)."""
    return base64.b64encode(os.urandom(KEY_BYTES)).decode("ascii")


def _shown(key_id: object) -> str:
    """How an error names a key id given in configuration: quoted, unless it may be a
    key itself — a key pasted where its id goes (``STATEKEEPER_KEYS=<base64>`` without
    ``k1=``, ``$STATEKEEPER_ACTIVE_KEY`` set to the key): an invalid id, or one of 40+
    characters, is described by its length only, never shown."""
    if isinstance(key_id, str) and _ID.match(key_id) and len(key_id) < 40:
        return repr(key_id)
    length = f"{len(key_id)} characters" if isinstance(key_id, str) else type(key_id).__name__
    return f"<{length}: not shown, it may be a key>"


def _check_id(key_id: object) -> str:
    if not isinstance(key_id, str) or not _ID.match(key_id):
        raise ConfigurationError(
            f"invalid key id {_shown(key_id)}: 1-64 characters from A-Z a-z 0-9 . _ : @ + -"
        )
    return key_id


def _material(key_id: str, value: object) -> bytes:
    """32 raw bytes from bytes or a base64 (standard or URL-safe) string."""
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            padded = text + "=" * (-len(text) % 4)
            raw = base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
        except (binascii.Error, ValueError):
            raise ConfigurationError(f"key {_shown(key_id)} is not valid base64") from None
    else:
        raise ConfigurationError(f"key {_shown(key_id)} must be bytes or a base64 string")
    if len(raw) != KEY_BYTES:
        raise ConfigurationError(f"key {_shown(key_id)} must be {KEY_BYTES} bytes, not {len(raw)}")
    return raw


def _wrap_aad(agent_id: str, family: str | None = None) -> bytes:
    if family is None:  # a legacy entry (keyed by agent id alone)
        return b"sk-data-key/1" + agent_id.encode("utf-8", "surrogatepass")
    name = (family, agent_id)
    return b"sk-data-key/2" + "\x00".join(name).encode("utf-8", "surrogatepass")


def _derive(master: bytes, purpose: bytes, length: int = 32) -> bytes:
    try:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise BackendUnavailable(
            "encryption needs the cryptography package: pip install cryptography"
        ) from exc

    return HKDF(
        algorithm=hashes.SHA256(), length=length, salt=None, info=b"statekeeper/v1 " + purpose
    ).derive(master)


def _forgettable(agent_id: str) -> None:
    """Refuse (:class:`~statekeeper.errors.InvalidAgentId`) to forget one of a store's
    own streams (an id starting with ``\\x01``: the audit log, the legal holds): the
    audit log is sealed with the data key of its id alone, the same id in every store,
    so destroying it made every audit log of the vault unreadable (``audit verify``:
    "agent '\\x01sk-audit/log' was forgotten"), not one store's."""
    if isinstance(agent_id, str) and agent_id[:1] == "\x01":
        from ..errors import InvalidAgentId

        raise InvalidAgentId(
            f"cannot forget {agent_id!r}: an id starting with '\\x01' is one of a store's"
            " own streams (its audit log, its legal holds), not an agent (the audit log's"
            " key is shared by every store of the key vault)"
        )


def fingerprint_of(master: bytes) -> bytes:
    """The 4-byte fingerprint records sealed with key material ``master`` carry
    (:attr:`DerivedKey.fingerprint`), without deriving its other subkeys."""
    return _derive(master, b"key fingerprint", 4)


def _aesgcm(key: bytes) -> Any:
    # imported on first use: ``import statekeeper`` does not load cryptography
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise BackendUnavailable(
            "encryption needs the cryptography package: pip install cryptography"
        ) from exc
    return AESGCM(key)


class DerivedKey:
    """The subkeys of one master key. Holds key material: its ``repr`` shows the id only."""

    __slots__ = ("_head", "_idempotency", "_witness", "_wrap", "aead", "fingerprint", "id")

    #: ``_head``: HMAC-SHA256 keyed with the stream-head subkey, never fed: each head
    #: tag copies it (the key's two padded blocks hashed once, not per tag: 2.8 against
    #: 4.4 us a tag, docs/benchmarks.md "restorecheck"); copying reads it only. Kept as
    #: OpenSSL's HMAC object itself where ``hmac`` has one (its ``copy``, ``update`` and
    #: ``digest`` in C, not through ``hmac.HMAC``'s Python methods: docs/benchmarks.md
    #: "restore2")

    def __init__(self, key_id: str, master: bytes) -> None:
        self.id = key_id
        self.aead = _aesgcm(_derive(master, b"record encryption"))
        head = hmac.new(_derive(master, b"stream head"), digestmod=hashlib.sha256)
        self._head: Any = getattr(head, "_hmac", None) or head
        self._witness = _derive(master, b"witness")
        self._idempotency = _derive(master, b"idempotency key")
        self.fingerprint = fingerprint_of(master)
        self._wrap = _aesgcm(_derive(master, b"data key wrapping"))

    def wrap(self, agent_id: str, data_key: bytes, family: str | None = None) -> bytes:
        """``data_key`` wrapped for ``agent_id`` (of key family ``family``; None: a
        legacy entry) (nonce + AES-256-GCM ciphertext)."""
        nonce = os.urandom(12)
        aad = _wrap_aad(agent_id, family)
        return nonce + bytes(self._wrap.encrypt(nonce, data_key, aad))

    def unwrap(self, agent_id: str, wrapped: bytes, family: str | None = None) -> bytes:
        """The data key :meth:`wrap` wrapped for ``agent_id`` (and ``family``); raises
        :class:`~statekeeper.errors.DecryptionError` when it does not authenticate."""
        from cryptography.exceptions import InvalidTag

        aad = _wrap_aad(agent_id, family)
        try:
            return bytes(self._wrap.decrypt(wrapped[:12], wrapped[12:], aad))
        except (InvalidTag, ValueError):
            raise DecryptionError(
                agent_id,
                None,
                self.id,
                f"the agent's data key does not unwrap with master key {self.id!r}"
                " (wrong key material, or a vault entry moved from another agent)",
            ) from None

    def __repr__(self) -> str:
        return f"DerivedKey(id={self.id!r}, material=<redacted>)"

    def head_mac(self, message: bytes) -> bytes:
        """HMAC-SHA256 of a stream head."""
        mac = self._head.copy()
        mac.update(message)
        digest: bytes = mac.digest()
        return digest

    def witness_mac(self, message: bytes) -> bytes:
        """HMAC-SHA256 of a witness entry."""
        return hmac.new(self._witness, message, hashlib.sha256).digest()

    def idempotency_mac(self, message: bytes) -> bytes:
        """HMAC-SHA256 of an idempotency key (what the backend stores instead of it)."""
        return hmac.new(self._idempotency, message, hashlib.sha256).digest()

    def label_mac(self, message: bytes) -> bytes:
        """HMAC-SHA256 of a value published in place of a secret one (a state name as a
        metric label), under a subkey of its own: HKDF of the witness subkey, so the
        published hashes reveal nothing of the other subkeys, and without the key a
        hash cannot be matched to the name it stands for."""
        key = _derive(self._witness, b"published label")
        return hmac.new(key, message, hashlib.sha256).digest()

    def __reduce__(self) -> Any:  # key material must not travel by pickle by accident
        raise TypeError("keys cannot be pickled")


class Keyring:
    """Named master keys, one of them active (used for new records).

    Args:
        keys: key id → 32 raw bytes or base64 text.
        active: the id new records are encrypted with (default: the only key, or the
            first one given).
        fetch: optional ``fetch(key_id) -> bytes`` for ids not in ``keys`` (a KMS or a
            secrets manager); called once per id, the result is cached.
    """

    def __init__(
        self,
        keys: Mapping[str, bytes | str] | None = None,
        *,
        active: str | None = None,
        fetch: Callable[[str], bytes | str] | None = None,
        data_keys: KeyVault | str | os.PathLike[str] | None = None,
    ) -> None:
        self._keys: dict[str, DerivedKey] = {}
        self.data_keys: KeyVault | None = open_vault(data_keys)
        self._data: dict[str, DerivedKey] = {}
        self._scoped_caches()
        self._fetch = fetch
        self._lock = threading.Lock()
        for key_id, value in (keys or {}).items():
            _check_id(key_id)
            self._keys[key_id] = DerivedKey(key_id, _material(key_id, value))
        if active is None:
            if not self._keys:
                raise ConfigurationError("a keyring needs an active key id")
            active = next(iter(self._keys))
        self.active_id = _check_id(active)
        if fetch is None and active not in self._keys:
            raise ConfigurationError(f"the active key {_shown(active)} is not in the keyring")
        self.active  # noqa: B018 - load (and check) the active key now, not on first write

    def __repr__(self) -> str:
        vault = f", data_keys={self.data_keys!r}" if self.data_keys is not None else ""
        return f"Keyring(active={self.active_id!r}, keys={sorted(self._keys)!r}{vault})"

    def __contains__(self, key_id: object) -> bool:
        return key_id in self._keys

    @property
    def ids(self) -> list[str]:
        """Ids of the keys loaded so far (a ``fetch`` keyring may know more)."""
        return sorted(self._keys)

    @property
    def active(self) -> DerivedKey:
        """The key new records are encrypted with."""
        key = self.get(self.active_id)
        if key is None:
            raise ConfigurationError(f"the active key {self.active_id!r} cannot be loaded")
        return key

    def get(self, key_id: str) -> DerivedKey | None:
        """The key named ``key_id``, or None when the keyring does not have it."""
        key = self._keys.get(key_id)
        if key is not None or self._fetch is None:
            return key
        if not _ID.match(key_id):
            return None
        with self._lock:
            key = self._keys.get(key_id)
            if key is None:
                try:
                    value = self._fetch(key_id)
                except (KeyError, LookupError):
                    return None
                if value is None:
                    return None
                key = DerivedKey(key_id, _material(key_id, value))
                self._keys[key_id] = key
        return key

    # -- per-agent data keys (crypto-shredding) ----------------------------------------

    def _scoped_caches(self) -> None:
        vault = self.data_keys
        #: the vault keys data keys by family (:mod:`.keyscope`)
        self.scoped: ScopedKeyVault | None = vault if isinstance(vault, ScopedKeyVault) else None
        #: (family, agent id) → the key that family's store writes the agent with
        self._writing: dict[tuple[str, str], DerivedKey] = {}
        #: (agent id, key fingerprint) → a data key that opened (reads)
        self._by_fp: dict[tuple[str, bytes], DerivedKey] = {}

    def data_key(
        self,
        agent_id: str,
        *,
        create: bool = False,
        family: str | None = None,
        fingerprint: bytes | None = None,
    ) -> DerivedKey:
        """The agent's data key (created, wrapped and stored in the vault when
        ``create`` and the agent has none yet).

        With a vault that keys by family (:mod:`.keyscope`): a write (``create``) of
        a store of key family ``family`` gets that family's key; a read names the
        record's key ``fingerprint`` and gets the key that sealed it. Without
        ``family`` (a codec of no store), the legacy key of the agent id alone.

        Raises :class:`~statekeeper.errors.AgentForgotten` when the key was destroyed,
        :class:`~statekeeper.errors.DecryptionError` when (without ``create``) the vault
        never held one for the agent, and
        :class:`~statekeeper.errors.ConfigurationError` when the keyring has no vault.
        """
        scoped = self.scoped
        if scoped is not None:
            if create and family is not None:
                key = self._writing.get((family, agent_id))
                if key is None:
                    key = keyscope.write_key(self, scoped, family, agent_id)
                    with self._lock:
                        self._writing[(family, agent_id)] = key
                        self._by_fp[(agent_id, key.fingerprint)] = key
                return key
            if fingerprint is not None and not create:
                key = self._by_fp.get((agent_id, fingerprint))
                if key is None:
                    key, opened = keyscope.read_key(self, scoped, agent_id, fingerprint)
                    with self._lock:
                        for one in opened:
                            self._by_fp[(agent_id, one.fingerprint)] = one
                return key
        key = self._data.get(agent_id)
        if key is not None:
            return key
        vault = self.data_keys
        if vault is None:
            raise ConfigurationError(
                "per-agent data keys need a key vault (Keyring(data_keys=...) or"
                ' "data_keys" in the key file)'
            )
        entry = vault.load(agent_id)
        if entry is None and create:
            master = self.active
            entry = vault.create(agent_id, master.id, master.wrap(agent_id, os.urandom(KEY_BYTES)))
        if entry is None:
            # no tombstone either: not a forgotten agent but a record that does not
            # belong here (moved from another agent) or a vault that did not write it
            raise keyscope.no_data_key(agent_id)
        if entry.wrapped is None or entry.master_id is None:
            raise AgentForgotten(agent_id, entry.forgotten_at)
        master_key = self.get(entry.master_id)
        if master_key is None:
            from ..errors import KeyNotFound

            raise KeyNotFound(agent_id, None, entry.master_id)
        key = DerivedKey(entry.master_id, master_key.unwrap(agent_id, entry.wrapped))
        with self._lock:
            self._data[agent_id] = key
        return key

    def rewrap(self, agent_id: str) -> bool:
        """Wrap the agent's data key under the active master key (key rotation: the
        old master key can then be retired). True when it was rewrapped; False when it
        already was, or the agent has no live key."""
        vault = self.data_keys
        if vault is None:
            return False
        if self.scoped is not None:
            return self._rewrap_families(self.scoped, agent_id)
        entry = vault.load(agent_id)
        if entry is None or entry.wrapped is None or entry.master_id is None:
            return False
        if entry.master_id == self.active_id:
            return False
        old = self.get(entry.master_id)
        if old is None:
            from ..errors import KeyNotFound

            raise KeyNotFound(agent_id, None, entry.master_id)
        material = old.unwrap(agent_id, entry.wrapped)
        master = self.active
        vault.rewrap(agent_id, master.id, master.wrap(agent_id, material))
        with self._lock:
            self._data[agent_id] = DerivedKey(master.id, material)
        return True

    def _rewrap_families(self, vault: ScopedKeyVault, agent_id: str) -> bool:
        """:meth:`rewrap` of every live entry of the agent (legacy or any family) that
        this keyring opens (another key file's entries are left as they are)."""
        done = False
        master = self.active
        for entry in vault.entries(agent_id):
            if entry.wrapped is None or entry.master_id in (None, self.active_id):
                continue
            old = self.get(entry.master_id) if entry.master_id is not None else None
            if old is None:
                continue
            try:
                material = old.unwrap(agent_id, entry.wrapped, entry.family)
            except DecryptionError:
                continue
            wrapped = master.wrap(agent_id, material, entry.family)
            if entry.family is None:
                vault.rewrap(agent_id, master.id, wrapped)
            else:
                vault.rewrap_in(entry.family, agent_id, master.id, wrapped)
            done = True
        with self._lock:
            self._data.pop(agent_id, None)
            self._forget_cached(agent_id)
        return done

    def rewrap_family(self, family: str | None) -> int:
        """:meth:`rewrap` of every live key of the store of key family ``family`` (and
        the families it continues), its agents listed or not
        (:func:`.keyscope.rewrap_family`): how many were wrapped again. 0 without a
        family or a vault without families."""
        scoped = self.scoped
        if family is None or scoped is None:
            return 0
        done = keyscope.rewrap_family(self, scoped, family)
        with self._lock:  # (a cached key names the master key it was wrapped under)
            for agent_id in done:
                self._data.pop(agent_id, None)
                self._forget_cached(agent_id)
        return len(done)

    def _forget_cached(self, agent_id: str) -> None:
        for pair in [p for p in self._writing if p[1] == agent_id]:
            del self._writing[pair]
        for held in [p for p in self._by_fp if p[0] == agent_id]:
            del self._by_fp[held]

    def forget_in(
        self,
        family: str | None,
        agent_id: str,
        *,
        fingerprints: frozenset[bytes] = frozenset(),
        at: float | None = None,
    ) -> list[str]:
        """:meth:`forget` as a store of key family ``family`` does it (see
        :mod:`.keyscope`): the keys of the agent (and its lineage) that family's store
        uses, those whose fingerprint is in ``fingerprints`` (its records'), and its
        legacy key. Returns the families (``"legacy"``) whose key was destroyed. Without
        a family, or a vault without families: :meth:`forget` (``["legacy"]`` when it
        destroyed a key)."""
        import time

        _forgettable(agent_id)
        scoped = self.scoped
        if family is None or scoped is None:
            return [keyscope.LEGACY] if self.forget(agent_id, at=at) else []
        when = time.time() if at is None else at
        lineage = getattr(scoped, "lineage", None)
        linked: set[str] = lineage(agent_id) if lineage is not None else set()
        ids = [*sorted(i for i in linked if i[:1] != "\x01"), agent_id]
        with self._lock:
            for one in ids:
                self._data.pop(one, None)
                self._forget_cached(one)
        return keyscope.family_forget(self, scoped, family, ids, fingerprints, when)

    def forget_scopes_in(
        self, family: str | None, agent_id: str, *, fingerprints: frozenset[bytes] = frozenset()
    ) -> list[str]:
        """The families (``"legacy"``) whose key of the agent :meth:`forget_in` would
        destroy now, destroying nothing (what a forget's audit entry, written before the
        keys go, names): the same refusal of a store's own stream, and the same lineage
        (never one of those: was followed here, the entry naming a "legacy" key the
        forget then left)."""
        _forgettable(agent_id)
        scoped = self.scoped
        if family is None or scoped is None:
            vault = self.data_keys
            entry = vault.load(agent_id) if vault is not None else None
            live = entry is not None and entry.wrapped is not None
            return [keyscope.LEGACY] if live else []
        lineage = getattr(scoped, "lineage", None)
        linked: set[str] = lineage(agent_id) if lineage is not None else set()
        ids = [*sorted(i for i in linked if i[:1] != "\x01"), agent_id]
        return keyscope.scopes_of(keyscope.forget_plan(self, scoped, family, ids, fingerprints))

    def adopt_in(
        self, family: str | None, copied: list[tuple[str, bytes]], *, legacy: bool = True
    ) -> list[str]:
        """Give the store of key family ``family`` the keys of the agents it holds a
        copy of (a restore's writes: :func:`.keyscope.adopt`); ``copied`` pairs an agent
        with its newest record's key fingerprint. The agents given a key; none without
        a family or a vault without families."""
        scoped = self.scoped
        if family is None or scoped is None or not copied:
            return []
        adopted = keyscope.adopt(self, scoped, family, copied, legacy=legacy)
        with self._lock:
            for agent_id in adopted:
                self._forget_cached(agent_id)
        return adopted

    def forgotten_in(
        self, family: str | None, agent_id: str, *, held: bool = False
    ) -> VaultEntry | None:
        """The tombstone that refuses ``agent_id`` in ``family``'s store (its own, a
        family it continues, or a legacy one), or None when it is not forgotten there.

        ``held``: that store holds records of the agent (it lists it, or exported it).
        When it has no key of the agent in its lineage (live or not) and no live legacy
        one, its records are a copy sealed with another store's key (a restore made
        before :func:`.keyscope.adopt`): then, when every key of the agent in the vault
        is destroyed, the newest tombstone (before, None: the copy counted as not
        forgotten although nothing opens it)."""
        vault = self.data_keys
        if vault is None:
            return None
        scoped = self.scoped
        if family is None or scoped is None:
            entry = vault.load(agent_id)
            return entry if entry is not None and entry.wrapped is None else None
        families = scoped.families(family)
        entries = scoped.entries(agent_id)
        for entry in entries:
            if entry.wrapped is None and (entry.family is None or entry.family in families):
                return entry
        if not held or any(e.wrapped is not None or e.family in families for e in entries):
            return None
        return max(entries, key=lambda e: e.forgotten_at or 0.0, default=None)

    def forget(self, agent_id: str, *, at: float | None = None) -> bool:
        """Destroy the agent's data key (crypto-shredding): every record encrypted
        with it becomes unreadable, everywhere, for good. True when a key was
        destroyed; False when the agent had none (a tombstone is stored anyway, so the
        id cannot be given a new key and its old records stay unreadable).

        The keys of the ids the vault links to ``agent_id`` (:meth:`link`: a
        LangGraph thread's generations) are destroyed too, the linked ones first.

        This is the agent's legacy key, keyed by its id alone: in a vault with key
        families its tombstone refuses the id in every store of the vault. A store's
        ``forget`` (:func:`statekeeper.governance.shredding.forget`) uses
        :meth:`forget_in`, which leaves other stores' keys of the id alone."""
        import time

        _forgettable(agent_id)
        vault = self.data_keys
        if vault is None:
            raise ConfigurationError("forget needs a keyring with a key vault (data_keys)")
        when = time.time() if at is None else at
        lineage = getattr(vault, "lineage", None)
        linked: set[str] = lineage(agent_id) if lineage is not None else set()
        linked = {one for one in linked if one[:1] != "\x01"}  # (never a store's own)
        with self._lock:
            for one in (*sorted(linked), agent_id):
                self._data.pop(one, None)
                self._forget_cached(one)
        for one in sorted(linked):
            vault.destroy(one, when)
        return vault.destroy(agent_id, when)

    def link(self, agent_id: str, predecessor: str) -> bool:
        """Record in the vault that ``agent_id`` continues ``predecessor``'s records
        (a new stream that replaces it), so :meth:`forget` of either destroys both
        keys. False when there is no vault, or it keeps no lineage."""
        link = getattr(self.data_keys, "link", None)
        if link is None:
            return False
        link(agent_id, predecessor)
        return True

    def continue_in(self, family: str | None, agent_id: str, predecessor: str) -> bool:
        """Give ``agent_id`` (a new id continuing ``predecessor``: :meth:`link`) the key
        the store of key family ``family`` writes ``predecessor`` with
        (:func:`.keyscope.continue_key`). False without a family or a vault without
        families, or when nothing was given."""
        scoped = self.scoped
        if family is None or scoped is None:
            return False
        given = keyscope.continue_key(self, scoped, family, agent_id, predecessor)
        if given:
            with self._lock:
                self._forget_cached(agent_id)
        return given

    def without(self, *key_ids: str) -> Keyring:
        """A keyring without the named keys (e.g. to check a retired key is unused)."""
        ring = object.__new__(Keyring)
        ring._keys = {k: v for k, v in self._keys.items() if k not in key_ids}
        ring._fetch = None
        ring._lock = threading.Lock()
        ring.data_keys = self.data_keys
        ring._data = {}
        ring._scoped_caches()
        ring.active_id = self.active_id
        if ring.active_id not in ring._keys:
            raise ConfigurationError(f"cannot remove the active key {self.active_id!r}")
        return ring

    # -- sources ---------------------------------------------------------------------

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *, active: str | None = None) -> Keyring:
        """Load ``{"active": "k2", "keys": {"k1": "<base64>", "k2": "<base64>"}}``.

        ``active`` overrides the file's choice.
        """
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(f"cannot read key file {os.fspath(path)}: {exc}") from exc
        except UnicodeDecodeError:  # (its message showed a byte of the file: of a raw key)
            raise ConfigurationError(f"key file {os.fspath(path)} is not text") from None
        try:
            doc = json.loads(text)
        except ValueError:
            raise ConfigurationError(f"key file {os.fspath(path)} is not JSON") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("keys"), dict) or not doc["keys"]:
            raise ConfigurationError(
                f'key file {os.fspath(path)} must hold {{"active": ID, "keys": {{ID: BASE64}}}}'
            )
        warn_if_open_to_others(path)
        chosen = active or doc.get("active")
        vault = doc.get("data_keys")
        if vault is not None and not isinstance(vault, str):
            raise ConfigurationError(
                f'key file {os.fspath(path)}: "data_keys" must be the path of a key vault'
            )
        try:
            return cls(
                doc["keys"],
                active=chosen if isinstance(chosen, str) else None,
                data_keys=Path(path).parent / vault if vault else None,
            )
        except ConfigurationError as exc:  # a bad key or id: which file says so
            raise ConfigurationError(f"key file {os.fspath(path)}: {exc}") from None

    @classmethod
    def from_env(
        cls,
        var: str = ENV_KEYS,
        *,
        active: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> Keyring:
        """Load ``id=<base64>`` pairs separated by commas or whitespace from ``$var``.

        The active key is ``active``, else ``$STATEKEEPER_ACTIVE_KEY``, else the first
        pair (so rotating means prepending the new key).
        """
        env = os.environ if environ is None else environ
        text = env.get(var, "").strip()
        if not text:
            raise ConfigurationError(f"${var} is not set")
        keys: dict[str, str] = {}
        for item in re.split(r"[,\s]+", text):
            if not item:
                continue
            key_id, sep, value = item.partition("=")
            if not sep:
                raise ConfigurationError(f"${var}: expected id=<base64> pairs")
            keys[_check_id(key_id)] = value
        return cls(keys, active=active or env.get(ENV_ACTIVE) or None)

    @classmethod
    def from_callable(
        cls, fetch: Callable[[str], bytes | str], *, active: str, preload: tuple[str, ...] = ()
    ) -> Keyring:
        """Keys fetched on demand by ``fetch(key_id)`` (a KMS, a vault): each id is
        fetched once and cached; ``fetch`` raises ``KeyError`` (or returns None) for an
        unknown id. ``preload`` fetches some ids up front."""
        ring = cls({}, active=active, fetch=fetch)
        for key_id in preload:
            ring.get(key_id)
        return ring

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Keyring | None:
        """The keyring the environment configures, or None: ``$STATEKEEPER_KEY_FILE``
        (a key file), else ``$STATEKEEPER_KEYS`` (inline pairs)."""
        env = os.environ if environ is None else environ
        path = env.get(ENV_KEY_FILE, "").strip()
        if path:
            return cls.from_file(path, active=env.get(ENV_ACTIVE) or None)
        if env.get(ENV_KEYS, "").strip():
            return cls.from_env(environ=env)
        return None

    @staticmethod
    def write_file(
        path: str | os.PathLike[str],
        keys: Mapping[str, str],
        active: str,
        data_keys: str | None = None,
    ) -> None:
        """Write a key file (mode 0600) holding base64 ``keys`` with ``active`` chosen
        (and ``data_keys``: the path of its key vault, relative to the file)."""
        for key_id, value in keys.items():
            _material(_check_id(key_id), value)
        if active not in keys:
            raise ConfigurationError(f"the active key {_shown(active)} is not among the keys")
        doc: dict[str, object] = {"active": active, "keys": dict(keys)}
        if data_keys is not None:
            doc["data_keys"] = data_keys
        data = json.dumps(doc, indent=2) + "\n"
        write_atomically(Path(path), data, mode=0o600)


def add_key_to_file(
    path: str | os.PathLike[str], *, key_id: str | None = None, activate: bool = True
) -> tuple[str, str]:
    """Add a new random key to the key file at ``path`` (created, mode 0600, when
    missing): ``(its id, the file's active key id)``. Its id is ``key_id``, else
    ``k<N+1>`` after the file's highest ``kN``; it becomes the active key when
    ``activate`` or the file had none. The file's other keys and its vault stay.

    Raises :class:`~statekeeper.errors.ConfigurationError` when the file is not a valid
    key file or already has a key ``key_id``. Read and written under
    :func:`~statekeeper._files.folder_locked`: two runs at once add two keys (the second
    reads what the first wrote), never one key written over the other's."""
    target = Path(path)
    with folder_locked(target):
        return _add_key(target, key_id, activate)


def _add_key(target: Path, key_id: str | None, activate: bool) -> tuple[str, str]:
    keys: dict[str, str] = {}
    active: str | None = None
    vault = None
    if target.exists():
        Keyring.from_file(target)  # must be a valid key file before it is extended
        doc = json.loads(target.read_text(encoding="utf-8"))
        keys, active, vault = dict(doc["keys"]), doc.get("active"), doc.get("data_keys")
    # after the highest kN of the file, never len+1: once older keys are retired, a
    # freed number is an id records, backups and witnesses still name for old material
    numbers = [int(k[1:]) for k in keys if k[:1] == "k" and k[1:].isascii() and k[1:].isdigit()]
    new_id = key_id or f"k{max(numbers, default=0) + 1}"
    if new_id in keys:
        raise ConfigurationError(f"{target} already has a key {new_id!r}")
    keys[new_id] = generate_key()
    if activate or active is None:
        active = new_id
    Keyring.write_file(target, keys, active, vault)  # the vault, if any, stays
    return new_id, active
