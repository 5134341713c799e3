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

from typing import TYPE_CHECKING, Any

from .errors import (
    AgentNotFound,
    BackendError,
    BackendRejected,
    BackendUnavailable,
    CallbackError,
    CapabilityUnsupported,
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

if TYPE_CHECKING:  # the rest loads on first use (``import statekeeper`` stays light)
    from .backends import Backend, MemoryBackend, SQLiteBackend, open_backend
    from .codec import Codec, TypeRegistry
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

#: public name -> the submodule that defines it (imported on first access)
_LAZY: dict[str, str] = {
    "AgentInfo": ".records",
    "AgentState": ".machine",
    "AgentStateMachine": ".machine",
    "AppendResult": ".records",
    "Backend": ".backends",
    "Codec": ".codec",
    "DurableAgent": ".store",
    "Event": ".records",
    "EventKind": ".records",
    "Keyring": ".security",
    "MemoryBackend": ".backends",
    "SQLiteBackend": ".backends",
    "Snapshot": ".records",
    "StateHistory": ".machine",
    "StatePersistenceManager": ".persistence",
    "StateSnapshot": ".persistence",
    "StateStore": ".store",
    "StateTransition": ".machine",
    "StorageBackend": ".persistence",
    "SyncDurableAgent": ".store",
    "SyncStateStore": ".store",
    "TransitionRule": ".machine",
    "TypeRegistry": ".codec",
    "VerifyReport": ".store",
    "open_backend": ".backends",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


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
    "CapabilityUnsupported",
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
