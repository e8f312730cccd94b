/* The launch path's common case, compiled: the device pool's ring, the profile allocator and the
 * launch-exit hook, for a launch on a stream whose drain is known, outside a graph capture, with
 * room in the pool, in a session with nothing to add to a launch's metadata. (A kernel whose
 * buffer Triton does not size, segments sized at launch or CTAs sampled, is sized by the Python:
 * one call.)
 *
 * runtime/compiled.py builds this file with Triton's own C build (the compiler Triton's launchers
 * need), once per source and Python. The Python in runtime/pool.py, runtime/hooks.py and
 * runtime/drain.py is the reference: it holds the same logic, takes every case this file hands
 * back to it, and runs alone where this file cannot be built. tests/runtime/test_compiled_path.py
 * runs both on the same launches and compares what they leave.
 *
 * Every function here runs with the GIL held and releases it only inside the Python it calls, so
 * the ring's updates are atomic for Python threads; runtime/compiled.py does not build this file
 * for a Python without the GIL. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

/* ---- Chunk: a piece of the arena handed to one launch (pool.PoolChunk) ------------------- */

typedef struct {
    PyObject_HEAD
    long long offset, size, skip; /* skip: bytes left unused at the arena's end to wrap to 0 */
    char released;
} Chunk;

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

static PyTypeObject ChunkType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "proton_ik_launch_path.Chunk",
    .tp_basicsize = sizeof(Chunk),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_members = Chunk_members,
    .tp_repr = (reprfunc)Chunk_repr,
};

/* ---- Ring: offsets into an arena, handed out and given back in order (pool.RingPool) ------ */

typedef struct {
    PyObject_HEAD
    long long capacity, align, head, used, high_water, handed_out;
    Chunk **live; /* chunks handed out and not yet reclaimed, oldest first, circular */
    Py_ssize_t first, count, room;
    PyObject *too_small; /* pool.PoolTooSmall.for_launch(size, capacity): the exception to raise */
} Ring;

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
static Chunk *ring_take(Ring *self, long long size) {
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

static PyTypeObject RingType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "proton_ik_launch_path.Ring",
    .tp_basicsize = sizeof(Ring),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Ring_init,
    .tp_dealloc = (destructor)Ring_dealloc,
    .tp_methods = Ring_methods,
    .tp_members = Ring_members,
};

/* ---- QueuedLaunch: a launch waiting in the pool (queued_launch.QueuedLaunch, its fields) ----
 * Not tracked by the cyclic collector: a launch refers to no object that refers back to it, and
 * a launch in a loop then costs the collector nothing. runtime/queued_launch.py gives it the
 * dataclass's methods (adopt). */

typedef struct {
    PyObject_HEAD
    PyObject *chunk, *number, *kernel, *num_ctas, *stream, *device, *extra, *launched;
    char owns_event;
} Queued;

static int Queued_init(Queued *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"chunk", "number", "kernel", "num_ctas", "stream", "device", "extra",
                            "launched", "owns_event", NULL};
    PyObject *chunk, *number = Py_None, *kernel = Py_None, *num_ctas = NULL, *stream = NULL, *device = NULL,
             *extra = Py_None, *launched = Py_None;
    int owns_event = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|OOOOOOOp", names, &chunk, &number, &kernel, &num_ctas,
                                     &stream, &device, &extra, &launched, &owns_event))
        return -1;
    PyObject *zero = PyLong_FromLong(0);
    if (zero == NULL)
        return -1;
    Py_XSETREF(self->chunk, Py_NewRef(chunk));
    Py_XSETREF(self->number, Py_NewRef(number));
    Py_XSETREF(self->kernel, Py_NewRef(kernel));
    Py_XSETREF(self->num_ctas, Py_NewRef(num_ctas ? num_ctas : zero));
    Py_XSETREF(self->stream, Py_NewRef(stream ? stream : zero));
    Py_XSETREF(self->device, Py_NewRef(device ? device : zero));
    Py_XSETREF(self->extra, Py_NewRef(extra));
    Py_XSETREF(self->launched, Py_NewRef(launched));
    self->owns_event = (char)owns_event;
    Py_DECREF(zero);
    return 0;
}

