/* The launch path's common case, compiled: the device pool's ring, the profile allocator and the
 * launch-exit hook, for a launch on a stream whose drain is known, outside a graph capture, with
 * room in the pool, in a session with nothing to add to a launch's metadata. (A kernel whose
 * buffer Triton does not size, segments sized at launch or CTAs sampled, is sized by the Python:
 * one call.)
 *
 * One extension module, a file per concept: ring.c (the pool's ring and its chunks, as
 * runtime/pool.py), queued.c (a launch waiting in the pool, as runtime/queued_launch.py), route.c
 * (what a stream's launches need of its drain, and Drain.submit), launch_path.c (the allocator and
 * the exit hook, as runtime/hooks.py, and the module). proton_ik/native.py builds them at run
 * time. The Python is the reference: it holds the same logic, takes every case these files hand
 * back to it, and runs alone where they cannot be built. tests/runtime/test_compiled_path.py runs
 * both on the same launches and compares what they leave.
 *
 * Every function here runs with the GIL held and releases it only inside the Python it calls, so
 * the ring's updates are atomic for Python threads; proton_ik/native.py builds nothing for a
 * Python without the GIL. */
#ifndef PROTON_IK_LAUNCH_PATH_H
#define PROTON_IK_LAUNCH_PATH_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

/* ring.c */
typedef struct {
    PyObject_HEAD
    long long offset, size, skip; /* skip: bytes left unused at the arena's end to wrap to 0 */
    char released;
} Chunk;

typedef struct {
    PyObject_HEAD
    long long capacity, align, head, used, high_water, handed_out;
    Chunk **live; /* chunks handed out and not yet reclaimed, oldest first, circular */
    Py_ssize_t first, count, room;
    PyObject *too_small; /* pool.PoolTooSmall.for_launch(size, capacity): the exception to raise */
} Ring;

extern PyTypeObject ChunkType, RingType;
/* A chunk of `size` bytes (a new reference); NULL with no error set when the ring is full, NULL
 * with an error set for a launch larger than the whole arena. */
Chunk *ring_take(Ring *self, long long size);

/* queued.c */
typedef struct {
    PyObject_HEAD
    PyObject *chunk, *number, *kernel, *num_ctas, *stream, *device, *extra, *launched;
    char owns_event;
} Queued;

extern PyTypeObject QueuedType;
PyObject *adopt(PyObject *unused, PyObject *args);

/* route.c */
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

extern PyTypeObject RouteType;
int submit(Route *route, PyObject *queued, PyObject *stream);
/* 1 if `object` is true, 0 if false, -1 with an error; steals the reference. */
int truth(PyObject *object);

/* launch_path.c: attribute and method names, interned at the module's import */
extern PyObject *s_upcoming, *s_pending, *s_bound_entries, *s_every_cta, *s_cta_bytes, *s_open_count,
    *s_autotune, *s_active, *s_acquire, *s_release, *s_append, *s_seal_stream, *s_submit, *s_idle,
    *s_wake, *s_route;

#endif
