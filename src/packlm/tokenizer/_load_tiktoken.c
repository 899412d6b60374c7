/* _load_tiktoken.c: a .tiktoken ranks file ("base64(token) rank" lines) -> the tokens in rank
   order, the id of each byte, the merge of each longer token and tiktoken's ranks where they
   pass the check, as formats.read_tiktoken + encoder.id_tables + encoder.tiktoken_ranks find
   them in Python (the oracle the tests compare against); None for anything unusual, which the
   Python path reads or names. See _load.c. */
#include "_load_tokens.h"

static int8_t B64[256]; /* base64 character -> its 6 bits, -1 outside the alphabet */
static int b64_ready;

static void init_b64(void) {
    const char *alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    memset(B64, -1, sizeof B64);
    for (int k = 0; k < 64; k++) B64[(uint8_t)alphabet[k]] = (int8_t)k;
    b64_ready = 1;
}

/* Canonical base64 p[:n] (a multiple of 4 characters, "=" only as the last one or two)
   decoded into out; its length, or -1. */
static Py_ssize_t b64_decode(const uint8_t *p, Py_ssize_t n, uint8_t *out) {
    if (n == 0 || n % 4) return -1;
    int pad = (p[n - 1] == '=') + (p[n - 2] == '=');
    Py_ssize_t m = 0;
    for (Py_ssize_t i = 0; i < n; i += 4) {
        int last = i + 4 == n, used = last ? 4 - pad : 4;
        uint32_t v = 0;
        for (int k = 0; k < 4; k++) {
            int8_t d = k < used ? B64[p[i + k]] : 0;
            if (d < 0 || (k >= used && p[i + k] != '=')) return -1;
            v = v << 6 | (uint32_t)d;
        }
        out[m++] = (uint8_t)(v >> 16);
        if (used > 2) out[m++] = (uint8_t)(v >> 8);
        if (used > 3) out[m++] = (uint8_t)v;
    }
    return m;
}

/* The tokens by their bytes: those of one or two bytes in direct tables (every BPE starts
   from the bytes and looks up each pair of them), longer ones hashed. */
typedef struct {
    Tokens hashed;
    int32_t *short_ids; /* [256 + 65536]: the rank of (b0) at b0, of (b0, b1) at 256 + ..; -1 */
} Ranks;

static inline int32_t *short_slot(Ranks *t, const char *p, Py_ssize_t n) {
    return n == 1 ? t->short_ids + (uint8_t)p[0] : t->short_ids + 256 + ((uint8_t)p[0] << 8 | (uint8_t)p[1]);
}

/* The rank of the token p[:n], or -1; with `add` >= 0, an absent token is added as that. */
static int32_t ranks_find(Ranks *t, const char *p, Py_ssize_t n, int32_t add) {
    if (n > 2) return tokens_find(&t->hashed, p, n, add);
    int32_t *slot = short_slot(t, p, n), found = *slot;
    if (found < 0 && add >= 0) *slot = add;
    return found;
}

/* The rank of parts k and k + 1 joined, if a token below `limit`, else INT32_MAX. */
static int32_t joined(Ranks *ranks, const char *p, const Py_ssize_t *start, Py_ssize_t k,
                      int32_t limit) {
    int32_t r = ranks_find(ranks, p + start[k], start[k + 2] - start[k], -1);
    return r >= 0 && r < limit ? r : INT32_MAX;
}

/* tiktoken's BPE of token p[:n] with only ranks below `limit` (formats._rank_bpe): the
   lowest-ranked adjacent pair merged, the leftmost of equals, until none is below `limit`.
   Where it ends in two parts, their ids go to left/right and 1 is returned. A pair's rank
   is looked up when the pair appears. `start` has room for n + 1 offsets, `rank` and `id`
   (each part's id: its byte's, then the rank it was merged as) for n. *recorded becomes 0
   where a step joins two parts that are not the recorded merge of what they make (rows,
   the row of each rank at row_at: all of them below `limit` are known). */
static int last_merge(Ranks *ranks, const char *p, Py_ssize_t n, int32_t limit,
                      Py_ssize_t *start, int32_t *rank, int32_t *id, int32_t *left,
                      int32_t *right, const int32_t *rows, const int32_t *row_at,
                      int *recorded) {
    Py_ssize_t parts = n; /* part k: p[start[k]:start[k+1]]; rank[k]: parts k, k + 1 */
    for (Py_ssize_t k = 0; k <= n; k++) start[k] = k;
    for (Py_ssize_t k = 0; k < n; k++) id[k] = ranks->short_ids[(uint8_t)p[k]];
    for (Py_ssize_t k = 0; k + 1 < n; k++) rank[k] = joined(ranks, p, start, k, limit);
    while (parts > 1) {
        Py_ssize_t at = 0;
        for (Py_ssize_t k = 1; k + 1 < parts; k++)
            if (rank[k] < rank[at]) at = k;
        if (rank[at] == INT32_MAX) break;
        const int32_t *made = rows + 3 * row_at[rank[at]];
        if (made[0] != id[at] || made[1] != id[at + 1]) *recorded = 0;
        id[at] = rank[at];
        memmove(start + at + 1, start + at + 2, (parts - at - 1) * sizeof(Py_ssize_t));
        memmove(id + at + 1, id + at + 2, (parts - at - 2) * sizeof(int32_t));
        if (parts - at - 3 > 0) memmove(rank + at + 1, rank + at + 2, (parts - at - 3) * sizeof(int32_t));
        parts--;
        if (at > 0) rank[at - 1] = joined(ranks, p, start, at - 1, limit);
        if (at + 1 < parts) rank[at] = joined(ranks, p, start, at, limit);
    }
    if (parts != 2) return 0;
    *left = id[0], *right = id[1];
    return 1;
}

