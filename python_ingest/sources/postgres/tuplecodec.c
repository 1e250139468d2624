/* The PostgreSQL tap's per-row work in C: the replication stream's messages read off libpq
 * (read_copy, for wire.py), and a pgoutput TupleData straight to its Kafka key and Avro
 * message (encode), as fastpath.py's generated Python encoder does (that one is the
 * reference: the tests compare both byte for byte). Built by native.py (make setup); without
 * a C compiler the tap reads and encodes in Python alone.
 *
 * encode(plan, buf, at, ref, tail) -> (key, message) | whatever plan's Python encoder returns;
 * ref is the change's ref key (an int), tail the envelope's bytes after it.
 * Whenever a row holds anything this file does not handle exactly as the Python encoder (a
 * NULL key, a TOASTed value, a numeric beyond 18 digits or NaN, an integer beyond 64 bits,
 * invalid UTF-8, a converter that raises, a message near the limit...), it hands the whole row
 * to the Python encoder, which decides: this file never returns None itself.
 *
 * plan: (header: bytes, codes: bytes, scales: bytes, key_column: int, lasts: tuple of lists,
 *        converters: tuple, python_encode, max_bytes: int, empty_key: bytes)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* the column kinds of fastpath.py (TEXT, LONG, DECIMAL, FLOAT, DOUBLE, BOOL, CONVERTED_LONG) */
enum { TEXT = 0, LONG = 1, DECIMAL = 2, FLOAT = 3, DOUBLE = 4, BOOL = 5, CONVERTED_LONG = 6 };

static inline char *put_varint(char *out, uint64_t n) {
    while (n >= 128) {
        *out++ = (char)((n & 127) | 128);
        n >>= 7;
    }
    *out++ = (char)n;
    return out;
}

static inline uint64_t zigzag(int64_t v) {
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

/* "-123" / "123" (the server's integer text): 0 when it is anything else or beyond int64 */
static int parse_long(const unsigned char *p, Py_ssize_t n, int64_t *out) {
    int negative = 0;
    uint64_t v = 0;
    if (n > 0 && p[0] == '-') {
        negative = 1;
        p++;
        n--;
    }
    if (n < 1 || n > 19)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return 0;
        v = v * 10 + (uint64_t)(p[i] - '0');
    }
    if (negative) {
        if (v > (uint64_t)INT64_MAX + 1)
            return 0;
        *out = (int64_t)(0 - v);
    } else {
        if (v > (uint64_t)INT64_MAX)
            return 0;
        *out = (int64_t)v;
    }
    return 1;
}

/* numeric(p, s)'s text with exactly s digits after the point (none and no point when s is 0),
 * at most 18 digits: its unscaled value */
static int parse_decimal(const unsigned char *p, Py_ssize_t n, int scale, int64_t *out) {
    int negative = 0, digits = 0;
    int64_t v = 0;
    if (n > 0 && p[0] == '-') {
        negative = 1;
        p++;
        n--;
    }
    Py_ssize_t point = scale ? n - scale - 1 : n;  /* where the point must be */
    if (point < 1)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i == point && scale) {
            if (p[i] != '.')
                return 0;
            continue;
        }
        if (p[i] < '0' || p[i] > '9' || ++digits > 18)
            return 0;
        v = v * 10 + (p[i] - '0');
    }
    *out = negative ? -v : v;
    return 1;
}

/* Python's v.to_bytes((v.bit_length() + 8) // 8, "big", signed=True) */
static int decimal_bytes(int64_t v, unsigned char *out) {
    uint64_t magnitude = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    int bits = 0;
    while (magnitude >> bits && bits < 64)
        bits++;
    int length = (bits + 8) / 8;
    for (int i = length - 1; i >= 0; i--) {
        out[i] = (unsigned char)(v & 0xff);
        v >>= 8;  /* arithmetic: the sign extends */
    }
    return length;
}

static int valid_utf8(const char *p, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        if ((unsigned char)p[i] >= 128) {
            PyObject *text = PyUnicode_DecodeUTF8(p, n, "strict");
            if (text == NULL) {
                PyErr_Clear();
                return 0;
            }
            Py_DECREF(text);
            return 1;
        }
    return 1;
}

/* a float's or double's text as Python's float() reads it (the server's text: digits, or
 * NaN / Infinity / -Infinity) */
