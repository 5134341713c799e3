/*
 * statekeeper.backends._fileid: the (device, inode) of the file at a path, in C. Its
 * one job: ``file_id(path)`` is statekeeper/backends/sqlite/fileid.py's
 * ``python_file_id`` (the reference: ``os.stat(path)``'s ``(st_dev, st_ino)``, None
 * when nothing is at the path), without the ``os.stat_result`` that ``os.stat``
 * builds (its ten fields, three float times and three nanosecond times made with
 * Python integer arithmetic) only for two of its fields to be read.
 *
 * Why native: the SQLite engine checks both the store file and its WAL by this
 * identity before every commit (a file deleted or replaced while open: StoreLost), two
 * calls a commit; through ``os.stat`` each was ~5 k instructions, ~20 k of a LangGraph
 * saver's ``put`` + ``put_writes`` pair (docs/benchmarks.md, "lgonepath"). The stat
 * runs without the GIL, as ``os.stat``'s does.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <sys/stat.h>

PyDoc_STRVAR(file_id_doc,
"file_id(path, /) -> tuple[int, int] | None\n\n"
"(st_dev, st_ino) of os.stat(path); None when nothing is there (ENOENT, ENOTDIR);\n"
"any other failure raised as os.stat raises it (OSError naming the path).");

static PyObject *
file_id(PyObject *self, PyObject *arg)
{
    PyObject *encoded = NULL;
    struct stat st;
    int rc, err;
    if (!PyUnicode_FSConverter(arg, &encoded))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = stat(PyBytes_AS_STRING(encoded), &st);
    err = errno;
    Py_END_ALLOW_THREADS
    Py_DECREF(encoded);
    if (rc != 0) {
        if (err == ENOENT || err == ENOTDIR)
            Py_RETURN_NONE;
        errno = err;
        return PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, arg);
    }
    /* as os.stat makes them (CPython 3.11: st_dev signed, st_ino unsigned) */
    PyObject *dev = PyLong_FromLongLong((long long)st.st_dev);
    if (dev == NULL)
        return NULL;
    PyObject *ino = PyLong_FromUnsignedLongLong((unsigned long long)st.st_ino);
    if (ino == NULL) {
        Py_DECREF(dev);
        return NULL;
    }
    PyObject *out = PyTuple_New(2);
    if (out == NULL) {
        Py_DECREF(dev);
        Py_DECREF(ino);
        return NULL;
    }
    PyTuple_SET_ITEM(out, 0, dev);
    PyTuple_SET_ITEM(out, 1, ino);
    return out;
}

static PyMethodDef methods[] = {
    {"file_id", file_id, METH_O, file_id_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "statekeeper.backends._fileid",
    "A file's (device, inode) at a path in C (see statekeeper.backends.sqlite.fileid).",
    -1,
    methods,
};

PyMODINIT_FUNC
PyInit__fileid(void)
{
    return PyModule_Create(&module);
}
