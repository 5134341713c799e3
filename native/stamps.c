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
 * A proof keeps no reference to the items (a store caches proofs for up to
 * ``cache_size`` agents: references kept every cached agent's message objects alive
 * after its caller dropped them, ~1.6x the cached bytes; docs/benchmarks.md,
 * "memproof"). It keeps each item's address and version tag. An address can be reused
 * once its dict is freed, but a tag cannot: CPython gives every dict it makes, and
 * every change of a dict's contents, the next value of one 64-bit counter
 * (``DICT_NEXT_VERSION``; 3.11's dictobject.c and ceval.c assign the tag nowhere else),
 * so a dict made at a reused address carries a tag never stamped before. An item is
 * taken for the stamped one only when it is exactly a dict (read before the tag: what
 * lives at a reused address may be anything), at the stamped address, with the stamped
 * tag.
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

/* the bytes of one item's stamp: its address and its version tag */
#define STAMP ((Py_ssize_t)(2 * sizeof(uint64_t)))

static inline int
flat_scalar(PyObject *value)
{
    PyTypeObject *t = Py_TYPE(value);
    return t == &PyUnicode_Type || t == &PyLong_Type || t == &PyFloat_Type
        || t == &PyBool_Type || value == Py_None;
}

PyDoc_STRVAR(stamp_doc,
"stamp(items, /) -> bytes | None\n\n"
"The stamps of the dicts in the list ``items``, in order: 16 bytes each, its address\n"
"and its version tag; None when an item is not exactly a dict or a value of one is not\n"
"exactly a str, int, float, bool or None. No reference to an item is kept.");

static PyObject *
stamp(PyObject *Py_UNUSED(self), PyObject *items)
{
    if (!PyList_CheckExact(items)) {
        PyErr_SetString(PyExc_TypeError, "stamp() takes a list");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(items);
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * STAMP);
    if (out == NULL)
        return NULL;
    uint64_t *stamps = (uint64_t *)PyBytes_AS_STRING(out);
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
        stamps[2 * i] = (uint64_t)(uintptr_t)item;
        stamps[2 * i + 1] = ((PyDictObject *)item)->ma_version_tag;
    }
    return out;
refused:
    Py_DECREF(out);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(make_doc,
"make(packed, items, /) -> tuple[bytes, int, bytes] | None\n\n"
"The proof of the list ``items`` packed as ``packed``: ``(packed, len(items),\n"
"stamp(items))``; None when stamp() refuses them.");

static PyObject *
make(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyBytes_CheckExact(args[0]) || !PyList_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "make(packed: bytes, items: list)");
        return NULL;
    }
    PyObject *stamps = stamp(NULL, args[1]);
    if (stamps == NULL || stamps == Py_None)
        return stamps;
    PyObject *count = PyLong_FromSsize_t(PyBytes_GET_SIZE(stamps) / STAMP);
    if (count == NULL) {
        Py_DECREF(stamps);
        return NULL;
    }
    PyObject *out = PyTuple_Pack(3, args[0], count, stamps);
    Py_DECREF(count);
    Py_DECREF(stamps);
    return out;
}

/* the proof's item count and stamps (a tuple made by make() or grown(), or its like);
   -1 with TypeError when it is not one */
static Py_ssize_t
parts(PyObject *proof, PyObject **stamps)
{
    PyObject *count;
    if (!PyTuple_Check(proof) || PyTuple_GET_SIZE(proof) != 3
        || !PyLong_CheckExact(count = PyTuple_GET_ITEM(proof, 1))
        || !PyBytes_CheckExact(*stamps = PyTuple_GET_ITEM(proof, 2))) {
        PyErr_SetString(PyExc_TypeError, "a proof is (packed, count: int, stamps: bytes)");
        return -1;
    }
    Py_ssize_t n = PyLong_AsSsize_t(count);
    if (n == -1 && PyErr_Occurred())
        return -1;
    if (n < 0 || PyBytes_GET_SIZE(*stamps) != n * STAMP) {
        PyErr_SetString(PyExc_TypeError, "a proof's stamps are 16 bytes an item");
        return -1;
    }
    return n;
}

