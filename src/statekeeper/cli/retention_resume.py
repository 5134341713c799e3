"""What a ``statekeeper retention apply`` run stopped part-way leaves for the run that
resumes it (:mod:`.retention`), beside the resume point of its progress file."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..governance.retention import RetentionReport

__all__ = ["Problems"]


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
