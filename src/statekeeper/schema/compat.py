"""The compatibility matrix of a rollout: every pair of application versions that
run against one store at the same time, for every model they share.

For each (writer, reader) pair and each sample state, the writer stores the sample
(through its own model and version) and the reader loads it. The outcome is

* ``"ok"`` — the reader got what its own code would have written for that agent
  (``expected(reader_registry, sample)``, compared as documents);
* ``"refused"`` — a typed :class:`~statekeeper.errors.SchemaError` (for instance an old
  reader without a downcaster): safe, never a wrong value;
* ``"WRONG"`` — the reader got a state that differs from the expected one: a bug in a
  caster, which the matrix test turns into a failure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import SchemaError
from .registry import SchemaRegistry

__all__ = ["Cell", "compatibility_matrix"]


@dataclass(frozen=True, slots=True)
class Cell:
    """One (model, writer, reader, sample) outcome."""

    model: str
    writer: str
    reader: str
    sample: int
    outcome: str
    detail: str = ""


def compatibility_matrix(
    apps: Mapping[str, SchemaRegistry],
    samples: Mapping[str, list[Callable[[str], Any]]],
) -> list[Cell]:
    """Run every writer/reader pair of ``apps`` (name → registry) for every model
    name in ``samples``. ``samples[model]`` lists functions ``make(app_name)`` that
    return the sample as that application's model instance (the same agent, written
    by each version's code). Pure: documents are cast in memory exactly as a store
    load casts them (see :meth:`~statekeeper.schema.ModelSchema.load`)."""
    cells: list[Cell] = []
    for model, makers in samples.items():
        for writer, wreg in apps.items():
            wschema = wreg.find(model)
            if wschema is None:
                continue
            for reader, rreg in apps.items():
                rschema = rreg.find(model)
                if rschema is None:
                    continue
                for index, make in enumerate(makers):
                    stored = wschema.dump(make(writer))
                    expected = rschema.dump(make(reader))
                    try:
                        got = rschema.dump(rschema.load(stored, wschema.version))
                    except SchemaError as exc:
                        cells.append(
                            Cell(model, writer, reader, index, "refused", type(exc).__name__)
                        )
                        continue
                    outcome = "ok" if got == expected else "WRONG"
                    detail = "" if outcome == "ok" else f"got {got!r}, expected {expected!r}"
                    cells.append(Cell(model, writer, reader, index, outcome, detail))
    return cells
