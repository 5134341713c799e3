"""Test support for storage engine authors: the backend contract as a conformance suite
(extra ``testing``: needs pytest and pytest-asyncio).

A third-party backend proves it keeps the contract by subclassing
:class:`BackendConformance` in its own test suite and returning fresh instances of
itself; every capability it declares (``Backend.capabilities``, ``supports_leases``,
``compares_head_tag``) is then exercised, and the tests of the ones it does not declare
are skipped. See "Writing a backend" in ``docs/backends.md``.
"""

from .conformance import (
    BackendConformance,
    event,
    fenced,
    request,
    snapshot,
    tagged,
    untagged_at,
)
from .feed import FeedConformance

__all__ = [
    "BackendConformance",
    "FeedConformance",
    "event",
    "fenced",
    "request",
    "snapshot",
    "tagged",
    "untagged_at",
]
