/*
 * codec_bench.c — our PREDICT encoding (docs/wire.md) against protobuf-c and
 * JSON (jansson) on the same request: encoded size and decode time per
 * feature.  A program that prints figures; it fails only when a decoder
 * gives back different ids than were encoded, never on timing.
 *
 * THE REQUEST is the wire spec's standard request by default: 200 items, one
 * shared block of 300 features and 200 features per item, binary values
 * (--values adds an f32 per feature).  Ids come from codec_feature_id over
 * the 39 Criteo fields with random raw values (the same generator and seed as
 * tests/codec/codec_test_util.h, whose first request in test_predict.c is
 * this one, so the frame size matches the figure quoted in docs/wire.md),
 * sorted and unique per block.
 *
 * THE CONTESTANTS, each decoding the whole request into arrays of ids a
 * scorer could read, and giving its memory back:
 *
 *   ours        codec_decode_predict into a preallocated bump arena (reset per
 *               request, as the server does); bytes = payload, without the
 *               24-byte frame header (the others carry no framing either).
 *   protobuf-c  request.proto, the library's normal path:
 *               protobuf_c_message_unpack with the default (malloc) allocator,
 *               then protobuf_c_message_free_unpacked.  Three id encodings:
 *                 fixed64  packed fixed64 ids — REPORTED: the smallest and the
 *                          fastest of protobuf's own id encodings;
 *                 uint64   packed varint of the raw ids (9 bytes each);
 *                 delta    packed varint of sorted deltas (our trick inside
 *                          protobuf; the prefix sum is part of the decode).
 *   JSON        {"model":..,"version":..,"shared":{"ids":[..]},"items":[{"ids":
 *               [..]},..]} with "values":[..] per block under --values; ids are
 *               JSON integers holding the id reinterpreted as signed 64-bit
 *               (jansson's json_int_t is long long; for fields 0..127, so for
 *               every Criteo id, that is the id itself, though above 2^53: a
 *               parser that reads numbers as doubles would round them).
 *               Decode = json_loadb + walking the tree into flat arrays of ids
 *               and values + json_decref.
 *
 * TIMING: each decoder runs back to back for at least --min-ms (500 ms) per
 * run, five runs, best run kept (least disturbed by the rest of the host).
 * Before the runs and after each, one more decode is compared with the
 * request id for id, value for value (a mismatch exits 1).  Every timed
 * decode's status is checked too.
 *
 * THREAD SAFETY: a program; single-threaded.
 */
#include "codec/codec.h"
#include "request.pb-c.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RUNS 5
#define MODEL_NAME "criteo-lr_v2.1"
#define MODEL_VERSION 42

static const char usage[] =
    "usage: codec_bench [--items 200] [--shared 300] [--per-item 200] [--values] [--json]\n"
    "                   [--min-ms 500]\n"
    "Encodes one PREDICT request (default: the standard request, binary values) in our\n"
    "wire format, protobuf-c and JSON, and prints the encoded bytes and the decode time\n"
    "per feature of each (best of 5 runs of at least --min-ms of decodes each).\n"
    "  --values   give every feature an f32 value\n"
    "  --json     end with one JSON line: ours_bytes, ours_decode_ns_per_feature,\n"
    "             protobuf_bytes, protobuf_decode_ns_per_feature, json_bytes,\n"
    "             json_decode_ns_per_feature (protobuf = packed fixed64 ids)\n";

