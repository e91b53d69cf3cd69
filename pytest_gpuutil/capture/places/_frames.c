/* The calling thread's Python source places, read at a synchronizing call or a copy
 * (pytest_gpuutil/capture/places/calls.py).
 *
 * The CUPTI callback in _waits.c runs inside the CUDA runtime call, on the thread that made it. torch
 * releases the GIL around its CUDA calls (.item(), .to(), torch.cuda.synchronize()), so the callback
 * must not touch the interpreter's state through the API: taking the GIL there could deadlock (torch's
 * allocator synchronizes under its own lock) and would cost the loop its turn. Yet this thread's frames
 * cannot change while it sits in the C call: walk() reads them as they are (the way out-of-process
 * samplers do), through CPython's frame layout of 3.11 to 3.13, and never writes, allocates or counts
 * a reference. Code objects stay alive while their frames run, so their file name and line are read
 * in place (PyCode_Addr2Line only reads the line table). Elsewhere (another Python version) walk()
 * finds nothing and places come only from the stack sampler.
 *
 * Each distinct (code, line) becomes a place in one table (its id, file, line, function); frames in
 * files under the skipped prefixes (torch, the plugin, pytest, pluggy, the standard library) are
 * stepped over, so the places are the user's code. Cost: a few frames' pointer reads and one prefix
 * compare each, and a table look-up under a mutex: well under a microsecond per call here.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <errno.h>
#include <time.h>

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000 && defined(__has_include)
#if __has_include(<internal/pycore_frame.h>)
#define Py_BUILD_CORE 1
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE
#define CAN_WALK 1
#endif
#endif

enum { MAX_PLACES = 8192, MAX_SKIPS = 32, PATH_CHARS = 512, NAME_CHARS = 128, MAX_DEPTH = 128 };

typedef struct {
    const void *code;
    int line;
    uint32_t id; /* 0: a free slot */
} Slot;

typedef struct {
    int line;
    char path[PATH_CHARS];
    char name[NAME_CHARS];
} Place;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static Slot slots[MAX_PLACES * 2];
static Place places[MAX_PLACES + 1]; /* ids from 1 */
static uint32_t n_places;
static char skips[MAX_SKIPS][PATH_CHARS];
static size_t skip_lens[MAX_SKIPS];
static int skip_flags[MAX_SKIPS]; /* 1: frames in files under the prefix are skipped, 0: kept */
static int n_skips;

#ifdef CAN_WALK
static const char *ascii_of(PyObject *text) {
    if (text == NULL || !PyUnicode_Check(text) || !PyUnicode_IS_COMPACT_ASCII(text)) return NULL;
    return (const char *)PyUnicode_DATA(text);
}

static int skipped(const char *path) {
    if (path[0] == '<') return 1; /* <frozen ...>, <string> */
    for (int i = 0; i < n_skips; i++) /* the first prefix that matches decides */
        if (strncmp(path, skips[i], skip_lens[i]) == 0) return skip_flags[i];
    return 0;
}

static uint32_t intern(PyCodeObject *code, int line, const char *path) {
    size_t at = (((uintptr_t)code >> 4) ^ ((uintptr_t)line * 2654435761u)) % (MAX_PLACES * 2);
    uint32_t id = 0;
    pthread_mutex_lock(&lock);
    for (size_t probe = 0; probe < MAX_PLACES * 2; probe++, at = (at + 1) % (MAX_PLACES * 2)) {
        Slot *slot = &slots[at];
        if (slot->id && slot->code == code && slot->line == line) {
            id = slot->id;
            break;
        }
        if (!slot->id) {
            if (n_places >= MAX_PLACES) break;
            id = ++n_places;
            slot->code = code;
            slot->line = line;
            slot->id = id;
            Place *place = &places[id];
            place->line = line;
            strncpy(place->path, path, PATH_CHARS - 1);
            const char *name = ascii_of(code->co_name);
            strncpy(place->name, name ? name : "?", NAME_CHARS - 1);
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return id;
}
#endif

/* Up to max place ids of the calling thread's innermost frames outside the skipped files, innermost
 * first; how many. Callable with or without the GIL, from the thread whose frames are read. */
static int walk(uint32_t *out, int max) {
#ifdef CAN_WALK
    PyThreadState *tstate = PyGILState_GetThisThreadState();
    if (tstate == NULL) return 0;
#if PY_VERSION_HEX >= 0x030D0000
    _PyInterpreterFrame *frame = tstate->current_frame;
#else
    _PyInterpreterFrame *frame = tstate->cframe ? tstate->cframe->current_frame : NULL;
#endif
    int found = 0;
    for (int depth = 0; frame != NULL && found < max && depth < MAX_DEPTH; frame = frame->previous, depth++) {
#if PY_VERSION_HEX >= 0x030C0000
        if (frame->owner == FRAME_OWNED_BY_CSTACK) continue;
#endif
#if PY_VERSION_HEX >= 0x030D0000
        if (frame->f_executable == NULL || !PyCode_Check(frame->f_executable)) continue;
        PyCodeObject *code = (PyCodeObject *)frame->f_executable;
#else
        PyCodeObject *code = frame->f_code;
#endif
        if (code == NULL || _PyFrame_IsIncomplete(frame)) continue;
        const char *path = ascii_of(code->co_filename);
        if (path == NULL || skipped(path)) continue;
        int line = PyCode_Addr2Line(code, _PyInterpreterFrame_LASTI(frame) * (int)sizeof(_Py_CODEUNIT));
        uint32_t id = intern(code, line, path);
        if (id) out[found++] = id;
    }
    return found;
#else
    (void)out; (void)max;
    return 0;
#endif
}

static PyObject *walk_address(PyObject *self, PyObject *args) {
    (void)self; (void)args;
#ifdef CAN_WALK
    return PyLong_FromVoidPtr((void *)&walk);
#else
    Py_RETURN_NONE;
#endif
}

static PyObject *set_skips(PyObject *self, PyObject *arg) {
    (void)self;
    PyObject *seq = PySequence_Fast(arg, "set_skips takes a sequence of (path prefix, skipped)");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    pthread_mutex_lock(&lock);
    n_skips = 0;
    for (Py_ssize_t i = 0; i < n && n_skips < MAX_SKIPS; i++) {
        const char *text = NULL;
        int flag = 1;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "sp", &text, &flag)) {
            PyErr_Clear();
            continue;
        }
        skip_flags[n_skips] = flag;
        strncpy(skips[n_skips], text, PATH_CHARS - 1);
        skips[n_skips][PATH_CHARS - 1] = 0;
        skip_lens[n_skips] = strlen(skips[n_skips]);
        n_skips++;
    }
    pthread_mutex_unlock(&lock);
    Py_DECREF(seq);
    Py_RETURN_NONE;
}

