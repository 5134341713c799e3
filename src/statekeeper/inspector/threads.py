"""LangGraph threads kept by :class:`~statekeeper.integrations.langgraph.StatekeeperSaver`:
the list (keyset over the saver's agent ids), and one thread's checkpoints as a tree
(a checkpoint whose parent has more than one child is a fork), with channel values,
pending writes and the messages channel as a chat. Read through the saver's public
``alist``/``aget_tuple`` only."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module
from typing import TYPE_CHECKING, Any

from .changes import pretty

if TYPE_CHECKING:
    from ..store import StateStore

__all__ = [
    "EXTRA",
    "Checkpoint",
    "Message",
    "ThreadView",
    "list_threads",
    "missing_extra",
    "thread_view",
]

#: what installs the LangGraph checkpointer the thread pages read through
EXTRA = "statekeeper[langgraph]"


def missing_extra() -> str | None:
    """None when the LangGraph integration imports; else why not (the ``langgraph``
    extra is not installed: the ``inspector`` extra alone does not bring it)."""
    try:
        import_module("statekeeper.integrations.langgraph.saver")
        import_module("statekeeper.integrations.langgraph.mapping")
    except ImportError as exc:
        return str(exc)
    return None


@dataclass
class Message:
    role: str
    text: str
    name: str | None = None
    tool_calls: list[str] = field(default_factory=list)


@dataclass
class Checkpoint:
    checkpoint_id: str
    parent_id: str | None
    ns: str
    step: Any
    source: Any
    ts: str
    children: list[Checkpoint] = field(default_factory=list)
    depth: int = 0

    @property
    def fork(self) -> bool:
        return len(self.children) > 1


@dataclass
class ThreadView:
    thread_id: str
    checkpoints: list[Checkpoint]
    #: the checkpoints in tree order (depth-first; a fork's later branches indented)
    tree: list[Checkpoint]
    selected: Checkpoint | None
    channels: list[tuple[str, str]]
    pending: list[tuple[str, str, str]]
    messages: list[Message]
    metadata: str


def saver(store: StateStore, prefix: str) -> Any:
    """A :class:`StatekeeperSaver` over the inspector's own store that runs every call
    on the calling (the app's) event loop: the default saver runs its calls on a loop
    thread of its own, which would use the store from a second loop and start a
    thread per saver."""
    from ..integrations.langgraph.saver import StatekeeperSaver, _SaverPortal

    class HereLoop(_SaverPortal):
        def __init__(self) -> None:  # no thread, no loop of its own
            pass

        @property
        def running(self) -> bool:
            return True

        async def run(self, coro: Any) -> Any:
            return await coro

        async def aiterate(self, agen: Any) -> Any:
            async for item in agen:
                yield item

        def call(self, coro: Any, *, bare: bool = False) -> Any:
            coro.close()
            raise RuntimeError("the inspector's saver is async-only")

        def stop(self) -> None:
            return None

    return StatekeeperSaver(store, prefix=prefix, _portal=HereLoop())


async def list_threads(
    store: StateStore, prefix: str, after: str | None, limit: int
) -> tuple[list[tuple[str, float]], str | None]:
    """``[(thread id, last write)]`` after agent id ``after`` (the saver's agents sort
    together, each thread's generations next to each other), and the next cursor."""
    from ..integrations.langgraph.mapping import parse_agent

    out: list[tuple[str, float]] = []
    cursor = after or prefix
    while True:
        page = await store.list_agents(after=cursor, limit=200)
        for info in page:
            if not info.agent_id.startswith(prefix):
                return out, None
            parsed = parse_agent(prefix, info.agent_id)
            if parsed is not None:
                if out and parsed[0] == out[-1][0]:
                    out[-1] = (parsed[0], max(out[-1][1], info.updated_at))
                elif len(out) >= limit:
                    return out, cursor  # the next page starts with this thread
                else:
                    out.append((parsed[0], info.updated_at))
            cursor = info.agent_id
        if len(page) < 200:
            return out, None


def _message(value: Any) -> Message | None:
    if isinstance(value, dict) and "content" in value:
        role = str(value.get("role") or value.get("type") or "message")
        return Message(role, _text(value["content"]), value.get("name"))
    content = getattr(value, "content", None)
    kind = getattr(value, "type", None)
    if content is None or kind is None:
        return None
    calls = [
        f"{c.get('name')}({pretty(c.get('args'), 200)})"
        for c in getattr(value, "tool_calls", None) or []
        if isinstance(c, dict)
    ]
    return Message(str(kind), _text(content), getattr(value, "name", None), calls)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content
        )
    return pretty(content, 2000)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return {"type": type(value).__name__, **dump()}
        except Exception:
            return repr(value)
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return repr(value)


async def thread_view(
    store: StateStore, prefix: str, thread_id: str, checkpoint_id: str | None
) -> ThreadView:
    lg = saver(store, prefix)
    config = {"configurable": {"thread_id": thread_id}}
    tuples = [t async for t in lg.alist(config)]
    nodes: dict[str, Checkpoint] = {}
    raw: dict[str, Any] = {}
    for t in tuples:
        conf = t.config["configurable"]
        cid = conf["checkpoint_id"]
        parent = t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None
        meta = t.metadata or {}
        nodes[cid] = Checkpoint(
            cid,
            parent,
            conf.get("checkpoint_ns", ""),
            meta.get("step"),
            meta.get("source"),
            str(t.checkpoint.get("ts", "")),
        )
        raw[cid] = t
    roots: list[Checkpoint] = []
    for node in sorted(nodes.values(), key=lambda n: n.checkpoint_id):
        parent = nodes.get(node.parent_id) if node.parent_id else None
        (parent.children if parent is not None else roots).append(node)
    tree: list[Checkpoint] = []

    def walk(node: Checkpoint, depth: int) -> None:
        node.depth = depth
        tree.append(node)
        # the first child (oldest id) continues the line; later ones are forks
        kids = sorted(node.children, key=lambda n: n.checkpoint_id)
        for i, child in enumerate(kids):
            walk(child, depth + (1 if i > 0 else 0))

    for root in sorted(roots, key=lambda n: n.checkpoint_id):
        walk(root, 0)
    selected_id = checkpoint_id or (max(nodes) if nodes else None)
    selected = nodes.get(selected_id) if selected_id else None
    channels: list[tuple[str, str]] = []
    pending: list[tuple[str, str, str]] = []
    messages: list[Message] = []
    metadata = ""
    if selected is not None:
        t = raw[selected.checkpoint_id]
        values = t.checkpoint.get("channel_values", {}) or {}
        for name, value in sorted(values.items()):
            channels.append((str(name), pretty(_jsonable(value), 6000)))
            if name == "messages" and isinstance(value, list):
                messages = [m for m in (_message(v) for v in value) if m is not None]
        pending = [
            (str(task), str(channel), pretty(_jsonable(value), 2000))
            for task, channel, value in (t.pending_writes or [])
        ]
        metadata = pretty(_jsonable(t.metadata or {}), 4000)
    return ThreadView(
        thread_id, list(nodes.values()), tree, selected, channels, pending, messages, metadata
    )
