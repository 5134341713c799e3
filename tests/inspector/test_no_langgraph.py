"""The inspector installed with the documented ``inspector`` extra only (no LangGraph):
``/threads``, linked from every page, answered HTTP 500 (an ImportError). It says
which extra to install, and every other page works.

In a child interpreter where ``langgraph`` cannot be imported (``sys.modules`` entry
None: what an installation without the package raises)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import statekeeper

from .conftest import TOKEN

CHILD = """
import json, sys
sys.modules["langgraph"] = None  # as if not installed: every import of it fails
from starlette.testclient import TestClient
from statekeeper.inspector import InspectorSettings, create_app

settings = InspectorSettings(url=sys.argv[1], token=sys.argv[2])
out = {}
with TestClient(create_app(settings), base_url="http://127.0.0.1") as c:
    c.headers["Authorization"] = "Bearer " + sys.argv[2]
    for path in ("/threads", "/thread?id=t-1", "/agents", "/store"):
        r = c.get(path)
        out[path] = [r.status_code, r.text]
print(json.dumps(out))
"""


def test_threads_without_langgraph_say_which_extra_to_install(seeded_url: str) -> None:
    src = Path(statekeeper.__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, seeded_url, TOKEN],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    pages = json.loads(done.stdout.splitlines()[-1])
    for path in ("/threads", "/thread?id=t-1"):
        status, html = pages[path]
        assert status == 200, (path, html[-800:])
        assert "pip install &#39;statekeeper[langgraph]&#39;" in html
        assert 'id="no-langgraph"' in html
    assert pages["/agents"][0] == 200 and pages["/store"][0] == 200
