/*
 * statekeeper.backends._pagepass: a page backup's per-chunk pass over a SQLite
 * store's image, in C. Its one job, in two calls: ``page_pass`` does what
 * statekeeper/backends/sqlite/pagepass.py's ``python_pass`` does (the reference: read
 * that first; the same arguments, the same bytes out: each page's unused bytes zeroed
 * and each page digested), and ``zero_run_frame(_into)`` leaves the chunk's zero runs
 * out of its zstd frame (RLE blocks; the other bytes raw: no compression).
 *
 * Why native: a page backup of the 100,000-agent bench store (188 MB, 91,919 pages of
 * 2 KiB) spent ~0.045 CPU-s in the Python loop that zeroes each page's unused bytes
 * and ~0.033 in the one that digests each page, and ~0.08 in zstd, of ~0.42 CPU-s a
 * backup against ``cp``'s ~0.10 s of wall (docs/benchmarks.md, "backupsix": "What
 * 1.7x would take"; "backupc" for what this pass measured: the page pass's
 * instructions -72 %). Here the pass runs without the GIL.
 *
 * Every offset is checked against the page it is in: a malformed page (a freeblock
 * list that runs past the page, a cell count past its end, any byte at all) is
 * handled as the Python pass handles it, never read or written out of its page.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define XXH_INLINE_ALL
#include "xxhash/xxhash.h"
#include "headscan.h"

/* what becomes of a page: sqlite_pages.py's plan values */
#define DROP 0
#define BTREE 1
#define OVERFLOW 2
#define EMPTY_TABLE 3
#define KEPT 5

static int
tree_type(unsigned char t)
{
    return t == 0x02 || t == 0x05 || t == 0x0A || t == 0x0D;
}

static unsigned
be16(const unsigned char *p)
{
    return ((unsigned)p[0] << 8) | p[1];
}

/* the freeblocks' bodies of the b-tree page at ``page`` zeroed (its list from
 * ``block``), each within the usable bytes; the list's order ends it */
static void
clean_freeblocks(unsigned char *page, Py_ssize_t block, Py_ssize_t usable)
{
    while (block) {
        if (block + 4 > usable)
            break;
        unsigned char *start = page + block;
        Py_ssize_t following = be16(start);
        Py_ssize_t length = be16(start + 2);
        if (length > 4 && block + length <= usable)
            memset(start + 4, 0, (size_t)(length - 4));
        if (following <= block)
            break;
        block = following;
    }
}

/* the pages [start, count) of ``buf`` (page ``first`` at offset 0) filtered by the
 * plan, each digested into ``digests`` (if not NULL); -1, or the index of the first
 * page that needs the overflow pages' sizes (dbstat, read by the caller) */