__attribute__((cold, noreturn, format(printf, 1, 2))) static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("codec_bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        die("out of memory (%zu bytes)", n);
    return p;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- the request ------------------------------------------------------------------------- */

static uint64_t rng = 0x243f6a8885a308d3u; /* as tests/codec/codec_test_util.h */

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* n features hashed from random raw values over the 39 Criteo fields, sorted
 * unique; values when with_values.  The block owns its arrays (heap). */
static codec_block_t make_block(uint32_t n, bool with_values)
{
    uint64_t *ids = xmalloc(n * sizeof *ids);
    float *values = with_values ? xmalloc(n * sizeof *values) : NULL;
    for (uint32_t i = 0; i < n; i++) {
        char raw[24];
        int len = snprintf(raw, sizeof raw, "%llx", (unsigned long long)next());
        ids[i] = codec_feature_id((uint8_t)(i % 39), raw, (size_t)len);
        if (with_values)
            values[i] = (float)(next() % 1000) / 100.0f - 5.0f;
    }
    return (codec_block_t){.ids = ids, .values = values, .n = codec_sort_unique(ids, values, n)};
}

/* ---- checking a decode against the request ------------------------------------------------ */

static void check_block(const char *who, long index, size_t n, const uint64_t *ids, size_t n_values,
                        const float *values, const codec_block_t *want)
{
    char where[32];
    if (index < 0)
        snprintf(where, sizeof where, "shared block");
    else
        snprintf(where, sizeof where, "item[%ld]", index);
    if (n != want->n)
        die("%s: %s decoded %zu ids, %u were encoded", who, where, n, want->n);
    for (size_t i = 0; i < n; i++)
        if (ids[i] != want->ids[i])
            die("%s: %s id[%zu] decoded 0x%016llx, encoded 0x%016llx", who, where, i,
                (unsigned long long)ids[i], (unsigned long long)want->ids[i]);
    if (!want->values) {
        if (values && n_values)
            die("%s: %s decoded %zu values from a binary block", who, where, n_values);
        return;
    }
    if (n_values != want->n || (want->n && !values))
        die("%s: %s decoded %zu values, %u were encoded", who, where, values ? n_values : 0,
            want->n);
    if (want->n && memcmp(values, want->values, want->n * sizeof(float)) != 0)
        die("%s: %s decoded values differ from the encoded ones", who, where);
}

static void check_head(const char *who, const char *model, uint64_t version, size_t items,
                       const codec_predict_t *want)
{
    if (!model || strcmp(model, want->name) != 0)
        die("%s: model name decoded as '%s', encoded '%s'", who, model ? model : "(none)",
            want->name);
    if (version != want->version)
        die("%s: version decoded as %llu, encoded %llu", who, (unsigned long long)version,
            (unsigned long long)want->version);
    if (items != want->items)
        die("%s: %zu items decoded, %u encoded", who, items, want->items);
}

/* ---- the contestants ---------------------------------------------------------------------
 * Each has an encoded buffer, a decode that keeps its result, a release that
 * frees it (timed along with the decode), and a check of the kept result. */

struct contestant {
    const char *name; /* for the table and errors */
    uint8_t *buf;     /* the encoded request (owned) */
    size_t len;       /* its bytes */
    void (*decode)(struct contestant *c);
    void (*release)(struct contestant *c);
    void (*check)(struct contestant *c, const codec_predict_t *want);
    double best_ns; /* best run: ns per feature */
    /* decoder state */
    codec_arena_t arena;  /* ours: the per-request arena */
    codec_predict_t ours; /* ours: the decoded request (points into arena) */
    void *pb;             /* protobuf: the unpacked message */
    json_t *root;         /* JSON: the parsed document */
    uint64_t *jids;       /* JSON: every id, blocks one after the other */
    float *jvals;         /* JSON: every value, likewise */
    size_t *jn;           /* JSON: id count of block k (0 = shared) */
    size_t *jnv;          /* JSON: value count of block k */
    size_t cap;           /* JSON: room in jids/jvals (features) */
    size_t blocks;        /* JSON: room in jn/jnv */
};

/* ours */

static void ours_decode(struct contestant *c)
{
    codec_error_t err;
    codec_arena_reset(&c->arena);
    int rc = codec_decode_predict(c->buf, c->len, 0, &c->arena, &c->ours, &err);
    if (rc != CODEC_OK)
        die("ours: decode failed: %s: %s", codec_errc_name(rc), err.msg);
}

static void ours_release(struct contestant *c)
{
    (void)c; /* the arena is reset by the next decode */
}

static void ours_check(struct contestant *c, const codec_predict_t *want)
{
    const codec_predict_t *p = &c->ours;
    check_head(c->name, p->name, p->version, p->items, want);
    const codec_block_t *b = &p->shared;
    check_block(c->name, -1, b->n, b->ids, b->values ? b->n : 0, b->values, &want->shared);
    for (uint32_t i = 0; i < p->items; i++) {
        b = &p->item[i];
        check_block(c->name, i, b->n, b->ids, b->values ? b->n : 0, b->values, &want->item[i]);
    }
}

/* protobuf-c, packed fixed64 ids */

static void pb64_decode(struct contestant *c)
{
    c->pb = tlbench__predict__unpack(NULL, c->len, c->buf);
    if (!c->pb)
        die("%s: protobuf_c_message_unpack failed", c->name);
}

static void pb64_release(struct contestant *c)
{
    tlbench__predict__free_unpacked(c->pb, NULL);
    c->pb = NULL;
}

static void pb64_check(struct contestant *c, const codec_predict_t *want)
{
    const Tlbench__Predict *m = c->pb;
    check_head(c->name, m->model, m->version, m->n_items, want);
    if (!m->shared)
        die("%s: no shared block", c->name);
    check_block(c->name, -1, m->shared->n_ids, m->shared->ids, m->shared->n_values,
                m->shared->values, &want->shared);
    for (size_t i = 0; i < m->n_items; i++) {
        const Tlbench__Block *b = m->items[i];
        check_block(c->name, (long)i, b->n_ids, b->ids, b->n_values, b->values, &want->item[i]);
    }
}

/* protobuf-c, packed varint ids: raw, or sorted deltas summed after unpack */

static void pbvar_decode(struct contestant *c)
{
    c->pb = tlbench__var_predict__unpack(NULL, c->len, c->buf);
    if (!c->pb)
        die("%s: protobuf_c_message_unpack failed", c->name);
}

/* Turns one block's deltas into ids, refusing what our decoder refuses (a
 * zero delta after the first, a sum past 64 bits), so both do the same work. */
static void undelta(const char *who, Tlbench__VarBlock *b)
{
    uint64_t id = 0;
    for (size_t i = 0; i < b->n_ids; i++) {
        uint64_t d = b->ids[i];
        if (__builtin_expect(i > 0 && (d == 0 || id + d < id), 0))
            die("%s: delta[%zu] is 0 or overflows", who, i);
        id += d;
        b->ids[i] = id;
    }
}

static void pbdelta_decode(struct contestant *c)
{
    pbvar_decode(c);
    Tlbench__VarPredict *m = c->pb;
    if (!m->shared)
        die("%s: no shared block", c->name);
    undelta(c->name, m->shared);
    for (size_t i = 0; i < m->n_items; i++)
        undelta(c->name, m->items[i]);
}

static void pbvar_release(struct contestant *c)
{
    tlbench__var_predict__free_unpacked(c->pb, NULL);
    c->pb = NULL;
}

static void pbvar_check(struct contestant *c, const codec_predict_t *want)
{
    const Tlbench__VarPredict *m = c->pb;
    check_head(c->name, m->model, m->version, m->n_items, want);
    if (!m->shared)
        die("%s: no shared block", c->name);
    check_block(c->name, -1, m->shared->n_ids, m->shared->ids, m->shared->n_values,
                m->shared->values, &want->shared);
    for (size_t i = 0; i < m->n_items; i++) {
        const Tlbench__VarBlock *b = m->items[i];
        check_block(c->name, (long)i, b->n_ids, b->ids, b->n_values, b->values, &want->item[i]);
    }
}

/* JSON */

/* Reads block object o ("ids", optional "values") into the flat arrays at
 * *at; the block's counts go to jn[k] and jnv[k]. */
static void json_block(struct contestant *c, const json_t *o, size_t k, size_t *at)
{
    const json_t *ids = json_object_get(o, "ids");
    if (!json_is_array(ids))
        die("%s: block %zu has no \"ids\" array", c->name, k);
    size_t n = json_array_size(ids);
    if (n > c->cap - *at)
        die("%s: more ids than were encoded", c->name);
    uint64_t *out = c->jids + *at;
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(ids, i);
        if (!json_is_integer(v))
            die("%s: block %zu id[%zu] is not an integer", c->name, k, i);
        out[i] = (uint64_t)json_integer_value(v);
    }
    c->jn[k] = n;
    c->jnv[k] = 0;
    const json_t *vals = json_object_get(o, "values");
    if (vals) {
        size_t nv = json_array_size(vals);
        if (!json_is_array(vals) || nv != n)
            die("%s: block %zu \"values\" is not an array of %zu numbers", c->name, k, n);
        float *fv = c->jvals + *at;
        for (size_t i = 0; i < nv; i++) {
            const json_t *v = json_array_get(vals, i);
            if (!json_is_number(v))
                die("%s: block %zu value[%zu] is not a number", c->name, k, i);
            fv[i] = (float)json_number_value(v);
        }
        c->jnv[k] = nv;
    }
    *at += n;
}