static void Queued_dealloc(Queued *self) {
    Py_XDECREF(self->chunk);
    Py_XDECREF(self->number);
    Py_XDECREF(self->kernel);
    Py_XDECREF(self->num_ctas);
    Py_XDECREF(self->stream);
    Py_XDECREF(self->device);
    Py_XDECREF(self->extra);
    Py_XDECREF(self->launched);
    Py_TYPE(self)->tp_free((PyObject *)self); /* a Python subclass's own dealloc drops its type */
}

static PyMemberDef Queued_members[] = {
    {"chunk", T_OBJECT, offsetof(Queued, chunk), 0, NULL},
    {"number", T_OBJECT, offsetof(Queued, number), 0, NULL},
    {"kernel", T_OBJECT, offsetof(Queued, kernel), 0, NULL},
    {"num_ctas", T_OBJECT, offsetof(Queued, num_ctas), 0, NULL},
    {"stream", T_OBJECT, offsetof(Queued, stream), 0, NULL},
    {"device", T_OBJECT, offsetof(Queued, device), 0, NULL},
    {"extra", T_OBJECT, offsetof(Queued, extra), 0, NULL},
    {"launched", T_OBJECT, offsetof(Queued, launched), 0, NULL},
    {"owns_event", T_BOOL, offsetof(Queued, owns_event), 0, NULL},
    {NULL},
};

static PyTypeObject QueuedType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "proton_ik_launch_path.QueuedLaunch",
    .tp_basicsize = sizeof(Queued),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Queued_init,
    .tp_dealloc = (destructor)Queued_dealloc,
    .tp_members = Queued_members,
};

/* ---- Route: what the launches of one stream need of its drain (drain.Drain.route) -------- */

typedef struct {
    PyObject_HEAD
    PyObject *drain;
    Ring *ring;
    long long base; /* the arena's device address */
    PyObject *device;
    PyObject *unevented; /* dict: stream handle -> the launches since its last event */
    PyObject *sealing;   /* the lock that guards it */
    PyObject *waiting;   /* the drain's queue (a deque) */
    double drain_at;     /* bytes in use past which each launch seals and wakes the drain */
    Py_ssize_t per_event; /* LAUNCHES_PER_EVENT */
} Route;

static int Route_init(Route *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"drain", "ring", "base", "device", "unevented", "sealing", "waiting",
                            "drain_at", "per_event", NULL};
    PyObject *drain, *ring, *device, *unevented, *sealing, *waiting;
    long long base;
    double drain_at;
    Py_ssize_t per_event;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO!LOO!OOdn", names, &drain, &RingType, &ring, &base,
                                     &device, &PyDict_Type, &unevented, &sealing, &waiting, &drain_at,
                                     &per_event))
        return -1;
    Py_XSETREF(self->drain, Py_NewRef(drain));
    Py_XSETREF(self->ring, (Ring *)Py_NewRef(ring));
    Py_XSETREF(self->device, Py_NewRef(device));
    Py_XSETREF(self->unevented, Py_NewRef(unevented));
    Py_XSETREF(self->sealing, Py_NewRef(sealing));
    Py_XSETREF(self->waiting, Py_NewRef(waiting));
    self->base = base;
    self->drain_at = drain_at;
    self->per_event = per_event;
    return 0;
}

static int Route_traverse(Route *self, visitproc visit, void *arg) {
    Py_VISIT(self->drain);
    Py_VISIT(self->ring);
    Py_VISIT(self->device);
    Py_VISIT(self->unevented);
    Py_VISIT(self->sealing);
    Py_VISIT(self->waiting);
    return 0;
}

static int Route_clear(Route *self) {
    Py_CLEAR(self->drain);
    Py_CLEAR(self->ring);
    Py_CLEAR(self->device);
    Py_CLEAR(self->unevented);
    Py_CLEAR(self->sealing);
    Py_CLEAR(self->waiting);
    return 0;
}

static void Route_dealloc(Route *self) {
    PyObject_GC_UnTrack(self);
    Route_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef Route_members[] = {
    {"drain", T_OBJECT, offsetof(Route, drain), READONLY, NULL},
    {NULL},
};

static PyTypeObject RouteType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "proton_ik_launch_path.Route",
    .tp_basicsize = sizeof(Route),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Route_init,
    .tp_dealloc = (destructor)Route_dealloc,
    .tp_traverse = (traverseproc)Route_traverse,
    .tp_clear = (inquiry)Route_clear,
    .tp_members = Route_members,
};

