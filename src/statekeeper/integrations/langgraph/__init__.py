"""LangGraph checkpointer backed by statekeeper (``pip install statekeeper[langgraph]``).

>>> from statekeeper.integrations.langgraph import StatekeeperSaver
>>> saver = StatekeeperSaver.from_url("memory://")
>>> config = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
>>> checkpoint = {"v": 4, "id": "1ef4f797-8335-6428-8001-8a1503f9b875",
...               "ts": "2024-05-04T06:32:42.235444+00:00",
...               "channel_values": {"topic": "ducks"}, "channel_versions": {"topic": 1},
...               "versions_seen": {}, "updated_channels": ["topic"]}
>>> saved = saver.put(config, checkpoint, {"source": "input", "step": -1}, {"topic": 1})
>>> saver.get_tuple({"configurable": {"thread_id": "t1"}}).checkpoint["channel_values"]
{'topic': 'ducks'}
>>> saver.close()

See ``docs/langgraph.md`` for the storage layout, safety and retention.
"""

try:
    import langgraph.checkpoint.base  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "statekeeper.integrations.langgraph needs LangGraph's checkpoint package: "
        "pip install 'statekeeper[langgraph]'"
    ) from exc

from .saver import (
    CheckpointForkError,
    RetentionReport,
    StatekeeperSaver,
    ThreadBusyError,
    ThreadFormatTooNew,
    ThreadNotFound,
)
from .serde import MESSAGE_CLASSES, ValueCodec, safe_serializer

__all__ = [
    "MESSAGE_CLASSES",
    "CheckpointForkError",
    "RetentionReport",
    "StatekeeperSaver",
    "ThreadBusyError",
    "ThreadFormatTooNew",
    "ThreadNotFound",
    "ValueCodec",
    "safe_serializer",
]
