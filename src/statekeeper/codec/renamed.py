"""The deprecated keyword names of :meth:`Codec.seal` and :meth:`Codec.open`
(``kind``, ``ts``: ARCHITECTURE.md, "Vocabulary").
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing_extensions import deprecated as deprecated
else:  # only the overloads of the deprecated keywords use it: nothing to do at run time

    def deprecated(message):
        return lambda fn: fn


def _renamed_keywords(
    method: str,
    record_type: str | None,
    timestamp: float | None,
    kind: str | None,
    ts: float | None,
) -> tuple[str, float]:
    """``record_type`` and ``timestamp`` of a call to :meth:`Codec.seal` or
    :meth:`Codec.open` that used their old names ``kind`` and ``ts`` (a warning each;
    ARCHITECTURE.md, "Vocabulary"), or a :class:`TypeError` naming what is missing."""
    for old, new, value, given in (
        ("kind", "record_type", kind, record_type),
        ("ts", "timestamp", ts, timestamp),
    ):
        if value is not None:
            if given is not None:
                raise TypeError(f"Codec.{method}() got {new} and its deprecated name {old}")
            warnings.warn(
                f"Codec.{method}({old}=...) is deprecated: use Codec.{method}({new}=...)",
                DeprecationWarning,
                stacklevel=3,
            )
    record_type = kind if record_type is None else record_type
    timestamp = ts if timestamp is None else timestamp
    if record_type is None or timestamp is None:
        missing = [
            n for n, v in (("record_type", record_type), ("timestamp", timestamp)) if v is None
        ]
        raise TypeError(f"Codec.{method}() missing required arguments: {missing}")
    return record_type, timestamp
