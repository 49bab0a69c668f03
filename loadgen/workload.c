/*
 * workload.c — builds tlgen's pool of pre-encoded PREDICT frames (see
 * workload.h for the request shape and id law).
 *
 * ZIPF SAMPLING uses rejection-inversion (W. Hormann, G. Derflinger, "Rejection-
 * inversion to generate variates from monotone discrete distributions", 1996),
 * as Apache Commons RNG does: O(1) per draw with no table, for any exponent
 * s > 0 and key spaces of billions.  It draws k in 1..N with P(k) ~ k^-s;
 * the key index is k - 1.
 *
 * THREAD SAFETY: runs on the main thread before the run starts.
 */
#include "workload.h"

#include "codec/codec.h"
#include "store/synthetic.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double rng_unit(uint64_t *s)
{
    return (double)(store_splitmix64(s) >> 11) * 0x1.0p-53; /* [0, 1) */
}

/* ---- Zipf by rejection-inversion ------------------------------------------ */

typedef struct zipf {
    double s;        /* exponent > 0 */
    double n;        /* number of elements */
    double hx1;      /* H(1.5) - 1 */
    double hn;       /* H(n + 0.5) */
    double shortcut; /* 2 - Hinv(H(2.5) - h(2)) */
} zipf_t;

static double helper1(double x) /* log1p(x) / x */
{
    return fabs(x) > 1e-8 ? log1p(x) / x : 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
}

static double helper2(double x) /* expm1(x) / x */
{
    return fabs(x) > 1e-8 ? expm1(x) / x
                          : 1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x));
}

static double zh(const zipf_t *z, double x)
{
    return exp(-z->s * log(x));
}

static double zH(const zipf_t *z, double x) /* integral of h */
{
    double lx = log(x);
    return helper2((1.0 - z->s) * lx) * lx;
}

static double zHinv(const zipf_t *z, double x)
{
    double t = x * (1.0 - z->s);
    if (t < -1.0)
        t = -1.0; /* rounding guard */
    return exp(helper1(t) * x);
}

static void zipf_init(zipf_t *z, double s, uint64_t n)
{
    z->s = s;
    z->n = (double)n;
    z->hx1 = zH(z, 1.5) - 1.0;
    z->hn = zH(z, z->n + 0.5);
    z->shortcut = 2.0 - zHinv(z, zH(z, 2.5) - zh(z, 2.0));
}

/* A key index in [0, n). */
static uint64_t zipf_draw(const zipf_t *z, uint64_t *rng)
{
    for (;;) {
        double u = z->hn + rng_unit(rng) * (z->hx1 - z->hn);
        double x = zHinv(z, u);
        double k = floor(x + 0.5);
        if (k < 1.0)
            k = 1.0;
        else if (k > z->n)
            k = z->n;
        if (k - x <= z->shortcut || u >= zH(z, k + 0.5) - zh(z, k))
            return (uint64_t)k - 1;
    }
}

/* ---- the pool ------------------------------------------------------------- */

static void fill_block(codec_block_t *b, uint64_t *ids, uint32_t n, const workload_opts_t *o,
                       const zipf_t *z, uint64_t *rng)
{
    for (uint32_t j = 0; j < n; j++) {
        uint64_t i = z ? zipf_draw(z, rng) : store_splitmix64(rng) % o->key_space;
        ids[j] = store_synthetic_key(i, o->seed);
    }
    b->ids = ids;
    b->values = NULL;
    b->n = codec_sort_unique(ids, NULL, n);
}

/* The pool's bytes at most: --pool 3000 of standard requests would be 1 GB,
 * and 2^20 of them an OOM kill before the first request is sent. */
#define POOL_MAX_BYTES ((uint64_t)1 << 30)

__attribute__((cold)) int workload_build(workload_t *w, const workload_opts_t *o, char *why,
                                         size_t why_len)
{
    memset(w, 0, sizeof *w);
    uint64_t nfeat = (uint64_t)o->shared + (uint64_t)o->items * o->per_item;
    uint64_t *ids = NULL;
    codec_block_t *blocks = NULL;
    int rc = -ENOMEM;
    if (nfeat > CODEC_MAX_REQUEST_FEATURES) {
        snprintf(why, why_len, "%llu features per request is over the wire limit %u",
                 (unsigned long long)nfeat, CODEC_MAX_REQUEST_FEATURES);
        return -EINVAL;
    }
    ids = malloc((nfeat ? nfeat : 1) * sizeof *ids);
    blocks = malloc((size_t)o->items * sizeof *blocks);
    w->frames = calloc(o->pool, sizeof *w->frames);
    w->lens = calloc(o->pool, sizeof *w->lens);
    if (!ids || !blocks || !w->frames || !w->lens)
        goto out;
    w->items = o->items;

    zipf_t z;
    if (o->zipf > 0.0)
        zipf_init(&z, o->zipf, o->key_space);
    codec_predict_t req = {.version = 0, .items = o->items, .item = blocks};
    snprintf(req.name, sizeof req.name, "%s", o->model);
    uint64_t rng = o->seed ^ 0x7e57ull;
    double features = 0.0, bytes = 0.0;
    for (unsigned r = 0; r < o->pool; r++) {
        const zipf_t *zp = o->zipf > 0.0 ? &z : NULL;
        fill_block(&req.shared, ids, o->shared, o, zp, &rng);
        uint32_t total = req.shared.n;
        for (uint32_t i = 0; i < o->items; i++) {
            fill_block(&blocks[i], ids + o->shared + (uint64_t)i * o->per_item, o->per_item, o, zp,
                       &rng);
            total += blocks[i].n;
        }
        codec_error_t err;
        size_t len = 0;
        int e = codec_encode_predict(NULL, 0, 0, &req, &len, &err);
        if (e != CODEC_NEED_MORE) {
            snprintf(why, why_len, "the codec refuses the request: %s: %s", codec_errc_name(e),
                     err.msg);
            rc = -EINVAL;
            goto out;
        }
        if (r == 0 && (uint64_t)len * o->pool > POOL_MAX_BYTES) {
            snprintf(why, why_len, "--pool %u of %zu-byte requests is %.1f GiB, over the pool's "
                     "%llu GiB: use a smaller --pool", o->pool, len,
                     (double)len * o->pool / (1 << 30),
                     (unsigned long long)(POOL_MAX_BYTES >> 30));
            rc = -EINVAL;
            goto out;
        }
        w->frames[r] = malloc(len);
        if (!w->frames[r])
            goto out;
        e = codec_encode_predict(w->frames[r], len, 0, &req, &w->lens[r], &err);
        if (e != CODEC_OK) {
            snprintf(why, why_len, "the codec refuses the request: %s: %s", codec_errc_name(e),
                     err.msg);
            free(w->frames[r]);
            w->frames[r] = NULL;
            rc = -EINVAL;
            goto out;
        }
        w->n++;
        if (len > w->max_len)
            w->max_len = len;
        features += total;
        bytes += (double)len;
    }
    w->avg_features = features / o->pool;
    w->avg_len = bytes / o->pool;
    rc = 0;
out:
    free(ids);
    free(blocks);
    if (rc == -ENOMEM)
        snprintf(why, why_len, "out of memory building %u requests of %llu features", o->pool,
                 (unsigned long long)nfeat);
    if (rc != 0)
        workload_free(w);
    return rc;
}

void workload_free(workload_t *w)
{
    for (unsigned i = 0; w->frames && i < w->n; i++)
        free(w->frames[i]);
    free(w->frames);
    free(w->lens);
    memset(w, 0, sizeof *w);
}
