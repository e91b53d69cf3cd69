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
 *
 * The module's second part (below, parse() and codes()) reads CUPTI's activity buffers into columns
 * at a flush: capture's one C module, so capture/ keeps one C file.
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

/* -- CUPTI's activity buffers read into columns in one C pass (pytest_gpuutil/capture/cupti_records.py).
 *
 * The Python reader walks a buffer record by record (numpy looks ahead only where one kind comes
 * many times in a row) and then pulls each field out with a numpy gather per field; a small test's
 * buffer mixes kinds every few records, so its walk was ~0.3 µs a record of Python. Here:
 *
 *   parse(buffer, valid, size_of)
 *     -> (kinds, starts, ends, devices, streams, labels, sync_types, sync_starts, sync_ends) or None
 *
 * ``buffer``: a contiguous buffer (the numpy array CUPTI filled), ``valid`` its valid bytes,
 * ``size_of(kind, offset)``: a record's size, called once per kind per buffer at the first record
 * of that kind, as cupti_records.walk_records calls it. The columns are bytearrays of native
 * uint32 (kinds, devices, streams, sync_types) and uint64 (the rest), the values and the order of
 * cupti_records.parse_all's columns: kernels (kinds 3, 10), memcpy (1, 22) and memset (2) as GPU
 * work, with the kernel's name pointer, the copy's (kind << 16 | src << 8 | dst) or the memset's
 * memory kind as its label; synchronization records (38) of the types the host waits in (1, 3, 4).
 *
 * None where the Python reader must answer instead: a record's size that is not a positive
 * multiple of 8, a walk that ends inside a record, a field past the valid bytes, a kind past
 * MAX_KIND. The Python reader then raises what it raises there (the same walk, the same calls).
 * An exception of ``size_of`` propagates, as it does from the Python walk.
 */
#define MAX_KIND 1024
#define KIND_MEMCPY 1
#define KIND_MEMSET 2
#define KIND_KERNEL 3
#define KIND_CONCURRENT_KERNEL 10
#define KIND_MEMCPY2 22
#define KIND_SYNCHRONIZATION 38

/* byte offsets, as cupti_records.py names them */
#define START 16
#define END 24
#define KERNEL_DEVICE 40
#define KERNEL_STREAM 48
#define KERNEL_NAME 104
#define COPY_KIND 4
#define COPY_SRC 5
#define COPY_DST 6
#define MEM_DEVICE 32
#define MEM_STREAM 40
#define MEMSET_MEMORY_KIND 50
#define SYNC_TYPE 4
#define SYNC_START 8
#define SYNC_END 16

static inline uint32_t u32_at(const uint8_t *data, Py_ssize_t at) {
    uint32_t v;
    memcpy(&v, data + at, sizeof v);
    return v;
}

static inline uint64_t u64_at(const uint8_t *data, Py_ssize_t at) {
    uint64_t v;
    memcpy(&v, data + at, sizeof v);
    return v;
}

static inline int is_gpu_work(uint32_t kind) {
    return kind == KIND_KERNEL || kind == KIND_CONCURRENT_KERNEL || kind == KIND_MEMCPY || kind == KIND_MEMCPY2
        || kind == KIND_MEMSET;
}

static inline int is_host_wait(uint32_t type) { return type == 1 || type == 3 || type == 4; }

/* the highest byte (exclusive) a GPU work record's fields reach, from its start */
static inline Py_ssize_t gpu_reach(uint32_t kind) {
    if (kind == KIND_KERNEL || kind == KIND_CONCURRENT_KERNEL) return KERNEL_NAME + 8;
    if (kind == KIND_MEMSET) return MEMSET_MEMORY_KIND + 2 > MEM_STREAM + 4 ? MEMSET_MEMORY_KIND + 2 : MEM_STREAM + 4;
    return MEM_STREAM + 4; /* memcpy: kind bytes, times, device, stream */
}

static PyObject *column(Py_ssize_t n, Py_ssize_t width, char **data) {
    PyObject *out = PyByteArray_FromStringAndSize(NULL, n * width);
    if (out != NULL) *data = PyByteArray_AS_STRING(out);
    return out;
}

