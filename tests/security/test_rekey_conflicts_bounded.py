"""A rekey whose final rewrite conflicts every time (an S3 stream held by a dead
rewrite's claim until ``rewrite_claim_timeout``, a stream under constant writes) gives
up after a bounded number of tries, backing off between them, with a
:class:`ConflictError` naming the agent: before, its final commit loop retried at once
and for ever."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import ConflictError
from statekeeper.records import RewriteRequest
from statekeeper.security import Keyring, generate_key, key_usage, rekey_agent

K1, K2 = generate_key(), generate_key()
OLD = Keyring({"k1": K1})
BOTH = Keyring({"k2": K2, "k1": K1}, active="k2")
#: the module (``statekeeper.security.rekey`` the package attribute is the function)
REKEY = importlib.import_module("statekeeper.security.rekey")


class _Unbounded(Exception):
    """Raised by the hook once the rekey tried far more often than any bound allows."""


async def test_a_rekey_refused_on_every_rewrite_gives_up_with_conflict_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    async with StateStore(url, keyring=OLD) as store:
        for i in range(5):
            await store.save("agent-1", {"n": i})
    async with StateStore(url, keyring=BOTH) as store:
        head = await store.backend.head("agent-1")
        tries: list[RewriteRequest] = []

        async def refused(request: RewriteRequest) -> None:
            tries.append(request)
            if len(tries) > 5_000:  # (the loop has no bound)
                raise _Unbounded
            raise ConflictError(request.agent_id, request.expected_seq, request.expected_seq)

        waits: list[int] = []

        async def backoff(attempt: int) -> None:  # (counted, not slept: no timing)
            waits.append(attempt)

        monkeypatch.setattr(store.backend, "rewrite", refused)
        monkeypatch.setattr(REKEY, "_backoff", backoff)
        with pytest.raises(ConflictError) as info:
            await rekey_agent(store, "agent-1")
        assert info.value.agent_id == "agent-1" and "'agent-1'" in str(info.value)
        assert 1 < len(tries) <= 200  # bounded as the flush loop's tries are
        assert all(t.agent_id == "agent-1" and t.expected_seq == head for t in tries)
        assert waits == list(range(len(tries)))  # a pause after each refusal, growing
        assert await key_usage(store) == {"k1": 6}  # nothing written: all under k1
