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
from .codec import Codec, TypeRegistry
from .errors import (
    AgentNotFound,
    BackendError,
    BackendRejected,
    BackendUnavailable,
    CallbackError,
    ConfigurationError,
    ConflictError,
    DecryptionError,
    IntegrityError,
    InvalidAgentId,
    InvalidArgument,
    InvalidMachineDefinition,
    InvalidTransition,
    KeyNotFound,
    LeaseError,
    LeaseHeld,
    LeaseLost,
    LeasesUnsupported,
    MachineError,
    MergeConflict,
    PatchError,
    RetriesExhausted,
    SerializationError,
    StatekeeperError,
    StatekeeperWarning,
    StateTooLarge,
    StepError,
    StorageError,
    StoreClosed,
    UnknownState,
    UnknownTypeTag,
    UnsavedChangesWarning,
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
from .security import Keyring
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
    "BackendRejected",
    "BackendUnavailable",
    "CallbackError",
    "Codec",
    "ConfigurationError",
    "ConflictError",
    "DecryptionError",
    "DurableAgent",
    "Event",
    "EventKind",
    "IntegrityError",
    "InvalidAgentId",
    "InvalidArgument",
    "InvalidMachineDefinition",
    "InvalidTransition",
    "KeyNotFound",
    "Keyring",
    "LeaseError",
    "LeaseHeld",
    "LeaseLost",
    "LeasesUnsupported",
    "MachineError",
    "MemoryBackend",
    "MergeConflict",
    "PatchError",
    "RetriesExhausted",
    "SQLiteBackend",
    "SerializationError",
    "Snapshot",
    "StateHistory",
    "StatePersistenceManager",
    "StateSnapshot",
    "StateStore",
    "StateTooLarge",
    "StateTransition",
    "StatekeeperError",
    "StatekeeperWarning",
    "StepError",
    "StorageBackend",
    "StorageError",
    "StoreClosed",
    "SyncDurableAgent",
    "SyncStateStore",
    "TransitionRule",
    "TypeRegistry",
    "UnknownState",
    "UnknownTypeTag",
    "UnsavedChangesWarning",
    "VerifyReport",
    "WriteBufferError",
    "__version__",
    "open_backend",
]
