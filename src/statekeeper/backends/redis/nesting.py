"""Two stores whose prefixes nest inside each other's agent keys are refused.

An agent's keys are ``<base><kind><id>`` (:data:`.keys.AGENT_KINDS`: ``a:``, ``s:``,
``l:``, ``d:``), so the store at ``p:a:`` (its agent ``x`` at ``p:a:a:x``… and its
``p:a:epoch``) lives inside the agents of the store at ``p:`` (its agent ``a:x`` is the
same hash as ``p:a:``'s agent ``x``, at ``p:a:x``): writes of one landed in the other's
agents, and ``p:``'s unlisted agents (so its backups) and ``drop_all`` took in
``p:a:``'s keys, without an error. A writable backend checks, at open:

* every outer prefix its own could be nested in (``Q`` where the prefix is
  ``Q<kind>…`` or ``Q{tag}<kind>…``): a store there (a plain store's identity marker,
  a sharded store's recorded number of shards) refuses the open;
* when it creates its store (no marker or meta hash yet), one ``SCAN`` for an inner
  store's identity marker among the keys its agents would take (an inner store created
  first). A store created by an earlier version next to an inner one is found when the
  inner one opens.
"""

from __future__ import annotations

from typing import Any

from ...errors import ConfigurationError
from .keys import AGENT_KINDS, Layout

__all__ = ["check_nesting"]


def _escape(raw: bytes) -> bytes:
    return b"".join(b"\\" + bytes((c,)) if c in b"*?[]\\" else bytes((c,)) for c in raw)


def outer_prefixes(prefix: bytes) -> list[bytes]:
    """Every prefix ``Q`` whose store's agent keys ``prefix`` starts inside of."""
    found: list[bytes] = []
    for i in range(len(prefix)):
        if prefix[i : i + 2] in AGENT_KINDS:
            found.append(prefix[:i])
        elif prefix[i : i + 1] == b"{":
            end = prefix.find(b"}", i)
            if end > i and prefix[end + 1 : end + 3] in AGENT_KINDS:
                found.append(prefix[:i])
    return list(dict.fromkeys(found))


def _refuse(outer: bytes, inner: bytes) -> ConfigurationError:
    o, i = outer.decode("utf-8", "replace"), inner.decode("utf-8", "replace")
    return ConfigurationError(
        f"redis prefix {i!r} lies inside the agent keys of the store at prefix {o!r} "
        f"(its agent ids starting {i[len(o) + 2 :]!r} would be {i!r}'s agents): writes of "
        "one would land in the other's agents; give each store a prefix that does not "
        "start with the other's followed by a:, s:, l: or d: (e.g. 'app1:' and 'app2:')"
    )


async def check_nesting(client: Any, layout: Layout) -> None:
    """Refuse (:class:`ConfigurationError`) a prefix nested in another store's agent
    keys, or holding one in its own (see the module documentation)."""
    prefix = layout.prefix
    outers = outer_prefixes(prefix)
    own = [layout.meta, *(k.epoch for k in layout.shard_keys)]
    async with client.pipeline(transaction=False) as pipe:
        for q in outers:  # a plain store's identity marker, a sharded one's layout
            pipe.type(q + b"epoch")
            pipe.hexists(q + b"meta", b"shards")
        for key in own:
            pipe.exists(key)
        replies = await pipe.execute()
    for n, q in enumerate(outers):
        if replies[2 * n] in (b"string", "string") or replies[2 * n + 1]:
            raise _refuse(q, prefix)
    if any(int(r) for r in replies[2 * len(outers) :]):
        return  # (the store exists: its inner stores were looked for when it was created)
    own_epochs = set(own)
    async for key in client.scan_iter(match=_escape(prefix) + b"*epoch", count=1000):
        key = bytes(key)
        if key in own_epochs or not layout.owns(key):
            continue
        # (in this store's agent keys; its agents' keys are hashes and sorted sets, a
        # delete receipt never ends so: a string is another store's identity marker)
        if await client.type(key) in (b"string", "string"):
            raise _refuse(prefix, _store_prefix(key[: -len(b"epoch")], prefix))


def _store_prefix(inner: bytes, outer: bytes) -> bytes:
    """The inner store's prefix from its marker's base (a sharded store's base ends
    with its ``{tag}``)."""
    if inner.endswith(b"}"):
        start = inner.rfind(b"{")
        if start > len(outer):
            return inner[:start]
    return inner
