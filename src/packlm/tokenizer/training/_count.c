/* _count.c: GPT-2's pre-tokenizer and the pre-token counts of BPE training, in C.

   count_gpt2(text, classes, counts) -> None

   Adds to the dict `counts` (pre-token -> occurrences) the pre-tokens of `text` under
   GPT-2's pattern, exactly what `regex.findall(GPT2_PATTERN, text)` gives:

       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+

   `classes` (bytes, one per code point 0..0x10FFFF) says which of \p{L} (1), \p{N} (2) and
   \s (4) the `regex` module puts each character in: counting.py builds it by running those
   classes over every code point, so this scanner and `regex` agree on every Unicode version.

   At each position the alternatives are tried in the pattern's order:
   1. an apostrophe followed by s, t, m, d, re, ve or ll (case-sensitive);
   2-4. an optional U+0020 then a maximal run of letters, of digits, or of "other"
        characters (none of the three classes), chosen by the character after the space;
   5-6. a whitespace run: to the end of the text it is one pre-token; otherwise its last
        character is left to start the next pre-token (`\s+(?!\S)`), unless the run is one
        character long (`\s+`).
   Why C: `regex.findall` was 70% of BPE training's time (bench/tokenizer.py). Distinct
   pre-tokens are counted in a hash table of spans first, so only those become str objects. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { LETTER = 1, NUMBER = 2, SPACE = 4, OTHER = 0 };

typedef struct {
    Py_ssize_t start, len, count; /* len 0: an empty slot */
    uint64_t hash;
} Span;

typedef struct {
    int kind;
    const char *data; /* the text's code units, `kind` bytes each */
    Span *slots;
    size_t mask, used;
} Table;

static uint64_t span_hash(const Table *t, Py_ssize_t start, Py_ssize_t len) {
    uint64_t h = 14695981039346656037ULL; /* FNV-1a over the code units' bytes */
    const unsigned char *p = (const unsigned char *)t->data + start * t->kind;
    for (Py_ssize_t i = 0, n = len * t->kind; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

static int table_grow(Table *t) {
    size_t cap = (t->mask + 1) * 2;
    Span *slots = calloc(cap, sizeof(Span));
    if (slots == NULL)
        return -1;
    for (size_t i = 0; i <= t->mask; i++) {
        Span *s = &t->slots[i];
        if (s->len == 0)
            continue;
        size_t j = s->hash & (cap - 1);
        while (slots[j].len != 0)
            j = (j + 1) & (cap - 1);
        slots[j] = *s;
    }
    free(t->slots);
    t->slots = slots;
    t->mask = cap - 1;
    return 0;
}

static int table_add(Table *t, Py_ssize_t start, Py_ssize_t len) {
    uint64_t h = span_hash(t, start, len);
    size_t j = h & t->mask;
    for (;; j = (j + 1) & t->mask) {
        Span *s = &t->slots[j];
        if (s->len == 0)
            break;
        if (s->hash == h && s->len == len &&
            memcmp(t->data + s->start * t->kind, t->data + start * t->kind, len * t->kind) == 0) {
            s->count++;
            return 0;
        }
    }
    t->slots[j] = (Span){start, len, 1, h};
    if (++t->used * 2 > t->mask + 1)
        return table_grow(t);
    return 0;
}

/* The end of the pre-token starting at i (i < n). */
static Py_ssize_t next_end(int kind, const void *data, Py_ssize_t i, Py_ssize_t n,
                           const unsigned char *classes) {
#define AT(k) PyUnicode_READ(kind, data, (k))
#define CLASS(k) classes[AT(k)]
    Py_UCS4 c = AT(i);
    if (c == '\'' && i + 1 < n) { /* 1. contractions */
        Py_UCS4 c1 = AT(i + 1);
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
            return i + 2;
        if (i + 2 < n) {
            Py_UCS4 c2 = AT(i + 2);
            if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
                return i + 3;
        }
    }
    Py_ssize_t j = i;
    if (c == ' ' && i + 1 < n && CLASS(i + 1) != SPACE)
        j = i + 1; /* 2-4. the optional space before a run */
    int cls = CLASS(j);
    if (cls != SPACE) { /* 2-4. a run of one class */
        Py_ssize_t k = j + 1;
        while (k < n && CLASS(k) == cls)
            k++;
        return k;
    }
    Py_ssize_t k = i + 1; /* 5-6. whitespace */
    while (k < n && CLASS(k) == SPACE)
        k++;
    return (k < n && k - i >= 2) ? k - 1 : k;
#undef CLASS
#undef AT
}

PyObject *count_gpt2(PyObject *self, PyObject *args) {
    PyObject *text, *counts;
    Py_buffer classes;
    if (!PyArg_ParseTuple(args, "Uy*O!:count_gpt2", &text, &classes, &PyDict_Type, &counts))
        return NULL;
    PyObject *result = NULL;
    Table t = {PyUnicode_KIND(text), PyUnicode_DATA(text), NULL, 1023, 0};
    if (classes.len != 0x110000) {
        PyErr_SetString(PyExc_ValueError, "count_gpt2: classes must hold 0x110000 bytes");
        goto done;
    }
    if ((t.slots = calloc(t.mask + 1, sizeof(Span))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const unsigned char *cls = classes.buf;
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    for (Py_ssize_t i = 0; i < n;) {
        Py_ssize_t end = next_end(t.kind, t.data, i, n, cls);
        if (table_add(&t, i, end - i) < 0) {
            PyErr_NoMemory();
            goto done;
        }
        i = end;
    }
    for (size_t j = 0; j <= t.mask; j++) { /* each distinct pre-token: one str, one dict update */
        Span *s = &t.slots[j];
        if (s->len == 0)
            continue;
        PyObject *key = PyUnicode_Substring(text, s->start, s->start + s->len);
        if (key == NULL)
            goto done;
        PyObject *old = PyDict_GetItemWithError(counts, key); /* borrowed */
        PyObject *value = NULL;
        if (old != NULL) {
            PyObject *add = PyLong_FromSsize_t(s->count);
            value = add ? PyNumber_Add(old, add) : NULL;
            Py_XDECREF(add);
        } else if (!PyErr_Occurred()) {
            value = PyLong_FromSsize_t(s->count);
        }
        int failed = value == NULL || PyDict_SetItem(counts, key, value) < 0;
        Py_DECREF(key);
        Py_XDECREF(value);
        if (failed)
            goto done;
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    free(t.slots);
    PyBuffer_Release(&classes);
    return result;
}
