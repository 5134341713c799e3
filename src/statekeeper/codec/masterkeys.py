"""The master keys of a keyring by id, one of them active, fetched on demand from a
callable when it has one: the base of :class:`~statekeeper.codec.keys.Keyring`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping

from ..errors import ConfigurationError
from . import subkeys
from .datakeys import KeyVault, ScopedKeyVault, open_vault
from .subkeys import (
    DerivedKey,
    _check_id,
    _material,
    _shown,
)

# bound by assignment, not imported by name: CPython 3.11 compiles a method call on a
# name imported from a module (``_ID.match(...)``) without LOAD_METHOD; assigned, the
# bytecode is the one of the unsplit keys.py
_ID = subkeys._ID


class MasterKeys:
    """Named master keys, one of them active; :class:`~statekeeper.codec.keys.Keyring`
    documents its arguments."""

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

    def _scoped_caches(self) -> None:
        vault = self.data_keys
        #: the vault keys data keys by family (:mod:`.keyscope`)
        self.scoped: ScopedKeyVault | None = vault if isinstance(vault, ScopedKeyVault) else None
        #: (family, agent id) → the key that family's store writes the agent with
        self._writing: dict[tuple[str, str], DerivedKey] = {}
        #: (agent id, key fingerprint) → a data key that opened (reads)
        self._by_fp: dict[tuple[str, bytes], DerivedKey] = {}
