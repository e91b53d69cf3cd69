/* Parts of a measured test's record in C: its ``kernels`` compacted (gates/kernel_families.py's
 * compact_kernels), its rows of plain values as dicts (session/record_builder.py) and the spool's
 * check that a flush's records hold only dicts in their list fields (records.py's json_dicts). Each
 * answers None where its input is not what it takes, and the caller then does it in Python (the
 * same values).
 *
 * Every measured test's record keeps its call's kernels compacted: most time first, the rows that
 * make KEPT_SHARE of the time (at most KEPT_ROWS), the rest summed in one OTHERS row. In Python that
 * was ~30k instructions a test of four kernels (a list made, a sort with a key, a Python call a row
 * to round the time); here one call:
 *
 *   compact(rows, stored_name) -> tuple or None
 *
 * ``rows``: a list or tuple of (name, count, total µs) tuples, each exactly (str, int, float) with a
 * finite time; ``stored_name``: the Python function that names a kept row (it keeps its answers).
 * Each figure is the one the Python gives: the sort is stable, most time first (Python's sort with
 * reverse=True); the rows' total and the OTHERS row's sums are Python's own sum() (called here, so
 * the same floats on every Python version); the running share the same sequence of additions; a
 * kept row's time round(t, 1) as round_tenth computes it, Python's round() where that says so.
 * Any other input (a row of another shape or type, a NaN or an infinite time) answers None, and
 * the caller computes it in Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>

#define KEPT_ROWS 16
#define KEPT_SHARE 0.99
#define OTHERS "(other kernels)"

static PyObject *builtin_sum;   /* builtins.sum */
static PyObject *builtin_round; /* builtins.round */
static PyObject *others_name;   /* OTHERS */

/* round_tenth: round(value, 1), the same float (see kernel_families.round_tenth) */
static PyObject *round_tenth(PyObject *total) {
    double value = PyFloat_AS_DOUBLE(total);
    if (-1e8 < value && value < 1e8) {
        double tenths = value * 10.0;
        double nearest = round(tenths); /* float.__round__(): half away from zero, then ties to even */
        if (fabs(tenths - nearest) == 0.5) nearest = 2.0 * round(tenths / 2.0);
        if (nearest != 0.0 && fabs(tenths - nearest) < 0.4999) return PyFloat_FromDouble(nearest / 10.0);
    }
    PyObject *one = PyLong_FromLong(1);
    if (one == NULL) return NULL;
    PyObject *got = PyObject_CallFunctionObjArgs(builtin_round, total, one, NULL);
    Py_DECREF(one);
    return got;
}

/* (stored_name(name), count, round_tenth(total)) */
static PyObject *kept_row(PyObject *row, PyObject *stored_name) {
    PyObject *name = PyObject_CallOneArg(stored_name, PyTuple_GET_ITEM(row, 0));
    if (name == NULL) return NULL;
    PyObject *total = round_tenth(PyTuple_GET_ITEM(row, 2));
    if (total == NULL) {
        Py_DECREF(name);
        return NULL;
    }
    PyObject *count = PyTuple_GET_ITEM(row, 1);
    Py_INCREF(count);
    PyObject *out = PyTuple_New(3);
    if (out == NULL) {
        Py_DECREF(name);
        Py_DECREF(total);
        Py_DECREF(count);
        return NULL;
    }
    PyTuple_SET_ITEM(out, 0, name);
    PyTuple_SET_ITEM(out, 1, count);
    PyTuple_SET_ITEM(out, 2, total);
    return out;
}

/* builtins.sum over item ``index`` of rows[begin:end] */
static PyObject *sum_of(PyObject **rows, Py_ssize_t begin, Py_ssize_t end, Py_ssize_t index) {
    PyObject *items = PyList_New(end - begin);
    if (items == NULL) return NULL;
    for (Py_ssize_t i = begin; i < end; i++) {
        PyObject *item = PyTuple_GET_ITEM(rows[i], index);
        Py_INCREF(item);
        PyList_SET_ITEM(items, i - begin, item);
    }
    PyObject *got = PyObject_CallOneArg(builtin_sum, items);
    Py_DECREF(items);
    return got;
}

static PyObject *compacted(PyObject **ordered, Py_ssize_t n, PyObject *stored_name) {
    PyObject *total_obj = sum_of(ordered, 0, n, 2);
    if (total_obj == NULL) return NULL;
    double total = PyFloat_AsDouble(total_obj);
    Py_DECREF(total_obj);
    if (total == -1.0 && PyErr_Occurred()) return NULL;
    double enough = total > 0 ? KEPT_SHARE * total : HUGE_VAL;
    Py_ssize_t kept = 0;
    double covered = 0.0;
    while (kept < n && kept < KEPT_ROWS && !(covered >= enough)) {
        covered += PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(ordered[kept], 2));
        kept++;
    }
    PyObject *out = PyTuple_New(kept < n ? kept + 1 : kept);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < kept; i++) {
        PyObject *row = kept_row(ordered[i], stored_name);
        if (row == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, row);
    }
    if (kept < n) { /* (OTHERS, sum of their counts, round(sum of their times, 1)) */
        PyObject *counts = sum_of(ordered, kept, n, 1);
        PyObject *times = counts == NULL ? NULL : sum_of(ordered, kept, n, 2);
        PyObject *one = times == NULL ? NULL : PyLong_FromLong(1);
        PyObject *rounded = one == NULL ? NULL : PyObject_CallFunctionObjArgs(builtin_round, times, one, NULL);
        Py_XDECREF(one);
        Py_XDECREF(times);
        if (rounded == NULL) {
            Py_XDECREF(counts);
            Py_DECREF(out);
            return NULL;
        }
        PyObject *row = PyTuple_Pack(3, others_name, counts, rounded);
        Py_DECREF(counts);
        Py_DECREF(rounded);
        if (row == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, kept, row);
    }
    return out;
}

