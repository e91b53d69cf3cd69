/* One pass over a Chrome/Kineto trace's JSON: check it is valid JSON and take out its GPU events.
 *
 * pytest_gpuutil.traces._scan.scan(buffer, threads=0, min_part_bytes=4 MiB) -> tuple | str
 *
 * The whole document is checked against JSON's grammar (strings must be UTF-8 without control
 * characters; numbers, literals, nesting, nothing after the top-level value) while the members
 * the analysis uses are taken from each element of the top-level object's "traceEvents" array.
 * It gives the same events as the general reader (reader.py) or declines, returning a short
 * reason (a str), and the general reader then takes the trace, with its precise error messages.
 * It declines on: any backslash (escapes), a top level that is not an object, a missing or
 * repeated "traceEvents" or one that is not an array, an element that is not an object, a
 * repeated member the analysis reads, a "cat" that is not a string, kept work (kernel,
 * gpu_memcpy, gpu_memset, or the profiler span "Trace") whose "ph" is not "X", a name that is
 * not a string, times not written -d.ddd (at most three decimals, at most 16 digits before the
 * point, within +-2^62 ns; no negative dur), args that is not an object or null, a device or
 * stream (args.device/args.stream, else pid/tid) that is not an integer of at most 18 digits or
 * a string, nesting deeper than MAX_DEPTH, and anything that is not valid JSON.
 *
 * The host's waits for the GPU are taken out too: an event whose "cat" is cuda_runtime,
 * cuda_driver or cuda_sync and whose name is one of SYNC_NAMES (the same list as
 * HOST_SYNC_NAMES in model.py) is kept with its ts and dur; it declines on such an event whose
 * "ph" is not "X" or whose times are not -d.ddd (no negative dur). Other events of those
 * categories (kernel launches, ...) are skipped.
 *
 * The scan runs without the GIL. A big traceEvents array is read in parts, one thread each: a
 * part starts at a '{' on a line of its own after a "," (a line break is never inside a valid
 * JSON string), and the parts are kept only when each one ended exactly where the next starts
 * and the last one closed the array; otherwise the array is read again in one pass, which also
 * gives the reason to decline. Python objects are made afterwards. On success:
 *   (name_codes, names, kinds, place_codes, devices, streams, starts_ns, durs_ns, span, base, parts,
 *    sync_codes, sync_names, sync_starts_ns, sync_durs_ns)
 * name_codes/place_codes: one int per GPU event into names+kinds / devices+streams (distinct
 * values in first-seen order); starts_ns/durs_ns: ints; span: (start_ns, end_ns) of the first
 * "Trace" event or None; base: the raw text of "baseTimeNanoseconds" (bytes) or None; parts: how
 * many parts (threads) read the events; sync_codes: one int per wait into sync_names (SYNC_NAMES, all
 * of them); sync_starts_ns/sync_durs_ns: ints, in the order of the document.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#define HAVE_THREADS 1
#endif

#define MAX_DEPTH 1024
#define NS_LIMIT ((int64_t)1 << 62)
/* at most this many parts (and threads); by default at least BALANCED_PARTS where there are two CPUs
 * or more, and as many as there are CPUs beyond that */
#define MAX_THREADS 16
#define BALANCED_PARTS 8
#define MIN_PART_BYTES (4 << 20)

enum { V_NONE = 0, V_STRING, V_NUMBER, V_OBJECT, V_ARRAY, V_TRUE, V_FALSE, V_NULL };

typedef struct {
    int kind;
    const unsigned char *at; /* strings: the text between the quotes; numbers: the number */
    Py_ssize_t len;
} Val;

typedef struct {
    const unsigned char *p, *end;
    const char *why; /* set when declining */
} Cur;

/* a device or stream: an integer or a string (span) */
typedef struct {
    int is_str;
    int64_t num;
    const unsigned char *at;
    Py_ssize_t len;
} Place;

typedef struct {
    const unsigned char *name_at;
    Py_ssize_t name_len;
    int kind; /* 0 kernel, 1 gpu_memcpy, 2 gpu_memset */
    Place device, stream;
    int64_t ts, dur;
    Py_ssize_t name_code, place_code; /* given once every part is read */
} Row;

/* a host wait: which of SYNC_NAMES, and its times */
typedef struct {
    int name;
    int64_t ts, dur;
} SyncRow;

/* the events of one stretch of the traceEvents array (one per thread) */
typedef struct {
    Row *rows;
    Py_ssize_t nrows, caprows;
    SyncRow *syncs;
    Py_ssize_t nsyncs, capsyncs;
    int have_span;
    int64_t span_start, span_end;
    int oom;
} Part;

typedef struct {
    int kind;
    const unsigned char *at;
    Py_ssize_t len;
} NameKey;

typedef struct {
    Place device, stream;
} PlaceKey;

typedef struct {
    Part parts[MAX_THREADS];
    int nparts;
    Py_ssize_t nrows, nsyncs;
    NameKey *names;
    Py_ssize_t nnames, capnames;
    Py_ssize_t *table; /* open addressing over names: index+1, 0 = empty */
    Py_ssize_t tablesize;
    PlaceKey *places;
    Py_ssize_t nplaces, capplaces;
    const unsigned char *base_at;
    Py_ssize_t base_len;
    int have_base;
    int oom;
    int threads;             /* at most this many threads (0: up to MAX_THREADS where there are 2 CPUs or more) */
    Py_ssize_t min_part;     /* bytes of events per thread, at least */
} Out;

static const char *const KIND_NAMES[3] = {"kernel", "gpu_memcpy", "gpu_memset"};

