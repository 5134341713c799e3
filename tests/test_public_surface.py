"""A small public surface per audience (issue 13 item 2): the top level holds what an
agent builder uses (the seed's names included) and the common errors; engine authors
import from ``statekeeper.backends`` / ``statekeeper.codec``; every error is in
``statekeeper.errors``. Names that moved still resolve, with a DeprecationWarning."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
import warnings

import pytest

import statekeeper
import statekeeper.errors

SEED_NAMES = [
    "AgentState",
    "StateTransition",
    "TransitionRule",
    "StateHistory",
    "AgentStateMachine",
    "StorageBackend",
    "StateSnapshot",
    "StatePersistenceManager",
]
COMMON_ERRORS = [
    "StatekeeperError",
    "AgentNotFound",
    "ConflictError",
    "IntegrityError",
    "InvalidArgument",
    "InvalidTransition",
]


def test_the_top_level_is_small_and_every_name_resolves_without_a_warning() -> None:
    assert len(statekeeper.__all__) <= 35
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in statekeeper.__all__:
            assert getattr(statekeeper, name) is not None, name
    for name in [*SEED_NAMES, *COMMON_ERRORS, "StateStore", "SyncStateStore", "DurableAgent"]:
        assert name in statekeeper.__all__, name


def test_top_level_errors_are_the_ones_in_statekeeper_errors() -> None:
    for name in statekeeper.__all__:
        value = getattr(statekeeper, name)
        if isinstance(value, type) and issubclass(value, BaseException):
            assert getattr(statekeeper.errors, name) is value, name


def test_every_error_class_is_importable_from_statekeeper_errors() -> None:
    defined = [
        name
        for name, cls in inspect.getmembers(statekeeper.errors, inspect.isclass)
        if issubclass(cls, statekeeper.errors.StatekeeperError)
        and cls.__module__ == "statekeeper.errors"
    ]
    assert len(defined) >= 30
    public = [name for name in defined if not name.startswith("_")]
    assert sorted(public) == sorted(statekeeper.errors.__all__)


@pytest.mark.parametrize("name", sorted(statekeeper._MOVED))
def test_a_moved_name_still_resolves_and_warns_where_it_went(name: str) -> None:
    home = statekeeper._MOVED[name]
    with pytest.warns(DeprecationWarning, match=rf"statekeeper\.{name} is deprecated.*{home}"):
        value = getattr(statekeeper, name)
    assert value is getattr(importlib.import_module(home), name)
    assert name not in statekeeper.__all__
    assert name not in dir(statekeeper)  # tools that walk dir() see no deprecated names


def test_from_import_of_a_moved_name_warns() -> None:
    with pytest.warns(DeprecationWarning, match="statekeeper.errors"):
        from statekeeper import LeaseHeld  # noqa: F401


def test_engine_authors_find_their_names_in_backends_and_codec() -> None:
    import statekeeper.backends as backends
    import statekeeper.codec as codec

    for name in ["Backend", "Health", "MemoryBackend", "SQLiteBackend", "open_backend"]:
        assert name in backends.__all__
    for name in ["Codec", "Keyring", "TypeRegistry"]:
        assert name in codec.__all__


def test_the_old_keyring_module_is_an_alias_that_warns() -> None:
    from statekeeper.codec.keys import Keyring

    old = importlib.import_module("statekeeper.security.keys")
    with pytest.warns(DeprecationWarning, match="statekeeper.codec.keys"):
        assert old.Keyring is Keyring
    with pytest.raises(AttributeError):
        old.NoSuchName  # noqa: B018


def test_import_statekeeper_loads_only_the_errors() -> None:
    code = (
        "import sys, statekeeper;"
        "print(*sorted(m for m in sys.modules if m.startswith('statekeeper')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = out.stdout.split()
    # (the errors package's parts: statekeeper.errors.base, .storage, ...)
    parts = [m for m in loaded if m.startswith("statekeeper.errors.")]
    assert len(parts) >= 2
    # (_start: the statekeeper command's Ctrl-C at start-up; it imports nothing else)
    assert loaded == ["statekeeper", "statekeeper._start", "statekeeper.errors", *parts]