static PyObject *compact(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "compact(rows, stored_name)");
        return NULL;
    }
    PyObject *rows = args[0], *stored_name = args[1];
    if (!PyList_CheckExact(rows) && !PyTuple_CheckExact(rows)) Py_RETURN_NONE;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(rows);
    PyObject **items = PySequence_Fast_ITEMS(rows);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *row = items[i];
        if (!PyTuple_CheckExact(row) || PyTuple_GET_SIZE(row) != 3 || !PyUnicode_CheckExact(PyTuple_GET_ITEM(row, 0))
            || !PyLong_CheckExact(PyTuple_GET_ITEM(row, 1)) || !PyFloat_CheckExact(PyTuple_GET_ITEM(row, 2))
            || !isfinite(PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(row, 2))))
            Py_RETURN_NONE;
    }
    if (n == 1) { /* one kernel: kept whatever its time */
        PyObject *row = kept_row(items[0], stored_name);
        if (row == NULL) return NULL;
        PyObject *out = PyTuple_New(1);
        if (out == NULL) {
            Py_DECREF(row);
            return NULL;
        }
        PyTuple_SET_ITEM(out, 0, row);
        return out;
    }
    PyObject *small[32];
    PyObject **ordered = n <= 32 ? small : PyMem_New(PyObject *, n);
    if (ordered == NULL) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) { /* a stable insertion sort, most time first */
        PyObject *row = items[i];
        double t = PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(row, 2));
        Py_ssize_t j = i;
        while (j > 0 && PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(ordered[j - 1], 2)) < t) {
            ordered[j] = ordered[j - 1];
            j--;
        }
        ordered[j] = row;
    }
    PyObject *out = compacted(ordered, n, stored_name);
    if (ordered != small) PyMem_Free(ordered);
    return out;
}

/* The rows' checked shape: a list or tuple of tuples of exactly ``width`` items; 0 if not */
static int rows_of(PyObject *rows, Py_ssize_t width) {
    if (!PyList_CheckExact(rows) && !PyTuple_CheckExact(rows)) return 0;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(rows);
    PyObject **items = PySequence_Fast_ITEMS(rows);
    for (Py_ssize_t i = 0; i < n; i++)
        if (!PyTuple_CheckExact(items[i]) || PyTuple_GET_SIZE(items[i]) != width) return 0;
    return 1;
}

/* keys (a tuple of str), places (a tuple of ints, one a key: which item of a row is its value) */
static int keys_of(PyObject *keys, PyObject *places, Py_ssize_t width, Py_ssize_t *at) {
    if (!PyTuple_CheckExact(keys) || !PyTuple_CheckExact(places) || PyTuple_GET_SIZE(keys) != PyTuple_GET_SIZE(places)
        || PyTuple_GET_SIZE(keys) > 16)
        return 0;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(keys); k++) {
        if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(keys, k))) return 0;
        Py_ssize_t place = PyLong_AsSsize_t(PyTuple_GET_ITEM(places, k));
        if (place < 0 || place >= width) {
            PyErr_Clear();
            return 0;
        }
        at[k] = place;
    }
    return 1;
}

static PyObject *row_dict(PyObject *row, PyObject *keys, Py_ssize_t *at) {
    Py_ssize_t n = PyTuple_GET_SIZE(keys);
    PyObject *out = PyDict_New();
    if (out == NULL) return NULL;
    for (Py_ssize_t k = 0; k < n; k++) {
        if (PyDict_SetItem(out, PyTuple_GET_ITEM(keys, k), PyTuple_GET_ITEM(row, at[k])) < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

#define ROWS_ERROR (-1)
#define ROWS_NOT_OURS (-2)

/* dicts' and keyed's arguments (keys, places, width, rows): the rows' count, with each key's place in
 * ``at``; ROWS_ERROR with an exception set; ROWS_NOT_OURS where the input is not what they take (a
 * width under ``min_width``, keys or rows of another shape: the caller answers None) */
static Py_ssize_t rows_args(PyObject *const *args, Py_ssize_t nargs, const char *usage, Py_ssize_t min_width,
                            Py_ssize_t *at) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, usage);
        return ROWS_ERROR;
    }
    Py_ssize_t width = PyLong_AsSsize_t(args[2]);
    if (width == -1 && PyErr_Occurred()) return ROWS_ERROR;
    if (width < min_width || !keys_of(args[0], args[1], width, at) || !rows_of(args[3], width)) return ROWS_NOT_OURS;
    return PySequence_Fast_GET_SIZE(args[3]);
}

