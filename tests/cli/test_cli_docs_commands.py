"""Every ``statekeeper COMMAND`` the README and the docs show in code names a command
that exists: ``docs/langgraph.md`` sent readers to ``statekeeper ls``, which is "No such
command" (the listing command is ``statekeeper agents``)."""

from __future__ import annotations

import re
from pathlib import Path

from statekeeper.cli.registry import COMMANDS

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# in inline code (`statekeeper agents ...`) and on a console line ($ statekeeper agents ...)
_SHOWN = re.compile(r"`statekeeper ([a-z][a-z-]*)|^\$ statekeeper ([a-z][a-z-]*)", re.M)


def test_every_command_the_docs_show_exists() -> None:
    unknown = []
    for page in PAGES:
        if page.name == "benchmarks.md":  # a record of past runs, not instructions
            continue
        text = page.read_text(encoding="utf-8")
        for match in _SHOWN.finditer(text):
            name = match.group(1) or match.group(2)
            if name not in COMMANDS:
                line = text.count("\n", 0, match.start()) + 1
                unknown.append(f"{page.relative_to(ROOT)}:{line}: statekeeper {name}")
    assert not unknown, unknown
