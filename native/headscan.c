/*
 * statekeeper.backends._pagepass.heads_scan: a page backup's heads (every stream's
 * agent id, head seq and head tag: the heads table ``sk_agents``, a WITHOUT ROWID
 * table) read straight from the snapshot's pages, in C, without the GIL: a walk of
 * the table's b-tree in key order. What SQLite's ``TAG_COLUMNS`` statement and its
 * split in Python (statekeeper/governance/backup/tagheads.py) give in their common
 * case, and only that: every stream with a head (head seq > 0) holding a tag, all the
 * tags of one length, the ids strictly increasing, every record whole in its page
 * (no overflow), the file in UTF-8. Anything else (a malformed page, a page number
 * out of range, a cycle, a record of another shape, a stream without a tag, tags of
 * several lengths) returns None, and the caller reads the heads with SQL, as before.
 *
 * Why native: the statement and the split were 381 M of a 100,000-agent backup's
 * 1,514 M instructions, on a thread that shares the two cores with the page
 * pipeline; the scan is 95 M (docs/benchmarks.md, "backup4").
 *
 * ``tree_pages`` (below) lists every page of one b-tree the same way (interior and
 * leaf pages of tables and indexes, their cells' overflow chains): the page plan's
 * dropped trees (the change feed's), which ``dbstat`` listed for 79 M instructions
 * before a backup's first chunk (17 M so). It sets the plan only once the whole tree
 * read; a page out of range or met twice, or a malformed page, is None: ``dbstat``
 * lists the tree then. tests/backends/test_sqlite_headscan.py holds it to dbstat.
 *
 * Every offset a page's bytes give is checked against that page's usable bytes; the
 * walk visits at most as many pages as the snapshot has and is at most 64 deep.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "headscan.h"

#define MAX_DEPTH 64
#define COLUMNS 5 /* agent_id, head_seq, created_at, updated_at, head_tag */

typedef struct {
    char *data;
    size_t len, cap;
} arena;

static int
arena_put(arena *a, const void *bytes, size_t n)
{
    if (a->len + n > a->cap) {
        size_t cap = a->cap ? a->cap : 1 << 16;
        while (cap < a->len + n)
            cap *= 2;
        char *grown = realloc(a->data, cap);
        if (grown == NULL)
            return -1;
        a->data = grown;
        a->cap = cap;
    }
    memcpy(a->data + a->len, bytes, n);
    a->len += n;
    return 0;
}

typedef struct {
    int db, wal;
    const uint64_t *frames; /* WAL offset of a page's frame, by page number, or 0 */
    Py_ssize_t nframes;
    Py_ssize_t page_size, usable, pages;
    Py_ssize_t visited;
    Py_ssize_t max_local;
    unsigned char *bufs; /* one page per depth */
    arena ids, tags;
    arena id_ends; /* size_t each: where each id ends in ``ids`` */
    arena seqs;    /* int64_t each */
    Py_ssize_t width; /* the tags' length (-1: none seen yet) */
    long long accounted;
    int overflowed;
} scan;

static uint32_t
be32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static unsigned
be16h(const unsigned char *p)
{
    return ((unsigned)p[0] << 8) | p[1];
}

/* a varint at ``p`` (at most ``end``): its length, 0 if it runs past ``end`` */
static int
varint(const unsigned char *p, const unsigned char *end, uint64_t *out)
{
    uint64_t v = 0;
    for (int i = 0; i < 9; i++) {
        if (p + i >= end)
            return 0;
        if (i == 8) {
            *out = (v << 8) | p[i];
            return 9;
        }
        v = (v << 7) | (p[i] & 0x7F);
        if (!(p[i] & 0x80)) {
            *out = v;
            return i + 1;
        }
    }
    return 0;
}

/* the bytes a value of serial type ``t`` takes, -1 for the reserved types */
static long long
serial_size(uint64_t t)
{
    static const int fixed[12] = {0, 1, 2, 3, 4, 6, 8, 8, 0, 0, -1, -1};
    if (t < 12)
        return fixed[t];
    return (long long)((t - 12) / 2);
}

