"""The exception hierarchy: every error statekeeper raises is a :class:`StatekeeperError`.

Catch ``StatekeeperError`` to handle anything the library raises on purpose; catch a
subclass to handle one failure. Each error carries the context a caller needs to act
(the agent, the sequence number, the current head) as attributes, not only in its text.
"""

from __future__ import annotations

from typing import Any


class StatekeeperError(Exception):
    """Root of every error statekeeper raises on purpose."""


class ConfigurationError(StatekeeperError, ValueError):
    """A setting, URL or argument cannot be used (raised before anything is written)."""


class BackendUnavailable(StatekeeperError):
    """The requested storage backend is not available (not installed, or not built yet)."""


class StoreClosed(StatekeeperError):
    """An operation was attempted on a store or backend that has been closed."""


# --- state machine -------------------------------------------------------------------


class MachineError(StatekeeperError):
    """Base class for state-machine errors."""


class InvalidTransition(MachineError):
    """An event cannot fire from the current state (strict mode), or a guard refused it."""

    def __init__(self, state: Any, event: Any, reason: str = "no rule") -> None:
        self.state = state
        self.event = event
        self.reason = reason
        super().__init__(f"cannot fire {_label(event)!r} from state {_label(state)!r}: {reason}")


class UnknownState(MachineError, ValueError):
    """A state value does not belong to the machine (e.g. when restoring a stored state)."""


class InvalidMachineDefinition(MachineError, ValueError):
    """A rule or machine definition is malformed (duplicate rule, unknown state...)."""


class CallbackError(MachineError):
    """An action or hook failed while a transition was being applied.

    ``errors`` lists every exception collected, in order; the first one is the cause.
    """

    def __init__(self, message: str, errors: list[BaseException]) -> None:
        self.errors = errors
        super().__init__(message)


class UnknownEvent(MachineError, ValueError):
    """An event value does not belong to the machine (e.g. when resolving a stored event)."""


class AsyncRequired(MachineError, TypeError):
    """A synchronous call (``fire``, ``can_transition``) met an async guard, action or hook.

    Nothing was changed when this is raised before the state changed; use the async API
    (``await machine.transition(...)``) for machines with async callables.
    """

    def __init__(self, state: Any, event: Any, callable_name: str) -> None:
        self.state = state
        self.event = event
        self.callable_name = callable_name
        super().__init__(
            f"cannot fire {_label(event)!r} from state {_label(state)!r} synchronously: "
            f"{callable_name} is async; use 'await machine.transition(...)'"
        )


class TransitionInProgress(MachineError):
    """A transition was started on a machine that is already in the middle of one.

    Raised for re-entrant calls from a guard, exit hook or action of the same machine
    (``on_enter`` hooks and callbacks run after the state changed and may fire new
    events freely), for a synchronous ``fire``/``restore`` while an async transition of
    the same machine is suspended in one of those steps. Concurrent asyncio tasks do not
    get this error: ``await machine.transition(...)`` waits for its turn.
    """

    def __init__(self, state: Any, event: Any = None) -> None:
        self.state = state
        self.event = event
        what = "restore" if event is None else f"fire {_label(event)!r}"
        super().__init__(
            f"cannot {what}: a transition from state {_label(state)!r} "
            "is still running its guards, exit hooks or action"
        )


# --- storage -------------------------------------------------------------------------


class StorageError(StatekeeperError):
    """Base class for errors about stored data."""


class AgentNotFound(StorageError, KeyError):
    """No stream exists for the agent."""

    def __init__(self, agent_id: str) -> None:
        self.agent_id = agent_id
        super().__init__(agent_id)

    def __str__(self) -> str:
        return f"agent {self.agent_id!r} not found"


class BackendError(StorageError):
    """The storage engine failed (I/O error, locked past the timeout, lost connection).

    Whether the operation took effect is unknown only when ``maybe_applied`` is True;
    otherwise nothing was written.
    """

    def __init__(self, message: str, *, maybe_applied: bool = False) -> None:
        self.maybe_applied = maybe_applied
        super().__init__(message)


class ConflictError(StorageError):
    """An append expected a different head: someone else wrote first.

    ``expected_seq`` is what the caller believed; ``current_seq`` is the stored head.
    Nothing was written by the failed append.
    """

    def __init__(self, agent_id: str, expected_seq: int, current_seq: int) -> None:
        self.agent_id = agent_id
        self.expected_seq = expected_seq
        self.current_seq = current_seq
        super().__init__(
            f"agent {agent_id!r}: expected head seq {expected_seq}, stored head is {current_seq}"
        )


class IntegrityError(StorageError):
    """A stored record failed verification (checksum mismatch, gap, unreadable bytes)."""

    def __init__(self, agent_id: str, seq: int | None, reason: str) -> None:
        self.agent_id = agent_id
        self.seq = seq
        self.reason = reason
        where = f"agent {agent_id!r}" + (f" seq {seq}" if seq is not None else "")
        super().__init__(f"integrity check failed for {where}: {reason}")


class SerializationError(StorageError, TypeError):
    """A value cannot be encoded (or stored bytes cannot be decoded). Nothing was written."""

    def __init__(self, message: str, path: str | None = None) -> None:
        self.path = path
        super().__init__(message if path is None else f"{message} (at {path})")


class PatchError(StorageError, ValueError):
    """A JSON Patch operation cannot be applied to the document."""


class WriteBufferError(StorageError):
    """Write-behind (``async`` durability) could not flush some buffered records.

    ``failures`` maps agent id to the exception that stopped its buffered records.
    """

    def __init__(self, failures: dict[str, BaseException]) -> None:
        self.failures = failures
        names = ", ".join(sorted(failures))
        super().__init__(f"buffered writes could not be flushed for: {names}")


def _label(value: Any) -> str:
    return str(getattr(value, "value", value))
