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
