/* A stand-in for libcupti on machines without a GPU: the activity API the plugin uses, fed by
 * fake_work() instead of a GPU. Records have CUPTI's layout at the offsets the plugin reads
 * (pytest_gpuutil/capture/cupti.py, children/inject.c); times are CLOCK_REALTIME ns, as CUPTI's
 * default clock is. Built by tests/children/conftest.py; the file name must hold "libcupti.so". */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void (*Requested)(uint8_t **, size_t *, size_t *);
typedef void (*Completed)(void *, uint32_t, uint8_t *, size_t, size_t);

enum { KERNEL_SIZE = 160, COPY_SIZE = 64 };
static Requested requested;
static Completed completed;
static int enabled;
static uint8_t pending[1 << 20];
static size_t pending_size;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const char *names[64];
static int n_names;

static uint64_t now(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
}

int cuptiGetVersion(uint32_t *version) { *version = 130001; return 0; }
int cuptiGetResultString(int result, const char **text) { (void)result; *text = "fake error"; return 0; }
int cuptiGetTimestamp(uint64_t *stamp) { *stamp = now(); return 0; }
int cuptiActivityEnable(int kind) { (void)kind; enabled = 1; return 0; }
int cuptiActivityDisable(int kind) { (void)kind; enabled = 0; return 0; }
int cuptiActivityRegisterCallbacks(Requested r, Completed c) { requested = r; completed = c; return 0; }
int cuptiActivityGetNumDroppedRecords(void *ctx, uint32_t stream, size_t *dropped) {
    (void)ctx; (void)stream; *dropped = 0; return 0;
}

static size_t size_of(const uint8_t *record) {
    uint32_t kind;
    memcpy(&kind, record, 4);
    return kind == 10 || kind == 3 ? KERNEL_SIZE : COPY_SIZE;
}

int cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, void **record) {
    uint8_t *at = *record ? (uint8_t *)*record + size_of(*record) : buffer;
    if (at >= buffer + valid) return 12; /* CUPTI_ERROR_MAX_LIMIT_REACHED */
    *record = at;
    return 0;
}

/* With FAKE_CUPTI_HOLD set, CUPTI's default flush (flag 0) returns nothing, as the real one does with
 * a buffer that is not yet full: only the forced flush (flag 1) hands the records over. */
int cuptiActivityFlushAll(uint32_t flag) {
    const char *hold = getenv("FAKE_CUPTI_HOLD");
    if (flag == 0 && hold && *hold) return 0;
    pthread_mutex_lock(&lock);
    if (!pending_size || !requested || !completed) { pthread_mutex_unlock(&lock); return 0; }
    uint8_t *buffer = NULL;
    size_t size = 0, max_records = 0;
    requested(&buffer, &size, &max_records);
    size_t valid = pending_size < size ? pending_size : size;
    memcpy(buffer, pending, valid);
    pending_size = 0;
    pthread_mutex_unlock(&lock);
    completed(NULL, 0, buffer, size, valid);
    return 0;
}

/* What a test "runs on the GPU": kind 0 kernel, 1 memcpy HtoD pageable->device, 2 memset device.
 * The work takes dur_ns of real time (the caller's thread spins) and is stamped like CUPTI would. */
void fake_work(int kind, const char *name, uint64_t dur_ns, uint32_t device, uint32_t stream) {
    uint64_t start = now();
    while (now() < start + dur_ns) {}
    if (!enabled) return;
    pthread_mutex_lock(&lock);
    size_t size = kind == 0 ? KERNEL_SIZE : COPY_SIZE;
    if (pending_size + size > sizeof pending) { pthread_mutex_unlock(&lock); return; }
    uint8_t *r = pending + pending_size;
    memset(r, 0, size);
    uint32_t activity = kind == 0 ? 10 : kind == 1 ? 1 : 2;
    uint64_t end = start + dur_ns;
    memcpy(r, &activity, 4);
    memcpy(r + 16, &start, 8);
    memcpy(r + 24, &end, 8);
    if (kind == 0) {
        const char *kept = NULL;
        for (int i = 0; i < n_names; i++) if (!strcmp(names[i], name)) kept = names[i];
        if (!kept && n_names < 64) kept = names[n_names++] = strdup(name);
        memcpy(r + 40, &device, 4);
        memcpy(r + 48, &stream, 4);
        memcpy(r + 104, &kept, sizeof kept);
    } else {
        memcpy(r + 32, &device, 4);
        memcpy(r + 40, &stream, 4);
        if (kind == 1) { r[4] = 1; r[5] = 1; r[6] = 3; }
        else { uint16_t memory = 3; memcpy(r + 50, &memory, 2); }
    }
    pending_size += size;
    pthread_mutex_unlock(&lock);
}