/* the calls and records in which the host waits for the GPU: HOST_SYNC_NAMES in model.py */
static const char *const SYNC_NAMES[] = {
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy", "cudaMemcpy2D",
    "cudaMemcpy3D", "cudaMemcpyToSymbol", "cudaMemcpyFromSymbol", "cuCtxSynchronize", "cuStreamSynchronize",
    "cuEventSynchronize", "cuMemcpy", "cuMemcpyDtoH", "cuMemcpyDtoH_v2", "cuMemcpyHtoD", "cuMemcpyHtoD_v2",
    "Context Sync", "Stream Sync", "Event Sync"};
#define N_SYNC_NAMES ((int)(sizeof SYNC_NAMES / sizeof SYNC_NAMES[0]))

/* ---------------------------------------------------------------- lexing */

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
/* the first flagged byte of a word (the lowest address: little-endian) */
#define FIRST_FLAGGED(bits) (__builtin_ctzll(bits) >> 3)
#endif

static inline int is_ws(unsigned char b) { return b == ' ' || b == '\n' || b == '\r' || b == '\t'; }

static inline void skip_ws(Cur *c) {
    const unsigned char *p = c->p, *end = c->end;
#ifdef FIRST_FLAGGED
    /* pretty-printed traces indent with runs of spaces: eight at a time */
    while (p < end && is_ws(*p)) {
        p++;
        while (end - p >= 8) {
            uint64_t v;
            memcpy(&v, p, 8);
            uint64_t other = v ^ (ONES * ' ');
            if (other) {
                p += FIRST_FLAGGED(other);
                break;
            }
            p += 8;
        }
    }
#else
    while (p < end && is_ws(*p)) p++;
#endif
    c->p = p;
}

static inline int decline(Cur *c, const char *why) {
    if (c->why == NULL) c->why = why;
    return -1;
}

