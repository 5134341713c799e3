# the C check built from native/appendrun.c (setup.py): see statekeeper.codec.appends
from collections.abc import Callable
from typing import Any

def append_run(
    prefix: bytes,
    record_type: str,
    events: list[Any],
    link: bytes,
    loads: Callable[[bytes], Any],
    /,
) -> tuple[str, list[Any], bytes] | Any | None: ...
