"""The governance tests' keyring, in a module that imports no pytest: child processes
of the crash tests import it (``tests.governance.conftest`` re-exports it)."""

from __future__ import annotations

from statekeeper.security import Keyring

KEYRING = Keyring({"k1": "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="})
