"""Master keys and their subkeys: a master key's id and material checked, the
subkeys HKDF-SHA256 derives from it (:class:`DerivedKey`: record encryption,
head tags, witnesses, idempotency keys, data-key wrapping, its fingerprint), and
new random keys (see :mod:`statekeeper.codec.keys`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
from typing import Any

from ..errors import BackendUnavailable, ConfigurationError, DecryptionError

#: length of a master key (AES-256)
KEY_BYTES = 32

_ID = re.compile(r"^[A-Za-z0-9._:@+-]{1,64}$")


def generate_key() -> str:
    """A new random 32-byte key, base64-encoded (the form key files and env vars use)."""
    return base64.b64encode(os.urandom(KEY_BYTES)).decode("ascii")


def _shown(key_id: object) -> str:
    """How an error names a key id given in configuration: quoted, unless it may be a
    key itself — a key pasted where its id goes (``STATEKEEPER_KEYS=<base64>`` without
    ``k1=``, ``$STATEKEEPER_ACTIVE_KEY`` set to the key): an invalid id, or one of 40+
    characters, is described by its length only, never shown."""
    if isinstance(key_id, str) and _ID.match(key_id) and len(key_id) < 40:
        return repr(key_id)
    length = f"{len(key_id)} characters" if isinstance(key_id, str) else type(key_id).__name__
    return f"<{length}: not shown, it may be a key>"


def _check_id(key_id: object) -> str:
    if not isinstance(key_id, str) or not _ID.match(key_id):
        raise ConfigurationError(
            f"invalid key id {_shown(key_id)}: 1-64 characters from A-Z a-z 0-9 . _ : @ + -"
        )
    return key_id


def _material(key_id: str, value: object) -> bytes:
    """32 raw bytes from bytes or a base64 (standard or URL-safe) string."""
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            padded = text + "=" * (-len(text) % 4)
            raw = base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
        except (binascii.Error, ValueError):
            raise ConfigurationError(f"key {_shown(key_id)} is not valid base64") from None
    else:
        raise ConfigurationError(f"key {_shown(key_id)} must be bytes or a base64 string")
    if len(raw) != KEY_BYTES:
        raise ConfigurationError(f"key {_shown(key_id)} must be {KEY_BYTES} bytes, not {len(raw)}")
    return raw


def _wrap_aad(agent_id: str, family: str | None = None) -> bytes:
    if family is None:  # a legacy entry (keyed by agent id alone)
        return b"sk-data-key/1" + agent_id.encode("utf-8", "surrogatepass")
    name = (family, agent_id)
    return b"sk-data-key/2" + "\x00".join(name).encode("utf-8", "surrogatepass")


def _derive(master: bytes, purpose: bytes, length: int = 32) -> bytes:
    try:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise BackendUnavailable(
            "encryption needs the cryptography package: pip install cryptography"
        ) from exc

    return HKDF(
        algorithm=hashes.SHA256(), length=length, salt=None, info=b"statekeeper/v1 " + purpose
    ).derive(master)


def _forgettable(agent_id: str) -> None:
    """Refuse (:class:`~statekeeper.errors.InvalidAgentId`) to forget one of a store's
    own streams (an id starting with ``\\x01``: the audit log, the legal holds): the
    audit log is sealed with the data key of its id alone, the same id in every store,
    so destroying it made every audit log of the vault unreadable (``audit verify``:
    "agent '\\x01sk-audit/log' was forgotten"), not one store's."""
    if isinstance(agent_id, str) and agent_id[:1] == "\x01":
        from ..errors import InvalidAgentId

        raise InvalidAgentId(
            f"cannot forget {agent_id!r}: an id starting with '\\x01' is one of a store's"
            " own streams (its audit log, its legal holds), not an agent (the audit log's"
            " key is shared by every store of the key vault)"
        )


def fingerprint_of(master: bytes) -> bytes:
    """The 4-byte fingerprint records sealed with key material ``master`` carry
    (:attr:`DerivedKey.fingerprint`), without deriving its other subkeys."""
    return _derive(master, b"key fingerprint", 4)


