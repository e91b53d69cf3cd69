/* The host's waits for the GPU, recorded by a CUPTI callback (pytest_gpuutil/capture/host_waits.py).
 *
 * CUPTI's synchronization activity records (kind 38) make every kernel launch dearer (12.4 against
 * 8.7 us a tiny launch on an H100). Here CUPTI's callback API calls on_api() only on entry to and
 * exit from the synchronizing runtime calls that host_waits.py enables (stream, event and device
 * synchronize); nothing else is called back. on_api() takes no Python lock: it stamps the clock
 * (cuptiGetTimestamp, set by set_clock, so the stamps share the activity records' time line) and
 * appends (type, start, end) under a mutex; take() hands the records to Python as bytes.
 *
 * A Python extension module only so that Python can find the callback's address and the records;
 * the callback itself never touches the interpreter (a Python callback would take the GIL inside
 * torch's synchronize, possibly while torch holds a lock another thread waits for with the GIL).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    uint32_t type;
    uint32_t cbid;
    uint64_t start;
    uint64_t end;
} Wait;

typedef int (*Clock)(uint64_t *);

/* a synchronizing call or a copy with the source places it was made from (see places/_frames.c): what the
 * findings' places read (pytest_gpuutil/capture/places/calls.py) */
typedef struct {
    uint32_t cbid;
    uint32_t n_places;
    uint64_t start;
    uint64_t end;
    uint32_t places[3];
    uint32_t pad;
} Call;

/* _frames.c's walk(): the calling thread's place ids, innermost first (NULL: places are off) */
typedef int (*FrameReader)(uint32_t *, int);

/* at most this many waits between two takes (24 MB); more are counted as dropped */
enum { MAX_WAITS = 1 << 20 };
/* CUpti_CallbackDomain: the runtime API */
enum { DOMAIN_RUNTIME = 2 };

static Clock clock_fn;
/* the clock now() reads: cuptiGetTimestamp, set by set_now (CuptiSource's window edges) */
static Clock now_fn;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static Wait *waits;
static size_t n_waits, cap_waits, dropped;
static __thread uint64_t entered;
static FrameReader frame_reader;
static Call *calls;
static size_t n_calls, cap_calls, dropped_calls;
static __thread uint32_t entered_places[3];
/* set around the capture's own synchronizes (a window's edges): those are not the test's waits and
 * were recorded only to be left out at every flush */
static __thread int quiet;
static __thread int entered_n;

static uint64_t stamp(void) {
    uint64_t value = 0;
    if (clock_fn && clock_fn(&value) == 0) return value;
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t); /* CUPTI's own default clock */
    return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
}

/* CUpti_ActivitySynchronizationType of a runtime call: 1 event, 3 stream, 4 context (device) */
static uint32_t type_of(uint32_t cbid) {
    switch (cbid) {
    case 137: return 1;            /* cudaEventSynchronize_v3020 */
    case 131: case 239: return 3;  /* cudaStreamSynchronize_v3020, _ptsz_v7000 */
    case 126: case 165: return 4;  /* cudaThreadSynchronize_v3020, cudaDeviceSynchronize_v3020 */
    default: return 0;
    }
}

/* the runtime's copies whose call sites are recorded with places: cudaMemcpy_v3020, cudaMemcpyAsync_v3020 */
static int is_copy(uint32_t cbid) { return cbid == 31 || cbid == 41; }

static void add_call(uint32_t cbid, uint64_t start, uint64_t end) {
    Call call = {cbid, (uint32_t)entered_n, start, end, {0, 0, 0}, 0};
    for (int i = 0; i < entered_n && i < 3; i++) call.places[i] = entered_places[i];
    if (n_calls == cap_calls && cap_calls < MAX_WAITS) {
        size_t grown = cap_calls ? cap_calls * 2 : 1024;
        Call *more = realloc(calls, grown * sizeof(Call));
        if (more) {
            calls = more;
            cap_calls = grown;
        }
    }
    if (n_calls < cap_calls) {
        calls[n_calls++] = call;
    } else {
        dropped_calls++;
    }
}

/* CUpti_CallbackFunc: (userdata, domain, cbid, const CUpti_CallbackData *); the data's first field
 * is the callback site, a 32-bit enum: 0 on entry, 1 on exit */
static void on_api(void *userdata, int domain, uint32_t cbid, const void *data) {
    (void)userdata;
    if (quiet || domain != DOMAIN_RUNTIME || data == NULL) return;
    uint32_t site;
    memcpy(&site, data, sizeof site);
    FrameReader reader = frame_reader;
    if (site == 0) {
        entered_n = reader ? reader(entered_places, 3) : 0;
        entered = stamp();
        return;
    }
    uint64_t end = stamp();
    uint32_t type = type_of(cbid);
    if (!entered) return;
    if (!type) {
        if (is_copy(cbid) && reader) {
            pthread_mutex_lock(&lock);
            add_call(cbid, entered, end);
            pthread_mutex_unlock(&lock);
        }
        entered = 0;
        return;
    }
    Wait wait = {type, cbid, entered, end};
    entered = 0;
    pthread_mutex_lock(&lock);
    if (reader) add_call(cbid, wait.start, end);
    if (n_waits == cap_waits && cap_waits < MAX_WAITS) {
        size_t grown = cap_waits ? cap_waits * 2 : 1024;
        Wait *more = realloc(waits, grown * sizeof(Wait));
        if (more) {
            waits = more;
            cap_waits = grown;
        }
    }
    if (n_waits < cap_waits) {
        waits[n_waits++] = wait;
    } else {
        dropped++;
    }
    pthread_mutex_unlock(&lock);
}

