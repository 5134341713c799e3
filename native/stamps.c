/*
 * statekeeper.store._stamps: proof that the old items of a saved list of flat
 * messages are unchanged, by each dict's identity and its version tag (PEP 509).
 *
 * The flat save (statekeeper/store/flat.py) proves that a message list only grew by
 * packing the whole list and comparing bytes: O(bytes of the history), ~4-7 us a save
 * of a 45-message chat of 300 characters. store/proofs.py proves it by identity
 * instead (each item, key and value the very object seen at the last save), which in
 * Python costs more than the pack unless the items are kilobytes large. Here the
 * proof is one pass over the items in C: each old item is the very dict seen then
 * and its ``ma_version_tag`` is the one it had then. CPython gives a dict a new
 * version tag at every change of its contents (PEP 509: an insert, a replaced value,
 * a delete, a clear, a pop, an update), so an unchanged tag says its keys and values
 * are the very objects seen then; they were all immutable scalars (exact ``str``,
 * ``int``, ``float``, ``bool``, None: :func:`stamp` refuses anything else), so its
 * contents, and their packed bytes, are those of then.
 *
 * Built for CPython 3.11-3.13 with the GIL (where ``ma_version_tag`` exists and
 * changes on every mutation); elsewhere the module does not build and the store uses
 * store/proofs.py's pure proof (the extension is optional).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030E0000 || defined(Py_GIL_DISABLED)
#error "statekeeper.store._stamps needs CPython 3.11-3.13 with the GIL (ma_version_tag)"
#endif

/* (deprecated in 3.12, still kept up to date by every mutation through 3.13) */
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif

static inline int
flat_scalar(PyObject *value)
{
    PyTypeObject *t = Py_TYPE(value);
    return t == &PyUnicode_Type || t == &PyLong_Type || t == &PyFloat_Type
        || t == &PyBool_Type || value == Py_None;
}

PyDoc_STRVAR(stamp_doc,
"stamp(items, /) -> bytes | None\n\n"
"The version tags of the dicts in the list ``items`` (8 bytes each, in order); None\n"
"when an item is not exactly a dict or a value of one is not exactly a str, int,\n"
"float, bool or None.");

static PyObject *
stamp(PyObject *Py_UNUSED(self), PyObject *items)
{
    if (!PyList_CheckExact(items)) {
        PyErr_SetString(PyExc_TypeError, "stamp() takes a list");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(items);
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(uint64_t));
    if (out == NULL)
        return NULL;
    uint64_t *tags = (uint64_t *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        if (!PyDict_CheckExact(item))
            goto refused;
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        while (PyDict_Next(item, &pos, &key, &value)) {
            if (!flat_scalar(value))
                goto refused;
        }
        tags[i] = ((PyDictObject *)item)->ma_version_tag;
    }
    return out;
refused:
    Py_DECREF(out);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(make_doc,
"make(packed, items, /) -> tuple[bytes, list, bytes] | None\n\n"
"The proof of the list ``items`` packed as ``packed``: ``(packed, a copy of items,\n"
"stamp(items))``; None when stamp() refuses them.");

static PyObject *
make(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyBytes_CheckExact(args[0]) || !PyList_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "make(packed: bytes, items: list)");
        return NULL;
    }
    PyObject *tags = stamp(NULL, args[1]);
    if (tags == NULL || tags == Py_None)
        return tags;
    PyObject *own = PyList_GetSlice(args[1], 0, PyList_GET_SIZE(args[1]));
    if (own == NULL) {
        Py_DECREF(tags);
        return NULL;
    }
    PyObject *out = PyTuple_Pack(3, args[0], own, tags);
    Py_DECREF(own);
    Py_DECREF(tags);
    return out;
}

