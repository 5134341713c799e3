"""``Task``: a goal, plan steps with status, results, errors and retries."""

from __future__ import annotations

import enum
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ...errors import InvalidArgument

__all__ = ["Failure", "PlanStep", "StepStatus", "Task", "TaskStatus"]


class StepStatus(enum.StrEnum):
    """Where a plan step is."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    SKIPPED = "skipped"


class TaskStatus(enum.StrEnum):
    """Where the task is."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Failure(BaseModel):
    """One recorded error: of ``step`` (None: of the task), at its ``attempt``."""

    model_config = ConfigDict(extra="forbid")

    message: str
    step: str | None = None
    kind: str | None = None
    attempt: int = Field(default=1, ge=1)
    at: float | None = None


class PlanStep(BaseModel):
    """A step of the plan: what to do, its status, result, last error and attempts."""

    model_config = ConfigDict(extra="forbid")

    id: str
    description: str = ""
    status: StepStatus = StepStatus.PENDING
    result: Any = None
    error: str | None = None
    attempts: int = Field(default=0, ge=0)
    started_at: float | None = None
    finished_at: float | None = None


class Task(BaseModel):
    """What an agent works on.

    >>> t = Task(goal="refund order 42")
    >>> t.plan("look up the order", "issue the refund")
    >>> _ = t.start("1"); _ = t.complete("1", {"order": 42})
    >>> _ = t.start("2"); t.fail("2", TimeoutError("payments API"))
    True
    >>> t.next_step().id, t.retries, t.errors[0].kind
    ('2', 1, 'TimeoutError')
    """

    model_config = ConfigDict(extra="forbid")

    goal: str
    steps: list[PlanStep] = Field(default_factory=list)
    status: TaskStatus = TaskStatus.PENDING
    result: Any = None
    errors: list[Failure] = Field(default_factory=list)
    #: retries made so far (every step failure that was retried)
    retries: int = Field(default=0, ge=0)
    #: attempts a step may fail before the task fails
    max_retries: int = Field(default=3, ge=0)

    def plan(self, *descriptions: str) -> None:
        """Append steps, numbered on from the existing ones (``"1"``, ``"2"``…)."""
        for description in descriptions:
            self.add_step(description)

    def add_step(self, description: str, *, id: str | None = None) -> PlanStep:
        """Append one step (``id`` default: its position, counting from 1)."""
        step_id = id if id is not None else str(len(self.steps) + 1)
        if any(s.id == step_id for s in self.steps):
            raise InvalidArgument("id", f"the task already has a step {step_id!r}")
        step = PlanStep(id=step_id, description=description)
        self.steps.append(step)
        return step

    def step(self, step_id: str) -> PlanStep:
        """The step ``step_id`` (InvalidArgument if there is none)."""
        for step in self.steps:
            if step.id == step_id:
                return step
        raise InvalidArgument("step_id", f"the task has no step {step_id!r}")

    def start(self, step_id: str) -> PlanStep:
        """Mark a step running (and the task)."""
        step = self.step(step_id)
        step.status = StepStatus.RUNNING
        step.attempts += 1
        step.started_at = time.time()
        self.status = TaskStatus.RUNNING
        return step

    def complete(self, step_id: str, result: Any = None) -> PlanStep:
        """Mark a step done with its result; the task is done when every step is."""
        step = self.step(step_id)
        step.status = StepStatus.DONE
        step.result = result
        step.error = None
        step.finished_at = time.time()
        if self.done:
            self.status = TaskStatus.DONE
        return step

    def skip(self, step_id: str) -> PlanStep:
        """Mark a step skipped."""
        step = self.step(step_id)
        step.status = StepStatus.SKIPPED
        step.finished_at = time.time()
        if self.done:
            self.status = TaskStatus.DONE
        return step

    def fail(self, step_id: str, error: str | BaseException) -> bool:
        """Record a failure of a step. True when it will be retried (back to pending,
        ``retries`` counted); False when it is out of attempts (step and task failed)."""
        step = self.step(step_id)
        kind = type(error).__name__ if isinstance(error, BaseException) else None
        message = str(error) if str(error) else (kind or "failed")
        attempt = max(step.attempts, 1)
        self.errors.append(
            Failure(message=message, step=step_id, kind=kind, attempt=attempt, at=time.time())
        )
        step.error = message
        if attempt <= self.max_retries:
            step.status = StepStatus.PENDING
            self.retries += 1
            return True
        step.status = StepStatus.FAILED
        step.finished_at = time.time()
        self.status = TaskStatus.FAILED
        return False

    def next_step(self) -> PlanStep | None:
        """The first step still pending, or None."""
        return next((s for s in self.steps if s.status is StepStatus.PENDING), None)

    @property
    def done(self) -> bool:
        """True when every step is done or skipped (and there is at least one)."""
        return bool(self.steps) and all(
            s.status in (StepStatus.DONE, StepStatus.SKIPPED) for s in self.steps
        )

    @property
    def progress(self) -> tuple[int, int]:
        """``(finished steps, steps)``."""
        finished = sum(s.status in (StepStatus.DONE, StepStatus.SKIPPED) for s in self.steps)
        return finished, len(self.steps)
