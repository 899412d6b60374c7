/* _load.c: what loading a byte-level BPE derives, in C (loading.py wraps it; the Python code
   in formats.py and encoder.py is the oracle the tests compare against).

   vocab_json(data, specials) -> list[bytes] in id order, or None
   merge_ids(table, special_ids, merges_txt) -> (byte_ids, merge_ids as int32 bytes), or None
   tiktoken_ranks(table, byte_ids, merge_ids, check_bpe) -> dict or None  (encoder's)
   serialize(table, indices=None) -> bytes            (formats.digest's length-prefixed tokens)

   None means "not the common case": the caller then takes the Python path, which gives the
   same result or names the bad entry. So the C code refuses anything unusual (escapes it does
   not know, duplicate ids or tokens, gaps, a character outside GPT-2's byte map). */
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

static uint64_t hash_bytes(const char *p, Py_ssize_t n) { /* FNV-1a */
    uint64_t h = 1469598103934665603ULL;
    for (Py_ssize_t i = 0; i < n; i++) h = (h ^ (uint8_t)p[i]) * 1099511628211ULL;
    return h;
}

static int tokens_init(Tokens *t, Py_ssize_t cap) {
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

static void tokens_free(Tokens *t) { free(t->ptr), free(t->len), free(t->id), free(t->slot); }

/* The id of the token p[:n], or -1; with `add` >= 0, an absent token is added with that id. */
static int32_t tokens_find(Tokens *t, const char *p, Py_ssize_t n, int32_t add) {
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

/* ---- GPT-2's byte-to-unicode map -------------------------------------------------------- */

static int16_t BYTE_OF[324]; /* code point -> byte, -1 outside the map (all chars are < 324) */

static void init_byte_map(void) {
    int extra = 0;
    for (int c = 0; c < 324; c++) BYTE_OF[c] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        BYTE_OF[printable ? b : 256 + extra++] = (int16_t)b;
    }
}

/* The next UTF-8 character of p[*i:n] (advancing *i), or -1 if not valid UTF-8. */
static int32_t next_char(const uint8_t *p, Py_ssize_t n, Py_ssize_t *i) {
    uint8_t c = p[*i];
    int need = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
    if (need < 0 || *i + need >= n + (need ? 0 : 1)) return -1;
    int32_t cp = need ? c & (0x3f >> need) : c;
    for (int k = 1; k <= need; k++) {
        if ((p[*i + k] & 0xC0) != 0x80) return -1;
        cp = (cp << 6) | (p[*i + k] & 0x3f);
    }
    static const int32_t least[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < least[need] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
    *i += need + 1;
    return cp;
}

/* ---- vocab.json ------------------------------------------------------------------------- */

static Py_ssize_t skip_ws(const uint8_t *p, Py_ssize_t n, Py_ssize_t i) {
    while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r')) i++;
    return i;
}

/* A JSON string at p[*i] ('"' included) decoded to UTF-8 into out (room for n bytes); its
   length, or -1 for anything but a plain string (escapes other than \" \\ \/ \uXXXX refused). */
static Py_ssize_t json_string(const uint8_t *p, Py_ssize_t n, Py_ssize_t *i, uint8_t *out) {
    Py_ssize_t k = *i + 1, m = 0;
    while (k < n && p[k] != '"') {
        if (p[k] < 0x20) return -1;
        if (p[k] != '\\') {
            out[m++] = p[k++];
            continue;
        }
        if (k + 1 >= n) return -1;
        uint8_t e = p[k + 1];
        if (e == '"' || e == '\\' || e == '/') {
            out[m++] = e, k += 2;
            continue;
        }
        if (e != 'u' || k + 6 > n) return -1;
        int32_t cp = 0;
        for (int d = 2; d < 6; d++) {
            uint8_t h = p[k + d];
            int v = h >= '0' && h <= '9' ? h - '0' : (h | 32) >= 'a' && (h | 32) <= 'f' ? (h | 32) - 'a' + 10 : -1;
            if (v < 0) return -1;
            cp = cp * 16 + v;
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) return -1; /* surrogate pairs: left to Python */
        k += 6; /* \uXXXX -> UTF-8 (at most 3 bytes, fewer than the 6 escaped) */
        if (cp < 0x80) out[m++] = (uint8_t)cp;
        else if (cp < 0x800) out[m++] = 0xC0 | (cp >> 6), out[m++] = 0x80 | (cp & 0x3f);
        else out[m++] = 0xE0 | (cp >> 12), out[m++] = 0x80 | ((cp >> 6) & 0x3f), out[m++] = 0x80 | (cp & 0x3f);
    }
    if (k >= n) return -1;
    *i = k + 1;
    return m;
}

static PyObject *vocab_json(PyObject *self, PyObject *args) {
    Py_buffer buf;
    PyObject *specials, *result = Py_None, *table = NULL;
    if (!PyArg_ParseTuple(args, "y*O!", &buf, &PyTuple_Type, &specials)) return NULL;
    const uint8_t *p = buf.buf;
    Py_ssize_t n = buf.len, i = skip_ws(p, n, 0), count = 0, at = 0, cap = n / 4 + 1;
    uint8_t *arena = malloc(n + 1), *text = malloc(n + 1);
    int32_t *ids = malloc(cap * sizeof(int32_t)), *where = NULL;
    Py_ssize_t *off = malloc(cap * sizeof(Py_ssize_t)), *len = malloc(cap * sizeof(Py_ssize_t));
    Tokens seen = {0};
    if (!arena || !text || !ids || !off || !len || tokens_init(&seen, cap) < 0) goto nomem;
    if (i >= n || p[i] != '{') goto done;
    i = skip_ws(p, n, i + 1);
    while (i < n && p[i] == '"') {
        Py_ssize_t m = json_string(p, n, &i, text), start = at;
        if (m < 0 || count >= cap) goto done;
        int special = 0;
        for (Py_ssize_t s = 0; s < PyTuple_GET_SIZE(specials) && !special; s++) {
            PyObject *b = PyTuple_GET_ITEM(specials, s);
            special = PyBytes_GET_SIZE(b) == m && memcmp(PyBytes_AS_STRING(b), text, m) == 0;
        }
        if (special) memcpy(arena + at, text, m), at += m;
        else
            for (Py_ssize_t k = 0; k < m;) {
                int32_t cp = next_char(text, m, &k);
                if (cp < 0 || cp >= 324 || BYTE_OF[cp] < 0) goto done;
                arena[at++] = (uint8_t)BYTE_OF[cp];
            }
        i = skip_ws(p, n, i);
        if (i >= n || p[i] != ':') goto done;
        i = skip_ws(p, n, i + 1);
        int64_t id = 0;
        Py_ssize_t digits = i;
        while (i < n && p[i] >= '0' && p[i] <= '9' && id < INT32_MAX) id = id * 10 + (p[i++] - '0');
        if (i == digits || (p[digits] == '0' && i - digits > 1) || id >= INT32_MAX) goto done;
        ids[count] = (int32_t)id, off[count] = start, len[count] = at - start, count++;
        i = skip_ws(p, n, i);
        if (i < n && p[i] == ',') i = skip_ws(p, n, i + 1);
        else break;
    }
    if (i >= n || p[i] != '}' || skip_ws(p, n, i + 1) != n || count == 0) goto done;
    where = malloc(count * sizeof(int32_t)); /* id -> entry */
    if (!where) goto nomem;
    memset(where, 0xff, count * sizeof(int32_t));
    for (Py_ssize_t k = 0; k < count; k++) {
        if (ids[k] >= count || where[ids[k]] >= 0) goto done; /* a gap or an id twice */
        if (tokens_find(&seen, (char *)arena + off[k], len[k], 0) >= 0) goto done; /* twice */
        where[ids[k]] = (int32_t)k;
    }
    if (!(table = PyList_New(count))) goto fail;
    for (Py_ssize_t t = 0; t < count; t++) {
        PyObject *b = PyBytes_FromStringAndSize((char *)arena + off[where[t]], len[where[t]]);
        if (!b) goto fail;
        PyList_SET_ITEM(table, t, b);
    }
    result = table, table = NULL;
done:
    Py_INCREF(result);
    goto out;
nomem:
    PyErr_NoMemory();
fail:
    result = NULL;
out:
    Py_XDECREF(table);
    free(arena), free(text), free(ids), free(off), free(len), free(where), tokens_free(&seen);
    PyBuffer_Release(&buf);
    return result;
}

/* ---- merges.txt -> ids --------------------------------------------------------------- */

/* The bytes of the byte-to-unicode token p[*i:] up to a space or newline (advancing *i)
   into out; their count, or -1 for a character outside the map or an empty token. */
static Py_ssize_t map_token(const uint8_t *p, Py_ssize_t n, Py_ssize_t *i, uint8_t *out) {
    Py_ssize_t m = 0;
    while (*i < n && p[*i] != ' ' && p[*i] != '\n') {
        int32_t cp = next_char(p, n, i);
        if (cp < 0 || cp >= 324 || BYTE_OF[cp] < 0) return -1;
        out[m++] = (uint8_t)BYTE_OF[cp];
    }
    return m ? m : -1;
}

static PyObject *merge_ids(PyObject *self, PyObject *args) {
    PyObject *table, *specials, *result = Py_None, *byte_ids = NULL, *out = NULL;
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "O!O!y*", &PyList_Type, &table, &PyFrozenSet_Type, &specials, &buf))
        return NULL;
    const uint8_t *p = buf.buf;
    Py_ssize_t n = buf.len, size = PyList_GET_SIZE(table), count = 0, cap = n / 4 + 1;
    int32_t *ids = malloc(3 * cap * sizeof(int32_t));
    uint8_t *pair = malloc(n + 1);
    Tokens by = {0};
    if (!ids || !pair || tokens_init(&by, size) < 0) goto nomem;
    for (Py_ssize_t t = 0; t < size; t++) { /* ordinary tokens -> the lowest id */
        PyObject *b = PyList_GET_ITEM(table, t), *key = PyLong_FromSsize_t(t);
        int special = key ? PySet_Contains(specials, key) : -1;
        Py_XDECREF(key);
        if (special < 0 || !PyBytes_Check(b)) goto fail;
        if (!special) tokens_find(&by, PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b), (int32_t)t);
    }
    if (!(byte_ids = PyList_New(256))) goto fail;
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        int32_t id = tokens_find(&by, &c, 1, -1);
        if (id < 0) goto done;
        PyList_SET_ITEM(byte_ids, b, PyLong_FromLong(id));
    }
    for (Py_ssize_t i = 0; i < n;) {
        if (p[i] == '\n') {
            i++;
            continue;
        }
        Py_ssize_t a = map_token(p, n, &i, pair);
        if (a < 0 || i >= n || p[i] != ' ') goto done;
        i++;
        Py_ssize_t b = map_token(p, n, &i, pair + a);
        if (b < 0 || (i < n && p[i] != '\n') || count >= cap) goto done;
        int32_t *row = ids + 3 * count++;
        row[0] = tokens_find(&by, (char *)pair, a, -1);
        row[1] = tokens_find(&by, (char *)pair + a, b, -1);
        row[2] = tokens_find(&by, (char *)pair, a + b, -1);
        if (row[0] < 0 || row[1] < 0 || row[2] < 0) goto done;
    }
    if (!(out = PyBytes_FromStringAndSize((char *)ids, 3 * count * sizeof(int32_t)))) goto fail;
    result = Py_BuildValue("(OO)", byte_ids, out);
    goto out;
