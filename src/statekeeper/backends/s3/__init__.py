"""S3 backend (extra ``s3``): :class:`S3Backend` (``backend.py``: the layout of the
objects and the protocols of appends, prunes, rewrites and deletes are in its
documentation) and its parts, one job each — the store's own objects (``store.py``),
an agent's keys (``keys.py``), the calls to S3 and object operations
(``objects.py``; whether a write of a call S3 failed part-way landed: ``landed.py``),
the stream and its high-water mark (``stream.py``), appends (``appends.py``), prunes
(``prune.py``), snapshots (``snapshots.py``), a rewrite's claim made and held
(``claiming.py``) and read (``claims.py``), rewrites (``rewrites.py``,
``pruned_snapshots.py``), deletes (``deletes.py``), idempotency keys
(``idempotency.py``), reads (``reads.py``), the agents' listing (``listing.py``); what
they stand on (``base.py``: the driver and shared names; ``layout.py``: what the
objects hold; ``engine.py``: what the parts declare of each other); whole-object
uploads for backups (``transfer.py``)."""

from .backend import S3Backend
from .base import MAX_KEY_BYTES
from .layout import _encode_events as _encode_events  # (tests write a commit with it)
from .transfer import object_client, upload_new

__all__ = ["MAX_KEY_BYTES", "S3Backend", "object_client", "upload_new"]
