"""The backend contract, part: leases and fencing (engines with ``supports_leases``). Run through
:class:`~statekeeper.testing.BackendConformance`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper.backends.base import Backend, Capability
from statekeeper.errors import (
    CapabilityUnsupported,
    ConfigurationError,
    ConflictError,
    InvalidArgument,
    LeaseHeld,
    LeaseLost,
    LeasesUnsupported,
    StoreClosed,
)
from statekeeper.records import (
    AppendResult,
    LeaseChange,
    LeaseInfo,
    StreamChange,
)

from ._contract import Contract, _needs, fenced, request

__all__ = ["LeaseConformance"]

#: how long a lease lives when a test must see it expire (the test then waits it out)
SHORT_TTL = 0.05
#: added to every such wait: the backend may round its clock (Redis formats it with 17
#: digits, PostgreSQL keeps microseconds), and the expiry must be past, not equal
_MARGIN = 0.03


async def _outlive(ttl: float = SHORT_TTL) -> None:
    """Wait until a lease granted for ``ttl`` seconds — granted before this call, i.e.
    its reply is in — has expired on the backend's clock. The backend computed the
    expiry before it replied, so ``ttl`` seconds counted from now (plus a margin for
    rounding) are past it, whatever the offset between its clock and ours.
    """
    await asyncio.sleep(ttl + _MARGIN)


class LeaseConformance(Contract):
    """Conformance tests: leases and fencing (engines with ``supports_leases``)."""

    # -- leases and fencing ------------------------------------------------------------
    #
    # An engine that cannot check fencing tokens declares ``supports_leases = False``
    # and must refuse every lease call and every fenced append (never store one
    # unchecked); the other lease tests are then skipped.

    @pytest.fixture
    def leasing(self, backend: Backend) -> Backend:
        if not backend.supports_leases:
            pytest.skip(f"{type(backend).__name__} does not support leases")
        return backend

    async def test_unsupported_leases_are_refused_not_ignored(self, backend: Backend) -> None:
        if backend.supports_leases:
            pytest.skip(f"{type(backend).__name__} supports leases")
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "acquire": lambda: backend.acquire_lease("a", "w1", 5.0),
            "renew": lambda: backend.renew_lease("a", "w1", 1, 5.0),
            "release": lambda: backend.release_lease("a", "w1", 1),
            "get": lambda: backend.get_lease("a"),
            "fenced append": lambda: backend.append(fenced("a", 0, ("w1", 1))),
        }
        for name, call in calls.items():
            with pytest.raises(LeasesUnsupported):
                await call()
                raise AssertionError(f"{name} did not refuse")
        results = await backend.append_batch([fenced("a", 0, ("w1", 1)), request("b", 0)])
        assert isinstance(results[0], LeasesUnsupported)
        assert results[1] == AppendResult("b", 1, 1)
        assert await backend.head("a") == 0

    async def test_acquire_grants_growing_tokens(self, leasing: Backend) -> None:
        backend = leasing
        assert await backend.get_lease("a") is None
        first = await backend.acquire_lease("a", "w1", 30.0)
        assert isinstance(first, LeaseInfo)
        assert (first.agent_id, first.holder) == ("a", "w1")
        assert first.token >= 1
        assert first.fence == ("w1", first.token)
        assert await backend.get_lease("a") == first
        with pytest.raises(LeaseHeld) as info:
            await backend.acquire_lease("a", "w2", 30.0)
        assert info.value.holder == "w1"
        assert info.value.expires_at == pytest.approx(first.expires_at, abs=0.01)
        # re-acquiring one's own lease hands out a newer token (fencing older incarnations)
        again = await backend.acquire_lease("a", "w1", 30.0)
        assert again.token > first.token
        # leases are per agent
        other = await backend.acquire_lease("b", "w2", 30.0)
        assert other.holder == "w2"
        assert (await backend.get_lease("a")) == again

    async def test_an_expired_lease_can_be_taken_over(self, leasing: Backend) -> None:
        backend = leasing
        old = await backend.acquire_lease("a", "w1", 30.0)
        with pytest.raises(LeaseHeld):
            await backend.acquire_lease("a", "w2", 5.0)
        old = await backend.renew_lease("a", "w1", old.token, SHORT_TTL)  # now let it expire
        await _outlive()
        new = await backend.acquire_lease("a", "w2", 5.0)
        assert new.token > old.token
        assert new.holder == "w2"
        assert new.expires_at > old.expires_at

    async def test_renew_keeps_the_token_and_extends(self, leasing: Backend) -> None:
        backend = leasing
        lease = await backend.acquire_lease("a", "w1", 0.3)
        renewed = await backend.renew_lease("a", "w1", lease.token, 30.0)
        assert renewed.token == lease.token
        assert renewed.expires_at > lease.expires_at
        with pytest.raises(LeaseHeld):
            await backend.acquire_lease("a", "w2", 5.0)
        # expired but not taken over: still the newest token, so it may renew
        short = await backend.renew_lease("a", "w1", lease.token, SHORT_TTL)
        await _outlive()
        assert (await backend.renew_lease("a", "w1", lease.token, SHORT_TTL)).token == short.token
        await _outlive()
        taken = await backend.acquire_lease("a", "w2", 30.0)
        with pytest.raises(LeaseLost) as info:
            await backend.renew_lease("a", "w1", lease.token, 30.0)
        assert (info.value.token, info.value.current_token) == (lease.token, taken.token)
        assert info.value.current_holder == "w2"
        assert await backend.get_lease("a") == taken

    async def test_release_frees_the_lease_at_once(self, leasing: Backend) -> None:
        backend = leasing
        lease = await backend.acquire_lease("a", "w1", 30.0)
        assert await backend.release_lease("a", "w2", lease.token) is False  # not w2's
        assert await backend.release_lease("a", "w1", lease.token + 1) is False
        assert await backend.release_lease("a", "w1", lease.token) is True
        assert await backend.release_lease("a", "w1", lease.token) is False  # idempotent
        released = await backend.get_lease("a")
        assert released is not None and released.holder is None
        assert released.token == lease.token
        nxt = await backend.acquire_lease("a", "w2", 30.0)
        assert nxt.token > lease.token
        assert await backend.release_lease("nobody", "w1", 1) is False
        with pytest.raises(LeaseLost):
            await backend.renew_lease("a", "w1", lease.token, 5.0)

    async def test_release_sent_again_answers_for_the_first_try(self, leasing: Backend) -> None:
        """``release_lease_again``: the retry of a release whose outcome is unknown."""
        backend = leasing
        lease = await backend.acquire_lease("a", "w1", 30.0)
        assert await backend.release_lease_again("a", "w1", lease.token) is True  # not sent
        assert await backend.release_lease_again("a", "w1", lease.token) is True  # sent
        assert (await backend.get_lease("a")).holder is None  # type: ignore[union-attr]
        assert await backend.release_lease_again("a", "w2", lease.token + 1) is False
        nxt = await backend.acquire_lease("a", "w2", 30.0)
        assert await backend.release_lease_again("a", "w1", lease.token) is False  # taken over
        assert await backend.get_lease("a") == nxt
        assert await backend.release_lease_again("nobody", "w1", 1) is False

    async def test_fenced_append_with_the_current_token(self, leasing: Backend) -> None:
        backend = leasing
        lease = await backend.acquire_lease("a", "w1", 30.0)
        assert await backend.append(fenced("a", 0, lease.fence)) == AppendResult("a", 1, 1)
        assert await backend.append(fenced("a", 1, lease.fence, count=2)) == AppendResult("a", 2, 3)
        # unfenced writes are not governed by leases (optimistic locking only)
        assert await backend.append(request("a", 3)) == AppendResult("a", 4, 4)
        # an expired lease nobody took over still fences correctly: its token is newest
        short = await backend.acquire_lease("b", "w1", SHORT_TTL)
        await _outlive()
        assert await backend.append(fenced("b", 0, short.fence)) == AppendResult("b", 1, 1)

    async def test_stale_fenced_append_is_refused_and_writes_nothing(
        self, leasing: Backend
    ) -> None:
        backend = leasing
        old = await backend.acquire_lease("a", "w1", SHORT_TTL)
        await backend.append(fenced("a", 0, old.fence, key="k1"))
        await _outlive()
        new = await backend.acquire_lease("a", "w2", 30.0)
        await backend.append(fenced("a", 1, new.fence))
        before = await backend.read("a")
        stale = [
            fenced("a", 2, old.fence, snap_at=3),  # right seq, old token
            fenced("a", 2, old.fence, key="k9"),
            fenced("a", 0, old.fence, key="k1"),  # checked before the idempotency key
            fenced("a", 2, ("w1", new.token)),  # current token, wrong holder
            fenced("a", 2, ("w2", new.token + 1)),  # a token never granted
        ]
        for req in stale:
            with pytest.raises(LeaseLost) as info:
                await backend.append(req)
            assert info.value.agent_id == "a"
            assert info.value.current_token == new.token
            assert info.value.current_holder == "w2"
            assert await backend.head("a") == 2
            assert await backend.read("a") == before
            assert await backend.latest_snapshot("a") is None
            assert await backend.lookup_key("a", "k9") is None
        # a fence on an agent that never had a lease
        with pytest.raises(LeaseLost) as none:
            await backend.append(fenced("z", 0, ("w1", 1)))
        assert (none.value.current_token, none.value.current_holder) == (0, None)
        assert await backend.head("z") == 0
        # after a release, the released token fences nothing any more
        await backend.release_lease("a", "w2", new.token)
        with pytest.raises(LeaseLost):
            await backend.append(fenced("a", 2, new.fence))
        assert await backend.head("a") == 2

    async def test_fence_in_a_batch(self, leasing: Backend) -> None:
        backend = leasing
        old = await backend.acquire_lease("a", "w1", 30.0)
        await backend.release_lease("a", "w1", old.token)
        lease = await backend.acquire_lease("a", "w2", 30.0)
        results = await backend.append_batch(
            [
                fenced("a", 0, lease.fence),
                fenced("a", 1, old.fence),
                request("b", 0),
                fenced("a", 1, lease.fence, key="k"),
            ]
        )
        assert results[0] == AppendResult("a", 1, 1)
        assert isinstance(results[1], LeaseLost)
        assert results[2] == AppendResult("b", 1, 1)
        assert results[3] == AppendResult("a", 2, 2)
        assert [e.seq for e in await backend.read("a")] == [1, 2]

    async def test_tokens_never_go_back(self, leasing: Backend) -> None:
        backend = leasing
        tokens = []
        for holder in ("w1", "w2", "w1", "w3"):
            lease = await backend.acquire_lease("a", holder, 30.0)
            tokens.append(lease.token)
            await backend.append(fenced("a", await backend.head("a"), lease.fence))
            await backend.release_lease("a", holder, lease.token)
        # deleting the agent keeps its token: a stale holder of token 1 stays fenced off
        assert await backend.delete_agent("a") is True
        after = await backend.acquire_lease("a", "w4", 30.0)
        tokens.append(after.token)
        assert tokens == sorted(set(tokens))
        with pytest.raises(LeaseLost):
            await backend.append(fenced("a", 0, ("w1", tokens[0])))
        assert await backend.append(fenced("a", 0, after.fence)) == AppendResult("a", 1, 1)

    async def test_a_carried_token_raises_never_lowers_and_is_not_held(
        self, leasing: Backend
    ) -> None:
        # what import and restore do before they write the agents (carry_lease_tokens)
        backend = leasing
        held = await backend.acquire_lease("held", "w1", 30.0)  # token 1, held
        for _ in range(5):
            high = await backend.acquire_lease("high", "w1", 30.0)  # token 5
        await backend.carry_lease_tokens([("new", 4), ("held", 3), ("high", 2)])
        new = await backend.get_lease("new")
        assert new is not None and (new.holder, new.token) == (None, 4)
        raised = await backend.get_lease("held")
        assert raised is not None and (raised.holder, raised.token) == (None, 3)
        with pytest.raises(LeaseLost):  # the lease held under a lower token is gone
            await backend.append(fenced("held", 0, held.fence))
        assert await backend.get_lease("high") == high  # above it: left alone
        assert (await backend.acquire_lease("new", "w1", 30.0)).token == 5
        assert (await backend.acquire_lease("held", "w2", 30.0)).token == 4
        await backend.carry_lease_tokens([])

    async def test_concurrent_acquires_have_one_winner(self, leasing: Backend) -> None:
        backend = leasing
        results = await asyncio.gather(
            *(backend.acquire_lease("a", f"w{i}", 30.0) for i in range(10)),
            return_exceptions=True,
        )
        winners = [r for r in results if isinstance(r, LeaseInfo)]
        assert len(winners) == 1
        assert all(isinstance(r, LeaseHeld) for r in results if r is not winners[0])
        assert await backend.get_lease("a") == winners[0]

    @pytest.mark.parametrize("ttl", [0, -1.0, float("nan"), float("inf")])
    async def test_lease_ttl_must_be_positive(self, leasing: Backend, ttl: float) -> None:
        with pytest.raises(ConfigurationError):
            await leasing.acquire_lease("a", "w1", ttl)
        assert await leasing.get_lease("a") is None

    async def test_list_leases_pages_every_stored_lease_in_id_order(self, leasing: Backend) -> None:
        # what ``audit verify`` reads to find a lease granted without its entry
        _needs(leasing, Capability.LEASE_LIST)
        assert await leasing.list_leases() == []
        taken = {a: await leasing.acquire_lease(a, "w1", 30.0) for a in ("c", "a", "b/x", "d")}
        again = await leasing.acquire_lease("a", "w1", 30.0)
        assert await leasing.release_lease("d", "w1", taken["d"].token) is True
        listed = await leasing.list_leases()
        assert [i.agent_id for i in listed] == ["a", "b/x", "c", "d"]
        assert listed[0] == again  # the newest lease of each agent, as get_lease has it
        assert listed[1:3] == [taken["b/x"], taken["c"]]
        assert (listed[3].holder, listed[3].token) == (None, taken["d"].token)  # released
        first = await leasing.list_leases(limit=2)
        assert [i.agent_id for i in first] == ["a", "b/x"]
        rest = await leasing.list_leases(after="b/x", limit=2)
        assert [i.agent_id for i in rest] == ["c", "d"]
        assert await leasing.list_leases(after="d") == []
        # deleting an agent keeps its lease row (tokens never go back): still listed
        await leasing.append(request("c", 0))
        await leasing.delete_agent("c")
        assert "c" in [i.agent_id for i in await leasing.list_leases()]

    async def test_a_lease_change_commits_with_the_appends_or_not_at_all(
        self, leasing: Backend
    ) -> None:
        # ``append_together(requests, [StreamChange(lease=...)])``: a lease and the
        # audit entry naming its token in one commit (engines with ``appends_together``)
        if not leasing.changes_leases_and_rewrites:
            if leasing.appends_together:  # refused, never ignored: nothing written
                grant = StreamChange("a", lease=LeaseChange("w1", 1, 30.0))
                with pytest.raises(CapabilityUnsupported):
                    await leasing.append_together([request("log", 0)], [grant])
                assert await leasing.get_lease("a") is None
                assert await leasing.head("log") == 0
                return
            pytest.skip(f"{type(leasing).__name__} has no append_together")
        grant = StreamChange("a", lease=LeaseChange("w1", 1, 30.0))
        await leasing.append_together([request("log", 0)], [grant])
        lease = await leasing.get_lease("a")
        assert lease is not None and (lease.holder, lease.token) == ("w1", 1)
        assert await leasing.head("log") == 1
        # another holder while it runs: LeaseHeld, and the append is not written
        with pytest.raises(LeaseHeld):
            await leasing.append_together(
                [request("log", 1)], [StreamChange("a", lease=LeaseChange("w2", 2, 30.0))]
            )
        # a token that is not the stored one plus one: ConflictError, nothing written
        for token in (1, 3):
            with pytest.raises(ConflictError) as info:
                await leasing.append_together(
                    [request("log", 1)], [StreamChange("a", lease=LeaseChange("w1", token, 5.0))]
                )
            assert info.value.agent_id == "a"
        with pytest.raises(ConflictError):  # never leased: the first token is 1
            await leasing.append_together(
                [request("log", 1)], [StreamChange("n", lease=LeaseChange("w1", 2, 5.0))]
            )
        assert await leasing.get_lease("n") is None
        assert await leasing.head("log") == 1
        assert await leasing.get_lease("a") == lease
        # the holder again: the next token, fencing its older incarnation off
        await leasing.append_together(
            [request("log", 1)], [StreamChange("a", lease=LeaseChange("w1", 2, 30.0))]
        )
        with pytest.raises(LeaseLost):
            await leasing.append(fenced("a", 0, ("w1", 1)))
        # a release of a lease that is not the current one: LeaseLost, nothing written
        with pytest.raises(LeaseLost):
            await leasing.append_together(
                [request("log", 2)], [StreamChange("a", lease=LeaseChange("w1", 1))]
            )
        assert await leasing.head("log") == 2
        await leasing.append_together(
            [request("log", 2)], [StreamChange("a", lease=LeaseChange("w1", 2))]
        )
        released = await leasing.get_lease("a")
        assert released is not None and (released.holder, released.token) == (None, 2)
        assert await leasing.head("log") == 3
        # free again: another holder takes it with the next token
        await leasing.append_together(
            [request("log", 3)], [StreamChange("a", lease=LeaseChange("w2", 3, 30.0))]
        )
        taken = await leasing.get_lease("a")
        assert taken is not None and (taken.holder, taken.token) == ("w2", 3)
        # malformed: refused before anything is written
        for bad in (
            StreamChange("a", delete_at=1, lease=LeaseChange("w2", 4, 5.0)),
            StreamChange("a", lease=LeaseChange("w2", 0, 5.0)),
            StreamChange("a", lease=LeaseChange("w2", 4, -1.0)),
        ):
            with pytest.raises((ConfigurationError, InvalidArgument)):
                await leasing.append_together([request("log", 4)], [bad])
        assert await leasing.head("log") == 4
        assert await leasing.get_lease("a") == taken

    async def test_peer_sees_leases(self, leasing: Backend, peer: Backend) -> None:
        lease = await leasing.acquire_lease("a", "w1", 30.0)
        with pytest.raises(LeaseHeld):
            await peer.acquire_lease("a", "w2", 30.0)
        assert await peer.append(fenced("a", 0, lease.fence)) == AppendResult("a", 1, 1)
        assert await peer.release_lease("a", "w1", lease.token) is True
        taken = await peer.acquire_lease("a", "w2", 30.0)
        with pytest.raises(LeaseLost):
            await leasing.append(fenced("a", 1, lease.fence))
        assert await leasing.get_lease("a") == taken

    async def test_closed_backend_refuses_lease_calls(self, tmp_path: Path) -> None:
        backend = await self.make_backend(tmp_path)
        supported = backend.supports_leases
        await backend.close()
        if not supported:
            pytest.skip("no leases")
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "acquire": lambda: backend.acquire_lease("a", "w1", 5.0),
            "renew": lambda: backend.renew_lease("a", "w1", 1, 5.0),
            "release": lambda: backend.release_lease("a", "w1", 1),
            "get": lambda: backend.get_lease("a"),
        }
        for name, call in calls.items():
            with pytest.raises(StoreClosed):
                await call()
                raise AssertionError(f"{name} worked on a closed backend")
