/* _load_tokens.h: what both C files of packlm.tokenizer._load share: a hash table of tokens
   (byte strings) -> id, and the functions _load_check.c gives the module. */
#ifndef PACKLM_LOAD_TOKENS_H
#define PACKLM_LOAD_TOKENS_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- a hash table of tokens (byte strings) -> id, open addressing ---------------------- */

typedef struct {
    const char **ptr;
    Py_ssize_t *len;
    int32_t *id, *slot; /* slot: index into ptr/len/id, -1 empty */
    uint64_t mask;
    Py_ssize_t n;
} Tokens;

static inline uint64_t hash_bytes(const char *p, Py_ssize_t n) { /* FNV-1a */
    uint64_t h = 1469598103934665603ULL;
    for (Py_ssize_t i = 0; i < n; i++) h = (h ^ (uint8_t)p[i]) * 1099511628211ULL;
    return h;
}

static inline int tokens_init(Tokens *t, Py_ssize_t cap) {
    uint64_t size = 16;
    while (size < 2 * (uint64_t)cap + 16) size *= 2;
    t->ptr = malloc(cap * sizeof(char *) + 1);
    t->len = malloc(cap * sizeof(Py_ssize_t) + 1);
    t->id = malloc(cap * sizeof(int32_t) + 1);
    t->slot = malloc(size * sizeof(int32_t));
    if (!t->ptr || !t->len || !t->id || !t->slot) return -1;
    memset(t->slot, 0xff, size * sizeof(int32_t));
    t->mask = size - 1, t->n = 0;
    return 0;
}

static inline void tokens_free(Tokens *t) { free(t->ptr), free(t->len), free(t->id), free(t->slot); }

/* The id of the token p[:n], or -1; with `add` >= 0, an absent token is added with that id. */
static inline int32_t tokens_find(Tokens *t, const char *p, Py_ssize_t n, int32_t add) {
    uint64_t h = hash_bytes(p, n) & t->mask;
    while (t->slot[h] >= 0) {
        int32_t k = t->slot[h];
        if (t->len[k] == n && memcmp(t->ptr[k], p, n) == 0) return t->id[k];
        h = (h + 1) & t->mask;
    }
    if (add >= 0) {
        t->slot[h] = (int32_t)t->n;
        t->ptr[t->n] = p, t->len[t->n] = n, t->id[t->n] = add, t->n++;
    }
    return -1;
}

PyObject *rank_dict(PyObject *table, const int32_t *byte_id, const int32_t *rows, Py_ssize_t count);
PyObject *load_tiktoken_ranks(PyObject *self, PyObject *args);
PyObject *load_serialize(PyObject *self, PyObject *args);
PyObject *load_split(PyObject *self, PyObject *args);
PyObject *load_join(PyObject *self, PyObject *args);
PyObject *load_tiktoken_file(PyObject *self, PyObject *args);

#endif
