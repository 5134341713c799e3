"""A governed store's change feed (:class:`GovernedFeed`): subscriptions filtered by
the policy (``_FeedAccess``), the store-wide feed figures for a reader of every
namespace only, and its admin calls (``trim_feed``, the feed intents of deletes),
audited."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import AccessDenied
from .feed import FeedAccess, Subscription
from .feed_cursor import FeedBounds, FeedCursor
from .governed_base import GovernedBase
from .governed_checks import Governance, noting_failure

if TYPE_CHECKING:
    from .feed_intent_repair import FeedIntent, SettledIntent

__all__ = ["GovernedFeed"]


class GovernedFeed(GovernedBase):
    """The feed calls of :class:`~.governed.GovernedStateStore`."""

    def subscribe(self, from_position: int | FeedCursor | str = 0, **options: Any) -> Subscription:
        """The change feed, filtered by the policy: only the events of agents this
        principal may read are delivered (``namespace=``, ``agent_prefix=`` and
        ``event_types=`` still apply); the positions of the others are passed over like
        filtered-out ones, so :attr:`Subscription.position` resumes with no gap and no
        duplicate. The policy is asked per event: a :meth:`set_policy` applies to
        running subscriptions from the next event on.

        A subscription that could never deliver anything — an unknown principal, or
        one that may read no namespace under the ``namespace=`` / ``agent_prefix=``
        asked for — is refused with :class:`AccessDenied` (audited) when it starts
        (its first ``__anext__`` / ``next_batch``), rather than waiting forever on an
        empty feed. With ``Audit(reads=True)`` the start of each subscription is
        recorded (one entry, not one per event)."""
        return super().subscribe(from_position, **options)

    def _feed_access(
        self, from_position: int | FeedCursor | str, namespace: str | None, agent_prefix: str | None
    ) -> FeedAccess:
        return _FeedAccess(self._governance, namespace, agent_prefix, from_position)

    async def feed_bounds(self) -> tuple[int, int]:
        """:meth:`StateStore.feed_bounds` for a principal that may ``read`` every
        namespace (``**``) only: positions are store-wide, so the head counts every
        tenant's events (their write volume); anyone else is refused
        (:class:`AccessDenied`, audited) rather than shown figures over agents it may
        not read."""
        await self._governance.require_namespace("", "read", "feed_bounds")
        return await super().feed_bounds()

    async def feed_cursor_bounds(self) -> FeedBounds:
        """:meth:`StateStore.feed_cursor_bounds`, on :meth:`feed_bounds`'s terms."""
        await self._governance.require_namespace("", "read", "feed_cursor_bounds")
        return await super().feed_cursor_bounds()

    async def trim_feed(self, through: int | FeedCursor | str) -> int:
        gov = await self._allowed(None, "admin", "trim_feed")
        dropped = await super().trim_feed(through)
        mark = through if isinstance(through, int) else str(through)
        await gov.record("trim_feed", detail={"through": mark, "dropped": dropped})
        return dropped

    async def feed_intents(self) -> list[FeedIntent]:
        """:meth:`StateStore.feed_intents`: ``admin`` on the whole store (every tenant's
        deletes)."""
        await self._allowed(None, "admin", "feed_intents")
        return await super().feed_intents()

    async def settle_feed_intents(
        self,
        agent_ids: Collection[str] | None = None,
        *,
        older_than: float | None = None,
        force: bool = False,
    ) -> list[SettledIntent]:
        """:meth:`StateStore.settle_feed_intents`: ``admin`` on the whole store; audited
        (what each intent became)."""
        from .feed_intent_repair import SETTLING

        gov = await self._allowed(None, "admin", "settle_feed_intents")
        so_far: list[SettledIntent] = []
        token = SETTLING.set(so_far)
        try:
            done = await super().settle_feed_intents(agent_ids, older_than=older_than, force=force)
        except Exception as exc:
            # what it wrote before the failure, audited too (was: no entry at all)
            if so_far:
                detail = {"force": force, "intents": _settled(so_far), "error": type(exc).__name__}
                recording = gov.record("settle_feed_intents", outcome="failed", detail=detail)
                await noting_failure(exc, recording)
            raise
        finally:
            SETTLING.reset(token)
        detail = {"force": force, "intents": _settled(done)}
        await gov.record("settle_feed_intents", detail=detail)
        return done


class _FeedAccess:
    """The policy as a filter of one subscription (:class:`~.feed.FeedAccess`)."""

    __slots__ = ("gov", "namespace", "prefix", "start")

    def __init__(
        self,
        gov: Governance,
        namespace: str | None,
        agent_prefix: str | None,
        start: int | FeedCursor | str,
    ) -> None:
        self.gov = gov
        self.namespace = namespace
        self.prefix = agent_prefix
        self.start = start

    async def admit(self) -> None:
        gov = self.gov
        policy, principal = gov.policy, gov.principal or ""
        if policy is None:
            return
        if not policy.knows(principal):
            await gov.require(None, "read", "subscribe")  # refused: names it, audited
        scope = self.namespace or ""
        if not policy.reaches(principal, scope, "read"):
            where = f"namespace {scope!r} or below" if scope else "any namespace"
            exc = AccessDenied(
                principal, "read", "subscribe", None, f"may read no agent in {where}"
            )
            await gov.refuse(exc, None, {"namespace": scope})
        # (a prefix may end inside a segment, crossing namespaces: 'glo' is the root
        # namespace's agents 'glo...' and every namespace 'glo...', not "anywhere")
        if self.prefix is not None and not policy.reaches_prefix(principal, self.prefix, "read"):
            exc = AccessDenied(
                principal, "read", "subscribe", None,
                f"may read no agent whose id starts with agent_prefix {self.prefix!r:.80}",
            )  # fmt: skip
            await gov.refuse(exc, None, {"agent_prefix": self.prefix})
        if gov.audit is not None and gov.audit.reads:
            detail: dict[str, Any] = {
                "from_position": self.start if isinstance(self.start, int) else str(self.start)
            }
            if self.namespace is not None:
                detail["namespace"] = self.namespace
            if self.prefix is not None:
                detail["agent_prefix"] = self.prefix
            await gov.record("subscribe", detail=detail)

    def readable(self, agent_id: str) -> bool:
        return self.gov.can_read(agent_id)


def _settled(done: Sequence[SettledIntent]) -> list[dict[str, Any]]:
    """The audit entry's list of settled feed intents."""
    return [
        {"agent_id": s.intent.agent_id, "head": s.intent.head, "outcome": s.outcome} for s in done
    ]
