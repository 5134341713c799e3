"""Credentials never leave the process: URLs and messages with their secrets masked.

:func:`mask_url` is what every error message, log line, ``repr`` and CLI output uses
to show a backend URL; :func:`scrub` removes a URL's secrets from any other text (a
driver's message, for instance) before it is shown.

>>> mask_url("postgresql://postgres:s3cret@db:5432/app?sslmode=require")
'postgresql://postgres:***@db:5432/app?sslmode=require'
>>> mask_url("redis://:s3cret@cache:6379/0")
'redis://:***@cache:6379/0'
>>> mask_url("host=db user=app password=s3cret")
'host=db user=app password=***'
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, quote, unquote, urlsplit

__all__ = ["MASK", "mask_url", "misparsed_password", "one_line", "scrub", "secrets_of"]

MASK = "***"

#: query options whose value is a secret (matched as a substring of the lower-cased name)
_SECRET_NAMES = ("password", "passwd", "secret", "token", "credential", "api_key", "apikey")
_CONNINFO_PASSWORD = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)
#: ``user:password@host`` in text that is no URL (a scheme mistyped, ``postgresql:/u:p@h``
#: or ``postgresql//u:p@h``, or left out): taken for a SQLite path, it was shown whole
_BARE_USERINFO = re.compile(r"(?<![^\s/])([^\s:/@]*):(\S*)@")


def _secret_name(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in _SECRET_NAMES)


#: a URL whose password holds a character URLs reserve (``/ ? # [ ]``) unencoded:
#: ``postgresql://app:p#ss@db/x`` is split by :func:`urlsplit` at the ``#`` (netloc
#: ``app:p``, the rest a fragment), so its netloc has no ``@`` and the password would
#: be shown. The user is what comes before the first ``:``, the password runs to the
#: last ``@`` (masking too much of a malformed URL rather than a piece of a secret).
_MISPARSED = re.compile(r"^(?P<head>[^:/?#@\[\]]*:)(?P<password>.*)@(?P<tail>[^@]*)$", re.DOTALL)


def misparsed_password(url: str) -> str | None:
    """The password of ``url`` when it holds an unencoded ``/ ? # [ ]`` that makes
    :func:`urlsplit` take part of it for the host, port, path, query or fragment
    (``redis://:p/ss@cache/0``); None when the URL parses as written."""
    if not isinstance(url, str) or "://" not in url:
        return None
    rest = url.split("://", 1)[1]
    split = _split(url)
    if split is not None:
        if "@" in split[1]:
            return None  # a userinfo urlsplit finds (a password with "@" in it included)
        end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
        if "@" not in rest[end:]:
            return None  # no "@" past the authority: no userinfo at all
    match = _userinfo_match(rest)
    return match.group("password") if match else None


def _userinfo_match(rest: str) -> re.Match[str] | None:
    """:data:`_MISPARSED` on ``rest`` (a URL after its ``://``) up to a nested URL's
    ``://`` (``replica_url=postgresql://…``, a malformed ``tiered://hot=redis://…``):
    the userinfo is this URL's, before any other."""
    cut = rest.find("://")
    return _MISPARSED.match(rest if cut < 0 else rest[:cut])


def _mask_misparsed(url: str) -> str | None:
    password = misparsed_password(url)
    if password is None:
        return None
    scheme, rest = url.split("://", 1)
    match = _userinfo_match(rest)
    assert match is not None
    tail = _mask_netloc_text(rest[match.start("tail") :])  # (a nested URL's own password)
    return f"{scheme}://{match.group('head')}{MASK}@{tail}"


def _split(url: str) -> tuple[str, str, str, str, str] | None:
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    return parts.scheme, parts.netloc, parts.path, parts.query, parts.fragment


def mask_url(url: str) -> str:
    """``url`` with its password (and any secret query option) replaced by ``***``.

    Tier URLs nested in a ``tiered://`` query are masked too; a libpq key/value
    connection string has its ``password=`` masked; a plain path is returned as is.
    """
    if not isinstance(url, str):
        return repr(type(url))
    if "://" not in url:
        text = _CONNINFO_PASSWORD.sub(lambda m: m.group(1) + MASK, url)
        return _BARE_USERINFO.sub(lambda m: f"{m.group(1)}:{MASK}@", text)
    split = _split(url)
    if split is None:
        return _mask_misparsed(url) or _mask_netloc_text(url)
    scheme, netloc, path, query, fragment = split
    if "://" in netloc + path:  # a URL inside a malformed one (tiered://hot=redis://…)
        return _mask_netloc_text(url)
    misparsed = _mask_misparsed(url)
    if misparsed is not None:
        return misparsed
    original = (netloc, query)
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        if ":" in userinfo:
            user = userinfo.split(":", 1)[0]
            netloc = f"{user}:{MASK}@{host}"
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        masked = [
            (k, MASK if _secret_name(k) else mask_url(v) if "://" in v else v) for k, v in pairs
        ]
        if masked != pairs:
            query = "&".join(f"{quote(k, safe='')}={quote(v, safe=':/*@+,')}" for k, v in masked)
    if (netloc, query) == original:
        return url  # nothing secret: shown exactly as given
    # (not urlunsplit: it drops the "//" of an empty authority, as in tiered://?…)
    return (
        f"{scheme}://{netloc}{path}"
        + (f"?{query}" if query else "")
        + (f"#{fragment}" if fragment else "")
    )


def _mask_netloc_text(url: str) -> str:
    """Last resort for text ``urlsplit`` refuses: mask ``:password@`` after the scheme."""
    return re.sub(r"(://[^/:@]*:)[^@/]*@", lambda m: m.group(1) + MASK + "@", url)


def secrets_of(url: str) -> list[str]:
    """The secret strings in ``url`` (password, secret query values, nested tier URLs'),
    each also in its percent-decoded form, longest first."""
    whole, pieces = _secrets(url)
    return sorted(whole | pieces, key=len, reverse=True)


def _secrets(url: str) -> tuple[set[str], set[str]]:
    """``url``'s whole secrets, and the pieces :func:`urlsplit` cut a password with an
    unencoded ``/ ? # [ ]`` into (none a whole secret), each with its decoded form."""
    found: set[str] = set()
    pieces: set[str] = set()
    if not isinstance(url, str):
        return found, pieces
    if "://" not in url:
        for match in _CONNINFO_PASSWORD.finditer(url):
            found.add(match.group(2).strip("'"))
        for match in _BARE_USERINFO.finditer(url):  # (its part after a mistyped scheme too)
            found.update({match.group(2), match.group(2).rpartition(":")[2]})
    else:
        misparsed = misparsed_password(url)
        if misparsed is not None:
            # with the pieces urlsplit cut it into (a parser's message may quote one:
            # "Port could not be cast to integer value as 'p'")
            found.add(misparsed)
            pieces.update(p for p in re.split(r"[/?#\[\]]", misparsed) if len(p) > 1)
        split = _split(url)
        if split is not None:
            netloc, query = split[1], split[3]
            if "@" in netloc:
                userinfo = netloc.rsplit("@", 1)[0]
                if ":" in userinfo:
                    found.add(userinfo.split(":", 1)[1])
            for key, value in parse_qsl(query, keep_blank_values=True):
                if _secret_name(key):
                    found.add(value)
                elif "://" in value:
                    found.update(secrets_of(value))
    found |= {unquote(s) for s in found}
    pieces = ({unquote(s) for s in pieces} | pieces) - found
    found.discard("")
    pieces.discard("")
    return found, pieces


def scrub(text: str, url: str) -> str:
    """``text`` with every secret of ``url`` (and ``url`` itself) masked.

    A short secret is masked wherever it stands on its own, not inside a word: a
    password ``ss`` leaves "password" whole (one of four characters or more is masked
    inside words too), never a quoted ``'ss'``, ``:ss@`` or ``ss.``. A
    *piece* of a password with an unencoded ``/ ? # [ ]`` (what a parser quotes of
    ``u:p#ss@db``: ``'p'``, ``ss@db/x``) is masked where it is part of a URL or quoted
    (next to a character other than a letter, digit or space), not where it is a word
    of the sentence ("the password ss in …" keeps its "ss" — the text never held the
    password as typed, which is masked everywhere).
    """
    text = text.replace(url, mask_url(url)) if url else text
    whole, pieces = _secrets(url)
    for secret in sorted(whole | pieces, key=len, reverse=True):
        text = _mask_standalone(text, secret, piece=secret in pieces)
    return text


#: a whole secret this long is masked wherever it occurs, inside a word too: a
#: driver may glue a value to the text around it, and a word of the message that
#: holds four characters of the password in a row is rare enough to be given up
_MASKED_EVERYWHERE = 4


def _mask_standalone(text: str, secret: str, *, piece: bool) -> str:
    """``text`` with the occurrences of ``secret`` not inside a word masked (of a
    ``piece``, not a word of a sentence either); a whole secret of
    :data:`_MASKED_EVERYWHERE` characters or more, every occurrence."""
    if not piece and len(secret) >= _MASKED_EVERYWHERE:
        return text.replace(secret, MASK)
    before = r"(?<!\w)" if re.match(r"\w", secret) else ""
    after = r"(?!\w)" if re.match(r"\w", secret[-1]) else ""
    pattern = re.compile(before + re.escape(secret) + after)

    def replace(match: re.Match[str]) -> str:
        if piece and _a_word_of_prose(text, match.start(), match.end()):
            return match.group(0)
        return MASK

    return pattern.sub(replace, text)


#: what may follow a word of a sentence: a space, the end, or a stop then either
_PROSE_END = re.compile(r"[.,;!]?(?:\s|$)")


def _a_word_of_prose(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` is a word of a sentence: after a space (or at the
    start), before a space, a stop or the end; not quoted, bracketed nor in a URL, nor
    the whole text (a driver's message may be nothing but the value it refused)."""
    if start == 0 and end == len(text):
        return False
    return (start == 0 or text[start - 1].isspace()) and bool(_PROSE_END.match(text, end))


def one_line(text: str) -> str:
    """A driver's (multi-line) message as one line: whitespace runs become one space."""
    return " ".join(str(text).split())
