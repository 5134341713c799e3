"""records.py split into the package statekeeper/records/ (issue 11): every name it
defined is still there, the very object of its new home; every type keeps
``statekeeper.records`` as its ``__module__``, so a record pickles to the bytes it did
before the split (and a pickle made before it loads), and its annotations resolve."""

from __future__ import annotations

import dataclasses
import importlib
import pickle
import typing

import pytest

from statekeeper import records
from statekeeper.records import (
    AgentInfo,
    AppendResult,
    Event,
    FeedEvent,
    LeaseInfo,
    RawEvent,
    RawSnapshot,
    Snapshot,
    StreamRows,
)

#: the names records.py defined before the split, by the module that holds each now
HOMES = {
    "decoded": "STEP_KEY_PREFIX Event EventType Snapshot make_snapshot",
    "raw": "AgentInfo EventRow RawEvent RawSnapshot SnapshotRow StreamExport StreamRows"
    " event_rows make_raw_snapshot",
    "writes": "AppendRequest AppendResult AuditMark Fence LeaseChange LeaseInfo RewriteRequest"
    " StreamChange _set_agent_id _set_duplicate _set_first_seq _set_last_seq",
    "feed": "FeedEvent FeedRecord",
}

_HEAD = b"\x80\x04\x95"
_MOD = b"\x00\x00\x00\x00\x00\x00\x00\x8c\x13statekeeper.records\x94"
#: (record, its pickle (protocol 4) as made by records.py before the split)
PICKLES: list[tuple[object, bytes]] = [
    (
        Event("a", 1, "note", 1.5, {"k": 1}, [], "s", 1, "me", "key"),
        _HEAD + b"[" + _MOD + b"\x8c\x05Event\x94\x93\x94)\x81\x94]\x94(\x8c\x01a\x94K\x01"
        b"\x8c\x04note\x94G?\xf8\x00\x00\x00\x00\x00\x00}\x94\x8c\x01k\x94K\x01s]\x94\x8c\x01s"
        b"\x94K\x01\x8c\x02me\x94\x8c\x03key\x94eb.",
    ),
    (
        Snapshot("a", 2, "s", {"x": [1]}, 1, 1.0, 2.0, 1.5),
        _HEAD + b"_" + _MOD + b"\x8c\x08Snapshot\x94\x93\x94)\x81\x94]\x94(\x8c\x01a\x94K\x02"
        b"\x8c\x01s\x94}\x94\x8c\x01x\x94]\x94K\x01asK\x01G?\xf0\x00\x00\x00\x00\x00\x00G@\x00"
        b"\x00\x00\x00\x00\x00\x00G?\xf8\x00\x00\x00\x00\x00\x00eb.",
    ),
    (
        RawEvent(3, "patch", 1.5, b"p", b"c"),
        _HEAD + b"G" + _MOD + b"\x8c\x08RawEvent\x94\x93\x94)\x81\x94]\x94(K\x03\x8c\x05patch"
        b"\x94G?\xf8\x00\x00\x00\x00\x00\x00C\x01p\x94C\x01c\x94eb.",
    ),
    (
        RawSnapshot(3, 1.5, b"p", b"c"),
        _HEAD + b"B" + _MOD + b"\x8c\x0bRawSnapshot\x94\x93\x94)\x81\x94]\x94(K\x03G?\xf8\x00"
        b"\x00\x00\x00\x00\x00C\x01p\x94C\x01c\x94eb.",
    ),
    (
        AppendResult("a", 1, 2, True),
        _HEAD + b"9" + _MOD + b"\x8c\x0cAppendResult\x94\x93\x94)\x81\x94]\x94(\x8c\x01a\x94K"
        b"\x01K\x02\x88eb.",
    ),
    (
        AgentInfo("a", 3, 1.0, 2.0),
        _HEAD + b"E" + _MOD + b"\x8c\tAgentInfo\x94\x93\x94)\x81\x94]\x94(\x8c\x01a\x94K\x03G?"
        b"\xf0\x00\x00\x00\x00\x00\x00G@\x00\x00\x00\x00\x00\x00\x00eb.",
    ),
    (
        LeaseInfo("a", "h", 4, 9.5),
        _HEAD + b"@" + _MOD + b"\x8c\tLeaseInfo\x94\x93\x94)\x81\x94]\x94(\x8c\x01a\x94\x8c\x01h"
        b"\x94K\x04G@#\x00\x00\x00\x00\x00\x00eb.",
    ),
    (
        FeedEvent(7, Event("a", 1, "note", 1.5), 1, True),
        _HEAD + b"e" + _MOD + b"\x8c\tFeedEvent\x94\x93\x94)\x81\x94]\x94(K\x07h\x00\x8c\x05"
        b"Event\x94\x93\x94)\x81\x94]\x94(\x8c\x01a\x94K\x01\x8c\x04note\x94G?\xf8\x00\x00\x00"
        b"\x00\x00\x00}\x94]\x94NK\x01NNebK\x01\x88eb.",
    ),
    (
        StreamRows("a", 1, None, [(1, "t", 1.0, b"p", b"c")], None, []),
        _HEAD + b"S" + _MOD + b"\x8c\nStreamRows\x94\x93\x94(\x8c\x01a\x94K\x01N]\x94(K\x01\x8c"
        b"\x01t\x94G?\xf0\x00\x00\x00\x00\x00\x00C\x01p\x94C\x01c\x94t\x94aN]\x94Nt\x94\x81\x94.",
    ),
]


def test_every_name_of_the_unsplit_module_is_its_new_homes_object() -> None:
    for home, names in HOMES.items():
        module = importlib.import_module(f"statekeeper.records.{home}")
        for name in names.split():
            assert getattr(records, name) is getattr(module, name), (home, name)


def _types() -> list[type]:
    found = {
        id(obj): obj
        for home in HOMES
        for obj in vars(importlib.import_module(f"statekeeper.records.{home}")).values()
        if isinstance(obj, type) and obj.__module__.startswith("statekeeper.records")
    }
    return list(found.values())


def test_every_type_keeps_the_public_module_and_its_annotations_resolve() -> None:
    types = _types()
    assert len(types) == 17
    for cls in types:
        assert cls.__module__ == "statekeeper.records", cls
        assert getattr(records, cls.__qualname__) is cls
        typing.get_type_hints(cls)  # (resolved in statekeeper.records: every name is there)
    assert typing.get_type_hints(records.AppendRequest)["fence"] == records.Fence | None


@pytest.mark.parametrize("record, before", PICKLES, ids=[type(r).__name__ for r, _ in PICKLES])
def test_a_record_pickles_to_the_bytes_it_did_before_the_split(
    record: object, before: bytes
) -> None:
    assert pickle.dumps(record, protocol=4) == before
    loaded = pickle.loads(before)
    assert loaded == record and type(loaded) is type(record)
    if dataclasses.is_dataclass(record):
        assert repr(loaded) == repr(record)
