"""The backend contract, part: renaming idempotency records (``Backend.rename_keys``,
what ``rekey`` re-records them with). Run through
:class:`~statekeeper.testing.BackendConformance`."""

from __future__ import annotations

from statekeeper.backends.base import Backend, Capability
from statekeeper.records import AppendResult

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