/* the first ``n`` bytes of page ``pgno`` of the snapshot into ``buf`` (from its WAL
 * frame if it has one, else from the database file): 0, or -1 if they cannot be read */
static int
read_bytes(scan *s, Py_ssize_t pgno, unsigned char *buf, Py_ssize_t n)
{
    if (pgno < 1 || pgno > s->pages)
        return -1;
    ssize_t got;
    if (s->frames != NULL && pgno < s->nframes && s->frames[pgno])
        got = pread(s->wal, buf, (size_t)n, (off_t)s->frames[pgno]);
    else
        got = pread(s->db, buf, (size_t)n, (off_t)(pgno - 1) * s->page_size);
    return got == n ? 0 : -1;
}

/* page ``pgno`` of the snapshot into ``buf``: 0, or -1 if it cannot be read whole */
static int
read_page(scan *s, Py_ssize_t pgno, unsigned char *buf)
{
    return read_bytes(s, pgno, buf, s->page_size);
}

/* one cell's record (``payload`` bytes at ``p``, whole in its page): kept if its
 * stream has a head; 0, or -1 if the record is not what the fast path takes */
static int
take_record(scan *s, const unsigned char *p, uint64_t payload)
{
    const unsigned char *end = p + payload;
    uint64_t header;
    int n = varint(p, end, &header);
    if (!n || header > payload || header < (uint64_t)n)
        return -1;
    const unsigned char *types = p + n, *types_end = p + header, *body = p + header;
    uint64_t t[COLUMNS];
    const unsigned char *at[COLUMNS];
    for (int c = 0; c < COLUMNS; c++) {
        if (types >= types_end)
            return -1; /* fewer columns (an added column's default): SQL reads it */
        n = varint(types, types_end, &t[c]);
        if (!n)
            return -1;
        types += n;
        long long size = serial_size(t[c]);
        if (size < 0 || (uint64_t)size > (uint64_t)(end - body))
            return -1;
        at[c] = body;
        body += size;
    }
    /* the agent id: text; the head seq: an integer */
    if (t[0] < 13 || !(t[0] & 1))
        return -1;
    long long seq;
    switch (t[1]) {
    case 8:
        seq = 0;
        break;
    case 9:
        seq = 1;
        break;
    case 1: case 2: case 3: case 4: case 5: case 6: {
        Py_ssize_t len = (Py_ssize_t)serial_size(t[1]);
        uint64_t v = (at[1][0] & 0x80) ? ~(uint64_t)0 : 0;
        for (Py_ssize_t i = 0; i < len; i++)
            v = (v << 8) | at[1][i];
        seq = (long long)v;
        break;
    }
    default:
        return -1;
    }
    if (seq <= 0)
        return 0; /* (no head: not listed, as ``WHERE head_seq > 0``) */
    /* the head tag: a blob, as long as every other */
    if (t[4] < 12 || (t[4] & 1))
        return -1;
    Py_ssize_t width = (Py_ssize_t)serial_size(t[4]);
    if (width == 0 || (s->width >= 0 && width != s->width))
        return -1;
    s->width = width;
    size_t id_len = (size_t)serial_size(t[0]);
    /* strictly after the id before (the table's key order: the manifest's) */
    size_t count = s->id_ends.len / sizeof(size_t);
    if (count) {
        size_t last_end = ((size_t *)s->id_ends.data)[count - 1];
        size_t last_start = count > 1 ? ((size_t *)s->id_ends.data)[count - 2] : 0;
        size_t last_len = last_end - last_start;
        size_t common = last_len < id_len ? last_len : id_len;
        int cmp = memcmp(s->ids.data + last_start, at[0], common);
        if (cmp > 0 || (cmp == 0 && last_len >= id_len))
            return -1;
    }
    if (s->accounted > LLONG_MAX - seq)
        return -1;
    s->accounted += seq;
    size_t id_end = s->ids.len + id_len;
    int64_t seq64 = seq;
    if (arena_put(&s->ids, at[0], id_len) || arena_put(&s->id_ends, &id_end, sizeof id_end) ||
        arena_put(&s->seqs, &seq64, sizeof seq64) || arena_put(&s->tags, at[4], (size_t)width))
        return -1;
    return 0;
}

