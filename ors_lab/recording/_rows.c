/* The recorder's hot path: Recorder.emit, storing each row straight into Arrow column buffers.
 *
 * `Rows` is the base class of ors_lab.recording.Recorder. Its `emit` stamps a row (sequence number,
 * monotonic nanoseconds), fills in its context (the session's task, the call's tool), redacts it,
 * and appends every column's value to that column's buffers (validity bits, values or offsets,
 * data), in the layout of an Arrow array. `_take` hands the buffers to the writer thread, which
 * wraps them as Arrow arrays without converting anything row by row.
 *
 * Whatever is rare or needs Python's libraries is a method of the Recorder, called from here: a
 * URL or header item seen for the first time (redacted, then cached in the dicts this type owns),
 * a /create or /call body, an `open` row, a body that may hold secrets, the user's patterns, a
 * value of an unusual type (converted the way Arrow converts it), and waiting for the writer.
 *
 * One lock keeps rows whole and in seq order when threads emit at once. It is taken with the GIL
 * released when it is busy, since a Python method called from here may let another thread run.
 */

#define _GNU_SOURCE /* memmem */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <pythread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

/* column kinds: the Arrow types of the schema's columns */
enum { K_INT64, K_INT32, K_FLOAT64, K_BOOL, K_STRING, K_LARGE_STRING, K_LARGE_BINARY };

#define MAX_COLUMNS 64

typedef struct {
    int kind;
    Py_ssize_t n;          /* rows */
    Py_ssize_t nulls;
    uint8_t *valid;        /* validity bits */
    Py_ssize_t valid_cap;  /* bytes */
    char *values;          /* fixed-width values (bits for a bool), or offsets */
    Py_ssize_t values_cap; /* bytes */
    char *data;            /* the bytes of a string or binary column */
    Py_ssize_t data_len, data_cap;
} Column;

/* a header item seen before: the httpx2 item (raw name, lower-case name, value), kept to compare by
 * content, and what Recorder._header_item made of it. Each response's items are new bytes objects:
 * hashing their bytes here costs a fraction of hashing them as a tuple key of a dict. */
#define HEADER_SLOTS 8192 /* a power of two */
#define HEADER_ITEMS (HEADER_SLOTS / 2) /* kept at most; then forgotten all at once */
typedef struct {
    uint64_t hash;
    PyObject *item;  /* owned; NULL: an empty slot */
    PyObject *known; /* owned: (lower-case name, JSON member), redacted */
} HeaderSlot;

/* the columns of one call's keyword names, in their order. A call site passes the same names each
 * time, as the same str objects (a call with **fields, in a new tuple each time). */
#define KW_SLOTS 32
typedef struct {
    PyObject *names; /* the keyword names' tuple (owned: its names stay alive while they are here) */
    signed char columns[MAX_COLUMNS];
} KwSlot;

/* the columns emit works out itself; -1 where the schema has no such column */
enum {
    C_SEQ, C_T_NS, C_KIND, C_LAYER, C_SESSION_ID, C_ENVIRONMENT, C_SPLIT, C_TASK_INDEX, C_TASK, C_CALL,
    C_TOOL, C_INPUT, C_URL, C_HEADERS, C_BODY, C_DATA, C_COMMENT, C_ERROR, N_SPECIAL
};
static const char *SPECIAL_NAMES[N_SPECIAL] = {
    "seq", "t_ns", "kind", "layer", "session_id", "environment", "split", "task_index", "task", "call",
    "tool", "input", "url", "headers", "body", "data", "comment", "error",
};

typedef struct {
    PyObject_HEAD
    Py_ssize_t ncolumns;
    Column columns[MAX_COLUMNS];
    int special[N_SPECIAL];
    char roles[MAX_COLUMNS];  /* each column's AS_ role in add_row */
    PyObject *index;          /* field name -> column number (-1: a stamped column, ignored as given) */
    KwSlot kw[KW_SLOTS];      /* keyword names -> their columns, by the names' addresses */
    PyObject *kind_layer;     /* kind -> layer */
    PyObject *agent_layer;    /* the layer of a kind not in kind_layer */
    PyObject *headers_type;   /* httpx2.Headers */
    PyObject *json;           /* a value -> its JSON text */
    PyObject *no_context;     /* (None, None, None, None) */
    PyObject *no_call;        /* (None, None) */
    PyObject *sessions;       /* session id -> (environment, split, task_index, task) */
    PyObject *calls;          /* session id -> {call: (tool, input)} */
    PyObject *urls;           /* URL -> (redacted URL, is a /create) */
    HeaderSlot *header_items; /* HEADER_SLOTS of them, by hash, open addressing */
    Py_ssize_t n_header_items;
    PyObject *error;          /* the writer's failure, or None */
    long long t0;             /* monotonic ns at t_ns 0 */
    long long next_seq;
    Py_ssize_t row_cap;       /* rows every column has room for */
    Py_ssize_t part_rows;     /* the writer is woken at this many rows; emit waits for it at twice as many */
    char closing;
    char patterns;            /* the user gave patterns: data, comment, error, input and task go through them */
    char configured;
    PyThread_type_lock lock;
} Rows;

static PyObject *S_request, *S_open, *S_close, *S_empty, *S_list;
static PyObject *M_cell, *M_headers_json, *M_header_item, *M_url_known, *M_body, *M_create_context,
    *M_open_context, *M_call_meaning, *M_redact_texts, *M_wake_writer, *M_wait_for_writer, *M_raise_error;

/* -- column buffers ------------------------------------------------------------------------------ */

static int value_width(int kind) {
    switch (kind) {
    case K_INT64: case K_FLOAT64: case K_LARGE_STRING: case K_LARGE_BINARY: return 8;
    case K_INT32: case K_STRING: return 4;
    default: return 0; /* bool: bits */
    }
}

static int is_var(int kind) { return kind == K_STRING || kind == K_LARGE_STRING || kind == K_LARGE_BINARY; }

