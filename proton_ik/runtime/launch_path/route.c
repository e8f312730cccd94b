/* What the launches of one stream need of its drain, and the drain's submit (runtime/drain.py). */
#include "launch_path.h"

/* ---- Route: what the launches of one stream need of its drain (drain.Drain.route) -------- */

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

PyTypeObject RouteType = {
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

int truth(PyObject *object) {
    if (object == NULL)
        return -1;
    int result = PyObject_IsTrue(object);
    Py_DECREF(object);
    return result;
}

/* Drain.submit for a recorded launch: queue it, and seal its stream's launches with one event
 * every `per_event` launches or once the pool is past the drain mark. */
int submit(Route *route, PyObject *queued, PyObject *stream) {
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
