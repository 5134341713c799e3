"""The pool's references: a pooled cell's key (a content hash), a memoized
reference copied for a document, the key a message reference stands on, and every key a
packed value references (what pruning keeps). A part of the LangGraph value codec (see
:mod:`.serde`)."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import orjson

__all__ = ["fresh_ref", "pool_refs"]


def _pool_key(blob: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.blake2b(blob, digest_size=12).digest()).decode()


def fresh_ref(ref: Any) -> Any:
    """A copy of a memoized reference for the document: documents are patched in
    place, so a reference must never be shared between two places (or with the memo)."""
    if type(ref) is dict:
        if "$p" in ref:
            return {"$p": ref["$p"]}
        if "$r" in ref:
            return {"$r": list(ref["$r"])}
    return orjson.loads(orjson.dumps(ref))


def _base_key(ref: Any) -> str | None:
    """The pool key a message reference stands on."""
    if type(ref) is dict:
        if "$p" in ref:
            return str(ref["$p"])
        if "$r" in ref:
            return str(ref["$r"][0])
    return None


def pool_refs(packed: Any, found: set[str]) -> set[str]:
    """Collect every pool key referenced by a packed value into ``found``."""
    stack = [packed]
    while stack:
        node = stack.pop()
        t = type(node)
        if t is list:
            stack.extend(node)
        elif t is dict:
            if len(node) == 1 and "$p" in node:
                found.add(node["$p"])
            elif len(node) == 1 and "$r" in node:
                found.add(node["$r"][0])
            elif len(node) == 1 and ("$s" in node or "$m" in node):
                continue
            else:
                stack.extend(node.values())
    return found
