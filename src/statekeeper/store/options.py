"""The options of :class:`~statekeeper.store.StateStore`, checked before a backend is
opened (and a file created): a wrong option is a clear error, never a half-open store."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from ..arguments import check_seq, check_state_value
from ..backends.base import Backend
from ..codec import Codec, TypeRegistry
from ..errors import ConfigurationError, InvalidArgument
from .durability import Durability, check_durability

__all__ = ["check_options", "state_values"]


def check_options(
    *,
    backend: object,
    durability: Durability | str,
    snapshot_every: int | str,
    snapshot_bytes: int | None,
    cache_size: int,
    flush_size: int,
    flush_interval: float,
    clock: Callable[[], float],
    codec: Codec | None,
    write_retries: int,
    keyring: Any,
    compression: str | None,
    format: str,
    types: TypeRegistry | Iterable[type] | None,
    checksum: str | None,
    full_snapshot_every: int,
    max_event_bytes: int | None,
    max_snapshot_bytes: int | None,
    max_state_bytes: int | None,
    witness: object,
    witness_interval: float,
    settle_after: float | None = None,
) -> tuple[Durability, Codec]:
    """Check every option; the durability mode and the codec they make."""
    if snapshot_every not in ("bounded", "cost", "auto"):
        _check_numbers(snapshot_every=snapshot_every)
    _check_numbers(
        full_snapshot_every=full_snapshot_every,
        cache_size=cache_size,
        write_retries=write_retries,
        flush_size=flush_size,
        max_event_bytes=max_event_bytes,
        max_snapshot_bytes=max_snapshot_bytes,
        max_state_bytes=max_state_bytes,
        snapshot_bytes=snapshot_bytes,
    )
    if type(flush_interval) is bool or not isinstance(flush_interval, int | float):
        raise InvalidArgument("flush_interval", "flush_interval must be a number of seconds")
    if settle_after is not None and (
        type(settle_after) is bool
        or not isinstance(settle_after, int | float)
        or not 0 <= settle_after < float("inf")
    ):
        raise InvalidArgument(
            "settle_after", f"settle_after must be None or seconds >= 0, not {settle_after!r}"
        )
    if not callable(clock):
        raise InvalidArgument("clock", f"clock must be callable, not {type(clock).__name__}")
    if backend is not None and not isinstance(backend, Backend | str):
        raise InvalidArgument(
            "backend", f"backend must be a URL or a Backend, not {type(backend).__name__}"
        )
    if snapshot_every not in ("bounded", "cost", "auto") and snapshot_every < 1:  # type: ignore[operator]
        raise ConfigurationError("snapshot_every must be >= 1, 'bounded', 'cost' or 'auto'")
    if full_snapshot_every < 1:
        raise ConfigurationError("full_snapshot_every must be >= 1")
    if snapshot_bytes is not None and snapshot_bytes < 1:
        raise ConfigurationError("snapshot_bytes must be >= 1 (or None)")
    for limit in (max_event_bytes, max_snapshot_bytes, max_state_bytes):
        if limit is not None and limit < 1:
            raise ConfigurationError("size limits must be >= 1 (or None)")
    if codec is not None and (
        keyring is not None
        or compression is not None
        or format != "json"
        or types
        or checksum is not None
    ):
        raise ConfigurationError("give codec= or the codec options, not both")
    if codec is None:
        codec = Codec(
            keyring=keyring, compression=compression, format=format, types=types, checksum=checksum
        )
    if cache_size < 0 or write_retries < 0:
        raise ConfigurationError("cache_size and write_retries must be >= 0")
    mode = check_durability(durability)
    if mode == "async" and (flush_size < 1 or flush_interval <= 0):
        raise ConfigurationError("flush_size must be >= 1 and flush_interval > 0")
    if not isinstance(witness, str | os.PathLike | bool | None):
        raise InvalidArgument(
            "witness", f"witness must be a path, True, False or None, not {witness!r}"
        )
    if isinstance(witness_interval, bool) or not (
        isinstance(witness_interval, int | float) and 0 < witness_interval < float("inf")
    ):
        raise InvalidArgument(
            "witness_interval", "witness_interval must be a positive number of seconds"
        )
    return mode, codec


def _check_numbers(**options: object) -> None:
    """The integer options of :class:`StateStore` are ints (None: no limit)."""
    for name, value in options.items():
        optional = name.startswith("max_") or name == "snapshot_bytes"
        check_seq(value, name, minimum=-(2**63), optional=optional)


def state_values(states: Iterable[Any] | None) -> frozenset[str] | None:
    """The option ``states`` as a set of stored state values."""
    if states is None:
        return None
    if isinstance(states, str) or not isinstance(states, Iterable):
        raise InvalidArgument(
            "states", f"states must be an iterable of states or None, not {type(states).__name__}"
        )
    values = frozenset(check_state_value(s, "states[]") or "" for s in states)
    if not values:
        raise InvalidArgument("states", "states must name at least one state")
    return values
