"""The warnings a CLI command meets reach its user as the CLI's own ``warning: …``
lines on stderr: ``langgraph import`` / ``export`` of a checkpoint holding a type the
serializer will not rebuild printed LangGraph's log lines bare (logging's last resort),
and a warning of another category than statekeeper's came in Python's ``file:line:
Category: text`` form."""

from __future__ import annotations

import sqlite3
import sys
import warnings
from pathlib import Path

import pytest

from ..cli._subprocess import cli

pytest.importorskip("langgraph.checkpoint.sqlite")

PROBE = """
import dataclasses


@dataclasses.dataclass
class Probe:
    n: int
"""


def _source_with_a_type_the_cli_cannot_import(tmp_path: Path) -> Path:
    """A LangGraph SqliteSaver database whose checkpoint holds an instance of a class
    from a module only this test process can import."""
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.sqlite import SqliteSaver

    folder = tmp_path / "types"
    folder.mkdir()
    (folder / "sk_warning_probe.py").write_text(PROBE)
    sys.path.insert(0, str(folder))
    try:
        from sk_warning_probe import Probe  # type: ignore[import-not-found]

        path = tmp_path / "source.sqlite"
        conn = sqlite3.connect(path, check_same_thread=False)
        try:
            saver = SqliteSaver(conn)
            saver.setup()
            checkpoint = empty_checkpoint()
            checkpoint["channel_values"] = {"probe": Probe(1)}
            checkpoint["channel_versions"] = {"probe": "1"}
            config = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
            saver.put(config, checkpoint, {"source": "input", "step": 0}, {"probe": "1"})  # type: ignore[arg-type]
            conn.commit()
        finally:
            conn.close()
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("sk_warning_probe", None)
    return path


def _said(stderr: str) -> list[str]:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines and all(line.startswith("warning: ") for line in lines), stderr
    return lines


def test_langgraph_import_and_export_say_langgraphs_warnings_as_warning_lines(
    tmp_path: Path,
) -> None:
    source = _source_with_a_type_the_cli_cannot_import(tmp_path)
    store = f"sqlite:///{tmp_path / 'store.db'}"
    assert cli("init", store).code == 0
    done = cli("langgraph", "import", str(source), store)
    assert done.code == 0, str(done)
    lines = _said(done.stderr)
    assert any("sk_warning_probe" in line for line in lines), str(done)
    assert len(lines) == len(set(lines))  # each said once
    exported = cli("langgraph", "export", store, str(tmp_path / "out.sqlite"))
    assert exported.code == 0, str(exported)
    assert not exported.stderr.strip() or _said(exported.stderr)
    assert "copied 1 checkpoint(s)" in exported.stdout


def test_a_warning_of_another_category_is_one_warning_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A deprecation or a library's UserWarning met during a command: one line, named,
    once (Python's form was ``file:line: FutureWarning: text`` and the source line)."""
    from statekeeper.cli import exits

    with exits.said_warnings():  # what every command runs within
        for _ in range(2):
            warnings.warn("the old option is deprecated", FutureWarning, stacklevel=1)
    assert capsys.readouterr().err.splitlines() == [
        "warning: the old option is deprecated (FutureWarning)"
    ]