static void json_decode(struct contestant *c)
{
    json_error_t err;
    c->root = json_loadb((const char *)c->buf, c->len, 0, &err);
    if (!c->root)
        die("%s: json_loadb: %s at line %d column %d", c->name, err.text, err.line, err.column);
    const json_t *items = json_object_get(c->root, "items");
    if (!json_is_array(items) || json_array_size(items) + 1 > c->blocks)
        die("%s: \"items\" is not an array of at most %zu blocks", c->name, c->blocks - 1);
    const json_t *shared = json_object_get(c->root, "shared");
    if (!json_is_object(shared))
        die("%s: \"shared\" is not an object", c->name);
    size_t at = 0;
    json_block(c, shared, 0, &at);
    for (size_t i = 0; i < json_array_size(items); i++)
        json_block(c, json_array_get(items, i), i + 1, &at);
}

static void json_release(struct contestant *c)
{
    json_decref(c->root);
    c->root = NULL;
}

static void json_check(struct contestant *c, const codec_predict_t *want)
{
    const json_t *model = json_object_get(c->root, "model");
    const json_t *version = json_object_get(c->root, "version");
    if (!json_is_integer(version))
        die("%s: \"version\" is not an integer", c->name);
    check_head(c->name, json_string_value(model), (uint64_t)json_integer_value(version),
               json_array_size(json_object_get(c->root, "items")), want);
    size_t at = 0;
    for (size_t k = 0; k <= want->items; k++) {
        const codec_block_t *w = k ? &want->item[k - 1] : &want->shared;
        check_block(c->name, (long)k - 1, c->jn[k], c->jids + at, c->jnv[k], c->jvals + at, w);
        at += c->jn[k];
    }
}

