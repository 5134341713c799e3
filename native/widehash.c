/* BLAKE3 of ``head || body`` at the SIMD unit's full width, without joining the two.
 *
 * statekeeper.codec._widehash.hash(head, body) -> 32 bytes, equal to
 * blake3.blake3(head + body).digest() for every input (tests/codec/test_widehash.py holds
 * the two to the same bytes; the codec uses the ``blake3`` package where this module is
 * not built, or with STATEKEEPER_PURE=1).
 *
 * Why: a cold load hashes a snapshot's link input (a ~40-byte head and the stored body,
 * 32.6 KB for the benchmark's 100-message chat). The incremental hasher the ``blake3``
 * package runs splits an input of 31.9 chunks into subtrees of 16, 8, 4, 2 and 1 chunks
 * (each subtree must be a power of two, aligned) and hashes each with a narrower SIMD
 * path: 9.8 us of CPU on this machine's AVX-512, against 5.7 us for 32 whole chunks
 * (docs/benchmarks.md, "cold4"). The BLAKE3 tree is fixed by the input's length, not by
 * the order its nodes are computed in, so here every whole chunk but the last is hashed
 * in rounds of the SIMD degree's lanes (the last round filled with lanes whose output is
 * dropped, when that costs less), the last chunk alone, then each level of parents in
 * one hash_many call: the left-balanced tree of the specification, pairing adjacent
 * chaining values level by level and carrying an odd one up unchanged. The head and
 * body are read in place: only the chunk that spans both and the last chunk are copied
 * (1 KiB each at most).
 *
 * The compression functions are the BLAKE3 team's C implementation (native/blake3,
 * CC0 / Apache-2.0), dispatched at run time by CPU feature as there.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "blake3/blake3_impl.h"

#define CHUNK BLAKE3_CHUNK_LEN
#define BLOCK BLAKE3_BLOCK_LEN
#define OUT BLAKE3_OUT_LEN
/* from this many chunks (~11 us at full width) the hash runs with the GIL released */
#define GIL_FROM_CHUNKS 64
#define STACK_CHUNKS 128

static const uint8_t zero_chunk[CHUNK];

/* ``count`` whole chunks rounded up to a multiple of ``degree`` lanes when a full round
 * costs less than hash_many's narrower paths for the rest (``r`` chunks: a round of
 * degree/2 lanes, one of degree/4, then one lane at a time). Measured on AVX-512
 * (degree 16, CPU per hash, docs/benchmarks.md "cold4"): a padded round pays from r = 9
 * and at r = 7; at r = 8 (one AVX2 round) and r <= 6 it costs more. Parents are never
 * padded (one block each: padding measured no faster). */
static size_t padded(size_t count, size_t degree) {
    size_t r = count % degree, half = degree / 2;
    return r && r + 1 >= half && r != half ? count + degree - r : count;
}

/* bytes [at, at + len) of head || body into out */
static void gather(const uint8_t *head, size_t hlen, const uint8_t *body, size_t at,
                   size_t len, uint8_t *out) {
    if (at < hlen) {
        size_t take = hlen - at < len ? hlen - at : len;
        memcpy(out, head + at, take);
        out += take;
        len -= take;
        at = hlen;
    }
    if (len) memcpy(out, body + (at - hlen), len);
}

/* the chaining value of the last chunk (``len`` bytes, 1..CHUNK, at ``data``) */
static void last_chunk_cv(const uint8_t *data, size_t len, uint64_t counter, uint8_t flags,
                          uint32_t cv[8]) {
    size_t blocks = (len + BLOCK - 1) / BLOCK;
    memcpy(cv, IV, 32);
    for (size_t i = 0; i < blocks; i++) {
        uint8_t block[BLOCK] = {0};
        size_t take = i + 1 < blocks ? BLOCK : len - i * BLOCK;
        memcpy(block, data + i * BLOCK, take);
        uint8_t f = (i == 0 ? CHUNK_START : 0) | (i + 1 == blocks ? CHUNK_END | flags : 0);
        blake3_compress_in_place(cv, block, (uint8_t)take, counter, f);
    }
}

/* the digest of head || body of total length n > CHUNK; cvs holds room for the padded
 * count of chunk chaining values, inputs for as many pointers */
