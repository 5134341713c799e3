"""Encoding of stored records: serialization and verification."""

from .pipeline import Codec
from .serializer import dumps, find_unserializable, loads

__all__ = ["Codec", "dumps", "find_unserializable", "loads"]
