/*
 * update_acc.c — the producer side of sparse updates: an accumulator of
 * per-key additive statistics and the top-k encoder (1 or 4 bits a value)
 * that drains it (update_codec.h has the contract and the message layout).
 *
 * Layout: the keys held sit densely in keys[0..n) and vals[0..n*K); an
 * open-addressing index (linear probing, power-of-two slots, load <= 3/4)
 * maps a key to its dense position + 1 (0 = empty).  All of it, and the
 * encoder's scratch, is allocated once for max_keys keys, so add and encode
 * never allocate:
 *
 *     slots[cap]     u32  dense index + 1            (4 B x 1.34 a key)
 *     keys[max]      u64                             (8 B)
 *     vals[max][K]   f32  the residual               (4K B)
 *     scratch        {mag, idx}, 2 x {key, idx}, column  (8 + 32 + 4 B)
 *     hist[4][65536] u32  radix sort counts           (1 MB per accumulator)
 *
 * A key whose residual becomes exactly 0 after an encode leaves: the index
 * uses backward-shift deletion (no tombstones, so probes stay short however
 * many keys come and go) and the last dense entry moves into the hole.
 *
 * Selection: magnitude = sum_j w_j |v_j| / mean_j (mean_j over the keys
 * held), so each column counts relative to its own typical size (FTRL's n
 * is a sum of squared gradients, far larger than z's typical entry).  In a
 * LOG4 message the one-sided columns (NONNEG_LAST, NONNEG_HALF: n,
 * Adagrad's G, the optimizers' step-size sums) get w_j = 1/1024, so they
 * only order keys whose other columns tie: the keys go out by what moves
 * the weights (z, the gradient sums), and each key's sums go out with it,
 * within 2x of their size.  In 1 bit (w_j = 1) the sums go out as 0 or
 * their chunk's mean and their residuals must compete for a place, or they
 * pile up: there the same weighting made 4 replicas worse
 * (loadgen/sync_bench.py, docs/performance.md).  The top k come from a
 * quickselect (O(n)), then are sorted by key for the delta varints (radix,
 * O(k)).
 *
 * THREAD SAFETY
 *   One thread (the trainer) owns an accumulator; nothing locks.
 */
#include "model/update_codec_impl.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* A one-sided column's weight in a LOG4 message's selection: ties only. */
#define ONESIDED_WEIGHT (1.0 / 1024)

struct mag_idx {
    float mag;    /* selection magnitude */
    uint32_t idx; /* dense index */
};

struct key_idx {
    uint64_t key;
    uint32_t idx;
};

struct update_acc {
    uint32_t k;            /* values per key */
    uint32_t max_keys;     /* capacity of the dense arrays */
    uint32_t n;            /* keys held */
    uint32_t mask;         /* slots - 1 */
    uint32_t *slots;       /* dense index + 1, 0 = empty */
    uint64_t *keys;        /* [max_keys] */
    float *vals;           /* [max_keys * k] residuals */
    struct mag_idx *mags;  /* encode scratch [max_keys] */
    struct key_idx *sel;   /* encode scratch [max_keys] */
    struct key_idx *tmp;   /* encode scratch [max_keys]: radix sort's other half */
    uint32_t *hist;        /* encode scratch [4][65536]: radix sort's digit counts */
    float *col;            /* encode scratch [max_keys] */
    double *colmean;       /* encode scratch [k] */
    uint64_t producer;     /* in every message */
    uint64_t next_seq;     /* sequence of the next message */
    uint32_t chunk;        /* values per scale */
    size_t name_len;
    char model[UPDATE_NAME_MAX];
};

static inline uint32_t home_of(const update_acc_t *a, uint64_t key)
{
    return (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> 32) & a->mask;
}

