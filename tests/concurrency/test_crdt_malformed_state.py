"""A CRDT read from JSON (agent data, another replica, a hand-written document) is read
as written or refused with ConfigurationError, never silently altered: a tag list given
as a string was read as its characters, a map entry's ``"deleted": "no"`` deleted the
key's value, an entry with neither value nor delete became the value None, and an
ORSet element listed twice kept the tags of one listing only (the other add lost)."""

from __future__ import annotations

from typing import Any

import pytest

from statekeeper.concurrency import LWWMap, ORSet, Timestamp, crdt_from_json
from statekeeper.errors import ConfigurationError

STAMP = [1_700_000_000_000, 0, "n"]


@pytest.mark.parametrize(
    "state",
    [
        {"adds": [["x", "tag1"]], "removed": []},  # tags: a string, not a list
        {"adds": [["x", ["t1"]]], "removed": "t1"},  # removed: a string
        {"adds": [["x", {"t1": 1}]], "removed": []},
    ],
)
def test_orset_tags_that_are_not_a_list_are_refused(state: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError, match="malformed or-set state: ORSet tags"):
        crdt_from_json({"$crdt": "or-set", "state": state})


def test_orset_element_listed_twice_keeps_every_tag() -> None:
    read = ORSet.from_json(
        {"$crdt": "or-set", "state": {"adds": [["x", ["t1"]], ["x", ["t2"]]], "removed": []}}
    )
    assert read.to_json()["state"] == {"adds": [["x", ["t1", "t2"]]], "removed": []}
    # a replica that removed only the add tagged t2 has not removed x
    assert ORSet.from_json({"$crdt": "or-set", "state": {"adds": [], "removed": ["t2"]}}).merge(
        read
    ).value == ["x"]


@pytest.mark.parametrize(
    "entry",
    [
        {"stamp": STAMP, "deleted": "no", "value": 3},
        {"stamp": STAMP, "deleted": 1},
        {"stamp": STAMP},  # neither value nor deleted
        {"stamp": STAMP, "deleted": True, "value": 3},
        {"stamp": STAMP, "deleted": False},
    ],
)
def test_lww_map_entry_neither_live_nor_deleted_is_refused(entry: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError, match="malformed lww-map state: key 'k'"):
        crdt_from_json({"$crdt": "lww-map", "state": {"k": entry}})


def test_lww_map_as_written_reads_back() -> None:
    stamp = Timestamp.from_json(STAMP)
    written = LWWMap().set("a", None, stamp, max_drift=None).delete("b", stamp, max_drift=None)
    written = written.set("c", {"deleted": 1}, stamp, max_drift=None)
    back = LWWMap.from_json(written.to_json())
    assert back == written and back.value == {"a": None, "c": {"deleted": 1}}
    explicit = {"stamp": STAMP, "deleted": False, "value": 3}
    assert LWWMap.from_json({"$crdt": "lww-map", "state": {"k": explicit}}).value == {"k": 3}
