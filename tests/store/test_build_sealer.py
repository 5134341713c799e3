"""``WritePipeline.build`` (every write the flat save and ``save_fast`` do not make: a new
agent's first save, an append, a save with options) seals a plain store's events with
the codec's plain sealer bound once, as ``save_fast`` does, not through ``Codec.seal``:
the same bytes (the chain verifies, a reader opens them), without ``seal``'s checks of
its arguments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.codec.pipeline import BLAKE3_FROM, Codec


async def test_a_plain_store_seals_general_writes_without_codec_seal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sealed = [0]
    general = Codec.seal

    def counted(self: Codec, *args: Any, **kwargs: Any) -> Any:
        sealed[0] += 1
        return general(self, *args, **kwargs)

    monkeypatch.setattr(Codec, "seal", counted)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    async with StateStore(url, snapshot_every=1000) as store:
        await store.save("new", {"n": 1, "messages": ["hello"]})  # a first save
        await store.save("new", {"n": 2, "messages": ["hello"]}, fsm_state="busy")
        await store.append("new", "noted", {"why": "a custom type"})
        assert sealed[0] == 0
        # a body of BLAKE3_FROM bytes or more is sealed by Codec.seal (BLAKE3 under
        # checksum="auto")
        await store.save("large", {"blob": "x" * BLAKE3_FROM})
        assert sealed[0] == 1
        assert (await store.verify()).ok
    async with StateStore(url) as reader:
        assert (await reader.load("new")).data == {"n": 2, "messages": ["hello"]}
        assert [e.type async for e in reader.history("new")][-1] == "noted"
        assert (await reader.load("large")).data == {"blob": "x" * BLAKE3_FROM}
