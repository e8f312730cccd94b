/* A chunk's event stream (track headers, slice begins and ends, counter points) written as
 * protobuf packets in one pass per batch of output rows, from the markers' columns.
 *
 * What each packet holds is not decided here: viewer/perfetto/packets.py gives one program per
 * kind of row, a list of operations (constant bytes, a varint from a column, a debug annotation,
 * bytes picked from a table, a nested message) built from the wire constants of
 * viewer/perfetto/wire.py. This file runs the programs. viewer/perfetto/slices.py (event_rows) and
 * viewer/arrays/byterows.py (assemble) are the reference: they write the same bytes with
 * whole-array numpy, and run where this cannot be built; tests/viewer/test_packets.py compares
 * the two on every kind of row.
 *
 * The programs and their columns are read with the GIL held; the pass itself runs without it, on
 * buffers the caller keeps alive, so that the render's other threads (compression) run beside it. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { OP_CONST, OP_CONST_IF, OP_FIELD, OP_FIELD_IF, OP_ANNOTATION, OP_TABLE, OP_OPEN, OP_CLOSE, OP_COUNT };
enum { AT_ROW, AT_SLICE, AT_TRACK, AT_LAUNCH, AT_COUNT };
enum { IF_ZERO, IF_NOT_NEGATIVE, IF_POSITIVE, IF_NOT_ZERO, IF_COUNT };
enum { HEADER, SCOPE, LIFETIME, LAUNCH, END, POINT, KINDS };

#define END_MARKER (-1)
#define COUNT_MARKER (-2)
#define MAX_DEPTH 8
#define LENGTH_ROOM 5 /* a nested message's length: a varint of at most 5 bytes (under 2**35) */
#define MAX_VARINT 10
#define SMALL 16 /* bytes copied whole: a constant this short is copied as 16 (its arena has room) */

typedef struct {
    const int64_t *values;
    Py_ssize_t length;
    int at;
} Column;

typedef struct {
    int op;
    const uint8_t *bytes; /* the bytes, or the key (in the program's arena); OP_TABLE: the data */
    Py_ssize_t size;
    const uint8_t *prefix; /* OP_ANNOTATION: the annotation's name field and its value's key */
    Py_ssize_t prefix_size;
    Column column;    /* OP_FIELD, OP_FIELD_IF, OP_ANNOTATION; OP_TABLE: the offsets */
    Column condition; /* OP_CONST_IF, OP_FIELD_IF */
    int test;         /* IF_*; OP_ANNOTATION: whether a negative value means none */
} Op;

typedef struct {
    Op *ops;
    Py_ssize_t count;
    Py_ssize_t most; /* the most bytes one row can take */
    uint8_t *arena;  /* the constants, each followed by SMALL bytes of room */
    Py_ssize_t arena_size, arena_used;
} Program;

typedef struct {
    Py_buffer *views;
    Py_ssize_t count, room;
} Views;

