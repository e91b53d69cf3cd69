/* gpu_util.csv's rows in C (pytest_gpuutil/report/files.py's records_csv).
 *
 * The run's end writes a row for every test; in Python, a column at a time, that was ~40k
 * instructions a test (the values looked up, each column's types, one % a row). Here one call:
 *
 *   rows(fields, names, texts) -> bytes or None
 *
 * ``fields``: a list of dicts (each record's fields); ``names``: the columns, in order; ``texts``:
 * one entry a column, None (the value is the record's field of that name) or a list of str (the
 * column's text, one a record: the devices, the findings' rules). Each value is written as
 * report.metric_tables.format_value writes it (None empty, a float with 6 decimals, anything else
 * str()) and quoted as csv.writer quotes a field of a row of several ('"...", its quotes doubled,
 * where it holds a comma, a quote or a newline); the fields joined by commas, each row ended by a
 * newline, as UTF-8. Where a value needs more than these rules (a subclass of float: its own
 * format; a text with a carriage return or a NUL: csv's own rules; a missing field) the answer is
 * None, and the caller writes the rows in Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "../rundoc/_out_bytes.h"

/* 1: written; 0: needs Python's rules (a carriage return or a NUL); -1: an error */
static int put_text(Out *out, PyObject *text) {
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(text, &n);
    if (s == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return -1;
        PyErr_Clear(); /* (a lone surrogate) Python's path, and its error where the file is written */
        return 0;
    }
    int quote = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == ',' || c == '"' || c == '\n') quote = 1;
        else if (c == '\r' || c == '\0') return 0;
    }
    if (!quote) return out_put(out, s, n) < 0 ? -1 : 1;
    if (out_room(out, 2 * n + 2) < 0) return -1;
    char *o = out->start + out->len;
    *o++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] == '"') *o++ = '"';
        *o++ = s[i];
    }
    *o++ = '"';
    out->len = o - out->start;
    return 1;
}

/* one value as format_value writes it, quoted; 1, 0 or -1 as put_text */
static int put_value(Out *out, PyObject *value) {
    if (value == Py_None) return 1;
    if (PyFloat_CheckExact(value)) {
        char *text = PyOS_double_to_string(PyFloat_AS_DOUBLE(value), 'f', 6, 0, NULL);
        if (text == NULL) return -1;
        int done = out_put(out, text, (Py_ssize_t)strlen(text));
        PyMem_Free(text);
        return done < 0 ? -1 : 1;
    }
    if (PyFloat_Check(value)) return 0; /* a subclass: its own __format__ */
    if (PyUnicode_CheckExact(value)) return put_text(out, value);
    if (PyLong_CheckExact(value)) {
        int overflow = 0;
        long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (!overflow) {
            if (number == -1 && PyErr_Occurred()) return -1;
            char text[32];
            int n = snprintf(text, sizeof text, "%lld", number);
            return out_put(out, text, n) < 0 ? -1 : 1;
        }
    }
    PyObject *text = PyObject_Str(value);
    if (text == NULL) return -1;
    int done = put_text(out, text);
    Py_DECREF(text);
    return done;
}

static PyObject *rows(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *fields, *names, *texts;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyList_Type, &fields, &PyTuple_Type, &names, &PyList_Type, &texts))
        return NULL;
    Py_ssize_t n_rows = PyList_GET_SIZE(fields), n_cols = PyTuple_GET_SIZE(names);
    if (PyList_GET_SIZE(texts) != n_cols) {
        PyErr_SetString(PyExc_ValueError, "texts: one entry a column");
        return NULL;
    }
    for (Py_ssize_t c = 0; c < n_cols; c++) {
        PyObject *column = PyList_GET_ITEM(texts, c);
        if (column != Py_None && (!PyList_Check(column) || PyList_GET_SIZE(column) != n_rows)) {
            PyErr_SetString(PyExc_ValueError, "texts: a column's text, one a record");
            return NULL;
        }
    }
    Out out;
    if (out_open(&out, 64 + n_rows * n_cols * 8) < 0) return NULL;
    /* where each column's field stood in the last record's dict: records made alike keep their
     * fields in one order, so the next record's entry there is looked at first (its key the very
     * name: the field's; otherwise a lookup) */
    Py_ssize_t *at = PyMem_Calloc((size_t)(n_cols > 0 ? n_cols : 1), sizeof(Py_ssize_t));
    if (at == NULL) {
        Py_DECREF(out.bytes);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t r = 0; r < n_rows; r++) {
        PyObject *record = PyList_GET_ITEM(fields, r);
        if (!PyDict_Check(record)) goto python;
        for (Py_ssize_t c = 0; c < n_cols; c++) {
            if (c > 0 && out_put(&out, ",", 1) < 0) goto fail;
            PyObject *column = PyList_GET_ITEM(texts, c);
            PyObject *value;
            if (column == Py_None) {
                PyObject *name = PyTuple_GET_ITEM(names, c), *key;
                Py_ssize_t pos = at[c];
                if (!(PyDict_Next(record, &pos, &key, &value) && key == name)) {
                    value = PyDict_GetItemWithError(record, name);
                    if (value == NULL) {
                        if (PyErr_Occurred()) goto fail;
                        goto python;
                    }
                    Py_ssize_t find = 0;  /* its place, for the next record */
                    while (PyDict_Next(record, &find, &key, NULL)) {
                        if (key == name) {
                            at[c] = find - 1;
                            break;
                        }
                    }
                }
            } else {
                value = PyList_GET_ITEM(column, r);
            }
            Py_INCREF(value);
            int done = put_value(&out, value);
            Py_DECREF(value);
            if (done < 0) goto fail;
            if (done == 0) goto python;
        }
        if (out_put(&out, "\n", 1) < 0) goto fail;
    }
    PyMem_Free(at);
    return out_close(&out);
python:
    PyMem_Free(at);
    Py_DECREF(out.bytes);
    Py_RETURN_NONE;
fail:
    PyMem_Free(at);
    Py_XDECREF(out.bytes);
    return NULL;
}

static PyMethodDef METHODS[] = {
    {"rows", rows, METH_VARARGS, "rows(fields, names, texts) -> bytes or None: gpu_util.csv's rows (see the module's source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_csv_rows", "gpu_util.csv's rows in C.", -1, METHODS,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__csv_rows(void) { return PyModule_Create(&MODULE); }
