"""Access policies: principal or role -> namespace patterns -> read / write / admin.

A :class:`Policy` grants each principal permissions on namespaces, directly or
through roles::

    Policy(
        roles={"acme-support": {"write": ["acme/support/**"], "read": ["acme/**"]}},
        principals={
            "alice": {"roles": ["acme-support"]},
            "ops": {"admin": ["**"]},
        },
    )

(the same shape as a policy file, see :mod:`.policy_file`). Permissions are ordered:
``admin`` includes ``write``, which includes ``read``. What each needs:

* ``read``: load, get, head, history, time travel, listing (a principal only ever sees
  the agents it may read), digests, idempotency look-ups;
* ``write``: create, save, append, transitions, snapshots, delete, leases;
* ``admin``: store-wide tools on the namespace (rekey, migrate, retention, forget);
  ``admin`` on ``**`` (every namespace) is needed to change the policy of a running
  store and to read the whole audit log.

**Namespace-wide operations** (a backup, restore or retention run through a store
opened in a namespace, listing it, its audit entries) are checked against the
namespace itself (:meth:`Policy.check_namespace`): the principal needs the permission
on the namespace *and every namespace below it*, given by one pattern that covers
that whole subtree (``tenant-a/**``, ``*/**``, ``**``). ``admin`` on ``tenant-a/**``
backs up, restores into and runs retention on ``tenant-a``; ``admin`` on
``tenant-a/support/**`` does not (it covers part of ``tenant-a`` only). The root
namespace ``""`` is the whole store: covering it takes ``**``.

A **pattern** matches namespaces segment by segment: ``*`` matches within one segment,
``**`` (a whole segment) matches any number of segments, zero included; ``acme/**``
matches ``acme`` and everything under it; ``""`` is the root namespace only. A
principal the policy does not name is denied everything (never a default).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final

from ..arguments import PRINCIPAL_SYNTAX
from ..errors import AccessDenied, PolicyError
from .principals import namespace_of

__all__ = ["PERMISSIONS", "Policy", "compile_pattern", "posix_pattern"]

#: the permissions, weakest first (each includes the ones before it)
PERMISSIONS: Final = ("read", "write", "admin")
_RANK: Final = {name: rank for rank, name in enumerate(PERMISSIONS, 1)}
_SEGMENT = re.compile(r"[^/\s]+")
_CACHE_LIMIT = 4096


def compile_pattern(pattern: object) -> re.Pattern[str]:
    """The regular expression of a namespace pattern (see the module documentation);
    :class:`ValueError` naming the problem when ``pattern`` is not one."""
    if type(pattern) is not str:
        raise ValueError(f"a namespace pattern is a string, not {type(pattern).__name__}")
    if pattern == "":
        return re.compile("")
    if not pattern.isascii():
        raise ValueError(f"namespace pattern {pattern!r:.60} is not ASCII")
    parts = pattern.split("/")
    out: list[str] = []
    for index, part in enumerate(parts):
        if part == "**":
            first, last = index == 0, index == len(parts) - 1
            if first and last:
                out.append(".*")
            elif first:
                out.append("(?:.*/)?")
            elif last:
                out[-1] = out[-1][:-1]  # drop the '/' before it: 'a/**' matches 'a'
                out.append("(?:/.*)?")
            else:
                out.append("(?:[^/]+/)*")
            continue
        if not _SEGMENT.fullmatch(part):
            raise ValueError(f"namespace pattern {pattern!r:.60} has an empty or blank segment")
        if "**" in part:
            raise ValueError(f"'**' must be a whole segment in pattern {pattern!r:.60}")
        if part in (".", ".."):
            # an agent id has no such segment (arguments.check_agent_id): the pattern
            # would match nothing, and 'acme/../globex' reads as a path it is not
            raise ValueError(
                f"namespace pattern {pattern!r:.60} has a {part!r} segment (a namespace"
                " is not a path: nothing resolves it, and no namespace has one)"
            )
        rx = "".join("[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c) for c in part)
        out.append(rx + ("/" if index < len(parts) - 1 else ""))
    # DOTALL: '**' spans any character, a newline too (an agent id may hold one), as
    # PostgreSQL's '.' does (posix_pattern): without it '**' missed every namespace with
    # a newline, hidden from an admin on '**' while 'ac*/**' reached it
    return re.compile("".join(out), re.DOTALL)


def posix_pattern(pattern: str) -> str:
    """The namespace pattern as an anchored POSIX regular expression (PostgreSQL's
    ``~``), matching exactly what :func:`compile_pattern` matches."""
    compile_pattern(pattern)  # the same checks
    if pattern == "":
        return "^$"
    parts = pattern.split("/")
    out: list[str] = []
    for index, part in enumerate(parts):
        first, last = index == 0, index == len(parts) - 1
        if part == "**":
            if first and last:
                out.append(".*")
            elif first:
                out.append("(.*/)?")
            elif last:
                out[-1] = out[-1][:-1]
                out.append("(/.*)?")
            else:
                out.append("([^/]+/)*")
            continue
        rx = "".join(
            "[^/]*" if c == "*" else "[^/]" if c == "?" else c if c.isalnum() else "\\" + c
            for c in part
        )
        out.append(rx + ("" if last else "/"))
    return "^" + "".join(out) + "$"


class _Grants:
    """One principal's compiled grants: ``(rank, pattern)`` pairs."""

    __slots__ = ("cache", "grants", "store_admin")

    def __init__(self, grants: list[tuple[int, str]]) -> None:
        self.grants = [(rank, compile_pattern(p)) for rank, p in grants]
        self.store_admin = any(rank == _RANK["admin"] and p == "**" for rank, p in grants)
        self.cache: dict[str, int] = {}

    def rank(self, namespace: str) -> int:
        found = self.cache.get(namespace)
        if found is not None:
            return found
        found = max(
            (rank for rank, rx in self.grants if rx.fullmatch(namespace) is not None), default=0
        )
        if len(self.cache) >= _CACHE_LIMIT:
            self.cache.clear()
        self.cache[namespace] = found
        return found


