"""Security: keyrings for encryption at rest, key rotation (rekey) and witness files.

See ``docs/security.md`` for the threat model: what is protected with and without a
key, key management, rotation and witness files.
"""

from ..codec.keys import KEY_BYTES, DerivedKey, Keyring, generate_key
from .rekey import RekeyProgress, RekeyStats, key_usage, rekey, rekey_agent
from .witness import WitnessProblem, WitnessReport, check_witness, export_witness, load_witness

__all__ = [
    "KEY_BYTES",
    "DerivedKey",
    "Keyring",
    "RekeyProgress",
    "RekeyStats",
    "WitnessProblem",
    "WitnessReport",
    "check_witness",
    "export_witness",
    "generate_key",
    "key_usage",
    "load_witness",
    "rekey",
    "rekey_agent",
]
