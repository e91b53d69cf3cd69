/* pytest-gpuutil's CUDA injection library: measures child processes that are not Python.
 *
 * The parent sets CUDA_INJECTION64_PATH to this library; the CUDA driver loads it into every
 * process that initialises CUDA and calls InitializeInjection(). Here, unless the process measures
 * itself from Python (PYTEST_GPUUTIL_SELF holds its pid), the library opens the libcupti the
 * parent named (PYTEST_GPUUTIL_CUPTI), collects kernels, memcpy and memset with CUPTI's activity
 * API, and appends the same binary chunks as a Python child (pytest_gpuutil/children/
 * spool_format.py) to a file of its own in the spool (PYTEST_GPUUTIL_SPOOL): every period
 * (PYTEST_GPUUTIL_PERIOD seconds), when the parent touches the spool's "poke" file, and at exit.
 * When it cannot measure, it writes a header and a note saying why: never silence.
 *
 * No CUDA or CUPTI headers are needed to build it: the few functions used are declared here and
 * found with dlsym, and records are read at the byte offsets every CUPTI version keeps (the same
 * offsets pytest_gpuutil/capture/cupti.py reads).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int CUptiResult;
typedef void (*BufferRequested)(uint8_t **buffer, size_t *size, size_t *max_records);
typedef void (*BufferCompleted)(void *context, uint32_t stream, uint8_t *buffer, size_t size, size_t valid);

enum { KIND_MEMCPY = 1, KIND_MEMSET = 2, KIND_KERNEL = 3, KIND_CONCURRENT_KERNEL = 10, KIND_MEMCPY2 = 22 };
static const int ENABLED[] = {KIND_CONCURRENT_KERNEL, KIND_MEMCPY, KIND_MEMCPY2, KIND_MEMSET};
/* byte offsets, the same in every record version (see cupti.py) */
enum { START = 16, END = 24, KERNEL_DEVICE = 40, KERNEL_STREAM = 48, KERNEL_NAME = 104,
       COPY_KIND = 4, COPY_SRC = 5, COPY_DST = 6, MEM_DEVICE = 32, MEM_STREAM = 40, MEMSET_MEMORY_KIND = 50 };
/* the spool format (spool_format.py) */
enum { CHUNK_HEADER = 1, CHUNK_EVENTS = 2, CHUNK_NOTE = 4, CHUNK_END = 5 };
enum { FORMAT_KERNEL = 0, FORMAT_MEMCPY = 1, FORMAT_MEMSET = 2 };
enum { CAPTURE_INJECTION = 1, FLAG_VISIBLE_SET = 2 };
#define BUFFER_BYTES (8u << 20)
#define TEXT_LIMIT 4000

static struct {
    CUptiResult (*register_callbacks)(BufferRequested, BufferCompleted);
    CUptiResult (*enable)(int);
    CUptiResult (*flush_all)(uint32_t);
    CUptiResult (*next_record)(uint8_t *, size_t, void **);
    CUptiResult (*dropped)(void *, uint32_t, size_t *);
    CUptiResult (*timestamp)(uint64_t *);
} cupti;

typedef struct { int64_t start, end; uint32_t device, stream, code; } Row;
typedef struct { uint64_t key; uint32_t code; } Slot;

static struct {
    pthread_mutex_t rows_lock;   /* rows, names, dropped (CUPTI's threads fill them) */
    pthread_mutex_t write_lock;  /* one hand-over at a time */
    Row *rows;
    size_t n_rows, cap_rows;
    uint64_t dropped;
    Slot *slots;
    size_t n_slots;
    char **names;
    uint8_t *name_kinds;
    size_t n_names, cap_names;
    int fd;
    pid_t pid;
    volatile int finished;
    char spool[4096];
    int64_t period_ns;
    int64_t last_poke;
    /* CUPTI's clock as wall-clock ns: as it is, or ticks mapped (another tool's timestamp callback) */
    int mapped;
    uint64_t ref_ticks;
    int64_t ref_ns;
    double ns_per_tick;
} g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, .fd = -1};

