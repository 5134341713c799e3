"""``validate_together`` refuses changes with no append on an engine that declares
``appends_together`` but not ``changes_alone_together`` (CapabilityUnsupported, nothing
written). Before: they were passed on to its ``append_together`` — an engine whose
commit needs an append made them, or half of them, its own way, no error."""

from __future__ import annotations

import pytest

from statekeeper.backends import MemoryBackend
from statekeeper.errors import CapabilityUnsupported
from statekeeper.records import StreamChange
from statekeeper.testing import request


class _AppendsOnly(MemoryBackend):
    """A minimal engine: several streams' appends in one commit, never changes alone."""

    changes_alone_together = False


async def test_changes_alone_are_refused_without_changes_alone_together() -> None:
    engine = _AppendsOnly()
    await engine.append(request("a", 0, 2))
    with pytest.raises(CapabilityUnsupported, match="changes with no append"):
        await engine.append_together([], [StreamChange("a", delete_at=2)])
    assert await engine.head("a") == 2  # (nothing written)
    # with an append, the same change is taken
    await engine.append_together([request("b", 0)], [StreamChange("a", delete_at=2)])
    assert await engine.head("a") == 0
    assert await engine.head("b") == 1
