"""The query parameters every agent route reads: the agent's id and seq numbers,
checked (a bad one is :class:`~statekeeper.errors.InvalidArgument` naming it)."""

from __future__ import annotations

from collections.abc import Mapping

from ..arguments import check_agent_id, check_seq
from ..errors import InvalidArgument

__all__ = ["agent_id_of", "seq_of"]


def seq_of(params: Mapping[str, str], name: str, *, optional: bool = False) -> int | None:
    text = params.get(name, "").strip()
    if not text:
        if optional:
            return None
        raise InvalidArgument(name, f"{name} is required (a seq number)")
    try:
        value = int(text)
    except ValueError:
        raise InvalidArgument(name, f"{name} must be a whole number, not {text[:40]!r}") from None
    check_seq(value, name, minimum=1)
    return value


def agent_id_of(params: Mapping[str, str]) -> str:
    if "id" not in params:
        raise InvalidArgument("id", "which agent? (the id parameter is missing)")
    return check_agent_id(params["id"], "id")
