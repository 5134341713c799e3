"""BLAKE3 of a record's link input at the SIMD unit's full width (the C module
``statekeeper.codec._widehash``, built from ``native/widehash.c`` on x86-64 when the
package is installed), used where it was built; else the ``blake3`` package, as before.
``STATEKEEPER_PURE=1`` in the environment (read at import) forces the package.

Why: the ``blake3`` package's hasher splits an input into power-of-two subtrees and
hashes each with a narrower SIMD path the smaller it is: a 100-message snapshot's
32.6 KB link input (31.9 chunks) costs 10.6 us of CPU there, 6.3 us here, where every
whole chunk is hashed in full-width rounds and nothing is joined (the head and the
stored bytes are read in place); the digest is the same for every input
(docs/benchmarks.md, "cold4"; ``tests/codec/test_widehash.py`` holds the two to the
same bytes).
"""

from __future__ import annotations

import os
from collections.abc import Callable

__all__ = ["NATIVE", "wide_blake3"]


def _built() -> Callable[[bytes, bytes], bytes] | None:
    if os.environ.get("STATEKEEPER_PURE", "") not in ("", "0"):
        return None
    try:
        from . import _widehash
    except ImportError:  # installed without a compiler, or not on x86-64: the package
        return None
    return _widehash.hash


#: ``wide_blake3(head, body) -> bytes``: ``blake3.blake3(head + body).digest()`` without
#: the join, at full SIMD width; None where the C module is not built (or
#: ``STATEKEEPER_PURE`` is set): the caller hashes with the ``blake3`` package
wide_blake3: Callable[[bytes, bytes], bytes] | None = _built()
#: whether :data:`wide_blake3` is the C hash
NATIVE = wide_blake3 is not None
