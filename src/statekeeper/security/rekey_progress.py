"""The durable progress of a :func:`~statekeeper.security.rekey.rekey` run (a small
JSON file): the last agent finished, the key, the store. A file resumes only the run it
records: another store's, or one whose last finished agent is not under the key in this
store (replaced by a copy or a restore since), is refused, since resuming would skip
agents still under the old key."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..codec import Codec
from ..errors import ProgressOfAnotherRun
from .rekey_checks import forgotten
from .witness_file import write_atomically

if TYPE_CHECKING:
    from ..store.store import StateStore

__all__ = ["RekeyProgress", "RekeyStats", "refuse_another_run"]


@dataclass(slots=True)
class RekeyStats:
    """What a rekey did: agents visited, records re-encrypted, records already done."""

    agents: int = 0
    events: int = 0
    snapshots: int = 0
    heads: int = 0
    skipped: int = 0
    retries: int = 0
    #: agents passed over: crypto-shredded, their records open under no key
    forgotten: int = 0
    #: idempotency records re-recorded under the active key (:mod:`.rekey_keys`)
    keys: int = 0
    #: idempotency records left under an older key: their events compacted away
    keys_left: int = 0
    #: data keys in the key vault of agents not walked (deleted ones, pruned LangGraph
    #: generations) wrapped again under the active key
    data_keys: int = 0

    def add(self, other: RekeyStats) -> None:
        """Accumulate ``other`` into this."""
        self.agents += other.agents
        self.events += other.events
        self.snapshots += other.snapshots
        self.heads += other.heads
        self.skipped += other.skipped
        self.retries += other.retries
        self.forgotten += other.forgotten
        self.keys += other.keys
        self.keys_left += other.keys_left
        self.data_keys += other.data_keys


@dataclass(slots=True)
class RekeyProgress:
    """The durable progress of a rekey run (a small JSON file)."""

    target_key: str
    after: str | None = None
    #: the store the run is on (:func:`~statekeeper.backends.identity.store_identity`;
    #: None: not recorded, a file written by an older version or a memory store)
    store: str | None = None
    done: bool = False
    started_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    stats: RekeyStats = field(default_factory=RekeyStats)

    @classmethod
    def load(cls, path: Path) -> RekeyProgress | None:
        """The progress saved at ``path`` (None when there is none or it is unreadable)."""
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            return cls(
                target_key=str(doc["target_key"]),
                after=doc.get("after"),
                store=None if doc.get("store") is None else str(doc["store"]),
                done=bool(doc.get("done", False)),
                started_at=float(doc.get("started_at", time.time())),
                updated_at=float(doc.get("updated_at", time.time())),
                stats=RekeyStats(**doc.get("stats", {})),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def save(self, path: Path) -> None:
        """Write atomically and durably (temp file, fsync, rename)."""
        self.updated_at = time.time()
        doc = {"statekeeper_rekey": 1, **asdict(self)}
        write_atomically(path, json.dumps(doc, indent=2))


async def refuse_another_run(
    store: StateStore, path: Path, earlier: RekeyProgress, here: str | None
) -> None:
    """:class:`ProgressOfAnotherRun` unless ``earlier`` (read from ``path``) is a run on
    this store whose last finished agent is re-encrypted here: under its target key, or
    gone since (deleted, or forgotten: its data key destroyed)."""
    where = here or repr(store.backend)
    if earlier.store is not None and here is not None and earlier.store != here:
        raise ProgressOfAnotherRun(str(path), earlier.store, where)
    after = earlier.after
    if after is None:
        return
    backend = store.backend
    head = await backend.head(after)
    if head == 0:
        return
    vault = store.codec.keyring.data_keys if store.codec.keyring is not None else None
    if vault is not None and await forgotten(vault, store, after):
        return
    rows = await backend.read(after, head - 1, head)
    header = Codec.header(rows[0].payload) if rows else None
    if header is not None and header.key_id == earlier.target_key:
        return
    recorded = earlier.store or "a store"
    raise ProgressOfAnotherRun(
        str(path),
        f"{recorded} where {after!r} is re-encrypted under {earlier.target_key!r}",
        f"{where}, where it is not (a copy or a restore of the store from before the run?)",
    )