static int keep_view(Views *views, PyObject *object, Py_buffer **out) {
    if (views->count == views->room) {
        Py_ssize_t room = views->room ? 2 * views->room : 64;
        Py_buffer *grown = PyMem_Realloc(views->views, room * sizeof(Py_buffer));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        views->views = grown;
        views->room = room;
    }
    Py_buffer *view = &views->views[views->count];
    if (PyObject_GetBuffer(object, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    views->count++;
    *out = view;
    return 0;
}

static void release_views(Views *views) {
    for (Py_ssize_t i = 0; i < views->count; i++) PyBuffer_Release(&views->views[i]);
    PyMem_Free(views->views);
}

static int read_bytes(PyObject *object, const uint8_t **bytes, Py_ssize_t *size) {
    if (!PyBytes_Check(object)) {
        PyErr_SetString(PyExc_TypeError, "a program's bytes must be bytes");
        return -1;
    }
    *bytes = (const uint8_t *)PyBytes_AS_STRING(object);
    *size = PyBytes_GET_SIZE(object);
    return 0;
}

/* A constant, copied into the program's arena (sized by read_program) with room after it. */
static int read_constant(Program *program, PyObject *object, const uint8_t **bytes, Py_ssize_t *size) {
    const uint8_t *source;
    if (read_bytes(object, &source, size) < 0) return -1;
    if (program->arena_used + *size + SMALL > program->arena_size) {
        PyErr_SetString(PyExc_ValueError, "a program's constants outgrew their arena");
        return -1;
    }
    uint8_t *copy = program->arena + program->arena_used;
    memcpy(copy, source, *size);
    program->arena_used += *size + SMALL;
    *bytes = copy;
    return 0;
}

/* Copy a constant: one fixed-size copy where it is short (both sides have the room). */
static inline void put_constant(uint8_t *out, const uint8_t *bytes, Py_ssize_t size) {
    if (size <= SMALL)
        memcpy(out, bytes, SMALL);
    else
        memcpy(out, bytes, size);
}

static int is_int64_format(const char *format) {
    if (format[0] == '<' || format[0] == '=' || format[0] == '@') format++;
    return (format[0] == 'q' || (format[0] == 'l' && sizeof(long) == 8)) && format[1] == '\0';
}

static int read_column(Views *views, PyObject *array, PyObject *at, Column *column) {
    Py_buffer *view;
    if (keep_view(views, array, &view) < 0) return -1;
    if (view->itemsize != 8 || view->ndim != 1 || view->format == NULL ||
        !is_int64_format(view->format)) {
        PyErr_SetString(PyExc_TypeError, "a program's columns must be one-dimensional int64 arrays");
        return -1;
    }
    column->values = view->buf;
    column->length = view->shape[0];
    column->at = (int)PyLong_AsLong(at);
    if (column->at == -1 && PyErr_Occurred()) return -1;
    if (column->at < 0 || column->at >= AT_COUNT) {
        PyErr_SetString(PyExc_ValueError, "a column's index kind is unknown");
        return -1;
    }
    return 0;
}

static int read_test(PyObject *object, int *test) {
    long value = PyLong_AsLong(object);
    if (value == -1 && PyErr_Occurred()) return -1;
    if (value < 0 || value >= IF_COUNT) {
        PyErr_SetString(PyExc_ValueError, "a condition is unknown");
        return -1;
    }
    *test = (int)value;
    return 0;
}

static const Py_ssize_t ARITY[OP_COUNT] = {2, 5, 4, 7, 6, 4, 2, 1};

/* One operation from its tuple (the operation first; see packets.py for each one's fields). */
static int read_op(Views *views, Program *program, PyObject *item, Op *op, Py_ssize_t *most) {
    memset(op, 0, sizeof(Op));
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) < 1) {
        PyErr_SetString(PyExc_TypeError, "an operation must be a tuple");
        return -1;
    }
    long code = PyLong_AsLong(PyTuple_GET_ITEM(item, 0));
    if (code == -1 && PyErr_Occurred()) return -1;
    if (code < 0 || code >= OP_COUNT || PyTuple_GET_SIZE(item) != ARITY[code]) {
        PyErr_Format(PyExc_ValueError, "operation %ld is unknown or has the wrong fields", code);
        return -1;
    }
    op->op = (int)code;
    PyObject *field[6] = {NULL};
    for (Py_ssize_t k = 1; k < ARITY[code]; k++) field[k - 1] = PyTuple_GET_ITEM(item, k);
    switch (op->op) {
    case OP_CONST:
        if (read_constant(program, field[0], &op->bytes, &op->size) < 0) return -1;
        *most += op->size;
        return 0;
    case OP_CONST_IF: /* bytes, condition column, its index kind, test */
        if (read_constant(program, field[0], &op->bytes, &op->size) < 0) return -1;
        if (read_column(views, field[1], field[2], &op->condition) < 0) return -1;
        *most += op->size;
        return read_test(field[3], &op->test);
    case OP_FIELD: /* key (or b""), column, index kind */
        if (read_constant(program, field[0], &op->bytes, &op->size) < 0) return -1;
        *most += op->size + MAX_VARINT;
        return read_column(views, field[1], field[2], &op->column);
    case OP_FIELD_IF: /* key, column, index kind, condition column, its index kind, test */
        if (read_constant(program, field[0], &op->bytes, &op->size) < 0) return -1;
        if (read_column(views, field[1], field[2], &op->column) < 0) return -1;
        if (read_column(views, field[3], field[4], &op->condition) < 0) return -1;
        *most += op->size + MAX_VARINT;
        return read_test(field[5], &op->test);
    case OP_ANNOTATION: /* key, prefix, column, index kind, optional */
        if (read_constant(program, field[0], &op->bytes, &op->size) < 0) return -1;
        if (read_constant(program, field[1], &op->prefix, &op->prefix_size) < 0) return -1;
        if (read_column(views, field[2], field[3], &op->column) < 0) return -1;
        op->test = PyObject_IsTrue(field[4]);
        if (op->test < 0) return -1;
        if (op->prefix_size + MAX_VARINT >= 0x80) { /* its length is one byte */
            PyErr_SetString(PyExc_ValueError, "an annotation's prefix must be short");
            return -1;
        }
        *most += op->size + 1 + op->prefix_size + MAX_VARINT;
        return 0;
    case OP_TABLE: { /* data, offsets (entry k: data[offsets[k]:offsets[k + 1]]), index kind */
        if (read_bytes(field[0], &op->bytes, &op->size) < 0) return -1;
        if (read_column(views, field[1], field[2], &op->column) < 0) return -1;
        const int64_t *offsets = op->column.values;
        Py_ssize_t entries = op->column.length - 1, longest = 0;
        if (entries < 0 || offsets[0] != 0 || offsets[entries] != op->size) {
            PyErr_SetString(PyExc_ValueError, "a table's offsets must run from 0 to its size");
            return -1;
        }
        for (Py_ssize_t k = 0; k < entries; k++) {
            if (offsets[k + 1] < offsets[k]) {
                PyErr_SetString(PyExc_ValueError, "a table's offsets must not decrease");
                return -1;
            }
            if (offsets[k + 1] - offsets[k] > longest) longest = offsets[k + 1] - offsets[k];
        }
        *most += longest;
        return 0;
    }
    case OP_OPEN: /* the bytes before the message (its key last) */
        if (read_constant(program, field[0], &op->bytes, &op->size) < 0) return -1;
        *most += op->size + LENGTH_ROOM;
        return 0;
    default: /* OP_CLOSE */
        return 0;
    }
}