static PyObject *callback_address(PyObject *self, PyObject *args) {
    (void)self; (void)args;
    return PyLong_FromVoidPtr((void *)&on_api);
}

static PyObject *set_clock(PyObject *self, PyObject *arg) {
    (void)self;
    void *address = PyLong_AsVoidPtr(arg);
    if (address == NULL && PyErr_Occurred()) return NULL;
    clock_fn = (Clock)address;
    Py_RETURN_NONE;
}

static PyObject *set_now(PyObject *self, PyObject *arg) {
    (void)self;
    void *address = PyLong_AsVoidPtr(arg);
    if (address == NULL && PyErr_Occurred()) return NULL;
    now_fn = (Clock)address;
    Py_RETURN_NONE;
}

/* CUPTI's clock now, as CuptiSource.now's ctypes call reads it (cuptiGetTimestamp), without ctypes'
 * argument conversion and its c_uint64: the window edges, read a few times a test. As that call, the
 * value whatever the result (0 where it failed); CLOCK_REALTIME (CUPTI's default clock) before set_now. */
static PyObject *now(PyObject *self, PyObject *args) {
    (void)self; (void)args;
    uint64_t value = 0;
    if (now_fn) {
        now_fn(&value);
        return PyLong_FromUnsignedLongLong(value);
    }
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return PyLong_FromUnsignedLongLong((uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec);
}

static PyObject *set_quiet(PyObject *self, PyObject *arg) {
    (void)self;
    quiet = PyObject_IsTrue(arg) == 1;
    Py_RETURN_NONE;
}

/* every wait recorded since the last take, as bytes of (u32 type, u32 cbid, u64 start, u64 end), and
 * how many were dropped */
static PyObject *take(PyObject *self, PyObject *args) {
    (void)self; (void)args;
    pthread_mutex_lock(&lock);
    PyObject *out = PyBytes_FromStringAndSize((const char *)waits, (Py_ssize_t)(n_waits * sizeof(Wait)));
    size_t lost = dropped;
    if (out) {
        n_waits = 0;
        dropped = 0;
    }
    pthread_mutex_unlock(&lock);
    if (!out) return NULL;
    return Py_BuildValue("(Nn)", out, (Py_ssize_t)lost);
}

static PyObject *set_frame_reader(PyObject *self, PyObject *arg) {
    (void)self;
    void *address = PyLong_AsVoidPtr(arg);
    if (address == NULL && PyErr_Occurred()) return NULL;
    frame_reader = (FrameReader)address;
    Py_RETURN_NONE;
}

/* every call recorded with places since the last take, as bytes of Call, and how many were dropped */
static PyObject *take_calls(PyObject *self, PyObject *args) {
    (void)self; (void)args;
    pthread_mutex_lock(&lock);
    PyObject *out = PyBytes_FromStringAndSize((const char *)calls, (Py_ssize_t)(n_calls * sizeof(Call)));
    size_t lost = dropped_calls;
    if (out) {
        n_calls = 0;
        dropped_calls = 0;
    }
    pthread_mutex_unlock(&lock);
    if (!out) return NULL;
    return Py_BuildValue("(Nn)", out, (Py_ssize_t)lost);
}

/* the callback as CUPTI calls it, for tests without a GPU: (cbid, site 0 entry / 1 exit) */
static PyObject *call_back(PyObject *self, PyObject *args) {
    (void)self;
    unsigned int cbid, site;
    if (!PyArg_ParseTuple(args, "II", &cbid, &site)) return NULL;
    uint32_t data[4] = {site, 0, 0, 0};
    on_api(NULL, DOMAIN_RUNTIME, cbid, data);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"callback_address", callback_address, METH_NOARGS, "The address of the CUPTI callback (CUpti_CallbackFunc)."},
    {"set_clock", set_clock, METH_O, "The address of cuptiGetTimestamp (0: CLOCK_REALTIME)."},
    {"take", take, METH_NOARGS, "(bytes of the waits since the last take, waits dropped)."},
    {"set_now", set_now, METH_O, "The address of cuptiGetTimestamp for now() (0: CLOCK_REALTIME)."},
    {"set_quiet", set_quiet, METH_O, "Record nothing on this thread while true (the capture's own synchronizes)."},
    {"now", now, METH_NOARGS, "CUPTI's clock now (the set_now clock's value)."},
    {"set_frame_reader", set_frame_reader, METH_O, "The address of _frames' walk (0: no places)."},
    {"take_calls", take_calls, METH_NOARGS, "(bytes of the calls with places since the last take, calls dropped)."},
    {"call_back", call_back, METH_VARARGS, "Call the callback as CUPTI would: (cbid, site)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_waits", "Host waits from CUPTI callbacks.", -1, methods};

PyMODINIT_FUNC PyInit__waits(void) { return PyModule_Create(&module); }
