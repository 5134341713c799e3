"""Typed agent state that can evolve: models, schema versions, upcasters, migrations.

* :mod:`.models` — pydantic v2 models, dataclasses and TypedDicts as agent state;
* :mod:`.registry` — a model's name, version, upcasters and downcasters;
* :mod:`.agent` — :class:`TypedAgent` (``store.agent(id, model=M)``) and
  :class:`TypedStates` (typed ``load``/``save``); :mod:`.sync` — :class:`SyncTypedStates`,
  the same over a ``SyncStateStore``;
* :mod:`.events` — event and machine schema evolution (renamed states, events, data);
* :mod:`.migrate` — bulk migrations with dry run, resume and verify; :mod:`.rewrite`
  — the in-place rewrite of head records they use; :mod:`.rollback` — rollback and
  finalize; :mod:`.report` — reports, journals and the page loop;
* :mod:`.compat` — the old/new application compatibility matrix;
* :mod:`.structures` — built-in ``Conversation``, ``Task`` and ``Session``.

See ``docs/schema.md``.
"""

from .agent import TypedAgent, TypedSnapshot, TypedStates, open_typed_agent
from .models import MODEL_KEY, ModelAdapter
from .registry import (
    Caster,
    EventCaster,
    ModelSchema,
    SchemaRegistry,
    downcaster,
    register,
    registry,
    schema_of,
    upcaster,
)
from .sync import SyncTypedStates

__all__ = [
    "MODEL_KEY",
    "Caster",
    "EventCaster",
    "ModelAdapter",
    "ModelSchema",
    "SchemaRegistry",
    "SyncTypedStates",
    "TypedAgent",
    "TypedSnapshot",
    "TypedStates",
    "downcaster",
    "open_typed_agent",
    "register",
    "registry",
    "schema_of",
    "upcaster",
]
