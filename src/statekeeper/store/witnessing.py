"""The store's automatic witness: high-water marks kept outside the store, checked on
the store's first use (see :mod:`statekeeper.security.highwater`)."""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING

from ..backends.base import Backend
from ..codec import Codec
from ..errors import (
    ConfigurationError,
    IntegrityError,
    NotAStore,
    RollbackDetected,
    StatekeeperError,
    WitnessStoreMismatch,
)
from ..security.ended import provide
from ..security.highwater import OPEN_CHECKS, SUFFIX, HighWater, default_location
from ..security.lost import replaced
from ..security.witness_store import adopt_renewed, describe, differs, identify
from .deleted_since import deleted_since
from .keyguard import KeyGuard, key_family
from .seen import Ask
from .verification import Problem

if TYPE_CHECKING:
    from .store import StateStore

__all__ = ["WitnessGate", "asker", "open_witness", "vanished"]

#: the ``witness`` option of :class:`~statekeeper.store.StateStore`
WitnessOption = str | os.PathLike[str] | bool | None


def open_witness(
    backend: Backend, witness: WitnessOption, codec: Codec, interval: float
) -> HighWater | None:
    """The witness the ``witness`` option names for a store over ``backend``."""
    location: str | os.PathLike[str] | None = None
    if witness is None or witness is True:
        location = default_location(backend)
        if location is None and witness is True:
            raise ConfigurationError(
                f"the {backend.name} backend has no default witness location: give witness=PATH"
            )
    elif witness is not False:
        location = witness
    if location is None:
        return None
    found = HighWater(location, codec, interval=interval)

    async def identified() -> dict[str, str] | None:  # (the backend: no cycle via the store)
        return await identify(backend)

    found.identify = identified  # the store it witnesses: recorded in the file
    provide(found, deleted_since)  # (its tombstones prove a delete: security/ended.py)
    return found


def asker(witness: HighWater, store: StateStore) -> Ask:
    """What the store's read path asks (:func:`.seen.vanished`) when an agent whose
    state it dropped as no longer stored is found gone: whether ``witness`` holds its
    mark (acknowledged, not deleted: :class:`RollbackDetected`) or a deletion.

    A stream wholly gone reads the same deleted by another process or lost by a server
    restarted from a copy older than it (storage keeps no trace of a delete); the
    witness file does: a delete marks its deletion there before the rows go
    (:meth:`HighWater.deleting`), newer than any mark made before the delete. So only the file's
    marks count, not this process's marks not yet written (the window the witness
    leaves: ``witness_interval``). Asked only on that path, never on a read of an
    agent found, nor of one this store never held."""

    async def ask(agent_id: str, seq: int) -> None:
        found = await witness.check_filed(store, agent_id)
        if found is not None:
            raise found

    return ask


