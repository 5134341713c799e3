"""Under row-level security an agent with the longest id there is can be deleted.

Each namespace has its own feed tombstone stream there, ``"\\x01sk-feed/deleted/in/" +
namespace + "/-"``, 13 bytes more than the namespace after the stream's kind; the
backends checked that part against the agent-id limit (1,024 bytes), so the delete (and
forget, and a retention purge) of a valid agent whose namespace is longer than 1,011
bytes raised InvalidAgentId naming "deleted/in/<namespace>…", an id the caller never
gave, and the agent could never be deleted. Real roles on the shared server (unique,
dropped afterwards)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.arguments import MAX_ID_BYTES, check_stored_id
from statekeeper.governance import Audit, parse_policy
from statekeeper.governance.policy_postgres import enforce_in_postgres
from statekeeper.store.feed_deletes import AGENT_DELETED, stream_of_namespace

from ..backends._services import POSTGRES_DSN, drop_schema, namespace, require_postgres
from .conftest import KEYRING
from .test_postgres_row_security import _as, _pg

POLICY = parse_policy('[principals.a-admin]\nadmin = ["tenant-a/**"]\n')

#: a valid agent id of the longest namespace an id of 1,024 bytes can have
LONGEST = "tenant-a/" + "n" * (MAX_ID_BYTES - len("tenant-a/") - 2) + "/x"


def test_the_tombstone_stream_of_the_longest_namespace_is_a_stored_id() -> None:
    assert len(LONGEST.encode()) == MAX_ID_BYTES
    stream = stream_of_namespace(LONGEST.rsplit("/", 1)[0])
    assert check_stored_id(stream) == stream


@pytest.fixture
def role(tmp_path: Path) -> Iterator[tuple[str, str]]:
    require_postgres()
    schema = namespace(tmp_path, "sk_rlli_")
    tenant = f"sk_rlli_a_{uuid.uuid4().hex[:8]}"
    _pg(f'CREATE ROLE "{tenant}" LOGIN')
    try:
        yield schema, tenant
    finally:
        drop_schema(schema)
        _pg(f'DROP OWNED BY "{tenant}"', f'DROP ROLE "{tenant}"')


async def test_an_agent_of_the_longest_id_is_deleted_under_row_security(
    role: tuple[str, str],
) -> None:
    schema, tenant = role
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
        await owner.save(LONGEST, {"n": 1})
    await enforce_in_postgres(POSTGRES_DSN, schema, POLICY, roles={"a-admin": tenant})
    async with StateStore(
        f"{_as(tenant)}?schema={schema}", keyring=KEYRING, principal="a-admin",
        policy=POLICY, audit=Audit(),
    ) as tenant_a:  # fmt: skip
        assert [a.agent_id for a in await tenant_a.list_agents()] == [LONGEST]
        assert await tenant_a.delete(LONGEST)  # InvalidAgentId 'deleted/in/tenant-a/nn…'
        assert await tenant_a.list_agents() == []
        tombs = [c async for c in tenant_a.subscribe(stop_at_head=True) if c.deleted]
        assert [(c.agent_id, c.type) for c in tombs] == [(LONGEST, AGENT_DELETED)]
