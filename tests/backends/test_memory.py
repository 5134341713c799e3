"""The memory backend runs the shared backend contract."""

from __future__ import annotations

from pathlib import Path

from statekeeper.backends.memory import MemoryBackend
from statekeeper.testing import BackendConformance


class TestMemoryConformance(BackendConformance):
    async def make_backend(self, tmp_path: Path) -> MemoryBackend:
        return MemoryBackend()
