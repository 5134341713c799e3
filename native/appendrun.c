/* A run of stored plain appends (a chat's saves) checked and parsed in one C call.
 *
 * statekeeper.codec._appendrun.append_run(prefix, record_type, events, link, loads)
 *   -> (pointer, values, last link) | None | NotImplemented
 *
 * The same checks, record by record, as ``statekeeper.codec.appends._append_few`` (the
 * Python it stands in for; tests/codec/test_append_native.py holds the two to the same
 * answers): each event row ``(seq, record_type, timestamp, payload, checksum)``
 *   - is stored as its canonical plaintext, JSON, SHA-256 (header 01 00 00), and its
 *     prev link is the link before it (``link``, then each record's own);
 *   - has the whole body of a plain append, from byte 35:
 *     {"ops":[{"op":"add","path":"<pointer>","value":<value>}]}
 *     the pointer without '"', '\' or '$', the value without '$' (no typed value),
 *     the pointer the same in every record (one list);
 *   - has the SHA-256 of its link input (``prefix`` = b"sk-link/1" + the encoded agent
 *     id and record type, the seq and timestamp packed as struct ">qd", the payload)
 *     equal to its stored checksum;
 *   - holds one JSON value, parsed by ``loads`` (orjson.loads).
 * None: a record is not such an append or does not verify (the caller then decodes the
 * run the general way, which says what is wrong and where). NotImplemented: a row this
 * code does not take as it is (not a 5-tuple of int, str, float, bytes, bytes; another
 * record type than ``record_type``; a seq past 64 bits): the caller runs the Python
 * check, which answers as it always did.
 *
 * Why: the Python loop costs ~2.2 us of CPU a record around a ~0.5 us SHA-256 and a
 * ~0.3 us parse (docs/benchmarks.md, "coldchain"). The hash is OpenSSL's (the library
 * Python's hashlib uses), fed in three pieces, nothing joined.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <openssl/evp.h>
#include <string.h>

#define HEAD_LEN 35
#define DIGEST 32
static const char BODY_HEAD[] = "{\"ops\":[{\"op\":\"add\",\"path\":\"";
#define BODY_HEAD_LEN (sizeof(BODY_HEAD) - 1)
static const char VALUE_AT[] = "\",\"value\":";
#define VALUE_AT_LEN (sizeof(VALUE_AT) - 1)
static const char BODY_END[] = "}]}";
#define BODY_END_LEN 3
static const unsigned char SHA_JSON[3] = {1, 0, 0};

static const EVP_MD *sha256_md;

/* the outcome of one record: a value, or why not */
enum { OK = 0, REJECT = 1, UNTAKEN = 2, FAILED = 3 };

static void pack_seq_ts(long long seq, double ts, unsigned char out[16]) {
    unsigned long long s = (unsigned long long)seq, t;
    memcpy(&t, &ts, 8);
    for (int i = 0; i < 8; i++) {
        out[i] = (unsigned char)(s >> (56 - 8 * i));
        out[8 + i] = (unsigned char)(t >> (56 - 8 * i));
    }
}

/* the error a record's parse raised: a refusal (None) when Python's check catches it */
static int refused(void) {
    if (PyErr_ExceptionMatches(PyExc_ValueError) || PyErr_ExceptionMatches(PyExc_TypeError) ||
        PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Clear();
        return REJECT;
    }
    return FAILED;
}

