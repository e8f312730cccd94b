/* The device pool's ring and its chunks (runtime/pool.py: RingPool, PoolChunk). */
#include "launch_path.h"

/* ---- Chunk: a piece of the arena handed to one launch (pool.PoolChunk) ------------------- */

static PyMemberDef Chunk_members[] = {
    {"offset", T_LONGLONG, offsetof(Chunk, offset), READONLY, NULL},
    {"size", T_LONGLONG, offsetof(Chunk, size), READONLY, NULL},
    {"skip", T_LONGLONG, offsetof(Chunk, skip), READONLY, NULL},
    {"released", T_BOOL, offsetof(Chunk, released), READONLY, NULL},
    {NULL},
};

static PyObject *Chunk_repr(Chunk *self) {
    return PyUnicode_FromFormat("Chunk(offset=%lld, size=%lld, skip=%lld, released=%s)", self->offset,
                                self->size, self->skip, self->released ? "True" : "False");
}

PyTypeObject ChunkType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "proton_ik_launch_path.Chunk",
    .tp_basicsize = sizeof(Chunk),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_members = Chunk_members,
    .tp_repr = (reprfunc)Chunk_repr,
};

/* ---- Ring: offsets into an arena, handed out and given back in order (pool.RingPool) ------ */

static long long rounded(long long size, long long align) {
    return size > 0 ? (size + align - 1) / align * align : align;
}

static int Ring_init(Ring *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"capacity", "align", "too_small", NULL};
    long long capacity, align;
    PyObject *too_small;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "LLO", names, &capacity, &align, &too_small))
        return -1;
    if (align <= 0 || capacity < align || capacity % align) {
        PyErr_SetString(PyExc_ValueError, "the ring's capacity must be a positive multiple of its alignment");
        return -1;
    }
    self->capacity = capacity;
    self->align = align;
    Py_XSETREF(self->too_small, Py_NewRef(too_small));
    return 0;
}

static void Ring_dealloc(Ring *self) {
    for (Py_ssize_t i = 0; i < self->count; i++)
        Py_DECREF(self->live[(self->first + i) % self->room]);
    PyMem_Free(self->live);
    Py_XDECREF(self->too_small);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A chunk of `size` bytes (a new reference); NULL with no error set when the ring is full, NULL
 * with an error set for a launch larger than the whole arena. */
Chunk *ring_take(Ring *self, long long size) {
    long long need = rounded(size, self->align);
    if (need > self->capacity) {
        PyObject *error = PyObject_CallFunction(self->too_small, "LL", size, self->capacity);
        if (error != NULL) {
            PyErr_SetObject((PyObject *)Py_TYPE(error), error);
            Py_DECREF(error);
        }
        return NULL;
    }
    long long used = self->used;
    long long head = used ? self->head : 0; /* an empty ring starts over */
    long long skip = head + need > self->capacity ? self->capacity - head : 0;
    used += skip + need;
    if (used > self->capacity)
        return NULL;
    if (self->count == self->room) {
        Py_ssize_t room = self->room ? 2 * self->room : 64;
        Chunk **live = PyMem_New(Chunk *, room);
        if (live == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        for (Py_ssize_t i = 0; i < self->count; i++)
            live[i] = self->live[(self->first + i) % self->room];
        PyMem_Free(self->live);
        self->live = live;
        self->first = 0;
        self->room = room;
    }
    Chunk *chunk = PyObject_New(Chunk, &ChunkType);
    if (chunk == NULL)
        return NULL;
    long long offset = skip ? 0 : head;
    chunk->offset = offset;
    chunk->size = size;
    chunk->skip = skip;
    chunk->released = 0;
    self->live[(self->first + self->count) % self->room] = (Chunk *)Py_NewRef(chunk);
    self->count++;
    self->head = (offset + need) % self->capacity;
    self->used = used;
    self->handed_out += need;
    if (used > self->high_water)
        self->high_water = used;
    return chunk;
}

static PyObject *Ring_try_allocate(Ring *self, PyObject *arg) {
    long long size = PyLong_AsLongLong(arg);
    if (size == -1 && PyErr_Occurred())
        return NULL;
    Chunk *chunk = ring_take(self, size);
    if (chunk == NULL && !PyErr_Occurred())
        Py_RETURN_NONE;
    return (PyObject *)chunk;
}

static PyObject *Ring_release(Ring *self, PyObject *arg) {
    if (!PyObject_TypeCheck(arg, &ChunkType)) {
        PyErr_SetString(PyExc_TypeError, "release takes a chunk this ring handed out");
        return NULL;
    }
    ((Chunk *)arg)->released = 1;
    while (self->count && self->live[self->first]->released) {
        Chunk *oldest = self->live[self->first];
        self->used -= oldest->skip + rounded(oldest->size, self->align);
        self->first = (self->first + 1) % self->room;
        self->count--;
        Py_DECREF(oldest);
    }
    Py_RETURN_NONE;
}

static PyMethodDef Ring_methods[] = {
    {"try_allocate", (PyCFunction)Ring_try_allocate, METH_O, "A chunk of this many bytes, or None while the ring is full."},
    {"release", (PyCFunction)Ring_release, METH_O, "Give a chunk back; space is reclaimed in allocation order."},
    {NULL},
};

static PyMemberDef Ring_members[] = {
    {"capacity", T_LONGLONG, offsetof(Ring, capacity), READONLY, NULL},
    {"align", T_LONGLONG, offsetof(Ring, align), READONLY, NULL},
    {"used", T_LONGLONG, offsetof(Ring, used), READONLY, NULL},
    {"high_water", T_LONGLONG, offsetof(Ring, high_water), READONLY, NULL},
    {"handed_out", T_LONGLONG, offsetof(Ring, handed_out), READONLY, NULL},
    {NULL},
};

PyTypeObject RingType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "proton_ik_launch_path.Ring",
    .tp_basicsize = sizeof(Ring),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Ring_init,
    .tp_dealloc = (destructor)Ring_dealloc,
    .tp_methods = Ring_methods,
    .tp_members = Ring_members,
};
