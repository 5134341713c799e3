"""A compacted stream on S3, which has no transaction over several objects: a process
SIGKILLed after any one of the requests of a ``prune`` or an ``append_from_base``
leaves the old stream or the new one — never a mix (a snapshot above the base that
the prune thins may outlive the switch: a state its events give too) — and running the
call again finishes it (real child processes against moto's S3 server, real SIGKILL, killed
after the k-th writing request for every k)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("boto3")

from statekeeper.backends.s3 import S3Backend, _encode_events
from statekeeper.errors import ConflictError
from statekeeper.records import AppendRequest, AppendResult, RawEvent, RawSnapshot

from ._services import moto_endpoint, namespace, s3_credentials
from .test_s3 import _drop_bucket

pytestmark = pytest.mark.slow  # moto's S3 server over HTTP, child processes

#: the child: runs one call on an S3 backend whose client dies (SIGKILL) right after
#: its ``kill_after``-th writing request came back (0: before the first one)
CHILD = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    sys.path.insert(0, sys.argv[5])
    from statekeeper.backends.s3 import S3Backend, _encode_events
    from tests.backends.test_s3_compacted import call

    endpoint, bucket, prefix, kill_after = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    WRITES = {"put_object", "delete_objects"}

    class Dying:
        def __init__(self, inner):
            self.inner, self.writes = inner, 0

        def __getattr__(self, name):
            method = getattr(self.inner, name)
            if name not in WRITES:
                return method

            def counted(*args, **kwargs):
                if self.writes == kill_after:
                    os.kill(os.getpid(), signal.SIGKILL)
                result = method(*args, **kwargs)
                self.writes += 1
                return result

            return counted

    async def main():
        backend = S3Backend(bucket, prefix, endpoint_url=endpoint, aws_access_key_id="test",
                            aws_secret_access_key="test", region_name="us-east-1")
        backend._s3 = Dying(backend._s3)
        await call(backend, sys.argv[6])
        print("finished", backend._s3.writes)
        await backend.close()

    asyncio.run(main())
    """
)


def ev(seq: int) -> RawEvent:
    return RawEvent(seq, "step", float(seq), b"payload-%d" % seq, b"sum-%d" % seq)


def snap(seq: int) -> RawSnapshot:
    return RawSnapshot(seq, float(seq), b"state-%d" % seq, b"ssum-%d" % seq)


def req(expected: int, first: int, last: int, key: str | None = None, **kw: Any) -> AppendRequest:
    events = tuple(ev(s) for s in range(first, last + 1))
    return AppendRequest("a", expected, events, idempotency_key=key, **kw)


async def old_stream(backend: S3Backend) -> None:
    """Commits 1-3 (key k1), 4-7 (key k2: the prune's base 5 cuts it), 8-10 (the tip);
    snapshots at 3, 5 (the new base) and 8."""
    await backend.append(req(0, 1, 3, "k1", snapshot=snap(3)))
    await backend.append(req(3, 4, 7, "k2", snapshot=snap(5)))
    await backend.append(req(7, 8, 10, snapshot=snap(8), head_tag=b"tag10"))


async def call(backend: S3Backend, what: str) -> None:
    """The call the child makes (and the parent, once, to count its requests)."""
    if what == "prune":
        await backend.prune("a", 5, [8])
    else:
        await backend.append_from_base(req(5, 6, 8, "k6", head_tag=b"tag8"), snap(5))


async def picture(backend: S3Backend) -> dict[str, Any]:
    return {
        "events": [e.seq for e in await backend.read("a")],
        "some": [e.seq for e in await backend.read("a", 4, 7)],
        "head": await backend.head_tag("a"),
        "bases": await backend.stream_bases(["a"]),
        "latest": await backend.latest_snapshot("a"),
        "at 5": await backend.latest_snapshot("a", 5),
        "at 4": await backend.latest_snapshot("a", 4),
        "k1": await backend.lookup_key("a", "k1"),
        "k2": await backend.lookup_key("a", "k2"),
        "keys": await backend.idempotency_keys("a"),
        "seq_at": await backend.seq_at("a", 4.5),
        "agents": [(i.agent_id, i.head_seq) for i in await backend.list_agents()],
    }


@pytest.fixture
def bucket(tmp_path: Path) -> Iterator[str]:
    moto_endpoint()
    name = namespace(tmp_path, "sk-t-")
    yield name
    _drop_bucket(name)


def backend_in(bucket: str, prefix: str) -> S3Backend:
    return S3Backend(
        bucket, prefix, endpoint_url=moto_endpoint(), create_bucket=True, **s3_credentials()
    )


def run_child(
    bucket: str, prefix: str, kill_after: int, what: str
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}
    here = str(Path(__file__).parents[2])  # the checkout: tests/ is a package
    args = [moto_endpoint(), bucket, prefix, str(kill_after), here, what]
    return subprocess.run(
        [sys.executable, "-c", CHILD, *args], env=env, capture_output=True, text=True, timeout=120
    )