static int grow(char **buffer, Py_ssize_t *cap, Py_ssize_t need) {
    if (need <= *cap) return 0;
    Py_ssize_t size = *cap ? *cap : 256;
    while (size < need) size *= 2;
    char *grown = PyMem_Realloc(*buffer, (size_t)size);
    if (grown == NULL) { PyErr_NoMemory(); return -1; }
    memset(grown + *cap, 0, (size_t)(size - *cap));
    *buffer = grown;
    *cap = size;
    return 0;
}

/* room for `rows` rows in a column: validity bits, and values or offsets (its data grows as it is written) */
static int reserve(Column *c, Py_ssize_t rows) {
    if (grow((char **)&c->valid, &c->valid_cap, rows / 8 + 1) < 0) return -1;
    if (c->kind == K_BOOL) return grow(&c->values, &c->values_cap, rows / 8 + 1);
    int width = value_width(c->kind);
    return grow(&c->values, &c->values_cap, (is_var(c->kind) ? rows + 1 : rows) * width);
}

/* Bits past a column's last row are 0 (grow, reset_column and roll_back keep them so): a null or a
 * false is stored by leaving its bits alone. */
static void set_bit(uint8_t *bits, Py_ssize_t i) { bits[i / 8] |= (uint8_t)(1u << (i % 8)); }
static void clear_bit(uint8_t *bits, Py_ssize_t i) { bits[i / 8] &= (uint8_t)~(1u << (i % 8)); }
static int get_bit(const uint8_t *bits, Py_ssize_t i) { return bits[i / 8] >> (i % 8) & 1; }

static int64_t offset_at(Column *c, Py_ssize_t i) {
    return c->kind == K_STRING ? ((int32_t *)c->values)[i] : ((int64_t *)c->values)[i];
}

static void set_offset(Column *c, Py_ssize_t i, int64_t offset) {
    if (c->kind == K_STRING) ((int32_t *)c->values)[i] = (int32_t)offset;
    else ((int64_t *)c->values)[i] = offset;
}

static int put_null(Column *c) { /* a bool's bits are 0 already */
    if (is_var(c->kind)) set_offset(c, c->n + 1, offset_at(c, c->n));
    else if (value_width(c->kind) == 8) ((int64_t *)c->values)[c->n] = 0; /* a store, not a memset call */
    else if (c->kind == K_INT32) ((int32_t *)c->values)[c->n] = 0;
    c->nulls++;
    c->n++;
    return 0;
}

static int put_i64(Column *c, long long v) {
    set_bit(c->valid, c->n);
    if (c->kind == K_INT32) ((int32_t *)c->values)[c->n] = (int32_t)v;
    else ((int64_t *)c->values)[c->n] = (int64_t)v;
    c->n++;
    return 0;
}

static int append_data(Column *c, const char *bytes, Py_ssize_t len) {
    if (grow(&c->data, &c->data_cap, c->data_len + len) < 0) return -1;
    memcpy(c->data + c->data_len, bytes, (size_t)len);
    c->data_len += len;
    return 0;
}

/* the row's string or binary value is what append_data wrote since the last one */
static int end_value(Column *c) {
    if (c->kind == K_STRING && c->data_len > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "more than 2 GiB of text waiting in one trace column");
        return -1;
    }
    set_bit(c->valid, c->n);
    set_offset(c, c->n + 1, c->data_len);
    c->n++;
    return 0;
}

static int put_bytes(Column *c, const char *bytes, Py_ssize_t len) {
    return append_data(c, bytes, len) < 0 ? -1 : end_value(c);
}

static void reset_column(Column *c) {
    if (c->valid != NULL) memset(c->valid, 0, (size_t)(c->n + 7) / 8);
    if (c->kind == K_BOOL && c->values != NULL) memset(c->values, 0, (size_t)(c->n + 7) / 8);
    c->n = c->nulls = c->data_len = 0;
    if (c->data_cap > (4 << 20)) { /* a 16 MiB body once: do not keep its room for good */
        PyMem_Free(c->data);
        c->data = NULL;
        c->data_cap = 0;
    }
    if (is_var(c->kind) && c->values != NULL) set_offset(c, 0, 0);
}

/* back to `rows` rows: what a refused row stored is forgotten */
static void roll_back(Column *c, Py_ssize_t rows) {
    if (c->n > rows) {
        if (!get_bit(c->valid, rows)) c->nulls--;
        clear_bit(c->valid, rows);
        if (c->kind == K_BOOL) clear_bit((uint8_t *)c->values, rows);
        c->n = rows;
    }
    if (is_var(c->kind)) c->data_len = offset_at(c, rows); /* where the row's data began */
}

static void free_column(Column *c) {
    PyMem_Free(c->valid);
    PyMem_Free(c->values);
    PyMem_Free(c->data);
    memset(c, 0, sizeof(*c));
}

/* -- values to columns --------------------------------------------------------------------------- */

/* the fast forms of each kind; 1 stored, 0 not this form (nothing stored), -1 error */
static int put_fast(Column *c, PyObject *v) {
    switch (c->kind) {
    case K_INT64: case K_INT32: {
        if (!PyLong_CheckExact(v)) return 0;
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow || (x == -1 && PyErr_Occurred())) { PyErr_Clear(); return 0; }
        if (c->kind == K_INT32 && (x < INT32_MIN || x > INT32_MAX)) return 0;
        return put_i64(c, x) < 0 ? -1 : 1;
    }
    case K_FLOAT64: {
        double x;
        if (PyFloat_Check(v)) x = PyFloat_AS_DOUBLE(v);
        else if (PyLong_CheckExact(v)) {
            x = PyLong_AsDouble(v);
            if (x == -1.0 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
        } else return 0;
        set_bit(c->valid, c->n);
        ((double *)c->values)[c->n] = x;
        c->n++;
        return 1;
    }
    case K_BOOL:
        if (v != Py_True && v != Py_False) return 0;
        set_bit(c->valid, c->n);
        if (v == Py_True) set_bit((uint8_t *)c->values, c->n);
        c->n++;
        return 1;
    case K_STRING: case K_LARGE_STRING: {
        if (!PyUnicode_CheckExact(v)) return 0;
        Py_ssize_t len;
        const char *utf8 = PyUnicode_AsUTF8AndSize(v, &len);
        if (utf8 == NULL) { PyErr_Clear(); return 0; } /* lone surrogates */
        return put_bytes(c, utf8, len) < 0 ? -1 : 1;
    }
    default: /* K_LARGE_BINARY */
        if (!PyBytes_CheckExact(v)) return 0;
        return put_bytes(c, PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v)) < 0 ? -1 : 1;
    }
}