/* the b-tree of index pages from ``pgno`` in key order (an interior cell's key after
 * its left child's); 0, or -1 */
static int
walk(scan *s, Py_ssize_t pgno, int depth)
{
    if (depth >= MAX_DEPTH || ++s->visited > s->pages)
        return -1;
    unsigned char *page = s->bufs + (size_t)depth * (size_t)s->page_size;
    if (read_page(s, pgno, page) < 0)
        return -1;
    Py_ssize_t h = pgno == 1 ? 100 : 0, usable = s->usable;
    unsigned char type = page[h];
    int interior = type == 0x02;
    if (!interior && type != 0x0A)
        return -1;
    Py_ssize_t cells = be16h(page + h + 3);
    Py_ssize_t pointers = h + (interior ? 12 : 8);
    if (pointers + 2 * cells > usable)
        return -1;
    for (Py_ssize_t i = 0; i < cells; i++) {
        Py_ssize_t off = be16h(page + pointers + 2 * i);
        if (off < pointers + 2 * cells || off >= usable)
            return -1;
        const unsigned char *p = page + off, *end = page + usable;
        if (interior) {
            if (end - p < 4)
                return -1;
            Py_ssize_t child = be32(p);
            p += 4;
            if (walk(s, child, depth + 1) < 0)
                return -1;
            /* (the page buffer at this depth is still this page's) */
        }
        uint64_t payload;
        int n = varint(p, end, &payload);
        if (!n)
            return -1;
        p += n;
        if (payload > (uint64_t)s->max_local || payload > (uint64_t)(end - p)) {
            s->overflowed = 1;
            return -1;
        }
        if (take_record(s, p, payload) < 0)
            return -1;
    }
    if (interior) {
        if (usable < h + 12)
            return -1;
        return walk(s, be32(page + h + 8), depth + 1);
    }
    return 0;
}

int
heads_walk(int db, int wal, PyObject *frames_obj, Py_ssize_t root, Py_ssize_t page_size,
           Py_ssize_t usable, Py_ssize_t pages, heads_found *out)
{
    memset(out, 0, sizeof *out);
    if (page_size < 512 || page_size > 65536 || usable < 480 || usable > page_size || pages < 0) {
        PyErr_SetString(PyExc_ValueError, "heads_scan: bad page size, usable size or count");
        return -1;
    }
    Py_buffer frames = {0};
    int have_frames = frames_obj != Py_None;
    if (have_frames && PyObject_GetBuffer(frames_obj, &frames, PyBUF_SIMPLE) < 0)
        return -1;
    scan s;
    memset(&s, 0, sizeof s);
    s.db = db;
    s.wal = wal;
    s.frames = have_frames ? (const uint64_t *)frames.buf : NULL;
    s.nframes = have_frames ? frames.len / (Py_ssize_t)sizeof(uint64_t) : 0;
    s.page_size = page_size;
    s.usable = usable;
    s.pages = pages;
    s.max_local = (usable - 12) * 64 / 255 - 23; /* an index page's local payload */
    s.width = -1;
    int failed = 0;
    unsigned char first[4];
    Py_BEGIN_ALLOW_THREADS
    s.bufs = malloc((size_t)MAX_DEPTH * (size_t)page_size);
    if (s.bufs == NULL)
        failed = -2;
    /* the text encoding (page 1's header, byte 56): UTF-8 only */
    else if (read_page(&s, 1, s.bufs) < 0 || (memcpy(first, s.bufs + 56, 4), be32(first) != 1))
        failed = -1;
    else
        failed = walk(&s, root, 0);
    Py_END_ALLOW_THREADS
    if (have_frames)
        PyBuffer_Release(&frames);
    free(s.bufs);
    if (failed) {
        free(s.ids.data);
        free(s.tags.data);
        free(s.id_ends.data);
        free(s.seqs.data);
        if (failed == -2) {
            PyErr_NoMemory();
            return -1;
        }
        return 0;
    }
    out->ids = s.ids.data;
    out->ends = (size_t *)s.id_ends.data;
    out->seqs = (int64_t *)s.seqs.data;
    out->tags = s.tags.data;
    out->count = s.seqs.len / sizeof(int64_t);
    out->width = s.width;
    out->accounted = s.accounted;
    return 1;
}