done:
    Py_INCREF(result);
    goto out;
nomem:
    PyErr_NoMemory();
fail:
    result = NULL;
out:
    Py_XDECREF(byte_ids), Py_XDECREF(out);
    free(ids), free(pair), tokens_free(&by);
    PyBuffer_Release(&buf);
    return result;
}

/* ---- the tiktoken check ------------------------------------------------------------------ */

typedef struct {
    uint64_t *key; /* (left << 32 | right) + 1; 0 empty */
    int32_t *rank, *merged;
    uint64_t mask;
} Pairs;

static uint64_t mix(uint64_t x) {
    x ^= x >> 33, x *= 0xff51afd7ed558ccdULL, x ^= x >> 33;
    return x;
}

/* The slot of `key` (found, or the empty one where it goes). */
static uint64_t pairs_slot(const Pairs *t, uint64_t key) {
    uint64_t h = mix(key) & t->mask;
    while (t->key[h] && t->key[h] != key) h = (h + 1) & t->mask;
    return h;
}

/* The rank of pair (x, y) (its first merge), or INT32_MAX; *merged: the id it makes. */
static int32_t pair_rank(const Pairs *t, int32_t x, int32_t y, int32_t *merged) {
    uint64_t h = pairs_slot(t, (((uint64_t)x << 32) | (uint32_t)y) + 1);
    if (!t->key[h]) return INT32_MAX;
    *merged = t->merged[h];
    return t->rank[h];
}

