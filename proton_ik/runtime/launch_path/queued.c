/* A launch waiting in the pool (runtime/queued_launch.py: QueuedLaunch). */
#include "launch_path.h"

/* ---- QueuedLaunch: a launch waiting in the pool (queued_launch.QueuedLaunch, its fields) ----
 * Not tracked by the cyclic collector: a launch refers to no object that refers back to it, and
 * a launch in a loop then costs the collector nothing. runtime/queued_launch.py gives it the
 * dataclass's methods (adopt). */

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

PyTypeObject QueuedType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "proton_ik_launch_path.QueuedLaunch",
    .tp_basicsize = sizeof(Queued),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Queued_init,
    .tp_dealloc = (destructor)Queued_dealloc,
    .tp_members = Queued_members,
};

/* adopt(name, function): a method of QueuedLaunch written in Python (the dataclass's). */
PyObject *adopt(PyObject *unused, PyObject *args) {
    PyObject *name, *function;
    if (!PyArg_ParseTuple(args, "UO", &name, &function))
        return NULL;
    if (PyDict_SetItem(QueuedType.tp_dict, name, function) < 0)
        return NULL;
    PyType_Modified(&QueuedType);
    Py_RETURN_NONE;
}
