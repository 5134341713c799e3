"""The demo agent's tools: a small on-disk corpus and three tools that do real work on it.

``search`` (BM25 over the files), ``fetch`` (read + SHA-256) and ``calculator`` (an
``ast``-checked arithmetic evaluator). :class:`ToolBox` logs every execution to an
fsynced file and honours a ``call_id`` as an idempotency key, like a payment API does,
so the demo can prove from the tools' own log that no call ran twice.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import operator
import os
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .constants import TOP_K

# ---------------------------------------------------------------------------- corpus

_CITIES = [
    ("Aldermoor", 1_204_000, "312", "a river port famous for its slate roofs"),
    ("Brightwater", 842_500, "96.4", "a compact harbour city built on reclaimed land"),
    ("Corvell Bay", 2_310_750, "1,050", "a sprawling bay city of suburbs and orchards"),
    ("Dunmarrow", 415_200, "58.2", "an old walled city squeezed between two hills"),
]
_OTHER = [
    (
        "Sourdough starters",
        "A starter is flour and water kept alive by wild yeast. Feed it "
        "daily, keep it warm, and discard half before each feeding.",
    ),
    (
        "River otters",
        "Otters hunt along the banks at dusk. Their dens, called holts, are "
        "dug into roots near the water.",
    ),
    (
        "The lighthouse festival",
        "Every autumn the keepers open the tower for one night; "
        "visitors climb the spiral stairs and watch the beam turn.",
    ),
    (
        "Reading tide tables",
        "High and low water times shift by about fifty minutes a day; "
        "springs and neaps follow the moon.",
    ),
]


def corpus_documents() -> dict[str, str]:
    """The archive the agent researches: ``doc_id -> text`` (first line is the title)."""
    docs: dict[str, str] = {}
    n = 0
    for i in range(max(len(_CITIES), len(_OTHER))):
        if i < len(_OTHER):
            n += 1
            title, body = _OTHER[i]
            docs[f"doc-{n:02d}"] = f"{title}\n\n{body}\n"
        if i < len(_CITIES):
            n += 1
            name, pop, area, blurb = _CITIES[i]
            docs[f"doc-{n:02d}"] = (
                f"{name}\n\n{name} is {blurb}. The last census counted a population of "
                f"{pop:,}. The city covers an area of {area} square kilometres, with its "
                f"population concentrated around the old centre.\n"
            )
    return docs


def write_corpus(folder: Path) -> None:
    """Write the corpus files (deterministic content) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for doc_id, text in corpus_documents().items():
        (folder / f"{doc_id}.txt").write_text(text, encoding="utf-8")


# ----------------------------------------------------------------------------- tools

_WORD = re.compile(r"[a-z0-9]+")


def _tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def tool_search(corpus: Path, query: str, top_k: int = TOP_K) -> dict[str, Any]:
    """BM25 over every file of the corpus (read from disk on each call)."""
    docs = {p.stem: _tokens(p.read_text(encoding="utf-8")) for p in sorted(corpus.glob("*.txt"))}
    if not docs:
        raise FileNotFoundError(f"no documents in {corpus}")
    avg_len = sum(len(t) for t in docs.values()) / len(docs)
    terms = _tokens(query)
    scores: dict[str, float] = {}
    for doc_id, toks in docs.items():
        score = 0.0
        for term in terms:
            df = sum(1 for t in docs.values() if term in t)
            tf = toks.count(term)
            if not tf:
                continue
            idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
            score += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * len(toks) / avg_len))
        if score > 0:
            scores[doc_id] = round(score, 4)
    hits = sorted(scores, key=lambda d: (-scores[d], d))[:top_k]
    return {
        "query": query,
        "hits": hits,
        "scores": {d: scores[d] for d in hits},
        "documents_scanned": len(docs),
    }


def tool_fetch(corpus: Path, doc_id: str) -> dict[str, Any]:
    """Read one document and fingerprint it."""
    if not re.fullmatch(r"doc-\d+", doc_id):
        raise ValueError(f"bad document id {doc_id!r}")
    raw = (corpus / f"{doc_id}.txt").read_bytes()
    text = raw.decode("utf-8")
    return {
        "doc_id": doc_id,
        "title": text.split("\n", 1)[0],
        "text": text,
        "bytes": len(raw),
        "sha256": hashlib.sha256(raw).hexdigest(),
    }


_BINOPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    ):
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise ValueError("exponent too large")
        return float(_BINOPS[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand)
    raise ValueError(f"unsupported expression element {type(node).__name__}")


def tool_calculator(corpus: Path, expression: str) -> dict[str, Any]:
    """Evaluate an arithmetic expression (numbers, + - * / **, parentheses)."""
    value = float(_evaluate(ast.parse(expression, mode="eval")))
    return {"expression": expression, "value": round(value, 6)}


TOOLS: dict[str, Callable[..., dict[str, Any]]] = {
    "search": tool_search,
    "fetch": tool_fetch,
    "calculator": tool_calculator,
}


class ToolBox:
    """Runs tools and logs every invocation to a side file (append, flush, fsync).

    The log is the ground truth the demo checks: a line per invocation with the agent,
    ``call_id``, tool, pid and ``run`` = ``executed`` (the tool did its work) or
    ``replayed`` (the ``call_id`` had already executed: the recorded result is returned
    and the work is *not* redone — the tool honours ``call_id`` as an idempotency key).
    """

    def __init__(self, corpus: Path, log_path: Path, agent_id: str) -> None:
        self.corpus = corpus
        self.log_path = log_path
        self.agent_id = agent_id

    def entries(self) -> list[dict[str, Any]]:
        """This agent's log lines, oldest first."""
        return [e for e in read_tool_log(self.log_path) if e.get("agent_id") == self.agent_id]

    def invoke(self, call_id: str, tool: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """Run ``tool`` for ``call_id`` (or replay its recorded result) and log it."""
        for entry in self.entries():
            if entry["call_id"] == call_id and entry["run"] == "executed":
                result: dict[str, Any] = entry["result"]
                self._log(call_id, tool, args, "replayed", result)
                return result
        result = TOOLS[tool](self.corpus, **args)
        self._log(call_id, tool, args, "executed", result)
        return result

    def _log(
        self, call_id: str, tool: str, args: Mapping[str, Any], run: str, result: dict[str, Any]
    ) -> None:
        line = json.dumps(
            {
                "agent_id": self.agent_id,
                "call_id": call_id,
                "tool": tool,
                "args": dict(args),
                "run": run,
                "pid": os.getpid(),
                "t": time.time(),
                "result": result,
            },
            sort_keys=True,
        )
        with open(self.log_path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()
            os.fsync(fh.fileno())


def read_tool_log(path: Path) -> list[dict[str, Any]]:
    """Every complete line of the tool log (a torn last line, if any, is ignored)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out
