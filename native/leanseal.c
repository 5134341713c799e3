/*
 * statekeeper.store._leanseal: a lean keyed append's record built and sealed in one C
 * call (measurement prototype, issue 12). ``Sealer(plain_header, packed_header,
 * smallest, blake3_from, max_depth, pool, factory)``; ``sealer.seal(agent_id,
 * record_type, seq, timestamp, ops_json, key, prev)`` is ``(payload, checksum, link,
 * tag)`` exactly as store/lean.py's body_around + Codec.compressed_sealer +
 * _unkeyed_tag make them, or None when the record is not its case (a body of
 * blake3_from bytes or more, a "$t" in it, a depth bound not met, a key or name that
 * is not plain ASCII without escapes): the caller then makes it in Python.
 * The compression is the codec's own zstandard compressor (taken from ``pool``, put
 * back after), so the compressed bytes are the ones Python makes.
 */
#define PY_SSIZE_T_CLEAN
#define OPENSSL_API_COMPAT 0x10100000L
#include <Python.h>
#include <openssl/sha.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    PyObject *plain_header; /* bytes, 3 */
    PyObject *packed_header;
    Py_ssize_t smallest;
    Py_ssize_t blake3_from;
    Py_ssize_t max_depth;
    PyObject *pool;    /* list of idle compressors */
    PyObject *factory; /* callable: a new compressor */
} Sealer;

static PyObject *str_compress;

static void
put_be32(unsigned char *p, uint32_t v)
{
    p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
}

static void
put_be64(unsigned char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) { p[i] = v & 0xff; v >>= 8; }
}

/* a plain ASCII key with nothing JSON escapes: its bytes, else NULL */
static const char *
plain_ascii(PyObject *s, Py_ssize_t *n)
{
    if (!PyUnicode_IS_ASCII(s))
        return NULL;
    const char *p = (const char *)PyUnicode_1BYTE_DATA(s);
    Py_ssize_t len = PyUnicode_GET_LENGTH(s);
    for (Py_ssize_t i = 0; i < len; i++) {
        unsigned char c = p[i];
        if (c < 0x20 || c == '"' || c == '\\')
            return NULL;
    }
    *n = len;
    return p;
}

