/* Fast path of tfbneck_plugin.wire: scan a serialized XLine and decode its events.
 *
 * The pure-Python/numpy path (wire.py) does the same work; this file only makes it one
 * pass in C (about 20 ns per event instead of ~1 us). It is built as an optional
 * extension: when it cannot be compiled, wire.py is used and results are identical
 * (tests/test_wire.py compares both).
 *
 * Wire format: https://protobuf.dev/programming-guides/encoding/
 * XLine / XEvent / XStat field numbers: tsl/profiler/protobuf/xplane.proto.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct { const uint8_t *p; const uint8_t *end; int bad; } Reader;

static uint64_t read_varint(Reader *r) {
    uint64_t v = 0;
    int shift = 0;
    while (r->p < r->end) {
        uint8_t b = *r->p++;
        if (shift < 64) v |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) return v;
        shift += 7;
        if (shift > 63) { r->bad = 1; return 0; }
    }
    r->bad = 1; /* ran off the end */
    return 0;
}

/* Skip one field of wire type wt; returns 0 on success. */
static int skip_field(Reader *r, int wt) {
    uint64_t len;
    switch (wt) {
    case 0: read_varint(r); return r->bad;
    case 1: if (r->end - r->p < 8) return 1; r->p += 8; return 0;
    case 2: len = read_varint(r); if (r->bad || len > (uint64_t)(r->end - r->p)) return 1; r->p += len; return 0;
    case 5: if (r->end - r->p < 4) return 1; r->p += 4; return 0;
    default: return 1;
    }
}

/* Count the events (field events_field, wire type 2) of a serialized XLine, up to the first
 * malformed field if any (scan_line's second pass then stops there and says where). */
static Py_ssize_t count_events(const uint8_t *base, Py_ssize_t len, int events_field) {
    Reader r = {base, base + len, 0};
    Py_ssize_t n = 0;
    while (r.p < r.end) {
        uint64_t key = read_varint(&r);
        if (r.bad) break;
        int wt = (int)(key & 7);
        if (skip_field(&r, wt)) break;
        if ((key >> 3) == (uint64_t)events_field && wt == 2) n++;
    }
    return n;
}

static PyObject *new_column(Py_ssize_t n, size_t width, void **data) {
    PyObject *col = PyByteArray_FromStringAndSize(NULL, n * (Py_ssize_t)width);
    if (col) *data = PyByteArray_AS_STRING(col);
    return col;
}

/* A field of a line's header (not an event), kept for the dict scan_line returns: a varint's
 * value, or where a length-delimited value lies in the line. */
typedef struct { uint64_t field, value; Py_ssize_t start, len; int wt; } HeaderField;
typedef struct { HeaderField *items; Py_ssize_t n, cap; } Headers;

static int add_header(Headers *h, HeaderField f) {
    if (h->n == h->cap) {
        Py_ssize_t cap = h->cap ? 2 * h->cap : 8;
        HeaderField *items = (HeaderField *)PyMem_RawRealloc(h->items, (size_t)cap * sizeof(HeaderField));
        if (!items) return -1;
        h->items = items;
        h->cap = cap;
    }
    h->items[h->n++] = f;
    return 0;
}

typedef struct { int32_t *ev_start, *ev_end; int64_t *mid, *off, *dur; } Columns;

/* scan_line's second pass, on memory only (no Python object, so without the GIL): fill the
 * columns of at most total events and list the header fields. Returns 0, 1 for malformed bytes
 * (*bad_at: where), -1 out of memory. */
