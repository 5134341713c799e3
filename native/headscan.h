/* statekeeper.backends._pagepass.heads_scan (native/headscan.c) */
#ifndef STATEKEEPER_HEADSCAN_H
#define STATEKEEPER_HEADSCAN_H
#include <Python.h>
#include <stdint.h>

PyDoc_STRVAR(heads_scan_doc,
"heads_scan(db_fd, wal_fd, frames, root, page_size, usable, pages) -> tuple | None\n\n"
"The heads table (``sk_agents``: a WITHOUT ROWID b-tree from page ``root``) read from\n"
"the snapshot's pages (page p from the WAL at ``frames[p]`` (uint64s, or None) when\n"
"that is not 0, else from ``db_fd``), the GIL released: ``(agents, heads, tags,\n"
"accounted)`` of the streams whose head seq > 0, in key order, or None when the\n"
"table is not in the form this reads (see native/headscan.c): SQL reads it then.");

PyObject *heads_scan(PyObject *self, PyObject *args);

/* what heads_walk found: ``count`` streams, their ids (UTF-8 as stored, id *i* ending
 * at ``ends[i]`` in ``ids``), head seqs and tags (``width`` bytes each); malloc'd */
typedef struct {
    char *ids;
    size_t *ends;
    int64_t *seqs;
    char *tags;
    size_t count;
    Py_ssize_t width;
    long long accounted;
} heads_found;

/* heads_scan's walk (the GIL released while it reads): 1 and ``out`` filled (free it
 * with heads_found_free), 0 when the table is not in the form it reads, -1 with an
 * exception set */
int heads_walk(int db, int wal, PyObject *frames_obj, Py_ssize_t root, Py_ssize_t page_size,
               Py_ssize_t usable, Py_ssize_t pages, heads_found *out);
void heads_found_free(heads_found *found);

PyDoc_STRVAR(heads_packed_doc,
"heads_packed(db_fd, wal_fd, frames, root, page_size, usable, pages, before, after,\n"
"             prefix) -> tuple | None\n\n"
"heads_scan's heads as msgpack, never as Python objects (native/headpack.c):\n"
"``(before + packb({'agent': agents, 'head': heads, 'tag': tags}) + after, count,\n"
"accounted, own)``, ``own`` the ``(agent, head)`` of the agents whose id starts with\n"
"``prefix``; None where heads_scan is None or an id is not UTF-8.");

PyObject *heads_packed(PyObject *self, PyObject *args);

PyDoc_STRVAR(tree_pages_doc,
"tree_pages(db_fd, wal_fd, frames, root, page_size, usable, pages, plan, value) -> int | None\n\n"
"Every page of the b-tree from page ``root`` (its interior and leaf pages and its\n"
"cells' overflow pages, read as heads_scan reads pages) set to ``value`` in the\n"
"writable ``plan`` (one byte a page, by page number): how many; or None, nothing\n"
"set, when the tree does not read whole (a page out of range or met twice, a\n"
"malformed page): ``dbstat`` lists it then.");

PyObject *tree_pages(PyObject *self, PyObject *args);

PyDoc_STRVAR(tree_outline_doc,
"tree_outline(db_fd, wal_fd, frames, root, page_size, usable, pages, plan, value)\n"
"    -> (int, bytes) | None\n\n"
"tree_pages without reading the tree's leaves: its interior pages read (and their\n"
"cells' overflow pages), the pages they point to at the depth of the leftmost leaf\n"
"listed unread (SQLite keeps every leaf of a b-tree at one depth), every page listed\n"
"set to ``value`` in ``plan``: ``(how many, the leaves listed unread as native\n"
"uint32s)``; None, nothing set, where tree_pages is None or a page above that depth\n"
"reads as a leaf. The leaves' cells' overflow pages are not listed.");

PyObject *tree_outline(PyObject *self, PyObject *args);
#endif