static Py_ssize_t
run(unsigned char *buf, const unsigned char *plan, const unsigned char *unused,
    Py_ssize_t unused_count, unsigned char *digests, Py_ssize_t first, Py_ssize_t start,
    Py_ssize_t count, Py_ssize_t size, Py_ssize_t usable, int read_overflow,
    unsigned long long seed)
{
    for (Py_ssize_t i = start; i < count; i++) {
        Py_ssize_t pageno = first + i;
        unsigned char *page = buf + i * size;
        int what = plan[pageno];
        int done = 0;
        if (what == KEPT || what == BTREE) {
            unsigned char *h = pageno == 1 ? page + 100 : page;
            unsigned char page_type = h[0];
            if (tree_type(page_type)) {
                Py_ssize_t block = be16(h + 1);
                Py_ssize_t cells = be16(h + 3);
                Py_ssize_t content = be16(h + 5);
                Py_ssize_t gap = (h - page) + (page_type < 0x06 ? 12 : 8) + 2 * cells;
                Py_ssize_t end = content ? content : 65536;
                if (gap < end && end <= usable)
                    memset(page + gap, 0, (size_t)(end - gap));
                if (block)
                    clean_freeblocks(page, block, usable);
                if (pageno == 1) { /* no free-page list, the rollback journal */
                    page[18] = page[19] = 1;
                    memset(page + 32, 0, 8);
                }
                done = 1;
            }
            else if (what == BTREE) {
                done = 1; /* dbstat says a b-tree page, yet it does not read as one */
            }
            else if (page_type || read_overflow) {
                what = DROP;
            }
            else {
                return i; /* an overflow page: how much of it is used, dbstat says */
            }
        }
        if (!done) {
            if (what == OVERFLOW) {
                uint32_t spare = 0;
                if (unused != NULL && pageno < unused_count)
                    memcpy(&spare, unused + 4 * pageno, 4);
                if (spare > 0 && (Py_ssize_t)spare <= usable - 4)
                    memset(page + usable - spare, 0, spare);
            }
            else if (what == DROP) {
                memset(page, 0, (size_t)size);
            }
            else { /* a dropped tree's root: an empty leaf */
                Py_ssize_t content = usable < 65536 ? usable : 0;
                memset(page, 0, (size_t)size);
                page[0] = what == EMPTY_TABLE ? 0x0D : 0x0A;
                page[5] = (unsigned char)(content >> 8);
                page[6] = (unsigned char)(content & 0xFF);
            }
        }
        if (digests != NULL) {
            XXH128_hash_t hash = XXH3_128bits_withSeed(page, (size_t)size, seed);
            XXH128_canonicalFromHash((XXH128_canonical_t *)(digests + 16 * i), hash);
        }
    }
    return -1;
}

PyDoc_STRVAR(page_pass_doc,
"page_pass(buf, plan, unused, digests, first, start, count, page_size, usable,\n"
"          read_overflow, seed) -> int\n\n"
"sqlite_pagepass.python_pass, in C (the GIL released): the same arguments, the same\n"
"bytes written, the same result.");

static PyObject *
page_pass(PyObject *self, PyObject *args)
{
    Py_buffer buf = {0}, plan = {0}, unused = {0}, digests = {0};
    PyObject *unused_obj, *digests_obj;
    Py_ssize_t first, start, count, size, usable;
    int read_overflow;
    unsigned long long seed;
    Py_ssize_t result = -2;

    if (!PyArg_ParseTuple(args, "w*y*OOnnnnnpK", &buf, &plan, &unused_obj, &digests_obj,
                          &first, &start, &count, &size, &usable, &read_overflow, &seed))
        return NULL;
    if (unused_obj != Py_None &&
        PyObject_GetBuffer(unused_obj, &unused, PyBUF_SIMPLE) < 0)
        goto done;
    if (digests_obj != Py_None &&
        PyObject_GetBuffer(digests_obj, &digests, PyBUF_WRITABLE) < 0)
        goto done;
    if (size < 512 || size > 65536 || (size & (size - 1)) || usable < 1 || usable > size) {
        PyErr_SetString(PyExc_ValueError, "page_pass: a page size of 512 to 65536 bytes, a"
                        " power of two, with 1 to page_size usable bytes");
        goto done;
    }
    if (first < 1 || start < 0 || count < 0 || start > count ||
        count > buf.len / size || first > plan.len - count) {
        PyErr_SetString(PyExc_ValueError, "page_pass: the pages are not all in the buffer"
                        " and the plan");
        goto done;
    }
    if (digests.obj != NULL && digests.len < 16 * count) {
        PyErr_SetString(PyExc_ValueError, "page_pass: the digests' buffer is too short");
        goto done;
    }
    {
        unsigned char *b = buf.buf;
        const unsigned char *p = plan.buf;
        const unsigned char *u = unused.obj != NULL ? unused.buf : NULL;
        Py_ssize_t ucount = unused.obj != NULL ? unused.len / 4 : 0;
        unsigned char *d = digests.obj != NULL ? digests.buf : NULL;
        Py_BEGIN_ALLOW_THREADS
        result = run(b, p, u, ucount, d, first, start, count, size, usable, read_overflow,
                     seed);
        Py_END_ALLOW_THREADS
    }
done:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&plan);
    if (unused.obj != NULL)
        PyBuffer_Release(&unused);
    if (digests.obj != NULL)
        PyBuffer_Release(&digests);
    if (result == -2)
        return NULL;
    return PyLong_FromSsize_t(result);
}

