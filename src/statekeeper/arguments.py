"""Checks of the arguments of public calls: one place, one rule per kind of argument.

Every public call of the store, the durable agent, leases, steps and the persistence
facade checks its arguments here before anything is read or written, and refuses a bad
one with :class:`~statekeeper.errors.InvalidArgument` (a
:class:`~statekeeper.errors.ConfigurationError`) whose ``argument`` names it.

Agent ids (and idempotency keys, event types and lease holders, which backends index
the same way) follow one rule on every backend (:func:`check_agent_id`): a non-empty
``str`` that is valid UTF-8 (no lone surrogate), holds no NUL character and is at most
:data:`MAX_ID_BYTES` bytes long in UTF-8. What one engine accepts, every engine accepts,
so an agent can always be moved from one to another. Ids that start with
:data:`INTERNAL_PREFIX` are reserved for records statekeeper keeps for itself (the
tiered backend's cold-tier markers, ``"\x01sk-cold/" + agent_id``): callers cannot use
them, backends accept them when what follows the prefix's ``/`` is what a valid id is, up
to :data:`INTERNAL_MARGIN` bytes longer (it may wrap the longest id or namespace)
(:func:`check_stored_id`).

A new agent's id is also *normal* (:func:`check_new_agent_id`, checked where an agent
is created): ``/``-separated segments, none empty, ``.`` or ``..``, as a namespace is.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from enum import Enum
from typing import Any

from .errors import InvalidAgentId, InvalidArgument, NonNormalAgentId

__all__ = [
    "AUDIT_STREAM",
    "HOLDS_STREAM",
    "INTERNAL_PREFIX",
    "MAX_ID_BYTES",
    "RUN_LOCKS",
    "check_agent_id",
    "check_mapping",
    "check_name",
    "check_new_agent_id",
    "check_ops",
    "check_optional_name",
    "check_principal",
    "check_seq",
    "check_state_value",
    "check_stored_id",
    "check_timestamp",
    "id_shape_problem",
    "internal_stream_words",
]

#: the longest agent id (and idempotency key, event type, holder), in UTF-8 bytes
MAX_ID_BYTES = 1024

#: agent ids starting with this are statekeeper's own records, not agents
INTERNAL_PREFIX = "\x01sk-"

#: how much longer than an agent id the part of an internal record's id after its kind
#: may be: it may wrap an agent id or a namespace (a namespace's feed tombstone stream
#: under row-level security is ``"deleted/in/" + namespace + "/-"``, 13 bytes more than
#: its namespace, and a namespace is at most 2 bytes shorter than the longest agent id)
INTERNAL_MARGIN = 64

#: the stream of the store's audit log (see :mod:`statekeeper.governance.audit`)
AUDIT_STREAM = INTERNAL_PREFIX + "audit/log"

#: the stream of the store's legal holds (see :mod:`statekeeper.governance.holds`)
HOLDS_STREAM = INTERNAL_PREFIX + "holds/registry"

#: the reserved lease ids of the store's run locks (one run at a time: retention's,
#: :mod:`statekeeper.governance.retention_lock`): leases, never streams
RUN_LOCKS = INTERNAL_PREFIX + "runlock/"

#: the store's own streams as a report names them (never by their stored ids)
_STREAM_WORDS = {AUDIT_STREAM: "audit log", HOLDS_STREAM: "legal holds"}


def internal_stream_words(stream_id: str) -> str:
    """One of the store's own streams as a report names it: ``"audit log"``,
    ``"legal holds"`` (another kind: its kind and name, without the prefix)."""
    return _STREAM_WORDS.get(stream_id, stream_id.removeprefix(INTERNAL_PREFIX))


_OPS = frozenset({"add", "remove", "replace", "move", "copy", "test"})
_NEEDS_VALUE = frozenset({"add", "replace", "test"})
_NEEDS_FROM = frozenset({"move", "copy"})


def _shown(value: str) -> str:
    """A short, printable excerpt of a (possibly huge or unencodable) string."""
    return repr(value if len(value) <= 40 else value[:40] + "…")


def _id_problem(value: object, what: str, limit: int = MAX_ID_BYTES) -> str | None:
    """Why ``value`` is not an id every backend stores the same (at most ``limit`` bytes
    in UTF-8), or None when it is."""
    if type(value) is not str:
        if isinstance(value, str):  # a str subclass (e.g. a StrEnum): its plain value
            value = str.__str__(value)
        else:
            return f"{what} must be a non-empty str, not {type(value).__name__}"
    assert isinstance(value, str)
    if not value:
        return f"{what} must be a non-empty str"
    if len(value) <= limit // 4 and value.isascii():  # the common case
        if "\x00" in value:
            return f"{what} {_shown(value)} contains a NUL character at index {value.index(chr(0))}"
        return None
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        return (
            f"{what} {_shown(value)} is not valid UTF-8 "
            f"(lone surrogate {value[exc.start]!r} at index {exc.start})"
        )
    if "\x00" in value:
        return f"{what} {_shown(value)} contains a NUL character at index {value.index(chr(0))}"
    if size > limit:
        return f"{what} {_shown(value)} is {size:,} bytes in UTF-8, over the limit of {limit:,}"
    return None


def check_agent_id(agent_id: object, argument: str = "agent_id") -> str:
    """``agent_id`` if every backend can store it, else :class:`InvalidAgentId`."""
    if (  # the common case, on every call of the store and every backend call
        type(agent_id) is str
        and 0 < len(agent_id) <= MAX_ID_BYTES // 4
        and agent_id.isascii()
        and agent_id[0] != "\x01"
        and "\x00" not in agent_id
    ):
        return agent_id
    problem = _id_problem(agent_id, argument)
    if problem is None and agent_id.startswith(INTERNAL_PREFIX):  # type: ignore[attr-defined]
        problem = f"{argument} may not start with {INTERNAL_PREFIX!r} (reserved)"
    if problem is not None:
        raise InvalidAgentId(problem, argument)
    return str.__str__(agent_id) if type(agent_id) is not str else agent_id


def id_shape_problem(agent_id: str, argument: str = "agent_id") -> str | None:
    """Why ``agent_id`` is not a *normal* id (:func:`check_new_agent_id`), or None."""
    if (
        "." not in agent_id
        and "//" not in agent_id
        and agent_id[0] != "/" != agent_id[-1]
        and agent_id[0] != "\x01"
    ):
        return None  # (the common case: four scans, no split)
    parts = agent_id.split("/")
    if agent_id[0] == "\x01":
        why = (
            "it starts with '\\x01', which marks the store's own streams (the audit log, "
            "the legal holds): such an agent would be left out of listings, the change "
            "feed, verify, export and retention"
        )
    elif any(not part for part in parts):
        why = "it has an empty segment (leading, trailing or '//')"
    elif any(part in (".", "..") for part in parts):
        why = "it has a '.' or '..' segment (an id is not a path: nothing resolves it)"
    else:
        return None
    return (
        f"{argument} {_shown(agent_id)} is not a normal agent id: {why}; a new agent's id is "
        "'/'-separated segments, none empty, '.' or '..' (its namespace is what comes "
        "before the last '/')"
    )


def check_new_agent_id(agent_id: str, argument: str = "agent_id") -> str:
    """``agent_id`` (a valid id, :func:`check_agent_id`) if an agent may be *created*
    under it, else :class:`~statekeeper.errors.NonNormalAgentId` naming it: a normal id
    is ``/``-separated segments, none empty, ``.`` or ``..`` (``acme/support/bot-1``;
    not ``tb//x``, ``tb/x/``, ``/x``, ``./x`` nor ``tb/../ta/x``), the rule a namespace
    follows (:func:`statekeeper.namespaces.check_namespace`). Only the creation of an
    agent is refused: one stored under such an id before (by an earlier version) stays
    readable, writable, exportable and deletable. A backslash is an ordinary character
    (no part of statekeeper reads it as a separator)."""
    problem = id_shape_problem(agent_id, argument)
    if problem is not None:
        raise NonNormalAgentId(problem, agent_id, argument)
    return agent_id


def check_stored_id(agent_id: object) -> str:
    """What a backend accepts: a valid agent id, or an internal record's id
    (:data:`INTERNAL_PREFIX`, a kind, ``/``, then what a valid agent id is, up to
    :data:`INTERNAL_MARGIN` bytes longer: it may wrap the longest agent id or namespace)."""
    if (  # the common case (as in check_agent_id), inline: this runs on every backend call
        type(agent_id) is str
        and 0 < len(agent_id) <= MAX_ID_BYTES // 4
        and agent_id.isascii()
        and agent_id[0] != "\x01"
        and "\x00" not in agent_id
    ):
        return agent_id
    if type(agent_id) is str and agent_id[:1] == "\x01" and agent_id.startswith(INTERNAL_PREFIX):
        kind, slash, rest = agent_id[len(INTERNAL_PREFIX) :].partition("/")
        if slash and kind and kind.isascii() and kind.isalnum():
            problem = _id_problem(rest, "agent_id", MAX_ID_BYTES + INTERNAL_MARGIN)
            if problem is None and rest.startswith(INTERNAL_PREFIX):
                problem = f"agent_id may not start with {INTERNAL_PREFIX!r} (reserved)"
            if problem is not None:
                raise InvalidAgentId(problem, "agent_id")
            return agent_id
    return check_agent_id(agent_id)


def check_name(value: object, argument: str) -> str:
    """An idempotency key, event type, holder...: the agent-id rule, named ``argument``."""
    if (  # the common case
        type(value) is str
        and 0 < len(value) <= MAX_ID_BYTES // 4
        and value.isascii()
        and "\x00" not in value
    ):
        return value
    problem = _id_problem(value, argument)
    if problem is not None:
        raise InvalidArgument(argument, problem)
    return str.__str__(value) if type(value) is not str else value


#: a principal's name: a letter, digit or ``_``, then letters, digits and ``._@:+|-``
#: (``ops``, ``support-bot``, ``alice@acme.com``, ``auth0|5f1c``), at most 128
PRINCIPAL_SYNTAX = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._@:+|-]{0,127}")


def check_principal(value: object, argument: str = "principal") -> str:
    """A principal's name (:data:`PRINCIPAL_SYNTAX`), else :class:`InvalidArgument`: a
    name with a space, a ``/`` or a ``*`` is a typo or a pattern taken for a name, and
    a policy granting it would grant no one (the one meant denied everything)."""
    if type(value) is str and PRINCIPAL_SYNTAX.fullmatch(value) is not None:
        return value
    if type(value) is not str:
        raise InvalidArgument(argument, f"{argument} must be a str, not {type(value).__name__}")
    raise InvalidArgument(
        argument,
        f"{argument} {_shown(value)} is not a principal name: 1 to 128 of letters, digits "
        "and . _ @ : + | - (starting with a letter, digit or _; no spaces, / or *)",
    )


def check_optional_name(value: object, argument: str) -> str | None:
    """None, or :func:`check_name`."""
    return None if value is None else check_name(value, argument)


def check_mapping(value: object, argument: str, *, optional: bool = False) -> Any:
    """``value`` if it is a mapping (a JSON object); None allowed when ``optional``."""
    if type(value) is dict or (value is None and optional):
        return value
    if not isinstance(value, Mapping):
        what = "a dict" + (" or None" if optional else "")
        raise InvalidArgument(argument, f"{argument} must be {what}, not {type(value).__name__}")
    return value


def check_state_value(value: object, argument: str = "fsm_state") -> str | None:
    """None, a state value (non-empty str) or an Enum state (stored as its str value)."""
    if value is None:
        return None
    if isinstance(value, Enum) and not isinstance(value, str):
        value = value.value
    return check_name(value, argument)


def check_seq(
    value: object, argument: str, *, minimum: int = 0, optional: bool = False
) -> int | None:
    """An int (not a bool, not a str) ``>= minimum``; None allowed when ``optional``."""
    if value is None and optional:
        return None
    if type(value) is bool or not isinstance(value, int):
        raise InvalidArgument(
            argument, f"{argument} must be an int, not {type(value).__name__} {value!r:.40}"
        )
    if value < minimum:
        raise InvalidArgument(argument, f"{argument} must be >= {minimum}, not {value}")
    return int(value)


def check_timestamp(value: object, argument: str) -> float:
    """A finite number of seconds since the epoch."""
    if type(value) is bool or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidArgument(
            argument,
            f"{argument} must be a finite number of seconds since the epoch, not {value!r:.40}",
        )
    return float(value)


def check_ops(ops: object, argument: str = "ops") -> list[dict[str, Any]]:
    """A JSON Patch (RFC 6902): a list of operation objects, each well formed.

    Whether the ops *apply* to the agent's document is checked when they are applied
    (:class:`~statekeeper.errors.PatchError`); here only their shape."""
    if ops is None:
        return []
    if not isinstance(ops, list | tuple):
        raise InvalidArgument(
            argument,
            f"{argument} must be a list of JSON Patch operations, not {type(ops).__name__}",
        )
    for index, op in enumerate(ops):
        where = f"{argument}[{index}]"
        if not isinstance(op, Mapping):
            raise InvalidArgument(
                where, f"{where} must be a JSON Patch operation (a dict), not {type(op).__name__}"
            )
        kind = op.get("op")
        if kind not in _OPS:
            raise InvalidArgument(
                f"{where}.op", f"{where}.op must be one of {sorted(_OPS)}, not {kind!r:.40}"
            )
        for key in ("path", "from") if kind in _NEEDS_FROM else ("path",):
            pointer = op.get(key)
            if not isinstance(pointer, str) or (pointer and not pointer.startswith("/")):
                raise InvalidArgument(
                    f"{where}.{key}",
                    f"{where}.{key} must be a JSON pointer ('' or starting with '/'), "
                    f"not {pointer!r:.40}",
                )
        if kind in _NEEDS_VALUE and "value" not in op:
            raise InvalidArgument(f"{where}.value", f"{where}.value is missing ({kind} needs one)")
    return [dict(op) for op in ops]