/* the proof's items and tags (a tuple made by make() or grown(), or its like) */
static int
parts(PyObject *proof, PyObject **items, PyObject **tags)
{
    if (!PyTuple_Check(proof) || PyTuple_GET_SIZE(proof) != 3
        || !PyList_CheckExact(*items = PyTuple_GET_ITEM(proof, 1))
        || !PyBytes_CheckExact(*tags = PyTuple_GET_ITEM(proof, 2))) {
        PyErr_SetString(PyExc_TypeError, "a proof is (packed, items: list, tags: bytes)");
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(holds_doc,
"holds(proof, value, /) -> bool\n\n"
"``value`` (a list) starts with the proof's dicts, each the very object and with the\n"
"version tag it had when the proof was made.");

static PyObject *
holds(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *items, *tagged;
    if (nargs != 2 || !PyList_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "holds(proof, value: list)");
        return NULL;
    }
    if (parts(args[0], &items, &tagged) < 0)
        return NULL;
    PyObject *value = args[1];
    Py_ssize_t n = PyList_GET_SIZE(items);
    if (PyBytes_GET_SIZE(tagged) != n * (Py_ssize_t)sizeof(uint64_t)
        || PyList_GET_SIZE(value) < n)
        Py_RETURN_FALSE;
    const uint64_t *tags = (const uint64_t *)PyBytes_AS_STRING(tagged);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        /* (items holds only dicts: stamp() made tags for nothing else) */
        if (PyList_GET_ITEM(value, i) != item
            || ((PyDictObject *)item)->ma_version_tag != tags[i])
            Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

PyDoc_STRVAR(grown_doc,
"grown(proof, packed, added, /) -> tuple[bytes, list, bytes] | None\n\n"
"The proof after the list ``added`` was appended to the proof's items (``packed``: the\n"
"bytes of the whole new list); None when stamp() refuses ``added``.");

static PyObject *
grown(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *items, *tagged;
    if (nargs != 3 || !PyBytes_CheckExact(args[1]) || !PyList_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "grown(proof, packed: bytes, added: list)");
        return NULL;
    }
    if (parts(args[0], &items, &tagged) < 0)
        return NULL;
    PyObject *more = stamp(NULL, args[2]);
    if (more == NULL || more == Py_None)
        return more;
    PyObject *all = PySequence_Concat(items, args[2]);
    if (all == NULL) {
        Py_DECREF(more);
        return NULL;
    }
    PyObject *tags = PyBytes_FromStringAndSize(NULL, PyBytes_GET_SIZE(tagged) + PyBytes_GET_SIZE(more));
    if (tags == NULL) {
        Py_DECREF(all);
        Py_DECREF(more);
        return NULL;
    }
    memcpy(PyBytes_AS_STRING(tags), PyBytes_AS_STRING(tagged), PyBytes_GET_SIZE(tagged));
    memcpy(PyBytes_AS_STRING(tags) + PyBytes_GET_SIZE(tagged), PyBytes_AS_STRING(more),
           PyBytes_GET_SIZE(more));
    Py_DECREF(more);
    PyObject *out = PyTuple_Pack(3, args[1], all, tags);
    Py_DECREF(all);
    Py_DECREF(tags);
    return out;
}

/* the size of the msgpack array header ``p`` starts with; -1: not an array's */
static Py_ssize_t
head_size(const unsigned char *p, Py_ssize_t size)
{
    if (size < 1)
        return -1;
    if (p[0] >= 0x90 && p[0] <= 0x9F)
        return 1;
    if (p[0] == 0xDC)
        return size >= 3 ? 3 : -1;
    if (p[0] == 0xDD)
        return size >= 5 ? 5 : -1;
    return -1;
}

PyDoc_STRVAR(extend_doc,
"extend(before, packed, length, /) -> tuple[bytes, bytes]\n\n"
"``before`` and ``packed`` (msgpack arrays) joined: the array of ``length`` items\n"
"whose first ones are ``before``'s and the rest ``packed``'s, and ``packed``'s items'\n"
"bytes (without its header). ValueError when either is not a msgpack array.");

static PyObject *
extend(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyBytes_CheckExact(args[0]) || !PyBytes_CheckExact(args[1])
        || !PyLong_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "extend(before: bytes, packed: bytes, length: int)");
        return NULL;
    }
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    const unsigned char *t = (const unsigned char *)PyBytes_AS_STRING(args[1]);
    Py_ssize_t bn = PyBytes_GET_SIZE(args[0]), tn = PyBytes_GET_SIZE(args[1]);
    Py_ssize_t bh = head_size(b, bn), th = head_size(t, tn);
    Py_ssize_t length = PyLong_AsSsize_t(args[2]);
    if (length == -1 && PyErr_Occurred())
        return NULL;
    if (bh < 0 || th < 0 || length < 0 || length > 0xFFFFFFFFLL) {
        PyErr_SetString(PyExc_ValueError, "extend(): not a msgpack array");
        return NULL;
    }
    unsigned char head[5];
    Py_ssize_t hn;
    if (length < 16) {
        head[0] = (unsigned char)(0x90 | length);
        hn = 1;
    } else if (length < 0x10000) {
        head[0] = 0xDC;
        head[1] = (unsigned char)(length >> 8);
        head[2] = (unsigned char)length;
        hn = 3;
    } else {
        head[0] = 0xDD;
        head[1] = (unsigned char)(length >> 24);
        head[2] = (unsigned char)(length >> 16);
        head[3] = (unsigned char)(length >> 8);
        head[4] = (unsigned char)length;
        hn = 5;
    }
    PyObject *tail = PyBytes_FromStringAndSize((const char *)t + th, tn - th);
    if (tail == NULL)
        return NULL;
    PyObject *after = PyBytes_FromStringAndSize(NULL, hn + (bn - bh) + (tn - th));
    if (after == NULL) {
        Py_DECREF(tail);
        return NULL;
    }
    char *out = PyBytes_AS_STRING(after);
    memcpy(out, head, hn);
    memcpy(out + hn, b + bh, bn - bh);
    memcpy(out + hn + (bn - bh), t + th, tn - th);
    PyObject *pair = PyTuple_Pack(2, after, tail);
    Py_DECREF(after);
    Py_DECREF(tail);
    return pair;
}