/* PythonEncoder.encode_piece of `token` (the lowest-ranked pair merged everywhere, left to
   right, again and again) == [c]. Each pair's rank is looked up once and kept in `rank`
   (rank[k]: of ids[k], ids[k + 1]); `ids`, `rank`, `made` have room for the token's length. */
static int encodes_to(const Pairs *pairs, const int32_t *byte_id, const uint8_t *token,
                      Py_ssize_t n, int32_t c, int32_t *ids, int32_t *rank, int32_t *made) {
    for (Py_ssize_t k = 0; k < n; k++) ids[k] = byte_id[token[k]];
    for (Py_ssize_t k = 0; k + 1 < n; k++) rank[k] = pair_rank(pairs, ids[k], ids[k + 1], made + k);
    while (n > 1) {
        int32_t best = INT32_MAX, merged = 0, a = 0, b = 0;
        for (Py_ssize_t k = 0; k + 1 < n; k++)
            if (rank[k] < best) best = rank[k], merged = made[k], a = ids[k], b = ids[k + 1];
        if (best == INT32_MAX) break;
        Py_ssize_t m = 0;
        for (Py_ssize_t k = 0; k < n; k++, m++) { /* every (a, b), left to right: merged */
            if (ids[k] == a && k + 1 < n && ids[k + 1] == b) ids[m] = merged, rank[m] = -1, k++;
            else ids[m] = ids[k], rank[m] = k + 1 < n ? rank[k] : INT32_MAX, made[m] = made[k];
        }
        n = m;
        for (Py_ssize_t k = 0; k < n; k++) /* the pairs on both sides of a new token */
            if (rank[k] == -1) {
                if (k > 0) rank[k - 1] = pair_rank(pairs, ids[k - 1], ids[k], made + k - 1);
                rank[k] = k + 1 < n ? pair_rank(pairs, ids[k], ids[k + 1], made + k) : INT32_MAX;
            }
    }
    return n == 1 && ids[0] == c;
}

