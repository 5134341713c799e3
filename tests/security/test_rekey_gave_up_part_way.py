"""What ``statekeeper rekey`` says when it gave up on a stream after every walk's
rewrite was refused below a pruned base (:func:`~.rekey_retry.gave_up_pruned`), the
last refusal S3's part-way one (:func:`statekeeper.backends.s3.rewrites._part_made`:
some records of the rewrite written before a prune moved the base under it,
``maybe_applied``). Was: "Nothing of 'a' was half-written: a refused rewrite writes
nothing" beside the refusal's own "part-way: some records of the rewrite were
written"; each record is still whole under the old key or the new one."""

from __future__ import annotations

from statekeeper.backends.s3.rewrites import _part_made
from statekeeper.errors import RewriteBelowPrunedBase
from statekeeper.security.rekey_retry import gave_up_pruned


def _refused(part_way: bool) -> RewriteBelowPrunedBase:
    refused = RewriteBelowPrunedBase("a", 3, 6)
    if part_way:
        _part_made(refused)
    refused.walks = 3
    return refused


def test_a_part_way_last_refusal_is_not_said_to_have_written_nothing() -> None:
    said = gave_up_pruned(_refused(part_way=True))
    assert "part-way" in said
    assert "writes nothing" not in said  # was: said beside "part-way"
    assert "half-written" not in said
    assert "whole under the old key or the new one" in said
    assert "Run 'statekeeper rekey' again to resume" in said


def test_a_refusal_that_wrote_nothing_still_says_so() -> None:
    said = gave_up_pruned(_refused(part_way=False))
    assert "Nothing of 'a' was half-written: a refused rewrite writes nothing" in said
    assert "Run 'statekeeper rekey' again to resume" in said