/* the item count of the msgpack array ``p`` starts with; -1: not an array's header */
static Py_ssize_t
array_count(const unsigned char *p, Py_ssize_t size)
{
    Py_ssize_t head = head_size(p, size);
    if (head == 1)
        return p[0] & 0x0F;
    if (head == 3)
        return ((Py_ssize_t)p[1] << 8) | p[2];
    if (head == 5)
        return (Py_ssize_t)(((uint32_t)p[1] << 24) | ((uint32_t)p[2] << 16)
                            | ((uint32_t)p[3] << 8) | p[4]);
    return -1;
}

PyDoc_STRVAR(seal_doc,
"seal(proof, packed, /) -> tuple[bytes, list, bytes] | None\n\n"
"The proof, made (stamped) before its list was packed, tied to the bytes ``packed``:\n"
"``(packed, items, tags)``; None when ``packed`` is not an array of as many items as\n"
"the proof's (the list grew or shrank between the stamp and the pack). An item\n"
"changed between them has another version tag by now: the proof will not hold.");

static PyObject *
seal(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *items, *tags;
    if (nargs != 2 || !PyBytes_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "seal(proof, packed: bytes)");
        return NULL;
    }
    if (parts(args[0], &items, &tags) < 0)
        return NULL;
    if (array_count((const unsigned char *)PyBytes_AS_STRING(args[1]), PyBytes_GET_SIZE(args[1]))
        != PyList_GET_SIZE(items))
        Py_RETURN_NONE;
    return PyTuple_Pack(3, args[1], items, tags);
}

static PyMethodDef methods[] = {
    {"stamp", (PyCFunction)stamp, METH_O, stamp_doc},
    {"make", (PyCFunction)(void (*)(void))make, METH_FASTCALL, make_doc},
    {"holds", (PyCFunction)(void (*)(void))holds, METH_FASTCALL, holds_doc},
    {"grown", (PyCFunction)(void (*)(void))grown, METH_FASTCALL, grown_doc},
    {"extend", (PyCFunction)(void (*)(void))extend, METH_FASTCALL, extend_doc},
    {"seal", (PyCFunction)(void (*)(void))seal, METH_FASTCALL, seal_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "statekeeper.store._stamps",
    "Unchanged old items of a list of flat dicts, by identity and version tag.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__stamps(void)
{
    return PyModule_Create(&module);
}