/* a value of another type than column i's own, as Recorder._cell converts it (or a TypeError) */
static PyObject *cell(Rows *self, Py_ssize_t i, PyObject *v) {
    PyObject *number = PyLong_FromSsize_t(i);
    if (number == NULL) return NULL;
    PyObject *converted = PyObject_CallMethodObjArgs((PyObject *)self, M_cell, number, v, NULL);
    Py_DECREF(number);
    return converted;
}

/* one value into column i: None is null, the fast forms directly, others as Recorder._cell converts them */
static int put(Rows *self, Py_ssize_t i, PyObject *v) {
    Column *c = &self->columns[i];
    if (v == NULL || v == Py_None) return put_null(c);
    int stored = put_fast(c, v);
    if (stored != 0) return stored < 0 ? -1 : 0;
    PyObject *converted = cell(self, i, v);
    if (converted == NULL) return -1;
    stored = converted == Py_None ? (put_null(c) < 0 ? -1 : 1) : put_fast(c, converted);
    if (stored == 0) PyErr_Format(PyExc_TypeError, "Recorder._cell gave %R for column %zd", converted, i);
    Py_DECREF(converted);
    return stored < 0 ? -1 : 0;
}

static uint64_t mix(uint64_t hash, uint64_t word) {
    hash = (hash ^ word) * 0x9e3779b97f4a7c15ULL;
    return hash ^ hash >> 32;
}

static uint64_t hash_bytes(uint64_t hash, PyObject *bytes) { /* eight bytes at a time */
    const char *p = PyBytes_AS_STRING(bytes);
    Py_ssize_t n = PyBytes_GET_SIZE(bytes);
    uint64_t word;
    for (; n >= 8; p += 8, n -= 8) {
        memcpy(&word, p, 8);
        hash = mix(hash, word);
    }
    word = (uint64_t)n << 56;
    for (Py_ssize_t i = 0; i < n; i++) word |= (uint64_t)(unsigned char)p[i] << (8 * i);
    return mix(hash, word);
}

static int same_bytes(PyObject *a, PyObject *b) {
    return a == b || (PyBytes_GET_SIZE(a) == PyBytes_GET_SIZE(b) &&
                      memcmp(PyBytes_AS_STRING(a), PyBytes_AS_STRING(b), (size_t)PyBytes_GET_SIZE(a)) == 0);
}

static size_t first_slot(uint64_t hash) { return (size_t)(hash ^ hash >> 29) & (HEADER_SLOTS - 1); }

static void forget_header_items(Rows *self) {
    for (Py_ssize_t i = 0; self->header_items != NULL && i < HEADER_SLOTS; i++) {
        Py_CLEAR(self->header_items[i].item);
        Py_CLEAR(self->header_items[i].known);
    }
    self->n_header_items = 0;
}

/* (lower-case name, JSON member) of an httpx2 header item, redacted: cached, or made by
 * Recorder._header_item; a new reference. NULL with no error set: not an item of the httpx2 this was
 * written against. */
static PyObject *header_item(Rows *self, PyObject *item) {
    if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 3 || !PyBytes_CheckExact(PyTuple_GET_ITEM(item, 0)) ||
        !PyBytes_CheckExact(PyTuple_GET_ITEM(item, 2)))
        return NULL;
    PyObject *name = PyTuple_GET_ITEM(item, 0), *value = PyTuple_GET_ITEM(item, 2);
    uint64_t hash = hash_bytes(hash_bytes(0, name), value);
    size_t i = first_slot(hash);
    for (; self->header_items[i].item != NULL; i = (i + 1) & (HEADER_SLOTS - 1)) {
        HeaderSlot *slot = &self->header_items[i];
        if (slot->hash == hash && same_bytes(PyTuple_GET_ITEM(slot->item, 0), name) &&
            same_bytes(PyTuple_GET_ITEM(slot->item, 2), value))
            return Py_NewRef(slot->known);
    }
    PyObject *known = PyObject_CallMethodObjArgs((PyObject *)self, M_header_item, item, NULL);
    if (known == NULL) return NULL;
    if (!PyTuple_CheckExact(known) || PyTuple_GET_SIZE(known) != 2 || !PyUnicode_CheckExact(PyTuple_GET_ITEM(known, 1))) {
        Py_DECREF(known);
        PyErr_SetString(PyExc_TypeError, "Recorder._header_item must give (name, JSON member)");
        return NULL;
    }
    if (self->n_header_items >= HEADER_ITEMS) { /* a server's dates and lengths: forget them all, now and then */
        forget_header_items(self);
        i = first_slot(hash);
    }
    self->header_items[i] = (HeaderSlot){hash, Py_NewRef(item), Py_NewRef(known)};
    self->n_header_items++;
    return known;
}

/* httpx2.Headers as the JSON object of its redacted items, from the cache of their JSON members.
 * 1 stored, 0 not stored (a repeated name, or not the httpx2 this was written against), -1 error. */