int update_acc_create(update_acc_t **out, const update_acc_config_t *cfg)
{
    size_t name_len;
    if (!cfg || cfg->k == 0 || cfg->k > UPDATE_MAX_K || cfg->max_keys == 0 || cfg->max_keys > UPDATE_MAX_COUNT ||
        cfg->chunk == 0 || cfg->chunk > 0xffff || update__name_check(cfg->model, &name_len))
        return -EINVAL;
    uint64_t cap = 16;
    while (cap * 3 < (uint64_t)cfg->max_keys * 4)
        cap <<= 1;
    update_acc_t *a = calloc(1, sizeof *a);
    if (!a)
        return -ENOMEM;
    a->k = cfg->k;
    a->max_keys = cfg->max_keys;
    a->mask = (uint32_t)(cap - 1);
    a->slots = calloc(cap, sizeof *a->slots);
    a->keys = malloc(sizeof *a->keys * cfg->max_keys);
    a->vals = malloc(sizeof *a->vals * cfg->max_keys * cfg->k);
    a->mags = malloc(sizeof *a->mags * cfg->max_keys);
    a->sel = malloc(sizeof *a->sel * cfg->max_keys);
    a->tmp = malloc(sizeof *a->tmp * cfg->max_keys);
    a->hist = malloc(sizeof *a->hist * 4 * 65536);
    a->col = malloc(sizeof *a->col * cfg->max_keys);
    a->colmean = malloc(sizeof *a->colmean * cfg->k);
    if (!a->slots || !a->keys || !a->vals || !a->mags || !a->sel || !a->tmp || !a->hist || !a->col || !a->colmean) {
        update_acc_destroy(a);
        return -ENOMEM;
    }
    a->producer = cfg->producer;
    a->next_seq = cfg->first_seq;
    a->chunk = cfg->chunk;
    a->name_len = name_len;
    memcpy(a->model, cfg->model, name_len);
    *out = a;
    return 0;
}

void update_acc_destroy(update_acc_t *a)
{
    if (!a)
        return;
    free(a->slots);
    free(a->keys);
    free(a->vals);
    free(a->mags);
    free(a->sel);
    free(a->tmp);
    free(a->hist);
    free(a->col);
    free(a->colmean);
    free(a);
}

uint32_t update_acc_count(const update_acc_t *a) { return a->n; }
uint64_t update_acc_next_seq(const update_acc_t *a) { return a->next_seq; }
void update_acc_set_next_seq(update_acc_t *a, uint64_t seq) { a->next_seq = seq; }

void update_acc_clear(update_acc_t *a)
{
    memset(a->slots, 0, sizeof *a->slots * ((size_t)a->mask + 1));
    a->n = 0;
}

/* The slot holding key, or the empty slot where it would go. */
static uint32_t probe(const update_acc_t *a, uint64_t key)
{
    uint32_t h = home_of(a, key);
    while (a->slots[h] && a->keys[a->slots[h] - 1] != key)
        h = (h + 1) & a->mask;
    return h;
}

const float *update_acc_get(const update_acc_t *a, uint64_t key)
{
    uint32_t s = a->slots[probe(a, key)];
    return s ? a->vals + (size_t)(s - 1) * a->k : NULL;
}

int update_acc_add(update_acc_t *a, uint64_t key, const float *inc)
{
    float sum[UPDATE_MAX_K];
    uint32_t h = probe(a, key);
    uint32_t s = a->slots[h];
    float *v = s ? a->vals + (size_t)(s - 1) * a->k : NULL;
    for (uint32_t j = 0; j < a->k; j++) {
        sum[j] = (v ? v[j] : 0.0f) + inc[j];
        if (!isfinite(sum[j]))
            return -EINVAL;
    }
    if (!s) {
        if (a->n == a->max_keys)
            return -ENOSPC;
        a->keys[a->n] = key;
        a->slots[h] = ++a->n;
        v = a->vals + (size_t)(a->n - 1) * a->k;
    }
    memcpy(v, sum, sizeof(float) * a->k);
    return 0;
}

int update_acc_foreach(const update_acc_t *a, int (*fn)(void *ctx, uint64_t key, const float *vals), void *ctx)
{
    for (uint32_t i = 0; i < a->n; i++) {
        int rc = fn(ctx, a->keys[i], a->vals + (size_t)i * a->k);
        if (rc)
            return rc;
    }
    return 0;
}

uint32_t update_acc_copy(const update_acc_t *a, uint64_t *keys, float *vals)
{
    if (a->n) {
        memcpy(keys, a->keys, (size_t)a->n * sizeof *keys);
        memcpy(vals, a->vals, (size_t)a->n * a->k * sizeof *vals);
    }
    return a->n;
}

/* Remove key (held): backward-shift the probe run over its slot, then move
 * the last dense entry into its hole. */
static void remove_key(update_acc_t *a, uint64_t key)
{
    uint32_t i = probe(a, key);
    uint32_t d = a->slots[i] - 1;
    for (uint32_t j = i;;) {
        j = (j + 1) & a->mask;
        if (!a->slots[j])
            break;
        uint32_t home = home_of(a, a->keys[a->slots[j] - 1]);
        /* the entry at j may fill the hole at i unless its home lies in (i, j] */
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            a->slots[i] = a->slots[j];
            i = j;
        }
    }
    a->slots[i] = 0;
    uint32_t last = a->n - 1;
    if (d != last) {
        a->keys[d] = a->keys[last];
        memcpy(a->vals + (size_t)d * a->k, a->vals + (size_t)last * a->k, sizeof(float) * a->k);
        a->slots[probe(a, a->keys[d])] = d + 1;
    }
    a->n--;
}

