/* The profile allocator and the launch-exit hook (runtime/hooks.py), and the module. */
#include "launch_path.h"

PyObject *s_upcoming, *s_pending, *s_bound_entries, *s_every_cta, *s_cta_bytes, *s_open_count, *s_autotune,
    *s_active, *s_acquire, *s_release, *s_append, *s_seal_stream, *s_submit, *s_idle, *s_wake, *s_route;

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