static int put_header_list(Rows *self, Column *c, PyObject *headers) {
    PyObject *items = PyObject_GetAttr(headers, S_list);
    if (items == NULL) { PyErr_Clear(); return 0; }
    if (!PyList_CheckExact(items)) { Py_DECREF(items); return 0; }
    Py_ssize_t n = PyList_GET_SIZE(items);
    PyObject *names[64];
    PyObject *known[64]; /* owned */
    Py_ssize_t got = 0;
    int result = 1;
    if (n > 64) { Py_DECREF(items); return 0; }
    for (Py_ssize_t i = 0; i < n && result == 1; i++) {
        PyObject *entry = header_item(self, PyList_GET_ITEM(items, i));
        if (entry == NULL) { result = PyErr_Occurred() ? -1 : 0; break; }
        PyObject *name = PyTuple_GET_ITEM(entry, 0);
        for (Py_ssize_t j = 0; j < got; j++) {
            int same = names[j] == name ? 1 : PyObject_RichCompareBool(names[j], name, Py_EQ);
            if (same != 0) { result = same < 0 ? -1 : 0; break; } /* a repeated name: its values are joined */
        }
        names[got] = name;
        known[got++] = entry;
    }
    if (result == 1) { /* the JSON object, written in place as the row's value (emit rolls back a failure) */
        if (append_data(c, "{", 1) < 0) result = -1;
        for (Py_ssize_t j = 0; j < got && result == 1; j++) {
            Py_ssize_t len;
            const char *member = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(known[j], 1), &len);
            if (member == NULL || (j && append_data(c, ",", 1) < 0) || append_data(c, member, len) < 0) result = -1;
        }
        if (result == 1 && (append_data(c, "}", 1) < 0 || end_value(c) < 0)) result = -1;
    }
    for (Py_ssize_t j = 0; j < got; j++) Py_DECREF(known[j]);
    Py_DECREF(items);
    return result;
}

/* -- emit ---------------------------------------------------------------------------------------- */

static void lock(Rows *self) {
    if (!PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) {
        Py_BEGIN_ALLOW_THREADS
        PyThread_acquire_lock(self->lock, WAIT_LOCK);
        Py_END_ALLOW_THREADS
    }
}

static int same_text(PyObject *a, PyObject *b) {
    return a == b || (PyUnicode_Check(a) && PyUnicode_GET_LENGTH(a) == PyUnicode_GET_LENGTH(b) &&
                      PyUnicode_Compare(a, b) == 0);
}

static PyObject *given(PyObject **values, int column) { return column < 0 ? NULL : values[column]; }

/* the columns a row's session and call fill in: stored after everything else about the row */
static int is_context(const int *s, Py_ssize_t i) {
    return i == s[C_ENVIRONMENT] || i == s[C_SPLIT] || i == s[C_TASK_INDEX] || i == s[C_TASK] || i == s[C_TOOL] ||
           i == s[C_INPUT];
}

/* what add_row does with each column: of the context, worked out by emit, or stored as given */
enum { AS_GIVEN, AS_CONTEXT, AS_SEQ, AS_T_NS, AS_HEADERS };

/* the user's patterns over some of a row's texts (Recorder._redact_texts): each text is replaced
 * by its redacted form, borrowed from the tuple returned (NULL on error) */