/* ---- encoders ------------------------------------------------------------------------------ */

/* Our PREDICT frame; c gets the payload (the frame header is counted apart). */
static size_t encode_ours(struct contestant *c, const codec_predict_t *p)
{
    size_t len = 0;
    codec_error_t err;
    int rc = codec_encode_predict(NULL, 0, 1, p, &len, &err);
    if (rc != CODEC_NEED_MORE)
        die("ours: cannot size the request: %s: %s", codec_errc_name(rc), err.msg);
    uint8_t *frame = xmalloc(len);
    if ((rc = codec_encode_predict(frame, len, 1, p, &len, &err)) != CODEC_OK)
        die("ours: encode failed: %s: %s", codec_errc_name(rc), err.msg);
    c->len = len - CODEC_HEADER_SIZE;
    c->buf = xmalloc(c->len);
    memcpy(c->buf, frame + CODEC_HEADER_SIZE, c->len);
    free(frame);
    c->arena.cap = codec_arena_bound(c->len);
    c->arena.base = xmalloc(c->arena.cap);
    return len;
}

static void encode_pb64(struct contestant *c, const codec_predict_t *p)
{
    Tlbench__Block *blk = xmalloc((p->items + 1) * sizeof *blk);
    Tlbench__Block **items = xmalloc(p->items * sizeof *items);
    for (uint32_t k = 0; k <= p->items; k++) {
        const codec_block_t *b = k ? &p->item[k - 1] : &p->shared;
        tlbench__block__init(&blk[k]);
        blk[k].n_ids = b->n;
        blk[k].ids = (uint64_t *)b->ids; /* protobuf-c's non-const view, only read */
        blk[k].n_values = b->values ? b->n : 0;
        blk[k].values = (float *)b->values;
        if (k)
            items[k - 1] = &blk[k];
    }
    Tlbench__Predict m = TLBENCH__PREDICT__INIT;
    m.model = (char *)p->name;
    m.version = p->version;
    m.shared = &blk[0];
    m.n_items = p->items;
    m.items = items;
    c->len = tlbench__predict__get_packed_size(&m);
    c->buf = xmalloc(c->len);
    if (tlbench__predict__pack(&m, c->buf) != c->len)
        die("%s: pack wrote an unexpected size", c->name);
    free(items);
    free(blk);
}