class WitnessGate:
    """Checks the witness once, on the store's first use; a store that went back in
    time raises :class:`RollbackDetected` then and on every later use. With a
    :class:`KeyGuard` (a store without a key), the store's newest records are looked at
    then too: a write into an encrypted store raises :class:`KeyRequired`."""

    def __init__(
        self, witness: HighWater | None, guard: KeyGuard | None = None, *, family: bool = False
    ) -> None:
        self.witness = witness
        self.guard = guard
        #: the store's key family (:func:`.keyguard.key_family`) is set on its codec, or
        #: needs none (``family`` False: its keyring has no vault that keys by family)
        self._family = not family
        #: False until the witness was checked and writes are known to be allowed
        self.ok = witness is None and (guard is None or guard.ok)
        self._witnessed = witness is None
        self._error: StatekeeperError | None = None
        self._lock: asyncio.Lock | None = None

    async def check(self, store: StateStore, *, write: bool = True) -> None:
        """Load the witness file and check its newest marks against ``store``; before a
        ``write``, look whether a store without a key may write (raises when not)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self.ok:
                return
            if not self._family:  # before the store's first use (its tools read it too)
                await key_family(store.backend, store.codec)
                self._family = True
            if not self._witnessed:
                if self.witness is not None:  # (before the first write: see guard())
                    self.witness.guard()
                self._witnessed = await self._check_witness(store)
            guard = self.guard
            if guard is None:
                self.ok = True
            elif write:  # (reads never look: they cost what they cost without a guard)
                self.ok = await guard.check(store.backend)

    @property
    def readable(self) -> bool:
        """True once reads need no check (the witness checked, the key family known; a
        guard looks on writes)."""
        return self._witnessed and self._family

    async def _check_witness(self, store: StateStore) -> bool:
        if self._error is None:
            witness = self.witness
            assert witness is not None
            try:
                if await _load(witness) and witness.empty():
                    return True  # no file, no marks: nothing to check (a new store's)
                await _identified(witness)
                await adopt_renewed(witness, store.backend)  # (this store's, before a restore)
                found = await witness.check(store, OPEN_CHECKS)
            except IntegrityError as exc:
                self._error = exc
            else:
                mismatch = _mismatch(witness)
                if not found and mismatch is None:
                    return True
                self._error = found[0] if found else mismatch
                assert self._error is not None
        raise _again(self._error)

    async def problems(self, store: StateStore, agent_ids: list[str] | None) -> list[Problem]:
        """One :class:`Problem` per stream (of ``agent_ids``, or all) that went back in
        time, or for a witness file that cannot be used; nothing raised."""
        if self.witness is None:
            return []
        try:
            before = self.witness._known  # (its copy of the file: lost.replaced)
            await asyncio.to_thread(self.witness.load)
            await _identified(self.witness)
            await adopt_renewed(self.witness, store.backend)
            await replaced(self.witness, store, before, agent_ids)
            found = await self.witness.check(store, agents=agent_ids, exact=True)
        except IntegrityError as exc:
            return [Problem(exc.agent_id, exc.seq, str(exc), "rollback")]
        mismatch = _mismatch(self.witness)
        if not found and mismatch is not None:
            return [Problem("*", None, str(mismatch), "rollback")]
        return [Problem(p.agent_id, p.seq, str(p), "rollback") for p in found]


#: a witness file up to this size is read on the event loop: a store's first use (a new
#: LangGraph saver's first read) started the loop's default executor, a thread, to read
#: a few hundred bytes (the thread cost more CPU than the read); a larger file (a store
#: of many streams) is still read in a thread, not to hold up the loop
_INLINE_BYTES = 64 * 1024


async def _load(witness: HighWater) -> bool:
    """``witness.load()``: inline for a small file, in a thread for a large one. True
    when there is no file (``os.stat`` said so: nothing opened nor read; the marks
    known are those of a file that holds none)."""
    try:
        small = os.stat(witness.path).st_size <= _INLINE_BYTES
    except FileNotFoundError:
        witness.absent()  # a new store's: no marks (what load() would find)
        return True
    except OSError:
        small = False  # unreadable: load() says why, in the thread as before
    if small:
        witness.load()
    else:
        await asyncio.to_thread(witness.load)
    return False


async def _identified(witness: HighWater) -> None:
    """Learn the store's identity (once), to compare with the one the file records."""
    if witness.store is None and witness.identify is not None:
        witness.store = await witness.identify()


def _mismatch(witness: HighWater) -> WitnessStoreMismatch | None:
    """The file records another store than this one: the error that says so."""
    filed, ours = witness.filed_store, witness.store
    if filed is None or ours is None or not differs(filed, ours):
        return None
    return WitnessStoreMismatch(witness.path, describe(filed), describe(ours))


def _again(exc: StatekeeperError) -> StatekeeperError:
    """A fresh copy of a remembered witness error (each raise gets its own traceback)."""
    if isinstance(exc, RollbackDetected):
        detail = exc.reason.removeprefix("rollback detected: ")
        detail = detail.rsplit(f" (witness {exc.witness})", 1)[0]
        assert exc.seq is not None
        return RollbackDetected(exc.agent_id, exc.seq, exc.found, exc.witness, detail)
    if isinstance(exc, WitnessStoreMismatch):
        return WitnessStoreMismatch(exc.witness, exc.expected, exc.found)
    if isinstance(exc, IntegrityError):
        return IntegrityError(exc.agent_id, exc.seq, exc.reason)
    return exc


def vanished(exc: NotAStore, witness: WitnessOption, codec: Codec) -> StatekeeperError:
    """A store file that is no store any more (emptied, overwritten): a rollback when
    its witness holds marks, else the refusal itself."""
    if witness is False:
        return exc
    location = os.fspath(witness) if isinstance(witness, str | os.PathLike) else None
    hw = HighWater(location or exc.location + SUFFIX, codec)
    try:
        hw.load()
    except StatekeeperError:
        return exc
    marks = hw.marks()
    if not marks:
        return exc
    newest = marks[0]
    return RollbackDetected(
        str(newest["agent_id"]),
        int(newest["seq"]),
        0,
        hw.path,
        f"{len(marks)} agent(s) were acknowledged, the newest up to seq {newest['seq']}, but "
        f"{exc.location} is no statekeeper store any more ({exc.reason})",
    )
