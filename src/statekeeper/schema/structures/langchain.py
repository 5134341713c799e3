"""Lossless conversion between :class:`~.conversation.Message` and LangChain messages.

``from_langchain(to_langchain(m)) == m`` and ``to_langchain(from_langchain(lc))``
serialises exactly as ``lc`` does (``message_to_dict``): fields with a place in
``Message`` map to it (``content``, ``name``, ``id``, ``tool_calls``,
``tool_call_id``), LangChain's other non-default fields are kept in ``Message.lc``,
and ``Message``'s own extras (``tokens``, ``created_at``, ``metadata``) ride in the
LangChain message's ``response_metadata["statekeeper"]``, which providers never see.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...errors import InvalidArgument

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage

    from .conversation import Message

__all__ = ["from_langchain", "to_langchain"]

_ROLE_OF = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}
_TYPE_OF = {v: k for k, v in _ROLE_OF.items()} | {"function": "function"}
_CHUNK = {"AIMessageChunk": "assistant", "HumanMessageChunk": "user",
          "SystemMessageChunk": "system", "ToolMessageChunk": "tool",
          "FunctionMessageChunk": "function", "ChatMessageChunk": None}  # fmt: skip
_HANDLED = frozenset({"content", "name", "id", "type", "tool_calls", "tool_call_id", "role"})
_OURS = "statekeeper"


def _role(kind: str, data: dict[str, Any]) -> str:
    if kind in _ROLE_OF:
        return _ROLE_OF[kind]
    if kind == "function":
        return "function"
    if kind in ("chat",) or (kind in _CHUNK and _CHUNK[kind] is None):
        return str(data.get("role") or "chat")
    if kind in _CHUNK:
        return str(_CHUNK[kind])
    raise InvalidArgument(
        "message", f"LangChain message type {kind!r} is not a conversation message"
    )


def from_langchain(message: BaseMessage) -> Message:
    """A LangChain message as a :class:`Message`."""
    from langchain_core.messages import message_to_dict

    from .conversation import Message, ToolCall

    dumped = message_to_dict(message)
    kind, data = dumped["type"], dict(dumped["data"])
    role = _role(kind, data)
    fields = type(message).model_fields
    lc: dict[str, Any] = {}
    if _TYPE_OF.get(role, "chat") != kind:
        lc["type"] = kind  # a chunk, or a custom role that is not a ChatMessage
    metadata = dict(data.get("response_metadata") or {})
    ours = metadata.pop(_OURS, None) or {}
    data["response_metadata"] = metadata
    for key, value in data.items():
        if key in _HANDLED:
            continue
        field = fields.get(key)
        if field is not None and value == field.get_default(call_default_factory=True):
            continue
        lc[key] = value
    calls = [
        ToolCall(id=c.get("id"), name=c["name"], args=dict(c.get("args") or {}))
        for c in data.get("tool_calls") or []
    ]
    return Message(
        role=role,
        content=data.get("content", ""),
        name=data.get("name"),
        id=data.get("id"),
        tool_calls=calls,
        tool_call_id=data.get("tool_call_id"),
        tokens=ours.get("tokens"),
        created_at=ours.get("created_at"),
        metadata=ours.get("metadata") or {},
        lc=lc,
    )


def to_langchain(message: Message) -> BaseMessage:
    """A :class:`Message` as a LangChain message object."""
    from langchain_core.messages import messages_from_dict

    lc = dict(message.lc)
    kind = lc.pop("type", None) or _TYPE_OF.get(message.role, "chat")
    data: dict[str, Any] = {"content": message.content, "name": message.name, "id": message.id}
    data.update(lc)
    if kind == "chat" or (kind in _CHUNK and _CHUNK[kind] is None):
        data["role"] = message.role
    if message.tool_calls:
        data["tool_calls"] = [
            {"name": c.name, "args": c.args, "id": c.id, "type": "tool_call"}
            for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        data["tool_call_id"] = message.tool_call_id
    ours: dict[str, Any] = {}
    if message.tokens is not None:
        ours["tokens"] = message.tokens
    if message.created_at is not None:
        ours["created_at"] = message.created_at
    if message.metadata:
        ours["metadata"] = message.metadata
    if ours:
        data["response_metadata"] = {**(data.get("response_metadata") or {}), _OURS: ours}
    return messages_from_dict([{"type": kind, "data": data}])[0]