/* ---- LaunchPath: the allocator and the exit hook (hooks.LaunchRecorder.allocate, .exit) --- */

typedef struct {
    PyObject_HEAD
    PyObject *launching;      /* the recorder's thread states: upcoming, pending (threading.local) */
    PyObject *kernels;        /* loaded.KERNELS */
    PyObject *capturing;      /* whether the current stream captures a graph */
    PyObject *current_device; /* the current device, for stream handle 0 */
    PyObject *routes;         /* dict: stream handle -> Route; for handle 0, -1 - device -> Route */
    PyObject *allocate;       /* the recorder's Python allocate: every other case */
    PyObject *exit;           /* its Python exit */
    PyObject *sized;          /* its sizing of a buffer Triton does not size (LaunchRecorder.sized) */
    PyObject *host_scopes;    /* the module whose open_count says host scopes are open */
    PyObject *recorder;       /* its autotune: a launch of an autotuner names its config */
    PyObject *queued_launch;  /* this module's QueuedLaunch, its methods adopted (queued_launch_type) */
    long long launches;       /* launches numbered so far */
    int plain;                /* recording, no names from launch_metadata, no flush policy */
} LaunchPath;

static PyObject *s_upcoming, *s_pending, *s_bound_entries, *s_every_cta, *s_cta_bytes, *s_open_count,
    *s_autotune, *s_active, *s_acquire, *s_release, *s_append, *s_seal_stream, *s_submit, *s_idle,
    *s_wake, *s_route;

static int LaunchPath_init(LaunchPath *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"launching", "kernels", "capturing", "current_device", "allocate", "exit",
                            "sized", "host_scopes", "recorder", "queued_launch", NULL};
    PyObject *launching, *kernels, *capturing, *current_device, *allocate, *exit, *sized, *host_scopes,
        *recorder, *queued_launch;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO!OOOOOOOO", names, &launching, &PyDict_Type, &kernels,
                                     &capturing, &current_device, &allocate, &exit, &sized, &host_scopes,
                                     &recorder, &queued_launch))
        return -1;
    if (queued_launch != (PyObject *)&QueuedType) {
        PyErr_SetString(PyExc_TypeError, "queued_launch is this module's QueuedLaunch (queued_launch_type())");
        return -1;
    }
    PyObject *routes = PyDict_New();
    if (routes == NULL)
        return -1;
    Py_XSETREF(self->routes, routes);
    Py_XSETREF(self->launching, Py_NewRef(launching));
    Py_XSETREF(self->kernels, Py_NewRef(kernels));
    Py_XSETREF(self->capturing, Py_NewRef(capturing));
    Py_XSETREF(self->current_device, Py_NewRef(current_device));
    Py_XSETREF(self->allocate, Py_NewRef(allocate));
    Py_XSETREF(self->exit, Py_NewRef(exit));
    Py_XSETREF(self->sized, Py_NewRef(sized));
    Py_XSETREF(self->host_scopes, Py_NewRef(host_scopes));
    Py_XSETREF(self->recorder, Py_NewRef(recorder));
    Py_XSETREF(self->queued_launch, Py_NewRef(queued_launch));
    return 0;
}

static int LaunchPath_traverse(LaunchPath *self, visitproc visit, void *arg) {
    Py_VISIT(self->launching);
    Py_VISIT(self->kernels);
    Py_VISIT(self->capturing);
    Py_VISIT(self->current_device);
    Py_VISIT(self->routes);
    Py_VISIT(self->allocate);
    Py_VISIT(self->exit);
    Py_VISIT(self->sized);
    Py_VISIT(self->host_scopes);
    Py_VISIT(self->recorder);
    Py_VISIT(self->queued_launch);
    return 0;
}

