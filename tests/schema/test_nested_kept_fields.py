"""Keys a nested model does not declare survive typed writes and migrations, at any
depth and inside lists (they were dropped without a word: only top-level keys were
carried). Where a list's items cannot be matched, the loss is reported, never silent."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict

from statekeeper import StateStore
from statekeeper.errors import UndeclaredKeysDropped
from statekeeper.schema import ModelSchema, SchemaRegistry, TypedStates
from statekeeper.schema.migrate import migrate


class Address(BaseModel):
    city: str


class Step(BaseModel):
    name: str
    done: bool = False


class Hint(TypedDict):
    text: str


@dataclasses.dataclass
class Cost:
    cents: int


class Plan(BaseModel):
    title: str
    address: Address
    steps: list[Step] = Field(default_factory=list)
    by_tool: dict[str, Step] = Field(default_factory=dict)
    hints: list[Hint] = Field(default_factory=list)
    cost: Cost | None = None
    maybe: Address | None = None


def _stored() -> dict[str, Any]:
    """A plan as a newer writer stored it: a key Plan's code does not know in every
    nested object."""
    return {
        "$model": "plan",
        "title": "t",
        "address": {"city": "Oslo", "zip": "0150", "geo": {"lat": 59.9}},
        "steps": [
            {"name": "a", "done": False, "owner": "ann"},
            {"name": "b", "done": False, "owner": "bob"},
            {"name": "c", "done": False, "owner": "cy"},
        ],
        "by_tool": {"search": {"name": "s", "done": True, "retries": 2}},
        "hints": [{"text": "h", "lang": "en"}],
        "cost": {"cents": 5, "currency": "EUR"},
        "maybe": {"city": "Rome", "zip": "00100"},
    }


def _schema(model: Any = Plan, version: int = 1) -> ModelSchema[Any]:
    return SchemaRegistry().register(model, name="plan", version=version)


async def _seed(store: StateStore) -> None:
    await store.save("p-1", _stored(), schema_version=1)


async def test_an_agent_write_keeps_nested_undeclared_keys_at_every_depth() -> None:
    async with StateStore("memory://") as store:
        await _seed(store)
        agent = await store.agent("p-1", model=_schema())
        agent.state.title = "renamed"
        agent.state.address.city = "Bergen"
        agent.state.steps[1].done = True
        agent.state.by_tool["search"].done = False
        agent.state.hints[0]["text"] = "h2"
        assert agent.state.cost is not None
        agent.state.cost.cents = 7
        await agent.save()
        agent.state.steps[0].done = True  # a second write, from the written state
        await agent.save()
        data = (await store.load("p-1")).data
        assert data["title"] == "renamed"
        assert data["address"] == {"city": "Bergen", "zip": "0150", "geo": {"lat": 59.9}}
        assert [(s["name"], s["done"], s["owner"]) for s in data["steps"]] == [
            ("a", True, "ann"),
            ("b", True, "bob"),
            ("c", False, "cy"),
        ]
        assert data["by_tool"] == {"search": {"name": "s", "done": False, "retries": 2}}
        assert data["hints"] == [{"text": "h2", "lang": "en"}]
        assert data["cost"] == {"cents": 7, "currency": "EUR"}
        assert data["maybe"] == {"city": "Rome", "zip": "00100"}


async def test_typed_states_save_keeps_nested_undeclared_keys() -> None:
    async with StateStore("memory://") as store:
        await _seed(store)
        typed = TypedStates(store, _schema())
        plan = await typed.load("p-1")
        plan.address.city = "Bergen"
        await typed.save("p-1", plan)
        # a whole new state: the objects at the same places keep theirs
        await typed.save(
            "p-1", Plan(title="new", address=Address(city="X"), steps=[Step(name="a")])
        )
        data = (await store.load("p-1")).data
        assert data["address"] == {"city": "X", "zip": "0150", "geo": {"lat": 59.9}}
        assert data["steps"] == [{"name": "a", "done": False, "owner": "ann"}]
        assert "cost" in data and data["cost"] is None  # set to None by the writer: gone


async def test_list_items_keep_their_keys_when_reordered_removed_or_inserted() -> None:
    async with StateStore("memory://") as store:
        await _seed(store)
        agent = await store.agent("p-1", model=_schema())
        steps = agent.state.steps
        steps.reverse()  # moved
        await agent.save()
        owners = [(s["name"], s["owner"]) for s in (await store.load("p-1")).data["steps"]]
        assert owners == [("c", "cy"), ("b", "bob"), ("a", "ann")]
        del agent.state.steps[1]  # removed: its keys go with it
        agent.state.steps.insert(0, Step(name="new"))  # inserted: has none
        await agent.save()
        data = (await store.load("p-1")).data["steps"]
        assert data == [
            {"name": "new", "done": False},
            {"name": "c", "done": False, "owner": "cy"},
            {"name": "a", "done": False, "owner": "ann"},
        ]
        agent.state.steps[1].done = True  # edited in place, and one moved elsewhere
        agent.state.steps.append(agent.state.steps.pop(0))
        await agent.save()
        data = (await store.load("p-1")).data["steps"]
        assert data == [
            {"name": "c", "done": True, "owner": "cy"},
            {"name": "a", "done": False, "owner": "ann"},
            {"name": "new", "done": False},
        ]


async def test_items_that_cannot_be_matched_are_reported_not_dropped_silently() -> None:
    async with StateStore("memory://") as store:
        await _seed(store)
        typed = TypedStates(store, _schema())
        # a new state: two items edited and one of three removed? which is which?
        plan = Plan(
            title="t", address=Address(city="Oslo"), steps=[Step(name="a2"), Step(name="b2")]
        )
        with pytest.warns(UndeclaredKeysDropped) as caught:
            await typed.save("p-1", plan)
        warning = caught[0].message
        assert isinstance(warning, UndeclaredKeysDropped)
        assert (warning.agent_id, warning.model, warning.paths) == ("p-1", "plan", ["steps"])
        assert "ann" not in str(warning)  # never a value
        data = (await store.load("p-1")).data
        assert data["steps"] == [{"name": "a2", "done": False}, {"name": "b2", "done": False}]
        assert data["address"]["zip"] == "0150"  # the rest is kept


async def test_a_migration_keeps_nested_undeclared_keys() -> None:
    class PlanV2(Plan):
        priority: int = 0

    v2 = _schema(PlanV2, version=2)

    @v2.upcaster(from_version=1)
    def up(doc: dict[str, Any]) -> dict[str, Any]:
        doc["priority"] = 1
        return doc

    async with StateStore("memory://") as store:
        await _seed(store)
        report = await migrate(store, v2)
        assert report.ok and report.changed == 1
        data = (await store.load("p-1")).data
        expected = {**_stored(), "priority": 1}
        assert data == expected


async def test_a_typed_save_makes_no_read_of_its_own() -> None:
    """TypedStates.save read the stored state (store.get) before every save to carry
    its undeclared keys: a validated cache hit costs a head read on PostgreSQL/Redis.
    The keys are now carried onto the record the save itself writes on."""

    class Leaf(BaseModel):
        model_config = ConfigDict(extra="forbid")
        x: int

    class Whole(BaseModel):
        model_config = ConfigDict(extra="allow")
        leaves: list[Leaf] = Field(default_factory=list)

    assert not _schema(Whole).adapter.carries  # nothing to carry anywhere
    assert _schema(Plan).adapter.carries
    async with StateStore("memory://") as store:
        await _seed(store)
        typed = TypedStates(store, _schema())
        plan = await typed.load("p-1")
        reads = 0
        get = store.get

        async def counting(agent_id: str) -> Any:
            nonlocal reads
            reads += 1
            return await get(agent_id)

        store.get = counting  # type: ignore[method-assign]
        plan.address.city = "Bergen"
        await typed.save("p-1", plan)
        await TypedStates(store, _schema(Whole)).save("w", Whole(leaves=[Leaf(x=2)]))
        assert reads == 0
        store.get = get  # type: ignore[method-assign]
        data = (await store.load("p-1")).data
        assert data["address"] == {"city": "Bergen", "zip": "0150", "geo": {"lat": 59.9}}


async def test_keys_another_writer_added_since_the_cache_was_filled_are_kept(
    tmp_path: Any,
) -> None:
    """Two stores on one file (two processes): the typed save carries the keys onto the
    state it writes on, re-read after its cached one turned out stale."""
    url = f"sqlite:///{tmp_path / 'two.db'}"
    async with StateStore(url) as mine, StateStore(url) as other:
        await _seed(mine)
        typed = TypedStates(mine, _schema())
        plan = await typed.load("p-1")  # cached here
        doc = (await other.load("p-1")).data
        doc["address"]["floor"] = 3  # another writer adds a nested key meanwhile
        await other.save("p-1", doc, schema_version=1)
        plan.title = "mine"
        await typed.save("p-1", plan)
        data = (await other.load("p-1")).data
        assert data["title"] == "mine" and data["address"]["floor"] == 3


def test_no_warning_when_items_are_only_removed() -> None:
    from statekeeper.schema.carry import Carrier

    state = Plan(title="t", address=Address(city="c"), steps=[Step(name="b")])
    new = state.model_dump(mode="json")
    old = {**new, "steps": [{"name": s, "done": False, "k": 1} for s in "abc"]}
    carrier = Carrier()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = carrier.merge(Plan, state, new, old)
    assert out["steps"] == [{"name": "b", "done": False, "k": 1}]
    assert carrier.dropped == []
    assert new["steps"] == [{"name": "b", "done": False}]  # the input is not changed


class Notes(BaseModel):
    hints: list[Hint] = Field(default_factory=list)
    costs: list[Cost] = Field(default_factory=list)


async def test_a_list_of_typeddicts_or_dataclasses_that_grew_saves() -> None:
    """A save validates a grown list's new items only; for items typed as a TypedDict or
    a dataclass that raised pydantic's own PydanticUserError (not a statekeeper error)
    and wrote nothing."""
    async with StateStore("memory://") as store:
        agent = await store.agent("n", model=_schema(Notes), initial_state=Notes())
        await agent.save()
        agent.state.hints.append({"text": "a"})
        agent.state.costs.append(Cost(cents=1))
        await agent.save()
        assert (await store.load("n")).data["hints"] == [{"text": "a"}]
        assert (await store.load("n")).data["costs"] == [{"cents": 1}]


async def test_items_are_followed_by_identity_from_a_typed_load_to_its_save() -> None:
    """What the state loaded holds is matched by object: moved *and* edited in one
    write, each item keeps its own keys; one taken out of the state is removed (its
    keys with it, no warning)."""
    async with StateStore("memory://") as store:
        await _seed(store)
        for use_agent in (True, False):
            await store.save("p-1", _stored(), schema_version=1)
            typed = TypedStates(store, _schema())
            agent = await store.agent("p-1", model=_schema()) if use_agent else None
            plan = agent.state if agent is not None else await typed.load("p-1")
            _a, b, c = plan.steps
            b.done = True
            c.name = "c2"
            plan.steps = [c, Step(name="new"), b]  # a removed, c and b moved and edited
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                if agent is not None:
                    await agent.save()
                else:
                    await typed.save("p-1", plan)
            assert (await store.load("p-1")).data["steps"] == [
                {"name": "c2", "done": False, "owner": "cy"},
                {"name": "new", "done": False},
                {"name": "b", "done": True, "owner": "bob"},
            ], use_agent