static PyObject *redact_texts(Rows *self, PyObject **texts, Py_ssize_t n) {
    PyObject *args = PyTuple_New(n);
    if (args == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(args, i, Py_NewRef(texts[i] != NULL ? texts[i] : Py_None));
    PyObject *method = PyObject_GetAttr((PyObject *)self, M_redact_texts);
    PyObject *redacted = method != NULL ? PyObject_Call(method, args, NULL) : NULL;
    Py_XDECREF(method);
    Py_DECREF(args);
    if (redacted == NULL) return NULL;
    if (!PyTuple_CheckExact(redacted) || PyTuple_GET_SIZE(redacted) != n) {
        Py_DECREF(redacted);
        PyErr_SetString(PyExc_TypeError, "Recorder._redact_texts must give one text for each it was given");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) texts[i] = PyTuple_GET_ITEM(redacted, i);
    return redacted;
}

#define OWN(x) (owned[nowned++] = (x))

/* work out the row's context and redaction, and store every column; the caller rolls back on error */
static int add_row(Rows *self, PyObject *kind, long long t_ns, PyObject **values) {
    const int *s = self->special;
    PyObject *owned[16];
    int nowned = 0, result = -1;
    PyObject *cells[MAX_COLUMNS];
    memcpy(cells, values, sizeof(PyObject *) * (size_t)self->ncolumns);

    /* what can fail first (headers, URL, body), then what changes the recorder's state (context, tool) */
    PyObject *headers = given(values, s[C_HEADERS]);
    int header_list = 0;
    if (headers != NULL && headers != Py_None && !PyUnicode_CheckExact(headers)) {
        if ((PyObject *)Py_TYPE(headers) == self->headers_type) header_list = 1;
        else {
            PyObject *text = PyObject_CallMethodObjArgs((PyObject *)self, M_headers_json, headers, NULL);
            if (text == NULL) goto done;
            cells[s[C_HEADERS]] = OWN(text);
        }
    }
    PyObject *url = given(values, s[C_URL]);
    int creates = 0;
    if (url != NULL && url != Py_None) {
        PyObject *known = PyDict_GetItemWithError(self->urls, url);
        if (known != NULL) Py_INCREF(known);
        else if (PyErr_Occurred()) goto done;
        else if ((known = PyObject_CallMethodObjArgs((PyObject *)self, M_url_known, url, NULL)) == NULL) goto done;
        OWN(known);
        if (!PyTuple_CheckExact(known) || PyTuple_GET_SIZE(known) != 2) {
            PyErr_SetString(PyExc_TypeError, "Recorder._url_known must give (URL, is a /create)");
            goto done;
        }
        url = cells[s[C_URL]] = PyTuple_GET_ITEM(known, 0);
        creates = PyTuple_GET_ITEM(known, 1) == Py_True;
    } else url = NULL;
    PyObject *body = given(values, s[C_BODY]);
    if (body != NULL && body != Py_None) {
        int plain = PyBytes_CheckExact(body) && !self->patterns &&
                    (PyBytes_GET_SIZE(body) == 0 ||
                     memmem(PyBytes_AS_STRING(body), (size_t)PyBytes_GET_SIZE(body), "secrets", 7) == NULL);
        if (!plain) {
            PyObject *redacted = PyObject_CallMethodObjArgs(
                (PyObject *)self, M_body, url != NULL ? url : S_empty, body, NULL);
            if (redacted == NULL) goto done;
            cells[s[C_BODY]] = OWN(redacted);
        }
    }

    PyObject *layer = given(values, s[C_LAYER]);
    if (layer == NULL || layer == Py_None) {
        layer = PyDict_GetItemWithError(self->kind_layer, kind);
        if (layer == NULL) {
            if (PyErr_Occurred()) goto done;
            layer = self->agent_layer;
        }
    }
    cells[s[C_LAYER]] = layer;
    cells[s[C_KIND]] = kind;
    if (self->patterns) {
        PyObject *texts[3] = {given(values, s[C_DATA]), given(values, s[C_COMMENT]), given(values, s[C_ERROR])};
        PyObject *redacted = redact_texts(self, texts, 3);
        if (redacted == NULL) goto done;
        OWN(redacted);
        if (s[C_DATA] >= 0) cells[s[C_DATA]] = texts[0];
        if (s[C_COMMENT] >= 0) cells[s[C_COMMENT]] = texts[1];
        if (s[C_ERROR] >= 0) cells[s[C_ERROR]] = texts[2];
    }
    /* every column but the context ones now: a value its column cannot hold fails before any state changes */
    for (Py_ssize_t i = 0; i < self->ncolumns; i++) {
        int role = self->roles[i];
        if (role == AS_CONTEXT) continue;
        if (role == AS_SEQ) { if (put_i64(&self->columns[i], self->next_seq) < 0) goto done; continue; }
        if (role == AS_T_NS) { if (put_i64(&self->columns[i], t_ns) < 0) goto done; continue; }
        if (role == AS_HEADERS && header_list) {
            int stored = put_header_list(self, &self->columns[i], headers);
            if (stored < 0) goto done;
            if (stored == 1) continue;
            PyObject *text = PyObject_CallMethodObjArgs((PyObject *)self, M_headers_json, headers, NULL);
            if (text == NULL) goto done;
            cells[i] = OWN(text);
        }
        if (put(self, i, cells[i]) < 0) goto done;
    }

    PyObject *task = given(values, s[C_TASK]);
    if (task != NULL && task != Py_None && !PyUnicode_CheckExact(task)) {
        task = PyObject_CallOneArg(self->json, task);
        if (task == NULL) goto done;
        OWN(task);
    }
    PyObject *environment = given(values, s[C_ENVIRONMENT]), *split = given(values, s[C_SPLIT]),
             *task_index = given(values, s[C_TASK_INDEX]);
    if (task_index != NULL && task_index != Py_None && !PyLong_CheckExact(task_index)) {
        task_index = cell(self, s[C_TASK_INDEX], task_index); /* an open row's index must be one before it is kept */
        if (task_index == NULL) goto done;
        OWN(task_index);
    }
    PyObject *sid = given(values, s[C_SESSION_ID]);
    if (sid == NULL) sid = Py_None;
    if (sid != Py_None) {
        PyObject *context;
        if (creates && same_text(kind, S_request)) {
            context = PyObject_CallMethodObjArgs((PyObject *)self, M_create_context, sid,
                                                 body != NULL ? body : Py_None, NULL);
        } else if (same_text(kind, S_open)) {
            context = PyObject_CallMethodObjArgs(
                (PyObject *)self, M_open_context, sid, environment ? environment : Py_None,
                split ? split : Py_None, task_index ? task_index : Py_None, task ? task : Py_None, NULL);
        } else {
            context = PyDict_GetItemWithError(self->sessions, sid);
            if (context == NULL && PyErr_Occurred()) goto done;
            context = context != NULL ? context : self->no_context;
            Py_INCREF(context);
        }
        if (context == NULL) goto done;
        OWN(context); /* owned: a close below takes it out of the sessions */
        if (!PyTuple_CheckExact(context) || PyTuple_GET_SIZE(context) != 4) {
            PyErr_SetString(PyExc_TypeError, "a session's context must be a 4-tuple");
            goto done;
        }
        if (environment == NULL || environment == Py_None) environment = PyTuple_GET_ITEM(context, 0);
        if (split == NULL || split == Py_None) split = PyTuple_GET_ITEM(context, 1);
        if (task_index == NULL || task_index == Py_None) task_index = PyTuple_GET_ITEM(context, 2);
        if (task == NULL || task == Py_None) task = PyTuple_GET_ITEM(context, 3);
        if (same_text(kind, S_close)) { /* nothing of the session follows its close: keep memory bounded */
            if (PyDict_DelItem(self->sessions, sid) < 0) PyErr_Clear();
            if (PyDict_DelItem(self->calls, sid) < 0) PyErr_Clear();
        }
    }
    PyObject *call = given(values, s[C_CALL]);
    PyObject *tool = given(values, s[C_TOOL]), *tool_input = given(values, s[C_INPUT]);
    if (call != NULL && call != Py_None) {
        PyObject *of_session = PyDict_GetItemWithError(self->calls, sid);
        if (of_session == NULL) {
            if (PyErr_Occurred()) goto done;
            of_session = PyDict_New();
            if (of_session == NULL) goto done;
            int stored = PyDict_SetItem(self->calls, sid, of_session);
            Py_DECREF(of_session); /* the dict keeps it */
            if (stored < 0) goto done;
        }
        PyObject *pair = PyDict_GetItemWithError(of_session, call);
        if (pair == NULL && PyErr_Occurred()) goto done;
        if (pair == NULL && same_text(kind, S_request)) {
            pair = PyObject_CallMethodObjArgs((PyObject *)self, M_call_meaning, body != NULL ? body : Py_None, NULL);
            if (pair == NULL) goto done;
            int stored = PyDict_SetItem(of_session, call, pair);
            Py_DECREF(pair); /* the dict keeps it */
            if (stored < 0) goto done;
        }
        if (pair == NULL) pair = self->no_call;
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "a call's meaning must be (tool, input)");
            goto done;
        }
        if (tool == NULL) tool = PyTuple_GET_ITEM(pair, 0); /* given, even as None, wins */
        if (tool_input == NULL) tool_input = PyTuple_GET_ITEM(pair, 1);
    }
    if (self->patterns) {
        PyObject *texts[2] = {tool_input, task};
        PyObject *redacted = redact_texts(self, texts, 2);
        if (redacted == NULL) goto done;
        OWN(redacted);
        tool_input = texts[0];
        task = texts[1];
    }
    if (put(self, s[C_ENVIRONMENT], environment) < 0 || put(self, s[C_SPLIT], split) < 0 ||
        put(self, s[C_TASK_INDEX], task_index) < 0 || put(self, s[C_TASK], task) < 0 ||
        put(self, s[C_TOOL], tool) < 0 || put(self, s[C_INPUT], tool_input) < 0)
        goto done;
    result = 0;