static int read_program(Views *views, PyObject *list, Program *program) {
    PyObject *items = PySequence_Fast(list, "a program must be a sequence of operations");
    if (items == NULL) return -1;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(items);
    program->ops = PyMem_Calloc(count ? count : 1, sizeof(Op));
    program->count = count;
    program->most = SMALL; /* a short constant's copy may write this far past the row */
    program->arena_size = 0;
    for (Py_ssize_t i = 0; i < count; i++) { /* room for every constant the program names */
        PyObject *item = PySequence_Fast_GET_ITEM(items, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) < 1) continue; /* read_op says why */
        long code = PyLong_Check(PyTuple_GET_ITEM(item, 0)) ? PyLong_AsLong(PyTuple_GET_ITEM(item, 0)) : -1;
        if (code == -1 && PyErr_Occurred()) PyErr_Clear(); /* too large: read_op refuses it */
        if (code == OP_TABLE) continue;                     /* its data is not copied */
        for (Py_ssize_t k = 1; k < PyTuple_GET_SIZE(item); k++)
            if (PyBytes_Check(PyTuple_GET_ITEM(item, k)))
                program->arena_size += PyBytes_GET_SIZE(PyTuple_GET_ITEM(item, k)) + SMALL;
    }
    program->arena = PyMem_Malloc(program->arena_size ? program->arena_size : 1);
    program->arena_used = 0;
    if (program->ops == NULL || program->arena == NULL) {
        Py_DECREF(items);
        PyErr_NoMemory();
        return -1;
    }
    int depth = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (read_op(views, program, PySequence_Fast_GET_ITEM(items, i), &program->ops[i], &program->most) < 0) {
            Py_DECREF(items);
            return -1;
        }
        depth += program->ops[i].op == OP_OPEN ? 1 : program->ops[i].op == OP_CLOSE ? -1 : 0;
        if (depth < 0 || depth > MAX_DEPTH) break;
    }
    Py_DECREF(items);
    if (depth != 0) {
        PyErr_SetString(PyExc_ValueError, "a program's messages must open and close in pairs");
        return -1;
    }
    return 0;
}

static inline Py_ssize_t put_varint(uint8_t *out, uint64_t value) {
    Py_ssize_t n = 0;
    while (value >= 0x80) {
        out[n++] = (uint8_t)(value | 0x80);
        value >>= 7;
    }
    out[n++] = (uint8_t)value;
    return n;
}

static inline int passes(int test, int64_t value) {
    switch (test) {
    case IF_ZERO: return value == 0;
    case IF_NOT_NEGATIVE: return value >= 0;
    case IF_POSITIVE: return value > 0;
    default: return value != 0;
    }
}

/* The row being written: its own index (a marker's, or a header's) and what it points at. */
typedef struct {
    Py_ssize_t index[AT_COUNT];
} Row;

static inline int value_of(const Column *column, const Row *row, int64_t *value) {
    Py_ssize_t at = row->index[column->at];
    if (at < 0 || at >= column->length) return -1;
    *value = column->values[at];
    return 0;
}

/* One row's packet at ``out``; its length, or -1 where an index falls outside its column. A
 * nested message's length gets one byte, and its body moves up only where it needs more. */
