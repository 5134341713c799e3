"""A rekey giving up on a stream another rewrite's claim holds (S3: a rekey's rewrite
taken over respects its taker's claim until it is gone or ``rewrite_claim_timeout``
old) says so: the last refusal, ``StreamClaimed`` (the claim's age, the bound), not a
ConflictError of its own saying the head record "was rewritten since this process read
it". Both of its loops: a batch's (``batch=1``) and the stream's final rewrite."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import StreamClaimed
from statekeeper.records import RewriteRequest
from statekeeper.security import Keyring, generate_key, key_usage, rekey_agent

K1, K2 = generate_key(), generate_key()
OLD = Keyring({"k1": K1})
BOTH = Keyring({"k2": K2, "k1": K1}, active="k2")
REKEY = importlib.import_module("statekeeper.security.rekey")


@pytest.mark.parametrize("batch", [1, 500])
async def test_a_rekey_held_off_by_a_claim_gives_up_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: int
) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    async with StateStore(url, keyring=OLD) as store:
        for i in range(5):
            await store.save("agent-1", {"n": i})
    async with StateStore(url, keyring=BOTH) as store:

        async def claimed(request: RewriteRequest) -> None:
            seq = request.expected_seq
            raise StreamClaimed(request.agent_id, seq, seq, 12.0, 600.0)

        async def backoff(attempt: int) -> None:  # (not slept: no timing)
            pass

        monkeypatch.setattr(store.backend, "rewrite", claimed)
        monkeypatch.setattr(REKEY, "_backoff", backoff)
        with pytest.raises(StreamClaimed) as info:
            await rekey_agent(store, "agent-1", batch=batch)
        assert (info.value.agent_id, info.value.claim_age, info.value.timeout) == (
            "agent-1",
            12.0,
            600.0,
        )
        assert "claimed by a rewrite" in str(info.value)
        assert await key_usage(store) == {"k1": 6}  # nothing written
