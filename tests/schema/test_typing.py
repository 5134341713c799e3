"""The state model is typed end to end: mypy sees ``agent.state`` as the model."""

from __future__ import annotations

import re
from pathlib import Path

from mypy import api

CASES = Path(__file__).with_name("typing_cases.py")


def test_mypy_sees_the_model_type() -> None:
    root = CASES.parents[2]
    out, err, _code = api.run(
        ["--strict", "--no-incremental", "--cache-dir", "/dev/null", "--follow-imports", "silent",
         "--show-error-codes", str(CASES.relative_to(root))]
    )  # fmt: skip
    lines = CASES.read_text().splitlines()

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