static int LaunchPath_clear(LaunchPath *self) {
    Py_CLEAR(self->launching);
    Py_CLEAR(self->kernels);
    Py_CLEAR(self->capturing);
    Py_CLEAR(self->current_device);
    Py_CLEAR(self->routes);
    Py_CLEAR(self->allocate);
    Py_CLEAR(self->exit);
    Py_CLEAR(self->sized);
    Py_CLEAR(self->host_scopes);
    Py_CLEAR(self->recorder);
    Py_CLEAR(self->queued_launch);
    return 0;
}

static void LaunchPath_dealloc(LaunchPath *self) {
    PyObject_GC_UnTrack(self);
    LaunchPath_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* 1 if `object` is true, 0 if false, -1 with an error; steals the reference. */
static int truth(PyObject *object) {
    if (object == NULL)
        return -1;
    int result = PyObject_IsTrue(object);
    Py_DECREF(object);
    return result;
}

/* The route of a launch on `stream` (borrowed), or NULL with no error when none is known yet. */
static PyObject *route_of(LaunchPath *self, PyObject *stream, long long handle) {
    if (handle != 0)
        return PyDict_GetItemWithError(self->routes, stream);
    PyObject *device = PyObject_CallNoArgs(self->current_device);
    if (device == NULL)
        return NULL;
    long index = PyLong_AsLong(device);
    Py_DECREF(device);
    if (index == -1 && PyErr_Occurred())
        return NULL;
    PyObject *key = PyLong_FromLong(-1 - index);
    if (key == NULL)
        return NULL;
    PyObject *route = PyDict_GetItemWithError(self->routes, key);
    Py_DECREF(key);
    return route;
}

/* allocate(size, alignment, stream): the address of the launch's buffer in its drain's arena. */
static PyObject *LaunchPath_allocate(LaunchPath *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3)
        return PyObject_Vectorcall(self->allocate, args, nargs, NULL);
    PyObject *upcoming = NULL, *pending = NULL, *result = NULL;
    PyObject *stream = args[2] == Py_None ? NULL : args[2];
    long long size, handle = 0;
    if ((upcoming = PyObject_GetAttr(self->launching, s_upcoming)) == NULL ||
        (pending = PyObject_GetAttr(self->launching, s_pending)) == NULL)
        goto done;
    if (pending != Py_None || !PyTuple_Check(upcoming) || PyTuple_GET_SIZE(upcoming) < 1)
        goto python;
    if ((size = PyLong_AsLongLong(args[0])) == -1 && PyErr_Occurred())
        goto done;
    if (stream != NULL && (handle = PyLong_AsLongLong(stream)) == -1 && PyErr_Occurred())
        goto done;
    PyObject *kernel = PyDict_GetItemWithError(self->kernels, PyTuple_GET_ITEM(upcoming, 0));
    if (kernel == NULL) {
        if (PyErr_Occurred())
            goto done;
        goto python; /* not registered yet */
    }
    PyObject *bound = PyObject_GetAttr(kernel, s_bound_entries);
    if (bound == NULL)
        goto done;
    int sized_at_launch = bound != Py_None;
    Py_DECREF(bound);
    int every_cta = truth(PyObject_GetAttr(kernel, s_every_cta));
    if (every_cta < 0)
        goto done;
    PyObject *route = route_of(self, stream, handle);
    if (route == NULL) {
        if (PyErr_Occurred())
            goto done;
        goto python; /* this stream's first launch */
    }
    Py_INCREF(route); /* held across the calls below, which may run other threads */
    int capturing = truth(PyObject_CallNoArgs(self->capturing));
    if (capturing != 0) {
        Py_DECREF(route);
        if (capturing < 0)
            goto done;
        goto python;
    }
    /* A buffer Triton does not size (segments sized at launch, CTAs sampled): the Python sizes
     * it, as LaunchRecorder.allocate does: (kernel as launched, CTAs, bytes, address tag). */
    PyObject *sizing = NULL, *launched = kernel, *ctas = Py_None, *bytes = args[0];
    long long tag = 0;
    if (sized_at_launch || !every_cta) {
        PyObject *sized_args[] = {kernel, upcoming, args[0]};
        sizing = PyObject_Vectorcall(self->sized, sized_args, 3, NULL);
        if (sizing == NULL || !PyTuple_Check(sizing) || PyTuple_GET_SIZE(sizing) != 4) {
            if (sizing != NULL)
                PyErr_SetString(PyExc_TypeError, "LaunchRecorder.sized returns 4 values");
            Py_XDECREF(sizing);
            Py_DECREF(route);
            PyObject_SetAttr(self->launching, s_upcoming, Py_None); /* told of this launch, as in Python */
            goto done;
        }
        launched = PyTuple_GET_ITEM(sizing, 0);
        ctas = PyTuple_GET_ITEM(sizing, 1);
        bytes = PyTuple_GET_ITEM(sizing, 2);
        if (((size = PyLong_AsLongLong(bytes)) == -1 || (tag = PyLong_AsLongLong(PyTuple_GET_ITEM(sizing, 3))) == -1) &&
            PyErr_Occurred()) {
            Py_DECREF(sizing);
            Py_DECREF(route);
            goto done;
        }
    }
    Route *r = (Route *)route;
    Chunk *chunk = ring_take(r->ring, size);
    if (chunk == NULL) {
        Py_XDECREF(sizing);
        Py_DECREF(route);
        PyErr_Clear(); /* full, or too large: Python waits for room, or says why it refuses */
        goto python;
    }
    PyObject *no_stream = NULL;
    if (stream == NULL && (no_stream = PyLong_FromLong(0)) == NULL) {
        Py_XDECREF(sizing);
        Py_DECREF(chunk);
        Py_DECREF(route);
        goto done;
    }
    /* The allocation as hooks._Allocation: kernel, CTAs (None: Triton's request says them),
     * bytes, stream, drain, chunk, graph buffer. */
    PyObject *allocation = PyTuple_Pack(7, launched, ctas, bytes, stream ? stream : no_stream, r->drain,
                                        (PyObject *)chunk, Py_None);
    Py_XDECREF(no_stream);
    Py_XDECREF(sizing);
    if (allocation == NULL || PyObject_SetAttr(self->launching, s_upcoming, Py_None) < 0 ||
        PyObject_SetAttr(self->launching, s_pending, allocation) < 0) {
        /* cannot happen short of memory; the chunk stays handed out until the session ends */
        Py_XDECREF(allocation);
        Py_DECREF(chunk);
        Py_DECREF(route);
        goto done;
    }
    Py_DECREF(allocation);
    result = PyLong_FromLongLong(r->base + chunk->offset + tag);
    Py_DECREF(chunk);
    Py_DECREF(route);
    goto done;
python:
    result = PyObject_Vectorcall(self->allocate, args, nargs, NULL);
done:
    Py_XDECREF(upcoming);
    Py_XDECREF(pending);
    return result;
}

