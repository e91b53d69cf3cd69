/* Columns of Python ints as int64 arrays and back, for the C parts of the plain-Python analysis
 * (_unions.c, _figures.c: each includes this file; setup.py lists it in both extensions' depends). */
#ifndef PYTEST_GPUUTIL_INT64S_H
#define PYTEST_GPUUTIL_INT64S_H

#include <Python.h>
#include <limits.h>
#include <stdint.h>

/* One int as int64 (-1 with an exception set where it is not an int or out of range). PyLong_AsLong
 * walks the digits; PyLong_AsLongLong goes through a byte array (3x dearer for a nanosecond
 * timestamp). On platforms whose long is narrower, the long long call. */
static inline long long int64_of(PyObject *item) {
#if LONG_MAX >= INT64_MAX
    return PyLong_AsLong(item);
#else
    return PyLong_AsLongLong(item);
#endif
}

/* The items of a sequence of ints as int64 (PyMem_Malloc'ed; NULL with an exception set). */
static inline int64_t *int64s(PyObject *seq, Py_ssize_t *n, const char *what) {
    PyObject *fast = PySequence_Fast(seq, what);
    if (fast == NULL) return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(fast);
    PyObject **items = PySequence_Fast_ITEMS(fast);
    int64_t *out = PyMem_Malloc((size_t)(count > 0 ? count : 1) * sizeof(int64_t));
    if (out == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        long long v = int64_of(items[i]);
        if (v == -1 && PyErr_Occurred()) {
            PyMem_Free(out);
            Py_DECREF(fast);
            return NULL;
        }
        out[i] = (int64_t)v;
    }
    Py_DECREF(fast);
    *n = count;
    return out;
}

/* A list of the values as Python ints (NULL with an exception set). */
static inline PyObject *list_of(const int64_t *values, Py_ssize_t n) {
    PyObject *list = PyList_New(n);
    if (list == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLongLong((long long)values[i]);
        if (v == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, v);
    }
    return list;
}

#endif