/* Put the `top` largest magnitudes of m[0..n) first: quickselect with a
 * three-way partition (> pivot, == pivot, < pivot), so equal magnitudes
 * cannot stall it. */
static void select_top(struct mag_idx *m, uint32_t n, uint32_t top)
{
    uint32_t lo = 0, hi = n; /* the boundary `top` lies in [lo, hi] */
    while (top > lo && top < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        float x = m[lo].mag, y = m[mid].mag, z = m[hi - 1].mag;
        float pivot = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
        uint32_t gt = lo, i = lo, lt = hi; /* [lo,gt) > p, [gt,i) == p, [lt,hi) < p */
        while (i < lt) {
            struct mag_idx t = m[i];
            if (t.mag > pivot) {
                m[i++] = m[gt];
                m[gt++] = t;
            } else if (t.mag < pivot) {
                m[i] = m[--lt];
                m[lt] = t;
            } else {
                i++;
            }
        }
        if (top <= gt)
            hi = gt;
        else if (top >= lt)
            lo = lt;
        else
            return;
    }
}

/* Sort a->sel[0..n) by key: LSD radix, four 16-bit digits, a digit all
 * keys share skipped (O(n), no comparisons; keys are hashed ids). */
static void sort_by_key(update_acc_t *a, uint32_t n)
{
    uint32_t *h = a->hist;
    memset(h, 0, sizeof *h * 4 * 65536);
    for (uint32_t i = 0; i < n; i++)
        for (int d = 0; d < 4; d++)
            h[d * 65536 + ((a->sel[i].key >> (16 * d)) & 0xffff)]++;
    struct key_idx *src = a->sel, *dst = a->tmp;
    for (int d = 0; d < 4; d++) {
        uint32_t *c = h + d * 65536;
        if (n == 0 || c[(src[0].key >> (16 * d)) & 0xffff] == n)
            continue;
        uint32_t sum = 0;
        for (uint32_t v = 0; v < 65536; v++) {
            uint32_t t = c[v];
            c[v] = sum;
            sum += t;
        }
        for (uint32_t i = 0; i < n; i++)
            dst[c[(src[i].key >> (16 * d)) & 0xffff]++] = src[i];
        struct key_idx *t = src;
        src = dst;
        dst = t;
    }
    if (src != a->sel)
        memcpy(a->sel, src, sizeof *src * n);
}

/* Keys an encode with opts would send now; UINT32_MAX for bad opts. */
static uint32_t selected(const update_acc_t *a, const update_encode_opts_t *o)
{
    const uint32_t onesided = UPDATE_F_NONNEG_LAST | UPDATE_F_NONNEG_HALF;
    if (!o || (o->flags & ~(UPDATE_F_EXACT | UPDATE_F_LOG4 | onesided)) ||
        ((o->flags & UPDATE_F_EXACT) && (o->flags & (onesided | UPDATE_F_LOG4))) || (o->flags & onesided) == onesided ||
        ((o->flags & UPDATE_F_NONNEG_HALF) && (a->k & 1)))
        return UINT32_MAX;
    if (o->select_count == UINT32_MAX)
        return a->n;
    if (o->select_count)
        return o->select_count < a->n ? o->select_count : a->n;
    if (!(o->select_fraction >= 0.0f && o->select_fraction <= 1.0f))
        return UINT32_MAX;
    double k = ceil((double)o->select_fraction * a->n);
    return k < a->n ? (uint32_t)k : a->n;
}

size_t update_acc_encode_bound(const update_acc_t *a, const update_encode_opts_t *o)
{
    uint32_t sel = selected(a, o);
    return sel == UINT32_MAX ? 0 : update__msg_bound(sel, a->k, a->chunk, o->flags, a->name_len);
}

