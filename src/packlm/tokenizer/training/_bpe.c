/* _bpe.c: the BPE merge loop of packlm's trainer in C, step for step the algorithm of
   merge_loop.py (read that first; it is the oracle the tests compare against).

   learn_merges(words, counts, num_merges, progress=None) -> list[(left, right)]

   words: distinct pre-tokens (bytes), counts: their frequencies. Token ids 0..255 are the
   bytes, 256 + k is the token made by merge k. Each step merges the most frequent adjacent
   pair; ties go to the pair whose (bytes(left), bytes(right)) is lexicographically greatest.

   Data: every word is an array of token ids (merged in place, it only shrinks); a hash
   table maps a pair to its count and to the words that may contain it; a max-heap of
   (count, pair) entries is validated lazily, as in the Python version.

   Errors: every function that can fail returns 0 on success and -1 on failure (CPython's
   convention), results come back through pointer arguments. Inside the merge loop (threads
   released) a failure is out of memory and sets no exception; learn_merges raises it. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t left, right;
    int64_t count;
    int32_t *words; /* words where the pair was seen; may hold stale entries */
    int32_t n_words, cap_words;
    int32_t stamp; /* last merge step whose heap push is already scheduled */
} Pair;

typedef struct {
    int64_t count;
    int32_t pair;
} Entry;

typedef struct {
    /* tokens: bytes of token t are arena[tok_off[t] : tok_off[t] + tok_len[t]] */
    uint8_t *arena;
    int64_t arena_len, arena_cap;
    int64_t *tok_off;
    int32_t *tok_len;
    int32_t n_tokens;
    /* words: ids of word w are sym[word_start[w] : word_start[w] + word_len[w]] */
    int32_t *sym;
    int64_t *word_start;
    int32_t *word_len, *word_stamp;
    int64_t *word_count;
    int32_t n_words;
    /* pairs, and an open-addressing table of pair indices (-1 = empty) */
    Pair *pairs;
    int32_t n_pairs, cap_pairs;
    int32_t *table;
    uint64_t table_mask;
    /* lazy max-heap, and the pairs whose count rose during the current merge */
    Entry *heap;
    int64_t n_heap, cap_heap;
    int32_t *touched;
    int64_t n_touched, cap_touched;
} State;

/* Grow *buf (of *cap items of `size` bytes) to hold `need` items. */
static int grow(void **buf, int64_t *cap, int64_t need, size_t size) {
    if (need <= *cap) return 0;
    int64_t n = *cap ? *cap : 16;
    while (n < need) n *= 2;
    void *p = realloc(*buf, (size_t)n * size);
    if (!p) return -1;
    *buf = p;
    *cap = n;
    return 0;
}

/* Python's bytes order: compare the common prefix, then the shorter is smaller. */
static int token_cmp(const State *s, int32_t x, int32_t y) {
    int32_t lx = s->tok_len[x], ly = s->tok_len[y];
    int c = memcmp(s->arena + s->tok_off[x], s->arena + s->tok_off[y], lx < ly ? lx : ly);
    if (c) return c;
    return (lx > ly) - (lx < ly);
}

/* Heap order: higher count first, then the lexicographically greater pair. */
static int entry_before(const State *s, Entry x, Entry y) {
    if (x.count != y.count) return x.count > y.count;
    const Pair *p = &s->pairs[x.pair], *q = &s->pairs[y.pair];
    int c = token_cmp(s, p->left, q->left);
    if (!c) c = token_cmp(s, p->right, q->right);
    return c > 0;
}

