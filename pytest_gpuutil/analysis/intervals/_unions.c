/* Unions of time intervals in C, for the plain-Python analysis of a trace (analysis/summary.py).
 *
 * A trace of tens of thousands of GPU events is analysed without numpy (importing it costs more
 * than it saves there); its unions (the busy blocks, and the busy time of each category, stream,
 * matmul/conv and communication) were each a pass of C-level iterators over the events, six or
 * more passes in all. These two functions give the same integers in one pass each:
 *
 *   blocks(starts, ends) -> (block_starts, block_ends)
 *   unions(starts, ends, codes, maps) -> (block_starts, block_ends, per map (code -> group or -1),
 *       per group: the union length of the intervals whose code maps to it)
 *
 * ``starts``/``ends``: sequences of ints (nanoseconds) sorted by start; ``codes``: a sequence of
 * ints, each an index into every map. A block ends where the next start is past every end so far (touching
 * intervals merge), as grouping.plain_blocks and numpy's maximum.accumulate have it. Anything
 * else (a value that is not an int, out of int64, a code out of range) raises, and the caller
 * falls back to the Python path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

#include "_int64s.h"

static int same_length(Py_ssize_t a, Py_ssize_t b) {
    if (a == b) return 1;
    PyErr_SetString(PyExc_ValueError, "the columns differ in length");
    return 0;
}

/* The union of n intervals sorted by start, in place: block k's start and end go to starts[k]
 * and ends[k] (k <= i, so nothing unread is overwritten); the number of blocks. */
static Py_ssize_t merge_blocks(int64_t *starts, int64_t *ends, Py_ssize_t n) {
    Py_ssize_t k = 0;
    if (n == 0) return 0;
    int64_t reach = ends[0];
    for (Py_ssize_t i = 1; i < n; i++) {
        if (starts[i] > reach) {
            ends[k++] = reach;
            starts[k] = starts[i];
            reach = ends[i];
        } else if (ends[i] > reach) {
            reach = ends[i];
        }
    }
    ends[k++] = reach;
    return k;
}

static PyObject *blocks(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *starts_obj, *ends_obj;
    if (!PyArg_ParseTuple(args, "OO:blocks", &starts_obj, &ends_obj)) return NULL;
    Py_ssize_t n = 0, m = 0;
    int64_t *starts = int64s(starts_obj, &n, "starts must be a sequence of ints");
    if (starts == NULL) return NULL;
    int64_t *ends = int64s(ends_obj, &m, "ends must be a sequence of ints");
    if (ends == NULL || !same_length(n, m)) {
        PyMem_Free(starts);
        PyMem_Free(ends);
        return NULL;
    }
    Py_ssize_t k = merge_blocks(starts, ends, n);
    PyObject *block_starts = list_of(starts, k), *block_ends = block_starts ? list_of(ends, k) : NULL;
    PyMem_Free(starts);
    PyMem_Free(ends);
    if (block_ends == NULL) {
        Py_XDECREF(block_starts);
        return NULL;
    }
    return Py_BuildValue("(NN)", block_starts, block_ends);
}

/* Per group: the union length of the intervals whose code maps to it (groups[code] in 0..n_groups,
 * or -1: not counted), in one pass over intervals sorted by start. */
static int group_unions(const int64_t *starts, const int64_t *ends, const int64_t *codes, Py_ssize_t n,
                        const int64_t *groups, Py_ssize_t n_codes, Py_ssize_t n_groups, int64_t *total) {
    size_t size = (size_t)(n_groups > 0 ? n_groups : 1);
    int64_t *open = PyMem_Malloc(size * sizeof(int64_t)), *reach = PyMem_Malloc(size * sizeof(int64_t));
    /* seen[g]: group g has an open block, from open[g] to reach[g] (any int64 is a time, so no
     * value of those can say "none yet") */
    char *seen = PyMem_Calloc(size, 1);
    if (open == NULL || reach == NULL || seen == NULL) {
        PyMem_Free(open);
        PyMem_Free(reach);
        PyMem_Free(seen);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t g = 0; g < n_groups; g++) total[g] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t code = codes[i];
        if (code < 0 || code >= n_codes) {
            PyMem_Free(open);
            PyMem_Free(reach);
            PyMem_Free(seen);
            PyErr_SetString(PyExc_ValueError, "a code is out of range");
            return -1;
        }
        int64_t g = groups[code];
        if (g < 0) continue;
        if (!seen[g]) {
            seen[g] = 1;
            open[g] = starts[i];
            reach[g] = ends[i];
        } else if (starts[i] > reach[g]) {
            total[g] += reach[g] - open[g];
            open[g] = starts[i];
            reach[g] = ends[i];
        } else if (ends[i] > reach[g]) {
            reach[g] = ends[i];
        }
    }
    for (Py_ssize_t g = 0; g < n_groups; g++) {
        if (seen[g]) total[g] += reach[g] - open[g];
    }
    PyMem_Free(open);
    PyMem_Free(reach);
    PyMem_Free(seen);
    return 0;
}

