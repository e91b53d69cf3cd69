/* The plain-Python analysis of a trace (analysis/summary.py's _plain_figures) in one C call.
 *
 * ``gpuutil analyze`` reads a big trace into plain lists and analyses it without numpy (importing
 * numpy costs more than it saves there). Its per-event Python (clipping to the window, counts and
 * totals by (name, kind) pair, the events of each device sorted by start, the unions, the idle
 * gaps, the kernels' lengths) took some 30 ms of a 40,000-kernel trace; here it is one pass to
 * read the columns and one pass per device over its events, sorted:
 *
 *   figures(starts, durs, keys, key_cats, is_kernel, devices, n_devices, streams, n_streams,
 *           cat_flags, ws, we, gap_count)
 *     -> (kept, counts, totals, kernel_lengths, per_device, any_starts, any_ends)
 *
 * ``starts``/``durs``/``keys``/``devices``/``streams``: one int per event (ns; codes into the
 * maps). ``key_cats``: each key's category code; ``is_kernel``: each key's 0/1;
 * ``cat_flags``: each category's 1 (matmul/conv) | 2 (communication). ``ws``..``we``: the window.
 *
 * The figures are summary._plain_figures' to the nanosecond (tests/analysis/test_figures_c.py):
 * - kept: the events in the window (all of them when none reaches outside it; else those not
 *   starting after its end, not ending before its start, not of length > 0 ending at its start),
 *   clipped to it; ``counts``/``totals`` per key: their number and clipped time;
 *   ``kernel_lengths``: the kernels' clipped lengths, in the events' order;
 * - per_device: per device code, None where it has no kept event, else (events, block_starts,
 *   block_ends, busy, per category union, per category events, matmul/conv union, communication
 *   union, union of the rest, per stream events, per stream union, idle gap starts, idle gap
 *   lengths, gaps between blocks, their sum). The events of a device go by start (stable, as
 *   Python's sorted); a block ends where the next start is past every end so far. The idle gaps
 *   are the ``gap_count`` longest of window start..first block, between blocks, last block..window
 *   end, longest first and by place among equals, those of length > 0 (heapq.nlargest's);
 * - any_starts/any_ends: where more than one device has events, the union of all their blocks.
 * The blocks' starts and ends, the gaps between them and any_starts/any_ends are bytes of native
 * int64s (event_figures.py makes them array('q')), the rest lists of ints.
 *
 * Beside it, for the findings rules' medians over those: count_within(values, limit, strict) and
 * lower_median(values, step), on a sequence of ints or an int64 buffer.
 *
 * Anything else (a value that is not an int, out of int64, a sum past int64, a code out of range)
 * raises, and the caller takes the Python passes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_int64s.h"

#define MM_CONV 1
#define COMMUNICATION 2

/* The values as the bytes of native int64s (event_figures.py makes them array('q')):
 * no int object for each of the tens of thousands of busy blocks and gaps that only a few findings
 * rules read, and those in C (count_within, lower_median). */
static PyObject *bytes_of(const int64_t *values, Py_ssize_t n) {
    return PyBytes_FromStringAndSize((const char *)values, n * (Py_ssize_t)sizeof(int64_t));
}

/* a + b and a - b into *out; 0 where the result is past int64 (Python's ints never are). */
static inline int add64(int64_t a, int64_t b, int64_t *out) {
#if defined(__GNUC__) || defined(__clang__)
    return !__builtin_add_overflow(a, b, out);
#else
    if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b)) return 0;
    *out = a + b;
    return 1;
#endif
}

static inline int sub64(int64_t a, int64_t b, int64_t *out) {
#if defined(__GNUC__) || defined(__clang__)
    return !__builtin_sub_overflow(a, b, out);
#else
    if ((b < 0 && a > INT64_MAX + b) || (b > 0 && a < INT64_MIN + b)) return 0;
    *out = a - b;
    return 1;
#endif
}

static int in_range(const int64_t *codes, Py_ssize_t n, int64_t limit) {
    for (Py_ssize_t i = 0; i < n; i++) {
        if (codes[i] < 0 || codes[i] >= limit) return 0;
    }
    return 1;
}

/* idx[0..n) sorted by key[idx] (stable: by place among equals), with tmp and runs as room for n
 * (+ 1): the sorted runs already there are merged two by two (a trace's events mostly come by
 * start, in a few runs: one per part the reader read). */
