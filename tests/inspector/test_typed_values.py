"""The inspector serves and shows a state's typed values as the JSON an export
writes (trialdata): ``/agent/state.json`` answered 500 for a Decimal, and the pages
showed bytes as a list of numbers, a datetime or UUID as a plain string."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..cli.test_cli_typed_values import TAGGED, typed_store
from .conftest import make_client


def test_the_inspector_serves_typed_values_tagged(tmp_path: Path) -> None:
    url = typed_store(tmp_path)
    client: Any
    with make_client(url) as client:
        whole = client.get("/agent/state.json?id=typed&seq=1")
        assert whole.status_code == 200, whole.text
        assert whole.json()["data"] == TAGGED
        page = client.get("/agent/state?id=typed&seq=1")
        assert page.status_code == 200
        assert "AP8=" in page.text  # the bytes, not [2 items] 0: 0, 1: 255
        assert "[2 items]" not in page.text
        event = client.get("/agent/event?id=typed&seq=2")
        assert event.status_code == 200 and "decimal" in event.text