/* dicts(keys, places, width, rows) -> tuple of dicts or None: for each row (a tuple of exactly
 * ``width`` items), {keys[k]: row[places[k]]}, as a comprehension that unpacks the row writes it */
static PyObject *dicts(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t at[16];
    Py_ssize_t n = rows_args(args, nargs, "dicts(keys, places, width, rows)", PY_SSIZE_T_MIN, at);
    if (n == ROWS_ERROR) return NULL;
    if (n == ROWS_NOT_OURS) Py_RETURN_NONE;
    PyObject **rows = PySequence_Fast_ITEMS(args[3]);
    PyObject *out = PyTuple_New(n);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *one = row_dict(rows[i], args[0], at);
        if (one == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, one);
    }
    return out;
}

/* keyed(keys, places, width, rows) -> dict or None: {row[0]: {keys[k]: row[places[k]]}} in the rows'
 * order (a later row of the same name replaces the value, in the first one's place: a dict comprehension) */
static PyObject *keyed(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t at[16];
    Py_ssize_t n = rows_args(args, nargs, "keyed(keys, places, width, rows)", 1, at);
    if (n == ROWS_ERROR) return NULL;
    if (n == ROWS_NOT_OURS) Py_RETURN_NONE;
    PyObject **rows = PySequence_Fast_ITEMS(args[3]);
    PyObject *out = PyDict_New();
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *one = row_dict(rows[i], args[0], at);
        if (one == NULL || PyDict_SetItem(out, PyTuple_GET_ITEM(rows[i], 0), one) < 0) {
            Py_XDECREF(one);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(one);
    }
    return out;
}

/* dict_items_only(records, record_type, names) -> True, False or None: records.py's _dict_items_only
 * (each record exactly of ``record_type``, every item of each field named exactly a dict), where each
 * field is a tuple or a list; anything else: None (the caller asks the Python) */
static PyObject *dict_items_only(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "dict_items_only(records, record_type, names)");
        return NULL;
    }
    PyObject *records = args[0], *record_type = args[1], *names = args[2];
    if ((!PyList_CheckExact(records) && !PyTuple_CheckExact(records)) || !PyTuple_CheckExact(names)) Py_RETURN_NONE;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(records);
    PyObject **items = PySequence_Fast_ITEMS(records);
    for (Py_ssize_t i = 0; i < n; i++)
        if ((PyObject *)Py_TYPE(items[i]) != record_type) Py_RETURN_FALSE;
    int plain = 1;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(names) && plain == 1; k++) {
        for (Py_ssize_t i = 0; i < n && plain == 1; i++) {
            PyObject *field = PyObject_GetAttr(items[i], PyTuple_GET_ITEM(names, k));
            if (field == NULL) return NULL;
            if (PyTuple_CheckExact(field) || PyList_CheckExact(field)) {
                Py_ssize_t m = PySequence_Fast_GET_SIZE(field);
                PyObject **its = PySequence_Fast_ITEMS(field);
                for (Py_ssize_t j = 0; j < m; j++)
                    if (!PyDict_CheckExact(its[j])) {
                        plain = 0;
                        break;
                    }
            } else {
                plain = -1;
            }
            Py_DECREF(field);
        }
    }
    if (plain < 0) Py_RETURN_NONE;
    return PyBool_FromLong(plain);
}

static PyMethodDef methods[] = {
    {"compact", (PyCFunction)(void (*)(void))compact, METH_FASTCALL, "A record's kernels, compacted (or None)."},
    {"dicts", (PyCFunction)(void (*)(void))dicts, METH_FASTCALL, "Rows as dicts of the keys given (or None)."},
    {"keyed", (PyCFunction)(void (*)(void))keyed, METH_FASTCALL, "Rows as dicts, keyed by their first item (or None)."},
    {"dict_items_only", (PyCFunction)(void (*)(void))dict_items_only, METH_FASTCALL,
     "Whether records of one type hold only dicts in the fields named (or None)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_record_parts", NULL, -1, methods};

PyMODINIT_FUNC PyInit__record_parts(void) {
    PyObject *builtins = PyImport_ImportModule("builtins");
    if (builtins == NULL) return NULL;
    builtin_sum = PyObject_GetAttrString(builtins, "sum");
    builtin_round = PyObject_GetAttrString(builtins, "round");
    Py_DECREF(builtins);
    others_name = PyUnicode_FromString(OTHERS);
    if (builtin_sum == NULL || builtin_round == NULL || others_name == NULL) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "KEPT_ROWS", KEPT_ROWS) < 0
        || PyModule_AddObject(m, "KEPT_SHARE", PyFloat_FromDouble(KEPT_SHARE)) < 0
        || PyModule_AddStringConstant(m, "OTHERS", OTHERS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