static Py_ssize_t run_program(const Program *program, const Row *row, uint8_t *out) {
    Py_ssize_t pos = 0, open[MAX_DEPTH];
    int depth = 0;
    int64_t value, condition;
    for (Py_ssize_t i = 0; i < program->count; i++) {
        const Op *op = &program->ops[i];
        switch (op->op) {
        case OP_CONST:
            put_constant(out + pos, op->bytes, op->size);
            pos += op->size;
            break;
        case OP_CONST_IF:
            if (value_of(&op->condition, row, &condition) < 0) return -1;
            if (passes(op->test, condition)) {
                put_constant(out + pos, op->bytes, op->size);
                pos += op->size;
            }
            break;
        case OP_FIELD:
            if (value_of(&op->column, row, &value) < 0) return -1;
            put_constant(out + pos, op->bytes, op->size);
            pos += op->size;
            pos += put_varint(out + pos, (uint64_t)value);
            break;
        case OP_FIELD_IF:
            if (value_of(&op->condition, row, &condition) < 0) return -1;
            if (!passes(op->test, condition)) break;
            if (value_of(&op->column, row, &value) < 0) return -1;
            put_constant(out + pos, op->bytes, op->size);
            pos += op->size;
            pos += put_varint(out + pos, (uint64_t)value);
            break;
        case OP_ANNOTATION: {
            if (value_of(&op->column, row, &value) < 0) return -1;
            if (op->test && value < 0) break; /* optional, and absent */
            put_constant(out + pos, op->bytes, op->size);
            pos += op->size;
            Py_ssize_t length_at = pos++;
            put_constant(out + pos, op->prefix, op->prefix_size);
            pos += op->prefix_size;
            Py_ssize_t digits = put_varint(out + pos, (uint64_t)value);
            pos += digits;
            out[length_at] = (uint8_t)(op->prefix_size + digits); /* under 128: checked when read */
            break;
        }
        case OP_TABLE: {
            Py_ssize_t entry = row->index[op->column.at];
            if (entry < 0 || entry + 1 >= op->column.length) return -1;
            int64_t start = op->column.values[entry], size = op->column.values[entry + 1] - start;
            memcpy(out + pos, op->bytes + start, size);
            pos += size;
            break;
        }
        case OP_OPEN:
            put_constant(out + pos, op->bytes, op->size);
            pos += op->size;
            open[depth++] = pos++;
            break;
        default: { /* OP_CLOSE */
            Py_ssize_t start = open[--depth], body = pos - start - 1;
            if (body < 0x80) {
                out[start] = (uint8_t)body;
                break;
            }
            uint8_t length[MAX_VARINT];
            Py_ssize_t digits = put_varint(length, (uint64_t)body);
            memmove(out + start + digits, out + start + 1, body);
            memcpy(out + start, length, digits);
            pos = start + digits + body;
            break;
        }
        }
    }
    return pos;
}

typedef struct {
    const int64_t *header_row, *marker_row, *slice, *track;
    Py_ssize_t headers, markers;
    int64_t scopes, lives;
} Stream;

static int read_stream_column(Views *views, PyObject *array, const int64_t **values, Py_ssize_t *length) {
    Column column;
    PyObject *zero = PyLong_FromLong(0);
    if (zero == NULL) return -1;
    int failed = read_column(views, array, zero, &column);
    Py_DECREF(zero);
    if (failed < 0) return -1;
    *values = column.values;
    *length = column.length;
    return 0;
}

/* In ascending ``rows``, the first at or past ``row``. */
static Py_ssize_t first_at_or_past(const int64_t *rows, Py_ssize_t count, Py_ssize_t row) {
    Py_ssize_t a = 0, b = count;
    while (a < b) {
        Py_ssize_t middle = a + (b - a) / 2;
        if (rows[middle] < row)
            a = middle + 1;
        else
            b = middle;
    }
    return a;
}

/* encode(programs, header_row, marker_row, slice, track, scopes, lives, lo, hi) -> bytes
 *
 * Output rows lo to hi (past the last) of a chunk's event stream. ``programs``: one per kind of
 * row, in the order HEADER, SCOPE, LIFETIME, LAUNCH, END, POINT. A row is a track's header where
 * ``header_row`` has it (both row columns ascending), else the marker ``marker_row`` puts there:
 * a slice's end (``slice`` -1), a counter point (-2), or a begin of scope events (slice below
 * ``scopes``), unit lifetimes (below ``lives``) or launches (the rest). Columns are read at the
 * row's own index, its slice, its track or its launch (its slice less ``lives``). */