/* unions(starts, ends, codes, maps) -> (block_starts, block_ends, one list per map): the blocks of
 * all the intervals, and for each group of each map the union
 * length of the intervals whose code the map sends to it. A map is a sequence of ints, one per
 * code: the code's group (0, 1, ...), or -1 where the code is not counted. The columns are read
 * once however many maps there are (the categories, matmul/conv and communication of one device
 * are three maps of one code column). */
static PyObject *unions(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *starts_obj, *ends_obj, *codes_obj, *maps_obj;
    if (!PyArg_ParseTuple(args, "OOOO:unions", &starts_obj, &ends_obj, &codes_obj, &maps_obj)) return NULL;
    Py_ssize_t n = 0, m = 0, c = 0;
    int64_t *starts = NULL, *ends = NULL, *codes = NULL;
    PyObject *maps = NULL, *result = NULL;
    starts = int64s(starts_obj, &n, "starts must be a sequence of ints");
    if (starts == NULL) goto done;
    ends = int64s(ends_obj, &m, "ends must be a sequence of ints");
    if (ends == NULL || !same_length(n, m)) goto done;
    codes = int64s(codes_obj, &c, "codes must be a sequence of ints");
    if (codes == NULL || !same_length(n, c)) goto done;
    maps = PySequence_Fast(maps_obj, "maps must be a sequence of sequences of ints");
    if (maps == NULL) goto done;
    Py_ssize_t n_maps = PySequence_Fast_GET_SIZE(maps);
    result = PyList_New(n_maps);
    if (result == NULL) goto done;
    for (Py_ssize_t k = 0; k < n_maps; k++) {
        Py_ssize_t n_codes = 0;
        int64_t *groups = int64s(PySequence_Fast_GET_ITEM(maps, k), &n_codes, "a map must be a sequence of ints");
        if (groups == NULL) goto fail;
        Py_ssize_t n_groups = 0;
        for (Py_ssize_t j = 0; j < n_codes; j++) {
            if (groups[j] >= n_groups) n_groups = (Py_ssize_t)groups[j] + 1;
        }
        int64_t *total = PyMem_Malloc((size_t)(n_groups > 0 ? n_groups : 1) * sizeof(int64_t));
        if (total == NULL) {
            PyMem_Free(groups);
            PyErr_NoMemory();
            goto fail;
        }
        int status = group_unions(starts, ends, codes, n, groups, n_codes, n_groups, total);
        PyMem_Free(groups);
        PyObject *found = status < 0 ? NULL : list_of(total, n_groups);
        PyMem_Free(total);
        if (found == NULL) goto fail;
        PyList_SET_ITEM(result, k, found);
    }
    /* the blocks last: they overwrite the columns */
    Py_ssize_t n_blocks = merge_blocks(starts, ends, n);
    PyObject *block_starts = list_of(starts, n_blocks), *block_ends = block_starts ? list_of(ends, n_blocks) : NULL;
    if (block_ends == NULL) {
        Py_XDECREF(block_starts);
        goto fail;
    }
    PyObject *found = Py_BuildValue("(NNN)", block_starts, block_ends, result);
    result = found;  /* the tuple owns the lists now (NULL: Py_BuildValue released them) */
    goto done;
fail:
    Py_CLEAR(result);
done:
    Py_XDECREF(maps);
    PyMem_Free(starts);
    PyMem_Free(ends);
    PyMem_Free(codes);
    return result;
}

static PyMethodDef METHODS[] = {
    {"blocks", blocks, METH_VARARGS,
     "blocks(starts, ends) -> (block_starts, block_ends): the union of intervals sorted by start"},
    {"unions", unions, METH_VARARGS,
     "unions(starts, ends, codes, maps) -> (block_starts, block_ends, per map, per group: the union length "
     "of its codes' intervals)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_unions", "Unions of time intervals in C.", -1,
                                    METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__unions(void) { return PyModule_Create(&MODULE); }
