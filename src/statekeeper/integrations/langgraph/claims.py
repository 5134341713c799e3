"""Fork protection per run (see :mod:`.runs`): claiming a thread for a LangGraph run,
its renewal and release, refusing writes that would interleave with another run,
and the checkpoints named outside a run."""

from __future__ import annotations

import asyncio
import builtins
import logging
from contextlib import AsyncExitStack
from typing import Any

from langchain_core.runnables import RunnableConfig

from ...concurrency.lease_grants import ended
from ...errors import AgentNotFound, BackendError, BackendRejected, StatekeeperError
from ...store.conditional import delete_only_at
from . import mapping as m
from . import runs
from .commits import _SaverCommits
from .faults import ThreadBusyError
from .stream import Op, _Stream

_log = logging.getLogger(__name__)


#: how many checkpoint ids named by ``get_tuple`` calls outside a run are remembered
_NAMED = 256
#: how many tokens of this process's ended runs are remembered (see ``_release``)
_ENDED = 256
#: how many times a run's release is tried when its write fails (a lost connection,
#: a lost reply), pausing between tries as ``migrate`` / ``rollback`` do
#: (:func:`statekeeper.schema.report.pause`: ~14 ms in all); then the claim lapses
#: after ``run_lease``
_RELEASE_TRIES = 8