static void sort_by(int64_t *idx, int64_t *tmp, Py_ssize_t *runs, Py_ssize_t n, const int64_t *key) {
    Py_ssize_t n_runs = 0;
    runs[n_runs++] = 0;
    for (Py_ssize_t i = 1; i < n; i++) {
        if (key[idx[i]] < key[idx[i - 1]]) runs[n_runs++] = i;
    }
    runs[n_runs] = n;
    int64_t *from = idx, *to = tmp;
    while (n_runs > 1) {
        Py_ssize_t merged = 0;
        for (Py_ssize_t r = 0; r < n_runs; r += 2) {
            /* runs[n_runs] is n: a last run without a pair is copied as it is */
            Py_ssize_t lo = runs[r], mid = runs[r + 1], hi = r + 2 <= n_runs ? runs[r + 2] : n;
            Py_ssize_t a = lo, b = mid, k = lo;
            while (a < mid && b < hi) to[k++] = key[from[b]] < key[from[a]] ? from[b++] : from[a++];
            while (a < mid) to[k++] = from[a++];
            while (b < hi) to[k++] = from[b++];
            runs[merged++] = lo;
        }
        n_runs = merged;
        runs[n_runs] = n;
        int64_t *swap = from;
        from = to;
        to = swap;
    }
    if (from != idx) memcpy(idx, from, (size_t)n * sizeof(int64_t));
}

/* A union being summed over intervals that come by start: its open block and the total so far. */
typedef struct {
    int seen;
    int64_t open, reach, total;
} Union;

static int union_add(Union *u, int64_t start, int64_t end) {
    if (!u->seen) {
        u->seen = 1;
        u->open = start;
        u->reach = end;
    } else if (start > u->reach) {
        int64_t length;
        if (!sub64(u->reach, u->open, &length) || !add64(u->total, length, &u->total)) return 0;
        u->open = start;
        u->reach = end;
    } else if (end > u->reach) {
        u->reach = end;
    }
    return 1;
}

static int union_total(Union *u, int64_t *out) {
    int64_t length = 0;
    if (u->seen && !sub64(u->reach, u->open, &length)) return 0;
    return add64(u->total, length, out);
}

/* An OverflowError where a sum or difference is past int64 (the caller then takes the Python passes). */
#define OVERFLOW_OR(cond) \
    if (!(cond)) { \
        PyErr_SetString(PyExc_OverflowError, "a time is past int64"); \
        goto fail; \
    }

/* The value as a Python int: the event's own object where it holds that value (no new object for
 * the lengths that clipping left alone), else a new one. */
static PyObject *int_of(PyObject *own, int64_t value, int64_t own_value) {
    if (own != NULL && value == own_value && PyLong_CheckExact(own)) {
        Py_INCREF(own);
        return own;
    }
    return PyLong_FromLongLong((long long)value);
}

/* A list of values[0..n) as Python ints, the objects of ``own`` (at idx) reused where they hold them. */
static PyObject *list_reusing(const int64_t *values, const int64_t *idx, Py_ssize_t n, PyObject **own,
                              const int64_t *own_values) {
    PyObject *list = PyList_New(n);
    if (list == NULL) return NULL;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *v = int_of(own[idx[j]], values[j], own_values[idx[j]]);
        if (v == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, j, v);
    }
    return list;
}

/* The columns of the kept events, clipped to the window, and what the per-device pass needs. */
typedef struct {
    const int64_t *cs, *ce, *cats, *strs, *cat_flags;
    Py_ssize_t n_cats, n_streams;
    int64_t ws, we, gap_count;
    /* room for one device's events: block start events, block ends, scratch (n each) */
    int64_t *block_first, *be, *scratch;
} Columns;

/* The k longest gaps (> 0) of lengths[0..n), longest first, by place among equals: into pick. */
static Py_ssize_t longest(const int64_t *lengths, Py_ssize_t n, Py_ssize_t k, Py_ssize_t *pick) {
    Py_ssize_t found = 0;
    for (Py_ssize_t i = 0; i < n && k > 0; i++) {
        if (lengths[i] <= 0) continue;
        if (found == k && lengths[pick[k - 1]] >= lengths[i]) continue;
        Py_ssize_t at = found < k ? found++ : k - 1;
        while (at > 0 && lengths[pick[at - 1]] < lengths[i]) {
            pick[at] = pick[at - 1];
            at--;
        }
        pick[at] = i;
    }
    return found;
}

/* A group's union: none of the device's events (0), all of them (its busy time), else as summed. */
static int group_total(Py_ssize_t members, Py_ssize_t n, int64_t busy, Union *u, int64_t *out) {
    if (members == 0) {
        *out = 0;
        return 1;
    }
    if (members == n) {
        *out = busy;
        return 1;
    }
    return union_total(u, out);
}

