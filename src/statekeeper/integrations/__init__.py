"""Adapters that let other agent frameworks keep their state in statekeeper.

Each integration lives in its own subpackage and imports its framework lazily, so
``import statekeeper`` never needs the framework installed:

* :mod:`statekeeper.integrations.langgraph` — a LangGraph checkpointer
  (``pip install statekeeper[langgraph]``).
"""

__all__: list[str] = []