class Policy:
    """Who may do what where (see the module documentation).

    Args:
        principals: principal name -> ``{"roles": [...], "read": [...], "write":
            [...], "admin": [...]}`` (every key optional; the lists hold namespace
            patterns).
        roles: role name -> ``{"read": [...], "write": [...], "admin": [...]}``.
        source: how errors name where the policy came from (a file's path).

    Raises :class:`~statekeeper.errors.PolicyError` naming the problem (and the line,
    for a file) when the policy is malformed: an unknown permission, a role that is
    not defined, a pattern that is not one.
    """

    def __init__(
        self,
        principals: Mapping[str, Mapping[str, Any]],
        roles: Mapping[str, Mapping[str, Any]] | None = None,
        *,
        source: str = "<policy>",
        lines: Mapping[tuple[str, ...], int] | None = None,
    ) -> None:
        self.source = source
        where = lines or {}

        def fail(path: tuple[str, ...], problem: str) -> PolicyError:
            line = None
            for cut in range(len(path), 0, -1):
                line = where.get(path[:cut])
                if line is not None:
                    break
            return PolicyError(source, line, problem)

        if not isinstance(principals, Mapping):
            raise PolicyError(source, None, "principals must be a table (principal -> grants)")
        role_grants: dict[str, list[tuple[int, str]]] = {}
        for name, body in (roles or {}).items():
            role_grants[name] = _grants(("roles", str(name)), body, fail, allow_roles=False)
        self._grants: dict[str, _Grants] = {}
        self._raw: dict[str, list[tuple[int, str]]] = {}
        for name, body in principals.items():
            path = ("principals", str(name))
            if type(name) is not str or PRINCIPAL_SYNTAX.fullmatch(name) is None:
                raise fail(
                    path,
                    f"principal name {name!r:.60} is not one a store can be opened as: 1 to"
                    " 128 of letters, digits and . _ @ : + | - (starting with a letter, digit"
                    " or _; no spaces, / or *)",
                )
            grants = _grants(path, body, fail, allow_roles=True)
            for role in body.get("roles", ()) if isinstance(body, Mapping) else ():
                if role not in role_grants:
                    raise fail(
                        (*path, "roles"),
                        f"principal {name!r} has role {role!r}, which is not defined",
                    )
                grants.extend(role_grants[role])
            self._raw[name] = grants
            self._grants[name] = _Grants(grants)

    def __repr__(self) -> str:
        return f"Policy({self.source!r}, principals={sorted(self._grants)!r})"

    @property
    def principals(self) -> list[str]:
        """The principals the policy names (every other one is denied everything)."""
        return sorted(self._grants)

    def knows(self, principal: str) -> bool:
        """True when the policy names ``principal``."""
        return principal in self._grants

    def permission(self, principal: str, agent_id: str) -> str | None:
        """The strongest permission ``principal`` has on ``agent_id``'s namespace
        (None: none at all)."""
        grants = self._grants.get(principal)
        rank = grants.rank(namespace_of(agent_id)) if grants is not None else 0
        return PERMISSIONS[rank - 1] if rank else None

    def allows(self, principal: str, agent_id: str, permission: str) -> bool:
        """True when ``principal`` has ``permission`` (or a stronger one) on the
        namespace of ``agent_id``."""
        grants = self._grants.get(principal)
        if grants is None:
            return False
        return grants.rank(namespace_of(agent_id)) >= _RANK[permission]

    def reaches(self, principal: str, namespace: str, permission: str = "read") -> bool:
        """True when ``principal`` has ``permission`` on ``namespace`` or on some
        namespace below it (``""``: anywhere at all): whether a subscription filtered to
        that part of the tree could ever deliver an event."""
        return self._granted(principal, namespace, permission, _reaches)

    def reaches_prefix(self, principal: str, agent_prefix: str, permission: str = "read") -> bool:
        """True when ``principal`` has ``permission`` on the namespace of some agent id
        starting with ``agent_prefix``: whether a subscription filtered to that prefix
        could ever deliver an event. A prefix may end inside a segment and so cross
        namespaces: ``"glo"`` reaches the root namespace's agents ``glo...`` and the
        namespaces ``globex``, ``glow/...``; ``"acme/b"`` the agents ``acme/b...`` of
        ``acme`` and the namespaces ``acme/b...`` (and no others)."""
        grants, raw = self._grants.get(principal), self._raw.get(principal)
        if grants is None or raw is None:
            return False
        wanted = _RANK[permission]
        cut = agent_prefix.rfind("/")
        segments = agent_prefix[:cut].split("/") if cut >= 0 else []
        if any(s in ("", ".", "..") for s in segments):
            return False  # no agent id starts so
        if grants.rank("/".join(segments)) >= wanted:
            return True  # an agent of that namespace itself: '<namespace>/<partial>...'
        partial = agent_prefix[cut + 1 :]
        return any(
            rank >= wanted and _reaches_partial(pattern, segments, partial) for rank, pattern in raw
        )

    def covers(self, principal: str, namespace: str, permission: str) -> bool:
        """True when one of ``principal``'s patterns grants ``permission`` (or a
        stronger one) on ``namespace`` and on every namespace below it (``""``: the
        whole store, which only ``**`` covers)."""
        return self._granted(principal, namespace, permission, _covers)

    def _granted(
        self,
        principal: str,
        namespace: str,
        permission: str,
        match: Callable[[str, list[str]], bool],
    ) -> bool:
        """Whether a pattern of ``principal`` granting ``permission`` (or a stronger
        one) ``match``-es the segments of ``namespace``."""
        grants = self._raw.get(principal)
        if grants is None:
            return False
        wanted = _RANK[permission]
        segments = namespace.split("/") if namespace else []
        return any(rank >= wanted and match(pattern, segments) for rank, pattern in grants)

    def check_namespace(
        self, principal: str, namespace: str, permission: str, operation: str
    ) -> None:
        """Raise :class:`~statekeeper.errors.AccessDenied` unless ``principal`` has
        ``permission`` on ``namespace`` and every namespace below it (:meth:`covers`):
        the check of an operation on a whole namespace (a backup, a restore, a
        retention run through a store opened in it). ``""`` is the whole store."""
        if principal not in self._grants:
            raise AccessDenied(
                principal, permission, operation, None, "the policy does not name it",
                namespace=namespace,
            )  # fmt: skip
        if not self.covers(principal, namespace, permission):
            why = (
                f"needs {permission} on namespace {namespace!r} and every namespace below"
                f" it (a pattern such as {namespace + '/**'!r})"
                if namespace
                else f"needs {permission} on every namespace (**)"
            )
            raise AccessDenied(principal, permission, operation, None, why, namespace=namespace)

    def is_store_admin(self, principal: str) -> bool:
        """True when ``principal`` has ``admin`` on ``**`` (every namespace)."""
        grants = self._grants.get(principal)
        return grants is not None and grants.store_admin

    def check(self, principal: str, agent_id: str | None, permission: str, operation: str) -> None:
        """Raise :class:`~statekeeper.errors.AccessDenied` unless allowed (``agent_id``
        None: a store-wide operation, which needs ``admin`` on ``**``)."""
        if principal not in self._grants:
            raise AccessDenied(
                principal, permission, operation, agent_id, "the policy does not name it"
            )
        if agent_id is None:
            if not self.is_store_admin(principal):
                raise AccessDenied(
                    principal, permission, operation, None, "needs admin on every namespace (**)"
                )
            return
        if not self.allows(principal, agent_id, permission):
            ns = namespace_of(agent_id)
            raise AccessDenied(
                principal,
                permission,
                operation,
                agent_id,
                f"needs {permission} on namespace {ns!r}"
                if ns
                else f"needs {permission} on the root namespace",
            )

    def to_dict(self) -> dict[str, Any]:
        """The grants of every principal (roles expanded): for the audit log and
        ``statekeeper policy show``."""
        out: dict[str, Any] = {}
        for name, grants in sorted(self._raw.items()):
            by: dict[str, list[str]] = {}
            for rank, pattern in grants:
                by.setdefault(PERMISSIONS[rank - 1], []).append(pattern)
            out[name] = {perm: sorted(set(p)) for perm, p in sorted(by.items())}
        return out

    def row_grants(self, roles: Mapping[str, str]) -> list[tuple[str, str, int]]:
        """The grants of the principals in ``roles`` (principal -> database role) for
        PostgreSQL row-level security
        (:func:`statekeeper.backends.postgres.row_security.install_row_security`):
        ``(database role, POSIX regex over the namespace, 1 read / 2 write / 3 admin)``.
        A principal the policy does not name is refused (it would be given nothing)."""
        out: list[tuple[str, str, int]] = []
        for principal, role in roles.items():
            if principal not in self._raw:
                raise PolicyError(self.source, None, f"the policy does not name {principal!r}")
            out.extend((role, posix_pattern(p), rank) for rank, p in self._raw[principal])
        return out

    @classmethod
    def load(cls, path: str) -> Policy:
        """A policy from a TOML file (see :mod:`.policy_file`)."""
        from .policy_file import load_policy

        return load_policy(path)


