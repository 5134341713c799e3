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

__all__ = ["MASK", "mask_url", "one_line", "scrub", "secrets_of"]

MASK = "***"

#: query options whose value is a secret (matched as a substring of the lower-cased name)
_SECRET_NAMES = ("password", "passwd", "secret", "token", "credential", "api_key", "apikey")
_CONNINFO_PASSWORD = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def _secret_name(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in _SECRET_NAMES)


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
        return _CONNINFO_PASSWORD.sub(lambda m: m.group(1) + MASK, url)
    split = _split(url)
    if split is None:
        return _mask_netloc_text(url)
    scheme, netloc, path, query, fragment = split
    if "://" in netloc + path:  # a URL inside a malformed one (tiered://hot=redis://…)
        return _mask_netloc_text(url)
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
    found: set[str] = set()
    if not isinstance(url, str):
        return []
    if "://" not in url:
        for match in _CONNINFO_PASSWORD.finditer(url):
            found.add(match.group(2).strip("'"))
    else:
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
    found.discard("")
    return sorted(found, key=len, reverse=True)


def scrub(text: str, url: str) -> str:
    """``text`` with every secret of ``url`` (and ``url`` itself) masked."""
    text = text.replace(url, mask_url(url)) if url else text
    for secret in secrets_of(url):
        text = text.replace(secret, MASK)
    return text


def one_line(text: str) -> str:
    """A driver's (multi-line) message as one line: whitespace runs become one space."""
    return " ".join(str(text).split())