static int parse_double(const char *p, Py_ssize_t n, double *out) {
    char text[64];
    char *end = NULL;
    if (n < 1 || n >= (Py_ssize_t)sizeof(text))
        return 0;
    memcpy(text, p, (size_t)n);
    text[n] = 0;
    *out = PyOS_string_to_double(text, &end, NULL);
    if (*out == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return end == text + n;
}

/* a converted value's (date, timestamp) Avro bytes, by the column's last text or its converter
 * (the Python encoder's last<i> cache, the same list): 0 when the Python encoder must decide */
static PyObject *converted(PyObject *last, PyObject *converter, const char *p, Py_ssize_t n) {
    PyObject *raw = PyList_GET_ITEM(last, 0);
    if (PyBytes_Check(raw) && PyBytes_GET_SIZE(raw) == n &&
            memcmp(PyBytes_AS_STRING(raw), p, (size_t)n) == 0) {
        PyObject *encoded = PyList_GET_ITEM(last, 1);
        Py_INCREF(encoded);
        return encoded;
    }
    PyObject *text = PyUnicode_DecodeUTF8(p, n, "strict");
    if (text == NULL) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *value = PyObject_CallOneArg(converter, text);
    Py_DECREF(text);
    if (value == NULL || !PyLong_Check(value)) {
        PyErr_Clear();
        Py_XDECREF(value);
        return NULL;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    Py_DECREF(value);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return NULL;
    }
    char bytes[11];
    bytes[0] = 2;
    char *end = put_varint(bytes + 1, zigzag(v));
    PyObject *encoded = PyBytes_FromStringAndSize(bytes, end - bytes);
    PyObject *new_raw = PyBytes_FromStringAndSize(p, n);
    if (encoded == NULL || new_raw == NULL) {
        PyErr_Clear();
        Py_XDECREF(encoded);
        Py_XDECREF(new_raw);
        return NULL;
    }
    PyList_SetItem(last, 1, encoded);  /* steals; as the Python encoder: [text, bytes] */
    Py_INCREF(encoded);
    PyList_SetItem(last, 0, new_raw);
    return encoded;
}

static PyObject *python_encode(PyObject *plan, PyObject *const *args) {
    return PyObject_Vectorcall(PyTuple_GET_ITEM(plan, 6), args + 1, 4, NULL);
}

static PyObject *encode(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 5 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != 9 ||
            !PyBytes_Check(args[1]) || !PyLong_Check(args[3]) || !PyBytes_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "encode(plan, buf, at, ref, tail)");
        return NULL;
    }
    PyObject *plan = args[0];
    PyObject *header = PyTuple_GET_ITEM(plan, 0);
    PyObject *codes_obj = PyTuple_GET_ITEM(plan, 1);
    const unsigned char *codes = (const unsigned char *)PyBytes_AS_STRING(codes_obj);
    const unsigned char *scales = (const unsigned char *)PyBytes_AS_STRING(
        PyTuple_GET_ITEM(plan, 2));
    Py_ssize_t key_column = PyLong_AsSsize_t(PyTuple_GET_ITEM(plan, 3));
    PyObject *lasts = PyTuple_GET_ITEM(plan, 4);
    PyObject *converters = PyTuple_GET_ITEM(plan, 5);
    Py_ssize_t max_bytes = PyLong_AsSsize_t(PyTuple_GET_ITEM(plan, 7));
    PyObject *empty_key = PyTuple_GET_ITEM(plan, 8);
    Py_ssize_t columns = PyBytes_GET_SIZE(codes_obj);

    const char *buf = PyBytes_AS_STRING(args[1]);
    Py_ssize_t size = PyBytes_GET_SIZE(args[1]);
    Py_ssize_t at = PyLong_AsSsize_t(args[2]);
    unsigned long long ref = PyLong_AsUnsignedLongLong(args[3]);  /* the ref key itself */
    if (at < 0 || at + 2 > size || PyErr_Occurred() || ref >> 63) {
        PyErr_Clear();
        return python_encode(plan, args);
    }
    if ((Py_ssize_t)(int16_t)(((unsigned char)buf[at] << 8) | (unsigned char)buf[at + 1])
            != columns)
        return python_encode(plan, args);
    at += 2;

    Py_ssize_t bound = PyBytes_GET_SIZE(header) + (size - at) + columns * 11 + 10 +
                       PyBytes_GET_SIZE(args[4]);
    PyObject *message = PyBytes_FromStringAndSize(NULL, bound);
    if (message == NULL)
        return NULL;
    char *out = PyBytes_AS_STRING(message);
    memcpy(out, PyBytes_AS_STRING(header), (size_t)PyBytes_GET_SIZE(header));
    out += PyBytes_GET_SIZE(header);
    const char *key = NULL;
    Py_ssize_t key_size = 0;

    for (Py_ssize_t i = 0; i < columns; i++) {
        if (at >= size)
            goto python;
        char kind = buf[at];
        if (kind == 'n') {
            if (i == key_column)
                goto python;
            *out++ = 0;
            at += 1;
            continue;
        }
        if (kind != 't' || at + 5 > size)
            goto python;
        const unsigned char *q = (const unsigned char *)buf + at + 1;
        int32_t n = (int32_t)(((uint32_t)q[0] << 24) | ((uint32_t)q[1] << 16) |
                              ((uint32_t)q[2] << 8) | (uint32_t)q[3]);
        at += 5;
        if (n < 0 || at + n > size)
            goto python;
        const char *raw = buf + at;
        at += n;
        if (i == key_column) {
            key = raw;
            key_size = n;
        }
        int64_t v;
        double d;
        switch (codes[i]) {
        case TEXT:
            if (!valid_utf8(raw, n))
                goto python;
            *out++ = 2;
            out = put_varint(out, (uint64_t)n << 1);
            memcpy(out, raw, (size_t)n);
            out += n;
            break;
        case LONG:
            if (!parse_long((const unsigned char *)raw, n, &v))
                goto python;
            *out++ = 2;
            out = put_varint(out, zigzag(v));
            break;
        case DECIMAL: {
            unsigned char bytes[9];
            if (!parse_decimal((const unsigned char *)raw, n, scales[i], &v))
                goto python;
            int length = decimal_bytes(v, bytes);
            *out++ = 2;
            *out++ = (char)(length << 1);
            memcpy(out, bytes, (size_t)length);
            out += length;
            break;
        }
        case DOUBLE:
            if (!parse_double(raw, n, &d))
                goto python;
            *out++ = 2;
            if (PyFloat_Pack8(d, out, 1) < 0) {
                PyErr_Clear();
                goto python;
            }
            out += 8;
            break;
        case FLOAT:
            if (!parse_double(raw, n, &d))
                goto python;
            *out++ = 2;
            if (PyFloat_Pack4(d, out, 1) < 0) {  /* OverflowError, as struct.pack's */
                PyErr_Clear();
                goto python;
            }
            out += 4;
            break;
        case BOOL:
            *out++ = 2;
            *out++ = (n == 1 && raw[0] == 't') ? 1 : 0;
            break;
        case CONVERTED_LONG: {
            PyObject *encoded = converted(PyTuple_GET_ITEM(lasts, i),
                                          PyTuple_GET_ITEM(converters, i), raw, n);
            if (encoded == NULL)
                goto python;
            memcpy(out, PyBytes_AS_STRING(encoded), (size_t)PyBytes_GET_SIZE(encoded));
            out += PyBytes_GET_SIZE(encoded);
            Py_DECREF(encoded);
            break;
        }
        default:
            goto python;
        }
    }
    if (key == NULL)
        goto python;
    /* '' or only the empty-key marker's bytes: the general path's row_key_text decides */
    Py_ssize_t k = 0;
    const char *marker = PyBytes_AS_STRING(empty_key);
    while (k < key_size && memchr(marker, key[k], (size_t)PyBytes_GET_SIZE(empty_key)))
        k++;
    if (k == key_size)
        goto python;
    out = put_varint(out, ref << 1);  /* an Avro long, never negative: zigzag is a shift */
    memcpy(out, PyBytes_AS_STRING(args[4]), (size_t)PyBytes_GET_SIZE(args[4]));
    out += PyBytes_GET_SIZE(args[4]);
    Py_ssize_t length = out - PyBytes_AS_STRING(message);
    if (key_size + length > max_bytes)
        goto python;
    if (_PyBytes_Resize(&message, length) < 0)
        return NULL;
    PyObject *key_bytes = PyBytes_FromStringAndSize(key, key_size);
    if (key_bytes == NULL) {
        Py_DECREF(message);
        return NULL;
    }
    PyObject *found = PyTuple_New(2);
    if (found == NULL) {
        Py_DECREF(message);
        Py_DECREF(key_bytes);
        return NULL;
    }
    PyTuple_SET_ITEM(found, 0, key_bytes);
    PyTuple_SET_ITEM(found, 1, message);
    return found;