/* One device's figures (see the top of the file) from its events idx[0..n), sorted by start; its
 * blocks' first events and ends are left in c->block_first / c->be. */
static PyObject *device_figures(const Columns *c, const int64_t *idx, Py_ssize_t n, Py_ssize_t *n_blocks) {
    /* groups: the categories, matmul/conv, communication, the rest, the streams */
    Py_ssize_t n_cats = c->n_cats, n_groups = n_cats + 3 + c->n_streams;
    Union *unions = PyMem_Calloc((size_t)n_groups, sizeof(Union));
    int64_t *members = PyMem_Calloc((size_t)n_groups, sizeof(int64_t));
    int64_t *totals = PyMem_Calloc((size_t)n_groups, sizeof(int64_t));
    char *track = PyMem_Calloc((size_t)n_groups, 1);
    int64_t *gap_lengths = NULL, *gaps = NULL, *idle_starts = NULL, *idle_lengths = NULL;
    Py_ssize_t *pick = NULL;
    PyObject *result = NULL;
    if (unions == NULL || members == NULL || totals == NULL || track == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    const Py_ssize_t MM = n_cats, COMM = n_cats + 1, REST = n_cats + 2, STREAM = n_cats + 3;
    for (Py_ssize_t j = 0; j < n; j++) {
        int64_t i = idx[j], cat = c->cats[i], flags = c->cat_flags[cat];
        members[cat]++;
        members[flags & COMMUNICATION ? COMM : REST]++;
        if (flags & MM_CONV) members[MM]++;
        members[STREAM + c->strs[i]]++;
    }
    /* a group of all the device's events or none needs no pass: its union is the busy time or 0 */
    for (Py_ssize_t g = 0; g < n_groups; g++) track[g] = members[g] > 0 && members[g] < n;
    Py_ssize_t k = -1;
    int64_t reach = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        int64_t i = idx[j], s = c->cs[i], e = c->ce[i], cat = c->cats[i], flags = c->cat_flags[cat];
        if (k < 0 || s > reach) {
            if (k >= 0) c->be[k] = reach;
            c->block_first[++k] = i;
            reach = e;
        } else if (e > reach) {
            reach = e;
        }
        if (track[cat]) OVERFLOW_OR(union_add(unions + cat, s, e));
        if (track[MM] && (flags & MM_CONV)) OVERFLOW_OR(union_add(unions + MM, s, e));
        Py_ssize_t side = flags & COMMUNICATION ? COMM : REST;
        if (track[side]) OVERFLOW_OR(union_add(unions + side, s, e));
        if (track[STREAM + c->strs[i]]) OVERFLOW_OR(union_add(unions + STREAM + c->strs[i], s, e));
    }
    c->be[k] = reach;
    *n_blocks = k + 1;
    int64_t busy = 0, between = 0, length;
    for (Py_ssize_t b = 0; b <= k; b++) {
        OVERFLOW_OR(sub64(c->be[b], c->cs[c->block_first[b]], &length) && add64(busy, length, &busy));
    }
    for (Py_ssize_t g = 0; g < n_groups; g++) OVERFLOW_OR(group_total(members[g], n, busy, unions + g, totals + g));

    /* idle: window start..first block, between blocks, last block..window end */
    Py_ssize_t n_gaps = k + 2, n_between = 0;
    Py_ssize_t want = c->gap_count <= 0 ? 0 : (c->gap_count < n_gaps ? (Py_ssize_t)c->gap_count : n_gaps);
    gap_lengths = PyMem_Malloc((size_t)n_gaps * sizeof(int64_t));
    gaps = PyMem_Malloc((size_t)n_gaps * sizeof(int64_t));
    pick = PyMem_Malloc((size_t)(want + 1) * sizeof(Py_ssize_t));
    idle_starts = PyMem_Malloc((size_t)(want + 1) * sizeof(int64_t));
    idle_lengths = PyMem_Malloc((size_t)(want + 1) * sizeof(int64_t));
    if (gap_lengths == NULL || gaps == NULL || pick == NULL || idle_starts == NULL || idle_lengths == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t g = 0; g < n_gaps; g++) {
        int64_t from = g == 0 ? c->ws : c->be[g - 1], to = g <= k ? c->cs[c->block_first[g]] : c->we;
        OVERFLOW_OR(sub64(to, from, gap_lengths + g));
        if (g > 0 && g <= k && gap_lengths[g] != 0) {
            gaps[n_between++] = gap_lengths[g];
            OVERFLOW_OR(add64(between, gap_lengths[g], &between));
        }
    }
    Py_ssize_t n_idle = longest(gap_lengths, n_gaps, want, pick);
    for (Py_ssize_t g = 0; g < n_idle; g++) {
        idle_starts[g] = pick[g] == 0 ? c->ws : c->be[pick[g] - 1];
        idle_lengths[g] = gap_lengths[pick[g]];
    }
    for (Py_ssize_t b = 0; b <= k; b++) c->scratch[b] = c->cs[c->block_first[b]];
    result = Py_BuildValue("(nNNLNNLLLNNNNNL)", n, bytes_of(c->scratch, k + 1), bytes_of(c->be, k + 1), (long long)busy, list_of(totals, n_cats), list_of(members, n_cats),
                           (long long)totals[MM], (long long)totals[COMM], (long long)totals[REST],
                           list_of(members + STREAM, c->n_streams), list_of(totals + STREAM, c->n_streams),
                           list_of(idle_starts, n_idle), list_of(idle_lengths, n_idle), bytes_of(gaps, n_between),
                           (long long)between);
fail:
    PyMem_Free(unions);
    PyMem_Free(members);
    PyMem_Free(totals);
    PyMem_Free(track);
    PyMem_Free(gap_lengths);
    PyMem_Free(gaps);
    PyMem_Free(pick);
    PyMem_Free(idle_starts);
    PyMem_Free(idle_lengths);
    return result;
}