/* One UTF-8 sequence starting at p (a byte >= 0x80); its length, or 0 when not valid UTF-8. */
static inline int utf8_length(const unsigned char *p, const unsigned char *end) {
    unsigned char b = p[0];
    Py_ssize_t left = end - p;
    if (b >= 0xC2 && b <= 0xDF) {
        return (left >= 2 && (p[1] & 0xC0) == 0x80) ? 2 : 0;
    }
    if (b >= 0xE0 && b <= 0xEF) {
        if (left < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
        if (b == 0xE0 && p[1] < 0xA0) return 0;  /* overlong */
        if (b == 0xED && p[1] >= 0xA0) return 0;  /* surrogate */
        return 3;
    }
    if (b >= 0xF0 && b <= 0xF4) {
        if (left < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
        if (b == 0xF0 && p[1] < 0x90) return 0;  /* overlong */
        if (b == 0xF4 && p[1] >= 0x90) return 0;  /* beyond U+10FFFF */
        return 4;
    }
    return 0;
}

/* A string at c->p (which is '"'); its contents go to *out. */
static int scan_string(Cur *c, Val *out) {
    const unsigned char *p = c->p + 1, *end = c->end;
    const unsigned char *start = p;
    for (;;) {
        while (end - p >= 8) {
            uint64_t v;
            memcpy(&v, p, 8);
            uint64_t quote = v ^ (ONES * '"');
            uint64_t slash = v ^ (ONES * '\\');
            uint64_t special = (((quote - ONES) & ~quote) | ((slash - ONES) & ~slash) | ((v - ONES * 0x20) & ~v) | v) & HIGHS;
            if (special) {
#ifdef FIRST_FLAGGED
                p += FIRST_FLAGGED(special); /* the lowest flag is a true one: borrows only run upwards */
#endif
                break;
            }
            p += 8;
        }
        if (p >= end) return decline(c, "not valid JSON: a string is not closed");
        unsigned char b = *p;
        if (b == '"') break;
        if (b == '\\') return decline(c, "a backslash (escapes are left to the general reader)");
        if (b < 0x20) return decline(c, "not valid JSON: a control character in a string");
        if (b >= 0x80) {
            int n = utf8_length(p, end);
            if (n == 0) return decline(c, "not valid JSON: a string is not UTF-8");
            p += n;
        } else {
            p++;
        }
    }
    if (out) {
        out->kind = V_STRING;
        out->at = start;
        out->len = p - start;
    }
    c->p = p + 1;
    return 0;
}

static inline int is_digit(unsigned char b) { return b >= '0' && b <= '9'; }

static int scan_number(Cur *c, Val *out) {
    const unsigned char *p = c->p, *end = c->end, *start = p;
    if (p < end && *p == '-') p++;
    if (p >= end || !is_digit(*p)) return decline(c, "not valid JSON: a bad number or value");
    if (*p == '0') {
        p++;
    } else {
        while (p < end && is_digit(*p)) p++;
    }
    if (p < end && *p == '.') {
        p++;
        if (p >= end || !is_digit(*p)) return decline(c, "not valid JSON: a bad number");
        while (p < end && is_digit(*p)) p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || !is_digit(*p)) return decline(c, "not valid JSON: a bad number");
        while (p < end && is_digit(*p)) p++;
    }
    if (out) {
        out->kind = V_NUMBER;
        out->at = start;
        out->len = p - start;
    }
    c->p = p;
    return 0;
}

static int scan_literal(Cur *c, Val *out) {
    static const struct { const char *text; Py_ssize_t len; int kind; } LITERALS[3] = {
        {"true", 4, V_TRUE}, {"false", 5, V_FALSE}, {"null", 4, V_NULL}};
    for (int i = 0; i < 3; i++) {
        if (c->end - c->p >= LITERALS[i].len && memcmp(c->p, LITERALS[i].text, LITERALS[i].len) == 0) {
            if (out) {
                out->kind = LITERALS[i].kind;
                out->at = c->p;
                out->len = LITERALS[i].len;
            }
            c->p += LITERALS[i].len;
            return 0;
        }
    }
    return decline(c, "not valid JSON: a bad value");
}

/* An object member's key and its ':' at c->p, whitespace around them skipped; the key to *key. */
static int scan_key(Cur *c, Val *key) {
    skip_ws(c);
    if (c->p >= c->end || *c->p != '"') return decline(c, "not valid JSON: an object member has no string key");
    if (scan_string(c, key) < 0) return -1;
    skip_ws(c);
    if (c->p >= c->end || *c->p != ':') return decline(c, "not valid JSON: no ':' after a key");
    c->p++;
    skip_ws(c);
    return 0;
}

/* After an object member's value: 1 when another member follows (its ',' read), 0 at the
 * object's end (its '}' read), -1 otherwise (``bad`` says why). */
static int next_member(Cur *c, const char *bad) {
    skip_ws(c);
    if (c->p >= c->end) return decline(c, "not valid JSON: it ends early (truncated?)");
    if (*c->p == ',') {
        c->p++;
        return 1;
    }
    if (*c->p == '}') {
        c->p++;
        return 0;
    }
    return decline(c, bad);
}

/* Any value at c->p (after whitespace), checked and skipped; *out says its kind (and text for
 * strings, numbers and literals). Containers are walked without recursion. */
static int skip_value(Cur *c, Val *out) {
    unsigned char stack[MAX_DEPTH];
    int depth = 0;
    int first_kind = V_NONE;
    Val v;

value:
    skip_ws(c);
    if (c->p >= c->end) return decline(c, "not valid JSON: it ends early (truncated?)");
    switch (*c->p) {
    case '"':
        if (scan_string(c, depth == 0 ? out : NULL) < 0) return -1;
        if (depth == 0) return 0;
        goto after_value;
    case '{':
    case '[': {
        unsigned char open = *c->p;
        if (depth == 0) first_kind = open == '{' ? V_OBJECT : V_ARRAY;
        c->p++;
        skip_ws(c);
        if (c->p < c->end && *c->p == (open == '{' ? '}' : ']')) {
            c->p++;
            goto after_value;
        }
        if (depth >= MAX_DEPTH) return decline(c, "nesting deeper than the fast reader follows");
        stack[depth++] = open;
        if (open == '{') goto key;
        goto value;
    }
    case 't':
    case 'f':
    case 'n':
        if (scan_literal(c, depth == 0 ? out : NULL) < 0) return -1;
        if (depth == 0) return 0;
        goto after_value;
    default:
        if (scan_number(c, depth == 0 ? out : NULL) < 0) return -1;
        if (depth == 0) return 0;
        goto after_value;
    }

key:
    if (scan_key(c, &v) < 0) return -1;
    goto value;

after_value:
    if (depth == 0) {
        if (out) {
            out->kind = first_kind;
            out->at = NULL;
            out->len = 0;
        }
        return 0;
    }
    skip_ws(c);
    if (c->p >= c->end) return decline(c, "not valid JSON: it ends early (truncated?)");
    if (*c->p == ',') {
        c->p++;
        if (stack[depth - 1] == '{') goto key;
        goto value;
    }
    if (*c->p == (stack[depth - 1] == '{' ? '}' : ']')) {
        c->p++;
        depth--;
        goto after_value;
    }
    return decline(c, "not valid JSON: a bad separator");
}

/* ------------------------------------------------------------ members */

static inline int key_is(const Val *key, const char *text, Py_ssize_t len) {
    return key->len == len && (len == 0 || key->at[0] == (unsigned char)text[0]) && memcmp(key->at, text, (size_t)len) == 0;
}

/* Walks an object at c->p ('{'): for each member whose key is one of keys[0..n), its value goes
 * to vals[i] (a key seen twice declines); other members are checked and skipped. */
static int scan_object(Cur *c, const char *const *keys, const Py_ssize_t *lens, int n, Val *vals,
                       int (*nested)(Cur *, int, Val *, void *), int nested_index, void *ctx) {
    Val key;
    for (int i = 0; i < n; i++) vals[i].kind = V_NONE;
    c->p++; /* '{' */
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        return 0;
    }
    for (;;) {
        if (scan_key(c, &key) < 0) return -1;
        int which = -1;
        for (int i = 0; i < n; i++) {
            if (key_is(&key, keys[i], lens[i])) {
                which = i;
                break;
            }
        }
        if (which >= 0 && vals[which].kind != V_NONE) return decline(c, "a member the analysis reads is repeated");
        if (which >= 0 && which == nested_index && c->p < c->end && *c->p == '{') {
            if (nested(c, which, &vals[which], ctx) < 0) return -1;
        } else {
            Val ignored, *into = which >= 0 ? &vals[which] : &ignored;
            int status;
            if (c->p < c->end && *c->p == '"') {
                status = scan_string(c, into);
            } else if (c->p < c->end && (is_digit(*c->p) || *c->p == '-')) {
                status = scan_number(c, into);
            } else {
                status = skip_value(c, into);
            }
            if (status < 0) return -1;
        }
        int more = next_member(c, "not valid JSON: a bad separator in an object");
        if (more <= 0) return more;
    }
}

/* ------------------------------------------------------------ numbers */