static void sift_up(State *s, int64_t i) {
    Entry e = s->heap[i];
    while (i > 0) {
        int64_t parent = (i - 1) / 2;
        if (!entry_before(s, e, s->heap[parent])) break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = e;
}

static void sift_down(State *s, int64_t i) {
    Entry e = s->heap[i];
    for (;;) {
        int64_t child = 2 * i + 1;
        if (child >= s->n_heap) break;
        if (child + 1 < s->n_heap && entry_before(s, s->heap[child + 1], s->heap[child])) child++;
        if (!entry_before(s, s->heap[child], e)) break;
        s->heap[i] = s->heap[child];
        i = child;
    }
    s->heap[i] = e;
}

static int heap_push(State *s, int32_t pair) {
    if (grow((void **)&s->heap, &s->cap_heap, s->n_heap + 1, sizeof(Entry))) return -1;
    s->heap[s->n_heap] = (Entry){s->pairs[pair].count, pair};
    sift_up(s, s->n_heap++);
    return 0;
}

static Entry heap_pop(State *s) {
    Entry top = s->heap[0];
    s->heap[0] = s->heap[--s->n_heap];
    if (s->n_heap) sift_down(s, 0);
    return top;
}

static uint64_t hash_pair(int32_t a, int32_t b) {
    uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    k *= 0x9E3779B97F4A7C15ULL;
    return k ^ (k >> 31);
}

static int table_resize(State *s, uint64_t size) {
    int32_t *t = malloc(size * sizeof(int32_t));
    if (!t) return -1;
    memset(t, 0xff, size * sizeof(int32_t));
    for (int32_t p = 0; p < s->n_pairs; p++) {
        uint64_t h = hash_pair(s->pairs[p].left, s->pairs[p].right) & (size - 1);
        while (t[h] >= 0) h = (h + 1) & (size - 1);
        t[h] = p;
    }
    free(s->table);
    s->table = t;
    s->table_mask = size - 1;
    return 0;
}

/* *idx = the index of pair (a, b), created with count 0 if new. */
static int pair_index(State *s, int32_t a, int32_t b, int32_t *idx) {
    uint64_t h = hash_pair(a, b) & s->table_mask;
    for (; s->table[h] >= 0; h = (h + 1) & s->table_mask) {
        Pair *p = &s->pairs[s->table[h]];
        if (p->left == a && p->right == b) return *idx = s->table[h], 0;
    }
    int64_t cap = s->cap_pairs;
    if (grow((void **)&s->pairs, &cap, s->n_pairs + 1, sizeof(Pair))) return -1;
    s->cap_pairs = (int32_t)cap;
    *idx = s->n_pairs++;
    s->pairs[*idx] = (Pair){a, b, 0, NULL, 0, 0, -1};
    s->table[h] = *idx;
    if ((uint64_t)s->n_pairs * 2 > s->table_mask && table_resize(s, (s->table_mask + 1) * 2))
        return -1;
    return 0;
}

/* count(a, b) += delta for word w; a rise indexes w and schedules a heap push. */
static int add(State *s, int32_t a, int32_t b, int64_t delta, int32_t w, int32_t step) {
    int32_t idx;
    if (pair_index(s, a, b, &idx)) return -1;
    Pair *p = &s->pairs[idx];
    p->count += delta;
    if (delta <= 0) return 0;
    if (!p->n_words || p->words[p->n_words - 1] != w) {
        int64_t cap = p->cap_words;
        if (grow((void **)&p->words, &cap, p->n_words + 1, sizeof(int32_t))) return -1;
        p->cap_words = (int32_t)cap;
        p->words[p->n_words++] = w;
    }
    if (p->stamp != step) {
        p->stamp = step;
        if (grow((void **)&s->touched, &s->cap_touched, s->n_touched + 1, sizeof(int32_t)))
            return -1;
        s->touched[s->n_touched++] = idx;
    }
    return 0;
}

/* Replace every (a, b) in word w by c, left to right, updating neighbouring pairs. */
static int merge_word(State *s, int32_t w, int32_t a, int32_t b, int32_t c, int32_t step) {
    int32_t *t = s->sym + s->word_start[w];
    int32_t n = s->word_len[w], out = 0;
    int64_t cnt = s->word_count[w];
    for (int32_t i = 0; i < n;) {
        if (i + 1 < n && t[i] == a && t[i + 1] == b) {
            if (out > 0 &&
                (add(s, t[out - 1], a, -cnt, w, step) || add(s, t[out - 1], c, cnt, w, step)))
                return -1;
            if (i + 2 < n &&
                (add(s, b, t[i + 2], -cnt, w, step) || add(s, c, t[i + 2], cnt, w, step)))
                return -1;
            t[out++] = c;
            i += 2;
        } else {
            t[out++] = t[i++];
        }
    }
    s->word_len[w] = out;
    return 0;
}

/* *best = the best pair by lazy validation of heap entries, or -1 when no pair is left. */
static int pop_best(State *s, int32_t *best) {
    while (s->n_heap) {
        Entry e = heap_pop(s);
        int64_t current = s->pairs[e.pair].count;
        if (current == e.count) return *best = e.pair, 0;
        if (current > 0 && current < e.count && heap_push(s, e.pair)) return -1;
    }
    return *best = -1, 0;
}

/* One merge into (*left, *right); *left = -1 when nothing is left to merge. */
static int merge_step(State *s, int32_t step, int32_t *left, int32_t *right) {
    int32_t best;
    if (pop_best(s, &best)) return -1;
    if (best < 0) return *left = -1, 0;
    int32_t a = s->pairs[best].left, b = s->pairs[best].right, c = s->n_tokens++;
    int32_t la = s->tok_len[a], lb = s->tok_len[b];
    if (grow((void **)&s->arena, &s->arena_cap, s->arena_len + la + lb, 1)) return -1;
    memcpy(s->arena + s->arena_len, s->arena + s->tok_off[a], la);
    memcpy(s->arena + s->arena_len + la, s->arena + s->tok_off[b], lb);
    s->tok_off[c] = s->arena_len;
    s->tok_len[c] = la + lb;
    s->arena_len += la + lb;

    /* The pair's word list is not appended to while we walk it (only pairs with c are). */
    int32_t *words = s->pairs[best].words, n_words = s->pairs[best].n_words;
    s->n_touched = 0;
    for (int32_t k = 0; k < n_words; k++) {
        int32_t w = words[k];
        if (s->word_stamp[w] == step) continue;
        s->word_stamp[w] = step;
        if (merge_word(s, w, a, b, c, step)) return -1;
    }
    Pair *p = &s->pairs[best];
    free(p->words);
    p->words = NULL;
    p->n_words = p->cap_words = 0;
    p->count = 0;
    for (int64_t k = 0; k < s->n_touched; k++)
        if (s->pairs[s->touched[k]].count > 0 && heap_push(s, s->touched[k])) return -1;
    *left = a;
    *right = b;
    return 0;
}

static void state_free(State *s) {
    for (int32_t p = 0; p < s->n_pairs; p++) free(s->pairs[p].words);
    free(s->arena), free(s->tok_off), free(s->tok_len), free(s->sym), free(s->word_start);
    free(s->word_len), free(s->word_stamp), free(s->word_count), free(s->pairs), free(s->table);
    free(s->heap), free(s->touched);
}

/* Copy the words in, count every adjacent pair, heapify; -1 with an exception set. */
static int state_init(State *s, PyObject *words, PyObject *counts, int32_t num_merges) {
    Py_ssize_t n = PyList_GET_SIZE(words);
    int64_t total = 0;
    for (Py_ssize_t w = 0; w < n; w++) {
        if (!PyBytes_Check(PyList_GET_ITEM(words, w))) {
            PyErr_SetString(PyExc_TypeError, "words must be a list of bytes");
            return -1;
        }
        total += PyBytes_GET_SIZE(PyList_GET_ITEM(words, w));
    }
    int32_t max_tokens = 256 + num_merges;
    s->n_words = (int32_t)n;
    s->tok_off = malloc(max_tokens * sizeof(int64_t));
    s->tok_len = malloc(max_tokens * sizeof(int32_t));
    s->sym = malloc((total + 1) * sizeof(int32_t));
    s->word_start = malloc((n + 1) * sizeof(int64_t));
    s->word_len = malloc((n + 1) * sizeof(int32_t));
    s->word_stamp = malloc((n + 1) * sizeof(int32_t));
    s->word_count = malloc((n + 1) * sizeof(int64_t));
    if (!s->tok_off || !s->tok_len || !s->sym || !s->word_start || !s->word_len ||
        !s->word_stamp || !s->word_count || grow((void **)&s->arena, &s->arena_cap, 256, 1) ||
        table_resize(s, 1024)) {
        PyErr_NoMemory();
        return -1;
    }
    for (int32_t t = 0; t < 256; t++) s->arena[t] = (uint8_t)t, s->tok_off[t] = t, s->tok_len[t] = 1;
    s->arena_len = 256;
    s->n_tokens = 256;
    int64_t pos = 0;
    for (Py_ssize_t w = 0; w < n; w++) {
        PyObject *word = PyList_GET_ITEM(words, w);
        const uint8_t *bytes = (const uint8_t *)PyBytes_AS_STRING(word);
        Py_ssize_t len = PyBytes_GET_SIZE(word);
        int64_t cnt = PyLong_AsLongLong(PyList_GET_ITEM(counts, w));
        if (cnt == -1 && PyErr_Occurred()) return -1;
        s->word_start[w] = pos;
        s->word_len[w] = (int32_t)len;
        s->word_stamp[w] = -1;
        s->word_count[w] = cnt;
        for (Py_ssize_t i = 0; i < len; i++) s->sym[pos + i] = bytes[i];
        for (Py_ssize_t i = 0; i + 1 < len; i++)
            if (add(s, bytes[i], bytes[i + 1], cnt, (int32_t)w, -1)) return PyErr_NoMemory(), -1;
        pos += len;
    }
    if (grow((void **)&s->heap, &s->cap_heap, s->n_pairs + 1, sizeof(Entry))) {
        PyErr_NoMemory();
        return -1;
    }
    for (int32_t p = 0; p < s->n_pairs; p++)
        if (s->pairs[p].count > 0) s->heap[s->n_heap++] = (Entry){s->pairs[p].count, p};
    for (int64_t i = s->n_heap / 2 - 1; i >= 0; i--) sift_down(s, i);
    return 0;
}

#define PROGRESS_EVERY 512

static PyObject *learn_merges(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"words", "counts", "num_merges", "progress", NULL};
    PyObject *words, *counts, *progress = Py_None;
    int num_merges;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!i|O", kwlist, &PyList_Type, &words,
                                     &PyList_Type, &counts, &num_merges, &progress))
        return NULL;
    if (PyList_GET_SIZE(words) != PyList_GET_SIZE(counts) || num_merges < 0) {
        PyErr_SetString(PyExc_ValueError, "words and counts differ in length, or num_merges < 0");
        return NULL;
    }
    State s = {0};
    int32_t *merged = malloc(2 * ((size_t)num_merges + 1) * sizeof(int32_t));
    PyObject *result = NULL;
    if (!merged) {
        PyErr_NoMemory();
        goto done;
    }
    if (state_init(&s, words, counts, num_merges)) goto done;
    int32_t done_merges = 0, status = 0, exhausted = 0;
    while (!status && !exhausted && done_merges < num_merges) {
        int32_t start = done_merges, stop = done_merges + PROGRESS_EVERY;
        if (stop > num_merges) stop = num_merges;
        Py_BEGIN_ALLOW_THREADS;
        while (done_merges < stop) {
            int32_t *pair = &merged[2 * done_merges];
            if ((status = merge_step(&s, done_merges, &pair[0], &pair[1]))) break;
            if ((exhausted = pair[0] < 0)) break;
            done_merges++;
        }
        Py_END_ALLOW_THREADS;
        if (status) {
            PyErr_NoMemory();
            goto done;
        }
        if (progress != Py_None) {
            PyObject *r = PyObject_CallFunction(progress, "i", done_merges - start);
            if (!r) goto done;
            Py_DECREF(r);
        }
    }
    result = PyList_New(done_merges);
    if (!result) goto done;
    for (int32_t k = 0; k < done_merges; k++) {
        PyObject *pair = Py_BuildValue("(ii)", merged[2 * k], merged[2 * k + 1]);
        if (!pair) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, k, pair);
    }
done:
    state_free(&s);
    free(merged);
    return result;
}

PyObject *count_gpt2(PyObject *self, PyObject *args); /* _count.c */

static PyMethodDef methods[] = {
    {"count_gpt2", count_gpt2, METH_VARARGS,
     "count_gpt2(text, classes, counts): add text's GPT-2 pre-tokens to counts (see _count.c)"},
    {"learn_merges", (PyCFunction)(void (*)(void))learn_merges, METH_VARARGS | METH_KEYWORDS,
     "learn_merges(words, counts, num_merges, progress=None) -> list of (left, right) ids"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_bpe",
                                    "The BPE merge loop and GPT-2's pre-token counts in C (merge_loop.py, _count.c).", -1, methods};

PyMODINIT_FUNC PyInit__bpe(void) { return PyModule_Create(&module); }