def _aesgcm(key: bytes) -> Any:
    # imported on first use: ``import statekeeper`` does not load cryptography
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise BackendUnavailable(
            "encryption needs the cryptography package: pip install cryptography"
        ) from exc
    return AESGCM(key)


class DerivedKey:
    """The subkeys of one master key. Holds key material: its ``repr`` shows the id only."""

    __slots__ = ("_head", "_idempotency", "_witness", "_wrap", "aead", "fingerprint", "id")

    #: ``_head``: HMAC-SHA256 keyed with the stream-head subkey, never fed: each head
    #: tag copies it (the key's two padded blocks hashed once, not per tag: 2.8 against
    #: 4.4 us a tag, docs/benchmarks.md "restorecheck"); copying reads it only. Kept as
    #: OpenSSL's HMAC object itself where ``hmac`` has one (its ``copy``, ``update`` and
    #: ``digest`` in C, not through ``hmac.HMAC``'s Python methods: docs/benchmarks.md
    #: "restore2")

    def __init__(self, key_id: str, master: bytes) -> None:
        self.id = key_id
        self.aead = _aesgcm(_derive(master, b"record encryption"))
        head = hmac.new(_derive(master, b"stream head"), digestmod=hashlib.sha256)
        self._head: Any = getattr(head, "_hmac", None) or head
        self._witness = _derive(master, b"witness")
        self._idempotency = _derive(master, b"idempotency key")
        self.fingerprint = fingerprint_of(master)
        self._wrap = _aesgcm(_derive(master, b"data key wrapping"))

    def wrap(self, agent_id: str, data_key: bytes, family: str | None = None) -> bytes:
        """``data_key`` wrapped for ``agent_id`` (of key family ``family``; None: a
        legacy entry) (nonce + AES-256-GCM ciphertext)."""
        nonce = os.urandom(12)
        aad = _wrap_aad(agent_id, family)
        return nonce + bytes(self._wrap.encrypt(nonce, data_key, aad))

    def unwrap(self, agent_id: str, wrapped: bytes, family: str | None = None) -> bytes:
        """The data key :meth:`wrap` wrapped for ``agent_id`` (and ``family``); raises
        :class:`~statekeeper.errors.DecryptionError` when it does not authenticate."""
        from cryptography.exceptions import InvalidTag

        aad = _wrap_aad(agent_id, family)
        try:
            return bytes(self._wrap.decrypt(wrapped[:12], wrapped[12:], aad))
        except (InvalidTag, ValueError):
            raise DecryptionError(
                agent_id,
                None,
                self.id,
                f"the agent's data key does not unwrap with master key {self.id!r}"
                " (wrong key material, or a vault entry moved from another agent)",
            ) from None

    def __repr__(self) -> str:
        return f"DerivedKey(id={self.id!r}, material=<redacted>)"

    def head_mac(self, message: bytes) -> bytes:
        """HMAC-SHA256 of a stream head."""
        mac = self._head.copy()
        mac.update(message)
        digest: bytes = mac.digest()
        return digest

    def witness_mac(self, message: bytes) -> bytes:
        """HMAC-SHA256 of a witness entry."""
        return hmac.new(self._witness, message, hashlib.sha256).digest()

    def idempotency_mac(self, message: bytes) -> bytes:
        """HMAC-SHA256 of an idempotency key (what the backend stores instead of it)."""
        return hmac.new(self._idempotency, message, hashlib.sha256).digest()

    def label_mac(self, message: bytes) -> bytes:
        """HMAC-SHA256 of a value published in place of a secret one (a state name as a
        metric label), under a subkey of its own: HKDF of the witness subkey, so the
        published hashes reveal nothing of the other subkeys, and without the key a
        hash cannot be matched to the name it stands for."""
        key = _derive(self._witness, b"published label")
        return hmac.new(key, message, hashlib.sha256).digest()

    def __reduce__(self) -> Any:  # key material must not travel by pickle by accident
        raise TypeError("keys cannot be pickled")
