"""The fast path of a replay of plain appends (a chat's saves): a run of stored
events that each append one value to a list, verified and decoded in one pass
(:meth:`Codec.decode_chain`, :meth:`Codec.decode_appends`).

Where the C module ``statekeeper.codec._appendrun`` is built (``native/appendrun.c``,
setup.py; not with ``STATEKEEPER_PURE=1``) a run is checked by it in one call
(:func:`appends_checked`): the same checks as :func:`_append_few`, record by record,
without the Python loop around each SHA-256 and parse (docs/benchmarks.md,
"coldchain"); rows it does not take as they are go the Python way.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import struct
from collections.abc import Callable, Sequence
from itertools import repeat
from operator import methodcaller
from typing import TYPE_CHECKING, Any, cast

from . import layout
from .layout import _orjson_loads
from .links import (
    _SHA_JSON,
    _names,
)

if TYPE_CHECKING:
    from ..records import EventRow

# bound by assignment, not imported by name: CPython 3.11 compiles a method call on a
# name imported from a module (``_seq_ts.pack(...)``) without LOAD_METHOD (a bound
# method made per call on the save and load paths); assigned, the bytecode is the
# one of the unsplit pipeline.py
_seq_ts = layout._seq_ts


#: the bytes a plain append's body starts with (:meth:`Codec.decode_chain`, ``appends``);
#: in a stored record they start at 35 and the pointer at 63
_APPEND_HEAD = b'{"ops":[{"op":"add","path":"'
_join = b"".join
_digest = methodcaller("digest")
#: a plain append's whole body (from 35 in a stored record), as :func:`_append_run`
#: takes it: the pointer (no ``"``, ``\\`` or ``$``) and the value (no ``$``: no typed
#: value), the body ending right after the value
_APPEND_BODY = re.compile(rb'\{"ops":\[\{"op":"add","path":"([^"\\$]*)","value":([^$]*)\}\]\}\Z')


def _append_run(
    agent_id: str, events: Sequence[EventRow], link: bytes
) -> tuple[str | list[str], list[Any], bytes] | None:
    """The pointer(s), appended values and last link of a run of stored events that are
    all plain SHA-256 appends (:meth:`Codec.decode_chain`'s ``appends`` case) following
    ``link``, decoded in one pass per step over the whole run instead of one record at
    a time: one pointer (a ``str``) when every record appends to the same list (a
    chat's), else each record's; None when any record is anything else or does not
    verify (the caller then decodes the run record by record, which says what is wrong
    and where).

    Each step is one C-level ``map`` over the run (no Python per record): the body's
    shape (the first record's matched once by :data:`_APPEND_BODY`, the others compared
    with its bytes up to the value, and their ends), the SHA-256 of each link input, one
    comparison of the digests with the checksums, the header and chain link of each, one
    ``$`` search (no typed value) and one ``orjson.loads`` of all the appended values
    joined into one JSON array (docs/benchmarks.md, "coldk"; the comprehensions this
    replaced ran ~1 µs of Python per record). The values are joined with ``,\\n``: a
    value that is not one JSON value by itself cannot make the array parse as the same
    number of elements by running into the next one through a string (a raw newline
    inside a JSON string is refused), and any other miscount falls back. Used only
    without a key (with a key the records are authenticated one by one by AES-GCM;
    without one, a checksum binds each record's bytes, which the batched parse reads
    unchanged).
    """
    try:
        seqs, types, stamps, payloads, checksums = zip(*events, strict=True)
        found = _APPEND_BODY.match(payloads[0], 35)
        if found is None:  # (not a chat's run: no work wasted)
            return None
        n, begin = len(payloads), found.start(2)
        pointer: str | list[str]
        if all(map(bytes.startswith, payloads, repeat(payloads[0][35:begin], n), repeat(35, n))):
            if not all(map(bytes.endswith, payloads, repeat(b"}]}", n))):
                return None
            pointer = found[1].decode()  # (checked once: no ``"``, ``\\`` or ``$``)
            parts = list(map(bytes.__getitem__, payloads, repeat(slice(begin, -3), n)))
        else:  # appends to more than one list
            maybe = list(map(_APPEND_BODY.match, payloads, repeat(35, n)))
            if None in maybe:
                return None
            matched = cast("list[re.Match[bytes]]", maybe)
            pointer = [m[1].decode() for m in matched]
            parts = [m[2] for m in matched]
        if types.count(types[0]) != n:  # (the link input below names the first's type)
            return None
        prefix = b"sk-link/1" + _names(agent_id, types[0])
        inputs = map(
            _join, zip(repeat(prefix, n), map(_seq_ts.pack, seqs, stamps), payloads, strict=True)
        )
        digests = list(map(_digest, map(hashlib.sha256, inputs)))
        if digests != list(checksums):
            return None
        if not (
            all(map(bytes.startswith, payloads, repeat(_SHA_JSON, n)))
            and all(map(bytes.startswith, payloads, (link, *digests), repeat(3, n)))
        ):
            return None
        parts[0] = b"[" + parts[0]
        parts[-1] += b"]"
        joined = b",\n".join(parts)
        if joined.find(b"$") >= 0:  # (a typed value, or a ``$`` in a string)
            return None
        values = _orjson_loads(joined)
        if type(values) is not list or len(values) != n:
            return None
        return pointer, values, digests[-1]
    except (TypeError, ValueError):  # (not bytes, not JSON, not UTF-8: record by record)
        return None


#: a run of at most this many events is checked by :func:`_append_few` (a loop), a
#: longer one by :func:`_append_run` (C-level passes over the run): the passes' fixed
#: cost is ~7 us of CPU, a record's ~2.5 us, so below ~16 records the loop is cheaper
#: (CPU: 2 events 5.5 against 10.3 us, 7: 17.8 against 21.3, 16: equal, 40: 101
#: against 89; instructions: 2 events 69k against 106k, 7: 231k / 253k, 12: 397k /
#: 402k, 16: equal, 24: 783k / 756k), and a load past a tail snapshot replays at most
#: 7 (docs/benchmarks.md, "cold3")
FEW_APPENDS = 12


def _append_few(
    agent_id: str, events: Sequence[EventRow], link: bytes
) -> tuple[str, list[Any], bytes] | None:
    """:func:`_append_run` of a short run, record by record: the pointer, the values
    and the last link when every stored event is a plain SHA-256 append to the same
    list following ``link`` (each one's header and chain link, the checksum of its link
    input, its body's shape matched whole by :data:`_APPEND_BODY` (no ``$``: no typed
    value), its value parsed as one JSON value), else None: :func:`_append_one`'s
    checks for each record (docs/benchmarks.md, "cold3")."""
    try:
        prefix = pointer = b""
        run_type: str | None = None  # (the event type ``prefix`` names)
        values: list[Any] = []
        for seq, record_type, timestamp, payload, checksum in events:
            if not payload.startswith(_SHA_JSON + link):
                return None
            found = _APPEND_BODY.match(payload, 35)
            if found is None:
                return None
            if not prefix:
                pointer = found[1]
            elif found[1] != pointer:
                return None  # (appends to more than one list)
            if record_type != run_type:
                prefix, run_type = b"sk-link/1" + _names(agent_id, record_type), record_type
            link = hashlib.sha256(
                b"".join((prefix, _seq_ts.pack(seq, timestamp), payload))
            ).digest()
            if link != checksum:
                return None
            values.append(_orjson_loads(found[2]))
        if not prefix:
            return None
        return pointer.decode(), values, link
    except (TypeError, ValueError, AttributeError, struct.error):  # (record by record)
        return None


def _native_run() -> Callable[..., Any] | None:
    if os.environ.get("STATEKEEPER_PURE", "") not in ("", "0"):
        return None
    try:
        from . import _appendrun
    except ImportError:  # installed without a compiler or OpenSSL's headers: Python's loop
        return None
    return _appendrun.append_run


#: ``append_run(prefix, record_type, events, link, loads)``: the C check of a run of
#: plain appends (:func:`appends_checked`), None where it is not built
_APPEND_NATIVE = _native_run()


@functools.lru_cache(maxsize=4096)
def _link_prefix(agent_id: str, record_type: str) -> bytes:
    return b"sk-link/1" + _names(agent_id, record_type)


def appends_checked(
    agent_id: str, events: Sequence[EventRow], link: bytes
) -> tuple[str, list[Any], bytes] | None:
    """The pointer, the values and the last link of a run of stored events (at least
    one) that are all plain SHA-256 appends to the same list following ``link``, else
    None: :meth:`Codec.decode_appends`'s check. By the C module where it is built (the
    checks of :func:`_append_few` for a run of any length, one call); rows it does not
    take as they are (not a list of 5-tuples of int, str, float, bytes, bytes; more than
    one event type; a seq past 64 bits) and a store without it: :func:`_append_one`,
    :func:`_append_few` or :func:`_append_run` by the run's length, as before."""
    native = _APPEND_NATIVE
    if native is not None and type(events) is list and type(link) is bytes:
        first = events[0]
        if type(first) is tuple and len(first) == 5 and type(record_type := first[1]) is str:
            prefix = _link_prefix(agent_id, record_type)
            got = native(prefix, record_type, events, link, _orjson_loads)
            if got is not NotImplemented:
                return cast("tuple[str, list[Any], bytes] | None", got)
    n = len(events)
    run = (
        _append_one(agent_id, events[0], link)
        if n == 1
        else _append_few(agent_id, events, link)
        if n <= FEW_APPENDS
        else _append_run(agent_id, events, link)
    )
    if run is None or type(run[0]) is not str:
        return None
    return run[0], run[1], run[2]


def _append_one(agent_id: str, row: EventRow, link: bytes) -> tuple[str, list[Any], bytes] | None:
    """:func:`_append_run` of one stored event: its pointer, ``[value]`` and link when it
    is a plain SHA-256 append following ``link`` (the header and chain link, the
    checksum of its link input, the body's shape matched whole by :data:`_APPEND_BODY`
    (no ``$``: no typed value), the value parsed as one JSON value), else None."""
    try:
        seq, record_type, timestamp, payload, checksum = row
        if not payload.startswith(_SHA_JSON + link):
            return None
        found = _APPEND_BODY.match(payload, 35)
        if found is None:
            return None
        digest = hashlib.sha256(
            b"".join(
                (b"sk-link/1", _names(agent_id, record_type), _seq_ts.pack(seq, timestamp), payload)
            )
        ).digest()
        if digest != checksum:
            return None
        return found[1].decode(), [_orjson_loads(found[2])], digest
    except (TypeError, ValueError, AttributeError, struct.error):  # (record by record)
        return None
