/* A bytes object written into as it grows, for the run's files' C parts (rundoc/_indent.c,
 * report/_csv_rows.c): opened at a first capacity, grown by doubling (or to what is asked, if
 * more), and closed to its written length. Include after Python.h and string.h. */
#ifndef PYTEST_GPUUTIL_OUT_BYTES_H
#define PYTEST_GPUUTIL_OUT_BYTES_H

typedef struct {
    PyObject *bytes;
    char *start;
    Py_ssize_t len;
    Py_ssize_t cap;
} Out;

/* 0, or -1 with an exception set */
static inline int out_open(Out *out, Py_ssize_t cap) {
    out->len = 0;
    out->cap = cap;
    out->bytes = PyBytes_FromStringAndSize(NULL, cap);
    if (out->bytes == NULL) return -1;
    out->start = PyBytes_AS_STRING(out->bytes);
    return 0;
}

/* room for ``more`` bytes after those written: 0, or -1 with an exception set */
static inline int out_room(Out *out, Py_ssize_t more) {
    if (out->len + more <= out->cap) return 0;
    Py_ssize_t cap = out->cap * 2;
    if (cap < out->len + more) cap = out->len + more;
    if (_PyBytes_Resize(&out->bytes, cap) < 0) return -1;
    out->start = PyBytes_AS_STRING(out->bytes);
    out->cap = cap;
    return 0;
}

static inline int out_put(Out *out, const char *text, Py_ssize_t n) {
    if (out_room(out, n) < 0) return -1;
    memcpy(out->start + out->len, text, (size_t)n);
    out->len += n;
    return 0;
}

/* the bytes written (the object handed over), or NULL with an exception set */
static inline PyObject *out_close(Out *out) {
    if (_PyBytes_Resize(&out->bytes, out->len) < 0) return NULL;
    return out->bytes;
}

#endif