static const char *MEMCPY_KINDS[] = {"<unknown>", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD", "HtoH", "PtoP"};
static const char *MEMORY_KINDS[] = {"Unknown", "Pageable", "Pinned", "Device", "Array", "Managed", "Device Static", "Managed Static"};

static int64_t clock_ns(clockid_t which) {
    struct timespec t;
    clock_gettime(which, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int64_t to_ns(uint64_t ticks) {
    if (!g.mapped) return (int64_t)ticks;
    return g.ref_ns + (int64_t)llround((double)((int64_t)ticks - (int64_t)g.ref_ticks) * g.ns_per_tick);
}

static int64_t now_ns(void) {
    uint64_t ticks = 0;
    if (cupti.timestamp && cupti.timestamp(&ticks) == 0) return to_ns(ticks);
    return clock_ns(CLOCK_REALTIME);
}

static void map_clock(void) {
    uint64_t c0 = 0, c1 = 0;
    if (!cupti.timestamp || cupti.timestamp(&c0) != 0) return;
    int64_t t0 = clock_ns(CLOCK_REALTIME);
    if (llabs((long long)((int64_t)c0 - t0)) < 60000000000LL) return;
    while (clock_ns(CLOCK_REALTIME) - t0 < 20000000) {}
    int64_t t1 = clock_ns(CLOCK_REALTIME);
    cupti.timestamp(&c1);
    g.ref_ticks = c1;
    g.ref_ns = t1;
    g.ns_per_tick = c1 > c0 ? (double)(t1 - t0) / (double)(c1 - c0) : 1.0;
    g.mapped = 1;
}

/* -- output ------------------------------------------------------------------------------------- */
typedef struct { uint8_t *data; size_t size, cap; int failed; } Buf;

static void put(Buf *b, const void *data, size_t size) {
    if (b->failed) return;
    if (b->size + size > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->size + size) cap *= 2;
        uint8_t *grown = realloc(b->data, cap);
        if (!grown) { b->failed = 1; return; }
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->size, data, size);
    b->size += size;
}
static void put_u8(Buf *b, uint8_t v) { put(b, &v, 1); }
static void put_u16(Buf *b, uint16_t v) { put(b, &v, 2); }
static void put_u32(Buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(Buf *b, uint64_t v) { put(b, &v, 8); }
static void put_text(Buf *b, const char *text) {
    size_t n = text ? strlen(text) : 0;
    if (n > TEXT_LIMIT) n = TEXT_LIMIT;
    put_u16(b, (uint16_t)n);
    put(b, text, n);
}

/* the chunk head before a payload built in b (b starts with 12 reserved bytes) */
static void finish_chunk(Buf *b, uint8_t type) {
    if (b->failed || b->size < 12) return;
    uint32_t size = (uint32_t)(b->size - 12);
    memcpy(b->data, "GPUc", 4);
    b->data[4] = type;
    b->data[5] = 1; /* version */
    b->data[6] = b->data[7] = 0;
    memcpy(b->data + 8, &size, 4);
}

static void start_chunk(Buf *b) {
    uint8_t head[12] = {0};
    put(b, head, sizeof head);
}

static void write_out(Buf *b) {
    if (b->failed || g.fd < 0) return;
    size_t done = 0;
    while (done < b->size) {
        ssize_t n = write(g.fd, b->data + done, b->size - done);
        if (n <= 0) { close(g.fd); g.fd = -1; return; } /* the spool is gone: stop quietly */
        done += (size_t)n;
    }
}

static void emit(Buf *b, uint8_t type) {
    finish_chunk(b, type);
    write_out(b);
    free(b->data);
}

static void write_note(const char *text) {
    Buf b = {0};
    start_chunk(&b);
    put_u64(&b, (uint64_t)now_ns());
    put_text(&b, text);
    emit(&b, CHUNK_NOTE);
}

static void write_end(void) {
    Buf b = {0};
    start_chunk(&b);
    put_u64(&b, (uint64_t)now_ns());
    put_u8(&b, 0);
    put_text(&b, "");
    emit(&b, CHUNK_END);
}

static uint64_t proc_start(void) {
    char text[4096];
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f) return 0;
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    char *p = strrchr(text, ')');
    if (!p) return 0;
    p += 2;
    for (int field = 0; field < 19 && p; field++) {
        p = strchr(p, ' ');
        if (p) p++;
    }
    return p ? strtoull(p, NULL, 10) : 0;
}

static void read_command(char *program, size_t program_size, char *command, size_t command_size) {
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    const char *base = strrchr(exe, '/');
    snprintf(program, program_size, "%s", base ? base + 1 : exe);
    command[0] = 0;
    FILE *f = fopen("/proc/self/cmdline", "r");
    if (!f) return;
    size_t got = fread(command, 1, command_size - 1, f);
    fclose(f);
    command[got] = 0;
    for (size_t i = 0; i + 1 < got; i++) if (command[i] == 0) command[i] = ' ';
    if (got > 300) strcpy(command + 297, "...");
}

static void write_header(int64_t created, int64_t startup, const char *library) {
    char program[256], command[4096];
    read_command(program, sizeof program, command, sizeof command);
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    Buf b = {0};
    start_chunk(&b);
    put_u32(&b, (uint32_t)getpid());
    put_u32(&b, (uint32_t)getppid());
    put_u64(&b, proc_start());
    put_u64(&b, (uint64_t)created);
    put_u64(&b, (uint64_t)startup);
    put_u8(&b, 0); /* realtime */
    put_u8(&b, CAPTURE_INJECTION);
    put_u16(&b, visible ? FLAG_VISIBLE_SET : 0);
    put_text(&b, program);
    put_text(&b, command);
    put_text(&b, getenv("RANK"));
    put_text(&b, getenv("LOCAL_RANK"));
    put_text(&b, visible);
    put_text(&b, library);
    emit(&b, CHUNK_HEADER);
}

/* -- names ---------------------------------------------------------------------------------------- */
static uint32_t add_name(uint64_t key, uint8_t kind, const char *name) {
    if (!g.slots || (g.n_names + 1) * 2 > g.n_slots) {
        size_t n_slots = g.n_slots ? g.n_slots * 2 : 1024;
        Slot *slots = calloc(n_slots, sizeof(Slot));
        if (!slots) return UINT32_MAX;
        for (size_t i = 0; i < g.n_slots; i++) {
            if (!g.slots[i].key) continue;
            size_t j = (g.slots[i].key * 0x9E3779B97F4A7C15ULL) & (n_slots - 1);
            while (slots[j].key) j = (j + 1) & (n_slots - 1);
            slots[j] = g.slots[i];
        }
        free(g.slots);
        g.slots = slots;
        g.n_slots = n_slots;
    }
    size_t j = (key * 0x9E3779B97F4A7C15ULL) & (g.n_slots - 1);
    while (g.slots[j].key) {
        if (g.slots[j].key == key) return g.slots[j].code;
        j = (j + 1) & (g.n_slots - 1);
    }
    if (g.n_names == g.cap_names) {
        size_t cap = g.cap_names ? g.cap_names * 2 : 256;
        char **names = realloc(g.names, cap * sizeof(char *));
        if (!names) return UINT32_MAX;
        g.names = names;
        uint8_t *kinds = realloc(g.name_kinds, cap);
        if (!kinds) return UINT32_MAX;
        g.name_kinds = kinds;
        g.cap_names = cap;
    }
    char *copy = strdup(name ? name : "<unnamed kernel>");
    if (!copy) return UINT32_MAX;
    g.names[g.n_names] = copy;
    g.name_kinds[g.n_names] = kind;
    g.slots[j].key = key;
    g.slots[j].code = (uint32_t)g.n_names;
    return (uint32_t)g.n_names++;
}

static const char *memory_kind(unsigned kind) {
    return kind < sizeof MEMORY_KINDS / sizeof *MEMORY_KINDS ? MEMORY_KINDS[kind] : "Unrecognized";
}

static uint32_t name_code(uint32_t kind, const uint8_t *record) {
    char text[160];
    if (kind == KIND_KERNEL || kind == KIND_CONCURRENT_KERNEL) {
        const char *name;
        memcpy(&name, record + KERNEL_NAME, sizeof name);
        return add_name((1ULL << 56) | ((uint64_t)(uintptr_t)name & ((1ULL << 56) - 1)), FORMAT_KERNEL, name);
    }
    if (kind == KIND_MEMSET) {
        uint16_t memory;
        memcpy(&memory, record + MEMSET_MEMORY_KIND, 2);
        snprintf(text, sizeof text, "Memset (%s)", memory_kind(memory));
        return add_name((3ULL << 56) | memory, FORMAT_MEMSET, text);
    }
    unsigned copy = record[COPY_KIND], src = record[COPY_SRC], dst = record[COPY_DST];
    snprintf(text, sizeof text, "Memcpy %s (%s -> %s)",
             copy < sizeof MEMCPY_KINDS / sizeof *MEMCPY_KINDS ? MEMCPY_KINDS[copy] : "<unknown>",
             memory_kind(src), memory_kind(dst));
    return add_name((2ULL << 56) | ((uint64_t)copy << 16) | (src << 8) | dst, FORMAT_MEMCPY, text);
}

/* -- CUPTI's callbacks ---------------------------------------------------------------------------- */
static void on_request(uint8_t **buffer, size_t *size, size_t *max_records) {
    void *data = NULL;
    if (posix_memalign(&data, 8, BUFFER_BYTES) != 0) data = NULL;
    *buffer = data;
    *size = data ? BUFFER_BYTES : 0;
    *max_records = 0;
}

static void add_row(uint32_t kind, const uint8_t *record) {
    int kernel = kind == KIND_KERNEL || kind == KIND_CONCURRENT_KERNEL;
    uint64_t start, end;
    uint32_t device, stream;
    memcpy(&start, record + START, 8);
    memcpy(&end, record + END, 8);
    memcpy(&device, record + (kernel ? KERNEL_DEVICE : MEM_DEVICE), 4);
    memcpy(&stream, record + (kernel ? KERNEL_STREAM : MEM_STREAM), 4);
    uint32_t code = name_code(kind, record);
    if (code == UINT32_MAX) return;
    if (g.n_rows == g.cap_rows) {
        size_t cap = g.cap_rows ? g.cap_rows * 2 : 4096;
        Row *rows = realloc(g.rows, cap * sizeof(Row));
        if (!rows) { g.dropped++; return; }
        g.rows = rows;
        g.cap_rows = cap;
    }
    Row *row = &g.rows[g.n_rows++];
    row->start = to_ns(start);
    row->end = to_ns(end);
    if (row->end < row->start) row->end = row->start;
    row->device = device;
    row->stream = stream;
    row->code = code;
}

static void on_complete(void *context, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)size;
    pthread_mutex_lock(&g.rows_lock);
    void *record = NULL;
    while (valid && cupti.next_record(buffer, valid, &record) == 0) {
        uint32_t kind;
        memcpy(&kind, record, 4);
        if (kind == KIND_KERNEL || kind == KIND_CONCURRENT_KERNEL || kind == KIND_MEMCPY || kind == KIND_MEMCPY2 ||
            kind == KIND_MEMSET)
            add_row(kind, (const uint8_t *)record);
    }
    size_t dropped = 0;
    if (cupti.dropped && cupti.dropped(context, stream, &dropped) == 0) g.dropped += dropped;
    pthread_mutex_unlock(&g.rows_lock);
    free(buffer);
}

/* -- hand-over ------------------------------------------------------------------------------------ */
/* While the program runs (final == 0), CUPTI's default flush: only buffers whose records are all
 * complete come back. A forced flush returns the records of kernels still running without their
 * times, and those are lost (on an H100, 34 of a CUDA program's 42 records went that way); only the
 * last hand-over, at exit, forces it. */
static void hand_over(int force, int final) {
    pthread_mutex_lock(&g.write_lock);
    if (g.fd < 0 || getpid() != g.pid) { pthread_mutex_unlock(&g.write_lock); return; }
    int64_t covered = now_ns();
    cupti.flush_all(final ? 1 : 0); /* 1: CUPTI_ACTIVITY_FLAG_FLUSH_FORCED; fills g.rows through on_complete */
    pthread_mutex_lock(&g.rows_lock);
    size_t n = g.n_rows;
    if (n || g.dropped || force) {
        uint32_t *remap = malloc((g.n_names ? g.n_names : 1) * sizeof(uint32_t));
        if (remap) {
            memset(remap, 0xFF, (g.n_names ? g.n_names : 1) * sizeof(uint32_t));
            uint32_t used = 0;
            for (size_t i = 0; i < n; i++)
                if (remap[g.rows[i].code] == UINT32_MAX) remap[g.rows[i].code] = used++;
            Buf b = {0};
            start_chunk(&b);
            put_u64(&b, (uint64_t)covered);
            put_u32(&b, (uint32_t)n);
            put_u32(&b, used);
            put_u64(&b, g.dropped);
            /* the chunk's name table, in the order its codes were given (first use) */
            uint32_t *order = malloc((used ? used : 1) * sizeof(uint32_t));
            if (order) {
                for (uint32_t code = 0; code < g.n_names; code++)
                    if (remap[code] != UINT32_MAX) order[remap[code]] = code;
                for (uint32_t i = 0; i < used; i++) {
                    const char *name = g.names[order[i]];
                    size_t len = strlen(name);
                    if (len > 65535) len = 65535;
                    put_u8(&b, g.name_kinds[order[i]]);
                    put_u16(&b, (uint16_t)len);
                    put(&b, name, len);
                }
                free(order);
                for (size_t i = 0; i < n; i++) put_u64(&b, (uint64_t)g.rows[i].start);
                for (size_t i = 0; i < n; i++) put_u64(&b, (uint64_t)g.rows[i].end);
                for (size_t i = 0; i < n; i++) put_u32(&b, g.rows[i].device);
                for (size_t i = 0; i < n; i++) put_u32(&b, g.rows[i].stream);
                for (size_t i = 0; i < n; i++) put_u32(&b, remap[g.rows[i].code]);
                emit(&b, CHUNK_EVENTS);
            } else {
                free(b.data);
            }
            free(remap);
        }
        g.n_rows = 0;
        g.dropped = 0;
    }
    pthread_mutex_unlock(&g.rows_lock);
    pthread_mutex_unlock(&g.write_lock);
}

static int64_t poke_time(void) {
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/poke", g.spool);
    if (stat(path, &st) != 0) return 0;
    return (int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
}

static void *hand_over_loop(void *unused) {
    (void)unused;
    struct timespec poll = {0, 50 * 1000 * 1000};
    int64_t last = clock_ns(CLOCK_MONOTONIC);
    while (!g.finished && getpid() == g.pid) {
        nanosleep(&poll, NULL);
        if (g.finished) break;
        int64_t poked = poke_time();
        int asked = poked != g.last_poke;
        if (asked || clock_ns(CLOCK_MONOTONIC) - last >= g.period_ns) {
            g.last_poke = poked;
            hand_over(asked, 0);
            last = clock_ns(CLOCK_MONOTONIC);
        }
    }
    return NULL;
}

static void at_exit(void) {
    if (g.finished || getpid() != g.pid) return;
    hand_over(1, 1);
    pthread_mutex_lock(&g.write_lock);
    g.finished = 1;
    write_end();
    if (g.fd >= 0) close(g.fd);
    g.fd = -1;
    pthread_mutex_unlock(&g.write_lock);
}

static void in_forked_child(void) {
    g.fd = -1; /* the parent's file: a forked child of a measured program is not measured */
    g.finished = 1;
}

static void cannot_measure(const char *why, const char *library) {
    char text[TEXT_LIMIT];
    write_header(clock_ns(CLOCK_REALTIME), 0, library);
    snprintf(text, sizeof text, "not measured: %s", why);
    write_note(text);
    write_end();
    close(g.fd);
    g.fd = -1;
}

EXPORT int InitializeInjection(void) {
    static int called = 0;
    if (called) return 1;
    called = 1;
    const char *spool = getenv("PYTEST_GPUUTIL_SPOOL");
    if (!spool || !*spool || strlen(spool) >= sizeof g.spool) return 1;
    char pid_text[32];
    snprintf(pid_text, sizeof pid_text, "%d", (int)getpid());
    const char *self = getenv("PYTEST_GPUUTIL_SELF");
    if (self && strcmp(self, pid_text) == 0) return 1; /* measured from Python */
    int64_t began = clock_ns(CLOCK_MONOTONIC);
    g.pid = getpid();
    strcpy(g.spool, spool);
    setenv("PYTEST_GPUUTIL_INJECTED", pid_text, 1);
    const char *period = getenv("PYTEST_GPUUTIL_PERIOD");
    double seconds = period ? strtod(period, NULL) : 0.5;
    g.period_ns = (int64_t)((seconds >= 0.01 && seconds <= 3600 ? seconds : 0.5) * 1e9);
    char path[4200];
    snprintf(path, sizeof path, "%s/%d-%lld.gpuc", spool, (int)g.pid, (long long)clock_ns(CLOCK_REALTIME));
    g.fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (g.fd < 0) return 1;

    const char *library = getenv("PYTEST_GPUUTIL_CUPTI");
    if (!library || !*library) library = "libcupti.so";
    void *handle = dlopen(library, RTLD_NOW | RTLD_GLOBAL);
    char why[TEXT_LIMIT];
    if (!handle) {
        snprintf(why, sizeof why, "cannot load %s: %s", library, dlerror());
        cannot_measure(why, library);
        return 1;
    }
    *(void **)&cupti.register_callbacks = dlsym(handle, "cuptiActivityRegisterCallbacks");
    *(void **)&cupti.enable = dlsym(handle, "cuptiActivityEnable");
    *(void **)&cupti.flush_all = dlsym(handle, "cuptiActivityFlushAll");
    *(void **)&cupti.next_record = dlsym(handle, "cuptiActivityGetNextRecord");
    *(void **)&cupti.dropped = dlsym(handle, "cuptiActivityGetNumDroppedRecords");
    *(void **)&cupti.timestamp = dlsym(handle, "cuptiGetTimestamp");
    if (!cupti.register_callbacks || !cupti.enable || !cupti.flush_all || !cupti.next_record || !cupti.timestamp) {
        snprintf(why, sizeof why, "%s lacks CUPTI's activity API", library);
        cannot_measure(why, library);
        return 1;
    }
    CUptiResult result = cupti.register_callbacks(on_request, on_complete);
    for (size_t i = 0; result == 0 && i < sizeof ENABLED / sizeof *ENABLED; i++) result = cupti.enable(ENABLED[i]);
    if (result != 0) {
        snprintf(why, sizeof why, "CUPTI refused to collect activity (error %d)", result);
        cannot_measure(why, library);
        return 1;
    }
    map_clock();
    int64_t created = now_ns();
    write_header(created, clock_ns(CLOCK_MONOTONIC) - began, library);
    g.last_poke = poke_time();
    pthread_atfork(NULL, NULL, in_forked_child);
    atexit(at_exit);
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&thread, &attr, hand_over_loop, NULL) != 0)
        write_note("no hand-over thread: its records arrive at exit only");
    pthread_attr_destroy(&attr);
    return 1;
}
