/* _load.c: what loading a byte-level BPE derives, in C (loading.py wraps it; the Python code
   in formats.py and encoder.py is the oracle the tests compare against).

   vocab_json(data, specials) -> list[bytes] in id order, or None
   vocab_dict(vocab, specials) -> the same from a dict {text: id} (a tokenizer.json's)
   merge_ids(table, special_ids, merges_txt) -> (byte_ids, merge_ids as int32 bytes), or None
   tiktoken_ranks(table, byte_ids, merge_ids, check_bpe) -> dict or None  (encoder's)
   serialize(table, indices=None) -> bytes            (formats.digest's length-prefixed tokens)
   split(blob, ends) -> list[bytes]                  (tables.py's tokens from their file)
   tiktoken_file(data) -> (table, byte_ids, merge_ids as int32 bytes, tiktoken_ranks' dict or
                          None), or None (_load_tiktoken.c)
   json_model_spans(data) -> where a tokenizer.json's model.vocab and model.merges lie, or None
   json_merges(data) -> a tokenizer.json's merges as merges.txt's lines, or None

   None means "not the common case": the caller then takes the Python path, which gives the
   same result or names the bad entry. So the C code refuses anything unusual (escapes it does
   not know, duplicate ids or tokens, gaps, a character outside GPT-2's byte map). */
#include "_load_tokens.h"

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

/* The code unit of the escape backslash, u, four hex digits at p[k], or -1. */
static int32_t hex4(const uint8_t *p, Py_ssize_t n, Py_ssize_t k) {
    if (k + 6 > n || p[k] != '\\' || p[k + 1] != 'u') return -1;
    int32_t cp = 0;
    for (int d = 2; d < 6; d++) {
        uint8_t h = p[k + d];
        int v = h >= '0' && h <= '9' ? h - '0' : (h | 32) >= 'a' && (h | 32) <= 'f' ? (h | 32) - 'a' + 10 : -1;
        if (v < 0) return -1;
        cp = cp * 16 + v;
    }
    return cp;
}

/* A JSON string at p[*i] ('"' included) decoded to UTF-8 into out (room for n bytes); its
   length, or -1 where it is not one or holds a lone surrogate (json would keep it; its
   UTF-8 cannot). Every escape is shorter decoded than written. */
