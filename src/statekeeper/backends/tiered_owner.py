"""Who owns a claim of :class:`~statekeeper.backends.tiered.TieredBackend` (a
demotion's, a rehydration's: :mod:`.tiered_claims`), and whether that owner is provably
gone.

A claim's process may be killed after it, leaving the claim behind, and no other process
may take a claim over while its owner can still act (two live demotions of one agent lost
it: h/tiereddemote). So a claim records its owner, and is taken over only once that
owner is provably gone: a process of this machine's current boot, in this pid namespace
(its pids are ours to look up), that no longer runs — no such pid, or one started at
another time (the pid reused) — or, for this process, a claim whose operation is no
longer under way (:data:`IN_FLIGHT`). Anything else (another host or container, another
boot, a platform without /proc, a marker of an earlier version) is never proven gone.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from typing import Any

__all__ = ["IN_FLIGHT", "abandoned_here", "claim_owner", "owner_gone", "owner_where"]

#: the claim tokens of this process's demotions and rehydrations under way, and the
#: streams (encoded) of its feed intents under way (:mod:`statekeeper.store.feed_intents`;
#: a claim or intent of this process whose token is not here is one its operation
#: left: cancelled or failed before its clean-up)
IN_FLIGHT: set[bytes] = set()


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except (OSError, ValueError):
        return None


def _started(pid: int) -> int | None:
    """The start time of process ``pid`` (clock ticks since boot), None if unreadable."""
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # (the name in parentheses may hold spaces)
    try:
        return int(fields[19])  # (field 22 of proc(5); the fields after the name start at 3)
    except (IndexError, ValueError):
        return None


def claim_owner() -> dict[str, Any]:
    """This process, as a claim records it (see :func:`owner_gone`)."""
    pid = os.getpid()
    ns = None
    if sys.platform == "linux":
        with contextlib.suppress(OSError):
            ns = os.readlink("/proc/self/ns/pid")
    return {
        "host": socket.gethostname(),
        "boot": _read("/proc/sys/kernel/random/boot_id") if sys.platform == "linux" else None,
        "pidns": ns,
        "pid": pid,
        "start": _started(pid) if sys.platform == "linux" else None,
    }


def owner_gone(owner: Any, token: bytes) -> bool:
    """Is the process that made a claim (``owner``, :func:`claim_owner` then; ``token``
    the claim's) provably gone? This process: its demotion of that claim is no longer
    under way (:data:`IN_FLIGHT`). Another of this boot and pid namespace: no process
    of its pid (``kill(pid, 0)``: no such process), or one started at another time.
    Anything not provable is not gone."""
    me = claim_owner()
    if not isinstance(owner, dict) or None in (me["boot"], me["pidns"], me["start"]):
        return False
    if any(owner.get(k) != me[k] for k in ("host", "boot", "pidns")):
        return False
    pid, start = owner.get("pid"), owner.get("start")
    if not isinstance(pid, int) or not isinstance(start, int) or pid <= 0:
        return False
    if (pid, start) == (me["pid"], me["start"]):
        return token not in IN_FLIGHT
    try:
        os.kill(pid, 0)  # (signal 0: only asks whether the process exists)
    except ProcessLookupError:
        return True
    except OSError:  # (EPERM: it exists, another user's)
        pass
    now = _started(pid)
    return now is not None and now != start


def abandoned_here(owner: Any, token: bytes) -> bool:
    """Is ``owner`` this process (:func:`claim_owner`, every field known), its operation
    of the claim ``token`` no longer under way (:data:`IN_FLIGHT`)? Exact, unlike
    another process's liveness: such a claim is this process's to go on with."""
    me = claim_owner()
    if not isinstance(owner, dict) or None in me.values():
        return False
    return all(owner.get(k) == v for k, v in me.items()) and token not in IN_FLIGHT


def owner_where(owner: Any, token: bytes) -> str:
    """Where the process that made a claim is, as far as this process can tell:
    ``"running"`` (this process with the operation under way, or a process of this
    boot and pid namespace of its pid and start time), ``"gone"`` (:func:`owner_gone`),
    ``"unknown"`` (no owner recorded: an earlier version), ``"host"``, ``"boot"`` or
    ``"pidns"`` (another host, boot or pid namespace: its liveness cannot be looked up),
    ``"unprovable"`` (a platform without /proc, or a malformed owner)."""
    if not isinstance(owner, dict):
        return "unknown"
    me = claim_owner()
    for key in ("host", "boot", "pidns"):
        if owner.get(key) != me[key]:
            return key
    if owner_gone(owner, token):
        return "gone"
    pid, start = owner.get("pid"), owner.get("start")
    if None in (me["boot"], me["pidns"], me["start"]) or not isinstance(pid, int):
        return "unprovable"
    if (pid, start) == (me["pid"], me["start"]):
        return "running"  # (this process, its operation under way: owner_gone said no)
    return "running" if _started(pid) == start else "unprovable"