static PyObject *parse(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *buffer_obj, *size_of;
    Py_ssize_t valid;
    if (!PyArg_ParseTuple(args, "OnO:parse", &buffer_obj, &valid, &size_of)) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(buffer_obj, &view, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    PyObject *result = NULL;
    const uint8_t *data = (const uint8_t *)view.buf;
    if (valid < 0 || valid > view.len) {
        PyErr_SetString(PyExc_ValueError, "valid is outside the buffer");
        goto done;
    }
    Py_ssize_t sizes[MAX_KIND];
    memset(sizes, 0, sizeof sizes);
    Py_ssize_t n_gpu = 0, n_sync = 0, offset = 0;
    const Py_ssize_t words = valid - valid % 8; /* what the Python reader's 8-byte views cover */
    /* the walk, once to check and count (no list of offsets: a buffer of 8 MiB could hold a million) */
    while (offset < valid) {
        if (offset + 4 > valid - valid % 4) goto fallback; /* the kind is past the valid bytes */
        uint32_t kind = u32_at(data, offset);
        if (kind >= MAX_KIND) goto fallback;
        Py_ssize_t size = sizes[kind];
        if (size == 0) {
            PyObject *asked = PyObject_CallFunction(size_of, "In", kind, offset);
            if (asked == NULL) goto done;
            size = PyLong_AsSsize_t(asked);
            Py_DECREF(asked);
            if (size == -1 && PyErr_Occurred()) goto done;
            if (size <= 0 || size % 8) goto fallback;
            sizes[kind] = size;
        }
        if (is_gpu_work(kind)) {
            if (offset + gpu_reach(kind) > words) goto fallback;
            n_gpu++;
        } else if (kind == KIND_SYNCHRONIZATION) {
            if (offset + SYNC_TYPE + 4 > words) goto fallback;
            if (is_host_wait(u32_at(data, offset + SYNC_TYPE))) {
                if (offset + SYNC_END + 8 > words) goto fallback;
                n_sync++;
            }
        }
        offset += size;
    }
    if (offset != valid) goto fallback;
    {
        char *kinds_p = NULL, *starts_p = NULL, *ends_p = NULL, *devices_p = NULL, *streams_p = NULL, *labels_p = NULL;
        char *types_p = NULL, *s_starts_p = NULL, *s_ends_p = NULL;
        PyObject *cols[9];
        cols[0] = column(n_gpu, 4, &kinds_p);
        cols[1] = column(n_gpu, 8, &starts_p);
        cols[2] = column(n_gpu, 8, &ends_p);
        cols[3] = column(n_gpu, 4, &devices_p);
        cols[4] = column(n_gpu, 4, &streams_p);
        cols[5] = column(n_gpu, 8, &labels_p);
        cols[6] = column(n_sync, 4, &types_p);
        cols[7] = column(n_sync, 8, &s_starts_p);
        cols[8] = column(n_sync, 8, &s_ends_p);
        for (int c = 0; c < 9; c++) {
            if (cols[c] == NULL) {
                for (int d = 0; d < 9; d++) Py_XDECREF(cols[d]);
                goto done;
            }
        }
        uint32_t *kinds = (uint32_t *)kinds_p, *devices = (uint32_t *)devices_p, *streams = (uint32_t *)streams_p;
        uint64_t *starts = (uint64_t *)starts_p, *ends = (uint64_t *)ends_p, *labels = (uint64_t *)labels_p;
        uint32_t *types = (uint32_t *)types_p;
        uint64_t *s_starts = (uint64_t *)s_starts_p, *s_ends = (uint64_t *)s_ends_p;
        Py_ssize_t g = 0, s = 0;
        for (Py_ssize_t at = 0; at < valid; at += sizes[u32_at(data, at)]) { /* the same walk, checked */
            uint32_t kind = u32_at(data, at);
            if (is_gpu_work(kind)) {
                kinds[g] = kind;
                starts[g] = u64_at(data, at + START);
                ends[g] = u64_at(data, at + END);
                if (kind == KIND_KERNEL || kind == KIND_CONCURRENT_KERNEL) {
                    devices[g] = u32_at(data, at + KERNEL_DEVICE);
                    streams[g] = u32_at(data, at + KERNEL_STREAM);
                    labels[g] = u64_at(data, at + KERNEL_NAME);
                } else {
                    devices[g] = u32_at(data, at + MEM_DEVICE);
                    streams[g] = u32_at(data, at + MEM_STREAM);
                    if (kind == KIND_MEMSET) {
                        uint16_t memory_kind;
                        memcpy(&memory_kind, data + at + MEMSET_MEMORY_KIND, sizeof memory_kind);
                        labels[g] = memory_kind;
                    } else {
                        labels[g] = ((uint64_t)data[at + COPY_KIND] << 16) | ((uint64_t)data[at + COPY_SRC] << 8)
                            | (uint64_t)data[at + COPY_DST];
                    }
                }
                g++;
            } else if (kind == KIND_SYNCHRONIZATION) {
                uint32_t type = u32_at(data, at + SYNC_TYPE);
                if (is_host_wait(type)) {
                    types[s] = type;
                    s_starts[s] = u64_at(data, at + SYNC_START);
                    s_ends[s] = u64_at(data, at + SYNC_END);
                    s++;
                }
            }
        }
        result = PyTuple_New(9);
        if (result == NULL) {
            for (int d = 0; d < 9; d++) Py_DECREF(cols[d]);
            goto done;
        }
        for (int c = 0; c < 9; c++) PyTuple_SET_ITEM(result, c, cols[c]);
    }
    goto done;
fallback:
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&view);
    return result;
}