static Py_ssize_t json_string(const uint8_t *p, Py_ssize_t n, Py_ssize_t *i, uint8_t *out) {
    static const char ESCAPED[] = "\"\\/bfnrt", MEANS[] = "\"\\/\b\f\n\r\t";
    Py_ssize_t k = *i + 1, m = 0;
    while (k < n && p[k] != '"') {
        if (p[k] < 0x20) return -1;
        if (p[k] != '\\') {
            out[m++] = p[k++];
            continue;
        }
        if (k + 1 >= n) return -1;
        const char *e = p[k + 1] ? strchr(ESCAPED, p[k + 1]) : NULL;
        if (e) {
            out[m++] = (uint8_t)MEANS[e - ESCAPED], k += 2;
            continue;
        }
        int32_t cp = hex4(p, n, k), low;
        if (cp < 0 || (cp >= 0xDC00 && cp <= 0xDFFF)) return -1;
        k += 6;
        if (cp >= 0xD800 && cp <= 0xDBFF) { /* a surrogate pair: \uD8xx\uDCxx */
            if ((low = hex4(p, n, k)) < 0xDC00 || low > 0xDFFF) return -1;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00), k += 6;
        }
        if (cp < 0x80) out[m++] = (uint8_t)cp;
        else if (cp < 0x800) out[m++] = 0xC0 | (cp >> 6), out[m++] = 0x80 | (cp & 0x3f);
        else if (cp < 0x10000)
            out[m++] = 0xE0 | (cp >> 12), out[m++] = 0x80 | ((cp >> 6) & 0x3f), out[m++] = 0x80 | (cp & 0x3f);
        else
            out[m++] = 0xF0 | (cp >> 18), out[m++] = 0x80 | ((cp >> 12) & 0x3f),
            out[m++] = 0x80 | ((cp >> 6) & 0x3f), out[m++] = 0x80 | (cp & 0x3f);
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
    Py_ssize_t n = buf.len, i = skip_ws(p, n, 0), count = 0, at = 0, cap = 1;
    for (const uint8_t *c = p; (c = memchr(c, ':', p + n - c)); c++) cap++; /* >= entries */
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

/* A tokenizer.json's vocab, already a dict {text: id}: the same table (None where vocab_json
   would give None). `specials`: the texts kept as their UTF-8, not in the byte map. */
static PyObject *vocab_dict(PyObject *self, PyObject *args) {
    PyObject *dict, *specials, *key, *value, *result = Py_None, *table;
    if (!PyArg_ParseTuple(args, "O!O!", &PyDict_Type, &dict, &PyTuple_Type, &specials)) return NULL;
    Py_ssize_t count = PyDict_GET_SIZE(dict), pos = 0;
    Tokens seen = {0};
    if (!(table = PyList_New(count))) return NULL; /* items NULL until set */
    if (tokens_init(&seen, count) < 0) {
        PyErr_NoMemory();
        result = NULL;
        goto out;
    }
    while (count && PyDict_Next(dict, &pos, &key, &value)) {
        if (!PyUnicode_Check(key) || !PyLong_CheckExact(value)) goto out;
        long id = PyLong_AsLong(value);
        if (id == -1 && PyErr_Occurred()) PyErr_Clear();
        if (id < 0 || id >= count || PyList_GET_ITEM(table, id)) goto out; /* a gap or twice */
        int special = 0;
        for (Py_ssize_t s = 0; s < PyTuple_GET_SIZE(specials) && !special; s++)
            special = PyUnicode_Compare(key, PyTuple_GET_ITEM(specials, s)) == 0;
        PyObject *token;
        if (special) token = PyUnicode_AsUTF8String(key);
        else {
            Py_ssize_t n = PyUnicode_GET_LENGTH(key);
            int kind = PyUnicode_KIND(key);
            const void *data = PyUnicode_DATA(key);
            if (!(token = PyBytes_FromStringAndSize(NULL, n))) goto fail;
            for (Py_ssize_t j = 0; j < n; j++) {
                Py_UCS4 cp = PyUnicode_READ(kind, data, j);
                if (cp >= 324 || BYTE_OF[cp] < 0) {
                    Py_DECREF(token);
                    goto out;
                }
                PyBytes_AS_STRING(token)[j] = (char)BYTE_OF[cp];
            }
        }
        if (!token) goto fail;
        PyList_SET_ITEM(table, id, token); /* the table keeps it alive for `seen` */
        if (tokens_find(&seen, PyBytes_AS_STRING(token), PyBytes_GET_SIZE(token), 0) >= 0) goto out;
    }
    if (count) result = table, table = NULL;
    goto out;
fail:
    result = NULL;
out:
    Py_XINCREF(result);
    Py_XDECREF(table);
    tokens_free(&seen);
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
    Py_ssize_t n = buf.len, size = PyList_GET_SIZE(table), count = 0, cap = 1;
    for (const uint8_t *c = p; (c = memchr(c, '\n', p + n - c)); c++) cap++; /* >= rows */
    int32_t *ids = malloc(3 * cap * sizeof(int32_t));
    uint8_t *pair = malloc(n + 1);
    Tokens by = {0};
    uint8_t *special = calloc(size + 1, 1); /* id -> 1 for a special token */
    if (!ids || !pair || !special || tokens_init(&by, size) < 0) goto nomem;
    PyObject *it = PyObject_GetIter(specials), *key;
    if (!it) goto fail;
    while ((key = PyIter_Next(it))) {
        Py_ssize_t id = PyLong_Check(key) ? PyLong_AsSsize_t(key) : -1;
        Py_DECREF(key);
        if (id >= 0 && id < size) special[id] = 1;
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) goto fail;
    for (Py_ssize_t t = 0; t < size; t++) { /* ordinary tokens -> the lowest id */
        PyObject *b = PyList_GET_ITEM(table, t);
        if (!PyBytes_Check(b)) {
            PyErr_SetString(PyExc_TypeError, "merge_ids: the table holds a non-bytes token");
            goto fail;
        }
        if (!special[t]) tokens_find(&by, PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b), (int32_t)t);
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
    free(ids), free(pair), free(special), tokens_free(&by);
    PyBuffer_Release(&buf);
    return result;
}

/* ---- a tokenizer.json's model.vocab and model.merges --------------------------------- */

/* The end of the JSON value at p[i], or -1. Loose on purpose: json.loads parses the rest of
   the file, and the two values found here are parsed strictly (vocab_json, json_merges). */
static Py_ssize_t skip_value(const uint8_t *p, Py_ssize_t n, Py_ssize_t i, int depth) {
    if (i >= n || depth > 100) return -1;
    if (p[i] == '"') {
        for (i++; i < n && p[i] != '"'; i++)
            if (p[i] == '\\') i++;
        return i < n ? i + 1 : -1;
    }
    if (p[i] == '[' || p[i] == '{') {
        uint8_t close = p[i] == '[' ? ']' : '}';
        i = skip_ws(p, n, i + 1);
        if (i < n && p[i] == close) return i + 1;
        for (;;) {
            if (close == '}') { /* a key, then ':' */
                if (i >= n || p[i] != '"' || (i = skip_value(p, n, i, depth)) < 0) return -1;
                if ((i = skip_ws(p, n, i)) >= n || p[i] != ':') return -1;
                i = skip_ws(p, n, i + 1);
            }
            if ((i = skip_value(p, n, i, depth + 1)) < 0) return -1;
            i = skip_ws(p, n, i);
            if (i >= n || p[i] != ',') return i < n && p[i] == close ? i + 1 : -1;
            i = skip_ws(p, n, i + 1);
        }
    }
    Py_ssize_t start = i; /* a number, true, false or null: letters, digits, - + . */
    while (i < n && (((p[i] | 32) >= 'a' && (p[i] | 32) <= 'z') || (p[i] >= '0' && p[i] <= '9') ||
                     p[i] == '-' || p[i] == '+' || p[i] == '.'))
        i++;
    return i > start ? i : -1;
}

/* Walks the object at p[i]: at level 0 (the file) into the value of "model", at level 1 (the
   model) noting where the values of "vocab" (span[0:2]) and "merges" (span[2:4]) lie. Its end,
   or -1 where it is no object, a key there has an escape (json would decode it) or one of
   those keys is there twice (json would keep the last). */
static Py_ssize_t model_values(const uint8_t *p, Py_ssize_t n, Py_ssize_t i, int level, Py_ssize_t *span) {
    static const char *const NAMES[2][2] = {{"model", NULL}, {"vocab", "merges"}};
    int seen = 0;
    if (i >= n || p[i] != '{') return -1;
    i = skip_ws(p, n, i + 1);
    if (i < n && p[i] == '}') return i + 1;
    for (;;) {
        if (i >= n || p[i] != '"') return -1;
        Py_ssize_t key = i + 1, end = skip_value(p, n, i, 0), length = end - 1 - key, value;
        if (end < 0 || memchr(p + key, '\\', length)) return -1;
        int which = -1;
        for (int k = 0; k < 2; k++) {
            const char *name = NAMES[level][k];
            if (name && (Py_ssize_t)strlen(name) == length && memcmp(p + key, name, length) == 0) which = k;
        }
        if (which >= 0 && (seen & (1 << which))) return -1;
        seen |= which >= 0 ? 1 << which : 0;
        if ((i = skip_ws(p, n, end)) >= n || p[i] != ':') return -1;
        value = i = skip_ws(p, n, i + 1);
        if (which >= 0 && level == 0) i = model_values(p, n, i, 1, span);
        else i = skip_value(p, n, i, 0);
        if (i < 0) return -1;
        if (which >= 0 && level == 1) span[2 * which] = value, span[2 * which + 1] = i;
        i = skip_ws(p, n, i);
        if (i >= n || p[i] != ',') return i < n && p[i] == '}' ? i + 1 : -1;
        i = skip_ws(p, n, i + 1);
    }
}

/* tokenizer.json bytes -> (vocab start, end, merges start, end): where the values of
   "model" -> "vocab" and "merges" lie, or None (not found once each, see model_values). */
static PyObject *json_model_spans(PyObject *self, PyObject *args) {
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "y*", &buf)) return NULL;
    const uint8_t *p = buf.buf;
    Py_ssize_t n = buf.len, span[4] = {-1, -1, -1, -1};
    Py_ssize_t end = model_values(p, n, skip_ws(p, n, 0), 0, span);
    int found = end >= 0 && skip_ws(p, n, end) == n && span[0] >= 0 && span[2] >= 0;
    PyBuffer_Release(&buf);
    if (!found) Py_RETURN_NONE;
    return Py_BuildValue("(nnnn)", span[0], span[1], span[2], span[3]);
}