PyDoc_STRVAR(holds_doc,
"holds(proof, value, /) -> bool\n\n"
"``value`` (a list) starts with the proof's dicts, each the very object and with the\n"
"version tag it had when the proof was made.\n\n"
"The proof keeps no reference to them: an item of ``value`` is taken for the one\n"
"stamped when it is a dict at the stamped address with the stamped version tag.\n"
"CPython gives every dict made and every change of a dict's contents the next value\n"
"of one counter (``DICT_NEXT_VERSION``, never reused), so a dict made since at a\n"
"reused address never carries the tag stamped: the address alone is never trusted.");

static PyObject *
holds(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *stamped;
    if (nargs != 2 || !PyList_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "holds(proof, value: list)");
        return NULL;
    }
    Py_ssize_t n = parts(args[0], &stamped);
    if (n < 0)
        return NULL;
    PyObject *value = args[1];
    if (PyList_GET_SIZE(value) < n)
        Py_RETURN_FALSE;
    const uint64_t *stamps = (const uint64_t *)PyBytes_AS_STRING(stamped);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(value, i);
        /* (the type before the tag: what lives at a reused address may not be a dict) */
        if ((uint64_t)(uintptr_t)item != stamps[2 * i] || !PyDict_CheckExact(item)
            || ((PyDictObject *)item)->ma_version_tag != stamps[2 * i + 1])
            Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

PyDoc_STRVAR(grown_doc,
"grown(proof, packed, added, /) -> tuple[bytes, int, bytes] | None\n\n"
"The proof after the list ``added`` was appended to the proof's items (``packed``: the\n"
"bytes of the whole new list); None when stamp() refuses ``added``.");

static PyObject *
grown(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *stamped;
    if (nargs != 3 || !PyBytes_CheckExact(args[1]) || !PyList_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "grown(proof, packed: bytes, added: list)");
        return NULL;
    }
    Py_ssize_t n = parts(args[0], &stamped);
    if (n < 0)
        return NULL;
    PyObject *more = stamp(NULL, args[2]);
    if (more == NULL || more == Py_None)
        return more;
    Py_ssize_t old = PyBytes_GET_SIZE(stamped), new = PyBytes_GET_SIZE(more);
    PyObject *stamps = PyBytes_FromStringAndSize(NULL, old + new);
    if (stamps == NULL) {
        Py_DECREF(more);
        return NULL;
    }
    memcpy(PyBytes_AS_STRING(stamps), PyBytes_AS_STRING(stamped), old);
    memcpy(PyBytes_AS_STRING(stamps) + old, PyBytes_AS_STRING(more), new);
    Py_DECREF(more);
    PyObject *count = PyLong_FromSsize_t((old + new) / STAMP);
    if (count == NULL) {
        Py_DECREF(stamps);
        return NULL;
    }
    PyObject *out = PyTuple_Pack(3, args[1], count, stamps);
    Py_DECREF(count);
    Py_DECREF(stamps);
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
"seal(proof, packed, /) -> tuple[bytes, int, bytes] | None\n\n"
"The proof, made (stamped) before its list was packed, tied to the bytes ``packed``:\n"
"``(packed, count, stamps)``; None when ``packed`` is not an array of as many items as\n"
"the proof's (the list grew or shrank between the stamp and the pack). An item\n"
"changed between them has another version tag by now: the proof will not hold.");

static PyObject *
seal(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *stamps;
    if (nargs != 2 || !PyBytes_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "seal(proof, packed: bytes)");
        return NULL;
    }
    Py_ssize_t n = parts(args[0], &stamps);
    if (n < 0)
        return NULL;
    if (array_count((const unsigned char *)PyBytes_AS_STRING(args[1]), PyBytes_GET_SIZE(args[1]))
        != n)
        Py_RETURN_NONE;
    return PyTuple_Pack(3, args[1], PyTuple_GET_ITEM(args[0], 1), stamps);
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
    PyObject *m = PyModule_Create(&module);
    /* the proofs' layout: 2 = (packed, count, stamps of 16 bytes an item); store/proofs.py
       takes the pure proof from a build of another layout (a stale .so) */
    if (m != NULL && PyModule_AddIntConstant(m, "LAYOUT", 2) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