static void wide(const uint8_t *head, size_t hlen, const uint8_t *body, size_t n,
                 size_t degree, uint8_t *cvs, const uint8_t **inputs, uint8_t out[OUT]) {
    size_t chunks = (n + CHUNK - 1) / CHUNK, whole = chunks - 1;
    uint8_t stitched[CHUNK], last[CHUNK];
    size_t lanes = padded(whole, degree);
    for (size_t i = 0; i < lanes; i++) {
        size_t at = i * CHUNK;
        if (i >= whole) {
            inputs[i] = zero_chunk; /* a lane filled out: its output is dropped */
        } else if (at >= hlen) {
            inputs[i] = body + (at - hlen);
        } else if (at + CHUNK <= hlen) {
            inputs[i] = head + at;
        } else {
            gather(head, hlen, body, at, CHUNK, stitched);
            inputs[i] = stitched;
        }
    }
    /* (only one chunk can span the head's end: ``stitched`` is used once) */
    blake3_hash_many(inputs, lanes, CHUNK / BLOCK, IV, 0, true, 0, CHUNK_START, CHUNK_END, cvs);
    size_t tail = n - whole * CHUNK;
    gather(head, hlen, body, whole * CHUNK, tail, last);
    uint32_t cv[8];
    last_chunk_cv(last, tail, whole, 0, cv);
    store_cv_words(cvs + whole * OUT, cv);
    size_t count = chunks;
    while (count > 2) {
        size_t pairs = count / 2;
        for (size_t i = 0; i < pairs; i++) inputs[i] = cvs + 2 * i * OUT;
        /* the level's parents go to scratch past the children, then move down */
        uint8_t *level = cvs + chunks * OUT + degree * OUT; /* scratch past the padded cvs */
        blake3_hash_many(inputs, pairs, 1, IV, 0, false, PARENT, 0, 0, level);
        memmove(cvs, level, pairs * OUT);
        if (count & 1) memmove(cvs + pairs * OUT, cvs + (count - 1) * OUT, OUT);
        count = pairs + (count & 1);
    }
    memcpy(cv, IV, 32);
    blake3_compress_in_place(cv, cvs, BLOCK, 0, PARENT | ROOT);
    store_cv_words(out, cv);
}

static PyObject *widehash_hash(PyObject *self, PyObject *args) {
    Py_buffer head, body;
    if (!PyArg_ParseTuple(args, "y*y*:hash", &head, &body)) return NULL;
    const uint8_t *h = head.buf, *b = body.buf;
    size_t hlen = (size_t)head.len, n = hlen + (size_t)body.len;
    uint8_t out[OUT];
    PyObject *result = NULL;
    if (n <= CHUNK) { /* one chunk: the root itself */
        blake3_hasher hasher;
        blake3_hasher_init(&hasher);
        blake3_hasher_update(&hasher, h, hlen);
        blake3_hasher_update(&hasher, b, (size_t)body.len);
        blake3_hasher_finalize(&hasher, out, OUT);
        result = PyBytes_FromStringAndSize((const char *)out, OUT);
        goto done;
    }
    size_t degree = blake3_simd_degree();
    size_t chunks = (n + CHUNK - 1) / CHUNK;
    size_t slots = (chunks + degree - 1) / degree * degree + 2 * degree;
    uint8_t stack_cvs[(STACK_CHUNKS + 64) * 2 * OUT];
    const uint8_t *stack_inputs[STACK_CHUNKS + 64];
    uint8_t *cvs = stack_cvs;
    const uint8_t **inputs = stack_inputs;
    uint8_t *heap = NULL;
    if (slots > STACK_CHUNKS + 64) {
        heap = PyMem_RawMalloc(slots * 2 * OUT + slots * sizeof(*inputs));
        if (heap == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        cvs = heap;
        inputs = (const uint8_t **)(heap + slots * 2 * OUT);
    }
    if (chunks >= GIL_FROM_CHUNKS) {
        Py_BEGIN_ALLOW_THREADS
        wide(h, hlen, b, n, degree, cvs, inputs, out);
        Py_END_ALLOW_THREADS
    } else {
        wide(h, hlen, b, n, degree, cvs, inputs, out);
    }
    PyMem_RawFree(heap);
    result = PyBytes_FromStringAndSize((const char *)out, OUT);
done:
    PyBuffer_Release(&head);
    PyBuffer_Release(&body);
    return result;
}

static PyMethodDef methods[] = {
    {"hash", widehash_hash, METH_VARARGS,
     "hash(head, body) -> bytes: BLAKE3(head || body), 32 bytes, at full SIMD width"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_widehash", NULL, -1, methods};

PyMODINIT_FUNC PyInit__widehash(void) { return PyModule_Create(&module); }