/* delta: ids as sorted deltas (delta[0] = id[0]) instead of raw ids. */
static void encode_pbvar(struct contestant *c, const codec_predict_t *p, bool delta)
{
    size_t total = 0;
    for (uint32_t k = 0; k <= p->items; k++)
        total += k ? p->item[k - 1].n : p->shared.n;
    uint64_t *d = xmalloc(total * sizeof *d);
    Tlbench__VarBlock *blk = xmalloc((p->items + 1) * sizeof *blk);
    Tlbench__VarBlock **items = xmalloc(p->items * sizeof *items);
    size_t at = 0;
    for (uint32_t k = 0; k <= p->items; k++) {
        const codec_block_t *b = k ? &p->item[k - 1] : &p->shared;
        tlbench__var_block__init(&blk[k]);
        blk[k].n_ids = b->n;
        blk[k].ids = d + at;
        for (uint32_t i = 0; i < b->n; i++)
            d[at + i] = delta && i ? b->ids[i] - b->ids[i - 1] : b->ids[i];
        at += b->n;
        blk[k].n_values = b->values ? b->n : 0;
        blk[k].values = (float *)b->values; /* protobuf-c's non-const view, only read */
        if (k)
            items[k - 1] = &blk[k];
    }
    Tlbench__VarPredict m = TLBENCH__VAR_PREDICT__INIT;
    m.model = (char *)p->name;
    m.version = p->version;
    m.shared = &blk[0];
    m.n_items = p->items;
    m.items = items;
    c->len = tlbench__var_predict__get_packed_size(&m);
    c->buf = xmalloc(c->len);
    if (tlbench__var_predict__pack(&m, c->buf) != c->len)
        die("%s: pack wrote an unexpected size", c->name);
    free(items);
    free(blk);
    free(d);
}

static json_t *json_of_block(const codec_block_t *b)
{
    json_t *o = json_object(), *ids = json_array();
    if (!o || !ids)
        die("json: out of memory");
    for (uint32_t i = 0; i < b->n; i++)
        if (json_array_append_new(ids, json_integer((json_int_t)(int64_t)b->ids[i])))
            die("json: out of memory");
    json_object_set_new(o, "ids", ids);
    if (b->values) {
        json_t *vals = json_array();
        if (!vals)
            die("json: out of memory");
        for (uint32_t i = 0; i < b->n; i++)
            if (json_array_append_new(vals, json_real(b->values[i])))
                die("json: out of memory");
        json_object_set_new(o, "values", vals);
    }
    return o;
}