python:
    Py_DECREF(message);
    return python_encode(plan, args);
}

/* read_copy(conn, get_copy_data, free_mem, consume_input, limit): wire.py's reading loop over
 * libpq (the functions' addresses as psycopg2's libpq has them), for a replication stream in
 * CopyBoth mode: (payloads, wal_end, other, status). payloads: the XLogData messages' data
 * (their 25-byte header off), wal_end: the server's WAL end in the last of them (0: none),
 * other: the first message that is not XLogData (a keepalive, for wire.py to answer), status:
 * 0 nothing more is waiting, 1 ``limit`` reached, 2 ``other`` stopped it, -1 / -2
 * PQgetCopyData's end of stream / error, -3 PQconsumeInput failed. */
typedef int (*get_copy_data_t)(void *, char **, int);
typedef void (*free_mem_t)(void *);
typedef int (*consume_input_t)(void *);

static PyObject *read_copy(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "read_copy(conn, get_copy_data, free_mem, consume_input, limit)");
        return NULL;
    }
    void *conn = PyLong_AsVoidPtr(args[0]);
    get_copy_data_t get = (get_copy_data_t)PyLong_AsVoidPtr(args[1]);
    free_mem_t free_mem = (free_mem_t)PyLong_AsVoidPtr(args[2]);
    consume_input_t consume = (consume_input_t)PyLong_AsVoidPtr(args[3]);
    Py_ssize_t limit = PyLong_AsSsize_t(args[4]);
    if (PyErr_Occurred())
        return NULL;
    if (conn == NULL || get == NULL || free_mem == NULL || consume == NULL) {
        PyErr_SetString(PyExc_ValueError, "read_copy: a NULL connection or function");
        return NULL;
    }
    PyObject *payloads = PyList_New(0);
    if (payloads == NULL)
        return NULL;
    PyObject *other = NULL;
    unsigned long long wal_end = 0;
    int status = 1, consumed = 0;
    while (PyList_GET_SIZE(payloads) < limit) {
        char *buffer = NULL;
        int size = get(conn, &buffer, 1);
        if (size > 0) {
            consumed = 1;
            if (buffer[0] == 'w' && size >= 25) {
                const unsigned char *q = (const unsigned char *)buffer + 9;
                wal_end = 0;
                for (int i = 0; i < 8; i++)
                    wal_end = (wal_end << 8) | q[i];
                PyObject *payload = PyBytes_FromStringAndSize(buffer + 25, size - 25);
                free_mem(buffer);
                if (payload == NULL || PyList_Append(payloads, payload) < 0) {
                    Py_XDECREF(payload);
                    Py_DECREF(payloads);
                    return NULL;
                }
                Py_DECREF(payload);
                continue;
            }
            other = PyBytes_FromStringAndSize(buffer, size);
            free_mem(buffer);
            if (other == NULL) {
                Py_DECREF(payloads);
                return NULL;
            }
            status = 2;
            break;
        }
        if (size == 0) {
            if (consumed) {
                status = 0;
                break;
            }
            if (!consume(conn)) {
                status = -3;
                break;
            }
            consumed = 1;
            continue;
        }
        status = size < -1 ? -2 : -1;
        break;
    }
    if (other == NULL) {
        other = Py_None;
        Py_INCREF(other);
    }
    return Py_BuildValue("(NKNi)", payloads, wal_end, other, status);
}

static PyMethodDef methods[] = {
    {"read_copy", (PyCFunction)(void (*)(void))read_copy, METH_FASTCALL,
     "read_copy(conn, get_copy_data, free_mem, consume_input, limit): "
     "(payloads, wal_end, other, status)"},
    {"encode", (PyCFunction)(void (*)(void))encode, METH_FASTCALL,
     "encode(plan, buf, at, ref, tail): (key, message), or the plan's Python encoder's answer"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tuplecodec", NULL, -1, methods};

PyMODINIT_FUNC PyInit__tuplecodec(void) {
    return PyModule_Create(&module);
}
