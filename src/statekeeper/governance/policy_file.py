"""Policy files: TOML, every problem reported with its line.

::

    # roles: permission -> namespace patterns
    [roles.acme-support]
    read = ["acme/**"]
    write = ["acme/support/**"]

    # principals: roles and direct grants
    [principals.alice]
    roles = ["acme-support"]

    [principals.ops]
    admin = ["**"]

Top-level tables are ``roles`` and ``principals`` only. A syntax error names the line
and column (from :mod:`tomllib`); a problem of meaning (an unknown permission, an
undefined role, a bad pattern) names the line of the table or key it is in.
"""

from __future__ import annotations

import os
import re
import tomllib
from typing import Any

from ..errors import PolicyError
from .policy import Policy

__all__ = ["load_policy", "parse_policy"]

_HEADER = re.compile(r"^\s*\[\[?\s*([^\[\]]+?)\s*\]\]?\s*(?:#.*)?$")
_PART = r'(?:"(?:[^"\\]|\\.)*"|\'[^\']*\'|[A-Za-z0-9_-]+)'
# a key, dotted ones included (``alice.read = [...]`` under ``[principals]``)
_KEY = re.compile(rf"^\s*({_PART}(?:\s*\.\s*{_PART})*)\s*=")
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"|\'([^\']*)\'')
_AT_LINE = re.compile(r"\(at line (\d+), column (\d+)\)")


def load_policy(path: str | os.PathLike[str]) -> Policy:
    """Read and check the policy file at ``path``."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        raise PolicyError(name, None, f"cannot read the policy file: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PolicyError(name, None, "the policy file is not UTF-8 text") from None
    return parse_policy(text, source=name)


def parse_policy(text: str, *, source: str = "<policy>") -> Policy:
    """Check the policy written in ``text`` (TOML)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        found = _AT_LINE.search(message)
        line = int(found.group(1)) if found else None
        if found is None and "(at end of document)" in message:
            line = max(1, len(text.splitlines()))
        problem = _AT_LINE.sub("", message).replace("(at end of document)", "").strip()
        where = f" (column {found.group(2)})" if found else ""
        raise PolicyError(source, line, f"invalid TOML: {problem}{where}") from None
    lines = _line_map(text)
    for key in data:
        if key not in ("roles", "principals"):
            raise PolicyError(
                source,
                lines.get((key,)),
                f"unknown table {key!r} (a policy has 'roles' and 'principals')",
            )
    principals: Any = data.get("principals", {})
    roles: Any = data.get("roles", {})
    if not isinstance(principals, dict) or not principals:
        raise PolicyError(
            source, lines.get(("principals",)), "the policy names no principals ([principals.NAME])"
        )
    if not isinstance(roles, dict):
        raise PolicyError(source, lines.get(("roles",)), "roles must be a table of roles")
    return Policy(principals, roles, source=source, lines=lines)


def _split(dotted: str) -> tuple[str, ...]:
    """The keys of a dotted key; the spaces around a bare key dropped, those inside
    quotes kept (``[principals." ops"]`` names " ops", which is refused on its line)."""
    parts: list[str] = []
    current = ""  # the bare characters of this part
    quoted: str | None = None  # or the quoted text of this part
    quote = ""
    for char in dotted:
        if quote:
            if char == quote:
                quote = ""
            else:
                quoted = (quoted or "") + char
        elif char in "\"'":
            quote = char
            quoted = quoted or ""
        elif char == ".":
            parts.append(current.strip() if quoted is None else quoted)
            current, quoted = "", None
        else:
            current += char
    parts.append(current.strip() if quoted is None else quoted)
    return tuple(parts)


def _line_map(text: str) -> dict[tuple[str, ...], int]:
    """Where each table and key starts: ``(table..., key) -> line`` (1-based), and
    where each string of a key's array is: ``(table..., key, string) -> line`` (a bad
    pattern on the fourth line of a multi-line array is reported on that line)."""
    out: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    array: tuple[str, ...] | None = None  # the key whose multi-line array is open
    for number, line in enumerate(text.splitlines(), 1):
        if array is not None:
            _strings(out, array, line, number)
            if "]" in _code(line):
                array = None
            continue
        header = _HEADER.match(line)
        if header is not None:
            table = _split(header.group(1))
            for cut in range(1, len(table) + 1):
                out.setdefault(table[:cut], number)
            continue
        key = _KEY.match(line)
        if key is not None:
            path = (*table, *_split(key.group(1)))
            for cut in range(1, len(path) + 1):
                out.setdefault(path[:cut], number)
            out[path] = number
            value = line[key.end() :]
            _strings(out, path, value, number)
            code = _code(value).strip()
            if code.startswith("[") and "]" not in code:
                array = path  # an array going on over the next lines
    return out


def _code(line: str) -> str:
    """``line`` without its strings and its comment."""
    return _STRING.sub('""', line).split("#", 1)[0]


def _strings(
    out: dict[tuple[str, ...], int], path: tuple[str, ...], line: str, number: int
) -> None:
    for match in _STRING.finditer(line):
        value = match.group(1) if match.group(1) is not None else match.group(2)
        out.setdefault((*path, value), number)
