"""An infinite number of seconds is refused where it made a wrong or invalid answer:
``analyze --window inf`` printed one window starting at ``NaN`` (its ``--json`` was
not JSON), ``--rto inf`` printed ``"objective_seconds": Infinity`` (not JSON either),
``--mtbf inf`` an interval for infinitely many events, ``health --growth-window inf``
growth rates of 0 — all with exit code 0. ``inf`` passed every option's ``min``."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import InvalidArgument
from statekeeper.observability.analysis.history import entropy_windows

from ..cli._proc import sk_in_process


async def _fill(store: StateStore) -> None:
    await store.create("a", {}, fsm_state="idle")
    await store.save("a", {"n": 1}, fsm_state="busy")


@pytest.mark.parametrize(
    "args",
    [
        ("analyze", "--window", "inf"),
        ("analyze", "--rto", "inf"),
        ("analyze", "--mtbf", "inf"),
        ("health", "--growth-window", "inf"),
    ],
)
async def test_an_infinite_number_of_seconds_is_refused(
    args: tuple[str, ...], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    async with StateStore(url) as store:
        await _fill(store)
    done = sk_in_process(*args, "--db", url, "--json")
    assert done.returncode == 2, done.stdout
    assert done.stdout == ""
    assert f"'{args[1]}': inf is not a finite number" in done.stderr


async def test_entropy_windows_refuse_an_infinite_window() -> None:
    async with StateStore("memory://") as store:
        await _fill(store)
        with pytest.raises(InvalidArgument, match="positive number of seconds"):
            await entropy_windows(store, math.inf)
        assert [w.moves for w in await entropy_windows(store, 60.0)] == [1]
