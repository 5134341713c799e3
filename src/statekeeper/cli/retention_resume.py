"""What a ``statekeeper retention apply`` run stopped part-way leaves for the run that
resumes it (:mod:`.retention`), beside the resume point of its progress file."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..governance.retention import RetentionReport

__all__ = ["Done", "Problems"]


class Problems:
    """The failed and refused actions and the lost agents of a run stopped part-way,
    kept in its progress file (counts, and the first agents named), so that the run
    resuming it reports them and exits as the whole run would have: the stopped run
    never printed them, and the resumed one starts after them."""

    _NAMED = 20

    def __init__(self, failed: int = 0, refused: int = 0, lost: int = 0) -> None:
        self.failed, self.refused, self.lost = failed, refused, lost
        self.agents: list[str] = []
        self._seen = (0, 0)  # (actions, lost) of the report counted already

    @classmethod
    def of(cls, doc: object) -> Problems:
        """From a progress file's ``problems`` (absent: a file written before them)."""
        if doc is None:
            return cls()
        if not isinstance(doc, dict):
            raise ValueError("problems")
        made = cls(int(doc["failed"]), int(doc["refused"]), int(doc["lost"]))
        made.agents = [str(a) for a in doc["agents"]]
        return made

    def copy(self) -> Problems:
        made = Problems(self.failed, self.refused, self.lost)
        made.agents = list(self.agents)
        return made

    def count(self, report: RetentionReport) -> None:
        """Add what ``report`` holds since the last call (its lists only grow)."""
        actions, lost = self._seen
        for a in report.actions[actions:]:
            if a.outcome in ("failed", "refused"):
                self.failed += a.outcome == "failed"
                self.refused += a.outcome == "refused"
                self.agents.append(a.agent_id)
        for agent_id in list(report.lost)[lost:]:
            self.lost += 1
            self.agents.append(agent_id)
        del self.agents[self._NAMED :]
        self._seen = (len(report.actions), len(report.lost))

    def any(self) -> bool:
        return bool(self.failed or self.refused or self.lost)

    def json(self) -> dict[str, object]:
        return {
            "failed": self.failed, "refused": self.refused, "lost": self.lost,
            "agents": self.agents,
        }  # fmt: skip

    def line(self) -> str:
        parts = [
            f"{n:,} {what}"
            for n, what in (
                (self.failed, "failed"),
                (self.refused, "refused (access denied)"),
                (self.lost, "lost"),
            )
            if n
        ]
        return (
            f"before the resume: {', '.join(parts)} ({', '.join(self.agents)}"
            f"{', ...' if len(self.agents) < self.failed + self.refused + self.lost else ''});"
            " run retention apply again without the progress file to retry them"
        )


class Done:
    """What the runs before a resume did, counted (kept in the progress file beside
    :class:`Problems`), so that the summary of the run that finishes the operation
    counts all of it: it said "1 agent(s) scanned, 1 action(s)" for a run of three
    agents resumed after two. None from a file written before these were kept."""

    _KEYS = ("scanned", "held", "actions", "unsupported", "skipped")

    def __init__(
        self, scanned: int = 0, held: int = 0, actions: int = 0, unsupported: int = 0,
        skipped: int = 0,
    ):  # fmt: skip
        self.scanned, self.held, self.actions, self.unsupported = (
            scanned, held, actions, unsupported,
        )  # fmt: skip
        self.skipped = skipped  # (a file written before it was kept: in actions)
        self._seen = (0, 0, 0)  # (scanned, held, actions) of the report counted already

    @classmethod
    def of(cls, doc: object) -> Done | None:
        if doc is None:
            return None
        if not isinstance(doc, dict):
            raise ValueError("done")
        return cls(*(int(doc[k]) for k in cls._KEYS if k in doc or k != "skipped"))

    def copy(self) -> Done:
        return Done(self.scanned, self.held, self.actions, self.unsupported, self.skipped)

    def count(self, report: RetentionReport) -> None:
        """Add what ``report`` holds since the last call (as :meth:`Problems.count`)."""
        scanned, held, actions = self._seen
        self.scanned += report.scanned - scanned
        self.held += report.held - held
        for a in report.actions[actions:]:
            self.unsupported += a.outcome == "unsupported"
            self.skipped += a.outcome == "skipped"
            self.actions += a.outcome not in ("failed", "refused", "unsupported", "skipped")
        self._seen = (report.scanned, report.held, len(report.actions))

    def json(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self._KEYS}


def whole_run(
    this: dict[str, int], before: Problems, done: Done | None
) -> tuple[dict[str, int] | None, str]:
    """The counts of a resumed run's summary (``this``: its own, by the keys of
    :meth:`Done.json` and ``failed``, ``refused``, ``lost``) over the whole operation,
    and what the summary adds to say so; None and a note that says the counts are
    this run's when the progress file did not keep the earlier runs' (an older one)."""
    if done is None:
        return None, " (this run's only: the progress file does not say what was done before)"
    earlier = {**done.json(), "failed": before.failed, "refused": before.refused}
    earlier["lost"] = before.lost
    total = {k: n + earlier.get(k, 0) for k, n in this.items()}
    return total, (
        f" (the whole run: {this['scanned']:,} agent(s) in this one, {done.scanned:,} before"
        " the resume)"
    )
