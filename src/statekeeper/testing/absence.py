"""The backend contract, part: an absence check in an ``append_together`` commit
(``StreamChange(agent_id, absent=True)``, declared by ``checks_absence_together``;
what ``statekeeper import`` and a tenant admin's restore append their feed tombstones
with). Run through :class:`~statekeeper.testing.BackendConformance`."""

from __future__ import annotations

import pytest

from statekeeper.backends.base import Backend
from statekeeper.errors import CapabilityUnsupported, ConfigurationError, ConflictError
from statekeeper.records import StreamChange

from ._contract import Contract, request

__all__ = ["AbsenceConformance"]


class AbsenceConformance(Contract):
    """Conformance tests: a commit made only while a named stream has no events."""

    async def test_append_together_checks_absence_in_its_commit(self, backend: Backend) -> None:
        """An engine declaring ``checks_absence_together`` makes an ``append_together``
        with ``StreamChange(x, absent=True)`` only while ``x`` has no events: an ``x``
        with events raises ConflictError naming ``x`` (expected 0, its head) and
        nothing of the commit is written; an ``x`` never written, or deleted since,
        passes and is left as it is. A malformed check (with a delete, a snapshot or a
        prune) is refused. An engine without the declaration refuses the check with
        CapabilityUnsupported, nothing written (ignoring it would append an import's
        tombstones after the events of an agent another process just created)."""
        if not backend.appends_together:
            pytest.skip(f"{type(backend).__qualname__} has no append_together")
        check = StreamChange("x", absent=True)
        if not backend.checks_absence_together:
            with pytest.raises(CapabilityUnsupported):
                await backend.append_together([request("other", 0)], [check])
            assert await backend.head("other") == 0
            return
        with pytest.raises(ConfigurationError):
            bad = StreamChange("x", absent=True, delete_at=1)
            await backend.append_together([request("other", 0)], [bad])
        await backend.append(request("x", 0, 2))
        with pytest.raises(ConflictError) as caught:
            await backend.append_together(
                [request("other", 0)], [StreamChange("y", absent=True), check]
            )
        assert (caught.value.agent_id, caught.value.expected_seq) == ("x", 0)
        assert caught.value.current_seq == 2
        assert await backend.head("other") == 0  # nothing of the commit written
        assert [e.seq for e in await backend.read("x")] == [1, 2]
        await backend.append_together([request("other", 0)], [StreamChange("y", absent=True)])
        assert await backend.head("other") == 1
        assert await backend.head("y") == 0  # (a check writes nothing of its stream)
        assert await backend.delete_agent("x") is True
        await backend.append_together([request("other", 1)], [check])
        assert await backend.head("other") == 2
        assert await backend.head("x") == 0
        await backend.append(request("x", 0))  # (and the agent can be created after)
        assert await backend.head("x") == 1
