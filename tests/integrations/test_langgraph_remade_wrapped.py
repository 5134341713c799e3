"""A saver's cached thread is not served once another process deleted the thread and
wrote it again up to the same seq — on every kind of store, not only a plain one.

``test_langgraph_remade_read`` covers a plain store, whose record cache holds the
saver's very document. A saver on a governed store (a principal and a policy), on a
namespaced store, or with buffered writes (``durability="async"``) gets copies from
its store, and its check compared the head seq only: ``get_tuple`` served its deleted
checkpoint (no error) while ``list`` showed the new one. The saver now remembers the
head tag stored with the seq it read or wrote, and compares it with the stored one
(read with the seq, through the store's wrapper: a governed store checks read
permission on it as it does on ``head``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from statekeeper.errors import AccessDenied
from statekeeper.governance import Audit, parse_policy
from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.store.governed import governance_of

from ..backends._services import fresh_url
from ..governance._keyring import KEYRING
from .conftest import config, new_thread

POLICY = parse_policy(
    """\
[principals.app]
read = ["**"]
write = ["**"]
"""
)


def _options(kind: str) -> dict[str, Any]:
    """Saver A's store options (B, the other process, opens the same data plainly)."""
    if kind == "governed":
        return {"principal": "app", "policy": POLICY, "audit": Audit(), "keyring": KEYRING}
    if kind == "namespaced":
        return {"namespace": "tenant"}
    if kind == "governed-namespaced":
        return {"principal": "app", "policy": POLICY, "namespace": "tenant", "keyring": KEYRING}
    assert kind == "buffered"
    return {"durability": "async", "flush_interval": 3600.0}


def _peer(kind: str) -> dict[str, Any]:
    """Saver B's options: the same stored ids (namespace) and key as A's store."""
    options: dict[str, Any] = {}
    if "namespaced" in kind:
        options["namespace"] = "tenant"
    if "governed" in kind:
        options["keyring"] = KEYRING
    return options


@pytest.fixture(params=["sqlite", "postgresql", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_url(request.param, tmp_path) as made:
        yield made


def _flush(saver: StatekeeperSaver) -> None:
    saver._portal.call(saver.store.flush())


@pytest.mark.parametrize("kind", ["governed", "namespaced", "governed-namespaced", "buffered"])
@pytest.mark.parametrize("cached_by", ["put", "read"])
def test_get_tuple_on_a_wrapped_store_reads_a_thread_made_again(
    url: str, kind: str, cached_by: str
) -> None:
    a = StatekeeperSaver.from_url(url, **_options(kind))
    b = StatekeeperSaver.from_url(url, **_peer(kind))  # another process, a plain store
    try:
        thread = new_thread()
        meta: Any = {"source": "input", "step": -1}
        writer = a if cached_by == "put" else b
        mine = writer.put(config(thread), empty_checkpoint(), meta, {})["configurable"]
        _flush(writer)  # (buffered: stored, as another process sees it)
        found = a.get_tuple(config(thread))  # cached by A now
        assert found is not None and found.checkpoint["id"] == mine["checkpoint_id"]
        b.delete_thread(thread)
        theirs = b.put(config(thread), empty_checkpoint(), meta, {})["configurable"]
        cached = a._streams[thread]
        assert b._portal.call(b.store.head(cached.agent_id)) == cached.seq  # the same seq
        found = a.get_tuple(config(thread))
        assert found is not None
        assert found.checkpoint["id"] == theirs["checkpoint_id"], "a deleted checkpoint served"
        assert [t.checkpoint["id"] for t in a.list(config(thread))] == [theirs["checkpoint_id"]]
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("kind", ["governed", "buffered"])
def test_an_untouched_cached_thread_is_still_served_from_the_cache(url: str, kind: str) -> None:
    """Control: nothing written by another, the cached view is served (the tags
    compared equal, no load); a write by another at a new seq is read."""
    a = StatekeeperSaver.from_url(url, **_options(kind))
    b = StatekeeperSaver.from_url(url, **_peer(kind))
    try:
        thread = new_thread()
        meta: Any = {"source": "input", "step": -1}
        first = a.put(config(thread), empty_checkpoint(), meta, {})["configurable"]
        st = a._streams[thread]
        found = a.get_tuple(config(thread))  # (buffered: the write is still buffered)
        assert found is not None and found.checkpoint["id"] == first["checkpoint_id"]
        _flush(a)
        found = a.get_tuple(config(thread))
        assert found is not None and found.checkpoint["id"] == first["checkpoint_id"]
        assert a._streams[thread] is st  # served from the cache, not read again
        loop: Any = {"source": "loop", "step": 0}
        second = b.put(config(thread), empty_checkpoint(), loop, {})["configurable"]
        found = a.get_tuple(config(thread))
        assert found is not None and found.checkpoint["id"] == second["checkpoint_id"]
    finally:
        a.close()
        b.close()


def test_the_tag_check_of_a_governed_store_still_needs_read_permission(tmp_path: Path) -> None:
    """The head and tag read goes through the governed store, as ``head`` did: once
    the policy no longer lets the principal read the thread, the cached read is
    refused (not served from the saver's cache)."""
    url = f"sqlite:///{tmp_path / 'gov.db'}"
    with StatekeeperSaver.from_url(url, **_options("governed")) as a:
        thread = new_thread()
        meta: Any = {"source": "input", "step": -1}
        a.put(config(thread), empty_checkpoint(), meta, {})
        gov = governance_of(a.store)
        assert gov is not None
        gov.policy = parse_policy('[principals.app]\nread = ["elsewhere/**"]\n')
        with pytest.raises(AccessDenied):
            a.get_tuple(config(thread))
