"""Two versions of one application's state model, as two deployments see them.

``v1``: ``Support(customer_name, priority: str, tags)``. ``v2`` renamed
``customer_name`` to ``customer``, turned ``priority`` into an int and added
``escalated`` (default False); it ships an upcaster 1→2 and a downcaster 2→1. ``v2_bare``
is v2 without its casters (a rename forgotten); ``v3`` adds ``language`` on top of v2
(casters 1→2→3 and back). Importable by the CLI (``--app
tests.schema.apps:v2``).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from statekeeper.schema import SchemaRegistry

PRIORITIES = {"low": 1, "normal": 2, "high": 3}


class SupportV1(BaseModel):
    customer_name: str
    priority: str = "normal"
    tags: list[str] = Field(default_factory=list)


class SupportV2(BaseModel):
    customer: str
    priority: int = 2
    tags: list[str] = Field(default_factory=list)
    escalated: bool = False


v1 = SchemaRegistry()
support_v1 = v1.register(SupportV1, name="support", version=1)

v2 = SchemaRegistry()
support_v2 = v2.register(SupportV2, name="support", version=2)


#: a test that kills a migration mid-run names a file here (the child's environment):
#: the upcast of customer :data:`GATED` creates it and never returns, so the process is
#: killed at that agent, wherever the machine's load has put the parent
GATE = "SK_TEST_MIGRATE_GATE"
GATED = "c1500"
#: with this file named too, the gated upcast waits for it to exist, then returns (a
#: test that interrupts the run with Ctrl-C: the loop then handles the signal)
GO = "SK_TEST_MIGRATE_GO"


@support_v2.upcaster(from_version=1)
def _v1_to_v2(doc: dict[str, Any]) -> dict[str, Any]:
    gate = os.environ.get(GATE)
    if gate and doc.get("customer_name") == GATED:
        Path(gate).touch()
        go = os.environ.get(GO)
        while go and not Path(go).exists():  # wait for the condition
            time.sleep(0.01)
        if not go:
            threading.Event().wait()  # (the test SIGKILLs the process here)
    doc["customer"] = doc.pop("customer_name")
    doc["priority"] = PRIORITIES[doc.get("priority", "normal")]
    doc.setdefault("escalated", False)
    return doc


@support_v2.downcaster(from_version=2)
def _v2_to_v1(doc: dict[str, Any]) -> dict[str, Any]:
    doc["customer_name"] = doc.pop("customer")
    names = {v: k for k, v in PRIORITIES.items()}
    doc["priority"] = names.get(doc.get("priority", 2), "normal")
    doc.pop("escalated", None)
    return doc


def upgraded(old: SupportV1) -> SupportV2:
    """What the v2 code writes for the agent v1 code stored as ``old``."""
    return SupportV2(
        customer=old.customer_name, priority=PRIORITIES[old.priority], tags=list(old.tags)
    )


class SupportV3(BaseModel):
    customer: str
    priority: int = 2
    tags: list[str] = Field(default_factory=list)
    escalated: bool = False
    language: str = "en"


# v3 (a later release): adds ``language``; upcasters 1→2→3, downcasters 3→2→1
v3 = SchemaRegistry()
support_v3 = v3.register(SupportV3, name="support", version=3)
support_v3.upcaster(from_version=1)(_v1_to_v2)
support_v3.downcaster(from_version=2)(_v2_to_v1)


@support_v3.upcaster(from_version=2)
def _v2_to_v3(doc: dict[str, Any]) -> dict[str, Any]:
    doc.setdefault("language", "en")
    return doc


@support_v3.downcaster(from_version=3)
def _v3_to_v2(doc: dict[str, Any]) -> dict[str, Any]:
    doc.pop("language", None)
    return doc


# v1 code that has the downcaster (deployed before the rollout, to read v2 data)
v1_with_downcaster = SchemaRegistry()
support_v1_dc = v1_with_downcaster.register(SupportV1, name="support", version=1)
support_v1_dc.downcaster(from_version=2)(_v2_to_v1)

v2_bare = SchemaRegistry()
support_v2_bare = v2_bare.register(SupportV2, name="support", version=2)


@dataclass
class NotesDC:
    owner: str
    notes: list[str] = field(default_factory=list)


class NotesTD(TypedDict):
    owner: str
    notes: list[str]