static PyObject *encode(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *programs_arg, *header_row, *marker_row, *slice, *track;
    long long scopes, lives;
    Py_ssize_t lo, hi;
    if (!PyArg_ParseTuple(args, "OOOOOLLnn", &programs_arg, &header_row, &marker_row, &slice, &track,
                          &scopes, &lives, &lo, &hi))
        return NULL;
    Views views = {0};
    Program programs[KINDS] = {{0}};
    Stream stream = {.scopes = scopes, .lives = lives};
    PyObject *result = NULL;
    uint8_t *out = NULL;
    Py_ssize_t slices = 0, tracks = 0;
    PyObject *list = PySequence_Fast(programs_arg, "programs must be a sequence");
    if (list == NULL) goto done;
    if (PySequence_Fast_GET_SIZE(list) != KINDS) {
        PyErr_Format(PyExc_ValueError, "a program for each of the %d kinds of row is needed", KINDS);
        goto done;
    }
    for (int kind = 0; kind < KINDS; kind++)
        if (read_program(&views, PySequence_Fast_GET_ITEM(list, kind), &programs[kind]) < 0) goto done;
    if (read_stream_column(&views, header_row, &stream.header_row, &stream.headers) < 0 ||
        read_stream_column(&views, marker_row, &stream.marker_row, &stream.markers) < 0 ||
        read_stream_column(&views, slice, &stream.slice, &slices) < 0 ||
        read_stream_column(&views, track, &stream.track, &tracks) < 0)
        goto done;
    if (slices != stream.markers || tracks != stream.markers || lo < 0 || hi < lo) {
        PyErr_SetString(PyExc_ValueError, "the markers' columns must be as long as their rows");
        goto done;
    }
    Py_ssize_t size = 0, capacity = 0, failed_row = -1, h = 0, m = 0;
    Py_ssize_t most = 0;
    for (int kind = 0; kind < KINDS; kind++)
        if (programs[kind].most > most) most = programs[kind].most;
    int order_broken = 0;
    Py_BEGIN_ALLOW_THREADS
    h = first_at_or_past(stream.header_row, stream.headers, lo);
    m = first_at_or_past(stream.marker_row, stream.markers, lo);
    capacity = (hi - lo) * 64 + most;
    out = PyMem_RawMalloc(capacity);
    for (Py_ssize_t r = lo; out != NULL && r < hi; r++) {
        if (size + most > capacity) {
            capacity = 2 * capacity + most;
            uint8_t *grown = PyMem_RawRealloc(out, capacity);
            if (grown == NULL) {
                PyMem_RawFree(out);
                out = NULL;
                break;
            }
            out = grown;
        }
        Row row = {{0}};
        const Program *program;
        if (h < stream.headers && stream.header_row[h] == r) {
            row.index[AT_ROW] = h++;
            program = &programs[HEADER];
        } else if (m < stream.markers && stream.marker_row[m] == r) {
            int64_t s = stream.slice[m];
            row.index[AT_ROW] = m;
            row.index[AT_SLICE] = s;
            row.index[AT_TRACK] = stream.track[m];
            row.index[AT_LAUNCH] = s - stream.lives;
            m++;
            program = s == END_MARKER     ? &programs[END]
                      : s == COUNT_MARKER ? &programs[POINT]
                      : s < 0             ? NULL
                      : s < stream.scopes ? &programs[SCOPE]
                      : s < stream.lives  ? &programs[LIFETIME]
                                          : &programs[LAUNCH];
            if (program == NULL) {
                failed_row = r;
                break;
            }
        } else {
            order_broken = 1;
            failed_row = r;
            break;
        }
        Py_ssize_t written = run_program(program, &row, out + size);
        if (written < 0) {
            failed_row = r;
            break;
        }
        size += written;
    }
    Py_END_ALLOW_THREADS
    if (out == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (failed_row >= 0) {
        PyErr_Format(PyExc_ValueError,
                     order_broken ? "row %zd of the event stream is neither a header nor a marker"
                                  : "row %zd of the event stream points outside its columns",
                     failed_row);
        goto done;
    }
    result = PyBytes_FromStringAndSize((const char *)out, size);
done:
    PyMem_RawFree(out);
    for (int kind = 0; kind < KINDS; kind++) {
        PyMem_Free(programs[kind].ops);
        PyMem_Free(programs[kind].arena);
    }
    release_views(&views);
    Py_XDECREF(list);
    return result;
}

static PyMethodDef methods[] = {
    {"encode", encode, METH_VARARGS, "Rows lo to hi of a chunk's event stream, as protobuf packets."},
    {NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "proton_ik_packets",
    .m_doc = "A chunk's event stream as Perfetto packets.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit_proton_ik_packets(void) { return PyModule_Create(&module); }
