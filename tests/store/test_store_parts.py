"""StateStore's public methods are written in one module per job (store_reads,
store_feed, store_writes, store_agents, store_verify) and bound in its class body:
every function of a part is a method of the store, and none calls a global of its own
name (in the part that global is the function itself: ``stored_size`` and ``settle``
call the ones of .heads and .settle, and stay in store.py)."""

from __future__ import annotations

import dis
import inspect
import types
from types import ModuleType

import pytest

import statekeeper.store.store_agents as store_agents
import statekeeper.store.store_feed as store_feed
import statekeeper.store.store_reads as store_reads
import statekeeper.store.store_verify as store_verify
import statekeeper.store.store_writes as store_writes
import statekeeper.store.write_base as write_base
import statekeeper.store.write_build as write_build
import statekeeper.store.write_fast as write_fast
from statekeeper.store.store import StateStore
from statekeeper.store.writes import WritePipeline

PARTS = [store_agents, store_feed, store_reads, store_verify, store_writes]


def _functions(module: ModuleType) -> dict[str, types.FunctionType]:
    return {
        name: fn
        for name, fn in vars(module).items()
        if inspect.isfunction(fn) and fn.__module__ == module.__name__
    }


def _globals_named(code: types.CodeType) -> set[str]:
    names = {i.argval for i in dis.get_instructions(code) if i.opname == "LOAD_GLOBAL"}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _globals_named(const)
    return names


@pytest.mark.parametrize("part", PARTS, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_every_function_of_a_part_is_a_method_of_the_store(part: ModuleType) -> None:
    functions = _functions(part)
    assert functions
    for name, fn in functions.items():  # (agent: its last definition, the overloaded one)
        assert getattr(StateStore, name) is fn, name


@pytest.mark.parametrize("part", PARTS, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_no_function_of_a_part_calls_a_global_of_its_own_name(part: ModuleType) -> None:
    for name, fn in _functions(part).items():
        assert name not in _globals_named(fn.__code__), name


def test_the_write_pipeline_is_one_class_over_its_parts() -> None:
    assert WritePipeline.__mro__[1:4] == (
        write_fast.WriteFast,
        write_build.WriteBuild,
        write_base.WriteBase,
    )
    for part in (write_fast.WriteFast, write_build.WriteBuild, write_base.WriteBase):
        assert "__init__" not in vars(part)  # (WritePipeline's sets every attribute)
