"""The example backend of docs/backends.md ("Writing a backend") passes the conformance
suite: its code block runs here as written, test class included."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "backends.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def _example() -> str:
    found = [b for b in _BLOCK.findall(DOC.read_text(encoding="utf-8")) if "class DictBackend" in b]
    assert len(found) == 1, "docs/backends.md shows one example backend"
    return found[0]  # type: ignore[no-any-return]


_namespace: dict[str, object] = {"__name__": __name__}
exec(compile(_example(), f"{DOC}:DictBackend", "exec"), _namespace)
TestDictBackend = _namespace["TestDictBackend"]