static void encode_json(struct contestant *c, const codec_predict_t *p, size_t total)
{
    json_t *root = json_object(), *items = json_array();
    if (!root || !items)
        die("json: out of memory");
    json_object_set_new(root, "model", json_string(p->name));
    json_object_set_new(root, "version", json_integer((json_int_t)p->version));
    json_object_set_new(root, "shared", json_of_block(&p->shared));
    for (uint32_t i = 0; i < p->items; i++)
        json_array_append_new(items, json_of_block(&p->item[i]));
    json_object_set_new(root, "items", items);
    /* compact separators; 9 significant digits bring every f32 back exactly */
    char *s = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(9));
    if (!s)
        die("json: json_dumps failed");
    c->len = strlen(s);
    c->buf = (uint8_t *)s;
    json_decref(root);
    c->cap = total;
    c->blocks = (size_t)p->items + 1;
    c->jids = xmalloc(total * sizeof *c->jids);
    c->jvals = xmalloc(total * sizeof *c->jvals);
    c->jn = xmalloc(c->blocks * sizeof *c->jn);
    c->jnv = xmalloc(c->blocks * sizeof *c->jnv);
}

/* ---- timing -------------------------------------------------------------------------------- */

/* One checked decode: a mismatch exits. */
static void verify(struct contestant *c, const codec_predict_t *want)
{
    c->decode(c);
    c->check(c, want);
    c->release(c);
}

/* RUNS runs of back-to-back decode + release for at least min_ns each; the
 * best run's ns per feature goes to c->best_ns. */
static void time_decoder(struct contestant *c, const codec_predict_t *want, size_t features,
                         uint64_t min_ns)
{
    verify(c, want); /* also warms caches and the allocator */
    c->best_ns = 0;
    for (int run = 0; run < RUNS; run++) {
        uint64_t reps = 0, t0 = now_ns(), t;
        do {
            c->decode(c);
            c->release(c);
            reps++;
            t = now_ns();
        } while (t - t0 < min_ns);
        double ns = (double)(t - t0) / (double)reps / (double)features;
        if (run == 0 || ns < c->best_ns)
            c->best_ns = ns;
        verify(c, want);
    }
}

/* ---- main -------------------------------------------------------------------------------- */

static long long arg_num(const char *flag, const char *v, long long lo, long long hi)
{
    char *end;
    errno = 0;
    long long x = v ? strtoll(v, &end, 10) : 0;
    if (!v || errno || *end || x < lo || x > hi) {
        fprintf(stderr, "codec_bench: %s needs a number in %lld..%lld\n%s", flag, lo, hi, usage);
        exit(2);
    }
    return x;
}

