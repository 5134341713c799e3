# the C pass built from native/pagepass.c (setup.py): see sqlite_pagepass.python_pass
import array

def page_pass(
    buf: memoryview,
    plan: bytes | bytearray,
    unused: array.array[int] | memoryview | bytes | bytearray | None,
    digests: bytearray | memoryview | None,
    first: int,
    start: int,
    count: int,
    page_size: int,
    usable: int,
    read_overflow: bool,
    seed: int,
    /,
) -> int: ...
def zero_run_frame(data: bytes | bytearray | memoryview, /) -> bytes: ...
def zero_run_frame_into(data: bytes | bytearray | memoryview, out: bytearray, /) -> int: ...