/* The union of every device's blocks (bs/be[0..n), each device's sorted): into bs/be; how many. */
static Py_ssize_t any_blocks(int64_t *bs, int64_t *be, Py_ssize_t n, int64_t *idx, int64_t *tmp, Py_ssize_t *runs) {
    for (Py_ssize_t i = 0; i < n; i++) idx[i] = i;
    sort_by(idx, tmp, runs, n, bs);
    Py_ssize_t k = -1;
    int64_t reach = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        int64_t s = bs[idx[j]], e = be[idx[j]];
        if (k < 0 || s > reach) {
            if (k >= 0) tmp[k] = reach;
            idx[++k] = s; /* idx[0..j] is read already */
            reach = e;
        } else if (e > reach) {
            reach = e;
        }
    }
    if (k >= 0) tmp[k] = reach;
    memcpy(bs, idx, (size_t)(k + 1) * sizeof(int64_t));
    memcpy(be, tmp, (size_t)(k + 1) * sizeof(int64_t));
    return k + 1;
}

/* A column of codes: all 0 where there is one code (not read: only its length is checked), else read. */
static int64_t *codes_of(PyObject *seq, Py_ssize_t n_codes, Py_ssize_t n, Py_ssize_t *len) {
    if (n_codes != 1) return int64s(seq, len, "a column must be a sequence of ints");
    *len = PyObject_Length(seq);
    if (*len < 0) return NULL;
    int64_t *zeros = PyMem_Calloc((size_t)(*len > 0 ? *len : 1), sizeof(int64_t));
    if (zeros == NULL) PyErr_NoMemory();
    (void)n;
    return zeros;
}

enum { STARTS, DURS, KEYS, KEY_CATS, IS_KERNEL, CAT_FLAGS, DEVICES, STREAMS, N_COLUMNS };