void
heads_found_free(heads_found *found)
{
    free(found->ids);
    free(found->ends);
    free(found->seqs);
    free(found->tags);
    memset(found, 0, sizeof *found);
}

PyObject *
heads_scan(PyObject *self, PyObject *args)
{
    int db, wal;
    PyObject *frames_obj;
    Py_ssize_t root, page_size, usable, pages;
    if (!PyArg_ParseTuple(args, "iiOnnnn", &db, &wal, &frames_obj, &root, &page_size, &usable,
                          &pages))
        return NULL;
    heads_found s;
    int found = heads_walk(db, wal, frames_obj, root, page_size, usable, pages, &s);
    if (found <= 0)
        return found < 0 ? NULL : Py_NewRef(Py_None);
    PyObject *out = NULL;
    size_t count = s.count;
    PyObject *agents = PyList_New((Py_ssize_t)count), *heads = PyList_New((Py_ssize_t)count),
             *tags = PyList_New((Py_ssize_t)count);
    if (agents == NULL || heads == NULL || tags == NULL)
        goto fail;
    size_t start = 0;
    const size_t *ends = s.ends;
    const int64_t *seqs = s.seqs;
    for (size_t i = 0; i < count; i++) {
        PyObject *id = PyUnicode_DecodeUTF8(s.ids + start, (Py_ssize_t)(ends[i] - start), NULL);
        if (id == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                goto fail;
            PyErr_Clear(); /* not UTF-8 as SQLite would read it: SQL reads it */
            Py_DECREF(agents);
            Py_DECREF(heads);
            Py_DECREF(tags);
            out = Py_NewRef(Py_None);
            goto done;
        }
        PyList_SET_ITEM(agents, (Py_ssize_t)i, id);
        start = ends[i];
        PyObject *seq = PyLong_FromLongLong(seqs[i]);
        if (seq == NULL)
            goto fail;
        PyList_SET_ITEM(heads, (Py_ssize_t)i, seq);
        PyObject *tag = PyBytes_FromStringAndSize(s.tags + i * (size_t)s.width, s.width);
        if (tag == NULL)
            goto fail;
        PyList_SET_ITEM(tags, (Py_ssize_t)i, tag);
    }
    out = Py_BuildValue("(NNNL)", agents, heads, tags, s.accounted);
    goto done;
fail:
    Py_XDECREF(agents);
    Py_XDECREF(heads);
    Py_XDECREF(tags);
done:
    heads_found_free(&s);
    return out;
}

/* --- tree_pages: every page of one b-tree (for the plan's dropped trees) --- */

typedef struct {
    scan *s;
    unsigned char *seen; /* one byte a page: already listed */
    arena found;         /* uint32_t page numbers */
    int leaf_depth;      /* tree_outline: the leaves' depth (listed, not read); else -1 */
    arena leaves;        /* tree_outline: the leaves listed unread (uint32_t) */
} pages_walk;

static int
list_page(pages_walk *w, Py_ssize_t pgno)
{
    if (pgno < 1 || pgno > w->s->pages || w->seen[pgno])
        return -1; /* out of the file, or a page listed twice: not a tree */
    w->seen[pgno] = 1;
    uint32_t p = (uint32_t)pgno;
    return arena_put(&w->found, &p, sizeof p);
}

/* the overflow chain of a cell whose payload of ``payload`` bytes starts at ``p`` in
 * a page of ``usable`` bytes ending at ``end`` (``max_local``: the page kind's) */