def _reaches(pattern: str, segments: list[str]) -> bool:
    """Whether ``pattern`` matches some namespace that starts with ``segments``."""
    if pattern == "":
        return not segments  # the root namespace only
    parts = pattern.split("/")
    for index, segment in enumerate(segments):
        if index == len(parts):
            return False  # the pattern ends above the namespace
        part = parts[index]
        if part == "**":
            return True  # matches any number of segments: the rest can follow
        if compile_pattern(part).fullmatch(segment) is None:
            return False
    return True  # the namespace is a prefix of what the pattern matches


def _reaches_partial(pattern: str, segments: list[str], partial: str) -> bool:
    """Whether ``pattern`` matches some namespace ``segments`` + one more segment that
    starts with ``partial`` (+ any below it)."""
    if pattern == "" or not _reaches(pattern, segments):
        return False
    parts = pattern.split("/")
    if any(part == "**" for part in parts[: len(segments) + 1]):
        return True  # a '**' at or above the next segment: it takes any
    if len(parts) <= len(segments):
        return False  # the pattern ends at (or above) the namespace
    glob = parts[len(segments)]
    states = _glob_closure(glob, {0})
    for char in partial:  # the glob's states after reading the partial segment
        states = _glob_closure(
            glob,
            {i + (glob[i] != "*") for i in states
             if i < len(glob) and (glob[i] in "*?" or glob[i] == char)},
        )  # fmt: skip
        if not states:
            return False
    return True  # what is left of the glob can always be completed


