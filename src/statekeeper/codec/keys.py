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

Its parts: master keys and their subkeys (``subkeys.py``: :class:`DerivedKey`), the
keyring's master keys by id (``masterkeys.py``), its vault's per-agent data keys
(``vaultkeys.py``; their family rules in :mod:`.keyscope`); this module assembles
:class:`Keyring` with its sources (a key file, the environment, a callable) and
edits key files.

>>> ring = Keyring({"k1": bytes(32)}, active="k1")
>>> ring
Keyring(active='k1', keys=['k1'])
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from .._files import folder_locked, warn_if_open_to_others, write_atomically
from ..errors import ConfigurationError

# every name this module held before it was split (issue 11), from where it lives now
from .subkeys import _ID as _ID
from .subkeys import KEY_BYTES as KEY_BYTES
from .subkeys import DerivedKey as DerivedKey
from .subkeys import _aesgcm as _aesgcm
from .subkeys import _check_id as _check_id
from .subkeys import _derive as _derive
from .subkeys import _forgettable as _forgettable
from .subkeys import _material as _material
from .subkeys import _shown as _shown
from .subkeys import _wrap_aad as _wrap_aad
from .subkeys import fingerprint_of as fingerprint_of
from .subkeys import generate_key as generate_key
from .vaultkeys import VaultKeys

__all__ = ["KEY_BYTES", "DerivedKey", "Keyring", "add_key_to_file", "generate_key"]

ENV_KEYS = "STATEKEEPER_KEYS"
ENV_KEY_FILE = "STATEKEEPER_KEY_FILE"
ENV_ACTIVE = "STATEKEEPER_ACTIVE_KEY"


class Keyring(VaultKeys):
    """Named master keys, one of them active (used for new records).

    Args:
        keys: key id → 32 raw bytes or base64 text.
        active: the id new records are encrypted with (default: the only key, or the
            first one given).
        fetch: optional ``fetch(key_id) -> bytes`` for ids not in ``keys`` (a KMS or a
            secrets manager); called once per id, the result is cached.
    """

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