static PyObject *figures(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *obj[N_COLUMNS];
    Py_ssize_t n_devices, n_streams;
    long long ws, we, gap_count;
    if (!PyArg_ParseTuple(args, "OOOOOOnOnOLLL:figures", &obj[STARTS], &obj[DURS], &obj[KEYS], &obj[KEY_CATS],
                          &obj[IS_KERNEL], &obj[DEVICES], &n_devices, &obj[STREAMS], &n_streams, &obj[CAT_FLAGS],
                          &ws, &we, &gap_count))
        return NULL;
    int64_t *col[N_COLUMNS] = {NULL};
    Py_ssize_t len[N_COLUMNS] = {0};
    PyObject *start_seq = NULL, *dur_seq = NULL, *devices = NULL, *result = NULL;
    int64_t *cs = NULL, *ce = NULL, *kept = NULL, *tmp = NULL, *kernels = NULL, *block_first = NULL, *be = NULL;
    int64_t *counts = NULL, *totals = NULL, *per_device = NULL, *offset = NULL, *all_bs = NULL, *all_be = NULL;
    int64_t *cats = NULL, *scratch = NULL;
    Py_ssize_t *runs = NULL;
    /* the durations' own objects are reused for the lengths that clipping left alone */
    start_seq = PySequence_Fast(obj[STARTS], "starts must be a sequence of ints");
    dur_seq = start_seq ? PySequence_Fast(obj[DURS], "durs must be a sequence of ints") : NULL;
    if (dur_seq == NULL) goto fail;
    for (int j = 0; j < DEVICES; j++) {
        col[j] = int64s(j == STARTS ? start_seq : j == DURS ? dur_seq : obj[j], &len[j], "a column must be a sequence of ints");
        if (col[j] == NULL) goto fail;
    }
    Py_ssize_t n = len[STARTS], n_keys = len[KEY_CATS], n_cats = len[CAT_FLAGS];
    if (n_devices < 0 || n_streams < 0) {
        PyErr_SetString(PyExc_ValueError, "a count is negative");
        goto fail;
    }
    if ((col[DEVICES] = codes_of(obj[DEVICES], n_devices, n, &len[DEVICES])) == NULL) goto fail;
    if ((col[STREAMS] = codes_of(obj[STREAMS], n_streams, n, &len[STREAMS])) == NULL) goto fail;
    if (len[DURS] != n || len[KEYS] != n || len[DEVICES] != n || len[STREAMS] != n || len[IS_KERNEL] != n_keys) {
        PyErr_SetString(PyExc_ValueError, "the columns differ in length");
        goto fail;
    }
    if (!in_range(col[KEYS], n, n_keys) || !in_range(col[KEY_CATS], n_keys, n_cats)
        || !in_range(col[DEVICES], n, n_devices) || !in_range(col[STREAMS], n, n_streams)) {
        PyErr_SetString(PyExc_ValueError, "a code is out of range");
        goto fail;
    }
    size_t room = (size_t)(n > 0 ? n : 1) * sizeof(int64_t);
    cs = PyMem_Malloc(room), ce = PyMem_Malloc(room), kept = PyMem_Malloc(room), tmp = PyMem_Malloc(room);
    kernels = PyMem_Malloc(room), block_first = PyMem_Malloc(room), be = PyMem_Malloc(room);
    all_bs = PyMem_Malloc(room), all_be = PyMem_Malloc(room), cats = PyMem_Malloc(room), scratch = PyMem_Malloc(room);
    runs = PyMem_Malloc((size_t)(n + 1) * sizeof(Py_ssize_t));
    counts = PyMem_Calloc((size_t)n_keys + 1, sizeof(int64_t)), totals = PyMem_Calloc((size_t)n_keys + 1, sizeof(int64_t));
    per_device = PyMem_Calloc((size_t)n_devices + 1, sizeof(int64_t));
    offset = PyMem_Calloc((size_t)n_devices + 2, sizeof(int64_t));
    if (!cs || !ce || !kept || !tmp || !kernels || !block_first || !be || !all_bs || !all_be || !cats || !scratch
        || !runs || !counts || !totals || !per_device || !offset) {
        PyErr_NoMemory();
        goto fail;
    }
    /* the window: everything inside it (nothing clipped, nothing dropped), else clip and drop */
    int inside = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        OVERFLOW_OR(add64(col[STARTS][i], col[DURS][i], ce + i));
        if (col[STARTS][i] < ws || ce[i] > we) inside = 0;
    }
    Py_ssize_t n_kept = 0, n_kernels = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t s = col[STARTS][i], e = ce[i], d = col[DURS][i], key = col[KEYS][i], length;
        if (!inside && (s > we || e < ws || (e == ws && d > 0))) continue;
        cs[i] = !inside && s < ws ? ws : s;
        ce[i] = !inside && e > we ? we : e;
        OVERFLOW_OR(sub64(ce[i], cs[i], &length) && add64(totals[key], length, totals + key));
        counts[key]++;
        if (col[IS_KERNEL][key]) {
            kernels[n_kernels] = i;
            scratch[n_kernels++] = length;
        }
        cats[i] = col[KEY_CATS][key];
        per_device[col[DEVICES][i]]++;
        kept[n_kept++] = i;
    }
    PyObject *kernel_lengths = list_reusing(scratch, kernels, n_kernels, PySequence_Fast_ITEMS(dur_seq), col[DURS]);
    if (kernel_lengths == NULL) goto fail;
    /* each device's events in the events' order (then sorted by start) */
    for (Py_ssize_t d = 0; d < n_devices; d++) offset[d + 1] = offset[d] + per_device[d];
    for (Py_ssize_t j = 0; j < n_kept; j++) tmp[offset[col[DEVICES][kept[j]]]++] = kept[j];
    memcpy(kept, tmp, (size_t)n_kept * sizeof(int64_t));
    Columns c = {cs, ce, cats, col[STREAMS], col[CAT_FLAGS], n_cats, n_streams, ws, we, gap_count, block_first, be,
                 scratch};
    devices = PyList_New(n_devices);
    if (devices == NULL) {
        Py_DECREF(kernel_lengths);
        goto fail;
    }
    Py_ssize_t n_all = 0, with_events = 0, first = 0;
    for (Py_ssize_t d = 0; d < n_devices; d++) {
        PyObject *found = Py_None;
        if (per_device[d] > 0) {
            int64_t *idx = kept + first;
            sort_by(idx, tmp, runs, (Py_ssize_t)per_device[d], cs);
            Py_ssize_t n_blocks = 0;
            found = device_figures(&c, idx, (Py_ssize_t)per_device[d], &n_blocks);
            if (found == NULL) {
                Py_DECREF(kernel_lengths);
                goto fail;
            }
            for (Py_ssize_t b = 0; b < n_blocks; b++) {
                all_bs[n_all + b] = cs[block_first[b]];
                all_be[n_all + b] = be[b];
            }
            n_all += n_blocks;
            with_events++;
        } else {
            Py_INCREF(found);
        }
        first += per_device[d];
        PyList_SET_ITEM(devices, d, found);
    }
    PyObject *any_starts = Py_None, *any_ends = Py_None;
    if (with_events > 1) {
        Py_ssize_t n_any = any_blocks(all_bs, all_be, n_all, kept, tmp, runs);
        any_starts = bytes_of(all_bs, n_any);
        any_ends = any_starts ? bytes_of(all_be, n_any) : NULL;
        if (any_ends == NULL) {
            Py_XDECREF(any_starts);
            Py_DECREF(kernel_lengths);
            goto fail;
        }
    } else {
        Py_INCREF(any_starts);
        Py_INCREF(any_ends);
    }
    result = Py_BuildValue("(nNNNNNN)", n_kept, list_of(counts, n_keys), list_of(totals, n_keys), kernel_lengths,
                           devices, any_starts, any_ends);
    devices = NULL; /* the tuple owns it (or Py_BuildValue released it) */
