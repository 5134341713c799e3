"""A retention policy: its rules per namespace and its legal hold lines, parsed from
the text of a policy file (see :mod:`statekeeper.governance.retention`, which applies
it; the names are exported there)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .._durations import DURATION_EXAMPLES, seconds_in
from ..errors import RetentionPolicyError
from ..namespaces import namespace_of, split_id, within

__all__ = ["RetentionPolicy", "Rule", "RuleUse"]

_NAME = re.compile(r"^[A-Za-z0-9._:@+/-]{1,128}$")


@dataclass(frozen=True, slots=True)
class Rule:
    """The retention of one namespace (``"*"``: the default)."""

    namespace: str
    ttl: float | None = None
    keep_last: int | None = None
    snapshot_every: int | None = None
    #: idempotency records older than this (seconds) are forgotten (None: never)
    keys_ttl: float | None = None


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """Rules per namespace and legal holds (see the module documentation)."""

    rules: tuple[Rule, ...] = ()
    holds: frozenset[str] = frozenset()  # agent ids
    held_namespaces: frozenset[str] = frozenset()
    #: where the policy was read from (the file; named in the reason of its holds)
    source: str = field(default="<policy>", compare=False)

    def rule_for(self, agent_id: str) -> Rule | None:
        """The rule that governs ``agent_id`` (its namespace's, else ``*``'s)."""
        ns = namespace_of(agent_id)
        default = None
        for rule in self.rules:
            if rule.namespace == ns:
                return rule
            if rule.namespace == "*":
                default = rule
        return default

    def held(self, agent_id: str) -> bool:
        """True when a legal hold exempts ``agent_id`` from every purge."""
        return agent_id in self.holds or namespace_of(agent_id) in self.held_namespaces

    def hold_patterns(self) -> list[str]:
        """The policy's holds as hold patterns (``acme/alice``, ``legal/*``), sorted."""
        return sorted([*self.holds, *(f"{ns}/*" for ns in self.held_namespaces)])

    @classmethod
    def parse(cls, text: str, source: str = "<policy>") -> RetentionPolicy:
        """A policy from its text; a malformed line raises
        :class:`~statekeeper.errors.RetentionPolicyError` naming the line."""
        rules: dict[str, Rule] = {}
        holds: set[str] = set()
        held_ns: set[str] = set()
        for number, raw in enumerate(text.splitlines(), start=1):
            words = raw.split("#", 1)[0].split()
            if not words:
                continue

            def bad(message: str, number: int = number) -> RetentionPolicyError:
                return RetentionPolicyError(message, source=source, line=number)

            if words[0] == "hold":
                if len(words) != 2:
                    raise bad("a hold names one agent id or NAMESPACE/*: hold acme/alice")
                target = words[1]
                if target.endswith("/*"):
                    name = target[:-2]
                    if not _NAME.match(name):
                        raise bad(f"invalid namespace {name!r}")
                    held_ns.add(name)
                else:
                    if not target or "*" in target:
                        raise bad(f"invalid agent id {target!r}")
                    holds.add(target)
                continue
            ns = words[0]
            if ns != "*" and (not _NAME.match(ns) or ns.startswith("/") or ns.endswith("/")):
                raise bad(f"invalid namespace {ns!r} (a name, or * for every namespace)")
            if ns in rules:
                raise bad(f"namespace {ns!r} has a rule already")
            if len(words) == 1:
                raise bad(
                    f"the rule for {ns!r} sets nothing: ttl=, keep_last=, snapshot_every=,"
                    " keys_ttl="
                )
            values: dict[str, float | int] = {}
            for item in words[1:]:
                key, sep, value = item.partition("=")
                if not sep or not value:
                    raise bad(f"expected key=value, not {item!r}")
                if key in values:
                    raise bad(f"{key} is set twice")
                if key in ("ttl", "keys_ttl"):
                    values[key] = _duration(value, bad, key)
                elif key in ("keep_last", "snapshot_every"):
                    if not value.isdigit() or int(value) < 1:
                        raise bad(f"{key} must be a whole number >= 1, not {value!r}")
                    values[key] = int(value)
                else:
                    raise bad(f"unknown setting {key!r} (ttl, keep_last, snapshot_every, keys_ttl)")
            rules[ns] = Rule(
                ns,
                float(values["ttl"]) if "ttl" in values else None,
                int(values["keep_last"]) if "keep_last" in values else None,
                int(values["snapshot_every"]) if "snapshot_every" in values else None,
                float(values["keys_ttl"]) if "keys_ttl" in values else None,
            )
        return cls(tuple(rules.values()), frozenset(holds), frozenset(held_ns), source)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> RetentionPolicy:
        """Read and parse a policy file."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            where = os.fspath(path)
            raise RetentionPolicyError(f"cannot read the policy: {exc}", source=where) from None
        return cls.parse(text, os.fspath(path))


class RuleUse:
    """Which rules of a policy (``*`` aside) governed no agent of a run, told agent by
    agent (:meth:`saw`). A rule names a namespace: one naming an agent id (``a0001``,
    ``acme/alice``) or an id's last part (``alice`` of ``acme/alice``) governs nothing,
    and :meth:`unmatched` gives the agent it looks like. Rules outside ``view`` (the
    namespace a store is opened in) could govern none of its agents: left out."""

    __slots__ = ("_like", "_open", "_order")

    def __init__(self, policy: RetentionPolicy, view: str = "") -> None:
        self._order = [
            r.namespace
            for r in policy.rules
            if r.namespace != "*" and (r.namespace == view or within(r.namespace, view))
        ]
        self._open = set(self._order)
        self._like: dict[str, str] = {}

    def saw(self, agent_id: str, rule: Rule | None) -> None:
        """``agent_id`` (its full id) was scanned, governed by ``rule``."""
        if not self._open:
            return
        if rule is not None:
            self._open.discard(rule.namespace)
        for name in (agent_id, split_id(agent_id)[1]):
            if name in self._open:
                self._like.setdefault(name, agent_id)

    def unmatched(self) -> dict[str, str]:
        """Each rule that governed no agent -> the full id of the agent its pattern
        names (``""``: none), in the policy's order."""
        return {ns: self._like.get(ns, "") for ns in self._order if ns in self._open}


def _duration(value: str, bad: Callable[[str], RetentionPolicyError], key: str = "ttl") -> float:
    seconds = seconds_in(value)
    if seconds is None:
        raise bad(f"{key} must be a positive duration like {DURATION_EXAMPLES}, not {value!r}")
    return seconds
