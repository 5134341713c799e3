"""Deeply nested states on the msgpack format (trialtime): a state 255–500 levels deep
was stored and every save of it acknowledged, but every load failed with
``TypeError: Recursion limit reached`` (the caller's copy was made through JSON bytes,
which orjson stops at 254 levels); one deeper than the diff can walk raised a bare
``RecursionError`` from ``store.save``. Loads now copy such a state object by object,
and the save is a :class:`SerializationError`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.codec.depth import MAX_DEPTH
from statekeeper.errors import SerializationError


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("engine", ["memory", "sqlite"])
async def test_a_deep_state_is_loaded_as_stored(tmp_path: Path, engine: str) -> None:
    """As deep as a document may nest (:data:`MAX_DEPTH`, h/trialdata's cap shared by
    every format): stored, and loaded as stored at the head, back in time and cold."""
    url = "memory://" if engine == "memory" else f"sqlite:///{tmp_path / 'deep.db'}"
    deep = _nested(MAX_DEPTH - 2)  # (MAX_DEPTH - 1 lists, in the top-level dict)
    async with StateStore(url, format="msgpack") as store:
        await store.save("a", {"v": deep})
        await store.save("a", {"v": deep, "w": 1})
        assert (await store.load("a")).data == {"v": deep, "w": 1}
        assert (await store.load("a", at_seq=1)).data == {"v": deep}
        if engine == "sqlite":
            async with StateStore(url, format="msgpack") as cold:
                assert (await cold.load("a")).data == {"v": deep, "w": 1}


async def test_a_state_stored_deeper_before_the_cap_still_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A msgpack store written by a version before the cap (h/trialtime's e09618b9 and
    h/trialdata's 3318292d) may hold a state deeper than JSON's bytes can copy: it is
    still loaded as stored, cached and again, rather than failing every load with
    ``TypeError: Recursion limit reached`` (the object-by-object copy of
    ``store.copies``)."""
    import statekeeper.store.flat as flat
    import statekeeper.store.lean as lean
    import statekeeper.store.write_build as write_build
    import statekeeper.store.write_fast as write_fast

    url = f"sqlite:///{tmp_path / 'old.db'}"
    deep = _nested(300)
    with monkeypatch.context() as old_writer:  # (a writer without the depth check)
        old_writer.setattr(write_build, "check_ops_depth", lambda *a, **k: None)
        old_writer.setattr(write_fast, "check_ops_depth", lambda *a, **k: None)
        old_writer.setattr(lean, "too_deep", lambda ops: None)
        old_writer.setattr(flat, "too_deep", lambda ops: None)
        async with StateStore(url, format="msgpack") as store:
            await store.save("a", {"v": deep})
            await store.save("a", {"v": deep, "w": 1})
    async with StateStore(url, format="msgpack") as store:
        assert (await store.load("a")).data == {"v": deep, "w": 1}
        assert (await store.load("a")).data == {"v": deep, "w": 1}  # (from the cache)


@pytest.mark.parametrize("depth", [MAX_DEPTH, 300, 600, 5000])
async def test_a_state_deeper_than_stored_states_may_nest_is_a_typed_error(depth: int) -> None:
    """Deeper than JSON's encoders read back (was: stored and acknowledged, then every
    load failed) or than the diff can walk (was: a bare ``RecursionError``): refused at
    the save with :class:`SerializationError`, nothing written."""
    async with StateStore("memory://", format="msgpack") as store:
        await store.save("a", {"w": 0})
        with pytest.raises(SerializationError, match="nest deeper"):
            await store.save("a", {"v": _nested(depth), "w": 1})
        assert await store.head("a") == 1
        assert (await store.load("a")).data == {"w": 0}
