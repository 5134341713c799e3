"""The benchmarks measure the statekeeper they say they measure.

A same-run A/B runs one benchmark script twice, once with ``PYTHONPATH=<other
tree>/src``; the scripts' shared module must not put its own checkout's ``src/`` in
front of it (it did: both sides of such an A/B measured the checkout), and the
``source`` it reports is the commit of the tree that was imported.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_PROBE = (
    "import sys; sys.path.insert(0, {bench!r}); import _common, statekeeper; "
    "print(statekeeper.__file__); print(_common.source_state())"
)


def _other_tree(tmp_path: Path) -> Path:
    tree = tmp_path / "other"
    package = tree / "src" / "statekeeper"
    (package / "bench").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "bench" / "__init__.py").write_text("")
    (package / "bench" / "workload.py").write_text(
        "def make_messages(*a, **k): return []\ndef percentile(*a, **k): return 0.0\n"
    )
    git = ["git", "-C", str(tree)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run(
        [*git, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "other"],
        check=True,
    )
    return tree


def _probe(pythonpath: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    code = _PROBE.format(bench=str(ROOT / "benchmarks"))
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.split()


def test_a_benchmark_measures_the_tree_pythonpath_names(tmp_path: Path) -> None:
    tree = _other_tree(tmp_path)
    head = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    imported, source = _probe(str(tree / "src"))
    assert Path(imported).resolve().is_relative_to(tree.resolve())
    assert source == head


def test_without_pythonpath_a_benchmark_measures_its_own_checkout() -> None:
    imported, _source = _probe(None)
    assert Path(imported).resolve().is_relative_to((ROOT / "src").resolve())
