"""How LangGraph values become statekeeper JSON, and back, without importing stray types.

A statekeeper state document is JSON, so every value LangGraph hands the saver (channel
values, pending writes, metadata) is *packed* into JSON first:

* plain JSON (``dict`` with ``str`` keys, ``list``, ``str``, 64-bit ``int``, finite
  ``float``, ``bool``, ``None``) is stored as it is — readable in the state document.
  A ``tuple`` becomes a list, exactly as LangGraph's own serializer does;
* a LangChain message of one of the core classes (``HumanMessage``, ``AIMessage``,
  their chunks, ``ToolMessage``…) becomes ``{"$m": [class name, fields]}``, fields
  equal to their default left out;
* anything else goes through LangGraph's serde protocol
  (``serde.dumps_typed(value) -> (type, bytes)``) and is stored as
  ``{"$s": [type, base64]}``;
* a user dict with a key starting with ``$`` is wrapped as ``{"$d": {...}}`` so it is
  never mistaken for one of these tags.

**Pooling.** Messages and serde blobs of at least ``pool_min`` bytes are stored once per
thread in the document's ``pool`` under a content hash and referenced as
``{"$p": key}``. A message written by a node (a pending write), then appended to the
``messages`` channel, then listed again at every later checkpoint is stored once. When
``add_messages`` gives that message its id after the write was stored, the channel holds
``{"$r": [key, id]}`` (the pooled message with that id): its content is still stored once.

**Safe loading.** Unpacking builds messages only from the fixed table of LangChain core
classes below (no import by name), and hands ``$s`` blobs to the serializer, which by
default is a :class:`JsonPlusSerializer` restricted to LangGraph's
``SAFE_MSGPACK_TYPES``, the types the user allows, and the data classes this process
has already imported (:func:`safe_serializer`): a type named in stored data is never
imported, and one that is not allowed is never called — the serializer returns its raw
fields instead, with a warning.

Where each part lives (one job a module; every name is importable from here too):
:mod:`.packing` (values to cells, the memo of packed messages), :mod:`.unpacking` (cells to
values), :mod:`.messages` (the message class table, building a message from stored
fields), :mod:`.memo` (what the codec remembers of messages: :data:`Memo`,
:class:`Stored`, :class:`Built`), :mod:`.fingerprints` (what a message's fields held,
which changed), :mod:`.pooling` (pool keys and references) and :mod:`.safe_serde`
(:func:`safe_serializer`). Packing and unpacking are one format: a change to one side
is made to the other in the same commit.
"""

from __future__ import annotations

from langgraph.checkpoint.serde.base import SerializerProtocol

# re-exported: the names this module held before it was split (issue 11). A test that
# replaces one of them replaces it in the module that reads it (see each module)
from .fingerprints import Fingerprint, fingerprint, fp_id
from .memo import Built, Memo, Stored, resolved
from .messages import MESSAGE_CLASSES, is_message
from .packing import _Packing
from .pooling import fresh_ref, pool_refs
from .safe_serde import KnownTypesSerializer, safe_serializer

__all__ = [
    "MESSAGE_CLASSES",
    "Built",
    "Fingerprint",
    "KnownTypesSerializer",
    "Memo",
    "Stored",
    "ValueCodec",
    "fingerprint",
    "fp_id",
    "fresh_ref",
    "is_message",
    "pool_refs",
    "resolved",
    "safe_serializer",
]


class ValueCodec(_Packing):
    """Packs values into JSON cells and unpacks them (see the module docstring).

    Args:
        serde: LangGraph serializer for values that are not plain JSON or messages.
        native: store plain JSON and LangChain messages as JSON. With False every
            value is a serde blob (top-level lists are still split into elements).
        pool_min: smallest message / blob (bytes of its JSON cell) stored in the pool.
    """

    def __init__(
        self, serde: SerializerProtocol, *, native: bool = True, pool_min: int = 64
    ) -> None:
        self.serde = serde
        self.native = native
        self.pool_min = pool_min