static PyObject *
Sealer_seal(Sealer *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "seal() takes 7 arguments");
        return NULL;
    }
    PyObject *agent = args[0], *rtype = args[1], *ops = args[4], *key = args[5],
             *prev = args[6];
    if (!PyUnicode_Check(agent) || !PyUnicode_Check(rtype) || !PyBytes_Check(ops)
        || !PyBytes_Check(prev) || !(key == Py_None || PyUnicode_Check(key))) {
        PyErr_SetString(PyExc_TypeError, "seal(): bad argument types");
        return NULL;
    }
    long long seq = PyLong_AsLongLong(args[2]);
    if (seq == -1 && PyErr_Occurred())
        return NULL;
    double ts = PyFloat_AsDouble(args[3]);
    if (ts == -1.0 && PyErr_Occurred())
        return NULL;
    Py_ssize_t alen, tlen, klen = 0;
    const char *a = PyUnicode_AsUTF8AndSize(agent, &alen);
    if (a == NULL) { PyErr_Clear(); Py_RETURN_NONE; }  /* surrogates: Python's way */
    const char *t = PyUnicode_AsUTF8AndSize(rtype, &tlen);
    if (t == NULL) { PyErr_Clear(); Py_RETURN_NONE; }
    const char *k = NULL;
    if (key != Py_None && (k = plain_ascii(key, &klen)) == NULL)
        Py_RETURN_NONE;
    const char *o = PyBytes_AS_STRING(ops);
    Py_ssize_t olen = PyBytes_GET_SIZE(ops);
    Py_ssize_t blen = 7 + olen + 1 + (key == Py_None ? 0 : 7 + klen + 2);
    if (blen >= self->blake3_from)
        Py_RETURN_NONE;
    /* the body: {"ops":<ops>,"key":"<key>"} */
    PyObject *body = PyBytes_FromStringAndSize(NULL, blen);
    if (body == NULL)
        return NULL;
    char *b = PyBytes_AS_STRING(body), *w = b;
    memcpy(w, "{\"ops\":", 7); w += 7;
    memcpy(w, o, olen); w += olen;
    if (key != Py_None) {
        memcpy(w, ",\"key\":\"", 8); w += 8;
        memcpy(w, k, klen); w += klen;
        *w++ = '"';
    }
    *w++ = '}';
    Py_ssize_t deep = 0;
    for (Py_ssize_t i = 0; i < blen; i++) {
        char c = b[i];
        if (c == '$' && i >= 1 && i + 2 < blen && b[i - 1] == '"' && b[i + 1] == 't'
            && b[i + 2] == '"') {
            Py_DECREF(body);
            Py_RETURN_NONE;
        }
        deep += (c == '/' || c == '{' || c == '[');
    }
    if (blen + 2 > self->max_depth && deep + 2 > self->max_depth) {
        Py_DECREF(body);
        Py_RETURN_NONE;
    }
    /* the link: sha256("sk-link/1" names seq_ts plain_header prev body) */
    unsigned char head[8], st[16], link[32];
    SHA256_CTX c;
    SHA256_Init(&c);
    SHA256_Update(&c, "sk-link/1", 9);
    put_be32(head, (uint32_t)alen); SHA256_Update(&c, head, 4); SHA256_Update(&c, a, alen);
    put_be32(head, (uint32_t)tlen); SHA256_Update(&c, head, 4); SHA256_Update(&c, t, tlen);
    uint64_t tsbits;
    memcpy(&tsbits, &ts, 8);
    put_be64(st, (uint64_t)seq); put_be64(st + 8, tsbits);
    SHA256_Update(&c, st, 16);
    SHA256_Update(&c, PyBytes_AS_STRING(self->plain_header), 3);
    SHA256_Update(&c, PyBytes_AS_STRING(prev), PyBytes_GET_SIZE(prev));
    SHA256_Update(&c, b, blen);
    SHA256_Final(link, &c);
    PyObject *payload = NULL, *checksum = NULL;
    Py_ssize_t plen = PyBytes_GET_SIZE(prev);
    if (blen >= self->smallest) {
        PyObject *comp;
        Py_ssize_t n = PyList_GET_SIZE(self->pool);
        if (n > 0) {
            comp = PyList_GET_ITEM(self->pool, n - 1);
            Py_INCREF(comp);
            if (PyList_SetSlice(self->pool, n - 1, n, NULL) < 0) {
                Py_DECREF(comp); Py_DECREF(body); return NULL;
            }
        } else if ((comp = PyObject_CallNoArgs(self->factory)) == NULL) {
            Py_DECREF(body);
            return NULL;
        }
        PyObject *out = PyObject_CallMethodOneArg(comp, str_compress, body);
        int back = out == NULL ? 0 : PyList_Append(self->pool, comp);
        Py_DECREF(comp);
        if (out == NULL || back < 0 || !PyBytes_Check(out)) {
            Py_XDECREF(out); Py_DECREF(body);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "compress() did not return bytes");
            return NULL;
        }
        Py_ssize_t clen = PyBytes_GET_SIZE(out);
        if (clen < blen) {
            payload = PyBytes_FromStringAndSize(NULL, 3 + plen + clen);
            if (payload != NULL) {
                char *p = PyBytes_AS_STRING(payload);
                memcpy(p, PyBytes_AS_STRING(self->packed_header), 3);
                memcpy(p + 3, PyBytes_AS_STRING(prev), plen);
                memcpy(p + 3 + plen, PyBytes_AS_STRING(out), clen);
                unsigned char sum[32];
                SHA256_CTX s;
                SHA256_Init(&s);
                SHA256_Update(&s, "sk-stored/1", 11);
                SHA256_Update(&s, link, 32);
                SHA256_Update(&s, p, 3 + plen + clen);
                SHA256_Final(sum, &s);
                checksum = PyBytes_FromStringAndSize((const char *)sum, 32);
            }
        }
        Py_DECREF(out);
        if (payload != NULL && checksum == NULL) {
            Py_DECREF(payload); Py_DECREF(body); return NULL;
        }
        if (payload == NULL && PyErr_Occurred()) {
            Py_DECREF(body); return NULL;
        }
    }
    PyObject *linkb = PyBytes_FromStringAndSize((const char *)link, 32);
    unsigned char tagraw[34] = {1, 0};
    memcpy(tagraw + 2, link, 32);
    PyObject *tag = PyBytes_FromStringAndSize((const char *)tagraw, 34);
    if (payload == NULL) {
        payload = PyBytes_FromStringAndSize(NULL, 3 + plen + blen);
        if (payload != NULL) {
            char *p = PyBytes_AS_STRING(payload);
            memcpy(p, PyBytes_AS_STRING(self->plain_header), 3);
            memcpy(p + 3, PyBytes_AS_STRING(prev), plen);
            memcpy(p + 3 + plen, b, blen);
        }
        checksum = linkb;
        Py_XINCREF(checksum);
    }
    Py_DECREF(body);
    if (payload == NULL || checksum == NULL || linkb == NULL || tag == NULL) {
        Py_XDECREF(payload); Py_XDECREF(checksum); Py_XDECREF(linkb); Py_XDECREF(tag);
        return NULL;
    }
    PyObject *res = PyTuple_New(4);
    if (res == NULL) {
        Py_DECREF(payload); Py_DECREF(checksum); Py_DECREF(linkb); Py_DECREF(tag);
        return NULL;
    }
    PyTuple_SET_ITEM(res, 0, payload);
    PyTuple_SET_ITEM(res, 1, checksum);
    PyTuple_SET_ITEM(res, 2, linkb);
    PyTuple_SET_ITEM(res, 3, tag);
    return res;
}