class _SaverClaims(_SaverCommits):
    """The saver's run claims."""

    def _run_of(self, thread_id: str, conf: dict[str, Any]) -> runs.Run | None:
        """The run of this process that a call with ``conf`` belongs to, if any."""
        control = runs.run_control(conf)
        if control is None:
            return None
        run = self._runs.get((id(control), thread_id))
        return run if run is not None and run.control is control else None

    def _begin_run(self, config: RunnableConfig, frame: Any) -> tuple[runs.Run, Any] | None:
        """``(run, its loop)`` when this ``get_tuple`` starts a top-level run."""
        if not self.fork_protection:
            return None
        conf: dict[str, Any] = config.get("configurable") or {}
        if "thread_id" not in conf or not runs.is_top_level(conf):
            return None
        thread_id = str(conf["thread_id"])
        control = runs.run_control(conf)
        if control is None or self._run_of(thread_id, conf) is not None:
            return None  # not a run, or the same run reading again
        loop = runs.find_loop(frame)
        if loop is None:
            return None
        run = runs.Run(thread_id, control, addressed=bool(conf.get("checkpoint_id")))
        run.hold = not runs.waits_for_writes(loop)
        run.rides = not run.addressed and runs.first_write_precedes_nodes(loop)
        return run, loop

    def _attach(self, run: runs.Run, loop: Any) -> None:
        """Release ``run``'s claim when its loop's exit stack unwinds, and when the
        loop's ``__enter__`` fails after this ``get_tuple`` began (the exit stack then
        never unwinds; see :func:`.runs.on_failed_enter`). Attached before the claim is
        stored: a ``get_tuple`` that raises, or whose caller gives up on it, is a
        failed ``__enter__`` too."""
        if isinstance(loop.stack, AsyncExitStack):
            loop.stack.push_async_callback(self._aend_run, run)
            # shielded: a cancelled start still releases (the cancel goes on after it)
            runs.on_failed_enter(loop, lambda: asyncio.shield(self._aend_run(run)))
        else:
            loop.stack.callback(self._end_run, run)
            runs.on_failed_enter(loop, lambda: self._end_run(run))
        runs.watch(loop, run)

    def _claimed_by_other(self, claim: dict[str, Any], run: runs.Run | None) -> bool:
        """Whether ``claim`` (a thread document's) is a live claim of another run than
        ``run``: not expired, and not of a run of this process that has ended (its
        release may still be on its way: see :meth:`_release`)."""
        if run is not None and claim["id"] == run.token:
            return False
        return claim["exp"] > self._clock() and claim["id"] not in self._ended

    async def _claim(self, run: runs.Run) -> None:
        """Store ``run`` as the thread's holder (compare-and-append), or raise
        :class:`ThreadBusyError` when another run holds it."""

        def plan(st: _Stream) -> tuple[str, builtins.list[Op], str | None]:
            claim = st.doc.get("run")
            if claim is not None and self._claimed_by_other(claim, run):
                raise ThreadBusyError(run.thread_id, claim["exp"], st.agent_id, st.seq, lost=False)
            value = {"id": run.token, "exp": self._clock() + self.run_lease}
            run.unsure = True  # (sent: stored or not, the run's end looks)
            return m.EV_RUN, [{"op": "add", "path": "/run", "value": value}], None

        if run.ended:  # its caller gave up before this began: nothing to claim
            return
        self._runs[run.key] = run
        try:
            try:
                # plain unless the lease is infinite (_plain_claims checks the value)
                await self._mutate(run.thread_id, plan, m.EV_RUN, plain=True)
            except ThreadBusyError as exc:
                # planned on the cached document, without a head read: the claim it
                # refused may have been released since, in a commit this saver never
                # read. Refused only on a current document (before, the thread stayed
                # refused to this saver until that claim's lease lapsed: 30 s) — the
                # same stream, not only the same seq: a thread deleted and made again
                # up to that seq by another process holds no such claim (before, it was
                # refused as busy until the deleted claim's lease lapsed)
                if await self._head_as_refused(run.thread_id, exc) == exc.expected_seq:
                    raise
                self._forget(run.thread_id)
                await self._mutate(run.thread_id, plan, m.EV_RUN, plain=True)
        except Exception:
            # the claim's commit may have landed though it failed (a lost reply:
            # BackendError(maybe_applied=True)): the run's end (its failed start) reads
            # the thread and clears it (run.unsure; before, it returned at once and the
            # claim refused other processes the thread until run_lease ran out)
            self._runs.pop(run.key, None)
            if run.ended and run.unsure:  # ended meanwhile, maybe before it was sent
                self._portal._handed(self._release(run))
            raise
        except BaseException:
            # cancelled or interrupted, maybe once the claim was stored: the run's
            # end releases it (its release only clears a claim holding its token)
            run.claimed = True
            if run.ended:
                self._portal._handed(self._release(run))
            raise
        run.claimed = True
        if run.ended:  # the run ended while its claim was being stored
            await self._release(run)
            return
        self._schedule_renewal()

    async def _head_as_refused(self, thread_id: str, exc: ThreadBusyError) -> int:
        """The stored head of the stream a claim was refused on, or -1 when the stream
        there is not the one the refusal read (deleted and made again up to the same
        seq: its head tag differs, :meth:`_checked_head`)."""
        st = self._streams.get(thread_id)
        if st is not None and st.agent_id == exc.agent_id and st.seq == exc.expected_seq:
            return await self._checked_head(st)
        return await self.store.head(exc.agent_id)

    def _rode(self, run: runs.Run | None, doc: dict[str, Any] | None) -> None:
        """(On the loop.) After a riding run's write, whose commit left the thread's
        document ``doc``: the run holds the thread once its claim is stored (a write
        that stored nothing carried none). ``doc``, not the cached document: the loop
        ran other tasks since the commit, and a read may have evicted or replaced it
        (the claim then not seen: the run never renewed nor released its claim)."""
        if run is None or run.claimed or not run.rides:
            return
        if doc is None and run.unsure and not run.ended:
            # stored, its document not read: the run stays ``unsure``, and its renewal
            # reads the thread (a claim it stored is renewed: see :meth:`_renew`)
            self._schedule_renewal()
            return
        claim = doc.get("run") if doc is not None else None
        if claim is None or claim["id"] != run.token:
            return
        run.claimed = True
        if run.ended:  # the run's start failed while this write was being stored
            self._portal._handed(self._release(run))
            return
        self._schedule_renewal()

    async def _release(self, run: runs.Run) -> None:
        """End ``run``: clear its claim when it holds one. A run ending before its claim
        is stored (its caller gave up on ``get_tuple``) is marked ended: its claim is
        released as soon as it is stored (see :meth:`_claim`), and this process takes
        the thread over from it meanwhile (see :meth:`_claimed_by_other`).

        A run whose claim was sent in a write that failed (maybe after it landed: a
        lost reply) or whose document was not read back (``run.unsure``) is released
        the same way: the thread is read (its cached document was dropped with the
        failure) and the claim cleared if it is stored. Before, such a run was not
        ``claimed``: its end returned here, and a stored claim refused other processes
        the thread until ``run_lease`` ran out. A run whose claim's write answered
        reads nothing more (its claim, known, is cleared on the cached document).

        The release's own write failing (a lost connection) or losing its reply is
        tried again, up to ``_RELEASE_TRIES`` times with the backoff of ``migrate`` /
        ``rollback`` between tries, each on a read of the thread (a lost reply that
        landed: the claim is gone, nothing is written), and none once ``run_lease``
        has passed since the release began (the claim has lapsed: the run's caller,
        which the release blocks, waits at most that and one try). Before, the first
        failure gave up: the claim refused other processes the thread until
        ``run_lease``."""
        self._runs.pop(run.key, None)
        run.ended = True
        self._ended[run.token] = None
        while len(self._ended) > _ENDED:
            self._ended.popitem(last=False)
        if run.released or not (run.claimed or run.unsure):
            return
        run.released = True
        # the claim lapses by then (the run renews it no more): a try after that frees
        # nothing, and only blocks the run's caller (a failed try can take a backend's
        # whole retry budget: 8 of them blocked ``invoke`` for minutes)
        lapses = self._clock() + self.run_lease
        for attempt in range(_RELEASE_TRIES):
            if attempt:
                # (imported here: only a release that failed pauses)
                from ...schema.report import pause

                await pause(attempt)
            try:
                # a try again reads the thread (its cached document dropped with the
                # failure): a release whose reply was lost landed, and writes no more
                await self._release_once(run, read=attempt > 0)
                return
            except Exception as exc:
                if attempt + 1 == _RELEASE_TRIES or not _transient(exc) or self._clock() >= lapses:
                    raise
                self._forget(run.thread_id)
                _log.info(
                    "releasing thread %r failed (tried again): %s: %s",
                    run.thread_id,
                    type(exc).__name__,
                    exc,
                )

    async def _release_once(self, run: runs.Run, *, read: bool) -> None:
        """One try of :meth:`_release`'s write; ``read``: the thread is read first."""
        cached = self._streams.get(run.thread_id)
        if cached is None and (read or not run.claimed):
            # unsure (its claim's write failed: its cached document dropped with it): the
            # thread read here, the read the release below would make, so that a claim
            # that is all a new thread holds drops the stream too (was: left, cleared)
            cached = await self._open(run.thread_id, create=False, check=False)
        if cached is not None and _bare(cached.doc, run.token) and await self._drop_bare(run):
            return

        def plan(st: _Stream) -> tuple[str, builtins.list[Op], str | None] | None:
            claim = st.doc.get("run")
            if claim is None or claim["id"] != run.token:
                return None  # taken over meanwhile: not ours to clear
            return m.EV_RUN, [{"op": "replace", "path": "/run", "value": None}], None

        # plain JSON (a null): the store's lean keyed append takes it, one statement,
        # as it takes the run's checkpoints (before, the general append: its builder,
        # four coroutines and the engine's queue, for the one write every run ends with)
        await self._mutate(run.thread_id, plan, m.EV_RUN, create=False, plain=True)

    async def _drop_bare(self, run: runs.Run) -> bool:
        """Delete the thread's stream instead of releasing ``run``'s claim on it when
        the claim is all it holds (it created the stream, and the run ended before its
        first write: e.g. ``invoke(None)`` on a new thread): a run that stored nothing
        leaves no stream behind. The caller found the cached document bare (no read
        for a run that wrote). Here, under the thread's lock, the head event's identity
        is read, then the document again: a head seq alone cannot tell a stream deleted
        and made again up to the same seq by another process (its acknowledged
        checkpoints) from the cached one, and deleting it at that seq lost them. The
        delete is conditional on that head event (its seq and stored checksum), so one
        made again after these reads is not deleted either. False: released the usual
        way."""
        # (imported here: a saver that never drops a thread, e.g. one writing outside
        # runs, loads no module more than before)
        from ...store.delete_shown import head_identity

        async with self._lock(run.thread_id):
            cached = self._streams.get(run.thread_id)
            if cached is None or not _bare(cached.doc, run.token):
                return False
            self._forget(run.thread_id)
            head = await head_identity(self.store, cached.agent_id)
            if head is None or head[0] != cached.seq:
                return False  # written since (or gone, or a write buffered): as usual
            try:  # read after the identity: a stream made again since has another head
                st = await self._load(run.thread_id, cached.agent_id)
            except AgentNotFound:
                return False
            if st.seq != cached.seq or not _bare(st.doc, run.token):
                return False
            try:
                with delete_only_at(st.seq, head[2]):
                    await self.store.delete(st.agent_id)
            except StatekeeperError:
                # written since (a conflict), or the delete is refused (a principal
                # allowed to write but not to delete, a legal hold): release as usual
                return False
            # again: a read whose load began after the drop above (while the head was
            # read again) cached the thread as it was
            self._forget(run.thread_id)
        return True

    def _end_run(self, run: runs.Run) -> None:
        try:
            self._portal.call(self._release(run), bare=self._sends_bare)
        except Exception as exc:  # never mask the run's own outcome; the lease lapses
            _log.warning("releasing thread %r failed: %s", run.thread_id, exc)

    async def _aend_run(self, run: runs.Run) -> None:
        try:
            await self._portal.run(self._release(run))
        except Exception as exc:
            _log.warning("releasing thread %r failed: %s", run.thread_id, exc)

    async def _renew(self) -> None:
        """Move the expiry of every live claim of this process to now + ``run_lease``.

        A running run whose claim's write answered without its document (``unsure``:
        see :meth:`_rode`) is renewed too, on a read of the thread: its claim, when
        stored, is renewed, and the run holds the thread from then on. Before, it was
        renewed only once a later write of the run found its claim: a node running
        longer than ``run_lease`` let it lapse, another process's run took the thread,
        and this run's next write was refused as if it had never held it."""
        for run in builtins.list(self._runs.values()):
            if run.dead:
                self._runs.pop(run.key, None)
                continue
            if run.released or not (run.claimed or _unsure(run)):
                continue

            def plan(
                st: _Stream, run: runs.Run = run
            ) -> tuple[str, builtins.list[Op], str | None] | None:
                claim = st.doc.get("run")
                if claim is None or claim["id"] != run.token:
                    return None  # lost: the run's next write fails
                exp = self._clock() + self.run_lease
                return m.EV_RUN, [{"op": "replace", "path": "/run/exp", "value": exp}], None

            try:
                doc = await self._mutate(run.thread_id, plan, m.EV_RUN, create=False)
            except Exception as exc:
                _log.warning("renewing the claim on thread %r failed: %s", run.thread_id, exc)
                continue
            if not run.claimed and _unsure(run):
                self._rode(run, doc if doc is not None else {})

    def _live_claims(self) -> bool:
        """Whether a claim of this process lives (runs whose loop is gone are dropped)."""
        for run in builtins.list(self._runs.values()):
            if run.dead:
                self._runs.pop(run.key, None)
        return any((r.claimed or _unsure(r)) and not r.released for r in self._runs.values())

    def _schedule_renewal(self) -> None:
        """(On the loop.) Renew the live claims in ``run_lease / 3``: a timer of the
        saver's loop, not a task sleeping on it (while a task lives, the loop's
        background thread runs the loop every 20 ms: for the whole life of every run)."""
        if self._renewer is None and self._renewing is None:
            self._renewer = self._portal.later(self.run_lease / 3, self._renew_due)

    def _renew_due(self) -> None:
        self._renewer = None
        if not self._live_claims():  # none left: the next claim sets the timer again
            return
        self._renewing = asyncio.get_running_loop().create_task(self._renew())
        self._renewing.add_done_callback(self._renewed)

    def _renewed(self, task: asyncio.Task[None]) -> None:
        self._renewing = None
        if not task.cancelled() and self._live_claims():
            self._schedule_renewal()

    async def _stop_renewer(self) -> None:
        timer, self._renewer = self._renewer, None
        if timer is not None:
            timer.cancel()
        task, self._renewing = self._renewing, None
        if task is not None and not task.done():
            # the renewal's own cancellation is absorbed, the caller's raised (was
            # suppress(CancelledError), which swallowed a cancelled aclose()'s too)
            await ended(task)

    def _check_claim(self, st: _Stream, run: runs.Run | None) -> builtins.list[Op]:
        """Refuse a write that would interleave with another run holding the thread.

        Returns the ops storing ``run``'s claim when it rides on this write (a riding
        run's first write; none when an earlier plan of the same commit carries it)."""
        claim = st.doc.get("run")
        if run is not None and run.claimed:
            if claim is None or claim["id"] != run.token:
                raise ThreadBusyError(st.thread_id, None, st.agent_id, st.seq, lost=True)
            return []
        mine = run is not None and claim is not None and claim["id"] == run.token
        if claim is not None and self._claimed_by_other(claim, run):
            raise ThreadBusyError(st.thread_id, claim["exp"], st.agent_id, st.seq, lost=False)
        if run is None or not run.rides or mine or run.ended:
            return []
        if st.seq != run.seen if run.seen is not None else any(st.heads.values()):
            # another writer (a whole run, maybe) came between this run's read and
            # its first write: the run would go on from a state it did not read
            raise ThreadBusyError(st.thread_id, None, st.agent_id, st.seq, lost=False)
        value = {"id": run.token, "exp": self._clock() + self.run_lease}
        # sent with this write: ``claimed`` once its commit answers (see ``_rode``);
        # if it fails, maybe after it landed, the run's end looks (see ``_release``)
        run.unsure = True
        return [{"op": "add", "path": "/run", "value": value}]

    def _take_named(self, thread_id: str, ns: str, cid: str | None) -> bool:
        """Whether a ``get_tuple`` outside a run named this checkpoint (then forget it)."""
        key = (thread_id, ns, cid or "")
        if cid is None or key not in self._named:
            return False
        del self._named[key]
        return True

    def _note_named(self, thread_id: str, ns: str, cid: str) -> None:
        self._named[(thread_id, ns, cid)] = None
        self._named.move_to_end((thread_id, ns, cid))
        while len(self._named) > _NAMED:
            self._named.popitem(last=False)


def _unsure(run: runs.Run) -> bool:
    """A running riding run whose claim's write answered without telling whether it
    stored the claim (see :meth:`_SaverClaims._rode`): renewed on a read."""
    return run.unsure and run.rides and not run.claimed and not run.ended


def _transient(exc: Exception) -> bool:
    """Whether a write that raised ``exc`` may go through when tried again: a backend
    failure (a lost connection, a lock timeout), or one that may have landed (its
    reply lost: the try again reads whether it did), not a refusal (a permission, a
    size limit: ``BackendRejected``) nor a closed store."""
    if not isinstance(exc, BackendError):
        return False
    return exc.maybe_applied or not isinstance(exc, BackendRejected)


def _bare(doc: dict[str, Any], token: str) -> bool:
    """A thread document holding nothing but the claim ``token`` (a new thread's)."""
    if doc.get("ns"):  # (the usual case: checkpoints)
        return False
    claim = doc.get("run")
    if claim is None or claim.get("id") != token:
        return False
    rest = {k: v for k, v in doc.items() if k != "run"}
    return rest == m.new_doc(str(doc.get("thread")))
