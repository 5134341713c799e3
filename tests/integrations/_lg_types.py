"""State types for the custom-type tests (a module both the test and its child
process import, as an application's graph module would be)."""

from __future__ import annotations

import dataclasses
import enum
import operator
from typing import Annotated, Any, TypedDict

import pydantic
from langgraph.graph import START, StateGraph


@dataclasses.dataclass
class Order:
    item: str
    qty: int


class Customer(pydantic.BaseModel):
    name: str
    tier: int = 1


class Stage(enum.Enum):
    NEW = "new"
    PAID = "paid"


class ShopState(TypedDict, total=False):
    order: Order
    customer: Customer
    stage: Stage
    seen: Annotated[list[str], operator.add]


def shop_builder() -> StateGraph[Any]:
    """A node that needs real objects: it fails on dicts (``.qty`` of a dict)."""

    def step(state: ShopState) -> dict[str, Any]:
        order, customer, stage = state["order"], state["customer"], state["stage"]
        kinds = f"{type(order).__name__}/{type(customer).__name__}/{type(stage).__name__}"
        return {
            "order": Order(order.item, order.qty + 1),
            "customer": Customer(name=customer.name, tier=customer.tier + 1),
            "stage": Stage.PAID,
            "seen": [kinds],
        }

    builder = StateGraph(ShopState)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    return builder