static int
Sealer_init(Sealer *self, PyObject *args, PyObject *kw)
{
    PyObject *plain, *packed, *pool, *factory;
    Py_ssize_t smallest, b3, depth;
    if (!PyArg_ParseTuple(args, "SSnnnO!O", &plain, &packed, &smallest, &b3, &depth,
                          &PyList_Type, &pool, &factory))
        return -1;
    if (PyBytes_GET_SIZE(plain) != 3 || PyBytes_GET_SIZE(packed) != 3) {
        PyErr_SetString(PyExc_ValueError, "headers are 3 bytes");
        return -1;
    }
    Py_INCREF(plain); Py_INCREF(packed); Py_INCREF(pool); Py_INCREF(factory);
    Py_XSETREF(self->plain_header, plain);
    Py_XSETREF(self->packed_header, packed);
    Py_XSETREF(self->pool, pool);
    Py_XSETREF(self->factory, factory);
    self->smallest = smallest;
    self->blake3_from = b3;
    self->max_depth = depth;
    return 0;
}

static void
Sealer_dealloc(Sealer *self)
{
    Py_XDECREF(self->plain_header);
    Py_XDECREF(self->packed_header);
    Py_XDECREF(self->pool);
    Py_XDECREF(self->factory);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Sealer_methods[] = {
    {"seal", (PyCFunction)(void (*)(void))Sealer_seal, METH_FASTCALL,
     "seal(agent_id, record_type, seq, timestamp, ops_json, key, prev)"},
    {NULL},
};

static PyTypeObject SealerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "statekeeper.store._leanseal.Sealer",
    .tp_basicsize = sizeof(Sealer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Sealer_init,
    .tp_dealloc = (destructor)Sealer_dealloc,
    .tp_methods = Sealer_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_leanseal", NULL, -1, NULL,
};

PyMODINIT_FUNC
PyInit__leanseal(void)
{
    if (PyType_Ready(&SealerType) < 0)
        return NULL;
    str_compress = PyUnicode_InternFromString("compress");
    if (str_compress == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&SealerType);
    if (PyModule_AddObject(m, "Sealer", (PyObject *)&SealerType) < 0) {
        Py_DECREF(&SealerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
