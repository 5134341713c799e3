"""An inspector given WRONG key material (a key file whose key has the store's key id
but other bytes) answered 500 "DecryptionError" on an agent page: a server fault to
the user, where the problem is the key they gave. It is a 403 naming the key and what
to do, like a missing key, and never shows the record's contents."""

from __future__ import annotations

import asyncio
from pathlib import Path

from .conftest import TOKEN


def test_an_inspector_with_the_wrong_key_material_says_so(tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    from statekeeper import StateStore
    from statekeeper.inspector import InspectorSettings, create_app
    from statekeeper.security import Keyring, generate_key

    url = f"sqlite:///{tmp_path / 'enc.db'}"

    async def seed() -> None:
        async with StateStore(url, keyring=Keyring({"k1": generate_key()}, active="k1")) as s:
            await s.save("secret/a", {"ssn": "123-45-6789"})

    asyncio.run(seed())
    wrong = Keyring({"k1": generate_key()}, active="k1")  # same id, other material
    settings = InspectorSettings(url=url, token=TOKEN)
    store = StateStore(url, keyring=wrong)
    with TestClient(create_app(settings, store=store), base_url="http://127.0.0.1") as c:
        c.headers["Authorization"] = f"Bearer {TOKEN}"
        page = c.get("/agent?id=secret/a")
        assert page.status_code == 403, page.text[:400]
        assert "Encrypted: wrong key" in page.text
        assert "&#39;k1&#39;" in page.text and "--key-file" in page.text
        assert "DecryptionError" not in page.text
        fragment = c.get("/agent?id=secret/a", headers={"HX-Request": "true"})
        assert fragment.status_code == 403
        listing = c.get("/agents")
        assert listing.status_code == 200 and "secret/a" in listing.text
        assert "123-45-6789" not in page.text + fragment.text + listing.text


def test_the_verify_panel_says_the_key_is_missing_or_wrong_not_damage(tmp_path: Path) -> None:
    """The Verify panel answered a missing or wrong key with "the history itself is
    damaged ... restore the agent from a backup": it says the key is missing / wrong
    (as the agent page does), and that neither a repair nor a backup is needed."""
    from starlette.testclient import TestClient

    from statekeeper import StateStore
    from statekeeper.inspector import InspectorSettings, create_app
    from statekeeper.security import Keyring, generate_key

    url = f"sqlite:///{tmp_path / 'enc.db'}"

    async def seed() -> None:
        async with StateStore(url, keyring=Keyring({"k1": generate_key()}, active="k1")) as s:
            await s.save("secret/a", {"n": 1})
            await s.save("secret/a", {"n": 2})

    asyncio.run(seed())
    for keyring, said in (
        (None, "the key is missing"),
        (Keyring({"k1": generate_key()}, active="k1"), "the key is wrong"),
    ):
        settings = InspectorSettings(url=url, token=TOKEN)
        store = StateStore(url, keyring=keyring)
        with TestClient(create_app(settings, store=store), base_url="http://127.0.0.1") as c:
            c.headers["Authorization"] = f"Bearer {TOKEN}"
            panel = c.get("/agent/verify?id=secret/a", headers={"HX-Request": "true"})
            assert panel.status_code == 200
            assert said in panel.text and "--key-file" in panel.text, panel.text
            assert "history itself is damaged" not in panel.text
            assert "restore the agent" not in panel.text