/* zstd's frame format (RFC 8878): a frame of raw and RLE blocks only */
#define BLOCK_MAX (128 * 1024) /* a block's largest size (the window below) */
#define ZERO_RUN 32            /* zeros shorter than this stay in a raw block */

static unsigned char *
block_head(unsigned char *out, int last, int type, size_t size)
{
    uint32_t head = (uint32_t)last | ((uint32_t)type << 1) | ((uint32_t)size << 3);
    out[0] = head & 0xFF;
    out[1] = (head >> 8) & 0xFF;
    out[2] = (head >> 16) & 0xFF;
    return out + 3;
}

/* the length of the run of zeros at ``p`` (at most ``n``) */
static size_t
zeros_at(const unsigned char *p, size_t n)
{
    size_t i = 0;
    while (i + 8 <= n) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        if (w)
            break;
        i += 8;
    }
    while (i < n && !p[i])
        i++;
    return i;
}

/* whether the 16 bytes at ``p`` are all zeros */
static int
zero16(const unsigned char *p)
{
    uint64_t a, b;
    memcpy(&a, p, 8);
    memcpy(&b, p + 8, 8);
    return !(a | b);
}

/* the first run of ZERO_RUN zeros or more in ``in[from:n]`` (``from`` is 0 or just
 * past such a run: ``in[from]`` is not a zero), as long as it goes: its start, and its length in ``*len``; n
 * and 0 when there is none. Such a run holds the 16 bytes at a multiple of 16 in
 * whole (its first multiple of 16 is at most 15 bytes in), so only those are looked
 * at, each with two 8-byte loads, and a run is measured only around one all zeros:
 * memchr from each zero byte cost 136 M instructions of the 100,000-agent bench
 * image's 188 MB (docs/benchmarks.md, "backup8"), the pages' records being full of
 * short zero runs. */
static size_t
next_run(const unsigned char *in, size_t from, size_t n, size_t *len)
{
    size_t i = (from + 15) & ~(size_t)15;
    while (i + 16 <= n) {
        if (!zero16(in + i)) {
            i += 16;
            continue;
        }
        size_t start = i;
        while (start > from && !in[start - 1])
            start--;
        size_t end = i + 16 + zeros_at(in + i + 16, n - i - 16);
        if (end - start >= ZERO_RUN) {
            *len = end - start;
            return start;
        }
        i = (end + 15) & ~(size_t)15; /* (in[end] is not a zero) */
    }
    *len = 0;
    return n;
}

/* ``in``'s ``n`` bytes as one zstd frame into ``out``; its length: every run of
 * ZERO_RUN zeros or more (as long as it goes) as RLE blocks, the bytes between in raw
 * blocks, each block at most BLOCK_MAX */
static size_t
zero_run_frame_into(const unsigned char *in, size_t n, unsigned char *out)
{
    unsigned char *o = out;
    static const unsigned char magic[4] = {0x28, 0xB5, 0x2F, 0xFD};
    memcpy(o, magic, 4);
    o[4] = 0xC0; /* the content size in 8 bytes, a window descriptor, no checksum */
    o[5] = 0x38; /* a window of 128 KiB: no block refers to another */
    for (int b = 0; b < 8; b++)
        o[6 + b] = (unsigned char)(((uint64_t)n >> (8 * b)) & 0xFF);
    o += 14;
    if (n == 0)
        return (size_t)(block_head(o, 1, 0, 0) - out);
    size_t raw = 0; /* where the pending raw bytes start */
    while (raw < n) {
        size_t run;
        size_t at = next_run(in, raw, n, &run);
        while (raw < at) { /* the bytes before the run, raw */
            size_t size = at - raw < BLOCK_MAX ? at - raw : BLOCK_MAX;
            o = block_head(o, raw + size == n, 0, size);
            memcpy(o, in + raw, size);
            o += size;
            raw += size;
        }
        while (run) { /* the run, as RLE blocks of zeros */
            size_t size = run < BLOCK_MAX ? run : BLOCK_MAX;
            o = block_head(o, at + size == n, 1, size);
            *o++ = 0;
            at += size;
            run -= size;
        }
        raw = at;
    }
    return (size_t)(o - out);
}

