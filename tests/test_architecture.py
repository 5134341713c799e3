"""ARCHITECTURE.md matches the code: every module and file it names exists, every
package of ``src/statekeeper`` is on it, and its layer diagram is the one the
import-linter contract in pyproject.toml enforces."""

from __future__ import annotations

import ast
import importlib.util
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "ARCHITECTURE.md"
SRC = ROOT / "src" / "statekeeper"


def _text() -> str:
    return DOC.read_text(encoding="utf-8")


def _resolves(dotted: str) -> bool:
    """A module, or an attribute of one (``statekeeper.store.StateStore``)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        try:
            spec = importlib.util.find_spec(module)
        except ModuleNotFoundError:
            spec = None
        if spec is None:
            continue
        value: object = importlib.import_module(module)
        for attr in parts[cut:]:
            if not hasattr(value, attr):
                return False
            value = getattr(value, attr)
        return True
    return False


def test_every_module_it_names_exists() -> None:
    names = set(re.findall(r"\bstatekeeper(?:\.[A-Za-z_][A-Za-z0-9_]*)+", _text()))
    assert len(names) > 40  # the page is a map, not a sketch
    missing = sorted(n for n in names if not _resolves(n))
    assert not missing, f"ARCHITECTURE.md names modules that do not exist: {missing}"


def test_every_file_it_names_exists() -> None:
    paths = set(
        re.findall(r"`((?:src|tests|benchmarks|docs|\.ci)/[\w./-]+|[\w-]+\.(?:md|toml))`", _text())
    )
    assert paths
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, f"ARCHITECTURE.md names files that do not exist: {missing}"


def test_every_package_of_the_library_is_on_it() -> None:
    text = _text()
    packages = sorted(
        p.name if p.is_dir() else p.stem
        for p in SRC.iterdir()
        if (p.is_dir() and (p / "__init__.py").exists())
        or (p.suffix == ".py" and p.name != "__init__.py")
    )
    absent = [name for name in packages if f"statekeeper.{name}" not in text]
    assert not absent, f"ARCHITECTURE.md says nothing about: {absent}"


def test_its_layer_diagram_is_the_enforced_contract() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["type"] == "layers")["layers"]
    diagram = _text().split("## The layers", 1)[1].split("```", 2)[1]
    shown = [
        line.split("   ")[0].strip()
        for line in diagram.splitlines()
        if line.startswith("statekeeper")
    ]
    assert shown == [" | ".join(x.strip() for x in layer.split("|")) for layer in layers]


def test_a_module_over_600_lines_says_why_at_its_top() -> None:
    """The project's rule (small modules, one job each): a module of the library over
    ~600 lines carries the reason in its docstring ("Over 600 lines because ...")."""
    silent = []
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if text.count("\n") <= 600:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if "over 600 lines" not in doc.lower():
            silent.append(str(path.relative_to(SRC)))
    assert not silent, f"over 600 lines with no reason at the top: {silent}"
