"""A password holding a character URLs reserve (``/ ? # [ ]``), typed as is (a
generated password often has a ``/`` or ``#``), was shown whole: ``urlsplit`` cut
``postgresql://app:p#ss@db/x`` at the ``#`` (netloc ``app:p``, no ``@``), so
``mask_url`` saw no password and every message, ``repr`` and CLI line quoting the URL
showed it (``bad PostgreSQL URL 'postgresql://app:p#ss@db/x': Port could not be cast to
integer value as 'p'``). Now the URL is masked through the last ``@``, the pieces a
parser may quote are scrubbed, and ``open_backend`` refuses it naming how to write it.
Each case plants two unique pieces and looks for either in everything shown."""

from __future__ import annotations

import traceback

import pytest

from statekeeper.backends import open_backend
from statekeeper.backends.redact import mask_url, scrub, secrets_of
from statekeeper.errors import ConfigurationError

A, B = "Qv7nHead", "Zr4kTail"  # the two pieces of every planted password

URLS = [
    f"postgresql://app:{A}#{B}@db.invalid:5432/agents?schema=s",
    f"postgresql://app:{A}?{B}@db.invalid/agents",
    f"postgresql://app:{A}/{B}@db.invalid/agents",
    f"postgres://app:{A}[{B}@db.invalid/agents",
    f"redis://:{A}#{B}@cache.invalid:6379/0",
    f"redis://:{A}/{B}@cache.invalid:6379/0?prefix=p",
    f"rediss://user:{A}?{B}@cache.invalid/0",
    f"redis+cluster://:{A}#{B}@n1.invalid:7000,n2.invalid:7001",
]


def _shown(exc: BaseException) -> str:
    """Everything an exception shows: message, args, its chain in a traceback."""
    return "".join(traceback.format_exception(exc)) + repr(exc.args)


@pytest.mark.parametrize("url", URLS)
def test_mask_url_hides_a_password_with_reserved_characters(url: str) -> None:
    masked = mask_url(url)
    assert A not in masked and B not in masked
    assert ":***@" in masked
    assert {A, B} <= set(secrets_of(url))
    said = f"bad URL {url}: Port could not be cast to integer value as '{A}' ({B})"
    assert A not in scrub(said, url) and B not in scrub(said, url)


@pytest.mark.parametrize("url", URLS)
def test_open_backend_refuses_it_naming_neither_piece(url: str) -> None:
    pytest.importorskip("redis")
    pytest.importorskip("psycopg")
    with pytest.raises(ConfigurationError) as info:
        open_backend(url)
    shown = _shown(info.value)
    assert A not in shown and B not in shown
    assert "percent-encode" in str(info.value) and ":***@" in str(info.value)


@pytest.mark.parametrize(
    "url",
    [
        f"redis://:12/{B}@cache.invalid:6379/0",  # a port that is a number: host ""
        f"postgresql://app:12/{B}@db.invalid/agents",
    ],
)
def test_a_password_read_as_a_port_and_path_is_never_shown(url: str) -> None:
    """Valid as written (host, port 12, a path): an engine's error or repr may quote
    the path, a piece of the password."""
    pytest.importorskip("redis")
    pytest.importorskip("psycopg")
    try:
        backend = open_backend(url)
    except ConfigurationError as exc:
        assert B not in _shown(exc)
    else:
        assert B not in repr(backend)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://db.invalid:5432/agents?application_name=me@host",
        "postgresql://app:pw@db.invalid/agents",
        "redis://:p%23w@cache.invalid/0",
        "s3://bucket/a:b@c",
    ],
)
def test_urls_valid_as_written_are_not_refused(url: str) -> None:
    pytest.importorskip("redis")
    pytest.importorskip("psycopg")
    pytest.importorskip("boto3")
    open_backend(url)  # (nothing connects until first use)


def test_the_cli_line_shows_neither_piece() -> None:
    from tests.cli._proc import cli_env, run_in_process

    for url in URLS[:2] + URLS[4:6]:
        code, stdout, stderr = run_in_process(("agents", "--db", url), cli_env(200))
        assert code == 2, stderr
        assert A not in stdout + stderr and B not in stdout + stderr, stderr
        assert "percent-encode" in stderr