static PyObject *append_run(PyObject *self, PyObject *args) {
    PyObject *prefix, *record_type, *events, *link, *loads;
    if (!PyArg_ParseTuple(args, "SUOSO:append_run", &prefix, &record_type, &events, &link,
                          &loads))
        return NULL;
    if (PyBytes_GET_SIZE(link) != DIGEST || !PyList_CheckExact(events))
        Py_RETURN_NOTIMPLEMENTED;
    if (PyList_GET_SIZE(events) == 0)
        Py_RETURN_NONE;
    /* the rows as they are now, held: ``loads`` is a call out (any callable; a finalizer
     * run by a collection in it can run another thread), after which neither a row nor
     * ``pointer``, inside the first row's payload, may be one the list let go of */
    PyObject *rows = PyList_AsTuple(events);
    if (rows == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(rows);
    PyObject *values = PyList_New(0);
    if (values == NULL) {
        Py_DECREF(rows);
        return NULL;
    }
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (ctx == NULL) {
        Py_DECREF(values);
        Py_DECREF(rows);
        return PyErr_NoMemory();
    }
    unsigned char prev[DIGEST], digest[DIGEST];
    memcpy(prev, PyBytes_AS_STRING(link), DIGEST);
    const char *pointer = NULL;
    Py_ssize_t pointer_len = 0;
    int outcome = OK;
    for (Py_ssize_t i = 0; i < n && outcome == OK; i++) {
        PyObject *row = PyTuple_GET_ITEM(rows, i);
        if (!PyTuple_CheckExact(row) || PyTuple_GET_SIZE(row) != 5) {
            outcome = UNTAKEN;
            break;
        }
        PyObject *seq_obj = PyTuple_GET_ITEM(row, 0), *type_obj = PyTuple_GET_ITEM(row, 1),
                 *ts_obj = PyTuple_GET_ITEM(row, 2), *payload = PyTuple_GET_ITEM(row, 3),
                 *checksum = PyTuple_GET_ITEM(row, 4);
        if (!PyLong_CheckExact(seq_obj) || !PyFloat_CheckExact(ts_obj) ||
            !PyBytes_CheckExact(payload) || !PyBytes_CheckExact(checksum) ||
            !PyUnicode_CheckExact(type_obj)) {
            outcome = UNTAKEN;
            break;
        }
        if (type_obj != record_type && PyUnicode_Compare(type_obj, record_type) != 0) {
            if (PyErr_Occurred())
                outcome = FAILED;
            else
                outcome = UNTAKEN;
            break;
        }
        int overflow = 0;
        long long seq = PyLong_AsLongLongAndOverflow(seq_obj, &overflow);
        if (overflow) {
            outcome = UNTAKEN;
            break;
        }
        const char *p = PyBytes_AS_STRING(payload);
        Py_ssize_t size = PyBytes_GET_SIZE(payload);
        /* header and chain link, then the body's shape */
        if (size < HEAD_LEN + (Py_ssize_t)BODY_HEAD_LEN || memcmp(p, SHA_JSON, 3) != 0 ||
            memcmp(p + 3, prev, DIGEST) != 0 ||
            memcmp(p + HEAD_LEN, BODY_HEAD, BODY_HEAD_LEN) != 0) {
            outcome = REJECT;
            break;
        }
        const char *ptr = p + HEAD_LEN + BODY_HEAD_LEN, *end = p + size;
        const char *q = ptr;
        while (q < end && *q != '"' && *q != '\\' && *q != '$')
            q++;
        if (end - q < (Py_ssize_t)VALUE_AT_LEN || memcmp(q, VALUE_AT, VALUE_AT_LEN) != 0) {
            outcome = REJECT;
            break;
        }
        const char *value = q + VALUE_AT_LEN;
        if (end - value < BODY_END_LEN || memcmp(end - BODY_END_LEN, BODY_END, BODY_END_LEN) != 0 ||
            memchr(value, '$', (size_t)(end - value)) != NULL) {
            outcome = REJECT;
            break;
        }
        if (pointer == NULL) {
            pointer = ptr;
            pointer_len = q - ptr;
        } else if (q - ptr != pointer_len || memcmp(ptr, pointer, (size_t)pointer_len) != 0) {
            outcome = REJECT; /* appends to more than one list */
            break;
        }
        /* the checksum of the link input */
        unsigned char seq_ts[16];
        pack_seq_ts(seq, PyFloat_AS_DOUBLE(ts_obj), seq_ts);
        unsigned int got = 0;
        if (!EVP_DigestInit_ex(ctx, sha256_md, NULL) ||
            !EVP_DigestUpdate(ctx, PyBytes_AS_STRING(prefix), (size_t)PyBytes_GET_SIZE(prefix)) ||
            !EVP_DigestUpdate(ctx, seq_ts, sizeof(seq_ts)) ||
            !EVP_DigestUpdate(ctx, p, (size_t)size) || !EVP_DigestFinal_ex(ctx, digest, &got) ||
            got != DIGEST) {
            PyErr_SetString(PyExc_RuntimeError, "SHA-256 failed");
            outcome = FAILED;
            break;
        }
        if (PyBytes_GET_SIZE(checksum) != DIGEST ||
            memcmp(digest, PyBytes_AS_STRING(checksum), DIGEST) != 0) {
            outcome = REJECT;
            break;
        }
        memcpy(prev, digest, DIGEST);
        /* the value: one JSON value */
        PyObject *text = PyBytes_FromStringAndSize(value, end - BODY_END_LEN - value);
        if (text == NULL) {
            outcome = FAILED;
            break;
        }
        PyObject *parsed = PyObject_CallOneArg(loads, text);
        Py_DECREF(text);
        if (parsed == NULL) {
            outcome = refused();
            break;
        }
        int appended = PyList_Append(values, parsed);
        Py_DECREF(parsed);
        if (appended < 0)
            outcome = FAILED;
    }
    EVP_MD_CTX_free(ctx);
    PyObject *result = NULL;
    if (outcome == OK) {
        PyObject *path = PyUnicode_DecodeUTF8(pointer, pointer_len, "strict");
        if (path == NULL) {
            outcome = refused();
        } else {
            PyObject *last = PyBytes_FromStringAndSize((const char *)prev, DIGEST);
            if (last == NULL) {
                Py_DECREF(path);
                outcome = FAILED;
            } else {
                result = PyTuple_Pack(3, path, values, last);
                Py_DECREF(path);
                Py_DECREF(last);
                if (result == NULL)
                    outcome = FAILED;
            }
        }
    }
    Py_DECREF(values);
    Py_DECREF(rows);
    switch (outcome) {
    case OK:
        return result;
    case REJECT:
        Py_RETURN_NONE;
    case UNTAKEN:
        Py_RETURN_NOTIMPLEMENTED;
    default:
        return NULL;
    }
}

static PyMethodDef methods[] = {
    {"append_run", append_run, METH_VARARGS,
     "append_run(prefix, record_type, events, link, loads) -> (pointer, values, link) | None"
     " | NotImplemented: a run of stored plain appends checked and parsed"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_appendrun", NULL, -1, methods};

PyMODINIT_FUNC PyInit__appendrun(void) {
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
    sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL); /* fetched once, not at each record */
#else
    sha256_md = EVP_sha256();
#endif
    if (sha256_md == NULL) {
        PyErr_SetString(PyExc_ImportError, "no SHA-256 in OpenSSL");
        return NULL;
    }
    return PyModule_Create(&module);
}
