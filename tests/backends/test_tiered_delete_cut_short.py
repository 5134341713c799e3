"""A tiered delete cut short between its cold copy and its marker.

A delete removes a demoted agent's cold copy first, then the demotion's marker, then
the durable stream. A process killed between the first two steps leaves a marker whose
cold copy is gone: every read of the agent then raised an IntegrityError saying only
that the copy is missing (as if the cold tier had lost data), with nothing naming the
delete left half done nor that deleting the agent again finishes it. The error now says
so, and deleting again leaves nothing behind in any tier.
"""

from __future__ import annotations

import pytest

from statekeeper.backends import MemoryBackend
from statekeeper.backends.tiered import COLD_MARKER, TieredBackend
from statekeeper.errors import IntegrityError
from statekeeper.testing import request


class _Killed(BaseException):
    """The process killed (nothing after it runs)."""


class _KilledAtMarker(MemoryBackend):
    """A durable tier whose process dies when the delete reaches the marker."""

    armed = False

    async def delete_agent(self, agent_id: str) -> bool:
        if self.armed and agent_id.startswith(COLD_MARKER):
            raise _Killed
        return await super().delete_agent(agent_id)


async def test_a_delete_cut_short_after_the_cold_copy_says_so_and_finishes() -> None:
    durable, cold = _KilledAtMarker(), MemoryBackend()
    tiered = TieredBackend(durable, cold=cold, idle_after=1)
    await tiered.append(request("user-1", 0, 2))
    assert await tiered.demote("user-1")
    durable.armed = True
    with pytest.raises(_Killed):
        await tiered.delete_agent("user-1")
    durable.armed = False
    assert await cold.head("user-1") == 0  # the cold copy went first

    again = TieredBackend(durable, cold=cold, idle_after=1)  # the next process
    with pytest.raises(IntegrityError) as caught:
        await again.read("user-1", 0, None)
    assert "cold copy of a demoted agent is missing" in str(caught.value)
    assert "deleting it again finishes the delete" in str(caught.value)

    await again.delete_agent("user-1")  # finishes
    assert await again.head("user-1") == 0
    assert await again.read("user-1", 0, None) == []
    assert await durable.head(COLD_MARKER + "user-1") == 0
    assert await durable.head("user-1") == 0