/* [(id, path, line, function)] of the places with ids above ``after`` */
static PyObject *places_after(PyObject *self, PyObject *arg) {
    (void)self;
    long after = PyLong_AsLong(arg);
    if (after == -1 && PyErr_Occurred()) return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    pthread_mutex_lock(&lock);
    uint32_t last = n_places;
    pthread_mutex_unlock(&lock);
    for (uint32_t id = (uint32_t)(after < 0 ? 0 : after) + 1; id <= last; id++) {
        PyObject *row = Py_BuildValue("(Isis)", id, places[id].path, places[id].line, places[id].name);
        if (row == NULL || PyList_Append(out, row) < 0) {
            Py_XDECREF(row);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(row);
    }
    return out;
}

/* the place ids of the caller's frames, as walk() finds them (tests, and the sampler's own check) */
static PyObject *here(PyObject *self, PyObject *arg) {
    (void)self;
    long max = PyLong_AsLong(arg);
    if (max == -1 && PyErr_Occurred()) return NULL;
    uint32_t ids[16];
    int n = walk(ids, max < 0 ? 0 : (max > 16 ? 16 : (int)max));
    PyObject *out = PyList_New(n);
    if (out == NULL) return NULL;
    for (int i = 0; i < n; i++) PyList_SET_ITEM(out, i, PyLong_FromUnsignedLong(ids[i]));
    return out;
}

/* The stack sampler's wait between samples (pytest_gpuutil/capture/places/sampler.py): sleeps
 * ``seconds`` without the GIL, then on in steps of ``seconds`` while neither flags[0] (a test's call
 * runs) nor flags[1] (the sampler is closed) is set; the flags are a bytearray the sampler's begin/end
 * write with a plain store. Between calls the thread then never asks for the GIL (no hand-over taken
 * from the test thread, no wake-up at a call's start); while a call runs it returns after one period,
 * as time.sleep did. */
static PyObject *sleep_until_on(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer view;
    double seconds;
    if (!PyArg_ParseTuple(args, "w*d", &view, &seconds)) return NULL;
    if (view.len < 2 || !(seconds > 0)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "sleep_until_on takes a writable buffer of two flags and seconds > 0");
        return NULL;
    }
    volatile unsigned char *flags = (volatile unsigned char *)view.buf;
    struct timespec step;
    step.tv_sec = (time_t)seconds;
    step.tv_nsec = (long)((seconds - (double)step.tv_sec) * 1e9);
    Py_BEGIN_ALLOW_THREADS
    do {
        struct timespec left = step;
        while (nanosleep(&left, &left) != 0 && errno == EINTR) {
        }
    } while (!__atomic_load_n(&flags[0], __ATOMIC_ACQUIRE) && !__atomic_load_n(&flags[1], __ATOMIC_ACQUIRE));
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"walk_address", walk_address, METH_NOARGS, "The address of walk(uint32_t *ids, int max), or None."},
    {"set_skips", set_skips, METH_O, "[(path prefix, skipped)]: the first prefix a file starts with says whether its frames are stepped over."},
    {"places_after", places_after, METH_O, "[(id, path, line, function)] of the places with ids above the one given."},
    {"here", here, METH_O, "The place ids of the caller's innermost frames outside the skipped files."},
    {"sleep_until_on", sleep_until_on, METH_VARARGS, "(flags, seconds): sleep without the GIL, a period at least, until a call runs or the sampler closes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_frames", "Source places of the calling thread.", -1, methods};

PyMODINIT_FUNC PyInit__frames(void) { return PyModule_Create(&module); }
