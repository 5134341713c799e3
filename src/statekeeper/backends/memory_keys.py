"""The in-memory backend's idempotency records (export, rename, expiry): functions
bound on :class:`~statekeeper.backends.memory.MemoryBackend`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..records import (
    STEP_KEY_PREFIX,
    StreamChange,
)
from .base import (
    check_expiry,
    validate_rename_guard,
)

if TYPE_CHECKING:
    from .memory import MemoryBackend


async def idempotency_keys(self: MemoryBackend, agent_id: str) -> list[tuple[str, int, int]]:
    """Every idempotency key of the agent as ``(key, first_seq, last_seq)``."""
    self._check()
    stream = self._streams.get(agent_id)
    if stream is None:
        return []
    return sorted(((k, f, la) for k, (f, la, _) in stream.keys.items()), key=lambda r: r[1])


async def rename_keys(
    self: MemoryBackend,
    agent_id: str,
    renames: Sequence[tuple[str, str]],
    *,
    guard: StreamChange | None = None,
) -> int:
    """Store records under another form of their key (see the contract); the
    ``guard``'s check and change first, with no await from it to the last rename."""
    self._check()
    validate_rename_guard(agent_id, guard, self)
    if guard is not None:  # (ConflictError: nothing renamed; it suspends nowhere)
        await self.append_together([], [guard])
    stream = self._streams.get(agent_id)
    done = 0
    for old, new in renames if stream is not None else ():
        record = stream.keys.pop(old, None) if stream is not None else None
        if record is not None and stream is not None:
            done += new not in stream.keys
            stream.keys.setdefault(new, record)
    return done


async def expire_keys(
    self: MemoryBackend, agent_id: str | None, before: float, *, count_only: bool = False
) -> int:
    """Forget the idempotency records made before ``before`` (see the contract)."""
    self._check()
    before = check_expiry(agent_id, before)
    one = self._streams.get(agent_id) if agent_id is not None else None
    streams = list(self._streams.values()) if agent_id is None else [one] if one else []
    dropped = 0
    for stream in streams:
        old = [k for k, (_, _, made) in stream.keys.items() if made < before]
        old = [k for k in old if not k.startswith(STEP_KEY_PREFIX)]  # (never a step's)
        if not count_only:
            for key in old:
                del stream.keys[key]
        dropped += len(old)
    return dropped
