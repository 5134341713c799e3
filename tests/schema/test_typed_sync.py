"""The blocking face of typed agents: ``SyncStateStore.agent(model=...)``."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from statekeeper.errors import ConfigurationError, ValidationError
from statekeeper.store.sync import SyncStateStore, SyncTypedAgent


class Ticket(BaseModel):
    customer: str
    priority: int = 0


def test_a_typed_agent_saves_and_loads_its_model_through_the_sync_face(tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'typed.db'}"
    with SyncStateStore(url) as store:
        agent = store.agent("t-1", model=Ticket, initial_state=Ticket(customer="ada"))
        assert isinstance(agent, SyncTypedAgent)
        agent.state = Ticket(customer="ada", priority=2)
        agent.save()
    with SyncStateStore(url) as store:
        again = store.agent("t-1", model=Ticket)
        assert again.state == Ticket(customer="ada", priority=2)
        assert again.fsm_state is not None


def test_an_invalid_state_is_refused_and_nothing_is_written(tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'typed.db'}"
    with SyncStateStore(url) as store:
        agent = store.agent("t-1", model=Ticket, initial_state=Ticket(customer="ada"))
        seq = agent.seq
        agent.state.priority = "high"  # type: ignore[assignment]
        with pytest.raises(ValidationError, match="priority"):
            agent.save()
        assert store.agent("t-1", model=Ticket).seq == seq


def test_initial_data_with_a_model_is_refused() -> None:
    with SyncStateStore("memory://") as store, pytest.raises(ConfigurationError):
        store.agent("t-2", model=Ticket, initial_data={"customer": "x"})


def test_typed_states_load_get_save_and_create_through_the_sync_face() -> None:
    from statekeeper.concurrency import SyncLeaseManager
    from statekeeper.errors import ConflictError, LeaseLost
    from statekeeper.schema import SyncTypedStates

    with SyncStateStore("memory://") as store:
        tickets = SyncTypedStates(store, Ticket)
        assert tickets.get("t-1") is None
        first = tickets.create("t-1", Ticket(customer="ada"))
        with pytest.raises(ConflictError):
            tickets.create("t-1", Ticket(customer="bob"))
        tickets.save("t-1", Ticket(customer="ada", priority=3), actor="triage")
        assert tickets.load("t-1") == Ticket(customer="ada", priority=3)
        assert tickets.load("t-1", at_seq=first.last_seq) == Ticket(customer="ada")
        snap = tickets.load_snapshot("t-1")
        assert (snap.seq, snap.stored_version) == (2, tickets.schema.version)
        assert [e.actor for e in tickets.history("t-1")] == [None, "triage"]
        with pytest.raises(ValidationError, match="priority"):
            tickets.save("t-1", Ticket.model_construct(customer="ada", priority="high"))
        assert tickets.get("t-1") == Ticket(customer="ada", priority=3)  # nothing written
        lease = SyncLeaseManager(store, holder="A").acquire("t-1")
        tickets.save("t-1", Ticket(customer="ada", priority=4), lease=lease)
        lease.release()
        with pytest.raises(LeaseLost):
            tickets.save("t-1", Ticket(customer="ada", priority=5), lease=lease)
        assert tickets.load("t-1").priority == 4
