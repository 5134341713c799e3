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

from . import _start

_start.guard()  # (the statekeeper command only: Ctrl-C while it starts, see _start)

import warnings  # noqa: E402
from typing import TYPE_CHECKING, Any  # noqa: E402

# the errors an agent builder handles (every error is in ``statekeeper.errors``)
from .errors import (  # noqa: E402
    AgentNotFound,
    BackendUnavailable,
    ConfigurationError,
    ConflictError,
    IntegrityError,
    InvalidArgument,
    InvalidTransition,
    LeaseLost,
    SerializationError,
    StatekeeperError,
    StoreClosed,
    UnflushedWritesWarning,
    UnreplicatedLeaseTokens,
    UnsavedChangesWarning,
)

if TYPE_CHECKING:  # the rest loads on first use (``import statekeeper`` stays light)
    from .codec import TypeRegistry
    from .codec.keys import Keyring
    from .machine import (
        AgentState,
        AgentStateMachine,
        StateHistory,
        StateTransition,
        TransitionRule,
    )
    from .persistence import StatePersistenceManager, StateSnapshot, StorageBackend
    from .records import AgentInfo, AppendResult, Event, Snapshot
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
    "DurableAgent": ".store",
    "Event": ".records",
    "Keyring": ".codec.keys",
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
}

#: names that used to be importable from ``statekeeper`` -> where they live now. They
#: still resolve, with a DeprecationWarning on each access.
_MOVED: dict[str, str] = {
    # for engine authors
    "Backend": "statekeeper.backends",
    "MemoryBackend": "statekeeper.backends",
    "SQLiteBackend": "statekeeper.backends",
    "open_backend": "statekeeper.backends",
    "Codec": "statekeeper.codec",
    # the less common errors
    **{
        name: "statekeeper.errors"
        for name in (
            "BackendError",
            "BackendRejected",
            "CallbackError",
            "CapabilityUnsupported",
            "DecryptionError",
            "InvalidAgentId",
            "InvalidMachineDefinition",
            "KeyNotFound",
            "LeaseError",
            "LeaseHeld",
            "LeasesUnsupported",
            "MachineError",
            "MergeConflict",
            "PatchError",
            "RetriesExhausted",
            "StateTooLarge",
            "StatekeeperWarning",
            "StepError",
            "StorageError",
            "UnknownState",
            "UnknownTypeTag",
            "WriteBufferError",
        )
    },
}

#: names that used to be importable from ``statekeeper`` and were renamed -> (module,
#: new name) (ARCHITECTURE.md, "Vocabulary"). They still resolve, with a warning.
_RENAMED: dict[str, tuple[str, str]] = {
    "EventKind": ("statekeeper.records", "EventType"),
}


def __getattr__(name: str) -> Any:
    import importlib

    if name in _LAZY:
        from ._lazy import lazy_attribute

        return lazy_attribute(__name__, globals(), _LAZY, name)
    home = _MOVED.get(name)
    if home is not None:
        warnings.warn(
            f"statekeeper.{name} is deprecated: import it from {home}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(home), name)
    if name in _RENAMED:
        home, new = _RENAMED[name]
        warnings.warn(
            f"statekeeper.{name} is deprecated: use {home}.{new}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(home), new)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__version__ = "0.1.0"

__all__ = [  # noqa: RUF022 - grouped by audience
    # agent builders: stores and agents
    "AgentInfo",
    "AppendResult",
    "DurableAgent",
    "Event",
    "Keyring",
    "Snapshot",
    "StateStore",
    "SyncDurableAgent",
    "SyncStateStore",
    "TypeRegistry",
    "VerifyReport",
    # the seed article's names
    "AgentState",
    "AgentStateMachine",
    "StateHistory",
    "StatePersistenceManager",
    "StateSnapshot",
    "StateTransition",
    "StorageBackend",
    "TransitionRule",
    # the errors an agent builder handles (all of them: statekeeper.errors)
    "AgentNotFound",
    "BackendUnavailable",
    "ConfigurationError",
    "ConflictError",
    "IntegrityError",
    "InvalidArgument",
    "InvalidTransition",
    "LeaseLost",
    "SerializationError",
    "StatekeeperError",
    "StoreClosed",
    "UnflushedWritesWarning",
    "UnreplicatedLeaseTokens",
    "UnsavedChangesWarning",
    "__version__",
]