async def states(bucket: str, what: str) -> tuple[dict[str, Any], dict[str, Any], int]:
    """The stream before and after the call (made here, uninterrupted) and how many
    writing requests the call makes."""
    counting = backend_in(bucket, "count")
    try:
        if what == "prune":
            await old_stream(counting)
        before = await picture(counting)
        writes = 0
        put, delete = counting._s3.put_object, counting._s3.delete_objects

        def count(method: Any) -> Any:
            def counted(*args: Any, **kwargs: Any) -> Any:
                nonlocal writes
                writes += 1
                return method(*args, **kwargs)

            return counted

        counting._s3.put_object, counting._s3.delete_objects = count(put), count(delete)
        await call(counting, what)
        after = await picture(counting)
    finally:
        await counting.close()
    return before, after, writes


async def test_a_prune_killed_after_any_request_leaves_the_old_or_the_new_stream(
    bucket: str,
) -> None:
    before, after, writes = await states(bucket, "prune")
    assert before["events"] == list(range(1, 11)) and after["events"] == list(range(6, 11))
    assert after["bases"] == [5] and after["at 4"] is None
    assert after["k1"] == AppendResult("a", 1, 3, True)  # its events are gone, not its record
    assert after["k2"] == AppendResult("a", 4, 7, True)  # its append is cut, not gone
    assert writes >= 4  # the split commit, the base object, the deletions
    seen = set()
    old, new = before, after
    for kill_after in range(writes):
        prefix = f"kill{kill_after}"
        backend = backend_in(bucket, prefix)
        before, after = dict(old), dict(new)
        try:
            await old_stream(backend)
            child = await asyncio.to_thread(run_child, bucket, prefix, kill_after, "prune")
            assert child.returncode == -signal.SIGKILL, child.stderr
            now = await picture(backend)
            # the snapshot the prune thins (above the base: a state the events give too)
            # may outlive the switch; it goes with the rest of what the switch hides
            assert now.pop("latest") in (before.pop("latest"), after.pop("latest"))
            assert now in (before, after), (kill_after, now)
            seen.add("old" if now == before else "new")
            await backend.prune("a", 5, [8])  # run again: finished
            assert await picture(backend) == new
            left = backend._list(backend._agent_root("a"))
            root = backend._agent_root("a")
            assert sorted(k[len(root) :] for k in left) == sorted(
                [
                    "e/" + backend._seq_name(6),
                    "e/" + backend._seq_name(8),
                    "e/b" + backend._seq_name(5),
                    "h/mark",  # (the high-water mark: incarnation, head)
                    "s/" + backend._seq_name(5),
                    "k/" + backend._key_hash("k1"),  # (a record outlives its events)
                    "k/" + backend._key_hash("k2"),
                ]
            )  # nothing else of the old stream left behind
        finally:
            await backend.close()
    assert seen == {"old", "new"}  # the switch is one of the requests


async def test_an_append_from_base_killed_after_any_request_leaves_no_stream_or_all_of_it(
    bucket: str,
) -> None:
    before, after, writes = await states(bucket, "from_base")
    assert before["events"] == [] and before["agents"] == []
    assert after["events"] == [6, 7, 8] and after["latest"] == snap(5)
    assert writes == 4  # the commit (with its base inside), its mark, the base's copy, the key
    for kill_after in range(writes):
        prefix = f"kill{kill_after}"
        backend = backend_in(bucket, prefix)
        try:
            child = await asyncio.to_thread(run_child, bucket, prefix, kill_after, "from_base")
            assert child.returncode == -signal.SIGKILL, child.stderr
            now = await picture(backend)
            assert now == (before if kill_after == 0 else after), (kill_after, now)
            # run again (a restore resumed): made, or found made by its idempotency key
            made = await backend.append_from_base(req(5, 6, 8, "k6", head_tag=b"tag8"), snap(5))
            assert made == AppendResult("a", 6, 8, duplicate=kill_after > 0)
            assert await picture(backend) == after
            with pytest.raises(ConflictError):  # another stream: the agent exists
                await backend.append_from_base(req(5, 6, 6), snap(5))
        finally:
            await backend.close()


async def test_a_deleted_compacted_stream_leaves_no_base_behind(bucket: str) -> None:
    """A base object (and a commit under it) left by a delete killed before its last
    request neither hides the events of a stream made again under the same id nor
    mixes with them: the stream's first append removes them."""
    backend = backend_in(bucket, "again")
    try:
        await old_stream(backend)
        await backend.prune("a", 5)
        root = backend._agent_root("a")
        backend._s3.delete_objects(  # a delete that stopped before the base object
            Bucket=bucket,
            Delete={"Objects": [{"Key": k} for k in backend._list(root) if "/e/b" not in k]},
        )
        # and a commit under the base, as a prune killed before its deletions leaves one
        backend._put_new(root + "e/" + backend._seq_name(3), _encode_events([ev(3)]), {"last": "3"})
        assert await backend.head("a") == 0
        await backend.append(req(0, 1, 3))
        assert await backend.read("a") == [ev(1), ev(2), ev(3)]
        assert await backend.stream_bases(["a"]) == [0]
        left = sorted(k[len(root) :] for k in backend._list(root))
        assert left == ["e/" + backend._seq_name(1), "h/mark"]
    finally:
        await backend.close()