fail:
    Py_XDECREF(devices);
    Py_XDECREF(start_seq);
    Py_XDECREF(dur_seq);
    for (int j = 0; j < N_COLUMNS; j++) PyMem_Free(col[j]);
    int64_t *scratches[] = {cs, ce, kept, tmp, kernels, block_first, be, all_bs, all_be, cats, scratch, counts, totals,
                            per_device, offset};
    for (size_t j = 0; j < sizeof scratches / sizeof *scratches; j++) PyMem_Free(scratches[j]);
    PyMem_Free(runs);
    return result;
}

/* Integers past 2**53 are not all doubles: the comparisons below would not be Python's (exact). */
#define EXACT_IN_DOUBLE ((int64_t)1 << 53)

/* The values of an int64 buffer (an array('q')) as they lie, else of a sequence of ints
 * (copied: *copy is then to be freed); NULL with an exception set. */
static const int64_t *int64s_or_buffer(PyObject *obj, Py_ssize_t *n, Py_buffer *view, int64_t **copy) {
    *copy = NULL;
    view->obj = NULL;
    if (PyObject_CheckBuffer(obj) && !PyBytes_Check(obj) && !PyByteArray_Check(obj)) {
        if (PyObject_GetBuffer(obj, view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) return NULL;
        const char *f = view->format ? view->format : "B";
        if (f[0] == '@' || f[0] == '=') f++;
        if (view->ndim == 1 && view->itemsize == 8 && (strcmp(f, "q") == 0 || (strcmp(f, "l") == 0 && sizeof(long) == 8))) {
            *n = view->len / 8;
            return (const int64_t *)view->buf;
        }
        PyBuffer_Release(view);
        view->obj = NULL;
        PyErr_SetString(PyExc_TypeError, "values must be int64s");
        return NULL;
    }
    *copy = int64s(obj, n, "values must be a sequence of ints");
    return *copy;
}

static void release(Py_buffer *view, int64_t *copy) {
    if (view->obj != NULL) PyBuffer_Release(view);
    PyMem_Free(copy);
}

/* count_within(values, limit, strict) -> how many of the ints are at most ``limit`` (under it where
 * ``strict``): the findings rules' test of a median against a limit, without sorting. */
static PyObject *count_within(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *values_obj;
    double limit;
    int strict;
    if (!PyArg_ParseTuple(args, "Odp:count_within", &values_obj, &limit, &strict)) return NULL;
    Py_ssize_t n = 0, count = 0;
    Py_buffer view;
    int64_t *copy;
    const int64_t *values = int64s_or_buffer(values_obj, &n, &view, &copy);
    if (values == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (values[i] >= EXACT_IN_DOUBLE || values[i] <= -EXACT_IN_DOUBLE) {
            release(&view, copy);
            PyErr_SetString(PyExc_OverflowError, "a value is past 2**53");
            return NULL;
        }
        double v = (double)values[i];
        count += strict ? v < limit : v <= limit;
    }
    release(&view, copy);
    return PyLong_FromSsize_t(count);
}

/* lower_median(values, step) -> the lower median (the ceil(n/2)-th smallest) of values[::step]. */
static PyObject *lower_median(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *values_obj, *median = NULL;
    Py_ssize_t step, n = 0, m = 0;
    if (!PyArg_ParseTuple(args, "On:lower_median", &values_obj, &step)) return NULL;
    Py_buffer view = {0};
    int64_t *copy = NULL, *sample = NULL;
    PyObject *fast = NULL;
    if (PyObject_CheckBuffer(values_obj)) {  /* an int64 buffer: read as it lies */
        const int64_t *values = int64s_or_buffer(values_obj, &n, &view, &copy);
        if (values == NULL) return NULL;
        sample = n > 0 && step > 0 ? PyMem_Malloc((size_t)((n - 1) / step + 1) * sizeof(int64_t)) : NULL;
        for (Py_ssize_t i = 0; sample != NULL && i < n; i += step) sample[m++] = values[i];
    } else {  /* a sequence: only the sampled items are read */
        fast = PySequence_Fast(values_obj, "values must be a sequence of ints");
        if (fast == NULL) return NULL;
        n = PySequence_Fast_GET_SIZE(fast);
        PyObject **items = PySequence_Fast_ITEMS(fast);
        sample = n > 0 && step > 0 ? PyMem_Malloc((size_t)((n - 1) / step + 1) * sizeof(int64_t)) : NULL;
        for (Py_ssize_t i = 0; sample != NULL && i < n; i += step) {
            long long v = int64_of(items[i]);
            if (v == -1 && PyErr_Occurred()) goto done;
            sample[m++] = (int64_t)v;
        }
    }
    if (sample == NULL) {
        if (n > 0 && step > 0) PyErr_NoMemory();
        else PyErr_SetString(PyExc_ValueError, "no values, or a step under 1");
        goto done;
    }
    /* the (m - 1) / 2-th smallest, as sorting would put it: a quickselect (Hoare's partition) */
    Py_ssize_t want = (m - 1) / 2, lo = 0, hi = m - 1;
    while (lo < hi) {
        int64_t pivot = sample[lo + (hi - lo) / 2];
        Py_ssize_t i = lo, j = hi;
        while (i <= j) {
            while (sample[i] < pivot) i++;
            while (sample[j] > pivot) j--;
            if (i <= j) {
                int64_t swap = sample[i];
                sample[i++] = sample[j];
                sample[j--] = swap;
            }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else break;  /* between j and i: equal to the pivot, in place */
    }
    median = PyLong_FromLongLong((long long)sample[want]);
done:
    PyMem_Free(sample);
    Py_XDECREF(fast);
    release(&view, copy);
    return median;
}

/* -- Rows of a flush's windows (analysis/intervals/window_columns.py, the figures of many windows).
 *
 *   rows(bounds, columns) -> [per window: a tuple of its rows, each a tuple of one value per column]
 *
 * ``bounds``: int64 buffer of n_windows + 1 row indices (window w's rows are bounds[w]..bounds[w+1]);
 * ``columns``: a tuple of columns, each a list (its items as they are) or a buffer of float64 (format
 * 'd': Python floats) or int64 ('q' or 'l': Python ints), at least bounds[-1] long. The values
 * ``tolist()`` gives, cut as window_columns._cut cuts ``list(zip(*columns))``: no list per column, no
 * zip, no slice per window. Anything else raises TypeError or ValueError (the caller's bug). */
typedef struct {
    PyObject *list;
    Py_buffer view;
    int kind; /* 0 list, 1 float64, 2 int64 */
} RowColumn;

static PyObject *rows(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *bounds_obj, *columns_obj;
    if (!PyArg_ParseTuple(args, "OO!:rows", &bounds_obj, &PyTuple_Type, &columns_obj)) return NULL;
    Py_buffer bounds;
    if (PyObject_GetBuffer(bounds_obj, &bounds, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    Py_ssize_t k = PyTuple_GET_SIZE(columns_obj), ready = 0;
    RowColumn *cols = PyMem_Calloc((size_t)(k > 0 ? k : 1), sizeof(RowColumn));
    PyObject *out = NULL;
    if (cols == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (bounds.itemsize != 8 || bounds.format == NULL || !(strcmp(bounds.format, "q") == 0 || strcmp(bounds.format, "l") == 0)
        || bounds.len < 8) {
        PyErr_SetString(PyExc_TypeError, "bounds must be int64s, at least one");
        goto done;
    }
    const int64_t *b = (const int64_t *)bounds.buf;
    Py_ssize_t n_windows = bounds.len / 8 - 1;
    int64_t n_rows = b[n_windows];
    for (Py_ssize_t w = 0; w < n_windows; w++) {
        if (b[w] < 0 || b[w] > b[w + 1]) {
            PyErr_SetString(PyExc_ValueError, "bounds must ascend from 0");
            goto done;
        }
    }
    for (Py_ssize_t c = 0; c < k; c++, ready++) {
        PyObject *column = PyTuple_GET_ITEM(columns_obj, c);
        if (PyList_Check(column)) {
            cols[c].list = column;
            if (PyList_GET_SIZE(column) < n_rows) {
                PyErr_SetString(PyExc_ValueError, "a column is shorter than the rows");
                goto done;
            }
            continue;
        }
        if (PyObject_GetBuffer(column, &cols[c].view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto done;
        const char *format = cols[c].view.format;
        if (cols[c].view.itemsize == 8 && format != NULL && strcmp(format, "d") == 0) cols[c].kind = 1;
        else if (cols[c].view.itemsize == 8 && format != NULL && (strcmp(format, "q") == 0 || strcmp(format, "l") == 0))
            cols[c].kind = 2;
        else {
            PyBuffer_Release(&cols[c].view);
            PyErr_SetString(PyExc_TypeError, "a column must be a list, float64s or int64s");
            goto done;
        }
        if (cols[c].view.len / 8 < n_rows) {
            ready++;
            PyErr_SetString(PyExc_ValueError, "a column is shorter than the rows");
            goto done;
        }
    }
    out = PyList_New(n_windows);
    if (out == NULL) goto done;
    for (Py_ssize_t w = 0; w < n_windows; w++) {
        PyObject *window = PyTuple_New((Py_ssize_t)(b[w + 1] - b[w]));
        if (window == NULL) goto fail;
        PyList_SET_ITEM(out, w, window);
        for (int64_t r = b[w]; r < b[w + 1]; r++) {
            PyObject *row = PyTuple_New(k);
            if (row == NULL) goto fail;
            PyTuple_SET_ITEM(window, (Py_ssize_t)(r - b[w]), row);
            for (Py_ssize_t c = 0; c < k; c++) {
                PyObject *value;
                if (cols[c].kind == 0) {
                    value = PyList_GET_ITEM(cols[c].list, (Py_ssize_t)r);
                    Py_INCREF(value);
                } else if (cols[c].kind == 1) {
                    value = PyFloat_FromDouble(((const double *)cols[c].view.buf)[r]);
                } else {
                    value = PyLong_FromLongLong((long long)((const int64_t *)cols[c].view.buf)[r]);
                }
                if (value == NULL) goto fail;
                PyTuple_SET_ITEM(row, c, value);
            }
        }
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    for (Py_ssize_t c = 0; c < ready && cols != NULL; c++) {
        if (cols[c].kind != 0) PyBuffer_Release(&cols[c].view);
    }
    PyMem_Free(cols);
    PyBuffer_Release(&bounds);
    return out;
}

static PyMethodDef METHODS[] = {
    {"count_within", count_within, METH_VARARGS,
     "count_within(values, limit, strict) -> how many ints are at most limit (under it where strict)"},
    {"lower_median", lower_median, METH_VARARGS,
     "lower_median(values, step) -> the lower median of values[::step]"},
    {"figures", figures, METH_VARARGS,
     "figures(starts, durs, keys, key_cats, is_kernel, devices, n_devices, streams, n_streams, cat_flags, ws, we, "
     "gap_count) -> (kept, counts, totals, kernel_lengths, per_device, any_starts, any_ends)"},
    {"rows", rows, METH_VARARGS,
     "rows(bounds, columns) -> per window, a tuple of its rows (one value per column)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_figures",
                                    "The plain-Python analysis of a trace's events in one C call.", -1, METHODS,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__figures(void) { return PyModule_Create(&MODULE); }
