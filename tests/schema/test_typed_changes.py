"""Typed saves validate what changed (issue 14: a message appended to a long
conversation costs the validation of that message, not of the conversation) and
still refuse every invalid new input, naming the field in the whole document."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from statekeeper import StateStore
from statekeeper.errors import ValidationError
from statekeeper.schema.structures import Conversation, Message, Session

CHECKED = {"n": 0}


class Item(BaseModel):
    text: str
    weight: int = Field(default=1, ge=0)

    @field_validator("text")
    @classmethod
    def _count(cls, value: str) -> str:
        CHECKED["n"] += 1
        if not value:
            raise ValueError("text must not be empty")
        return value


class Log(BaseModel):
    items: list[Item] = Field(default_factory=list)
    total: int = Field(default=0, ge=0)
    name: str = "log"


class Checked(BaseModel):
    """A model with a validator across fields: every save validates it whole."""

    items: list[Item] = Field(default_factory=list)
    limit: int = 10

    @model_validator(mode="after")
    def _within(self) -> Checked:
        if len(self.items) > self.limit:
            raise ValueError("too many items")
        return self


async def test_appending_to_a_list_validates_the_new_items_only() -> None:
    async with StateStore("memory://") as store:
        log = Log(items=[Item(text=f"t{i}") for i in range(300)])
        agent = await store.agent("a", model=Log, initial_state=log)
        agent.state.items.append(Item.model_construct(text="new", weight=2))
        CHECKED["n"] = 0
        await agent.save()
        assert CHECKED["n"] == 1  # not 301
        agent.state.total = 5
        CHECKED["n"] = 0
        await agent.save()
        assert CHECKED["n"] == 0  # the list did not change
        assert (await store.load("a")).data["total"] == 5


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda s: s.items.append(Item.model_construct(text="", weight=1)), "items[3].text"),
        (lambda s: s.items.append(Item.model_construct(text="x", weight=-1)), "items[3].weight"),
        (lambda s: setattr(s.items[1], "weight", -4), "items[1].weight"),  # in place
        (lambda s: s.items.insert(0, Item.model_construct(text="")), "items[0].text"),
        (lambda s: setattr(s, "total", -1), "total"),
        (lambda s: setattr(s, "name", 12), "name"),
    ],
)
async def test_every_invalid_change_is_refused_naming_its_field(change: object, field: str) -> None:
    async with StateStore("memory://") as store:
        agent = await store.agent(
            "a", model=Log, initial_state=Log(items=[Item(text=f"t{i}") for i in range(3)])
        )
        head = await store.head("a")
        change(agent.state)  # type: ignore[operator]
        with pytest.raises(ValidationError) as caught:
            await agent.save()
        assert caught.value.fields == [field]
        assert await store.head("a") == head  # nothing written
        await agent.refresh()


class Tags(BaseModel):
    model_config = ConfigDict(str_max_length=5, strict=True)

    tags: list[str] = Field(default_factory=list)
    count: int = 0


async def test_the_models_config_applies_to_the_fields_validated_alone() -> None:
    async with StateStore("memory://") as store:
        agent = await store.agent("t", model=Tags, initial_state=Tags(tags=["a"]))
        agent.state.tags.append("much-too-long")
        with pytest.raises(ValidationError) as caught:
            await agent.save()
        assert caught.value.fields == ["tags[1]"]
        await agent.refresh()
        agent.state.count = "3"  # type: ignore[assignment]  # strict: no coercion
        with pytest.raises(ValidationError):
            await agent.save()
        await agent.refresh()


async def test_a_model_with_a_cross_field_validator_is_validated_whole() -> None:
    async with StateStore("memory://") as store:
        agent = await store.agent("c", model=Checked, initial_state=Checked(limit=2))
        agent.state.items += [Item(text="a"), Item(text="b")]
        await agent.save()
        agent.state.limit = 1  # valid on its own; the model validator refuses it
        with pytest.raises(ValidationError):
            await agent.save()
        session = await store.agent(
            "s", model=Session, initial_state=Session(user_id="u", started_at=10, last_seen=10)
        )
        session.state.last_seen = 5.0
        with pytest.raises(ValidationError):
            await session.save()
        await agent.refresh()
        await session.refresh()


async def test_a_conversation_append_is_stored_and_reloads() -> None:
    async with StateStore("memory://") as store:
        chat = Conversation()
        for i in range(50):
            chat.add("user", f"m{i}", tokens=1)
        agent = await store.agent("chat", model=Conversation, initial_state=chat)
        for i in range(3):
            agent.state.add("assistant", f"r{i}", tokens=2)
            await agent.save()
        agent.state.messages.append(Message.model_construct(role="", content="x"))
        with pytest.raises(ValidationError) as caught:
            await agent.save()
        assert caught.value.fields == ["messages[53].role"]
        await agent.refresh()
        again = await store.agent("chat", model=Conversation)
        assert len(again.state.messages) == 53 and again.state.messages[-1].text == "r2"
