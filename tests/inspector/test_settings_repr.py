"""``InspectorSettings`` was a plain dataclass: its ``repr`` (a log line, a debugger,
a traceback's locals, an f-string in an embedding's start-up message) showed the store
URL's password and the bearer token that guards every page. It shows the URL masked
and never the token."""

from __future__ import annotations

PASSWORD = "Pw-settings-Jq2Vt8"
TOKEN = "tok-settings-Xw93Lm0pQ4zR"


def test_the_repr_shows_neither_the_password_nor_the_token() -> None:
    from statekeeper.inspector import InspectorSettings

    settings = InspectorSettings(url=f"postgresql://app:{PASSWORD}@db.invalid/x", token=TOKEN)
    for shown in (repr(settings), str(settings), f"{settings}", f"{[settings]}"):
        assert PASSWORD not in shown and TOKEN not in shown
        assert "postgresql://app:***@db.invalid/x" in shown
    assert settings.token == TOKEN  # (kept: only not shown)
    assert "allow_writes=False" in repr(settings)


def test_a_generated_token_is_not_shown_either() -> None:
    from statekeeper.inspector import InspectorSettings

    settings = InspectorSettings(url="sqlite:///x.db")
    assert settings.token not in repr(settings)
