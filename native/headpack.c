/*
 * statekeeper.backends._pagepass.heads_packed: a page backup's heads (what
 * native/headscan.c's walk finds: every stream's agent id, head seq and head tag)
 * written straight as the manifest's msgpack, the bytes ormsgpack makes of the
 * columns ``{"agent": [...], "head": [...], "tag": [...]}`` (str, int and bin in
 * their shortest forms), without a Python object per stream and without the GIL.
 *
 * Why: heads_scan made 300,000 objects for a 100,000-agent store (a str, an int and a
 * bytes a stream), which ormsgpack then packed and the end of the backup freed, all
 * under the GIL: ~20-25 ms of CPU on the heads' thread while the page pipeline's
 * threads wait for the GIL to return from each read, seal and write
 * (docs/benchmarks.md, "backup8"). Only the agents whose id starts with a given
 * prefix (the store's own streams) become Python objects.
 *
 * An id that is not UTF-8 as Python's strict decoder reads it (where heads_scan's
 * ``PyUnicode_DecodeUTF8`` fails) makes the result None: SQL reads the heads then.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "headscan.h"

/* whether ``p``'s ``n`` bytes are UTF-8 as Python's strict decoder takes it: no
 * overlong form, no surrogate, nothing past U+10FFFF, no sequence cut short */
static int
utf8_valid(const unsigned char *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if (n - i >= 8) { /* ASCII, 8 bytes at a time */
            uint64_t w;
            memcpy(&w, p + i, 8);
            if (!(w & 0x8080808080808080ull)) {
                i += 8;
                continue;
            }
        }
        unsigned char c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need;
        unsigned char lo = 0x80, hi = 0xBF; /* the second byte's range */
        if (c >= 0xC2 && c <= 0xDF)
            need = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0)
                lo = 0xA0; /* no overlong form */
            else if (c == 0xED)
                hi = 0x9F; /* no surrogate */
        }
        else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0)
                lo = 0x90;
            else if (c == 0xF4)
                hi = 0x8F; /* nothing past U+10FFFF */
        }
        else
            return 0;
        if (n - i <= need)
            return 0;
        if (p[i + 1] < lo || p[i + 1] > hi)
            return 0;
        for (size_t k = 2; k <= need; k++)
            if (p[i + k] < 0x80 || p[i + k] > 0xBF)
                return 0;
        i += need + 1;
    }
    return 1;
}

/* msgpack's head of a str, bin or array of ``n`` (``kind``: 's', 'b' or 'a') at ``o``
 * (NULL: only its length); its length */
static size_t
head_of(int kind, size_t n, unsigned char *o)
{
    unsigned char b[5];
    size_t len;
    if (kind == 's' && n < 32) {
        b[0] = (unsigned char)(0xA0 | n);
        len = 1;
    }
    else if (kind == 'a' && n < 16) {
        b[0] = (unsigned char)(0x90 | n);
        len = 1;
    }
    else if (kind != 'a' && n < 256) {
        b[0] = kind == 's' ? 0xD9 : 0xC4;
        b[1] = (unsigned char)n;
        len = 2;
    }
    else if (n < 65536) {
        b[0] = kind == 's' ? 0xDA : kind == 'b' ? 0xC5 : 0xDC;
        b[1] = (unsigned char)(n >> 8);
        b[2] = (unsigned char)n;
        len = 3;
    }
    else {
        b[0] = kind == 's' ? 0xDB : kind == 'b' ? 0xC6 : 0xDD;
        for (int k = 0; k < 4; k++)
            b[1 + k] = (unsigned char)(n >> (24 - 8 * k));
        len = 5;
    }
    if (o != NULL)
        memcpy(o, b, len);
    return len;
}

/* msgpack of a positive integer ``v`` at ``o`` (NULL: only its length); its length */
static size_t
uint_of(uint64_t v, unsigned char *o)
{
    unsigned char b[9];
    size_t len;
    if (v < 128) {
        b[0] = (unsigned char)v;
        len = 1;
    }
    else {
        int bytes = v < 256 ? 1 : v < 65536 ? 2 : v <= 0xFFFFFFFFu ? 4 : 8;
        b[0] = bytes == 1 ? 0xCC : bytes == 2 ? 0xCD : bytes == 4 ? 0xCE : 0xCF;
        for (int k = 0; k < bytes; k++)
            b[1 + k] = (unsigned char)(v >> (8 * (bytes - 1 - k)));
        len = 1 + (size_t)bytes;
    }
    if (o != NULL)
        memcpy(o, b, len);
    return len;
}

/* the columns' map (see the top) at ``o`` (NULL: only its length); its length, or 0
 * when an id is not UTF-8 (checked while ``o`` is NULL) */
