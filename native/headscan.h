/* statekeeper.backends._pagepass.heads_scan (native/headscan.c) */
#ifndef STATEKEEPER_HEADSCAN_H
#define STATEKEEPER_HEADSCAN_H
#include <Python.h>

PyDoc_STRVAR(heads_scan_doc,
"heads_scan(db_fd, wal_fd, frames, root, page_size, usable, pages) -> tuple | None\n\n"
"The heads table (``sk_agents``: a WITHOUT ROWID b-tree from page ``root``) read from\n"
"the snapshot's pages (page p from the WAL at ``frames[p]`` (uint64s, or None) when\n"
"that is not 0, else from ``db_fd``), the GIL released: ``(agents, heads, tags,\n"
"accounted)`` of the streams whose head seq > 0, in key order, or None when the\n"
"table is not in the form this reads (see native/headscan.c): SQL reads it then.");

PyObject *heads_scan(PyObject *self, PyObject *args);

PyDoc_STRVAR(tree_pages_doc,
"tree_pages(db_fd, wal_fd, frames, root, page_size, usable, pages, plan, value) -> int | None\n\n"
"Every page of the b-tree from page ``root`` (its interior and leaf pages and its\n"
"cells' overflow pages, read as heads_scan reads pages) set to ``value`` in the\n"
"writable ``plan`` (one byte a page, by page number): how many; or None, nothing\n"
"set, when the tree does not read whole (a page out of range or met twice, a\n"
"malformed page): ``dbstat`` lists it then.");

PyObject *tree_pages(PyObject *self, PyObject *args);
#endif