/* Drain.submit for a recorded launch: queue it, and seal its stream's launches with one event
 * every `per_event` launches or once the pool is past the drain mark. */
static int submit(Route *route, PyObject *queued, PyObject *stream) {
    int locked = truth(PyObject_CallMethodOneArg(route->sealing, s_acquire, Py_False));
    if (locked <= 0) {
        if (locked < 0)
            return -1;
        /* another thread seals: wait for it as Drain.submit does */
        PyObject *args[] = {route->drain, queued, stream};
        PyObject *done = PyObject_VectorcallMethod(s_submit, args, 3, NULL);
        Py_XDECREF(done);
        return done == NULL ? -1 : 0;
    }
    int failed = 0;
    PyObject *unevented = PyDict_GetItemWithError(route->unevented, stream);
    if (unevented == NULL) {
        if (PyErr_Occurred() || (unevented = PyList_New(0)) == NULL ||
            PyDict_SetItem(route->unevented, stream, unevented) < 0)
            failed = 1;
        else
            Py_DECREF(unevented); /* the dict holds it */
    }
    if (!failed && PyList_Append(unevented, queued) < 0)
        failed = 1;
    int past_mark = route->ring->used >= route->drain_at;
    if (!failed && (PyList_GET_SIZE(unevented) >= route->per_event || past_mark)) {
        Py_INCREF(unevented);
        PyObject *args[] = {route->drain, stream, unevented};
        PyObject *sealed = PyObject_VectorcallMethod(s_seal_stream, args, 3, NULL);
        Py_DECREF(unevented);
        if (sealed == NULL)
            failed = 1;
        Py_XDECREF(sealed);
    }
    PyObject *error_type, *error_value, *error_trace;
    PyErr_Fetch(&error_type, &error_value, &error_trace); /* the lock is released whatever happened */
    PyObject *released = PyObject_CallMethodNoArgs(route->sealing, s_release);
    Py_XDECREF(released);
    if (error_type != NULL) {
        PyErr_Restore(error_type, error_value, error_trace);
        return -1;
    }
    if (released == NULL)
        return -1;
    PyObject *appended = PyObject_CallMethodOneArg(route->waiting, s_append, queued);
    if (appended == NULL)
        return -1;
    Py_DECREF(appended);
    if (route->ring->used >= route->drain_at) {
        int idle = truth(PyObject_GetAttr(route->drain, s_idle));
        if (idle < 0)
            return -1;
        if (idle) {
            PyObject *woken = PyObject_CallMethodNoArgs(route->drain, s_wake);
            if (woken == NULL)
                return -1;
            Py_DECREF(woken);
        }
    }
    return 0;
}