static PyObject *tiktoken_ranks(PyObject *self, PyObject *args) {
    PyObject *table, *byte_list;
    Py_buffer buf;
    int check_bpe, ok = 0;
    if (!PyArg_ParseTuple(args, "O!O!y*p", &PyList_Type, &table, &PyList_Type, &byte_list, &buf,
                          &check_bpe))
        return NULL;
    const int32_t *rows = buf.buf;
    Py_ssize_t count = buf.len / (3 * sizeof(int32_t)), size = PyList_GET_SIZE(table), longest = 1;
    int32_t byte_id[256], last = -1, *ids = NULL;
    Pairs pairs = {0};
    Tokens ranks = {0};
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)count + 16) cap *= 2;
    pairs.key = calloc(cap, sizeof(uint64_t)), pairs.mask = cap - 1;
    pairs.rank = malloc(cap * sizeof(int32_t)), pairs.merged = malloc(cap * sizeof(int32_t));
    if (!pairs.key || !pairs.rank || !pairs.merged || tokens_init(&ranks, count + 256) < 0) {
        PyErr_NoMemory();
        goto out;
    }
    if (PyList_GET_SIZE(byte_list) != 256 || buf.len % (3 * sizeof(int32_t))) goto bad;
    for (int b = 0; b < 256; b++) {
        long id = PyLong_AsLong(PyList_GET_ITEM(byte_list, b));
        if (id < 0 || id >= size || !PyBytes_Check(PyList_GET_ITEM(table, id))) goto bad;
        byte_id[b] = (int32_t)id, last = id > last ? (int32_t)id : last;
        PyObject *t = PyList_GET_ITEM(table, id);
        tokens_find(&ranks, PyBytes_AS_STRING(t), PyBytes_GET_SIZE(t), (int32_t)id);
    }
    for (Py_ssize_t k = 0; k < count; k++) { /* ids rise in merge order, no token twice */
        const int32_t *r = rows + 3 * k;
        if (r[0] < 0 || r[1] < 0 || r[2] >= size || r[0] >= size || r[1] >= size) goto bad;
        PyObject *t = PyList_GET_ITEM(table, r[2]);
        if (!PyBytes_Check(t)) goto bad;
        if (r[2] <= last || tokens_find(&ranks, PyBytes_AS_STRING(t), PyBytes_GET_SIZE(t), r[2]) >= 0)
            goto done;
        last = r[2], longest = PyBytes_GET_SIZE(t) > longest ? PyBytes_GET_SIZE(t) : longest;
        uint64_t h = pairs_slot(&pairs, (((uint64_t)r[0] << 32) | (uint32_t)r[1]) + 1);
        if (!pairs.key[h]) /* a later duplicate pair never applies */
            pairs.key[h] = (((uint64_t)r[0] << 32) | (uint32_t)r[1]) + 1, pairs.rank[h] = (int32_t)k,
            pairs.merged[h] = r[2];
    }
    if (check_bpe) {
        if (!(ids = malloc(3 * longest * sizeof(int32_t)))) {
            PyErr_NoMemory();
            goto out;
        }
        for (Py_ssize_t k = 0; k < count; k++) {
            PyObject *t = PyList_GET_ITEM(table, rows[3 * k + 2]);
            if (!encodes_to(&pairs, byte_id, (uint8_t *)PyBytes_AS_STRING(t), PyBytes_GET_SIZE(t),
                            rows[3 * k + 2], ids, ids + longest, ids + 2 * longest))
                goto done;
        }
    }
    ok = 1;
