/* gpu_util.json's tests array indented in C (pytest_gpuutil/rundoc/document.py's json_bytes).
 *
 * The run's spool encodes each record's JSON once (msgspec, no whitespace); gpu_util.json puts
 * those bytes in as they are and was then formatted whole by msgspec.json.format(indent=1), which
 * parses every value (~14 instructions a byte, as much as encoding the records). Here one call
 * writes the tests array as that format writes it, from the records' compact JSON:
 *
 *   array(items, depth) -> bytes
 *
 * ``items``: a sequence of objects with the buffer protocol (bytes, msgspec.Raw), each one JSON
 * value; ``depth``: the array's indentation (spaces before its closing bracket; an item's lines get
 * one more, one space a level). The rules are msgspec's json_format at indent 1: whitespace outside
 * strings dropped; an empty object or array as "{}" / "[]"; after an opening bracket, a comma, and
 * before a closing bracket of a non-empty one, a newline and the level's spaces; ": " after a key;
 * strings, numbers and literals copied as they are. An item that does not end balanced (an open
 * string or bracket, one closed too many) raises ValueError, and the caller falls back to msgspec
 * (which names what is wrong).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "_out_bytes.h"

enum { SPACES = 32 };
static const char SPACE_RUN[SPACES + 1] = "                                ";

/* a newline and ``level`` spaces, with room made for ``more`` bytes after them (and SPACES of slack) */
static int newline(Out *out, Py_ssize_t level, Py_ssize_t more) {
    if (out_room(out, level + 1 + SPACES + more) < 0) return -1;
    char *p = out->start + out->len;
    *p++ = '\n';
    memset(p, ' ', (size_t)level);
    out->len += level + 1;
    return 0;
}

static int is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* the bytes that end a number or a literal: structure, a string's start, whitespace */
static const unsigned char ENDS_PLAIN[256] = {
    ['{'] = 1, ['['] = 1, ['}'] = 1, [']'] = 1, [','] = 1, [':'] = 1, ['"'] = 1,
    [' '] = 1, ['\t'] = 1, ['\n'] = 1, ['\r'] = 1,
};

#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define WORDS 1
#include <stdint.h>
/* the bytes of a word that are zero, as their top bits (the lowest set bit marks the first exactly) */
#define ZERO_BYTES(v) (((v) - 0x0101010101010101ULL) & ~(v) & 0x8080808080808080ULL)
#else
#define WORDS 0
#endif

/* value()'s newline at ``*o``: a newline and ``indent`` spaces, room first made (and ``*o``,
 * ``*limit`` moved with the buffer) for them and twice the ``left`` input bytes still to come, as
 * value() keeps it; 0, or -1 with an exception set */
static inline int break_line(Out *out, char **o, char **limit, Py_ssize_t indent, Py_ssize_t left) {
    if (*o + 1 + indent + SPACES + 2 * left + 2 > *limit) {
        out->len = *o - out->start;
        if (out_room(out, 1 + indent + SPACES + 2 * left + 2) < 0) return -1;
        *o = out->start + out->len;
        *limit = out->start + out->cap;
    }
    char *w = *o;
    *w++ = '\n';
    if (indent <= SPACES) memcpy(w, SPACE_RUN, SPACES);
    else memset(w, ' ', (size_t)indent);
    *o = w + indent;
    return 0;
}

/* one JSON value, its first line already placed (``level``: its indentation). Each input byte gives
 * at most two output bytes, apart from the newlines and their spaces: room for twice the input
 * left (and SPACES more, which a string's word copy and a newline's spaces may write past their end)
 * is made at the start and after each newline, so only the newlines check for room. */