/* exit(launch): number the launch and queue it on its drain. */
static PyObject *LaunchPath_exit(LaunchPath *self, PyObject *launch) {
    PyObject *pending = PyObject_GetAttr(self->launching, s_pending);
    if (pending == NULL)
        return NULL;
    if (pending == Py_None)
        return pending; /* not a launch of ours: nothing was allocated */
    int python = !self->plain || !PyTuple_Check(pending) || PyTuple_GET_SIZE(pending) != 7 ||
                 PyTuple_GET_ITEM(pending, 0) == Py_None || PyTuple_GET_ITEM(pending, 6) != Py_None;
    if (!python) {
        int open = truth(PyObject_GetAttr(self->host_scopes, s_open_count));
        if (open < 0)
            goto failed;
        PyObject *autotune = PyObject_GetAttr(self->recorder, s_autotune);
        if (autotune == NULL)
            goto failed;
        int tuning = autotune == Py_None ? 0 : truth(PyObject_GetAttr(autotune, s_active));
        Py_DECREF(autotune);
        if (tuning < 0)
            goto failed;
        python = open || tuning;
    }
    PyObject *drain = python ? NULL : PyTuple_GET_ITEM(pending, 4);
    PyObject *route = drain == NULL ? NULL : PyObject_GetAttr(drain, s_route);
    if (route == NULL) {
        PyErr_Clear();
    } else if (!PyObject_TypeCheck(route, &RouteType)) {
        Py_CLEAR(route);
    }
    if (route == NULL) {
        Py_DECREF(pending);
        return PyObject_CallOneArg(self->exit, launch);
    }
    if (PyObject_SetAttr(self->launching, s_pending, Py_None) < 0) {
        Py_DECREF(route);
        goto failed;
    }
    PyObject *kernel = PyTuple_GET_ITEM(pending, 0), *ctas = PyTuple_GET_ITEM(pending, 1),
             *size = PyTuple_GET_ITEM(pending, 2), *stream = PyTuple_GET_ITEM(pending, 3),
             *chunk = PyTuple_GET_ITEM(pending, 5);
    PyObject *num_ctas;
    if (ctas != Py_None) {
        num_ctas = Py_NewRef(ctas);
    } else {
        PyObject *cta_bytes = PyObject_GetAttr(kernel, s_cta_bytes);
        num_ctas = cta_bytes == NULL ? NULL : PyNumber_FloorDivide(size, cta_bytes);
        Py_XDECREF(cta_bytes);
    }
    PyObject *number = num_ctas == NULL ? NULL : PyLong_FromLongLong(self->launches++);
    PyObject *queued = NULL;
    if (number != NULL) {
        Queued *made = PyObject_New(Queued, &QueuedType);
        if (made != NULL) {
            made->chunk = Py_NewRef(chunk);
            made->number = Py_NewRef(number);
            made->kernel = Py_NewRef(kernel);
            made->num_ctas = Py_NewRef(num_ctas);
            made->stream = Py_NewRef(stream);
            made->device = Py_NewRef(((Route *)route)->device);
            made->extra = Py_NewRef(Py_None);
            made->launched = Py_NewRef(Py_None);
            made->owns_event = 0;
        }
        queued = (PyObject *)made;
    }
    Py_XDECREF(number);
    Py_XDECREF(num_ctas);
    int ok = queued != NULL && submit((Route *)route, queued, stream) == 0;
    Py_XDECREF(queued);
    Py_DECREF(route);
    Py_DECREF(pending);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
failed:
    Py_DECREF(pending);
    return NULL;
}

