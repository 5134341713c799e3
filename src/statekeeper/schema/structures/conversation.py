"""``Conversation``: messages with roles, tool calls and results, token counts, and
summaries of trimmed history — interoperable with LangChain message objects.

Stored efficiently: a message appended to a conversation of any length is written as
one JSON Patch ``add …/messages/-`` op holding that message only (see
``benchmarks/bench_schema.py`` for the measured bytes).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ...errors import InvalidArgument

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage

__all__ = ["Conversation", "Message", "Summary", "ToolCall"]


class ToolCall(BaseModel):
    """A tool the assistant asked to run: ``id`` links it to its result message."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    name: str
    args: dict[str, Any] = Field(default_factory=dict)


class Message(BaseModel):
    """One message. ``role`` is ``"user"``, ``"assistant"``, ``"system"``, ``"tool"``
    (a tool's result, with ``tool_call_id``), ``"function"`` or any custom role.

    ``tokens`` is the message's token count when known; ``metadata`` is free-form
    application data; ``lc`` keeps the LangChain fields that have no place above
    (``additional_kwargs``, ``usage_metadata``, ``artifact``…) so that conversion to
    and from LangChain loses nothing.
    """

    model_config = ConfigDict(extra="forbid")

    role: str
    content: str | list[str | dict[str, Any]] = ""
    name: str | None = None
    id: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    tokens: int | None = Field(default=None, ge=0)
    created_at: float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    lc: dict[str, Any] = Field(default_factory=dict)

    @field_validator("role")
    @classmethod
    def _role(cls, value: str) -> str:
        if not value:
            raise ValueError("role must not be empty")
        return value

    @property
    def text(self) -> str:
        """The message's text (the text parts of a multi-part content, joined)."""
        if isinstance(self.content, str):
            return self.content
        parts = []
        for part in self.content:
            if isinstance(part, str):
                parts.append(part)
            elif part.get("type") == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "".join(parts)

    def to_langchain(self) -> BaseMessage:
        """This message as a LangChain message object (lossless, see the module docs)."""
        from .langchain import to_langchain

        return to_langchain(self)

    @classmethod
    def from_langchain(cls, message: BaseMessage) -> Message:
        """A LangChain message object as a :class:`Message` (lossless)."""
        from .langchain import from_langchain

        return from_langchain(message)


class Summary(BaseModel):
    """A summary standing in for ``messages`` messages trimmed from the history."""

    model_config = ConfigDict(extra="forbid")

    text: str
    messages: int = Field(ge=0)
    tokens: int | None = Field(default=None, ge=0)
    created_at: float | None = None


def _message(item: Message | BaseMessage | Mapping[str, Any]) -> Message:
    if isinstance(item, Message):
        return item
    if isinstance(item, Mapping):
        return Message.model_validate(item)
    try:
        from langchain_core.messages import BaseMessage
    except ImportError:  # pragma: no cover - without LangChain only the above apply
        BaseMessage = ()  # type: ignore[assignment,misc]
    if isinstance(item, BaseMessage):
        return Message.from_langchain(item)
    raise InvalidArgument(
        "message",
        f"a message must be a Message, a LangChain message or a mapping, not {type(item).__name__}",
    )


class Conversation(BaseModel):
    """An agent's conversation: messages in order, plus summaries of trimmed history.

    >>> c = Conversation()
    >>> _ = c.add("user", "hi", tokens=2)
    >>> _ = c.add("assistant", "hello!", tokens=3)
    >>> len(c), c.tokens, c.last().text
    (2, 5, 'hello!')
    """

    model_config = ConfigDict(extra="forbid")

    messages: list[Message] = Field(default_factory=list)
    summaries: list[Summary] = Field(default_factory=list)
    #: how many messages were trimmed (replaced by summaries) so far
    trimmed: int = Field(default=0, ge=0)

    def __len__(self) -> int:
        return len(self.messages)

    @property
    def tokens(self) -> int:
        """Tokens of the kept messages and of the summaries (those with a count)."""
        return sum(m.tokens or 0 for m in self.messages) + sum(
            s.tokens or 0 for s in self.summaries
        )

    def add(
        self, role: str, content: str | list[str | dict[str, Any]] = "", **fields: Any
    ) -> Message:
        """Append a message built from ``role``, ``content`` and :class:`Message` fields."""
        fields.setdefault("created_at", time.time())
        message = Message(role=role, content=content, **fields)
        self.messages.append(message)
        return message

    def append(self, message: Message | BaseMessage | Mapping[str, Any]) -> Message:
        """Append a :class:`Message`, a LangChain message or a mapping of fields."""
        converted = _message(message)
        self.messages.append(converted)
        return converted

    def extend(self, messages: Iterable[Message | BaseMessage | Mapping[str, Any]]) -> None:
        """Append several messages."""
        for message in messages:
            self.append(message)

    def last(self, role: str | None = None) -> Message | None:
        """The last message (of ``role``), or None."""
        for message in reversed(self.messages):
            if role is None or message.role == role:
                return message
        return None

    def result_of(self, call_id: str) -> Message | None:
        """The tool result message answering the tool call ``call_id``, or None."""
        for message in self.messages:
            if message.role == "tool" and message.tool_call_id == call_id:
                return message
        return None

    def pending_tool_calls(self) -> list[ToolCall]:
        """Tool calls of assistant messages that have no result message yet."""
        answered = {m.tool_call_id for m in self.messages if m.role == "tool"}
        return [
            call
            for m in self.messages
            for call in m.tool_calls
            if call.id is None or call.id not in answered
        ]

    def trim(self, keep: int, summary: str, *, tokens: int | None = None) -> Summary:
        """Replace all but the last ``keep`` messages by a summary of them."""
        if type(keep) is not int or keep < 0:
            raise InvalidArgument("keep", f"keep must be an int >= 0, not {keep!r}")
        dropped = max(len(self.messages) - keep, 0)
        record = Summary(text=summary, messages=dropped, tokens=tokens, created_at=time.time())
        self.messages = self.messages[dropped:]
        self.summaries.append(record)
        self.trimmed += dropped
        return record

    def to_langchain(self, *, with_summaries: bool = False) -> list[BaseMessage]:
        """The messages as LangChain objects (with ``with_summaries``, preceded by one
        system message holding the summaries of trimmed history)."""
        out = [m.to_langchain() for m in self.messages]
        if with_summaries and self.summaries:
            from langchain_core.messages import SystemMessage

            text = "\n\n".join(s.text for s in self.summaries)
            out.insert(0, SystemMessage(f"Summary of the earlier conversation:\n{text}"))
        return out

    @classmethod
    def from_langchain(cls, messages: Iterable[BaseMessage]) -> Conversation:
        """A conversation of LangChain message objects (lossless)."""
        return cls(messages=[Message.from_langchain(m) for m in messages])