/* "-d.ddd" (at most three decimals, at most 16 digits before the point) in µs to ns, exactly. */
static int micros_to_ns(const Val *v, int64_t *ns) {
    if (v->kind != V_NUMBER) return -1;
    const unsigned char *p = v->at, *end = v->at + v->len;
    int negative = 0;
    if (p < end && *p == '-') {
        negative = 1;
        p++;
    }
    int64_t whole = 0;
    int digits = 0;
    while (p < end && is_digit(*p)) {
        whole = whole * 10 + (*p - '0');
        p++;
        if (++digits > 16) return -1;
    }
    if (whole >= NS_LIMIT / 1000) return -1;
    int64_t frac = 0;
    int decimals = 0;
    if (p < end && *p == '.') {
        p++;
        while (p < end && is_digit(*p)) {
            if (++decimals > 3) return -1;
            frac = frac * 10 + (*p - '0');
            p++;
        }
    }
    if (p != end) return -1; /* an exponent */
    while (decimals++ < 3) frac *= 10;
    int64_t value = whole * 1000 + frac;
    if (value >= NS_LIMIT) return -1;
    *ns = negative ? -value : value;
    return 0;
}

static int place_of(const Val *v, Place *out) {
    if (v->kind == V_STRING) {
        out->is_str = 1;
        out->at = v->at;
        out->len = v->len;
        out->num = 0;
        return 0;
    }
    if (v->kind != V_NUMBER) return -1;
    const unsigned char *p = v->at, *end = v->at + v->len;
    int negative = 0;
    if (*p == '-') {
        negative = 1;
        p++;
    }
    if (end - p > 18) return -1;
    int64_t value = 0;
    for (; p < end; p++) {
        if (!is_digit(*p)) return -1; /* a fraction or an exponent: not an integer */
        value = value * 10 + (*p - '0');
    }
    out->is_str = 0;
    out->num = negative ? -value : value;
    out->at = NULL;
    out->len = 0;
    return 0;
}

/* ------------------------------------------------------------ output tables */

static int grow(void **items, Py_ssize_t *cap, Py_ssize_t need, size_t size) {
    if (need <= *cap) return 0;
    Py_ssize_t ncap = *cap ? *cap * 2 : 1024;
    while (ncap < need) ncap *= 2;
    void *grown = PyMem_RawRealloc(*items, (size_t)ncap * size);
    if (grown == NULL) return -1;
    *items = grown;
    *cap = ncap;
    return 0;
}

static uint64_t hash_name(int kind, const unsigned char *p, Py_ssize_t len) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)len ^ ((uint64_t)kind << 56);
    while (len >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        h = (h ^ v) * 0xBF58476D1CE4E5B9ULL;
        h ^= h >> 31;
        p += 8;
        len -= 8;
    }
    uint64_t v = 0;
    memcpy(&v, p, (size_t)len);
    h = (h ^ v) * 0x94D049BB133111EBULL;
    return h ^ (h >> 29);
}

static int rehash(Out *o, Py_ssize_t size) {
    Py_ssize_t *table = PyMem_RawCalloc((size_t)size, sizeof(Py_ssize_t));
    if (table == NULL) return -1;
    for (Py_ssize_t i = 0; i < o->nnames; i++) {
        uint64_t h = hash_name(o->names[i].kind, o->names[i].at, o->names[i].len);
        Py_ssize_t at = (Py_ssize_t)(h & (uint64_t)(size - 1));
        while (table[at]) at = (at + 1) & (size - 1);
        table[at] = i + 1;
    }
    PyMem_RawFree(o->table);
    o->table = table;
    o->tablesize = size;
    return 0;
}

static Py_ssize_t name_code(Out *o, int kind, const unsigned char *at, Py_ssize_t len) {
    if (o->tablesize == 0 && rehash(o, 1024) < 0) return -1;
    uint64_t h = hash_name(kind, at, len);
    Py_ssize_t slot = (Py_ssize_t)(h & (uint64_t)(o->tablesize - 1));
    while (o->table[slot]) {
        NameKey *k = &o->names[o->table[slot] - 1];
        if (k->kind == kind && k->len == len && memcmp(k->at, at, (size_t)len) == 0) return o->table[slot] - 1;
        slot = (slot + 1) & (o->tablesize - 1);
    }
    if (grow((void **)&o->names, &o->capnames, o->nnames + 1, sizeof(NameKey)) < 0) return -1;
    Py_ssize_t code = o->nnames++;
    o->names[code].kind = kind;
    o->names[code].at = at;
    o->names[code].len = len;
    o->table[slot] = code + 1;
    if (o->nnames * 2 > o->tablesize && rehash(o, o->tablesize * 2) < 0) return -1;
    return code;
}

static int same_place(const Place *a, const Place *b) {
    if (a->is_str != b->is_str) return 0;
    if (!a->is_str) return a->num == b->num;
    return a->len == b->len && memcmp(a->at, b->at, (size_t)a->len) == 0;
}

static Py_ssize_t place_code(Out *o, const Place *device, const Place *stream) {
    /* a trace has a few devices and streams: the last match is tried first, then all */
    for (Py_ssize_t i = o->nplaces - 1; i >= 0; i--) {
        if (same_place(&o->places[i].device, device) && same_place(&o->places[i].stream, stream)) return i;
    }
    if (grow((void **)&o->places, &o->capplaces, o->nplaces + 1, sizeof(PlaceKey)) < 0) return -1;
    o->places[o->nplaces].device = *device;
    o->places[o->nplaces].stream = *stream;
    return o->nplaces++;
}

/* ------------------------------------------------------------ structure */

static const char *const EVENT_KEYS[8] = {"ph", "cat", "name", "pid", "tid", "ts", "dur", "args"};
static const Py_ssize_t EVENT_LENS[8] = {2, 3, 4, 3, 3, 2, 3, 4};
enum { E_PH, E_CAT, E_NAME, E_PID, E_TID, E_TS, E_DUR, E_ARGS };
static const char *const ARGS_KEYS[2] = {"device", "stream"};
static const Py_ssize_t ARGS_LENS[2] = {6, 6};