int main(int argc, char **argv)
{
    long long items = 200, shared = 300, per_item = 200, min_ms = 500;
    bool values = false, json_out = false;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            fputs(usage, stdout);
            return 0;
        } else if (!strcmp(f, "--values")) {
            values = true;
        } else if (!strcmp(f, "--json")) {
            json_out = true;
        } else if (!strcmp(f, "--items")) {
            items = arg_num(f, v, 1, CODEC_MAX_ITEMS);
            i++;
        } else if (!strcmp(f, "--shared")) {
            shared = arg_num(f, v, 0, CODEC_MAX_BLOCK_FEATURES);
            i++;
        } else if (!strcmp(f, "--per-item")) {
            per_item = arg_num(f, v, 0, CODEC_MAX_BLOCK_FEATURES);
            i++;
        } else if (!strcmp(f, "--min-ms")) {
            min_ms = arg_num(f, v, 0, 60000);
            i++;
        } else {
            fprintf(stderr, "codec_bench: unknown option '%s'\n%s", f, usage);
            return 2;
        }
    }
    if (shared + items * per_item == 0) {
        fprintf(stderr,
                "codec_bench: a request with no features has nothing to time per feature\n");
        return 2;
    }
    if (shared + items * per_item > (long long)CODEC_MAX_REQUEST_FEATURES) {
        fprintf(stderr, "codec_bench: %lld features per request is over the wire limit %u\n",
                shared + items * per_item, CODEC_MAX_REQUEST_FEATURES);
        return 2;
    }

    codec_predict_t req = {.version = MODEL_VERSION, .items = (uint32_t)items};
    snprintf(req.name, sizeof req.name, "%s", MODEL_NAME);
    req.shared = make_block((uint32_t)shared, values);
    req.item = xmalloc(req.items * sizeof *req.item);
    size_t features = req.shared.n;
    for (uint32_t i = 0; i < req.items; i++) {
        req.item[i] = make_block((uint32_t)per_item, values);
        features += req.item[i].n;
    }

    enum {
        OURS,
        PB64,
        PBVAR,
        PBDELTA,
        JSON,
        N
    };
    struct contestant c[N] = {
        [OURS] = {"ours (TLW1 PREDICT payload)", .decode = ours_decode, .release = ours_release,
                  .check = ours_check},
        [PB64] = {"protobuf-c, packed fixed64 ids", .decode = pb64_decode, .release = pb64_release,
                  .check = pb64_check},
        [PBVAR] = {"protobuf-c, packed uint64 ids", .decode = pbvar_decode,
                   .release = pbvar_release, .check = pbvar_check},
        [PBDELTA] = {"protobuf-c, packed uint64 deltas", .decode = pbdelta_decode,
                     .release = pbvar_release, .check = pbvar_check},
        [JSON] = {"JSON (jansson), int64 ids", .decode = json_decode, .release = json_release,
                  .check = json_check},
    };
    size_t frame = encode_ours(&c[OURS], &req);
    encode_pb64(&c[PB64], &req);
    encode_pbvar(&c[PBVAR], &req, false);
    encode_pbvar(&c[PBDELTA], &req, true);
    encode_json(&c[JSON], &req, features);

    printf("codec_bench: %u items, %lld shared + %lld per-item features, %s: %zu features\n"
           "  ids: codec_feature_id over 39 Criteo fields, random raw values, sorted unique "
           "per block\n"
           "  decode: best of %d runs of >= %lld ms back-to-back decodes (+ free), each run "
           "followed by a decode checked id for id\n",
           req.items, shared, per_item, values ? "f32 values" : "binary values", features, RUNS,
           min_ms);
    printf("  %-34s %10s %8s %14s\n", "format", "bytes", "B/feat", "decode ns/feat");
    fflush(stdout);
    for (int k = 0; k < N; k++) {
        time_decoder(&c[k], &req, features, (uint64_t)min_ms * 1000000u);
        printf("  %-34s %10zu %8.2f %14.2f\n", c[k].name, c[k].len,
               (double)c[k].len / (double)features, c[k].best_ns);
        fflush(stdout);
    }
    printf("  ours as a frame (24-byte header + payload): %zu bytes; protobuf reported = packed "
           "fixed64; JSON ids = signed 64-bit reinterpretation as JSON integers\n",
           frame);
    printf("  ours vs protobuf fixed64: %.3fx the bytes, %.2fx the decode time; vs JSON: "
           "%.3fx the bytes, %.2fx the decode time\n",
           (double)c[OURS].len / (double)c[PB64].len, c[OURS].best_ns / c[PB64].best_ns,
           (double)c[OURS].len / (double)c[JSON].len, c[OURS].best_ns / c[JSON].best_ns);
    if (json_out)
        printf("{\"ours_bytes\": %zu, \"ours_decode_ns_per_feature\": %.3f, "
               "\"protobuf_bytes\": %zu, \"protobuf_decode_ns_per_feature\": %.3f, "
               "\"json_bytes\": %zu, \"json_decode_ns_per_feature\": %.3f}\n",
               c[OURS].len, c[OURS].best_ns, c[PB64].len, c[PB64].best_ns, c[JSON].len,
               c[JSON].best_ns);

    for (int k = 0; k < N; k++)
        free(c[k].buf);
    free(c[OURS].arena.base);
    free(c[JSON].jids);
    free(c[JSON].jvals);
    free(c[JSON].jn);
    free(c[JSON].jnv);
    free((void *)req.shared.ids); /* make_block's, cast back from the block's const view */
    free((void *)req.shared.values);
    for (uint32_t i = 0; i < req.items; i++) {
        free((void *)req.item[i].ids);
        free((void *)req.item[i].values);
    }
    free(req.item);
    return 0;
}