PyObject *load_tiktoken_file(PyObject *self, PyObject *args) {
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "y*", &buf)) return NULL;
    if (!b64_ready) init_b64();
    const uint8_t *p = buf.buf;
    Py_ssize_t n = buf.len, lines = 1, count = 0, longest = 1;
    for (const uint8_t *c = p; (c = memchr(c, '\n', p + n - c)); c++) lines++;
    uint8_t *arena = malloc(n + 1);
    Py_ssize_t *off = malloc(lines * sizeof(Py_ssize_t) + 1), *start = NULL;
    int32_t *rank = NULL, *id = NULL, *row_at = malloc(lines * sizeof(int32_t) + 1);
    int recorded = 1; /* every step of every token's BPE joins a recorded merge (below) */
    int32_t *rows = malloc(3 * lines * sizeof(int32_t) + 1), *at_rank = malloc(lines * sizeof(int32_t) + 1);
    PyObject *result = Py_None, *table = NULL, *byte_ids = NULL, *rows_bytes = NULL, *tiktoken = NULL;
    Py_ssize_t merges = 0, used = 0;
    Ranks ranks = {{0}, malloc((256 + 65536) * sizeof(int32_t))};
    if (!arena || !off || !rows || !at_rank || !row_at || !ranks.short_ids || tokens_init(&ranks.hashed, lines) < 0)
        goto nomem;
    memset(ranks.short_ids, 0xff, (256 + 65536) * sizeof(int32_t));
    for (Py_ssize_t k = 0; k < lines; k++) at_rank[k] = -1;
    for (Py_ssize_t i = 0; i < n;) { /* "token rank\n" lines: each rank once, 0..count-1 */
        const uint8_t *end = memchr(p + i, '\n', n - i), *space;
        Py_ssize_t stop = end ? end - p : n;
        if (!(space = memchr(p + i, ' ', stop - i))) goto done;
        Py_ssize_t len = b64_decode(p + i, space - p - i, arena + used), digits = stop - (space - p) - 1;
        int64_t rank = 0;
        if (len < 0 || digits < 1 || digits > 10) goto done;
        for (const uint8_t *d = space + 1; d < p + stop; d++) {
            if (*d < '0' || *d > '9') goto done;
            rank = rank * 10 + (*d - '0');
        }
        if (rank >= lines || at_rank[rank] >= 0) goto done;
        if (ranks_find(&ranks, (char *)arena + used, len, (int32_t)rank) >= 0) goto done; /* twice */
        at_rank[rank] = (int32_t)count, off[count++] = used, used += len;
        longest = len > longest ? len : longest;
        i = stop + 1;
    }
    for (Py_ssize_t r = 0; r < count; r++)
        if (at_rank[r] < 0) goto done; /* a gap */
    start = malloc((longest + 1) * sizeof(Py_ssize_t)), rank = malloc(longest * sizeof(int32_t));
    id = malloc(longest * sizeof(int32_t));
    if (!start || !rank || !id) goto nomem;
    if (!(table = PyList_New(count))) goto fail;
    for (Py_ssize_t r = 0; r < count; r++) {
        Py_ssize_t k = at_rank[r], len = (k + 1 < count ? off[k + 1] : used) - off[k];
        const char *token = (char *)arena + off[k];
        PyObject *b = PyBytes_FromStringAndSize(token, len);
        if (!b) goto fail;
        PyList_SET_ITEM(table, r, b);
        if (len == 1) continue;
        row_at[r] = (int32_t)merges;
        int32_t *row = rows + 3 * merges++;
        if (!last_merge(&ranks, token, len, (int32_t)r, start, rank, id, row, row + 1, rows, row_at,
                        &recorded))
            goto done;
        row[2] = (int32_t)r;
    }
    if (!(byte_ids = PyList_New(256))) goto fail;
    int32_t *byte_id = ranks.short_ids, last_byte = -1;
    for (int b = 0; b < 256; b++) {
        if (byte_id[b] < 0) goto done; /* every byte needs an id */
        PyList_SET_ITEM(byte_ids, b, PyLong_FromLong(byte_id[b]));
        last_byte = byte_id[b] > last_byte ? byte_id[b] : last_byte;
    }
    if (!(rows_bytes = PyBytes_FromStringAndSize((char *)rows, 3 * merges * sizeof(int32_t)))) goto fail;
    /* The tiktoken check (encoder.tiktoken_ranks): merged ids rise (they are the ranks) above
       every byte's, no token twice (refused above), and every merged token encodes to itself
       in merge-order BPE. That last holds where each step of every token's BPE above joined
       the recorded merge of what it made (a step joining a span of the token's bytes into
       one token runs as that token's own BPE did, which its merge records): merge-order
       BPE, whose pairs are among those tiktoken's BPE may join, ranked alike, then takes the
       same steps, and joins the two parts left by the token's own merge. */
    if (!recorded) goto done; /* never seen: the Python path checks the slow way */
    int whole = merges == 0 || rows[2] > last_byte;
    if (!(tiktoken = whole ? rank_dict(table, byte_id, rows, merges) : Py_NewRef(Py_None))) goto fail;
    result = Py_BuildValue("(OOOO)", table, byte_ids, rows_bytes, tiktoken);
    goto out;
done:
    Py_INCREF(result);
    goto out;
nomem:
    PyErr_NoMemory();
fail:
    result = NULL;
out:
    Py_XDECREF(table), Py_XDECREF(byte_ids), Py_XDECREF(rows_bytes), Py_XDECREF(tiktoken);
    free(arena), free(off), free(rows), free(at_rank), free(start), free(rank), free(id), free(row_at);
    free(ranks.short_ids), tokens_free(&ranks.hashed);
    PyBuffer_Release(&buf);
    return result;
}
