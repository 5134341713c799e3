"""The backend contract, part: renaming idempotency records (``Backend.rename_keys``,
what ``rekey`` re-records them with). Run through
:class:`~statekeeper.testing.BackendConformance`."""

from __future__ import annotations

import pytest

from statekeeper.backends.base import Backend, Capability
from statekeeper.errors import CapabilityUnsupported, ConfigurationError, ConflictError
from statekeeper.records import AppendResult, RewriteRequest, StreamChange

from ._contract import Contract, _needs, request

__all__ = ["KeyRenameConformance"]


class KeyRenameConformance(Contract):
    """Conformance tests: ``rename_keys``."""

    async def test_rename_keys_stores_each_record_under_its_new_form(
        self, backend: Backend
    ) -> None:
        """A renamed record answers to its new form only, with its range; a record not
        named, another agent's, and one not stored are untouched; a rerun renames
        nothing; a new form stored already only drops the old one."""
        _needs(backend, Capability.KEY_RENAME)
        await backend.append(request("a", 0, 2, key="k1"))
        await backend.append(request("a", 2, key="k2"))
        await backend.append(request("a", 3, key="k3"))  # (the newest commit's key: S3)
        await backend.append(request("b", 0, key="k1"))
        renames = [("k1", "n1"), ("k3", "n3"), ("absent", "n9")]
        assert await backend.rename_keys("a", renames) == 2
        assert await backend.lookup_key("a", "k1") is None
        assert await backend.lookup_key("a", "k3") is None
        assert await backend.lookup_key("a", "n9") is None
        assert await backend.lookup_key("a", "n1") == AppendResult("a", 1, 2, True)
        assert await backend.lookup_key("a", "n3") == AppendResult("a", 4, 4, True)
        assert await backend.lookup_key("a", "k2") == AppendResult("a", 3, 3, True)
        assert await backend.lookup_key("b", "k1") == AppendResult("b", 1, 1, True)
        if backend.supports(Capability.KEY_EXPORT):
            assert await backend.idempotency_keys("a") == [("n1", 1, 2), ("k2", 3, 3), ("n3", 4, 4)]
        # an append under the new form is a retry; under the old one, a new append
        assert await backend.append(request("a", 3, key="n3")) == AppendResult("a", 4, 4, True)
        assert await backend.rename_keys("a", renames) == 0  # a rerun: nothing left
        assert await backend.rename_keys("ghost", renames) == 0
        # the new form stored already (a rename a crash interrupted): the old one goes
        assert await backend.rename_keys("a", [("k2", "n1")]) == 0
        assert await backend.lookup_key("a", "k2") is None
        assert await backend.lookup_key("a", "n1") == AppendResult("a", 1, 2, True)
        assert await backend.append(request("a", 4, key="k3")) == AppendResult("a", 5, 5)
        assert [e.seq for e in await backend.read("a")] == [1, 2, 3, 4, 5]

    async def test_rename_keys_with_a_guard_checks_another_stream_in_its_step(
        self, backend: Backend
    ) -> None:
        """``guard`` (``guards_renames``): the rename is made only while the guard's
        stream is absent, or its head still the one named (its new tag stored with
        the rename); else ConflictError naming that stream and nothing renamed. An
        engine without it refuses a guard (CapabilityUnsupported, nothing renamed)."""
        _needs(backend, Capability.KEY_RENAME)
        await backend.append(request("a", 0, key="k1"))
        absent = StreamChange("m", absent=True)
        if not backend.guards_renames:
            with pytest.raises(CapabilityUnsupported):
                await backend.rename_keys("a", [("k1", "n1")], guard=absent)
            assert await backend.lookup_key("a", "k1") == AppendResult("a", 1, 1, True)
            return
        assert await backend.rename_keys("a", [("k1", "n1")], guard=absent) == 1
        await backend.append(request("m", 0))
        with pytest.raises(ConflictError) as refused:  # (m is there now)
            await backend.rename_keys("a", [("n1", "n2")], guard=absent)
        assert refused.value.agent_id == "m"
        head, tag = await backend.head_tag("m")
        stale = StreamChange("m", rewrite=RewriteRequest("m", head + 1, tag))
        with pytest.raises(ConflictError):
            await backend.rename_keys("a", [("n1", "n2")], guard=stale)
        assert await backend.lookup_key("a", "n1") == AppendResult("a", 1, 1, True)
        fence = RewriteRequest("m", head, tag, head_tag=b"t" * 16)
        guard = StreamChange("m", rewrite=fence)
        assert await backend.rename_keys("a", [("n1", "n2")], guard=guard) == 1
        assert await backend.lookup_key("a", "n2") == AppendResult("a", 1, 1, True)
        assert await backend.head_tag("m") == (head, b"t" * 16)
        with pytest.raises(ConfigurationError):  # (a check of its own stream)
            await backend.rename_keys("a", [], guard=StreamChange("a", absent=True))
