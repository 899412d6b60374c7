/* _load_check.c: the tiktoken check of packlm.tokenizer._load (encoder.tiktoken_ranks, in C),
   the digest's serialization (formats.digest) and the tables file's tokens (tables.py).
   See _load.c. */
#include "_load_tokens.h"

/* ---- the tiktoken check ------------------------------------------------------------------ */

typedef struct { /* one slot: a lookup reads one cache line */
    uint64_t key; /* (left << 32 | right) + 1; 0 empty */
    int32_t rank, merged;
} PairSlot;

typedef struct {
    PairSlot *slot;
    uint64_t mask;
} Pairs;

static uint64_t mix(uint64_t x) {
    x ^= x >> 33, x *= 0xff51afd7ed558ccdULL, x ^= x >> 33;
    return x;
}

/* The slot of `key` (found, or the empty one where it goes). */
static uint64_t pairs_slot(const Pairs *t, uint64_t key) {
    uint64_t h = mix(key) & t->mask;
    while (t->slot[h].key && t->slot[h].key != key) h = (h + 1) & t->mask;
    return h;
}

/* The rank of pair (x, y) (its first merge), or INT32_MAX; *merged: the id it makes. */
static int32_t pair_rank(const Pairs *t, int32_t x, int32_t y, int32_t *merged) {
    uint64_t h = pairs_slot(t, (((uint64_t)x << 32) | (uint32_t)y) + 1);
    if (!t->slot[h].key) return INT32_MAX;
    *merged = t->slot[h].merged;
    return t->slot[h].rank;
}

/* PythonEncoder.encode_piece of `token` (the lowest-ranked pair merged everywhere, left to
   right, again and again) == [c]. `ids` has room for the token's length. */
static int encodes_to(const Pairs *pairs, const int32_t *byte_id, const uint8_t *token,
                      Py_ssize_t n, int32_t c, int32_t *ids) {
    for (Py_ssize_t k = 0; k < n; k++) ids[k] = byte_id[token[k]];
    while (n > 1) {
        int32_t best = INT32_MAX, merged = 0, a = 0, b = 0, m_id = 0;
        for (Py_ssize_t k = 0; k + 1 < n; k++) {
            int32_t r = pair_rank(pairs, ids[k], ids[k + 1], &m_id);
            if (r < best) best = r, merged = m_id, a = ids[k], b = ids[k + 1];
        }
        if (best == INT32_MAX) break;
        Py_ssize_t m = 0;
        for (Py_ssize_t k = 0; k < n; k++, m++) {
            if (ids[k] == a && k + 1 < n && ids[k + 1] == b) ids[m] = merged, k++;
            else ids[m] = ids[k];
        }
        n = m;
    }
    return n == 1 && ids[0] == c;
}

/* Whether BPE of x's bytes followed by y's, both encoding to themselves, keeps the boundary
   between them until a merge making `limit` or later: no pair across it merges earlier. With
   ids rising in merge order, an id is when its token was made. Walks back down the x's right
   edge and y's left edge (the merge that made x, or y, undone: whichever was made later),
   as BPE built them up; a byte's parts are itself (left[t] == right[t] == t). The walk of
   is_valid_token_pair in github.com/github/rust-gems (crates/bpe), for merge-order BPE: on
   the right an equal id counts too (the leftmost of equal pairs merges first). */
static int boundary_holds(const Pairs *pairs, const int32_t *left, const int32_t *right,
                          int32_t x, int32_t y, int32_t limit) {
    for (;;) {
        int32_t made = INT32_MAX;
        if (pair_rank(pairs, x, y, &made) != INT32_MAX && made < limit) return 0;
        if (x > y) {
            limit = x, x = right[x];
            if (x == limit) { /* a byte: y's turn */
                limit = y + 1, y = left[y];
                if (y + 1 == limit) return 1;
            }
        } else {
            limit = y + 1, y = left[y];
            if (y + 1 == limit) {
                limit = x, x = right[x];
                if (x == limit) return 1;
            }
        }
    }
}

/* Whether every merged token encodes to itself: 1 or 0; -1 where a merge takes a part not made
   before it (a byte or an earlier merge), which the walk does not cover. `left` and `right`
   have room for every id. */