/* The JSON string at p[*i] appended to out[*m:] with `sep` after it (then past white space);
   -1 where merge_ids would read the line otherwise than the Python path: an empty string, a
   newline, a space in a pair's part. */
static int merge_part(const uint8_t *p, Py_ssize_t n, Py_ssize_t *i, uint8_t *out, Py_ssize_t *m,
                      uint8_t sep, int in_pair) {
    Py_ssize_t k = *i < n && p[*i] == '"' ? json_string(p, n, i, out + *m) : -1;
    if (k <= 0 || memchr(out + *m, '\n', k) || (in_pair && memchr(out + *m, ' ', k))) return -1;
    *m += k, out[(*m)++] = sep;
    *i = skip_ws(p, n, *i);
    return 0;
}

/* A tokenizer.json's merges (a JSON array of "left right" strings or [left, right] pairs)
   -> merges.txt's lines ("left right\n"), or None for anything else. No line is longer than
   the JSON it came from. */
static PyObject *json_merges(PyObject *self, PyObject *args) {
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "y*", &buf)) return NULL;
    const uint8_t *p = buf.buf;
    Py_ssize_t n = buf.len, m = 0, i = skip_ws(p, n, 0);
    uint8_t *out = malloc(n + 1);
    PyObject *result = NULL;
    if (!out) {
        PyErr_NoMemory();
        goto out;
    }
    if (i >= n || p[i] != '[') goto refuse;
    i = skip_ws(p, n, i + 1);
    while (i < n && p[i] != ']') {
        if (p[i] == '[') { /* [left, right] */
            i = skip_ws(p, n, i + 1);
            if (merge_part(p, n, &i, out, &m, ' ', 1) < 0 || i >= n || p[i] != ',') goto refuse;
            i = skip_ws(p, n, i + 1);
            if (merge_part(p, n, &i, out, &m, '\n', 1) < 0 || i >= n || p[i] != ']') goto refuse;
            i = skip_ws(p, n, i + 1);
        } else if (merge_part(p, n, &i, out, &m, '\n', 0) < 0)
            goto refuse;
        if (i < n && p[i] == ',') {
            i = skip_ws(p, n, i + 1);
            if (i >= n || p[i] == ']') goto refuse; /* a trailing comma */
        } else if (i >= n || p[i] != ']')
            goto refuse;
    }
    if (i >= n || skip_ws(p, n, i + 1) != n) goto refuse;
    result = PyBytes_FromStringAndSize((char *)out, m);
    goto out;
