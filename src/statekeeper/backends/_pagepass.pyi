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
def heads_scan(
    db_fd: int,
    wal_fd: int,
    frames: array.array[int] | None,
    root: int,
    page_size: int,
    usable: int,
    pages: int,
    /,
) -> tuple[list[str], list[int], list[bytes], int] | None: ...
def tree_pages(
    db_fd: int,
    wal_fd: int,
    frames: array.array[int] | None,
    root: int,
    page_size: int,
    usable: int,
    pages: int,
    plan: bytearray,
    value: int,
    /,
) -> int | None: ...
def tree_outline(
    db_fd: int,
    wal_fd: int,
    frames: array.array[int] | None,
    root: int,
    page_size: int,
    usable: int,
    pages: int,
    plan: bytearray,
    value: int,
    /,
) -> tuple[int, bytes] | None: ...
def heads_packed(
    db_fd: int,
    wal_fd: int,
    frames: array.array[int] | None,
    root: int,
    page_size: int,
    usable: int,
    pages: int,
    before: bytes,
    after: bytes,
    prefix: bytes,
    /,
) -> tuple[bytes, int, int, list[tuple[str, int]]] | None: ...
