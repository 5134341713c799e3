"""Dataclass, pydantic and enum values in a graph's state come back as the objects on
the next run — in this process and in a new one — as they do with LangGraph's own
SqliteSaver, while loading still never imports a module or calls anything that is not
an already-imported data class (issue 12 item 3)."""

from __future__ import annotations

import base64
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import ormsgpack
import pytest
from langgraph.checkpoint.serde.jsonplus import EXT_CONSTRUCTOR_KW_ARGS, EXT_CONSTRUCTOR_POS_ARGS
from langgraph.checkpoint.sqlite import SqliteSaver

from statekeeper.integrations.langgraph import StatekeeperSaver, ValueCodec, safe_serializer

from ._lg_types import Customer, Order, Stage, shop_builder
from .conftest import BACKENDS, backend_url, new_thread

ROOT = Path(__file__).resolve().parents[2]
FIRST = {"order": Order("tea", 1), "customer": Customer(name="ann"), "stage": Stage.NEW}


def _runs(saver: Any, thread: str, turns: int) -> list[Any]:
    graph = shop_builder().compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": thread}}
    out = [graph.invoke({**FIRST, "seen": []}, cfg)]
    out += [graph.invoke({"seen": []}, cfg) for _ in range(turns - 1)]
    return [*out, graph.get_state(cfg).values]


@pytest.mark.parametrize("backend", BACKENDS)
def test_custom_types_come_back_as_objects_like_sqlite_saver(backend: str, tmp_path: Path) -> None:
    thread = new_thread()
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    try:
        reference = _runs(SqliteSaver(conn), thread, 3)
    finally:
        conn.close()
    url = backend_url(backend, tmp_path)
    with StatekeeperSaver.from_url(url) as saver:
        ours = _runs(saver, thread, 3)
    assert ours == reference
    assert ours[-1]["order"] == Order("tea", 4)
    assert ours[-1]["customer"] == Customer(name="ann", tier=4)
    assert ours[-1]["seen"] == ["Order/Customer/Stage"] * 3  # the node got objects each run
    if backend == "memory":
        return
    with StatekeeperSaver.from_url(url) as again:  # a new saver on the same store
        graph = shop_builder().compile(checkpointer=again)
        out = graph.invoke({"seen": []}, {"configurable": {"thread_id": thread}})
    assert out["order"] == Order("tea", 5) and out["stage"] is Stage.PAID


def test_custom_types_come_back_in_a_new_process(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/types.db"
    thread = new_thread()
    with StatekeeperSaver.from_url(url) as saver:
        _runs(saver, thread, 1)
    child = (
        "import sys\n"
        "from statekeeper.integrations.langgraph import StatekeeperSaver\n"
        "from tests.integrations._lg_types import shop_builder\n"
        "with StatekeeperSaver.from_url(sys.argv[1]) as saver:\n"
        "    graph = shop_builder().compile(checkpointer=saver)\n"
        "    out = graph.invoke({'seen': []}, {'configurable': {'thread_id': sys.argv[2]}})\n"
        "print(repr(out['order']), repr(out['customer']), out['seen'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", child, url, thread],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Order(item='tea', qty=3)" in done.stdout
    assert "Customer(name='ann', tier=3)" in done.stdout
    assert "['Order/Customer/Stage', 'Order/Customer/Stage']" in done.stdout


# -- what stored data cannot make the loader do ----------------------------------------


def _stored(module: str, name: str, args: Any, kind: int = EXT_CONSTRUCTOR_POS_ARGS) -> Any:
    payload = ormsgpack.packb((module, name, args))
    blob = ormsgpack.packb(ormsgpack.Ext(kind, payload))
    return {"$s": ["msgpack", base64.b64encode(blob).decode()]}


def test_a_class_that_is_not_a_data_class_is_never_called(tmp_path: Path) -> None:
    import subprocess as imported  # the module is loaded: only the class check protects

    assert imported.Popen  # type: ignore[truthy-function]
    target = tmp_path / "pwned"
    codec = ValueCodec(safe_serializer())
    got = codec.unpack(_stored("subprocess", "Popen", [["touch", str(target)]]), {})
    assert not target.exists()
    assert got == [["touch", str(target)]]  # the raw arguments, inert


def test_a_module_named_in_stored_data_is_never_imported() -> None:
    if "this" in sys.modules:  # pragma: no cover - some other test imported it
        pytest.skip("the stdlib module 'this' is already imported")
    codec = ValueCodec(safe_serializer())
    got = codec.unpack(_stored("this", "Zen", {"a": 1}, EXT_CONSTRUCTOR_KW_ARGS), {})
    assert "this" not in sys.modules
    assert got == {"a": 1}


def test_an_imported_data_class_named_in_stored_data_is_built() -> None:
    codec = ValueCodec(safe_serializer())
    got = codec.unpack(
        _stored(Order.__module__, "Order", {"item": "x", "qty": 2}, EXT_CONSTRUCTOR_KW_ARGS), {}
    )
    assert got == Order("x", 2)
    strict = ValueCodec(safe_serializer(known_types=False))
    raw = strict.unpack(
        _stored(Order.__module__, "Order", {"item": "x", "qty": 2}, EXT_CONSTRUCTOR_KW_ARGS), {}
    )
    assert raw == {"item": "x", "qty": 2}
