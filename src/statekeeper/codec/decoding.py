"""Decoding records into documents: open and parse in one step, and the load and
replay paths (a record viewed in place, the next record of a chain, a run of them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import (
    IntegrityError,
    StatekeeperError,
)
from . import layout, links
from .appends import (
    _APPEND_HEAD,
    _append_run,
    appends_checked,
)
from .formats import JSON, MSGPACK, has_marker
from .layout import (
    _CHECKSUM_NAMES,
    _JSON_TAG,
    _MSGPACK_TAG,
    CHAIN_BROKEN,
    FLAG_BLAKE3,
    VERSION,
    Opened,
    _new_tuple,
    _orjson_loads,
)
from .links import _B3_JSON, _HASHES, _SHA_JSON, _names, _plain_link
from .opening import Opening
from .types import from_plain

if TYPE_CHECKING:
    from ..records import EventRow

# bound by assignment, not imported by name: CPython 3.11 compiles a method call on a
# name imported from a module (``_seq_ts.pack(...)``) without LOAD_METHOD (a bound
# method made per call on the save and load paths); assigned, the bytecode is the
# one of the unsplit pipeline.py
_seq_ts = layout._seq_ts
_PLAIN_ANY = links._PLAIN_ANY
_PLAIN_JSON = links._PLAIN_JSON


class Decoding(Opening):
    """Open and parse: the documents of records, verified."""

    def decode(
        self,
        agent_id: str,
        seq: int,
        record_type: str,
        timestamp: float,
        payload: bytes,
        checksum: bytes,
    ) -> tuple[Any, Opened]:
        """Open and deserialize in one step: ``(document, opened record)``."""
        doc, opened, _ = self.decode_typed(agent_id, seq, record_type, timestamp, payload, checksum)
        return doc, opened

    def decode_typed(
        self,
        agent_id: str,
        seq: int,
        record_type: str,
        timestamp: float,
        payload: bytes,
        checksum: bytes,
    ) -> tuple[Any, Opened, bool]:
        """Like :meth:`decode`, plus whether the document may hold typed values (False:
        it is plain JSON, and copies of it need no type handling)."""
        if (
            self.keyring is None
            and type(payload) is bytes
            and type(checksum) is bytes
            and len(payload) >= 35
            and (hasher := _PLAIN_ANY.get(payload[:3])) is not None
        ):  # every load's inner loop: the fast path of open(), inlined
            link = _plain_link(hasher, agent_id, record_type, seq, timestamp, payload)
            if link != checksum:
                raise IntegrityError(agent_id, seq, f"{record_type} record checksum mismatch")
            body = payload[35:]
            flags = payload[1]
            opened = _new_tuple(
                Opened,
                (
                    body,
                    payload[3:35],
                    link,
                    flags & 0x03,
                    None,
                    VERSION,
                    _CHECKSUM_NAMES[flags & FLAG_BLAKE3],
                ),
            )
        else:
            opened = self.open(agent_id, seq, record_type, timestamp, payload, checksum)
            body = opened[0]
        fmt = opened[3]
        if fmt == JSON:  # inlined: this is every load's inner loop
            try:
                doc = _orjson_loads(body)
            except ValueError as exc:
                raise IntegrityError(agent_id, seq, f"payload unreadable: {exc}") from exc
            if body.find(b"$") >= 0 and has_marker(body, _JSON_TAG):
                return from_plain(doc, self.types), opened, True
            return doc, opened, False
        # msgpack (a snapshot made of a save's packed bytes, or a msgpack store): typed
        # values are tagged as in JSON, with the tag key packed as a string
        if fmt != MSGPACK or (body.find(b"$") >= 0 and has_marker(body, _MSGPACK_TAG)):
            return self.deserialize(body, agent_id, seq, fmt=fmt), opened, True
        try:  # (no tag in it: parsed as it is, the marker not looked for again)
            return self._format(fmt, agent_id, seq).loads_plain(body), opened, False
        except Exception as exc:
            raise IntegrityError(agent_id, seq, f"payload unreadable: {exc}") from exc

    def decode_view(
        self,
        agent_id: str,
        seq: int,
        record_type: str,
        timestamp: float,
        payload: bytes,
        checksum: bytes,
    ) -> tuple[Any, bytes, bytes, int, bool] | None:
        """:meth:`decode_typed` of a record stored as its canonical plaintext (no key,
        version 1, not compressed: every record of a store without a key) without
        copying its body out of ``payload``: ``(document, prev link, link, format,
        typed)``, the body parsed from a view of ``payload``. None when the record is
        not of that kind (:meth:`decode_typed` then opens it, or says why it cannot).

        What a load at a snapshot uses: the copy of a 33 KB snapshot's body and the
        :class:`Opened` built around it are not needed to parse it (docs/benchmarks.md,
        "cold11b"). Raises as :meth:`decode_typed` does for a record of that kind.
        """
        if (
            self.keyring is not None
            or type(payload) is not bytes
            or type(checksum) is not bytes
            or len(payload) < 35
            or (hasher := _PLAIN_ANY.get(payload[:3])) is None
        ):
            return None
        link = _plain_link(hasher, agent_id, record_type, seq, timestamp, payload)
        if link != checksum:
            raise IntegrityError(agent_id, seq, f"{record_type} record checksum mismatch")
        fmt = payload[1] & 0x03
        if payload.find(b"$", 35) >= 0 and has_marker(
            payload, _JSON_TAG if fmt == JSON else _MSGPACK_TAG, 35
        ):  # holds a typed value: the general way (looked for in place: no copy of the
            # body for a "$" that is not a tag, e.g. a float's byte, ~1 load in 10)
            body = payload[35:]
            if fmt != JSON:
                doc = self.deserialize(body, agent_id, seq, fmt=fmt)
                return doc, payload[3:35], link, fmt, True
            try:
                doc = _orjson_loads(body)
            except ValueError as exc:
                raise IntegrityError(agent_id, seq, f"payload unreadable: {exc}") from exc
            return from_plain(doc, self.types), payload[3:35], link, fmt, True
        view = memoryview(payload)[35:]
        try:
            if fmt == JSON:
                doc = _orjson_loads(view)
            else:
                parser = self._formats.get(fmt) or self._format(fmt, agent_id, seq)
                fast = parser._fast  # (what loads_plain tries first, without its two calls)
                try:
                    doc = fast(view) if fast is not None else parser.loads_plain(view)
                except Exception:  # (refused: msgpack's parser answers, or says why)
                    doc = parser.loads_plain(view)
        except Exception as exc:
            raise IntegrityError(agent_id, seq, f"payload unreadable: {exc}") from exc
        return doc, payload[3:35], link, fmt, False

    def decode_next(
        self,
        agent_id: str,
        seq: int,
        record_type: str,
        timestamp: float,
        payload: bytes,
        checksum: bytes,
        prev: bytes | None,
    ) -> tuple[Any, bytes, bool]:
        """Decode the record that follows one whose link is ``prev`` in a stream (None:
        not known): ``(document, its link, may hold typed values)``.

        Raises :class:`IntegrityError` when the record does not verify, and when it
        verifies but does not follow ``prev`` (the chain is broken).
        """
        if (
            self.keyring is None
            and type(payload) is bytes
            and type(checksum) is bytes
            and len(payload) >= 35
            and (hasher := _PLAIN_JSON.get(payload[:3])) is not None
        ):  # every fold's inner loop: the common case, kept short
            link = hasher(
                b"".join(
                    (
                        b"sk-link/1",
                        _names(agent_id, record_type),
                        _seq_ts.pack(seq, timestamp),
                        payload,
                    )
                )
            ).digest()
            if link != checksum:
                raise IntegrityError(agent_id, seq, f"{record_type} record checksum mismatch")
            if prev is not None and not payload.startswith(prev, 3):
                raise IntegrityError(agent_id, seq, CHAIN_BROKEN)
            body = payload[35:]
            try:
                doc = _orjson_loads(body)
            except ValueError as exc:
                raise IntegrityError(agent_id, seq, f"payload unreadable: {exc}") from exc
            if body.find(b"$") >= 0 and has_marker(body, _JSON_TAG):
                return from_plain(doc, self.types), link, True
            return doc, link, False
        doc, opened, rich = self.decode_typed(
            agent_id, seq, record_type, timestamp, payload, checksum
        )
        if opened.prev is not None and prev is not None and opened.prev != prev:
            raise IntegrityError(agent_id, seq, CHAIN_BROKEN)
        return doc, opened.link, rich

    def decode_chain(
        self,
        agent_id: str,
        events: Sequence[EventRow],
        prev: bytes | None,
        appends: bool = False,
    ) -> tuple[list[Any], bytes | None, bool, StatekeeperError | None]:
        """:meth:`decode_next` of consecutive stored events (``(seq, type, timestamp,
        payload, checksum)`` rows, :data:`~statekeeper.records.EventRow`), the first
        following a record whose link is ``prev``: ``(documents, the last one's link,
        whether any may hold typed values, the error that stopped it)``. Decoding stops
        at the first record that does not verify or does not follow the one before; the
        documents before it are returned with that error, so that a fold applies them
        (and raises their own errors first) before raising it.

        One call per replay instead of one per event: a load replays up to
        ``snapshot_every`` events, and the call and its seven arguments were ~1/5 of
        each event's cost (cProfile of 99-event replays, docs/benchmarks.md, load11).
        A plain record whose chain link is the expected one (a ``startswith``: link and
        length at once) and whose header is a plain JSON one (either algorithm) is
        checked here; any other goes through :meth:`decode_next`, which names what is
        wrong.

        With ``appends``, the document of an event that is one plain append to a list
        (``{"ops":[{"op":"add","path":"<pointer>/-","value":V}]}`` exactly, as a save
        of a chat writes it) is the tuple ``(pointer, V)``, only ``V`` parsed: the
        operation's dict, its list and its three strings were ~1/3 of the objects a
        replayed message made, built to be taken apart by the fold
        (docs/benchmarks.md, "coldload2"). Such a body is checked byte by byte: it is
        the prefix, a pointer without ``\\`` or ``"``, ``","value":``, one JSON
        value and ``}]}``; a value that may hold a typed value, or anything else, is
        parsed whole as before. (The value's bytes parse as one JSON document only if
        they end where the value does, so a body with more operations, or keys after
        them, never matches.) The record's checksum is verified first either way.
        """
        plain = self.keyring is None
        if appends and plain and prev is not None and len(events) > 1:
            run = _append_run(agent_id, events, prev)
            if run is not None:
                pointer, values, last = run
                if type(pointer) is str:
                    return [(pointer, v) for v in values], last, False, None
                return list(zip(pointer, values, strict=True)), last, False, None
        docs: list[Any] = []
        append = docs.append
        typed = False
        link = prev
        run_type: str | None = None  # the event type of the run the prefix is for
        prefix = b""
        pack = _seq_ts.pack
        join = b"".join
        loads = _orjson_loads
        last_path = b""
        pointer = ""
        sha256, sha_head, b3, b3_head = _HASHES[0], _SHA_JSON, _HASHES[1], _B3_JSON
        try:
            for seq, record_type, timestamp, payload, checksum in events:
                # a SHA-256 record (most events) in one startswith, as before BLAKE3
                if plain and link is not None and type(payload) is bytes:
                    if payload.startswith(sha_head + link):
                        hasher = sha256
                    elif payload.startswith(b3_head + link):
                        hasher = b3
                    else:
                        hasher = None
                else:
                    hasher = None
                if hasher is None:
                    doc, link, rich = self.decode_next(
                        agent_id, seq, record_type, timestamp, payload, checksum, link
                    )
                    typed = typed or rich
                    append(doc)
                    continue
                if record_type != run_type:
                    run_type = record_type
                    prefix = b"sk-link/1" + _names(agent_id, record_type)
                digest = hasher(join((prefix, pack(seq, timestamp), payload))).digest()
                if digest != checksum:  # (decode_next raises what is wrong with it)
                    self.decode_next(agent_id, seq, record_type, timestamp, payload, checksum, link)
                if (
                    appends
                    and payload.startswith(_APPEND_HEAD, 35)
                    and payload.endswith(b"}]}")
                    and payload.find(b"$", 63) < 0
                ):
                    end = payload.find(b'","value":', 63)
                    if end > 0 and payload.find(b"\\", 63, end) < 0:
                        if payload[63:end] != last_path:
                            last_path = payload[63:end]
                            pointer = last_path.decode()
                        try:
                            append((pointer, loads(payload[end + 10 : -3])))
                        except ValueError:  # (the whole body is parsed below: its error)
                            pass
                        else:
                            link = digest
                            continue
                body = payload[35:]
                try:
                    doc = loads(body)
                except ValueError as exc:
                    raise IntegrityError(agent_id, seq, f"payload unreadable: {exc}") from exc
                if body.find(b"$") >= 0 and has_marker(body, _JSON_TAG):
                    doc = from_plain(doc, self.types)
                    typed = True
                link = digest
                append(doc)
        except StatekeeperError as exc:
            return docs, link, typed, exc
        return docs, link, typed, None

    def decode_appends(
        self, agent_id: str, events: Sequence[EventRow], prev: bytes | None
    ) -> tuple[str, list[Any], bytes] | None:
        """A run of stored events that each append one value to the same list (a chat's
        saves), the first following a record whose link is ``prev``, verified as
        :meth:`decode_chain` verifies it: ``(the list's pointer, the values in order, the
        last link)``, for the fold to extend the list once (:func:`_append_run`). None
        for anything else — a key, no event, another kind of event, more
        than one list, a record that does not verify —: :meth:`decode_chain` then
        decodes it (and names what is wrong). A run of one (a load one event past its
        snapshot) is checked by :func:`_append_one`, a short run (a load past a tail
        snapshot: at most 7) by :func:`_append_few`: the same checks, record by record,
        without the passes over a run (docs/benchmarks.md, "cold11", 2026-12-05
        afternoon; "cold3"); any run by the C module where it is built
        (:func:`appends_checked`, "coldchain")."""
        if self.keyring is not None or prev is None or not events:
            return None
        return appends_checked(agent_id, events, prev)