static int merges_stay_whole(const Pairs *pairs, const int32_t *byte_id, const int32_t *rows,
                             Py_ssize_t count, Py_ssize_t size, int32_t *left, int32_t *right) {
    for (Py_ssize_t t = 0; t < size; t++) left[t] = right[t] = -1;
    for (int b = 0; b < 256; b++) left[byte_id[b]] = right[byte_id[b]] = byte_id[b];
    for (Py_ssize_t k = 0; k < count; k++) {
        const int32_t *r = rows + 3 * k;
        if (left[r[0]] < 0 || left[r[1]] < 0) return -1;
        left[r[2]] = r[0], right[r[2]] = r[1];
    }
    for (Py_ssize_t k = 0; k < count; k++) { /* in merge order: both parts already passed */
        const int32_t *r = rows + 3 * k;
        if (!boundary_holds(pairs, left, right, r[0], r[1], r[2])) return 0;
    }
    return 1;
}

/* {token bytes: id} of the bytes, then of the merged tokens in merge order: tiktoken's ranks. */
PyObject *rank_dict(PyObject *table, const int32_t *byte_id, const int32_t *rows,
                    Py_ssize_t count) {
    PyObject *dict = PyDict_New();
    for (Py_ssize_t k = 0; dict && k < 256 + count; k++) {
        int32_t id = k < 256 ? byte_id[k] : rows[3 * (k - 256) + 2];
        PyObject *value = PyLong_FromLong(id);
        if (!value || PyDict_SetItem(dict, PyList_GET_ITEM(table, id), value) < 0) Py_CLEAR(dict);
        Py_XDECREF(value);
    }
    return dict;
}

PyObject *load_tiktoken_ranks(PyObject *self, PyObject *args) {
    PyObject *table, *byte_list, *dict = NULL;
    Py_buffer buf;
    int check_bpe;
    if (!PyArg_ParseTuple(args, "O!O!y*p", &PyList_Type, &table, &PyList_Type, &byte_list, &buf,
                          &check_bpe))
        return NULL;
    const int32_t *rows = buf.buf;
    Py_ssize_t count = buf.len / (3 * sizeof(int32_t)), size = PyList_GET_SIZE(table), longest = 1;
    int32_t byte_id[256], last = -1, *ids = NULL, *left = NULL, *right = NULL;
    Pairs pairs = {0};
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)count + 16) cap *= 2;
    pairs.slot = calloc(cap, sizeof(PairSlot)), pairs.mask = cap - 1;
    if (!pairs.slot) goto nomem;
    if (PyList_GET_SIZE(byte_list) != 256 || buf.len % (3 * sizeof(int32_t))) goto bad;
    for (int b = 0; b < 256; b++) {
        long id = PyLong_AsLong(PyList_GET_ITEM(byte_list, b));
        if (id < 0 || id >= size || !PyBytes_Check(PyList_GET_ITEM(table, id))) goto bad;
        byte_id[b] = (int32_t)id, last = id > last ? (int32_t)id : last;
    }
    for (Py_ssize_t k = 0; k < count; k++) { /* ids rise in merge order */
        const int32_t *r = rows + 3 * k;
        if (r[0] < 0 || r[1] < 0 || r[2] >= size || r[0] >= size || r[1] >= size) goto bad;
        PyObject *t = PyList_GET_ITEM(table, r[2]);
        if (!PyBytes_Check(t)) goto bad;
        if (r[2] <= last) goto none;
        last = r[2], longest = PyBytes_GET_SIZE(t) > longest ? PyBytes_GET_SIZE(t) : longest;
        uint64_t h = pairs_slot(&pairs, (((uint64_t)r[0] << 32) | (uint32_t)r[1]) + 1);
        if (!pairs.slot[h].key) /* a later duplicate pair never applies */
            pairs.slot[h] = (PairSlot){(((uint64_t)r[0] << 32) | (uint32_t)r[1]) + 1, (int32_t)k, r[2]};
    }
    if (!(dict = rank_dict(table, byte_id, rows, count))) goto out;
    if (PyDict_GET_SIZE(dict) != 256 + count) goto none; /* a token twice */
    if (check_bpe) {
        left = malloc(size * sizeof(int32_t) + 1), right = malloc(size * sizeof(int32_t) + 1);
        ids = malloc(longest * sizeof(int32_t));
        if (!left || !right || !ids) goto nomem;
        int whole = merges_stay_whole(&pairs, byte_id, rows, count, size, left, right);
        for (Py_ssize_t k = 0; whole < 0 && k < count; k++) { /* BPE of each merged token */
            PyObject *t = PyList_GET_ITEM(table, rows[3 * k + 2]);
            if (!encodes_to(&pairs, byte_id, (uint8_t *)PyBytes_AS_STRING(t), PyBytes_GET_SIZE(t),
                            rows[3 * k + 2], ids))
                whole = 0;
        }
        if (!whole) goto none;
    }
    goto out;
none:
    Py_XDECREF(dict);
    dict = Py_NewRef(Py_None);
    goto out;