static int fill_line(const uint8_t *base, Py_ssize_t size, int events_field, Py_ssize_t total, Columns c,
                     Headers *hdr, Py_ssize_t *bad_at) {
    Reader r = {base, base + size, 0};
    Py_ssize_t n = 0;
    while (r.p < r.end) {
        uint64_t key = read_varint(&r);
        if (r.bad) goto bad;
        uint64_t field = key >> 3;
        int wt = (int)(key & 7);
        if (field == (uint64_t)events_field && wt == 2) {
            uint64_t len = read_varint(&r);
            if (r.bad || len > (uint64_t)(r.end - r.p) || n >= total) goto bad;
            int64_t rec[4] = {0, 0, 0, 0}; /* rec[1..3]: fields 1..3 */
            Reader e = {r.p, r.p + len, 0};
            while (e.p < e.end) {
                uint64_t k = read_varint(&e);
                if (e.bad) break;
                uint64_t f = k >> 3;
                int w = (int)(k & 7);
                if (f > 3) break; /* fields are written in number order: 1-3 come first */
                if (w == 0) {
                    uint64_t v = read_varint(&e);
                    if (e.bad) break;
                    if (f > 0) rec[f] = (int64_t)v;
                } else if (skip_field(&e, w)) {
                    break;
                }
            }
            c.ev_start[n] = (int32_t)(r.p - base);
            c.ev_end[n] = (int32_t)(r.p - base + (Py_ssize_t)len);
            c.mid[n] = rec[1];
            c.off[n] = rec[2];
            c.dur[n] = rec[3];
            r.p += len;
            n++;
            continue;
        }
        /* a header field of the line: keep varints and length-delimited values */
        HeaderField h = {field, 0, 0, 0, wt};
        if (wt == 0) {
            h.value = read_varint(&r);
            if (r.bad) goto bad;
        } else if (wt == 2) {
            uint64_t len = read_varint(&r);
            if (r.bad || len > (uint64_t)(r.end - r.p)) goto bad;
            h.start = r.p - base;
            h.len = (Py_ssize_t)len;
            r.p += len;
        } else {
            if (skip_field(&r, wt)) goto bad;
            continue;
        }
        if (add_header(hdr, h) < 0) return -1;
    }
    return 0;
bad:
    *bad_at = r.p - base;
    return 1;
}

/* scan_line(data: bytes, events_field: int)
 *   -> (fields: dict, ev_start, ev_end, metadata_id, offset_ps, duration_ps)
 * Each column is a bytearray of n values: ev_start/ev_end (int32) delimit each event's
 * payload in data; metadata_id, offset_ps, duration_ps (int64) are fields 1, 2, 3 of the
 * XEvent (0 when absent). One pass counts the events, a second fills the columns, so each
 * column is allocated once at its final size. Both passes run without the GIL: threads
 * decode lines side by side (xspace.decode_space). Raises ValueError when the bytes are
 * malformed or the line is 2 GiB or more (protobuf's limit for one message). */
static PyObject *scan_line(PyObject *self, PyObject *args) {
    Py_buffer view;
    int events_field;
    if (!PyArg_ParseTuple(args, "y*i", &view, &events_field)) return NULL;
    const uint8_t *base = (const uint8_t *)view.buf;
    PyObject *fields = NULL, *cols[5] = {NULL, NULL, NULL, NULL, NULL};
    Columns c = {NULL, NULL, NULL, NULL, NULL};
    Headers hdr = {NULL, 0, 0};
    Py_ssize_t total, bad_at = 0;
    int status;
    if (view.len >= ((Py_ssize_t)1 << 31)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "line of 2 GiB or more");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    total = count_events(base, view.len, events_field);
    Py_END_ALLOW_THREADS
    cols[0] = new_column(total, sizeof(int32_t), (void **)&c.ev_start);
    cols[1] = new_column(total, sizeof(int32_t), (void **)&c.ev_end);
    cols[2] = new_column(total, sizeof(int64_t), (void **)&c.mid);
    cols[3] = new_column(total, sizeof(int64_t), (void **)&c.off);
    cols[4] = new_column(total, sizeof(int64_t), (void **)&c.dur);
    if (!cols[0] || !cols[1] || !cols[2] || !cols[3] || !cols[4]) goto fail;
    Py_BEGIN_ALLOW_THREADS
    status = fill_line(base, view.len, events_field, total, c, &hdr, &bad_at);
    Py_END_ALLOW_THREADS
    if (status < 0) {
        PyErr_NoMemory();
        goto fail;
    }
    if (status > 0) {
        PyErr_Format(PyExc_ValueError, "malformed field at byte %zd", bad_at);
        goto fail;
    }
    fields = PyDict_New();
    if (!fields) goto fail;
    for (Py_ssize_t i = 0; i < hdr.n; i++) { /* in the order read: a repeated field keeps its last value */
        HeaderField *h = &hdr.items[i];
        PyObject *k = PyLong_FromUnsignedLongLong(h->field);
        PyObject *val = h->wt == 0 ? PyLong_FromUnsignedLongLong(h->value)
                                   : PyBytes_FromStringAndSize((const char *)base + h->start, h->len);
        if (!k || !val || PyDict_SetItem(fields, k, val) < 0) { Py_XDECREF(k); Py_XDECREF(val); goto fail; }
        Py_DECREF(k); Py_DECREF(val);
    }
    PyMem_RawFree(hdr.items);
    PyBuffer_Release(&view);
    return Py_BuildValue("(NNNNNN)", fields, cols[0], cols[1], cols[2], cols[3], cols[4]);
fail:
    PyMem_RawFree(hdr.items);
    Py_XDECREF(fields);
    for (int i = 0; i < 5; i++) Py_XDECREF(cols[i]);
    PyBuffer_Release(&view);
    return NULL;
}

