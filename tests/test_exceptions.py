"""Every exception (and warning) class statekeeper defines roots in StatekeeperError,
so ``except StatekeeperError`` catches everything the library raises on purpose."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import statekeeper
from statekeeper import StatekeeperError


def _modules() -> list[str]:
    names = [statekeeper.__name__]
    for info in pkgutil.walk_packages(statekeeper.__path__, statekeeper.__name__ + "."):
        names.append(info.name)
    return names


def _exception_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for name in _modules():
        if name.endswith("__main__"):
            continue
        module = importlib.import_module(name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__.startswith("statekeeper"):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return found


def test_the_walk_finds_the_package_exceptions() -> None:
    found = _exception_classes()
    # the walk reaches submodules, private classes included
    assert "statekeeper.concurrency.merge.Unresolved" in found
    assert "statekeeper.errors.InvalidArgument" in found
    assert "statekeeper.security.rekey._Restart" in found
    assert len(found) >= 35


def test_every_exception_class_roots_in_statekeeper_error() -> None:
    strays = sorted(
        name for name, cls in _exception_classes().items() if not issubclass(cls, StatekeeperError)
    )
    assert strays == []


def _sample(annotation: str, name: str) -> object:
    """A value for an ``__init__`` parameter, from its annotation (a string: the
    modules use ``from __future__ import annotations``)."""
    text = annotation.replace(" ", "")
    if "BaseException" in text or "ConflictError" in text:
        return statekeeper.ConflictError("agent-1", 2, 3)
    if text.startswith("dict"):
        return {"agent-1": statekeeper.ConflictError("agent-1", 2, 3)}
    if text.startswith("list[tuple"):
        return [("field", "is wrong")]
    if text.startswith(("list", "Sequence", "tuple")):
        return ["agent-1", "agent-2"]
    if text.startswith("int") or name in {"seq", "line", "size", "limit"}:
        return 7
    if text.startswith("float"):
        return 1.5
    if text.startswith("bool"):
        return True
    return f"<{name}>"


def _instances() -> list[BaseException]:
    made: list[BaseException] = []
    for cls in _exception_classes().values():
        if not issubclass(cls, StatekeeperError):
            continue
        params = [
            p
            for p in inspect.signature(cls.__init__).parameters.values()
            if p.name != "self"
            and p.default is inspect.Parameter.empty
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        args = {p.name: _sample(str(p.annotation), p.name) for p in params}
        try:
            made.append(cls(**args))
        except Exception:  # a class these samples cannot build is skipped
            continue
    return made


def test_every_error_survives_pickling_with_its_fields() -> None:
    """An error crossing a process (multiprocessing, concurrent.futures, pytest-xdist)
    arrives with the same type, message and fields; before, Exception's reduce rebuilt
    it as ``cls(*args)``: UnsavedChangesWarning(["a"]) came back naming the letters of
    its own message as agent ids, and multi-field errors could not be unpickled."""
    import pickle

    made = _instances()
    assert len(made) >= 40, [type(e).__name__ for e in made]
    for error in made:
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is type(error)
        assert str(back) == str(error), type(error).__name__
        assert back.args == error.args
        assert sorted(vars(back)) == sorted(vars(error)), type(error).__name__
        for field, value in vars(error).items():
            assert repr(vars(back)[field]) == repr(value), (type(error).__name__, field)


def test_unsaved_changes_warning_keeps_its_agent_ids_across_a_process() -> None:
    import pickle

    warning = statekeeper.UnsavedChangesWarning(["acme/a", "acme/b"])
    back = pickle.loads(pickle.dumps(warning))
    assert back.agent_ids == ["acme/a", "acme/b"]
    assert "'acme/a', 'acme/b'" in str(back)