/* codes(keys) -> (codes, distinct): each key's code in first-seen order, and the distinct keys in
 * that order (bytearrays of native int64 codes and uint64 keys); ``keys``: a contiguous buffer of
 * native uint64. An open-addressing table: one pass, where numpy's unique sorts every key. */
static PyObject *codes(PyObject *self, PyObject *arg) {
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    PyObject *result = NULL, *codes_out = NULL, *distinct_out = NULL;
    uint64_t *table_keys = NULL;
    int64_t *table_codes = NULL, *distinct_keys = NULL;
    if (view.len % 8) {
        PyErr_SetString(PyExc_ValueError, "keys must be uint64s");
        goto done;
    }
    Py_ssize_t n = view.len / 8;
    const uint8_t *data = (const uint8_t *)view.buf;
    size_t capacity = 64; /* grown below where there are more distinct keys (a flush has a few dozen) */
    size_t n_distinct = 0;
    table_keys = PyMem_Malloc(capacity * sizeof(uint64_t));
    table_codes = PyMem_Malloc(capacity * sizeof(int64_t));
    distinct_keys = PyMem_Malloc((capacity / 2 + 1) * sizeof(int64_t));
    char *codes_p = NULL;
    codes_out = column(n, 8, &codes_p);
    if (table_keys == NULL || table_codes == NULL || distinct_keys == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (codes_out == NULL) goto done;
    for (size_t i = 0; i < capacity; i++) table_codes[i] = -1;
    int64_t *out = (int64_t *)codes_p;
    uint64_t last_key = 0;
    int64_t last_code = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t key = u64_at(data, i * 8);
        if (last_code >= 0 && key == last_key) { /* runs of one key: a launch loop's buffer */
            out[i] = last_code;
            continue;
        }
        uint64_t h = key * 0x9E3779B97F4A7C15ULL;
        size_t slot = (size_t)(h >> 20) & (capacity - 1);
        while (table_codes[slot] >= 0 && table_keys[slot] != key) slot = (slot + 1) & (capacity - 1);
        if (table_codes[slot] < 0) {
            if ((n_distinct + 1) * 2 > capacity) { /* grow: rehash every distinct key */
                size_t bigger = capacity * 2;
                uint64_t *k2 = PyMem_Malloc(bigger * sizeof(uint64_t));
                int64_t *c2 = PyMem_Malloc(bigger * sizeof(int64_t));
                int64_t *d2 = PyMem_Realloc(distinct_keys, (bigger / 2 + 1) * sizeof(int64_t));
                if (k2 == NULL || c2 == NULL || d2 == NULL) {
                    PyMem_Free(k2);
                    PyMem_Free(c2);
                    if (d2 != NULL) distinct_keys = d2;
                    PyErr_NoMemory();
                    goto done;
                }
                distinct_keys = d2;
                for (size_t j = 0; j < bigger; j++) c2[j] = -1;
                for (size_t d = 0; d < n_distinct; d++) {
                    uint64_t dk = (uint64_t)distinct_keys[d];
                    size_t s2 = (size_t)((dk * 0x9E3779B97F4A7C15ULL) >> 20) & (bigger - 1);
                    while (c2[s2] >= 0) s2 = (s2 + 1) & (bigger - 1);
                    k2[s2] = dk;
                    c2[s2] = (int64_t)d;
                }
                PyMem_Free(table_keys);
                PyMem_Free(table_codes);
                table_keys = k2;
                table_codes = c2;
                capacity = bigger;
                slot = (size_t)(h >> 20) & (capacity - 1);
                while (table_codes[slot] >= 0) slot = (slot + 1) & (capacity - 1);
            }
            table_keys[slot] = key;
            table_codes[slot] = (int64_t)n_distinct;
            distinct_keys[n_distinct++] = (int64_t)key;
        }
        last_key = key;
        last_code = table_codes[slot];
        out[i] = last_code;
    }
    distinct_out = PyByteArray_FromStringAndSize((const char *)distinct_keys, (Py_ssize_t)(n_distinct * 8));
    if (distinct_out == NULL) goto done;
    result = PyTuple_Pack(2, codes_out, distinct_out);
done:
    Py_XDECREF(codes_out);
    Py_XDECREF(distinct_out);
    PyMem_Free(table_keys);
    PyMem_Free(table_codes);
    PyMem_Free(distinct_keys);
    PyBuffer_Release(&view);
    return result;
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
    {"parse", parse, METH_VARARGS,
     "parse(buffer, valid, size_of) -> the GPU work's and the host waits' columns (bytearrays), or None"},
    {"codes", codes, METH_O, "codes(uint64 keys) -> (int64 codes in first-seen order, the distinct keys)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_waits", "Host waits from CUPTI callbacks.", -1, methods};

PyMODINIT_FUNC PyInit__waits(void) { return PyModule_Create(&module); }