/* stat_ints(data: bytes, starts: bytes(int64), ends: bytes(int64), stat_id: int)
 *   -> (values: bytes(uint64), kinds: bytes(uint8))
 * For each event payload [start, end), the integer value of its first XStat with metadata_id
 * stat_id that holds a value: kinds 0 absent, 3 uint64, 4 int64, 7 ref (string id), 9 other
 * kind (double, string, bytes). wire.stat_ints reads the same. */
static PyObject *stat_ints(PyObject *self, PyObject *args) {
    Py_buffer data, sv, ev;
    unsigned long long stat_id;
    if (!PyArg_ParseTuple(args, "y*y*y*K", &data, &sv, &ev, &stat_id)) return NULL;
    const uint8_t *base = (const uint8_t *)data.buf;
    Py_ssize_t n = sv.len / (Py_ssize_t)sizeof(int64_t);
    const int64_t *starts = (const int64_t *)sv.buf, *ends = (const int64_t *)ev.buf;
    PyObject *values = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(uint64_t));
    PyObject *kinds = PyBytes_FromStringAndSize(NULL, n);
    if (!values || !kinds) goto done_err;
    uint64_t *vals = (uint64_t *)PyBytes_AS_STRING(values);
    uint8_t *kd = (uint8_t *)PyBytes_AS_STRING(kinds);
    memset(vals, 0, n * sizeof(uint64_t));
    memset(kd, 0, n);
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t s = starts[i], e = ends[i];
        if (s < 0 || e > data.len || s > e) continue;
        Reader r = {base + s, base + e, 0};
        while (r.p < r.end && !kd[i]) {
            uint64_t key = read_varint(&r);
            if (r.bad) break;
            int w = (int)(key & 7);
            if ((key >> 3) == 4 && w == 2) { /* XEvent.stats */
                uint64_t len = read_varint(&r);
                if (r.bad || len > (uint64_t)(r.end - r.p)) break;
                Reader st = {r.p, r.p + len, 0};
                uint64_t mid = 0, v = 0;
                int kind = 0;
                while (st.p < st.end) {
                    uint64_t k = read_varint(&st);
                    if (st.bad) break;
                    uint64_t f = k >> 3;
                    int sw = (int)(k & 7);
                    /* A malformed field ends the stat; what came before it stands. The value
                     * is a oneof: the last value field wins; other fields are unknown ones. */
                    if (f == 1 && sw == 0) {
                        uint64_t x = read_varint(&st);
                        if (st.bad) break;
                        mid = x;
                    } else if ((f == 3 || f == 4 || f == 7) && sw == 0) {
                        uint64_t x = read_varint(&st);
                        if (st.bad) break;
                        v = x;
                        kind = (int)f;
                    } else {
                        if (skip_field(&st, sw)) break;
                        if ((f == 2 && sw == 1) || ((f == 5 || f == 6) && sw == 2)) kind = 9; /* double, string, bytes */
                    }
                }
                if (mid == stat_id && kind) { vals[i] = v; kd[i] = (uint8_t)kind; }
                r.p += len;
            } else if (skip_field(&r, w)) {
                break;
            }
        }
    }
    PyBuffer_Release(&data); PyBuffer_Release(&sv); PyBuffer_Release(&ev);
    return Py_BuildValue("(NN)", values, kinds);
done_err:
    Py_XDECREF(values); Py_XDECREF(kinds);
    PyBuffer_Release(&data); PyBuffer_Release(&sv); PyBuffer_Release(&ev);
    return NULL;
}

