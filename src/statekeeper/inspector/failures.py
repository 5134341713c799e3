"""What a page says when a store call fails: its HTTP status, its title and message.

A user's mistake or a store's refusal is a 4xx naming it (access denied, no such agent,
a bad parameter, compacted history, a key that is missing or is not the one the store
was written with); only what is left is a 500 named by its error type.
"""

from __future__ import annotations

from ..errors import (
    AccessDenied,
    AgentForgotten,
    AgentLost,
    AgentNotFound,
    CapabilityUnsupported,
    ConfigurationError,
    DecryptionError,
    HistoryCompacted,
    InvalidArgument,
    KeyNotFound,
)

__all__ = ["describe"]

_KEY_FILE = "--key-file or STATEKEEPER_KEY_FILE"


def describe(exc: Exception) -> tuple[int, str, str]:
    """``(status, title, message)`` of the page answering ``exc`` (the message is not
    yet scrubbed of the store URL's secrets: the caller does it)."""
    if isinstance(exc, AccessDenied):
        return 403, "Access denied", str(exc)
    if isinstance(exc, AgentNotFound):
        return 404, "Not found", str(exc)
    if isinstance(exc, InvalidArgument | ConfigurationError | CapabilityUnsupported):
        return 400, "Bad request", str(exc)
    if isinstance(exc, AgentLost):  # its data is gone, the rest of the store stays
        return (
            410,
            "Agent data lost",
            f"agent {exc.agent_id!r} lost its stored data: {exc.reason}. Nothing of it can "
            f"be read. Delete it to acknowledge the loss (statekeeper delete "
            f"{exc.agent_id!r}), then save it afresh or restore it from a backup",
        )
    if isinstance(exc, AgentForgotten):  # crypto-shredded on purpose: gone for good
        return (
            410,
            "Agent forgotten",
            f"agent {exc.agent_id!r} was forgotten (crypto-shredded: statekeeper forget): "
            "its data key was destroyed, so none of its records can be read again, here "
            f"or in any copy. Its encrypted records remain until it is deleted "
            f"(statekeeper delete {exc.agent_id!r})",
        )
    if isinstance(exc, HistoryCompacted):  # a seq before the retention base: gone
        return 410, "History compacted", str(exc)
    if isinstance(exc, KeyNotFound):  # not damage: this inspector holds no such key
        return (
            403,
            "Encrypted: key not loaded",
            f"agent {exc.agent_id!r} is encrypted with key {exc.key_id!r}, which this "
            f"inspector was not given (start it with {_KEY_FILE})",
        )
    if isinstance(exc, DecryptionError):  # not damage either: the key given is another
        return (
            403,
            "Encrypted: wrong key",
            f"agent {exc.agent_id!r} cannot be decrypted with key {exc.key_id!r} as this "
            f"inspector was given it: {exc.reason} (start it with the key file the store "
            f"was written with: {_KEY_FILE})",
        )
    return 500, type(exc).__name__, str(exc)