long update_acc_encode(update_acc_t *a, const update_encode_opts_t *o, uint8_t *buf, size_t cap)
{
    uint32_t sel = selected(a, o);
    if (sel == UINT32_MAX)
        return -EINVAL;
    if (cap < update__msg_bound(sel, a->k, a->chunk, o->flags, a->name_len))
        return -ENOBUFS;
    const uint32_t k = a->k;

    /* 1. choose: the top `sel` keys by normalised L1 magnitude */
    if (sel < a->n) {
        for (uint32_t j = 0; j < k; j++)
            a->colmean[j] = 0;
        for (uint32_t i = 0; i < a->n; i++)
            for (uint32_t j = 0; j < k; j++)
                a->colmean[j] += fabsf(a->vals[(size_t)i * k + j]);
        for (uint32_t j = 0; j < k; j++) /* w_j / mean_j, 0 for an all-zero column */
            a->colmean[j] = a->colmean[j] > 0 ? (double)a->n / a->colmean[j] *
                            ((o->flags & UPDATE_F_LOG4) && update__onesided(o->flags, k, j)
                                 ? ONESIDED_WEIGHT : 1.0) : 0;
        for (uint32_t i = 0; i < a->n; i++) {
            double m = 0;
            for (uint32_t j = 0; j < k; j++)
                m += fabsf(a->vals[(size_t)i * k + j]) * a->colmean[j];
            a->mags[i] = (struct mag_idx){(float)m, i};
        }
        select_top(a->mags, a->n, sel);
        for (uint32_t i = 0; i < sel; i++)
            a->sel[i] = (struct key_idx){a->keys[a->mags[i].idx], a->mags[i].idx};
    } else {
        for (uint32_t i = 0; i < sel; i++)
            a->sel[i] = (struct key_idx){a->keys[i], i};
    }
    sort_by_key(a, sel);

    /* 2. header and keys: varints (first key, then gaps) or their Rice
     *    code, whichever is shorter (update_keys.c) */
    unsigned rice = update__rice_param(a->sel, sizeof *a->sel, sel);
    uint32_t flags = o->flags;
    if (sel > 0 && update__keys_rice_bytes(a->sel, sizeof *a->sel, sel, rice) <
                       update__keys_varint_bytes(a->sel, sizeof *a->sel, sel))
        flags |= UPDATE_F_RICE;
    size_t name_end = update__write_header(buf, flags, a->producer, a->next_seq, o->base_version, sel, k,
                                           a->chunk, a->model, a->name_len);
    size_t off = name_end;
    if (flags & UPDATE_F_RICE) {
        off += update__put_keys_rice(buf + off, a->sel, sizeof *a->sel, sel, rice);
    } else {
        uint64_t prev = 0;
        for (uint32_t i = 0; i < sel; i++) {
            off += update__put_varint(buf + off, a->sel[i].key - prev);
            prev = a->sel[i].key;
        }
    }

    /* 3. values; what they carry leaves the residuals */
    if (o->flags & UPDATE_F_EXACT) {
        for (uint32_t i = 0; i < sel; i++) {
            float *v = a->vals + (size_t)a->sel[i].idx * k;
            memcpy(buf + off, v, sizeof(float) * k);
            off += sizeof(float) * k;
            memset(v, 0, sizeof(float) * k);
        }
    } else {
        const bool log4 = o->flags & UPDATE_F_LOG4; /* a nibble a value, else a bit */
        size_t nchunks = (sel + (size_t)a->chunk - 1) / a->chunk;
        size_t vbytes = log4 ? ((size_t)k * sel + 1) / 2 : ((size_t)k * sel + 7) / 8;
        uint8_t *bits = buf + off + 4 * nchunks * k;
        memset(bits, 0, vbytes);
        for (uint32_t j = 0; j < k; j++) {
            for (uint32_t i = 0; i < sel; i++)
                a->col[i] = a->vals[(size_t)a->sel[i].idx * k + j];
            uint8_t *scales = buf + off + 4 * nchunks * j;
            bool onesided = update__onesided(o->flags, k, j);
            if (log4)
                update__quantize_log4(a->col, sel, a->chunk, scales, bits, (uint64_t)j * sel, onesided);
            else if (onesided)
                update__quantize_nonneg(a->col, sel, a->chunk, scales, bits, (uint64_t)j * sel);
            else
                update__quantize(a->col, sel, a->chunk, scales, bits, (uint64_t)j * sel);
            for (uint32_t i = 0; i < sel; i++)
                a->vals[(size_t)a->sel[i].idx * k + j] = a->col[i];
        }
        off += 4 * nchunks * k + vbytes;
    }

    /* 4. keys whose residual is exactly 0 leave; removal moves entries, so
     *    first gather them (in sel's own slots), then remove by key */
    uint32_t gone = 0;
    for (uint32_t i = 0; i < sel; i++) {
        const float *v = a->vals + (size_t)a->sel[i].idx * k;
        uint32_t j = 0;
        while (j < k && v[j] == 0.0f)
            j++;
        if (j == k)
            a->sel[gone++].key = a->sel[i].key;
    }
    for (uint32_t i = 0; i < gone; i++)
        remove_key(a, a->sel[i].key);
    a->next_seq++;
    return (long)update__finish(buf, name_end, off);
}