typedef struct {
    Val device, stream;
} ArgsSeen;

static int scan_args(Cur *c, int which, Val *val, void *ctx) {
    (void)which;
    ArgsSeen *seen = ctx;
    Val vals[2];
    if (scan_object(c, ARGS_KEYS, ARGS_LENS, 2, vals, NULL, -1, NULL) < 0) return -1;
    seen->device = vals[0];
    seen->stream = vals[1];
    val->kind = V_OBJECT;
    val->at = NULL;
    val->len = 0;
    return 0;
}

enum { K_SPAN = 3, K_SYNC = 4 };

static int kept_kind(const Val *cat) {
    for (int k = 0; k < 3; k++) {
        if (key_is(cat, KIND_NAMES[k], (Py_ssize_t)strlen(KIND_NAMES[k]))) return k;
    }
    if (key_is(cat, "Trace", 5)) return K_SPAN;
    if (key_is(cat, "cuda_runtime", 12) || key_is(cat, "cuda_driver", 11) || key_is(cat, "cuda_sync", 9)) return K_SYNC;
    return -1;
}

/* Which of SYNC_NAMES a name is, or -1 (a launch, any other call). */
static int sync_name(const Val *name) {
    if (name->kind != V_STRING || name->len < 8) return -1; /* the shortest is "cuMemcpy" */
    for (int i = 0; i < N_SYNC_NAMES; i++) {
        if (key_is(name, SYNC_NAMES[i], (Py_ssize_t)strlen(SYNC_NAMES[i]))) return i;
    }
    return -1;
}

/* A host wait (an event of a sync category): kept when its name is one of SYNC_NAMES. */
static int scan_sync(Cur *c, Part *part, const Val *v) {
    int which = sync_name(&v[E_NAME]);
    if (which < 0) return 0;
    if (v[E_PH].kind != V_STRING || !key_is(&v[E_PH], "X", 1)) return decline(c, "a host wait whose 'ph' is not \"X\"");
    int64_t ts, dur;
    if (micros_to_ns(&v[E_TS], &ts) < 0 || micros_to_ns(&v[E_DUR], &dur) < 0 || dur < 0)
        return decline(c, "host wait times not written -d.ddd");
    if (grow((void **)&part->syncs, &part->capsyncs, part->nsyncs + 1, sizeof(SyncRow)) < 0) {
        part->oom = 1;
        return decline(c, "out of memory");
    }
    SyncRow *row = &part->syncs[part->nsyncs++];
    row->name = which;
    row->ts = ts;
    row->dur = dur;
    return 0;
}

static int scan_event(Cur *c, Part *part) {
    Val v[8];
    ArgsSeen args;
    args.device.kind = args.stream.kind = V_NONE;
    if (scan_object(c, EVENT_KEYS, EVENT_LENS, 8, v, scan_args, E_ARGS, &args) < 0) return -1;
    if (v[E_CAT].kind == V_NONE) return 0;
    if (v[E_CAT].kind != V_STRING) return decline(c, "an event's 'cat' is not a string");
    int kind = kept_kind(&v[E_CAT]);
    if (kind < 0) return 0;
    if (kind == K_SYNC) return scan_sync(c, part, v);
    if (v[E_PH].kind != V_STRING || !key_is(&v[E_PH], "X", 1)) return decline(c, "kept work whose 'ph' is not \"X\"");
    int64_t ts, dur;
    if (kind == K_SPAN) {
        if (part->have_span) return 0; /* only the first span counts, as in the general reader */
        if (micros_to_ns(&v[E_TS], &ts) < 0 || micros_to_ns(&v[E_DUR], &dur) < 0 || dur < 0)
            return decline(c, "the profiler span's times are not -d.ddd");
        part->have_span = 1;
        part->span_start = ts;
        part->span_end = ts + dur;
        return 0;
    }
    if (micros_to_ns(&v[E_TS], &ts) < 0 || micros_to_ns(&v[E_DUR], &dur) < 0 || dur < 0)
        return decline(c, "GPU event times not written -d.ddd");
    const unsigned char *name_at = (const unsigned char *)"";
    Py_ssize_t name_len = 0;
    if (v[E_NAME].kind == V_STRING) {
        name_at = v[E_NAME].at;
        name_len = v[E_NAME].len;
    } else if (v[E_NAME].kind != V_NONE) {
        return decline(c, "a GPU event's name is not a string");
    }
    const Val *device = &v[E_PID], *stream = &v[E_TID];
    if (v[E_ARGS].kind == V_OBJECT) {
        if (args.device.kind != V_NONE && args.device.kind != V_NULL) device = &args.device;
        if (args.stream.kind != V_NONE && args.stream.kind != V_NULL) stream = &args.stream;
    } else if (v[E_ARGS].kind != V_NONE && v[E_ARGS].kind != V_NULL) {
        return decline(c, "a GPU event's args is not an object");
    }
    Place dplace, splace;
    if (place_of(device, &dplace) < 0 || place_of(stream, &splace) < 0)
        return decline(c, "a GPU event's device or stream is not a short integer or a string");
    if (grow((void **)&part->rows, &part->caprows, part->nrows + 1, sizeof(Row)) < 0) {
        part->oom = 1;
        return decline(c, "out of memory");
    }
    Row *row = &part->rows[part->nrows++];
    row->name_at = name_at;
    row->name_len = name_len;
    row->kind = kind;
    row->device = dplace;
    row->stream = splace;
    row->ts = ts;
    row->dur = dur;
    return 0;
}

enum { AT_STOP = 0, ARRAY_ENDED = 1 };