done:
    while (nowned) Py_DECREF(owned[--nowned]);
    return result;
}

/* room for one more row in every column, grown for all at once */
static int room_for_a_row(Rows *self) {
    Py_ssize_t rows = self->columns[0].n + 1;
    if (rows <= self->row_cap) return 0;
    Py_ssize_t cap = self->row_cap ? 2 * self->row_cap : 1024;
    for (Py_ssize_t i = 0; i < self->ncolumns; i++)
        if (reserve(&self->columns[i], cap) < 0) return -1;
    self->row_cap = cap;
    return 0;
}

/* the column of each keyword name, from the cache of call sites' tuples (NULL with an error set) */
static const signed char *columns_of(Rows *self, PyObject *kwnames) {
    Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
    uintptr_t hash = (uintptr_t)nkw;
    for (Py_ssize_t k = 0; k < nkw; k++) hash = hash * 1000003u ^ ((uintptr_t)PyTuple_GET_ITEM(kwnames, k) >> 4);
    KwSlot *slot = &self->kw[(hash ^ hash >> 15) % KW_SLOTS];
    if (slot->names == kwnames) return slot->columns;
    if (slot->names != NULL && PyTuple_GET_SIZE(slot->names) == nkw) {
        Py_ssize_t k = 0;
        while (k < nkw && PyTuple_GET_ITEM(slot->names, k) == PyTuple_GET_ITEM(kwnames, k)) k++;
        if (k == nkw) return slot->columns;
    }
    if (nkw > self->ncolumns) {
        PyErr_SetString(PyExc_TypeError, "more fields than the trace has columns");
        return NULL;
    }
    signed char columns[MAX_COLUMNS];
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, k);
        PyObject *number = PyDict_GetItemWithError(self->index, name);
        if (number == NULL) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "%R is not a trace column (docs/trace-format.md lists them)", name);
            return NULL;
        }
        Py_ssize_t i = PyLong_AsSsize_t(number);
        if (i < 0) {
            PyErr_Format(PyExc_TypeError, "%R is stamped by the recorder, not given to emit", name);
            return NULL;
        }
        columns[k] = (signed char)i;
    }
    Py_XSETREF(slot->names, Py_NewRef(kwnames));
    memcpy(slot->columns, columns, (size_t)nkw);
    return slot->columns;
}

static PyObject *Rows_emit(Rows *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    if (nargs != 1 || !PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "emit(kind, /, **fields) takes the kind as a str, then column values by name");
        return NULL;
    }
    if (!self->configured) {
        PyErr_SetString(PyExc_RuntimeError, "the recorder is not set up");
        return NULL;
    }
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long long t_ns = (long long)now.tv_sec * 1000000000LL + now.tv_nsec - self->t0;
    PyObject *values[MAX_COLUMNS];
    memset(values, 0, sizeof(PyObject *) * (size_t)self->ncolumns);
    if (kwnames != NULL) {
        const signed char *columns = columns_of(self, kwnames);
        if (columns == NULL) return NULL;
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(kwnames); k++) values[columns[k]] = args[1 + k];
    }
    lock(self);
    if (self->closing) {
        PyThread_release_lock(self->lock);
        PyErr_Format(PyExc_RuntimeError, "%R is closed", (PyObject *)self);
        return NULL;
    }
    if (room_for_a_row(self) < 0) {
        PyThread_release_lock(self->lock);
        return NULL;
    }
    Py_ssize_t rows = self->columns[0].n;
    if (add_row(self, args[0], t_ns, values) < 0) {
        for (Py_ssize_t i = 0; i < self->ncolumns; i++) roll_back(&self->columns[i], rows); /* nothing left behind */
        PyThread_release_lock(self->lock);
        return NULL;
    }
    self->next_seq++;
    rows++;
    PyThread_release_lock(self->lock);
    if (rows == self->part_rows || rows >= 2 * self->part_rows) {
        /* a part's worth waiting: wake the writer; twice that: wait for it, so memory stays bounded */
        PyObject *method = rows == self->part_rows ? M_wake_writer : M_wait_for_writer;
        PyObject *done = PyObject_CallMethodNoArgs((PyObject *)self, method);
        if (done == NULL) return NULL;
        Py_DECREF(done);
    }
    if (self->error != NULL && self->error != Py_None) return PyObject_CallMethodNoArgs((PyObject *)self, M_raise_error);
    Py_RETURN_NONE;
}

/* -- set-up, taking the rows, and the type ------------------------------------------------------- */

