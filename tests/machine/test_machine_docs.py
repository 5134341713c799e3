"""The guide's examples (docs/machine.md) and the package docstring are doctests."""

from __future__ import annotations

import doctest
from pathlib import Path

import statekeeper.machine

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "machine.md"


def test_guide_examples_pass() -> None:
    result = doctest.testfile(str(GUIDE), module_relative=False, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 50
    assert result.failed == 0


def test_package_docstring_examples_pass() -> None:
    result = doctest.testmod(statekeeper.machine)
    assert result.attempted > 0
    assert result.failed == 0