/* Elements of the traceEvents array from c->p (an element's start, or its ']') until the array
 * ends (ARRAY_ENDED, c->p after the ']') or, with ``stop``, until the element that starts at
 * ``stop`` (AT_STOP): a part that passes ``stop`` inside an element, or ends the array before
 * it, was given a stop that is not an element's start, and fails. */
static int scan_elements(Cur *c, Part *part, const unsigned char *stop) {
    skip_ws(c);
    if (c->p < c->end && *c->p == ']') {
        c->p++;
        return stop ? decline(c, "the array ended before the next part") : ARRAY_ENDED;
    }
    for (;;) {
        skip_ws(c);
        if (c->p >= c->end) return decline(c, "not valid JSON: it ends early (truncated?)");
        if (*c->p == ']') return decline(c, "not valid JSON: a comma before ']'");
        if (*c->p != '{') return decline(c, "an event that is not an object");
        if (scan_event(c, part) < 0) return -1;
        skip_ws(c);
        if (c->p >= c->end) return decline(c, "not valid JSON: it ends early (truncated?)");
        if (*c->p == ',') {
            c->p++;
            if (stop) {
                skip_ws(c);
                if (c->p == stop) return AT_STOP;
                if (c->p > stop) return decline(c, "the next part did not start at an element");
            }
            continue;
        }
        if (*c->p == ']') {
            c->p++;
            return stop ? decline(c, "the array ended before the next part") : ARRAY_ENDED;
        }
        return decline(c, "not valid JSON: a bad separator in traceEvents");
    }
}

static void free_parts(Out *o) {
    for (int i = 0; i < MAX_THREADS; i++) {
        PyMem_RawFree(o->parts[i].rows);
        PyMem_RawFree(o->parts[i].syncs);
        memset(&o->parts[i], 0, sizeof(Part));
    }
    o->nparts = 0;
}

#ifdef HAVE_THREADS
typedef struct {
    Cur c;
    Part *part;
    const unsigned char *stop;
    int result;
    pthread_t thread;
} Job;

static void *run_job(void *arg) {
    Job *job = arg;
    /* the cursor and the part live on this thread's own stack while it reads: in the shared
     * arrays, neighbouring jobs' cursors would share cache lines, written at every token */
    Cur c = job->c;
    Part part;
    memset(&part, 0, sizeof part);
    job->result = scan_elements(&c, &part, job->stop);
    job->c = c;
    *job->part = part;
    return NULL;
}

