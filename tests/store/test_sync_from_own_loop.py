"""A blocking call of a sync store made from code running on that store's own loop.

A state machine's guards, actions, hooks and callbacks run on the sync store's
private event loop; one that calls the sync store (``store.save(...)`` in an
``on_enter`` hook) would wait for the loop it blocks. It was refused — no hang — but
with an untyped ``RuntimeError("Portal.call() from inside the portal's own loop would
deadlock")``, naming an internal class: in an ``on_enter`` hook it is only logged and
kept in ``machine.callback_errors``, in a guard it aborted the transition with it. It
is now a :class:`~statekeeper.errors.ConfigurationError` saying what to do, as the
LangGraph saver's same refusal is; nothing is written.
"""

from __future__ import annotations

import pytest

from statekeeper import SyncStateStore
from statekeeper.errors import ConfigurationError
from statekeeper.machine import AgentStateMachine, TransitionRule


def test_a_hook_calling_its_sync_store_gets_a_typed_error_saying_why() -> None:
    with SyncStateStore("memory://") as store:
        machine = AgentStateMachine(rules=[TransitionRule("a", "go", "b")])

        @machine.on_exit("a")
        def leaving() -> None:
            store.save("other", {"from": "hook"})

        agent = store.agent("x", machine)
        with pytest.raises(ConfigurationError, match="its own event loop") as caught:
            agent.transition("go")
        assert "Portal" not in str(caught.value)
        assert agent.state == "a"  # (an on_exit hook that raises aborts the transition)
        assert store.get("other") is None