/* nest(starts: bytes(int64), sorted_ends: bytes(int64)) -> bytes(int64)
 * Parents of intervals given in nesting order (by start, enclosing ones first; starts
 * ascending): for interval k, closed = min(#ends <= starts[k], k), depth = k - closed, and its
 * parent is the last earlier interval of depth - 1 (-1 for none). sorted_ends: the same
 * intervals' ends, ascending. timeline.nesting_parents computes the same with numpy. */
static PyObject *nest(PyObject *self, PyObject *args) {
    Py_buffer sv, ev;
    if (!PyArg_ParseTuple(args, "y*y*", &sv, &ev)) return NULL;
    Py_ssize_t n = sv.len / (Py_ssize_t)sizeof(int64_t);
    if (ev.len != sv.len) {
        PyBuffer_Release(&sv); PyBuffer_Release(&ev);
        PyErr_SetString(PyExc_ValueError, "starts and ends differ in length");
        return NULL;
    }
    const int64_t *s = (const int64_t *)sv.buf, *es = (const int64_t *)ev.buf;
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
    int64_t *last = (int64_t *)PyMem_Malloc((n + 1) * sizeof(int64_t));
    if (!out || !last) {
        Py_XDECREF(out); PyMem_Free(last);
        PyBuffer_Release(&sv); PyBuffer_Release(&ev);
        return PyErr_NoMemory();
    }
    int64_t *parent = (int64_t *)PyBytes_AS_STRING(out);
    memset(last, 0xFF, (n + 1) * sizeof(int64_t)); /* -1: no interval at that depth yet */
    Py_ssize_t c = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        while (c < n && es[c] <= s[k]) c++;
        Py_ssize_t depth = k - (c < k ? c : k);
        parent[k] = depth > 0 ? last[depth - 1] : -1;
        last[depth] = k;
    }
    PyMem_Free(last);
    PyBuffer_Release(&sv); PyBuffer_Release(&ev);
    return out;
}

/* postings(ids: bytes(int64)) -> (lo: int, counts: bytearray(int64), order: bytearray(int32)) or None
 * A counting sort of a line's metadata ids: counts[c] events have id lo + c (c < span = max - min
 * + 1), and order lists the event indices by id, ascending, and by index within an id (what a
 * stable argsort of the ids gives). None when the ids span 65536 values or more, or the line has
 * 2**31 events or more: xspace.Line._postings sorts those with numpy. */
static PyObject *postings(PyObject *self, PyObject *args) {
    Py_buffer iv;
    if (!PyArg_ParseTuple(args, "y*", &iv)) return NULL;
    Py_ssize_t n = iv.len / (Py_ssize_t)sizeof(int64_t);
    const int64_t *ids = (const int64_t *)iv.buf;
    if (n == 0 || n >= ((Py_ssize_t)1 << 31)) { PyBuffer_Release(&iv); Py_RETURN_NONE; }
    int64_t lo = ids[0], hi = ids[0];
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 1; i < n; i++) {
        if (ids[i] < lo) lo = ids[i];
        if (ids[i] > hi) hi = ids[i];
    }
    Py_END_ALLOW_THREADS
    if ((uint64_t)hi - (uint64_t)lo >= 65536) { PyBuffer_Release(&iv); Py_RETURN_NONE; }
    Py_ssize_t span = (Py_ssize_t)(hi - lo) + 1;
    int64_t *counts = NULL, *next = NULL;
    int32_t *order = NULL;
    PyObject *cols[2] = {new_column(span, sizeof(int64_t), (void **)&counts), new_column(n, sizeof(int32_t), (void **)&order)};
    next = (int64_t *)PyMem_Malloc(span * sizeof(int64_t));
    if (!cols[0] || !cols[1] || !next) {
        Py_XDECREF(cols[0]); Py_XDECREF(cols[1]); PyMem_Free(next);
        PyBuffer_Release(&iv);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    memset(counts, 0, span * sizeof(int64_t));
    for (Py_ssize_t i = 0; i < n; i++) counts[ids[i] - lo]++;
    int64_t at = 0;
    for (Py_ssize_t c = 0; c < span; c++) { next[c] = at; at += counts[c]; }
    for (Py_ssize_t i = 0; i < n; i++) order[next[ids[i] - lo]++] = (int32_t)i;
    Py_END_ALLOW_THREADS
    PyMem_Free(next);
    PyBuffer_Release(&iv);
    return Py_BuildValue("(LNN)", (long long)lo, cols[0], cols[1]);
}

