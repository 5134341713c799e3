"""``UnsavedChangesWarning`` keeps its agent ids and message across pickling (pytest-xdist,
multiprocessing) and when made from a message text (``warnings.warn(text, category)``)."""

from __future__ import annotations

import pickle
import warnings

from statekeeper.errors import UnsavedChangesWarning


def test_pickled_warning_keeps_its_ids_and_message() -> None:
    ids = [f"agent-{i}" for i in range(7)]
    original = UnsavedChangesWarning(ids)
    copy = pickle.loads(pickle.dumps(original))
    assert copy.agent_ids == ids
    assert str(copy) == str(original)
    assert "'agent-0'" in str(copy) and "and 2 more" in str(copy)


def test_a_warning_made_from_its_text_keeps_the_text() -> None:
    text = "store closed with unsaved changes to the data of agent(s) 'a'"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn(text, UnsavedChangesWarning, stacklevel=1)
    (w,) = caught
    assert str(w.message) == text
    assert "'s', 't'" not in str(w.message)
