"""A sync store's ``close()`` refused on its own loop leaves it open, closed at exit.

``SyncStateStore.close()`` from code running on the store's loop (a state machine's
hook, guard or action) is refused with :class:`ConfigurationError` (it would wait for
that loop). It took the store off the list of stores closed at interpreter exit, and
unregistered its exit hook, before it looked: the store stayed open, but a
write-behind (``durability="async"``) save acknowledged before was never flushed at
exit — lost. Now the refusal comes first and changes nothing.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from statekeeper import SyncStateStore

_SCRIPT = textwrap.dedent(
    """
    import sys
    from statekeeper import SyncStateStore
    from statekeeper.errors import ConfigurationError

    store = SyncStateStore(sys.argv[1], durability="async", flush_interval=3600)
    store.save("a", {"n": 1})

    async def on_loop():
        try:
            store.close()
        except ConfigurationError:
            return "refused"
        return "closed"

    print(store._portal.call(on_loop()))
    store.save("a", {"n": 2})  # still open
    print("saved")
    """
)


def test_a_refused_close_on_the_loop_keeps_the_exit_flush(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["refused", "saved"], done.stderr
    with SyncStateStore(url) as again:  # flushed at the first process's exit
        assert again.load("a").data == {"n": 2}
