"""Every code block in the docs runs (issue 13 item 7), so the docs cannot drift:

* ``>>>`` examples are doctests (pytest collects ``docs/*.md``);
* every other ```python block of a page runs here, in page order, as one script in a
  fresh directory, after the page's hidden ``<!-- doc-setup … -->`` blocks (setup a
  reader does not need to see: a key file, a toy graph);
* every command line shown for a script (``python benchmarks/x.py --flag``,
  ``statekeeper bench --flag``) names a script that exists and flags its ``--help``
  lists; CLI transcripts in ``docs/cli.md`` are produced by the CLI in
  ``tests/cli/test_cli_docs.py``, its synopses checked against ``--help`` here;
* the README's blocks run in ``tests/test_readme.py``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md"))
_CODE = re.compile(r"^```python\n(.*?)^```|^<!-- doc-setup[^\n]*\n(.*?)^-->", re.S | re.M)
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def _script(page: Path) -> str:
    """The page's setup blocks and python blocks without ``>>>``, in page order."""
    parts = []
    for block, setup in _CODE.findall(page.read_text(encoding="utf-8")):
        code = block or setup
        if ">>>" not in code:
            parts.append(code)
    return "\n".join(parts)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEKEEPER_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p)
    return env


PAGES = [p for p in DOCS if _script(p).strip()]


def test_the_pages_with_python_blocks_are_found() -> None:
    names = {p.name for p in PAGES}
    assert {"backends.md", "langgraph.md", "security.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_python_block_of_the_page_runs(page: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _script(page)],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, f"{page.name}:\n{result.stderr[-3000:]}"


# ------------------------------------------------------------------- command lines


def _command_lines() -> list[tuple[str, list[str]]]:
    """(page, argv) of every script or ``statekeeper bench`` command shown in a block."""
    found: list[tuple[str, list[str]]] = []
    for page in [ROOT / "README.md", *DOCS]:
        for _, body in _FENCE.findall(page.read_text(encoding="utf-8")):
            text = body.replace("\\\n", " ")
            for line in text.splitlines():
                line = line.split("#", 1)[0].strip().removeprefix("$ ")
                try:
                    argv = shlex.split(line)
                except ValueError:
                    continue
                if len(argv) >= 2 and argv[0].endswith("python") and argv[1].endswith(".py"):
                    found.append((page.name, argv[1:]))
                elif argv[:2] == ["statekeeper", "bench"] or argv[:2] == [
                    ".venv/bin/statekeeper",
                    "bench",
                ]:
                    found.append((page.name, ["-m", "statekeeper.cli", *argv[1:]]))
    return found


COMMANDS = _command_lines()


def test_the_command_lines_are_found() -> None:
    scripts = {argv[0] for _, argv in COMMANDS}
    assert "benchmarks/bench_checkpoint.py" in scripts
    assert "-m" in scripts  # statekeeper bench


#: runs ``TARGET --help`` for every target in one interpreter, as ``python TARGET
#: --help`` (or ``python -m MODULE ARGS --help``) would run it alone: the script runs as
#: ``__main__`` with its own folder first on sys.path and ``--help`` in its argv; prints
#: {target: [exit code, stdout, stderr]} as JSON. One process instead of one per
#: script: the LangGraph benchmarks import LangGraph before they parse their arguments
#: (~2 CPU-s each), and here they share one import.
_HELP_DRIVER = """
import contextlib, io, json, os, runpy, sys, traceback
found = {}
for target in json.loads(sys.argv[1]):
    argv, path = target.split(), list(sys.path)
    out, err, code = io.StringIO(), io.StringIO(), 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            if argv[0] == "-m":
                sys.argv = [argv[1], *argv[2:], "--help"]
                runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
            else:
                sys.argv = [argv[0], "--help"]
                sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
                runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        code = 1
        err.write(traceback.format_exc())
    finally:
        sys.path[:] = path
    found[target] = [code, out.getvalue(), err.getvalue()]
print(json.dumps(found))
"""


def _target(argv: list[str]) -> str:
    """The script (or ``-m statekeeper.cli bench``) a command line runs."""
    return " ".join(argv[:3] if argv[0] == "-m" else argv[:1])


def _helps(targets: list[str]) -> dict[str, tuple[int, str, str]]:
    """``TARGET --help`` of every target (exit code, stdout, stderr), in one process."""
    result = subprocess.run(
        [sys.executable, "-c", _HELP_DRIVER, json.dumps(targets)],
        cwd=ROOT,
        env={**_env(), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.splitlines()[-1])
    return {target: (code, out, err) for target, (code, out, err) in found.items()}


def test_every_flag_shown_for_a_script_exists() -> None:
    targets = sorted({_target(a) for _, a in COMMANDS})
    for target in targets:
        if not target.startswith("-m"):
            assert (ROOT / target).exists(), f"the docs run {target}, which does not exist"
    # positional arguments only: the script's own usage check covers them
    flagged = [
        t
        for t in targets
        if any(f.startswith("--") for _, a in COMMANDS if _target(a) == t for f in a)
    ]
    helps = _helps(flagged)
    problems = []
    for target in flagged:
        code, text, err = helps[target]
        if code != 0:
            problems.append(f"{target} --help: exit {code}\n{err[-2000:]}")
            continue
        for _, argv in COMMANDS:
            if _target(argv) != target:
                continue
            for arg in argv:
                flag = arg.split("=", 1)[0]
                if flag.startswith("--") and flag not in text:
                    problems.append(f"{target}: the docs use {flag}, --help does not list it")
    assert not problems, "\n".join(problems)


# ------------------------------------------------------------------ cli.md synopses


def _synopses() -> list[list[str]]:
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    out = []
    for lang, body in _FENCE.findall(text):
        lines = body.strip().splitlines()
        if lang == "console" and len(lines) <= 2 and "[" in lines[0]:
            out.append(lines[0].removeprefix("$ ").split())
    return out


@pytest.mark.parametrize("words", _synopses(), ids=lambda w: " ".join(w[1:3]))
def test_every_option_of_a_cli_synopsis_exists(words: list[str]) -> None:
    from typer.testing import CliRunner

    from statekeeper.cli import app

    command = [w for w in words[1:3] if re.fullmatch(r"[a-z]+(?:-[a-z]+)*", w)]
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for word in words:
        for flag in re.findall(r"--[a-z][a-z-]*", word):
            assert flag in result.output, f"statekeeper {' '.join(command)}: no {flag}"
