"""A state reloaded through a tail snapshot keeps the whole-snapshot cadence.

Under ``snapshot_every="bounded"`` the next whole snapshot is due once the replay since
the latest whole one weighs as much as that snapshot's stored bytes plus a fixed
allowance; the tail snapshots between (:mod:`statekeeper.store.tails`) keep that rule's
seq, bytes and replay. A record folded the general way from a tail
(``ReadPath.decode_snapshot``: an engine without the inline read of a tail's chain, an
observed or wrapped one) took the tail's own stored bytes as the whole one's, and was
marked as possibly holding typed values (as a delta of the codec's is): its next whole
snapshot came at another seq (here at 109, 178 and 257 instead of 116, 186 and 266:
the cadence, and so the replay bound, moved by the size of a tail), and no tail nor
packed snapshot was written for it again. The thin path (``tails.tail_data``) kept both.

Each run saves the same growing chat; the "dropped" ones close the store after one
save (its cache gone) and go on in a new one, which reloads the agent through the tail
at or below that seq. The whole snapshots must land at the same seqs as in a run that
never dropped its cache, and the tails after them too. (The general fold keeps no base
for tails: none is written between the reload and the next whole snapshot; left so.)
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.store.tails import TAIL_EVERY

MSGS = [{"role": "user", "text": f"message {i} " * 60} for i in range(300)]
SAVES = 280


def _doc(n: int) -> dict[str, Any]:
    return {"task": "chat", "messages": MSGS[:n]}


async def _chat(path: Path, drop_after: int | None) -> None:
    url = f"sqlite:///{path}?synchronous=OFF"
    options: Any = {"witness": False, "snapshot_every": "bounded"}
    store = StateStore(url, **options)
    try:
        for n in range(1, SAVES + 1):
            await store.save("a", _doc(n))
            if n == drop_after:
                await store.close()
                store = StateStore(url, **options)
    finally:
        await store.close()
    async with StateStore(url, **options) as check:  # (every save stored)
        assert (await check.load("a")).data == _doc(SAVES)


def _snapshots(path: Path) -> tuple[list[int], list[int]]:
    """The seqs of the whole snapshots and of the tails (a tail's body has ``ops``)."""
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute("SELECT seq, payload FROM sk_snapshots ORDER BY seq").fetchall()
    tails = [seq for seq, payload in rows if b"\xa3ops" in bytes(payload)]
    return [seq for seq, _ in rows if seq not in tails], tails


@pytest.mark.parametrize("path", ["general", "thin"])
async def test_whole_snapshots_come_at_the_same_seqs_after_a_reload_through_a_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    await _chat(tmp_path / "kept.db", None)
    wholes, tails = _snapshots(tmp_path / "kept.db")
    assert len(wholes) >= 3 and len(tails) >= 10  # (the run makes both kinds)
    if path == "general":  # no inline read of a tail's chain: decode_snapshot's fold
        monkeypatch.setattr("statekeeper.store.reads._inline_base", lambda *a: None)
    # reloaded right at a tail, a few events past one, and past a later one
    for drop in (tails[0], tails[0] + 3, tails[TAIL_EVERY // 2]):
        await _chat(tmp_path / f"dropped{drop}.db", drop)
        got_wholes, got_tails = _snapshots(tmp_path / f"dropped{drop}.db")
        assert got_wholes == wholes, drop
        # the tails as before from the next whole snapshot on (the general fold keeps
        # no base for the tails until then: a load replays more events till it)
        after = min(seq for seq in wholes if seq > drop)
        assert [s for s in got_tails if s > after] == [s for s in tails if s > after], drop
        if path == "thin":
            assert got_tails == tails, drop