static int
list_overflow(pages_walk *w, const unsigned char *p, const unsigned char *end, uint64_t payload,
              Py_ssize_t max_local)
{
    Py_ssize_t usable = w->s->usable;
    if (payload <= (uint64_t)max_local)
        return 0;
    Py_ssize_t min_local = (usable - 12) * 32 / 255 - 23;
    uint64_t k = (uint64_t)min_local + (payload - (uint64_t)min_local) % (uint64_t)(usable - 4);
    uint64_t local = k <= (uint64_t)max_local ? k : (uint64_t)min_local;
    if (local + 4 > (uint64_t)(end - p))
        return -1;
    uint64_t chain = (payload - local + (uint64_t)usable - 5) / (uint64_t)(usable - 4);
    Py_ssize_t next = be32(p + local);
    unsigned char head[4];
    for (uint64_t i = 0; i < chain; i++) {
        if (list_page(w, next) < 0)
            return -1;
        if (i + 1 < chain) {
            if (read_bytes(w->s, next, head, 4) < 0)
                return -1;
            next = be32(head);
        }
    }
    return 0;
}

static int
walk_pages(pages_walk *w, Py_ssize_t pgno, int depth)
{
    scan *s = w->s;
    if (depth >= MAX_DEPTH || list_page(w, pgno) < 0)
        return -1;
    if (depth == w->leaf_depth) { /* a leaf, by the tree's depth: listed, not read */
        uint32_t p = (uint32_t)pgno;
        return arena_put(&w->leaves, &p, sizeof p);
    }
    unsigned char *page = s->bufs + (size_t)depth * (size_t)s->page_size;
    if (read_page(s, pgno, page) < 0)
        return -1;
    Py_ssize_t h = pgno == 1 ? 100 : 0, usable = s->usable;
    unsigned char type = page[h];
    int interior = type == 0x02 || type == 0x05;
    if (!interior && type != 0x0A && type != 0x0D)
        return -1;
    if (!interior && w->leaf_depth > 0)
        return -1; /* a leaf above the leftmost one's depth: not a b-tree SQLite wrote */
    int table = type == 0x05 || type == 0x0D;
    Py_ssize_t max_local = table ? usable - 35 : s->max_local;
    Py_ssize_t cells = be16h(page + h + 3);
    Py_ssize_t pointers = h + (interior ? 12 : 8);
    if (pointers + 2 * cells > usable)
        return -1;
    const unsigned char *end = page + usable;
    for (Py_ssize_t i = 0; i < cells; i++) {
        Py_ssize_t off = be16h(page + pointers + 2 * i);
        if (off < pointers + 2 * cells || off >= usable)
            return -1;
        const unsigned char *p = page + off;
        uint64_t payload, rowid;
        int n;
        if (interior) {
            if (end - p < 4)
                return -1;
            Py_ssize_t child = be32(p);
            p += 4;
            if (walk_pages(w, child, depth + 1) < 0)
                return -1;
            if (table) /* (a table's interior cell: a rowid, no payload) */
                continue;
        }
        if (!(n = varint(p, end, &payload)))
            return -1;
        p += n;
        if (table) {
            if (!(n = varint(p, end, &rowid)))
                return -1;
            p += n;
        }
        if (list_overflow(w, p, end, payload, max_local) < 0)
            return -1;
    }
    if (interior) {
        if (usable < h + 12)
            return -1;
        return walk_pages(w, be32(page + h + 8), depth + 1);
    }
    return 0;
}

/* the depth of the b-tree's leaves below ``root`` (0: the root is a leaf), by its
 * leftmost path (SQLite keeps every leaf of a b-tree at one depth); -1 if a page on
 * that path does not read as a b-tree page */
static int
leaf_depth_of(scan *s, Py_ssize_t root, unsigned char *page)
{
    Py_ssize_t pgno = root;
    for (int depth = 0; depth < MAX_DEPTH; depth++) {
        if (read_page(s, pgno, page) < 0)
            return -1;
        Py_ssize_t h = pgno == 1 ? 100 : 0;
        unsigned char type = page[h];
        if (type == 0x0A || type == 0x0D)
            return depth;
        if ((type != 0x02 && type != 0x05) || s->usable < h + 12)
            return -1;
        Py_ssize_t cells = be16h(page + h + 3);
        if (cells) {
            Py_ssize_t off = be16h(page + h + 12);
            if (h + 12 + 2 * cells > s->usable || off < h + 12 + 2 * cells || off + 4 > s->usable)
                return -1;
            pgno = be32(page + off);
        }
        else {
            pgno = be32(page + h + 8);
        }
        if (pgno < 1 || pgno > s->pages)
            return -1;
    }
    return -1;
}