/* interval_order(starts: bytes(int64), ends: bytes(int64)) -> int
 * 0: the intervals are a union already (none empty, sorted by start, each starting after the
 * previous one ended); 1: sorted by start (some overlap, touch or are empty); 2: not sorted.
 * timeline.union decides with it, in one pass that stops at the first unsorted start. */
static PyObject *interval_order(PyObject *self, PyObject *args) {
    Py_buffer sv, ev;
    if (!PyArg_ParseTuple(args, "y*y*", &sv, &ev)) return NULL;
    Py_ssize_t n = sv.len / (Py_ssize_t)sizeof(int64_t);
    const int64_t *s = (const int64_t *)sv.buf, *e = (const int64_t *)ev.buf;
    int order = 0;
    if (ev.len != sv.len) {
        PyBuffer_Release(&sv); PyBuffer_Release(&ev);
        PyErr_SetString(PyExc_ValueError, "starts and ends differ in length");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i && s[i] < s[i - 1]) { order = 2; break; }
        if (order == 0 && (e[i] <= s[i] || (i && s[i] <= e[i - 1]))) order = 1;
    }
    PyBuffer_Release(&sv); PyBuffer_Release(&ev);
    return PyLong_FromLong(order);
}

/* merge_sorted(starts: bytes(int64), ends: bytes(int64)) -> (starts: bytearray(int64), ends: bytearray(int64))
 * The union of intervals sorted by start: empty ones (end <= start) left out, overlapping or
 * touching ones merged; what timeline.union computes with numpy (a running maximum of the ends,
 * a new interval where a start lies beyond it). */
static PyObject *merge_sorted(PyObject *self, PyObject *args) {
    Py_buffer sv, ev;
    if (!PyArg_ParseTuple(args, "y*y*", &sv, &ev)) return NULL;
    Py_ssize_t n = sv.len / (Py_ssize_t)sizeof(int64_t), k = 0;
    const int64_t *s = (const int64_t *)sv.buf, *e = (const int64_t *)ev.buf;
    int64_t *ms = NULL, *me = NULL;
    if (ev.len != sv.len) {
        PyBuffer_Release(&sv); PyBuffer_Release(&ev);
        PyErr_SetString(PyExc_ValueError, "starts and ends differ in length");
        return NULL;
    }
    PyObject *cols[2] = {new_column(n, sizeof(int64_t), (void **)&ms), new_column(n, sizeof(int64_t), (void **)&me)};
    if (!cols[0] || !cols[1]) {
        Py_XDECREF(cols[0]); Py_XDECREF(cols[1]);
        PyBuffer_Release(&sv); PyBuffer_Release(&ev);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (e[i] <= s[i]) continue;
        if (k && s[i] <= me[k - 1]) {
            if (e[i] > me[k - 1]) me[k - 1] = e[i];
        } else {
            ms[k] = s[i];
            me[k] = e[i];
            k++;
        }
    }
    PyBuffer_Release(&sv); PyBuffer_Release(&ev);
    if (PyByteArray_Resize(cols[0], k * (Py_ssize_t)sizeof(int64_t)) < 0 ||
        PyByteArray_Resize(cols[1], k * (Py_ssize_t)sizeof(int64_t)) < 0) {
        Py_DECREF(cols[0]); Py_DECREF(cols[1]);
        return NULL;
    }
    return Py_BuildValue("(NN)", cols[0], cols[1]);
}

static PyMethodDef methods[] = {
    {"scan_line", scan_line, METH_VARARGS, "Split a serialized XLine and decode its events' fields 1-3."},
    {"stat_ints", stat_ints, METH_VARARGS, "Integer value of one stat for many events."},
    {"nest", nest, METH_VARARGS, "Parents of intervals in nesting order."},
    {"postings", postings, METH_VARARGS, "Counting sort of a line's metadata ids."},
    {"interval_order", interval_order, METH_VARARGS, "Whether intervals are a union, sorted, or neither."},
    {"merge_sorted", merge_sorted, METH_VARARGS, "The union of intervals sorted by start."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_wirescan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__wirescan(void) { return PyModule_Create(&module); }
