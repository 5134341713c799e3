"""A conflict that is not about the agent being compacted or purged (the audit log's,
another stream's) is a failure of the run, not a race lost to a writer of the agent.

Before, ``apply_retention`` read any :class:`ConflictError` of the shape "expected
head >= stored head" on a compaction as the agent deleted or made again, and any on a
purge as the agent written since it was listed: ``skipped``, exit 0 — whatever stream
the conflict named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.errors import ConflictError
from statekeeper.governance import retention as r
from statekeeper.governance.audit import AUDIT_ID
from statekeeper.governance.retention import RetentionPolicy, apply_retention

T0 = 1_000_000.0


@pytest.mark.parametrize("rule", ["keep_last=1", "ttl=1h"])
@pytest.mark.parametrize("stream", [AUDIT_ID, "acme/other"])
async def test_a_conflict_on_another_stream_is_a_failure(
    tmp_path: Path, rule: str, stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", clock=lambda: T0) as store:
        for i in range(4):
            await store.save("acme/a", {"i": i})

        async def conflict_elsewhere(*args: Any) -> None:
            raise ConflictError(stream, 5, 3)

        monkeypatch.setattr(r, "check_unchanged", conflict_elsewhere)
        report = await apply_retention(
            store, RetentionPolicy.parse(f"acme {rule}\n"), now=T0 + 7200
        )
        monkeypatch.undo()
        assert [(a.agent_id, a.outcome) for a in report.actions] == [("acme/a", "failed")]
        assert repr(stream) in report.actions[0].reason  # (the stream named)
        assert await store.head("acme/a") == 4  # nothing removed
