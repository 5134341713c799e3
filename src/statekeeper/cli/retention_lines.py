"""How ``statekeeper retention apply`` (:mod:`.retention`) names each action it made,
would make, or could not make."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._markup import escape

if TYPE_CHECKING:
    from ..governance.retention import RetentionAction

__all__ = ["UNSUPPORTED", "action_line"]

#: what a retention action the engine cannot make is called (the policy's word)
UNSUPPORTED = {"expire-keys": "keys_ttl", "compact": "compaction", "purge": "ttl"}


def action_line(a: RetentionAction) -> str:
    """One action of a retention run, as ``retention apply`` prints it: ``deleted ...``
    when done, ``would delete ...`` in a dry run, ``not deleted (ttl): access denied:
    ...`` when refused, ``not compacted [skipped: why]`` when it lost a race to another
    process, ``could not delete ... [failed: why]`` otherwise."""
    undone = {"purge": "deleted (ttl)", "expire-keys": "forgotten (keys_ttl)"}.get(a.kind)
    if a.outcome == "refused":  # nothing was planned: no counts to give, only the reason
        return f"not {undone or 'compacted'}: {escape(a.reason)}"
    planned = a.events_removed or a.snapshots_removed or a.base_seq
    if a.outcome == "skipped" and not planned:  # lost a race to another process
        return f"not {undone or 'compacted'} {escape(f'[skipped: {a.reason}]')}"
    if a.outcome in ("failed", "forgotten") and a.kind in ("purge", "compact") and not planned:
        what = "delete (ttl)" if a.kind == "purge" else "compact"  # failed before planning
        return f"could not {what} {escape(f'[{a.outcome}: {a.reason}]')}"
    if a.kind == "purge":
        verbs, what = ("delete", "deleted"), f"({a.events_removed} events; {a.reason})"
    elif a.kind == "expire-keys":
        verbs = ("forget", "forgot")
        what = f"{a.keys_expired} idempotency record(s) ({a.reason})"
    else:
        verbs = ("remove", "removed")
        what = (
            f"{a.events_removed} event(s) before seq {a.base_seq + 1},"
            f" {a.snapshots_removed} snapshot(s)"
        )
    if a.outcome == "done":
        return f"{verbs[1]} {what}"
    if a.outcome == "dry-run":
        return f"would {verbs[0]} {what}"
    return f"could not {verbs[0]} {what} {escape(f'[{a.outcome}: {a.reason}]')}"
