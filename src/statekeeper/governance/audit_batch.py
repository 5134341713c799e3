"""A batch of writes with their entries: in the same commit on an engine that commits
several streams together, else written ahead of the writes and voided for each that
fails."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ConflictError, RetriesExhausted, StoreClosed
from ..records import AppendRequest, AppendResult
from ..records import AuditMark as Mark
from ..store.governed_checks import LOG_LOCKS
from .audit_chain import _AuditChain
from .audit_records import _RETRIES, AUDIT_ID, _body, _mark_body

__all__: list[str] = []


class _AuditBatch(_AuditChain):
    """Batches of writes with their entries (:class:`~statekeeper.governance.audit.AuditLog`)."""

    # -- a batch of writes with their entries -------------------------------------------

    async def write_with(
        self, requests: Sequence[AppendRequest], marks: Sequence[Sequence[Mark]]
    ) -> list[AppendResult | BaseException]:
        """Append ``requests`` (distinct agents' or not) with the entries ``marks[i]`` of
        each: like ``Backend.append_batch``, each request succeeds or fails on its own
        (its result, or the exception, in order), and

        * on an engine that commits several streams together (``appends_together``),
          the entries of the requests that succeed are in the SAME commit as them
          (one commit for the whole batch when nothing conflicts): after a crash
          both exist or neither does;
        * elsewhere (Redis Cluster, S3, tiered) the entries are written FIRST, marked
          ``ahead`` (naming the event they announce), then the requests; an entry
          whose request failed is voided by an entry saying so. A crash in between
          leaves at worst an entry for a write that did not happen, which
          :meth:`verify` reports as unapplied — never a write without its entry.

        A duplicate (idempotency key already used) writes nothing of its own and gets
        no entry here: its result says ``duplicate=True`` (the caller records it)."""
        if self.backend.appends_together:
            return await self._commit_together(requests, marks)
        return await self._write_ahead(requests, marks)

    async def _commit_together(
        self, requests: Sequence[AppendRequest], marks: Sequence[Sequence[Mark]]
    ) -> list[AppendResult | BaseException]:
        results: list[AppendResult | BaseException | None] = [None] * len(requests)
        waves = _waves(requests)
        retries = 0
        async with self._turn():
            while waves:
                wave = waves.pop(0)
                while wave:
                    bodies = [_mark_body(m, None) for i in wave for m in marks[i]]
                    if not bodies:  # nothing to record: the engine's own batch
                        done = await self.backend.append_batch([requests[i] for i in wave])
                        for i, result in zip(wave, done, strict=True):
                            results[i] = result
                        break
                    entry, head = await self._next_entries(bodies)
                    try:
                        out = await self.backend.append_together(
                            [*(requests[i] for i in wave), entry]
                        )
                    except StoreClosed:
                        raise
                    except Exception as exc:
                        if isinstance(exc, ConflictError) and exc.agent_id == AUDIT_ID:
                            retries += 1
                            if retries >= _RETRIES:
                                raise RetriesExhausted(AUDIT_ID, _RETRIES, exc) from None
                            self._head = None  # another writer recorded: read its head
                            continue
                        if isinstance(exc, LOG_LOCKS):
                            # the log's lock (its head's, or the feed's under row
                            # security), no request's fault: every request not written
                            # fails with it (was: each sent again alone, each waiting
                            # audit_lock_timeout for the log again)
                            self.locked_out(exc)
                            for k, i in enumerate(i for w in (wave, *waves) for i in w):
                                results[i] = exc if k == 0 else type(exc)(str(exc))
                            return [r if r is not None else _lost() for r in results]
                        culprit = _culprit(wave, requests, exc)
                        if culprit is None:
                            if len(wave) > 1:  # which one? each on its own, then
                                waves[:0] = [[i] for i in wave]
                                break
                            culprit = wave[0]
                        results[culprit] = exc  # nothing was written: the others go again
                        wave.remove(culprit)
                        continue
                    dup = next(
                        (k for k, r in enumerate(out[:-1]) if r is not None and r.duplicate),
                        None,
                    )
                    if dup is not None:  # nothing was written: the others go again
                        results[wave[dup]] = out[dup]
                        del wave[dup]
                        continue
                    for k, i in enumerate(wave):
                        results[i] = out[k]
                    await self._wrote(head)
                    break
        return [r if r is not None else _lost() for r in results]

    async def _write_ahead(
        self, requests: Sequence[AppendRequest], marks: Sequence[Sequence[Mark]]
    ) -> list[AppendResult | BaseException]:
        announced = [(i, m) for i in range(len(requests)) for m in marks[i]]
        first = 0
        if announced:
            first = await self._append_entries(
                [_mark_body(m, _ahead(requests[i], m)) for i, m in announced]
            )
        if len(requests) == 1:
            try:
                results: list[AppendResult | BaseException] = [
                    await self.backend.append(requests[0])
                ]
            except StoreClosed:
                raise
            except Exception as exc:
                results = [exc]
        else:
            results = await self.backend.append_batch(requests)
        voids = []
        for k, (i, m) in enumerate(announced):
            result = results[i]
            if isinstance(result, BaseException):
                reason = type(result).__name__
            elif result.duplicate:
                reason = "duplicate"
            else:
                continue
            outcome = "duplicate" if reason == "duplicate" else f"error:{reason}"
            voids.append(
                _body(
                    m.operation,
                    m.principal,
                    m.agent_id,
                    m.first_seq,
                    m.last_seq,
                    outcome,
                    {"voids": first + k},
                )
            )
        if voids:
            await self._append_entries(voids)
        return results


def _ahead(request: AppendRequest, mark: Mark) -> str:
    """What an entry written ahead names: the checksum of the last event it records."""
    for event in request.events:
        if event.seq == mark.last_seq:
            return event.checksum.hex()
    return request.events[-1].checksum.hex()


def _waves(requests: Sequence[AppendRequest]) -> list[list[int]]:
    """The requests' indexes in runs of distinct streams (one commit takes one request
    per stream), in order: a stream's second request starts the next run."""
    waves: list[list[int]] = [[]]
    ids: set[str] = set()
    for i, request in enumerate(requests):
        if request.agent_id in ids:
            waves.append([])
            ids = set()
        waves[-1].append(i)
        ids.add(request.agent_id)
    return [wave for wave in waves if wave]


def _culprit(wave: list[int], requests: Sequence[AppendRequest], exc: BaseException) -> int | None:
    """The request of ``wave`` an error names (by its agent), if one does."""
    agent_id = getattr(exc, "agent_id", None)
    for i in wave:
        if requests[i].agent_id == agent_id:
            return i
    return None


def _lost() -> BaseException:  # pragma: no cover - every request gets a result
    return RuntimeError("no result")