refuse:
    Py_INCREF(Py_None);
    result = Py_None;
out:
    free(out);
    PyBuffer_Release(&buf);
    return result;
}

static PyMethodDef methods[] = {
    {"vocab_json", vocab_json, METH_VARARGS, "vocab.json bytes, specials (UTF-8) -> table or None"},
    {"vocab_dict", vocab_dict, METH_VARARGS, "{text: id}, specials -> table or None"},
    {"merge_ids", merge_ids, METH_VARARGS, "table, special ids, merges.txt body -> ids or None"},
    {"tiktoken_ranks", load_tiktoken_ranks, METH_VARARGS, "tiktoken's ranks giving these ids, or None"},
    {"serialize", load_serialize, METH_VARARGS, "length-prefixed tokens (of indices) for the digest"},
    {"tiktoken_file", load_tiktoken_file, METH_VARARGS,
     ".tiktoken bytes -> (table, byte ids, merges, ranks or None) or None"},
    {"split", load_split, METH_VARARGS, "blob, int64 ends -> the tokens (tables.py's file)"},
    {"join", load_join, METH_VARARGS, "the tokens -> blob, int64 ends (split's inverse)"},
    {"json_model_spans", json_model_spans, METH_VARARGS,
     "tokenizer.json bytes -> where model.vocab and model.merges lie, or None"},
    {"json_merges", json_merges, METH_VARARGS, "a tokenizer.json's merges -> merges.txt lines or None"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_load",
                                    "Loading byte-level BPE files in C.", -1, methods};

PyMODINIT_FUNC PyInit__load(void) {
    init_byte_map();
    return PyModule_Create(&module);
}
