"""Encoding of stored records: serialization, compression, encryption, verification.

See :mod:`statekeeper.codec.pipeline` for the record layout and the chain, and
:mod:`statekeeper.codec.types` for the typed values a document may hold, and
:mod:`statekeeper.codec.keys` for the keyring that encrypts records.
"""

from .formats import Format
from .keys import Keyring
from .pipeline import VERSION, ZERO_LINK, Codec, Header, Opened, Sealed
from .serializer import dumps, find_unserializable, loads
from .types import TAG, TypeRegistry

__all__ = [
    "TAG",
    "VERSION",
    "ZERO_LINK",
    "Codec",
    "Format",
    "Header",
    "Keyring",
    "Opened",
    "Sealed",
    "TypeRegistry",
    "dumps",
    "find_unserializable",
    "loads",
]