static PyObject *Rows_setup(Rows *self, PyObject *args) {
    PyObject *columns, *stamped, *kind_layer, *agent_layer, *headers_type, *json;
    if (!PyArg_ParseTuple(args, "O!O!O!UOO:_setup", &PyList_Type, &columns, &PyTuple_Type, &stamped, &PyDict_Type,
                          &kind_layer, &agent_layer, &headers_type, &json))
        return NULL;
    if (self->configured) {
        PyErr_SetString(PyExc_RuntimeError, "the recorder is set up already");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(columns);
    if (n > MAX_COLUMNS) {
        PyErr_SetString(PyExc_ValueError, "too many trace columns");
        return NULL;
    }
    for (int j = 0; j < N_SPECIAL; j++) self->special[j] = -1;
    PyObject *index = PyDict_New();
    if (index == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *spec = PyList_GET_ITEM(columns, i);
        const char *name;
        int kind;
        if (!PyArg_ParseTuple(spec, "si:_setup column", &name, &kind)) goto fail;
        if (kind < K_INT64 || kind > K_LARGE_BINARY) {
            PyErr_Format(PyExc_ValueError, "column %s: unknown kind %d", name, kind);
            goto fail;
        }
        self->columns[i].kind = kind;
        for (int j = 0; j < N_SPECIAL; j++)
            if (strcmp(name, SPECIAL_NAMES[j]) == 0) self->special[j] = (int)i;
        int own = strcmp(name, "seq") == 0 || strcmp(name, "t_ns") == 0 || strcmp(name, "kind") == 0;
        PyObject *number = PyLong_FromSsize_t(own ? -1 : i);
        if (number == NULL || PyDict_SetItemString(index, name, number) < 0) { Py_XDECREF(number); goto fail; }
        Py_DECREF(number);
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(stamped); i++) { /* the columns the writer stamps */
        PyObject *minus_one = PyLong_FromLong(-1);
        if (minus_one == NULL || PyDict_SetItem(index, PyTuple_GET_ITEM(stamped, i), minus_one) < 0) {
            Py_XDECREF(minus_one);
            goto fail;
        }
        Py_DECREF(minus_one);
    }
    for (int j = 0; j < C_DATA; j++) {
        if (self->special[j] < 0) {
            PyErr_Format(PyExc_ValueError, "the trace columns lack %s", SPECIAL_NAMES[j]);
            goto fail;
        }
    }
    self->ncolumns = n;
    const int *s = self->special;
    for (Py_ssize_t i = 0; i < n; i++) {
        reset_column(&self->columns[i]);
        self->roles[i] = is_context(s, i) ? AS_CONTEXT : i == s[C_SEQ] ? AS_SEQ : i == s[C_T_NS] ? AS_T_NS
                       : i == s[C_HEADERS] ? AS_HEADERS : AS_GIVEN;
    }
    Py_XSETREF(self->index, index);
    Py_XSETREF(self->kind_layer, Py_NewRef(kind_layer));
    Py_XSETREF(self->agent_layer, Py_NewRef(agent_layer));
    Py_XSETREF(self->headers_type, Py_NewRef(headers_type));
    Py_XSETREF(self->json, Py_NewRef(json));
    self->configured = 1;
    Py_RETURN_NONE;
fail:
    Py_DECREF(index);
    return NULL;
}

/* every waiting row's columns as (rows, nulls, validity or None, values or offsets, data or None), emptied */
static PyObject *Rows_take(Rows *self, PyObject *Py_UNUSED(ignored)) {
    lock(self);
    Py_ssize_t rows = self->ncolumns ? self->columns[0].n : 0;
    PyObject *out = PyList_New(rows ? self->ncolumns : 0);
    if (out == NULL) { PyThread_release_lock(self->lock); return NULL; }
    for (Py_ssize_t i = 0; rows && i < self->ncolumns; i++) {
        Column *c = &self->columns[i];
        int width = value_width(c->kind);
        Py_ssize_t values_len = c->kind == K_BOOL ? (c->n + 7) / 8 : (is_var(c->kind) ? c->n + 1 : c->n) * width;
        PyObject *valid = c->nulls ? PyBytes_FromStringAndSize((char *)c->valid, (c->n + 7) / 8) : Py_NewRef(Py_None);
        PyObject *values = PyBytes_FromStringAndSize(c->values, values_len);
        PyObject *data = is_var(c->kind) ? PyBytes_FromStringAndSize(c->data ? c->data : "", c->data_len)
                                         : Py_NewRef(Py_None);
        if (valid == NULL || values == NULL || data == NULL) {
            Py_XDECREF(valid); Py_XDECREF(values); Py_XDECREF(data);
            goto fail;
        }
        PyObject *entry = Py_BuildValue("nnNNN", c->n, c->nulls, valid, values, data);
        if (entry == NULL) goto fail;
        PyList_SET_ITEM(out, i, entry);
    }
    for (Py_ssize_t i = 0; i < self->ncolumns; i++) reset_column(&self->columns[i]);
    PyThread_release_lock(self->lock);
    return out;
fail:
    PyThread_release_lock(self->lock);
    Py_DECREF(out);
    return NULL;
}

static PyObject *Rows_get_waiting(Rows *self, void *Py_UNUSED(closure)) {
    return PyLong_FromSsize_t(self->ncolumns ? self->columns[0].n : 0);
}

static PyObject *Rows_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    Rows *self = (Rows *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->lock = PyThread_allocate_lock();
    self->sessions = PyDict_New();
    self->calls = PyDict_New();
    self->urls = PyDict_New();
    self->header_items = PyMem_Calloc(HEADER_SLOTS, sizeof(HeaderSlot));
    self->no_context = PyTuple_Pack(4, Py_None, Py_None, Py_None, Py_None);
    self->no_call = PyTuple_Pack(2, Py_None, Py_None);
    self->error = Py_NewRef(Py_None);
    self->part_rows = 8192;
    if (self->lock == NULL || !self->sessions || !self->calls || !self->urls || !self->header_items ||
        !self->no_context || !self->no_call) {
        Py_DECREF(self);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    return (PyObject *)self;
}

static int Rows_traverse(Rows *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->index);
    for (int j = 0; j < KW_SLOTS; j++) Py_VISIT(self->kw[j].names);
    Py_VISIT(self->kind_layer);
    Py_VISIT(self->agent_layer);
    Py_VISIT(self->headers_type);
    Py_VISIT(self->json);
    Py_VISIT(self->no_context);
    Py_VISIT(self->no_call);
    Py_VISIT(self->sessions);
    Py_VISIT(self->calls);
    Py_VISIT(self->urls);
    for (Py_ssize_t i = 0; self->header_items != NULL && i < HEADER_SLOTS; i++) {
        Py_VISIT(self->header_items[i].item);
        Py_VISIT(self->header_items[i].known);
    }
    Py_VISIT(self->error);
    return 0;
}

static int Rows_clear(Rows *self) {
    Py_CLEAR(self->index);
    for (int j = 0; j < KW_SLOTS; j++) Py_CLEAR(self->kw[j].names);
    Py_CLEAR(self->kind_layer);
    Py_CLEAR(self->agent_layer);
    Py_CLEAR(self->headers_type);
    Py_CLEAR(self->json);
    Py_CLEAR(self->no_context);
    Py_CLEAR(self->no_call);
    Py_CLEAR(self->sessions);
    Py_CLEAR(self->calls);
    Py_CLEAR(self->urls);
    forget_header_items(self);
    Py_CLEAR(self->error);
    self->configured = 0;
    return 0;
}

static void Rows_dealloc(Rows *self) {
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Rows_clear(self);
    PyMem_Free(self->header_items);
    for (Py_ssize_t i = 0; i < MAX_COLUMNS; i++) free_column(&self->columns[i]);
    if (self->lock != NULL) PyThread_free_lock(self->lock);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyMethodDef Rows_methods[] = {
    {"emit", (PyCFunction)(void (*)(void))Rows_emit, METH_FASTCALL | METH_KEYWORDS,
     "emit(kind, /, **fields)\n--\n\nRecord one event now. ``fields`` are column values (see docs/trace-format.md)."},
    {"_setup", (PyCFunction)Rows_setup, METH_VARARGS,
     "_setup(columns, stamped, kind_layer, agent_layer, headers_type, json): the columns emit stores as (name, "
     "kind) pairs, the names of those the writer stamps, and the rest of what emit needs."},
    {"_take", (PyCFunction)Rows_take, METH_NOARGS,
     "Every waiting row's column buffers, as (rows, nulls, validity, values, data) per column; the rows are "
     "taken."},
    {NULL},
};

static PyMemberDef Rows_members[] = {
    {"_sessions", T_OBJECT, offsetof(Rows, sessions), READONLY, "session id -> its context"},
    {"_calls", T_OBJECT, offsetof(Rows, calls), READONLY, "session id -> {call: (tool, input)}"},
    {"_urls", T_OBJECT, offsetof(Rows, urls), READONLY, "URL -> (redacted URL, is a /create)"},
    {"_header_items", T_PYSSIZET, offsetof(Rows, n_header_items), READONLY, "header items cached"},
    {"_error", T_OBJECT, offsetof(Rows, error), 0, "the writer's failure, or None"},
    {"_t0", T_LONGLONG, offsetof(Rows, t0), 0, "monotonic ns at t_ns 0"},
    {"_next_seq", T_LONGLONG, offsetof(Rows, next_seq), 0, "the seq of the next row"},
    {"_part_rows", T_PYSSIZET, offsetof(Rows, part_rows), 0, "rows that make a part"},
    {"_closing", T_BOOL, offsetof(Rows, closing), 0, "emit refuses rows"},
    {"_patterns", T_BOOL, offsetof(Rows, patterns), 0, "the user gave patterns to redact"},
    {NULL},
};

static PyGetSetDef Rows_getset[] = {
    {"_waiting", (getter)Rows_get_waiting, NULL, "rows emitted and not yet taken", NULL},
    {NULL},
};

static PyType_Slot Rows_slots[] = {
    {Py_tp_doc, "The recorder's rows: emit stores each straight into Arrow column buffers."},
    {Py_tp_new, Rows_new},
    {Py_tp_dealloc, Rows_dealloc},
    {Py_tp_traverse, Rows_traverse},
    {Py_tp_clear, Rows_clear},
    {Py_tp_methods, Rows_methods},
    {Py_tp_members, Rows_members},
    {Py_tp_getset, Rows_getset},
    {0, NULL},
};

static PyType_Spec Rows_spec = {
    .name = "ors_lab.recording._rows.Rows",
    .basicsize = sizeof(Rows),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = Rows_slots,
};

static int intern(PyObject **slot, const char *text) {
    *slot = PyUnicode_InternFromString(text);
    return *slot == NULL ? -1 : 0;
}

static int rows_exec(PyObject *module) {
    if (intern(&S_request, "request") || intern(&S_open, "open") || intern(&S_close, "close") ||
        intern(&S_empty, "") || intern(&S_list, "_list") || intern(&M_cell, "_cell") || intern(&M_headers_json, "_headers_json") ||
        intern(&M_header_item, "_header_item") || intern(&M_url_known, "_url_known") || intern(&M_body, "_body") ||
        intern(&M_create_context, "_create_context") || intern(&M_open_context, "_open_context") ||
        intern(&M_call_meaning, "_call_meaning") || intern(&M_redact_texts, "_redact_texts") ||
        intern(&M_wake_writer, "_wake_writer") || intern(&M_wait_for_writer, "_wait_for_writer") ||
        intern(&M_raise_error, "_raise_error"))
        return -1;
    PyObject *type = PyType_FromModuleAndSpec(module, &Rows_spec, NULL);
    if (type == NULL) return -1;
    int added = PyModule_AddObjectRef(module, "Rows", type);
    Py_DECREF(type);
    if (added < 0) return -1;
    if (PyModule_AddIntConstant(module, "INT64", K_INT64) || PyModule_AddIntConstant(module, "INT32", K_INT32) ||
        PyModule_AddIntConstant(module, "FLOAT64", K_FLOAT64) || PyModule_AddIntConstant(module, "BOOL", K_BOOL) ||
        PyModule_AddIntConstant(module, "STRING", K_STRING) ||
        PyModule_AddIntConstant(module, "LARGE_STRING", K_LARGE_STRING) ||
        PyModule_AddIntConstant(module, "LARGE_BINARY", K_LARGE_BINARY))
        return -1;
    return 0;
}

static PyModuleDef_Slot rows_module_slots[] = {{Py_mod_exec, rows_exec}, {0, NULL}};

static struct PyModuleDef rows_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ors_lab.recording._rows",
    .m_doc = "The recorder's hot path in C: rows straight into Arrow column buffers.",
    .m_size = 0,
    .m_slots = rows_module_slots,
};

PyMODINIT_FUNC PyInit__rows(void) { return PyModuleDef_Init(&rows_module); }