/* the most bytes a frame of ``n`` bytes takes: raw blocks of 1 byte or more between
 * runs of ZERO_RUN zeros or more (each run 4 bytes), or of BLOCK_MAX bytes */
static size_t
frame_bound(size_t n)
{
    return 14 + n + 3 * (n / (ZERO_RUN + 1) + n / BLOCK_MAX + 2) + 4;
}

PyDoc_STRVAR(zero_run_frame_doc,
"zero_run_frame(data) -> bytes\n\n"
"``data`` as one zstd frame that any zstd decoder reads (its content size in its\n"
"header): its runs of 32 zeros or more as RLE blocks, every other byte in raw\n"
"blocks; nothing compressed (the GIL released).");

static PyObject *
zero_run_frame(PyObject *self, PyObject *arg)
{
    Py_buffer in;
    if (PyObject_GetBuffer(arg, &in, PyBUF_SIMPLE) < 0)
        return NULL;
    size_t n = (size_t)in.len;
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)frame_bound(n));
    if (out == NULL) {
        PyBuffer_Release(&in);
        return NULL;
    }
    size_t size;
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS
    size = zero_run_frame_into(in.buf, n, o);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&in);
    if (_PyBytes_Resize(&out, (Py_ssize_t)size) < 0)
        return NULL;
    return out;
}

PyDoc_STRVAR(zero_run_frame_into_doc,
"zero_run_frame_into(data, out) -> int\n\n"
"zero_run_frame(data) written into the writable buffer ``out`` (reused: no new\n"
"buffer faulted in per chunk), which must hold len(data) + len(data) // 8 + 64\n"
"bytes; the frame's length.");

static PyObject *
zero_run_frame_into_py(PyObject *self, PyObject *args)
{
    Py_buffer in, out;
    size_t size = 0;
    if (!PyArg_ParseTuple(args, "y*w*", &in, &out))
        return NULL;
    int fits = (size_t)out.len >= frame_bound((size_t)in.len);
    if (fits) {
        Py_BEGIN_ALLOW_THREADS
        size = zero_run_frame_into(in.buf, (size_t)in.len, out.buf);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    if (!fits) {
        PyErr_SetString(PyExc_ValueError, "zero_run_frame_into: the output buffer is too short");
        return NULL;
    }
    return PyLong_FromSize_t(size);
}

static PyMethodDef methods[] = {
    {"page_pass", page_pass, METH_VARARGS, page_pass_doc},
    {"zero_run_frame", zero_run_frame, METH_O, zero_run_frame_doc},
    {"zero_run_frame_into", zero_run_frame_into_py, METH_VARARGS, zero_run_frame_into_doc},
    {"heads_scan", heads_scan, METH_VARARGS, heads_scan_doc},
    {"tree_pages", tree_pages, METH_VARARGS, tree_pages_doc},
    {"tree_outline", tree_outline, METH_VARARGS, tree_outline_doc},
    {"heads_packed", heads_packed, METH_VARARGS, heads_packed_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "statekeeper.backends._pagepass",
    "A page backup's per-page pass in C (see statekeeper.backends.sqlite.pagepass).",
    -1,
    methods,
};

PyMODINIT_FUNC
PyInit__pagepass(void)
{
    return PyModule_Create(&module);
}