static int cpu_count(void) {
#if defined(__linux__) && defined(CPU_COUNT)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
#endif
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* Where a part may start near ``from``: an element's '{' on a line of its own after a ",": in
 * valid JSON a line break is never inside a string, so such a '{' starts an element of some
 * array (the parts check it was this one). NULL when none is found before ``limit``. */
static const unsigned char *part_start(const unsigned char *floor, const unsigned char *from,
                                       const unsigned char *limit, Py_ssize_t indent) {
    const unsigned char *p = from;
    while (p < limit) {
        const unsigned char *nl = memchr(p, '\n', (size_t)(limit - p));
        if (nl == NULL) return NULL;
        const unsigned char *before = nl, *after = nl + 1;
        while (before > floor && is_ws(before[-1])) before--;
        while (after < limit && is_ws(*after)) after++;
        if (after < limit && *after == '{' && before > floor && before[-1] == ',' &&
            (indent < 0 || after - (nl + 1) == indent))
            return after;
        p = nl + 1;
    }
    return NULL;
}

/* How far the first element is indented on its own line (-1: not on a line of its own): the
 * others are, in a pretty-printed trace, and nested look-alikes mostly are not. */
static Py_ssize_t element_indent(const unsigned char *begin, const unsigned char *end) {
    const unsigned char *first = begin;
    while (first < end && is_ws(*first)) first++;
    const unsigned char *line = first;
    while (line > begin && line[-1] != '\n') line--;
    return (line > begin && first < end && *first == '{') ? first - line : -1;
}

/* The elements read by several threads at once, each from its own part start; 0 when every part
 * ended where the next one starts (c->p then after the array), else -1 (nothing kept). */
static int scan_elements_in_parts(Cur *c, Out *o) {
    const unsigned char *begin = c->p, *end = c->end;
    /* by default, where there are two CPUs or more, BALANCED_PARTS or one part a CPU, whichever is
     * more (up to MAX_THREADS, and as MIN_PART_BYTES allows): parts of equal bytes are not equal
     * work, and more of them balance better (measured: 8 threads on 2 CPUs beat 2); a 16-CPU host
     * reads the 55.7 MB trace in 13 parts instead of 8 */
    int cpus = cpu_count();
    int wanted = o->threads > 0 ? o->threads : (cpus > 1 ? (cpus > BALANCED_PARTS ? cpus : BALANCED_PARTS) : 1);
    Py_ssize_t size = end - begin;
    if (wanted > MAX_THREADS) wanted = MAX_THREADS;
    if (o->min_part > 0 && size / o->min_part < wanted) wanted = (int)(size / o->min_part);
    if (wanted < 2) return -1;
    const unsigned char *starts[MAX_THREADS + 1];
    Py_ssize_t indent = element_indent(begin, end);
    int n = 1;
    starts[0] = begin;
    for (int i = 1; i < wanted; i++) {
        const unsigned char *from = begin + size / wanted * i;
        if (from <= starts[n - 1]) from = starts[n - 1] + 1;
        const unsigned char *found = part_start(begin, from, end, indent);
        if (found == NULL) break;
        if (found > starts[n - 1]) starts[n++] = found;
    }
    if (n < 2) return -1;
    starts[n] = NULL;
    Job jobs[MAX_THREADS];
    int launched = 1;
    for (int i = 0; i < n; i++) {
        jobs[i].c.p = starts[i];
        jobs[i].c.end = end;
        jobs[i].c.why = NULL;
        jobs[i].part = &o->parts[i];
        jobs[i].stop = starts[i + 1];
        jobs[i].result = -1;
    }
    for (int i = 1; i < n; i++) {
        if (pthread_create(&jobs[i].thread, NULL, run_job, &jobs[i]) != 0) break;
        launched++;
    }
    run_job(&jobs[0]);
    for (int i = 1; i < launched; i++) pthread_join(jobs[i].thread, NULL);
    int ok = launched == n;
    for (int i = 0; i < n && ok; i++) {
        ok = jobs[i].result == (i + 1 < n ? AT_STOP : ARRAY_ENDED) && !o->parts[i].oom;
    }
    if (!ok) {
        free_parts(o);
        return -1;
    }
    o->nparts = n;
    c->p = jobs[n - 1].c.p;
    return 0;
}
#endif

/* The traceEvents array at c->p ('['): in parts on several threads where it is big, else (or
 * where the parts do not fit together) in one pass, which also gives the reason to decline. */
static int scan_events(Cur *c, Out *o) {
    c->p++; /* '[' */
#ifdef HAVE_THREADS
    if (scan_elements_in_parts(c, o) == 0) return 0;
#endif
    o->nparts = 1;
    int result = scan_elements(c, &o->parts[0], NULL);
    if (o->parts[0].oom) o->oom = 1;
    return result < 0 ? -1 : 0;
}

/* Codes for every row's kernel and place, in the order of the rows (after all parts are read). */
static int code_rows(Out *o) {
    for (int i = 0; i < o->nparts; i++) {
        Part *part = &o->parts[i];
        for (Py_ssize_t r = 0; r < part->nrows; r++) {
            Row *row = &part->rows[r];
            row->name_code = name_code(o, row->kind, row->name_at, row->name_len);
            row->place_code = place_code(o, &row->device, &row->stream);
            if (row->name_code < 0 || row->place_code < 0) return -1;
        }
        o->nrows += part->nrows;
        o->nsyncs += part->nsyncs;
    }
    return 0;
}

static int scan_document(Cur *c, Out *o) {
    int have_events = 0;
    Val key;
    skip_ws(c);
    if (c->p >= c->end || *c->p != '{') return decline(c, "the top level is not an object");
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') return decline(c, "no traceEvents");
    int more = 1;
    while (more > 0) {
        if (scan_key(c, &key) < 0) return -1;
        if (key_is(&key, "traceEvents", 11)) {
            if (have_events) return decline(c, "traceEvents is repeated");
            have_events = 1;
            if (c->p >= c->end || *c->p != '[') return decline(c, "traceEvents is not an array");
            if (scan_events(c, o) < 0) return -1;
        } else if (key_is(&key, "baseTimeNanoseconds", 19)) {
            Val base;
            if (o->have_base) return decline(c, "baseTimeNanoseconds is repeated");
            const unsigned char *start = c->p;
            if (skip_value(c, &base) < 0) return -1;
            o->have_base = 1;
            o->base_at = start;
            o->base_len = c->p - start;
        } else {
            Val ignored;
            if (skip_value(c, &ignored) < 0) return -1;
        }
        more = next_member(c, "not valid JSON: a bad separator in the top-level object");
    }
    if (more < 0) return -1;
    skip_ws(c);
    if (c->p != c->end) return decline(c, "not valid JSON: text after the top-level object");
    if (!have_events) return decline(c, "no traceEvents");
    return 0;
}

/* ------------------------------------------------------------ Python objects */

static PyObject *place_object(const Place *p) {
    if (p->is_str) return PyUnicode_DecodeUTF8((const char *)p->at, p->len, "strict");
    return PyLong_FromLongLong(p->num);
}

/* The host waits as (sync_codes, sync_names, sync_starts, sync_durs), or NULL with an error set. */
static PyObject *build_syncs(const Out *o) {
    PyObject *codes = PyList_New(o->nsyncs), *names = PyList_New(N_SYNC_NAMES);
    PyObject *starts = PyList_New(o->nsyncs), *durs = PyList_New(o->nsyncs), *result = NULL;
    if (!codes || !names || !starts || !durs) goto done;
    for (int i = 0; i < N_SYNC_NAMES; i++) {
        PyObject *name = PyUnicode_InternFromString(SYNC_NAMES[i]);
        if (!name) goto done;
        PyList_SET_ITEM(names, i, name);
    }
    Py_ssize_t at = 0;
    for (int i = 0; i < o->nparts; i++) {
        const Part *part = &o->parts[i];
        for (Py_ssize_t r = 0; r < part->nsyncs; r++, at++) {
            const SyncRow *row = &part->syncs[r];
            PyObject *a = PyLong_FromLong(row->name), *s = PyLong_FromLongLong(row->ts), *d = PyLong_FromLongLong(row->dur);
            if (a) PyList_SET_ITEM(codes, at, a);
            if (s) PyList_SET_ITEM(starts, at, s);
            if (d) PyList_SET_ITEM(durs, at, d);
            if (!a || !s || !d) goto done;
        }
    }
    result = PyTuple_Pack(4, codes, names, starts, durs);
done:
    Py_XDECREF(codes);
    Py_XDECREF(names);
    Py_XDECREF(starts);
    Py_XDECREF(durs);
    return result;
}

static PyObject *build_result(const Out *o) {
    PyObject *name_codes = PyList_New(o->nrows), *place_codes = PyList_New(o->nrows);
    PyObject *starts = PyList_New(o->nrows), *durs = PyList_New(o->nrows);
    PyObject *names = PyList_New(o->nnames), *kinds = PyList_New(o->nnames);
    PyObject *devices = PyList_New(o->nplaces), *streams = PyList_New(o->nplaces);
    PyObject *kind_objects[3] = {NULL, NULL, NULL};
    PyObject *span = NULL, *base = NULL, *parts = NULL, *syncs = NULL, *result = NULL;
    if (!name_codes || !place_codes || !starts || !durs || !names || !kinds || !devices || !streams) goto done;
    for (int k = 0; k < 3; k++) {
        kind_objects[k] = PyUnicode_InternFromString(KIND_NAMES[k]);
        if (!kind_objects[k]) goto done;
    }
    Py_ssize_t at = 0;
    const Part *with_span = NULL;
    for (int i = 0; i < o->nparts; i++) {
        const Part *part = &o->parts[i];
        if (with_span == NULL && part->have_span) with_span = part;
        for (Py_ssize_t r = 0; r < part->nrows; r++, at++) {
            const Row *row = &part->rows[r];
            PyObject *a = PyLong_FromSsize_t(row->name_code), *b = PyLong_FromSsize_t(row->place_code);
            PyObject *s = PyLong_FromLongLong(row->ts), *d = PyLong_FromLongLong(row->dur);
            if (a) PyList_SET_ITEM(name_codes, at, a);
            if (b) PyList_SET_ITEM(place_codes, at, b);
            if (s) PyList_SET_ITEM(starts, at, s);
            if (d) PyList_SET_ITEM(durs, at, d);
            if (!a || !b || !s || !d) goto done;
        }
    }
    for (Py_ssize_t i = 0; i < o->nnames; i++) {
        PyObject *name = PyUnicode_DecodeUTF8((const char *)o->names[i].at, o->names[i].len, "strict");
        if (!name) goto done;
        PyList_SET_ITEM(names, i, name);
        Py_INCREF(kind_objects[o->names[i].kind]);
        PyList_SET_ITEM(kinds, i, kind_objects[o->names[i].kind]);
    }
    for (Py_ssize_t i = 0; i < o->nplaces; i++) {
        PyObject *device = place_object(&o->places[i].device), *stream = place_object(&o->places[i].stream);
        if (device) PyList_SET_ITEM(devices, i, device);
        if (stream) PyList_SET_ITEM(streams, i, stream);
        if (!device || !stream) goto done;
    }
    if (with_span) {
        span = Py_BuildValue("(LL)", (long long)with_span->span_start, (long long)with_span->span_end);
    } else {
        span = Py_None;
        Py_INCREF(span);
    }
    if (o->have_base) {
        base = PyBytes_FromStringAndSize((const char *)o->base_at, o->base_len);
    } else {
        base = Py_None;
        Py_INCREF(base);
    }
    if (!span || !base) goto done;
    parts = PyLong_FromLong(o->nparts);
    syncs = build_syncs(o);
    if (!parts || !syncs) goto done;
    result = PyTuple_Pack(15, name_codes, names, kinds, place_codes, devices, streams, starts, durs, span, base, parts,
                          PyTuple_GET_ITEM(syncs, 0), PyTuple_GET_ITEM(syncs, 1), PyTuple_GET_ITEM(syncs, 2),
                          PyTuple_GET_ITEM(syncs, 3));
done:
    Py_XDECREF(name_codes);
    Py_XDECREF(place_codes);
    Py_XDECREF(starts);
    Py_XDECREF(durs);
    Py_XDECREF(names);
    Py_XDECREF(kinds);
    Py_XDECREF(devices);
    Py_XDECREF(streams);
    Py_XDECREF(span);
    Py_XDECREF(base);
    Py_XDECREF(parts);
    Py_XDECREF(syncs);
    for (int k = 0; k < 3; k++) Py_XDECREF(kind_objects[k]);
    return result;
}

static PyObject *scan(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs < 1 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "scan(buffer, threads=0, min_part_bytes=4 MiB)");
        return NULL;
    }
    Out o;
    memset(&o, 0, sizeof o);
    o.min_part = MIN_PART_BYTES;
    if (nargs >= 2) {
        o.threads = (int)PyLong_AsLong(args[1]);
        if (o.threads == -1 && PyErr_Occurred()) return NULL;
    }
    if (nargs >= 3) {
        o.min_part = PyLong_AsSsize_t(args[2]);
        if (o.min_part == -1 && PyErr_Occurred()) return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    Cur c;
    c.p = view.buf;
    c.end = (const unsigned char *)view.buf + view.len;
    c.why = NULL;
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = scan_document(&c, &o);
    if (status == 0 && code_rows(&o) < 0) o.oom = 1;
    Py_END_ALLOW_THREADS
    PyObject *result;
    if (o.oom) {
        result = PyErr_NoMemory();
    } else if (status < 0) {
        result = PyUnicode_FromString(c.why ? c.why : "declined");
    } else {
        result = build_result(&o);
    }
    free_parts(&o);
    PyMem_RawFree(o.names);
    PyMem_RawFree(o.table);
    PyMem_RawFree(o.places);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef METHODS[] = {
    {"scan", (PyCFunction)(void (*)(void))scan, METH_FASTCALL,
     "scan(buffer, threads=0, min_part_bytes=4 MiB) -> tuple | str: check a trace's JSON and take out its GPU "
     "events in one pass (big traces in parts, one thread each: at most ``threads``, 0 = up to 8 where there are 2 CPUs or more); a str "
     "says why it declined (the general reader then takes the trace)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_scan", "One-pass reader of Kineto trace JSON.", -1,
                                    METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__scan(void) { return PyModule_Create(&MODULE); }
