"""Rekey's counts when a rewrite of it raised part-way (``maybe_applied``: S3, whose
rewrite writes one object at a time, refused after some of them landed — a commit
changed under it, a prune under it): the retry finds the records that landed under
the active key. Those were re-encrypted by this rekey, not "already done". Was:
counted as skipped (and a head tag that landed not counted at all)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import ConflictError, RewriteBelowPrunedBase
from statekeeper.records import RewriteRequest
from statekeeper.security import Keyring, generate_key, rekey_agent

K1, K2 = generate_key(), generate_key()
OLD = Keyring({"k1": K1})
BOTH = Keyring({"k2": K2, "k1": K1}, active="k2")


def _refused(kind: str, request: RewriteRequest) -> Exception:
    exc: Exception
    if kind == "conflict":
        exc = ConflictError("a", request.expected_seq, request.expected_seq)
    else:
        exc = RewriteBelowPrunedBase("a", 3, 2)
    exc.maybe_applied = True  # type: ignore[union-attr]
    return exc


@pytest.mark.parametrize("batch", [5, 500], ids=["batched", "one-commit"])
@pytest.mark.parametrize("kind", ["conflict", "pruned"])
@pytest.mark.parametrize("landed", ["some", "all"])
async def test_records_a_part_way_rewrite_landed_are_counted_as_rekeyed(
    tmp_path: Path, kind: str, landed: str, batch: int
) -> None:
    """(``batch`` 500: the events in the final commit too, some of them landed)"""
    url = f"sqlite:///{tmp_path / 'c.db'}"
    async with StateStore(url, keyring=OLD, snapshot_every=3) as store:
        for i in range(10):
            await store.save("a", {"n": i})
    async with StateStore(url, keyring=BOTH) as rekeying:
        real = rekeying.backend.rewrite
        log: list[str] = []

        async def rewrite(request: RewriteRequest) -> None:
            if request.snapshots and not log:  # the first try of the final commit
                log.append("part-way")
                part = request
                if landed == "some":  # (4 events, one snapshot landed, not the head tag)
                    part = dataclasses.replace(
                        request,
                        events=request.events[:4],
                        snapshots=request.snapshots[:1],
                        head_tag=None,
                    )
                await real(part)
                raise _refused(kind, request)
            await real(request)

        rekeying.backend.rewrite = rewrite  # type: ignore[method-assign]
        stats = await rekey_agent(rekeying, "a", batch=batch)
        assert log == ["part-way"]
        counts = (stats.events, stats.snapshots, stats.heads, stats.skipped)
        assert counts == (10, 3, 1, 0), stats  # was: some snapshots (and the head) skipped
        again = await rekey_agent(rekeying, "a", batch=5)  # all done now: all skipped
        assert (again.events, again.snapshots, again.heads, again.skipped) == (0, 0, 0, 13)
