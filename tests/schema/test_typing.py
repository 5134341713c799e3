"""The state model is typed end to end: mypy sees ``agent.state`` as the model."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mypy import api

ROOT = Path(__file__).resolve().parents[2]
CASES = '''"""What mypy must see."""

from __future__ import annotations

from typing import reveal_type

from statekeeper import StateStore
from statekeeper.schema import TypedStates
from statekeeper.schema.structures import Conversation

from tests.schema.apps import NotesDC, NotesTD, SupportV1, support_v2


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
    _ = typed.state.no_such_field  # E1
    typed.state = NotesDC(owner="o")  # E2
'''


# What mypy reads besides the cases: statekeeper, the tests' models and the libraries
# the revealed types are built from (pydantic, typing_extensions). Every other library
# statekeeper imports (the engines' drivers, LangChain, OpenTelemetry, numpy through
# them: ~1,800 modules) is not followed: its types cannot reach what is checked here,
# and reading them was 5/6 of the run (21.4 -> 4.1 CPU-s measured, same output). A
# type that came to depend on a skipped library would turn into Any and fail the
# assertions below, not pass them.
CONFIG = """\
[mypy]
follow_imports = skip
[mypy-statekeeper.*,tests.*,pydantic.*,pydantic_core.*,typing_extensions,annotated_types.*]
follow_imports = silent
"""


def test_mypy_sees_the_model_type(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "typing_cases.py").write_text(CASES)
    (tmp_path / "mypy.ini").write_text(CONFIG)
    monkeypatch.setenv("MYPYPATH", str(ROOT))
    monkeypatch.chdir(tmp_path)
    out, _err, _code = api.run(
        ["--config-file", "mypy.ini", "--strict", "--no-incremental", "--cache-dir", "/dev/null",
         "--show-error-codes", "typing_cases.py"]
    )  # fmt: skip
    lines = CASES.splitlines()

    def at(marker: str) -> list[str]:
        (index,) = [i for i, line in enumerate(lines, 1) if line.rstrip().endswith(f"# {marker}")]
        return [m.group(1) for m in re.finditer(rf"typing_cases\.py:{index}: \w+: (.*)", out)]

    assert at("R1") == [
        'Revealed type is "statekeeper.schema.agent.TypedAgent[tests.schema.apps.SupportV1]"'
    ], out
    assert at("R2") == ['Revealed type is "tests.schema.apps.SupportV1"'], out
    assert at("R3") == ['Revealed type is "str"'], out
    assert at("R4") == ['Revealed type is "tests.schema.apps.SupportV2"'], out
    assert at("R5") == ['Revealed type is "list[str]"'], out
    assert at("R6") == [
        'Revealed type is "TypedDict(tests.schema.apps.NotesTD, '
        "{'owner': str, 'notes': list[str]})\""
    ], out
    assert at("R7") == ['Revealed type is "statekeeper.store.agent.DurableAgent"'], out
    assert at("R8") == [
        'Revealed type is "statekeeper.schema.structures.conversation.Conversation"'
    ], out
    assert any('has no attribute "no_such_field"' in e for e in at("E1")), out
    assert any("Incompatible types in assignment" in e for e in at("E2")), out
