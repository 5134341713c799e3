"""The README's code runs as written: every ```python block executes, and the quick
start prints the right output on every run against the same file, not only the first."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def _python_blocks() -> list[str]:
    return _BLOCK.findall(README.read_text(encoding="utf-8"))


def _run(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEKEEPER_")}
    return subprocess.run(
        [sys.executable, "-W", "error::UserWarning", "-c", code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _quick_start() -> str:
    found = [b for b in _python_blocks() if "support-42" in b]
    assert len(found) == 1, "the README has one quick start"
    return found[0]


def _expected(run: int) -> list[str]:
    """What the quick start prints on its ``run``-th run (1-based) against one file."""
    start = 1 + 6 * (run - 1)  # one `created` event, then six events per run
    messages = 2 * run
    first_add = (
        "[{'op': 'add', 'path': '/messages', 'value': [{'role': 'user', 'content': 'hi'}]}]"
        if run == 1
        else "[{'op': 'add', 'path': '/messages/-', 'value': {'role': 'user', 'content': 'hi'}}]"
    )
    tool = (
        "[{'op': 'add', 'path': '/messages/-', 'value': {'role': 'tool', 'content': '3 results'}}]"
    )
    return [
        f"AgentState.IDLE {start + 6} {messages}",
        f"tool_call {messages - 1}",
        f"{start + 1} transition processing {first_add}",
        f"{start + 2} transition tool_call []",
        f"{start + 3} patch None {tool}",
        f"{start + 4} transition processing []",
        f"{start + 5} transition completed []",
        f"{start + 6} transition idle []",
    ]


def test_readme_has_python_blocks() -> None:
    assert _python_blocks()


@pytest.mark.parametrize("index", range(len(_python_blocks())))
def test_every_readme_python_block_runs(index: int, tmp_path: Path) -> None:
    done = _run(_python_blocks()[index], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_the_quick_start_is_right_on_every_run(tmp_path: Path) -> None:
    code = _quick_start()
    for run in (1, 2, 3):
        done = _run(code, tmp_path)  # the same agents.db every time
        assert done.returncode == 0, f"run {run}: {done.stderr}"
        assert done.stderr == "", f"run {run}: {done.stderr}"
        assert done.stdout.splitlines() == _expected(run), f"run {run}"
    assert (tmp_path / "agents.db").exists()


def test_the_readme_states_what_the_quick_start_prints() -> None:
    text = README.read_text(encoding="utf-8")
    code = _quick_start()
    assert "# AgentState.IDLE 7 2" in code and "# tool_call 1" in code
    first, second = _expected(1), _expected(2)
    assert first[0].endswith("7 2") and first[1] == "tool_call 1"
    assert f"`{second[0]}`" in text and f"`{second[1]}`" in text