def _glob_closure(glob: str, states: set[int]) -> set[int]:
    """``states`` (positions in ``glob``) and those past the ``*``s at them (a ``*``
    matches nothing too)."""
    out, todo = set(states), list(states)
    while todo:
        i = todo.pop()
        if i < len(glob) and glob[i] == "*" and i + 1 not in out:
            out.add(i + 1)
            todo.append(i + 1)
    return out


def _covers(pattern: str, segments: list[str]) -> bool:
    """Whether ``pattern`` matches the namespace ``segments`` and every namespace
    below it: its parts match the segments one by one up to a final ``**``."""
    if pattern == "":
        return False  # the root namespace only, never what lies below it
    parts = pattern.split("/")
    for index, part in enumerate(parts):
        if part == "**":
            # matches any number of segments, but only when nothing follows it
            return index == len(parts) - 1
        if index == len(segments):
            return False  # the pattern asks for more segments than the namespace has
        if compile_pattern(part).fullmatch(segments[index]) is None:
            return False
    return False  # the pattern ends on a plain segment: the namespaces below are not matched


def _grants(
    path: tuple[str, ...],
    body: object,
    fail: Any,
    *,
    allow_roles: bool,
) -> list[tuple[int, str]]:
    if not isinstance(body, Mapping):
        raise fail(path, f"{'.'.join(path)} must be a table, not {type(body).__name__}")
    out: list[tuple[int, str]] = []
    for key, value in body.items():
        if key == "roles" and allow_roles:
            if not _string_list(value):
                raise fail((*path, key), "roles must be a list of role names")
            continue
        if key not in _RANK:
            allowed = ", ".join(("roles", *PERMISSIONS) if allow_roles else PERMISSIONS)
            raise fail((*path, str(key)), f"unknown key {key!r} in {'.'.join(path)} ({allowed})")
        if not _string_list(value):
            raise fail((*path, key), f"{key} must be a list of namespace patterns")
        for pattern in value:
            try:
                compile_pattern(pattern)
            except ValueError as exc:
                # the line of the pattern itself when the file maps it, else the key's
                raise fail((*path, key, pattern), str(exc)) from None
            out.append((_RANK[key], pattern))
    return out


def _string_list(value: object) -> bool:
    return isinstance(value, list | tuple) and all(type(v) is str for v in value)