/* tree_pages (``outline`` 0) and tree_outline (1) */
static PyObject *
walk_tree(PyObject *args, int outline)
{
    int db, wal;
    PyObject *frames_obj;
    Py_buffer plan;
    Py_ssize_t root, page_size, usable, pages;
    int value;
    if (!PyArg_ParseTuple(args, "iiOnnnnw*i", &db, &wal, &frames_obj, &root, &page_size,
                          &usable, &pages, &plan, &value))
        return NULL;
    if (page_size < 512 || page_size > 65536 || usable < 480 || usable > page_size || pages < 0 ||
        plan.len < pages + 1 || value < 0 || value > 255) {
        PyBuffer_Release(&plan);
        PyErr_SetString(PyExc_ValueError,
                        outline ? "tree_outline: bad page size, usable size, count or plan"
                                : "tree_pages: bad page size, usable size, count or plan");
        return NULL;
    }
    Py_buffer frames = {0};
    int have_frames = frames_obj != Py_None;
    if (have_frames && PyObject_GetBuffer(frames_obj, &frames, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&plan);
        return NULL;
    }
    scan s;
    memset(&s, 0, sizeof s);
    s.db = db;
    s.wal = wal;
    s.frames = have_frames ? (const uint64_t *)frames.buf : NULL;
    s.nframes = have_frames ? frames.len / (Py_ssize_t)sizeof(uint64_t) : 0;
    s.page_size = page_size;
    s.usable = usable;
    s.pages = pages;
    s.max_local = (usable - 12) * 64 / 255 - 23;
    pages_walk w = {&s, NULL, {0}, -1, {0}};
    int failed;
    Py_ssize_t listed = 0;
    Py_BEGIN_ALLOW_THREADS
    s.bufs = malloc((size_t)MAX_DEPTH * (size_t)page_size);
    w.seen = calloc((size_t)pages + 1, 1);
    if (s.bufs == NULL || w.seen == NULL)
        failed = -2;
    else if (outline && (w.leaf_depth = leaf_depth_of(&s, root, s.bufs)) < 0)
        failed = -1;
    else {
        if (w.leaf_depth == 0)
            w.leaf_depth = -1; /* the root is the leaf: read it (its cells' overflow) */
        failed = walk_pages(&w, root, 0);
    }
    if (!failed) { /* the plan marked only once the whole tree is read */
        const uint32_t *found = (const uint32_t *)w.found.data;
        listed = (Py_ssize_t)(w.found.len / sizeof(uint32_t));
        for (Py_ssize_t i = 0; i < listed; i++)
            ((unsigned char *)plan.buf)[found[i]] = (unsigned char)value;
    }
    Py_END_ALLOW_THREADS
    free(s.bufs);
    free(w.seen);
    free(w.found.data);
    PyBuffer_Release(&plan);
    PyObject *leaves = NULL;
    if (!failed && outline) {
        leaves = PyBytes_FromStringAndSize(w.leaves.data ? w.leaves.data : "",
                                           (Py_ssize_t)w.leaves.len);
        if (leaves == NULL)
            failed = -3;
    }
    free(w.leaves.data);
    if (have_frames)
        PyBuffer_Release(&frames);
    if (failed == -2)
        return PyErr_NoMemory();
    if (failed == -3)
        return NULL;
    if (failed)
        Py_RETURN_NONE;
    if (outline)
        return Py_BuildValue("(nN)", listed, leaves);
    return PyLong_FromSsize_t(listed);
}

PyObject *
tree_pages(PyObject *self, PyObject *args)
{
    return walk_tree(args, 0);
}

PyObject *
tree_outline(PyObject *self, PyObject *args)
{
    return walk_tree(args, 1);
}