bad:
    PyErr_SetString(PyExc_ValueError, "tiktoken_ranks: tables out of range");
    goto out;
nomem:
    PyErr_NoMemory();
out:
    if (PyErr_Occurred()) Py_CLEAR(dict);
    free(pairs.slot), free(ids), free(left), free(right);
    PyBuffer_Release(&buf);
    return dict;
}

/* ---- the digest's serialization -------------------------------------------------------- */

PyObject *load_serialize(PyObject *self, PyObject *args) {
    PyObject *table, *out;
    Py_buffer idx = {0};
    if (!PyArg_ParseTuple(args, "O!|y*", &PyList_Type, &table, &idx)) return NULL;
    Py_ssize_t size = PyList_GET_SIZE(table), n = idx.buf ? idx.len / 4 : size, total = 0;
    const int32_t *at = idx.buf;
    for (Py_ssize_t k = 0; k < n; k++) {
        Py_ssize_t t = at ? at[k] : k;
        PyObject *b = t >= 0 && t < size ? PyList_GET_ITEM(table, t) : NULL;
        if (!b || !PyBytes_Check(b)) {
            PyBuffer_Release(&idx);
            PyErr_SetString(PyExc_ValueError, "serialize: not a token");
            return NULL;
        }
        total += 4 + PyBytes_GET_SIZE(b);
    }
    if ((out = PyBytes_FromStringAndSize(NULL, total))) {
        uint8_t *w = (uint8_t *)PyBytes_AS_STRING(out);
        for (Py_ssize_t k = 0; k < n; k++) {
            PyObject *b = PyList_GET_ITEM(table, at ? at[k] : k);
            uint32_t len = (uint32_t)PyBytes_GET_SIZE(b);
            w[0] = len & 0xff, w[1] = (len >> 8) & 0xff, w[2] = (len >> 16) & 0xff, w[3] = len >> 24;
            memcpy(w + 4, PyBytes_AS_STRING(b), len), w += 4 + len;
        }
    }
    PyBuffer_Release(&idx);
    return out;
}


/* ---- the tables cache's tokens --------------------------------------------------------- */

/* blob cut at `ends` (int64, rising, the last at its end) -> list[bytes]: tables.py's
   tokens back from their file without a Python slice per token. */
PyObject *load_split(PyObject *self, PyObject *args) {
    Py_buffer blob, ends;
    if (!PyArg_ParseTuple(args, "y*y*", &blob, &ends)) return NULL;
    const int64_t *end = ends.buf;
    Py_ssize_t n = ends.len / (Py_ssize_t)sizeof(int64_t), at = 0;
    PyObject *out = NULL;
    int fits = ends.len % sizeof(int64_t) == 0 && (n ? end[n - 1] : 0) == blob.len;
    for (Py_ssize_t k = 0; fits && k < n; k++) fits = end[k] >= (k ? end[k - 1] : 0);
    if (!fits) PyErr_SetString(PyExc_ValueError, "split: ends do not cut the blob");
    else if ((out = PyList_New(n)))
        for (Py_ssize_t k = 0; k < n; at = end[k++]) {
            PyObject *b = PyBytes_FromStringAndSize((const char *)blob.buf + at, end[k] - at);
            if (!b) {
                Py_CLEAR(out);
                break;
            }
            PyList_SET_ITEM(out, k, b);
        }
    PyBuffer_Release(&blob), PyBuffer_Release(&ends);
    return out;
}

/* list[bytes] -> (blob, int64 ends): `split`'s inverse, the tokens as tables.py writes them,
   without a Python len() and a join over every token. */
PyObject *load_join(PyObject *self, PyObject *args) {
    PyObject *table, *blob = NULL, *ends = NULL;
    if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &table)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(table), total = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *b = PyList_GET_ITEM(table, k);
        if (!PyBytes_Check(b)) {
            PyErr_SetString(PyExc_ValueError, "join: not a token");
            return NULL;
        }
        total += PyBytes_GET_SIZE(b);
    }
    blob = PyBytes_FromStringAndSize(NULL, total);
    ends = blob ? PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t)) : NULL;
    if (!ends) {
        Py_XDECREF(blob);
        return NULL;
    }
    char *w = PyBytes_AS_STRING(blob);
    int64_t *end = (int64_t *)PyBytes_AS_STRING(ends), at = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *b = PyList_GET_ITEM(table, k);
        Py_ssize_t len = PyBytes_GET_SIZE(b);
        memcpy(w + at, PyBytes_AS_STRING(b), len);
        end[k] = at += len;
    }
    return Py_BuildValue("(NN)", blob, ends);
}
