"""Deprecated location of the keyring: it moved to :mod:`statekeeper.codec.keys`, next
to the codec that uses it. ``from statekeeper.security import Keyring`` stays the
documented spelling; importing from ``statekeeper.security.keys`` still works and
warns (:class:`DeprecationWarning`)."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..codec.keys import KEY_BYTES, DerivedKey, Keyring, generate_key

__all__ = ["KEY_BYTES", "DerivedKey", "Keyring", "generate_key"]


def __getattr__(name: str) -> Any:
    from ..codec import keys

    if name.startswith("__"):
        raise AttributeError(name)
    value = getattr(keys, name)  # AttributeError for a name that never existed
    warnings.warn(
        f"statekeeper.security.keys.{name} moved to statekeeper.codec.keys.{name}",
        DeprecationWarning,
        stacklevel=2,
    )
    return value
