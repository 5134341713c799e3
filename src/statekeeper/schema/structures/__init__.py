"""Built-in state structures for what every agent has: a conversation, a task, a
session. Each is a pydantic model, usable as a whole agent state or as a field of
one, registered in the default schema registry (``statekeeper.Conversation`` …)."""

from ..registry import registry
from .conversation import Conversation, Message, Summary, ToolCall
from .session import Session
from .task import Failure, PlanStep, StepStatus, Task, TaskStatus

__all__ = [
    "Conversation",
    "Failure",
    "Message",
    "PlanStep",
    "Session",
    "StepStatus",
    "Summary",
    "Task",
    "TaskStatus",
    "ToolCall",
]

for _model in (Conversation, Task, Session):
    if _model not in registry:
        registry.register(_model, name=f"statekeeper.{_model.__name__}", version=1)
