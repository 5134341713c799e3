"""codec/pipeline.py and codec/keys.py split into modules of one job each (issue 11):
every name they defined is still there, the very object of its new home, and the
codec's methods come from the part that does that job."""

import importlib

import pytest

from statekeeper.codec import keys, pipeline
from statekeeper.codec.pipeline import Codec

#: the names pipeline.py defined before the split, by the module that holds each now
PIPELINE = {
    "appends": "FEW_APPENDS _APPEND_BODY _APPEND_HEAD _append_few _append_one _append_run"
    " _digest _join",
    "compression": "_MAX_BODY",
    "heads": "_head_message _unkeyed_tag",
    "layout": "BLAKE3_FROM CHAIN_BROKEN CHECKSUMS COMPRESS_NONE COMPRESS_ZSTD"
    " COMPRESS_ZSTD_DICT DEFAULT_CHECKSUM FLAG_BLAKE3 FLAG_DATA_KEY FLAG_LEGACY_LINK Header"
    " Opened Sealed VERSION ZERO_LINK _CHECKSUM_NAMES _COMPRESSIONS _COMPRESSION_NAMES _FP"
    " _GCM_TAG _JSON_TAG _MSGPACK_TAG _NONCE _RESERVED _head_seq _ident_head _new_tuple"
    " _orjson_loads _seq_ts",
    "links": "_B3_JSON _CANON _HASHES _Hash _Hasher _PLAIN_ANY _PLAIN_JSON _SHA_JSON _link"
    " _names _plain_link _prefixed _stored_checksum identity legacy_checksum",
    "opening": "_invalid_tag",
    "options": "_Local _zstd",
    "renamed": "_renamed_keywords",
}
#: the names keys.py defined before the split, by the module that holds each now
KEYS = {
    "subkeys": "DerivedKey KEY_BYTES _ID _aesgcm _check_id _derive _forgettable _material"
    " _shown _wrap_aad fingerprint_of generate_key",
    "keys": "ENV_ACTIVE ENV_KEYS ENV_KEY_FILE Keyring _add_key add_key_to_file",
}


@pytest.mark.parametrize(
    ("facade", "homes"), [(pipeline, PIPELINE), (keys, KEYS)], ids=["pipeline", "keys"]
)
def test_every_name_of_the_unsplit_module_is_its_new_homes_object(
    facade: object, homes: dict[str, str]
) -> None:
    for home, names in homes.items():
        module = importlib.import_module(f"statekeeper.codec.{home}")
        for name in names.split():
            assert getattr(facade, name) is getattr(module, name), (home, name)


def test_the_codec_is_assembled_from_its_stages() -> None:
    """Each public method is defined by the part named for its job."""
    where = {
        "seal": "sealing",
        "plain_sealer": "sealing",
        "compressed_sealer": "sealing",
        "open": "opening",
        "header": "opening",
        "decode_chain": "decoding",
        "decode_view": "decoding",
        "check_head": "heads",
        "witness_digest": "heads",
        "serialize": "options",
        "_compress": "compression",
        "migrating": "pipeline",
    }
    for method, part in where.items():
        owner = next(k for k in Codec.__mro__ if method in vars(k))
        assert owner.__module__ == f"statekeeper.codec.{part}", method
    assert Codec.__module__ == "statekeeper.codec.pipeline"
    assert keys.Keyring.__module__ == "statekeeper.codec.keys"