static size_t
columns_of(const heads_found *f, unsigned char *o)
{
    static const unsigned char agent[] = {0x83, 0xA5, 'a', 'g', 'e', 'n', 't'};
    static const unsigned char head[] = {0xA4, 'h', 'e', 'a', 'd'};
    static const unsigned char tag[] = {0xA3, 't', 'a', 'g'};
    size_t at = 0, start = 0;
#define PUT(bytes, n)                                                                         \
    do {                                                                                      \
        if (o != NULL)                                                                        \
            memcpy(o + at, (bytes), (n));                                                     \
        at += (n);                                                                            \
    } while (0)
    PUT(agent, sizeof agent);
    at += head_of('a', f->count, o ? o + at : NULL);
    for (size_t i = 0; i < f->count; i++) {
        size_t len = f->ends[i] - start;
        const unsigned char *id = (const unsigned char *)f->ids + start;
        if (o == NULL && !utf8_valid(id, len))
            return 0;
        at += head_of('s', len, o ? o + at : NULL);
        PUT(id, len);
        start = f->ends[i];
    }
    PUT(head, sizeof head);
    at += head_of('a', f->count, o ? o + at : NULL);
    for (size_t i = 0; i < f->count; i++) /* (every head > 0: heads_walk keeps no other) */
        at += uint_of((uint64_t)f->seqs[i], o ? o + at : NULL);
    PUT(tag, sizeof tag);
    at += head_of('a', f->count, o ? o + at : NULL);
    size_t width = (size_t)f->width;
    for (size_t i = 0; i < f->count; i++) {
        at += head_of('b', width, o ? o + at : NULL);
        PUT(f->tags + i * width, width);
    }
#undef PUT
    return at;
}

/* the ``(agent, head)`` of the streams whose id starts with ``prefix`` (a run of them:
 * the ids are in order), a list */
static PyObject *
own_streams(const heads_found *f, const char *prefix, size_t plen)
{
    PyObject *own = PyList_New(0);
    size_t start = 0;
    for (size_t i = 0; own != NULL && i < f->count; start = f->ends[i], i++) {
        size_t len = f->ends[i] - start;
        if (len < plen || memcmp(f->ids + start, prefix, plen) != 0)
            continue;
        PyObject *pair = Py_BuildValue("(s#L)", f->ids + start, (Py_ssize_t)len,
                                       (long long)f->seqs[i]);
        if (pair == NULL || PyList_Append(own, pair) < 0)
            Py_CLEAR(own);
        Py_XDECREF(pair);
    }
    return own;
}

PyObject *
heads_packed(PyObject *self, PyObject *args)
{
    int db, wal;
    PyObject *frames_obj;
    Py_ssize_t root, page_size, usable, pages;
    Py_buffer before, after, prefix;
    if (!PyArg_ParseTuple(args, "iiOnnnny*y*y*", &db, &wal, &frames_obj, &root, &page_size,
                          &usable, &pages, &before, &after, &prefix))
        return NULL;
    PyObject *out = NULL, *packed = NULL, *own = NULL;
    heads_found f;
    int found = heads_walk(db, wal, frames_obj, root, page_size, usable, pages, &f);
    if (found <= 0) {
        out = found < 0 ? NULL : Py_NewRef(Py_None);
        goto released;
    }
    size_t size;
    Py_BEGIN_ALLOW_THREADS
    size = columns_of(&f, NULL);
    Py_END_ALLOW_THREADS
    if (size == 0) { /* an id not UTF-8 as Python reads it: SQL reads the heads */
        out = Py_NewRef(Py_None);
        goto done;
    }
    packed = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)((size_t)before.len + size +
                                                          (size_t)after.len));
    if (packed == NULL)
        goto done;
    {
        unsigned char *o = (unsigned char *)PyBytes_AS_STRING(packed);
        memcpy(o, before.buf, (size_t)before.len);
        Py_BEGIN_ALLOW_THREADS
        columns_of(&f, o + before.len);
        Py_END_ALLOW_THREADS
        memcpy(o + before.len + size, after.buf, (size_t)after.len);
    }
    own = own_streams(&f, prefix.buf, (size_t)prefix.len);
    if (own == NULL)
        goto done;
    out = Py_BuildValue("(NnLN)", packed, (Py_ssize_t)f.count, f.accounted, own);
    packed = own = NULL;
done:
    Py_XDECREF(packed);
    Py_XDECREF(own);
    heads_found_free(&f);
released:
    PyBuffer_Release(&before);
    PyBuffer_Release(&after);
    PyBuffer_Release(&prefix);
    return out;
}