static PyObject *LaunchPath_next_number(LaunchPath *self, PyObject *unused) {
    return PyLong_FromLongLong(self->launches++);
}

static PyObject *LaunchPath_add_route(LaunchPath *self, PyObject *args) {
    PyObject *key, *route;
    if (!PyArg_ParseTuple(args, "OO!", &key, &RouteType, &route))
        return NULL;
    if (PyDict_SetItem(self->routes, key, route) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef LaunchPath_methods[] = {
    {"allocate", (PyCFunction)(void (*)(void))LaunchPath_allocate, METH_FASTCALL, "Triton's profile allocator."},
    {"exit", (PyCFunction)LaunchPath_exit, METH_O, "Triton's launch-exit hook."},
    {"next_number", (PyCFunction)LaunchPath_next_number, METH_NOARGS, "The next launch number."},
    {"add_route", (PyCFunction)LaunchPath_add_route, METH_VARARGS,
     "add_route(key, route): the route of a stream handle, or of -1 - device for handle 0."},
    {NULL},
};

static PyMemberDef LaunchPath_members[] = {
    {"launches", T_LONGLONG, offsetof(LaunchPath, launches), READONLY, NULL},
    {"plain", T_BOOL, offsetof(LaunchPath, plain), 0, NULL},
    {NULL},
};

static PyTypeObject LaunchPathType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "proton_ik_launch_path.LaunchPath",
    .tp_basicsize = sizeof(LaunchPath),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)LaunchPath_init,
    .tp_dealloc = (destructor)LaunchPath_dealloc,
    .tp_traverse = (traverseproc)LaunchPath_traverse,
    .tp_clear = (inquiry)LaunchPath_clear,
    .tp_methods = LaunchPath_methods,
    .tp_members = LaunchPath_members,
};

/* ---- the module ----------------------------------------------------------------------------- */

/* adopt(name, function): a method of QueuedLaunch written in Python (the dataclass's). */
static PyObject *adopt(PyObject *unused, PyObject *args) {
    PyObject *name, *function;
    if (!PyArg_ParseTuple(args, "UO", &name, &function))
        return NULL;
    if (PyDict_SetItem(QueuedType.tp_dict, name, function) < 0)
        return NULL;
    PyType_Modified(&QueuedType);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"adopt", adopt, METH_VARARGS, "adopt(name, function): give QueuedLaunch a method written in Python."},
    {NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "proton_ik_launch_path", NULL, -1, module_methods};

PyMODINIT_FUNC PyInit_proton_ik_launch_path(void) {
    struct {
        PyObject **name;
        const char *text;
    } names[] = {{&s_upcoming, "upcoming"},     {&s_pending, "pending"},     {&s_bound_entries, "bound_entries"},
                 {&s_every_cta, "every_cta"},   {&s_cta_bytes, "cta_bytes"}, {&s_open_count, "open_count"},
                 {&s_autotune, "autotune"},     {&s_active, "active"},       {&s_acquire, "acquire"},
                 {&s_release, "release"},       {&s_append, "append"},       {&s_seal_stream, "_seal_stream"},
                 {&s_submit, "submit"},         {&s_idle, "_idle"},          {&s_wake, "wake"},
                 {&s_route, "route"}};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if ((*names[i].name = PyUnicode_InternFromString(names[i].text)) == NULL)
            return NULL;
    PyTypeObject *types[] = {&ChunkType, &RingType, &QueuedType, &RouteType, &LaunchPathType};
    for (size_t i = 0; i < 5; i++)
        if (PyType_Ready(types[i]) < 0)
            return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    const char *type_names[] = {"Chunk", "Ring", "QueuedLaunch", "Route", "LaunchPath"};
    for (size_t i = 0; i < 5; i++) {
        if (PyModule_AddObject(m, type_names[i], Py_NewRef((PyObject *)types[i])) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    }
    return m;
}