done:
    free(pairs.key), free(pairs.rank), free(pairs.merged), free(ids), tokens_free(&ranks);
    if (!ok) {
        PyBuffer_Release(&buf);
        Py_RETURN_NONE;
    }
    PyObject *dict = PyDict_New(); /* token bytes -> id: the bytes, then merge order */
    for (Py_ssize_t k = 0; dict && k < 256 + count; k++) {
        int32_t id = k < 256 ? byte_id[k] : rows[3 * (k - 256) + 2];
        PyObject *value = PyLong_FromLong(id);
        if (!value || PyDict_SetItem(dict, PyList_GET_ITEM(table, id), value) < 0) Py_CLEAR(dict);
        Py_XDECREF(value);
    }
    PyBuffer_Release(&buf);
    return dict;
bad:
    PyErr_SetString(PyExc_ValueError, "tiktoken_ranks: tables out of range");
out:
    free(pairs.key), free(pairs.rank), free(pairs.merged), free(ids), tokens_free(&ranks);
    PyBuffer_Release(&buf);
    return NULL;
}

/* ---- the digest's serialization -------------------------------------------------------- */

static PyObject *serialize(PyObject *self, PyObject *args) {
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

static PyMethodDef methods[] = {
    {"vocab_json", vocab_json, METH_VARARGS, "vocab.json bytes, specials (UTF-8) -> table or None"},
    {"merge_ids", merge_ids, METH_VARARGS, "table, special ids, merges.txt body -> ids or None"},
    {"tiktoken_ranks", tiktoken_ranks, METH_VARARGS, "tiktoken's ranks giving these ids, or None"},
    {"serialize", serialize, METH_VARARGS, "length-prefixed tokens (of indices) for the digest"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_load",
                                    "Loading byte-level BPE files in C.", -1, methods};

PyMODINIT_FUNC PyInit__load(void) {
    init_byte_map();
    return PyModule_Create(&module);
}
