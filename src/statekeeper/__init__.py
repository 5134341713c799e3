"""statekeeper: durable, inspectable state for AI agents.

Agents built on statekeeper remember what they were doing, survive a crash at any
point, never lose or double an acknowledged step, and can be audited and replayed.

>>> import asyncio
>>> from statekeeper import StateStore, StateTransition
>>> async def main():
...     async with StateStore("memory://") as store:
...         agent = await store.agent("agent-1")
...         agent.data["task"] = "summarise"
...         await agent.transition(StateTransition.START_PROCESSING)
...         again = await store.load("agent-1")
...         return again.fsm_state, again.data
>>> asyncio.run(main())
('processing', {'task': 'summarise'})
"""

from .backends import Backend, MemoryBackend, SQLiteBackend, open_backend
from .errors import (
    AgentNotFound,
    BackendError,
    BackendUnavailable,
    CallbackError,
    ConfigurationError,
    ConflictError,
    IntegrityError,
    InvalidMachineDefinition,
    InvalidTransition,
    MachineError,
    PatchError,
    SerializationError,
    StatekeeperError,
    StorageError,
    StoreClosed,
    UnknownState,
    WriteBufferError,
)
from .machine import (
    AgentState,
    AgentStateMachine,
    StateHistory,
    StateTransition,
    TransitionRule,
)
from .persistence import StatePersistenceManager, StateSnapshot, StorageBackend
from .records import AgentInfo, AppendResult, Event, EventKind, Snapshot
from .store import (
    DurableAgent,
    StateStore,
    SyncDurableAgent,
    SyncStateStore,
    VerifyReport,
)

__version__ = "0.1.0"

__all__ = [
    "AgentInfo",
    "AgentNotFound",
    "AgentState",
    "AgentStateMachine",
    "AppendResult",
    "Backend",
    "BackendError",
    "BackendUnavailable",
    "CallbackError",
    "ConfigurationError",
    "ConflictError",
    "DurableAgent",
    "Event",
    "EventKind",
    "IntegrityError",
    "InvalidMachineDefinition",
    "InvalidTransition",
    "MachineError",
    "MemoryBackend",
    "PatchError",
    "SQLiteBackend",
    "SerializationError",
    "Snapshot",
    "StateHistory",
    "StatePersistenceManager",
    "StateSnapshot",
    "StateStore",
    "StateTransition",
    "StatekeeperError",
    "StorageBackend",
    "StorageError",
    "StoreClosed",
    "SyncDurableAgent",
    "SyncStateStore",
    "TransitionRule",
    "UnknownState",
    "VerifyReport",
    "WriteBufferError",
    "__version__",
    "open_backend",
]
