"""The per-agent write lock of a store: :class:`~statekeeper.backends.keyed_locks.KeyedLock`
(one implementation, shared with the engines that lock per agent — the tiered
backend — and the LangGraph saver, which locks per thread)."""

from __future__ import annotations

from ..backends.keyed_locks import KeyedLock

__all__ = ["KeyedLock"]