static int value(Out *out, const unsigned char *in, Py_ssize_t n, Py_ssize_t level) {
    Py_ssize_t depth = 0;
    const unsigned char *p = in, *end = in + n;
    if (out_room(out, 2 * n + 2 + SPACES) < 0) return -1;
    char *o = out->start + out->len;
    char *limit = out->start + out->cap;
    const char *first = o;
    while (p < end) {
        unsigned char c = *p;
        if (c == '"') { /* a string, as it is: to the first quote not escaped */
            *o++ = '"';
            p++;
            for (;;) {
#if WORDS
                while (end - p >= 8) { /* eight bytes at a time while none is a quote or a backslash */
                    uint64_t word;
                    memcpy(&word, p, 8);
                    memcpy(o, &word, 8);
                    uint64_t found = ZERO_BYTES(word ^ 0x2222222222222222ULL) | ZERO_BYTES(word ^ 0x5c5c5c5c5c5c5c5cULL);
                    if (found) {
                        int skip = __builtin_ctzll(found) >> 3;
                        p += skip;
                        o += skip;
                        break;
                    }
                    p += 8;
                    o += 8;
                }
#endif
                if (p >= end) goto unbalanced;
                unsigned char s = *p++;
                *o++ = (char)s;
                if (s == '"') break;
                if (s == '\\') {
                    if (p >= end) goto unbalanced;
                    *o++ = (char)*p++;
                }
            }
            continue;
        }
        p++;
        switch (c) {
        case '{':
        case '[': {
            unsigned char close = (c == '{') ? '}' : ']';
            const unsigned char *q = p;
            while (q < end && is_space(*q)) q++;
            *o++ = (char)c;
            if (q < end && *q == close) {
                *o++ = (char)close;
                p = q + 1;
                break;
            }
            depth++;
            goto newline;
        }
        case '}':
        case ']':
            if (depth == 0) goto unbalanced;
            depth--;
            if (break_line(out, &o, &limit, level + depth, end - p) < 0) return -1;
            *o++ = (char)c;
            break;
        case ',':
            *o++ = ',';
            goto newline;
        case ':':
            *o++ = ':';
            *o++ = ' ';
            break;
        case ' ':
        case '\t':
        case '\n':
        case '\r':
            break;
        default: /* a number or a literal, as it is */
            *o++ = (char)c;
            while (p < end && !ENDS_PLAIN[*p]) *o++ = (char)*p++;
        }
        continue;
    newline:
        if (break_line(out, &o, &limit, level + depth, end - p) < 0) return -1;
    }
    out->len = o - out->start;
    if (depth == 0 && o > first) return 0; /* (nothing but whitespace: no value) */
unbalanced:
    out->len = o - out->start;
    PyErr_SetString(PyExc_ValueError, "not one balanced JSON value");
    return -1;
}

static PyObject *array(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *items;
    Py_ssize_t depth;
    if (!PyArg_ParseTuple(args, "On", &items, &depth)) return NULL;
    if (depth < 0) {
        PyErr_SetString(PyExc_ValueError, "depth below zero");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(items, "items: expected a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject **values = PySequence_Fast_ITEMS(seq);
    Out out = {NULL, NULL, 0, 0};
    if (out_open(&out, 256) < 0) goto fail;
    out.start[out.len++] = '[';
    for (Py_ssize_t k = 0; k < count; k++) {
        Py_buffer view;
        if (PyObject_GetBuffer(values[k], &view, PyBUF_SIMPLE) < 0) goto fail;
        int bad = (k > 0 && out_room(&out, 1) < 0);
        if (!bad && k > 0) out.start[out.len++] = ',';
        bad = bad || newline(&out, depth + 1, 0) < 0 ||
              value(&out, (const unsigned char *)view.buf, view.len, depth + 1) < 0;
        PyBuffer_Release(&view);
        if (bad) goto fail;
    }
    if (count > 0 && newline(&out, depth, 0) < 0) goto fail;
    if (out_room(&out, 1) < 0) goto fail;
    out.start[out.len++] = ']';
    Py_DECREF(seq);
    return out_close(&out);
fail:
    Py_DECREF(seq);
    Py_XDECREF(out.bytes);
    return NULL;
}

static PyMethodDef METHODS[] = {
    {"array", array, METH_VARARGS, "array(items, depth) -> bytes: JSON values as one array, indented as msgspec.json.format(indent=1) writes it at that depth."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_indent", "gpu_util.json's tests array indented in C.", -1,
                                    METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__indent(void) { return PyModule_Create(&MODULE); }
