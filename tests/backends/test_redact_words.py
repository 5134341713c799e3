"""Scrubbing a URL's secrets out of a message masked the words of the message too.

``statekeeper agents --db 'postgresql://u:p#ss@localhost/x'`` is refused (exit 2) with
the password masked, but the line read "the pa***word in …": ``scrub`` replaced every
occurrence of ``ss`` (the piece ``urlsplit`` cuts from ``p#ss``) in the text, inside
"password" as well. A secret is now masked where it stands on its own (quoted, in a
URL, bracketed), never inside a word; a piece of a password with an unencoded
``/ ? # [ ]`` is also left where it is a word of the sentence. Each case checks both:
the message's own words intact, and no secret or piece shown where a driver quotes it.
"""

from __future__ import annotations

import re

import pytest

from statekeeper.backends import open_backend
from statekeeper.backends.redact import mask_url, scrub
from statekeeper.errors import ConfigurationError

#: passwords with an unencoded reserved character: their pieces are short, are words
#: of the refusal ("the", "in", "password", "URLs"), or are a character repeated
MISPARSED = [
    "p#ss",
    "p#e",
    "x#in",
    "p#the",
    "p#th",
    "my#password",
    "pass#word",
    "ss#ss",
    "s#s#s",
    "in?the",
    "a/URLs",
    "sss[ss",
]


def _pieces(password: str) -> list[str]:
    return [p for p in re.split(r"[/?#\[\]]", password) if len(p) > 1]


#: how a parser's or driver's message shows a secret (or a piece of one): ``{0}``
DRIVER_SAID = [
    "Port could not be cast to integer value as '{0}'",
    'invalid integer value "{0}" for connection option "port"',
    'database "{0}@localhost/x" does not exist',
    "bad netloc u:{0}",
    "fragment #{0}@localhost/x ({0})",
    "[{0}]",
    "{0}",
]


@pytest.mark.parametrize("password", MISPARSED)
def test_the_refusal_keeps_its_words_and_shows_no_piece(password: str) -> None:
    url = f"postgresql://u:{password}@localhost/x"
    with pytest.raises(ConfigurationError) as info:
        open_backend(url)
    said = str(info.value)
    assert said.startswith("the password in 'postgresql://u:***@localhost/x' holds a")
    assert scrub(said, url) == said  # nothing of it was the password
    for piece in [password, *_pieces(password)]:
        for said_so in DRIVER_SAID:
            assert scrub(said_so.format(piece), url) == said_so.format("***")


@pytest.mark.parametrize("password", MISPARSED)
def test_the_cli_line_reads_as_written(password: str) -> None:
    from tests.cli._proc import cli_env, run_in_process

    url = f"postgresql://u:{password}@localhost/x"
    code, stdout, stderr = run_in_process(("agents", "--db", url), cli_env(400))
    assert code == 2, stderr
    assert "the password in 'postgresql://u:***@localhost/x' holds a character URLs" in stderr
    assert "percent-encode it (/ as %2F, ? as %3F, # as %23, [ as %5B, ] as %5D)" in stderr
    assert password not in stdout + stderr


@pytest.mark.parametrize("password", ["ss", "ass", "a", "or", "s3cret", "aaaa"])
def test_a_whole_password_is_masked_on_its_own_not_in_words(password: str) -> None:
    url = f"postgresql://u:{password}@db.invalid/x"
    ours = (
        f"cannot connect to {mask_url(url)!r}: password authentication failed for user"
        " 'u' (address db.invalid, port 5432): Passwords are case-sensitive"
    )
    assert scrub(ours, url) == ours
    for said_so in [*DRIVER_SAID, "password {0} refused", "{0}."]:
        assert scrub(said_so.format(password), url) == said_so.format("***")


@pytest.mark.parametrize("password", ["s3cret", "aaaa", "word"])
def test_a_password_of_four_characters_or_more_is_masked_inside_words_too(
    password: str,
) -> None:
    """A driver may glue a value to the text around it: a long enough password is
    never left standing because a word character touches it."""
    url = f"postgresql://u:{password}@db.invalid/x"
    assert password not in scrub(f"value x{password}y refused (user{password})", url)
