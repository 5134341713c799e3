"""What mypy must see (checked by test_typing.py; not run)."""

from __future__ import annotations

from typing_extensions import reveal_type

from statekeeper import StateStore
from statekeeper.schema import TypedStates
from statekeeper.schema.structures import Conversation

from .apps import NotesDC, NotesTD, SupportV1, support_v2


async def cases(store: StateStore) -> None:
    typed = await store.agent("a-1", model=SupportV1)
    reveal_type(typed)  # R1
    reveal_type(typed.state)  # R2
    reveal_type(typed.state.customer_name)  # R3
    from_schema = await store.agent("a-2", model=support_v2)
    reveal_type(from_schema.state)  # R4
    dc = await store.agent("a-3", model=NotesDC)
    reveal_type(dc.state.notes)  # R5
    td = await store.agent("a-4", model=NotesTD)
    reveal_type(td.state)  # R6
    plain = await store.agent("a-5")
    reveal_type(plain)  # R7
    chat = await TypedStates(store, Conversation).load("c-1")
    reveal_type(chat)  # R8
    typed.state.no_such_field  # E1
    typed.state = NotesDC(owner="o")  # E2
