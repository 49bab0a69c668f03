/*
 * model.c — a loaded model version and batched scoring: LR and FM here, FFM
 * (ffm.c) and DNN (dnn.c) through the same lookup.
 *
 * A model is a store (the sparse parameters) plus its manifest meta and, for
 * FFM and DNN, the snapshot's extras (hyper-parameters, dense layers).  This
 * file keeps the interface and the part every kind shares — sizing the
 * scratch, gathering the request's ids and the ONE batched store lookup —
 * and dispatches to one static scorer per kind.  One request looks up all
 * its ids at once, in the order
 *
 *   [ bias | shared ids ... | item 0 ids ... | item 1 ids ... | ... ]
 *
 * so that the store's prefetching covers the whole request; when the blocks
 * already lie back to back in memory (as the wire decoder leaves them) the
 * lookup reads them in place, otherwise they are gathered into the scratch.
 * The lookup leaves K floats per id in the scratch, one row per id:
 *
 *   LR  K = 1          row = [ w ]
 *   FM  K = 1 + k      row = [ w | v_1 ... v_k ]           param norm (absent: 0)
 *   FFM K = 1 + F k    row = [ w | v_.0 (k) | ... | v_.F-1 ]   params fields, k, norm
 *   DNN K = 1 + d      row = [ w | e_1 ... e_d ]   params fields, dim, hidden, wide;
 *                                                  dense mlp.L.weight / mlp.L.bias
 *
 * The bias is the first float of MODEL_BIAS_ID's row (FM leaves its v's
 * unused).  Scores:
 *
 *   LR  sigmoid(bias + sum_j w_j x_j)
 *   FM  sigmoid(bias + s sum_j w_j x_j + s^2 0.5 sum_f [S_f^2 - Q_f]),
 *       S_f = sum_j v_jf x_j,  Q_f = sum_j (v_jf x_j)^2,
 *       s = 1 / sqrt(sum_j x_j^2) with instance normalisation (norm; s = 1
 *       when the sum is 0), else s = 1
 *
 * with j over the shared block and the item's block together.  All four
 * sums split over the blocks, so the shared block's linear sum, S_f, Q_f
 * and sum of squares are computed once per request and each item only adds
 * its own:
 *
 *   margin(i) = (bias + lin_shared) + lin_i
 *               + 0.5 sum_f [(S_f + S_if)^2 - (Q_f + Q_if)]        (no norm)
 *   margin(i) = bias + s_i (lin_shared + lin_i)
 *               + s_i^2 (0.5 sum_f [(S_f + S_if)^2 - (Q_f + Q_if)]),
 *       s_i^2 = 1 / (sq_shared + sq_i)                              (norm)
 *
 * That is O(k (shared + sum of item sizes)) per request instead of
 * O(k items (shared + item)).  Sums run in double, in block order, so that
 * the same request always gives the same float; the trainers (train_lr.c,
 * train_fm.c) use the same order so that exports score bit for bit as they
 * predicted.
 *
 * THE SCRATCH
 *   A thread's work space for one request: the gathered ids, the looked-up
 *   rows and the kind's work space (FFM accumulators, DNN activations).  A
 *   server sizes it for its largest request, so the rows dominate: K floats
 *   for each of up to CODEC_MAX_REQUEST_FEATURES ids is 4 MiB for LR and
 *   324 MiB for an FFM with K = 81.  It is sized once per model version
 *   (model_scratch_fit), never per request, and it follows the model both
 *   ways: grown when a model needs more, reallocated to the model's size
 *   when it holds more than twice what the model needs, so that a worker
 *   that once served a wide model does not keep that memory after a narrow
 *   one replaced it.  Buffers of 1 MiB and more are mapped on their own, so
 *   that freeing one unmaps it at once instead of leaving it to a general
 *   allocator that may keep it for reuse.
 *
 * THREAD SAFETY: the model is read-only; each thread scores with its own
 * scratch (model.h).
 */
#include "model.h"
#include "model_impl.h"
#include "overlay.h"
#include "sigmoid.h"

#include "dnn.h"
#include "ffm.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Scratch buffers from this size up are mapped on their own (buf_alloc). */
#define SCRATCH_MMAP_MIN ((size_t)1 << 20)

struct model_scratch {
    size_t cap;         /* ids the key array holds, bias included */
    size_t fcap;        /* floats the weights array holds */
    size_t wbytes;      /* bytes the work space holds */
    uint64_t *keys;     /* cap: gathered ids when the blocks are not contiguous */
    float *weights;     /* fcap: K floats per looked-up id */
    void *work;         /* wbytes: FFM accumulators, DNN activations */
    store_team_t *team; /* splits the lookup over helper threads; NULL: alone */
};

/* An unsigned decimal param in [lo, hi]; -1 when absent or bad. */
static int64_t param_uint(const store_extras_t *x, const char *key, int64_t lo, int64_t hi)
{
    const char *v = store_extras_get(x, key);
    if (!v || !*v)
        return -1;
    char *e;
    errno = 0;
    long long n = strtoll(v, &e, 10);
    if (*e || errno || n < lo || n > hi)
        return -1;
    return n;
}

/* Checks kind, K and (FFM, DNN) the extras; fills m's kind fields. */
static int model_setup(model_t *m, char *why, size_t why_len)
{
    const uint32_t K = store_value_floats(m->store);
    const store_extras_t *x = &m->base->extras;
    switch (m->meta.model_kind) {
    case STORE_MODEL_LR:
        if (K == 1)
            return 0;
        snprintf(why, why_len, "an LR model has 1 float per key, this one %u", K);
        return -ENOTSUP;
    case STORE_MODEL_FM: {
        if (K < 2 || K > 1 + MODEL_FM_MAX_K) {
            snprintf(why, why_len, "an FM model has 2..%d floats per key, this one %u",
                     1 + MODEL_FM_MAX_K, K);
            return -ENOTSUP;
        }
        /* absent: written before FM had normalisation, so unnormalised */
        int64_t norm = store_extras_get(x, "norm") ? param_uint(x, "norm", 0, 1) : 0;
        if (norm < 0) {
            snprintf(why, why_len, "an FM model's param norm is 0 or 1, this one '%s'",
                     store_extras_get(x, "norm"));
            return -ENOTSUP;
        }
        m->fm_norm = norm == 1;
        return 0;
    }
    case STORE_MODEL_FFM: {
        int64_t F = param_uint(x, "fields", 1, FFM_MAX_FIELDS);
        int64_t k = param_uint(x, "k", 1, STORE_MAX_VALUE_FLOATS);
        int64_t norm = store_extras_get(x, "norm") ? param_uint(x, "norm", 0, 1) : 0;
        if (F < 0 || k < 0 || norm < 0) {
            snprintf(why, why_len,
                     "an FFM model needs params fields (1..%d), k (>= 1) and norm (0 or 1); "
                     "got fields=%s k=%s norm=%s",
                     FFM_MAX_FIELDS, store_extras_get(x, "fields") ?: "(none)",
                     store_extras_get(x, "k") ?: "(none)", store_extras_get(x, "norm") ?: "(none)");
            return -ENOTSUP;
        }
        if ((uint64_t)K != 1 + (uint64_t)F * (uint64_t)k) {
            snprintf(why, why_len,
                     "an FFM model with %lld fields and k = %lld has 1 + %lld floats per key, "
                     "this one %u",
                     (long long)F, (long long)k, (long long)(F * k), K);
            return -ENOTSUP;
        }
        m->ffm_fields = (uint32_t)F;
        m->ffm_k = (uint32_t)k;
        m->ffm_norm = norm == 1;
        m->work_bytes = model_ffm_work_doubles(m->ffm_fields, m->ffm_k) * sizeof(double);
        return 0;
    }
    case STORE_MODEL_DNN:
        if (model_dnn_net_from_extras(x, K, &m->dnn, why, why_len) != 0)
            return -ENOTSUP;
        model_dnn_blas_init();
        m->work_bytes = model_dnn_work_floats(&m->dnn) * sizeof(float);
        return 0;
    }
    snprintf(why, why_len, "model kind %d is unknown", (int)m->meta.model_kind);
    return -ENOTSUP;
}

/* Wraps s (and the extras x, whose dense arrays m takes over) as a model. */
static int model_make(store_t *s, const store_meta_t *meta, store_extras_t *x, model_t **out,
                      char *why, size_t why_len)
{
    model_t *m = calloc(1, sizeof *m);
    struct model_base *b = calloc(1, sizeof *b);
    if (!m || !b) {
        free(m);
        free(b);
        snprintf(why, why_len, "out of memory");
        return -ENOMEM;
    }
    b->store = s;
    atomic_init(&b->sharers, 1);
    if (x)
        b->extras = *x;
    m->base = b;
    m->store = s;
    m->meta = *meta;
    int rc = model_setup(m, why, why_len);
    if (rc != 0) {
        free(b); /* s and x stay the caller's */
        free(m);
        return rc;
    }
    if (x)
        memset(x, 0, sizeof *x); /* the arrays are m's now */
    *out = m;
    return 0;
}

int model_from_store(store_t *s, const store_meta_t *meta, model_t **out)
{
    if (!s || !meta || !out)
        return -EINVAL;
    char why[256];
    return model_make(s, meta, NULL, out, why, sizeof why);
}

/* model_make's failure rc, as a store error naming what (where: the
 * snapshot's directory or the version's description). */
static int model_fail(int rc, const char *where, const store_meta_t *meta, const char *why,
                      store_error_t *err)
{
    if (err) {
        memset(err, 0, sizeof *err);
        err->code = rc == -ENOMEM ? STORE_E_NOMEM : STORE_E_MODEL;
        err->offset = -1;
        snprintf(err->msg, sizeof err->msg, "%s: model kind %s is not servable: %s", where,
                 store_model_kind_name(meta->model_kind), why);
    }
    return rc == -ENOMEM ? rc : store_errc_errno(STORE_E_MODEL);
}

int model_from_store_ex(store_t *s, const store_meta_t *meta, store_extras_t *x, model_t **out,
                        store_error_t *err)
{
    if (!s || !meta || !x || !out)
        return -EINVAL;
    char why[400];
    int rc = model_make(s, meta, x, out, why, sizeof why);
    if (rc != 0) {
        char where[96];
        snprintf(where, sizeof where, "model '%s' version %llu", meta->model_name,
                 (unsigned long long)meta->version);
        return model_fail(rc, where, meta, why, err);
    }
    return 0;
}

int model_load(const char *dir, int threads, model_t **out, store_error_t *err)
{
    store_t *s;
    store_meta_t meta;
    store_extras_t x;
    int rc = store_snapshot_load_ex(dir, threads, &s, &meta, &x, err);
    if (rc != 0)
        return rc; /* the store's -errno */
    char why[400];
    rc = model_make(s, &meta, &x, out, why, sizeof why);
    if (rc != 0) {
        store_destroy(s);
        store_extras_free(&x);
        return model_fail(rc, dir, &meta, why, err);
    }
    return 0;
}

void model_destroy(model_t *m)
{
    if (!m)
        return;
    for (uint32_t i = 0; i < m->n_overlays; i++)
        model_overlay_unref(m->overlays[i]);
    if (atomic_fetch_sub_explicit(&m->base->sharers, 1, memory_order_acq_rel) == 1) {
        store_destroy(m->base->store);
        store_extras_free(&m->base->extras);
        model__mlp_free(m->base);
        free(m->base);
    }
    free(m);
}

const store_extras_t *model_extras(const model_t *m) { return &m->base->extras; }

const store_meta_t *model_meta(const model_t *m) { return &m->meta; }
const store_t *model_store(const model_t *m) { return m->store; }
store_t *model_base_store(model_t *m) { return m->store; }
uint32_t model_value_floats(const model_t *m) { return store_value_floats(m->store); }

int model_scratch_create(size_t max_features, model_scratch_t **out)
{
    model_scratch_t *sc = calloc(1, sizeof *sc);
    if (!sc)
        return -ENOMEM;
    if (model_scratch_reserve(sc, max_features, 1) < 0) {
        model_scratch_destroy(sc);
        return -ENOMEM;
    }
    *out = sc;
    return 0;
}

/* A scratch buffer of n bytes: mapped on its own when large, so that
 * freeing it unmaps it at once (a general allocator may keep a freed large
 * block, and its address space, for reuse), from the heap when small. */
static void *buf_alloc(size_t n)
{
    if (n < SCRATCH_MMAP_MIN)
        return malloc(n ? n : 1);
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* Frees what buf_alloc(n) returned (n decides how it was allocated). */
static void buf_free(void *p, size_t n)
{
    if (!p)
        return;
    if (n < SCRATCH_MMAP_MIN)
        free(p);
    else
        munmap(p, n);
}

/* Makes sc hold exactly cap ids, fcap floats and wbytes of work space,
 * replacing only the buffers whose size changes.  All or nothing: returns
 * 1 when it replaced any, 0 when every size already matched, -ENOMEM with
 * sc unchanged. */
static int scratch_resize(model_scratch_t *sc, size_t cap, size_t fcap, size_t wbytes)
{
    const bool nk = cap != sc->cap, nw = fcap != sc->fcap, nx = wbytes != sc->wbytes;
    uint64_t *keys = nk ? buf_alloc(cap * sizeof *keys) : NULL;
    float *weights = nw ? buf_alloc(fcap * sizeof *weights) : NULL;
    void *work = nx && wbytes ? buf_alloc(wbytes) : NULL;
    if ((nk && !keys) || (nw && !weights) || (nx && wbytes && !work)) {
        buf_free(keys, cap * sizeof *keys);
        buf_free(weights, fcap * sizeof *weights);
        buf_free(work, wbytes);
        return -ENOMEM;
    }
    if (nk) {
        buf_free(sc->keys, sc->cap * sizeof *sc->keys);
        sc->keys = keys;
        sc->cap = cap;
    }
    if (nw) {
        buf_free(sc->weights, sc->fcap * sizeof *sc->weights);
        sc->weights = weights;
        sc->fcap = fcap;
    }
    if (nx) {
        buf_free(sc->work, sc->wbytes);
        sc->work = work;
        sc->wbytes = wbytes;
    }
    return nk || nw || nx;
}

/* The ids and floats for max_features features of value_floats floats
 * each (the bias row included); -ENOMEM when the byte sizes overflow. */
static int scratch_need(size_t max_features, uint32_t value_floats, size_t *cap, size_t *fcap)
{
    if (value_floats == 0)
        value_floats = 1;
    size_t c = max_features + 1;
    if (c < max_features || c > SIZE_MAX / sizeof(float) / value_floats ||
        c > SIZE_MAX / sizeof(uint64_t))
        return -ENOMEM;
    *cap = c;
    *fcap = c * value_floats;
    return 0;
}

int model_scratch_reserve(model_scratch_t *sc, size_t max_features, uint32_t value_floats)
{
    size_t cap, fcap;
    if (scratch_need(max_features, value_floats, &cap, &fcap) != 0)
        return -ENOMEM;
    if (cap <= sc->cap && fcap <= sc->fcap)
        return 0;
    return scratch_resize(sc, cap > sc->cap ? cap : sc->cap, fcap > sc->fcap ? fcap : sc->fcap,
                          sc->wbytes);
}

int model_scratch_fit(model_scratch_t *sc, const model_t *m, size_t max_features)
{
    size_t cap, fcap;
    if (scratch_need(max_features, model_value_floats(m), &cap, &fcap) != 0)
        return -ENOMEM;
    const size_t wbytes = m->work_bytes;
    const size_t need = cap * sizeof(uint64_t) + fcap * sizeof(float) + wbytes;
    /* Holding more than twice what m needs: give the rest back.  Should
     * that fail, fall through to the growing rule: the buffers may still
     * fit m (only the memory is not returned). */
    if (model_scratch_bytes(sc) / 2 > need) {
        int rc = scratch_resize(sc, cap, fcap, wbytes);
        if (rc >= 0)
            return rc;
    }
    if (cap <= sc->cap && fcap <= sc->fcap && wbytes <= sc->wbytes)
        return 0;
    return scratch_resize(sc, cap > sc->cap ? cap : sc->cap, fcap > sc->fcap ? fcap : sc->fcap,
                          wbytes > sc->wbytes ? wbytes : sc->wbytes);
}

size_t model_scratch_bytes(const model_scratch_t *sc)
{
    return sc->cap * sizeof *sc->keys + sc->fcap * sizeof *sc->weights + sc->wbytes;
}

void model_scratch_set_team(model_scratch_t *sc, store_team_t *team)
{
    sc->team = team;
}

void model_scratch_destroy(model_scratch_t *sc)
{
    if (!sc)
        return;
    buf_free(sc->keys, sc->cap * sizeof *sc->keys);
    buf_free(sc->weights, sc->fcap * sizeof *sc->weights);
    buf_free(sc->work, sc->wbytes);
    free(sc);
}

static inline double block_sum(const codec_block_t *b, const float *w)
{
    double sum = 0;
    if (b->values) {
        for (uint32_t j = 0; j < b->n; j++)
            sum += (double)w[j] * b->values[j];
    } else {
        for (uint32_t j = 0; j < b->n; j++)
            sum += w[j];
    }
    return sum;
}

/* LR: w holds one float per id in lookup order (bias first). */
void model_lr_scores(const float *w, const codec_block_t *shared, const codec_block_t *items,
                     uint32_t n_items, float *scores)
{
    double base = (double)w[0] + block_sum(shared, w + 1);
    w += 1 + shared->n;
    for (uint32_t i = 0; i < n_items; i++) {
        scores[i] = sigmoid(base + block_sum(&items[i], w));
        w += items[i].n;
    }
}

/* FM sums of one block whose rows ([w | v_1..v_k], stride k + 1) start at
 * w: returns sum w x and ADDS sum v_f x to S[f] and sum (v_f x)^2 to Q[f]
 * (the caller zeroes them).  Feature order, double: deterministic.  Always
 * inlined so that the callers below with a constant k get loops the compiler
 * unrolls and vectorises (the same additions in the same order: the same
 * result as the generic k). */
static inline __attribute__((always_inline)) double
fm_block(const codec_block_t *b, const float *w, uint32_t k, double *S, double *Q)
{
    const uint32_t K = k + 1;
    double lin = 0;
    if (b->values) {
        for (uint32_t j = 0; j < b->n; j++, w += K) {
            double x = (double)b->values[j];
            lin += (double)w[0] * x;
            for (uint32_t f = 0; f < k; f++) {
                double vx = (double)w[1 + f] * x;
                S[f] += vx;
                Q[f] += vx * vx;
            }
        }
    } else {
        for (uint32_t j = 0; j < b->n; j++, w += K) {
            lin += (double)w[0];
            for (uint32_t f = 0; f < k; f++) {
                double v = (double)w[1 + f];
                S[f] += v;
                Q[f] += v * v;
            }
        }
    }
    return lin;
}

static double fm_block_4(const codec_block_t *b, const float *w, double *S, double *Q)
{
    return fm_block(b, w, 4, S, Q);
}
static double fm_block_8(const codec_block_t *b, const float *w, double *S, double *Q)
{
    return fm_block(b, w, 8, S, Q);
}
static double fm_block_16(const codec_block_t *b, const float *w, double *S, double *Q)
{
    return fm_block(b, w, 16, S, Q);
}
static double fm_block_32(const codec_block_t *b, const float *w, double *S, double *Q)
{
    return fm_block(b, w, 32, S, Q);
}
static double fm_block_k(const codec_block_t *b, const float *w, uint32_t k, double *S,
                         double *Q)
{
    return fm_block(b, w, k, S, Q);
}

/* One block's sums with the best loop for k. */
static inline double fm_block_any(const codec_block_t *b, const float *w, uint32_t k, double *S,
                                  double *Q)
{
    switch (k) {
    case 4: return fm_block_4(b, w, S, Q);
    case 8: return fm_block_8(b, w, S, Q);
    case 16: return fm_block_16(b, w, S, Q);
    case 32: return fm_block_32(b, w, S, Q);
    default: return fm_block_k(b, w, k, S, Q);
    }
}

/* Sum of x^2 over one block, in feature order (train_fm.c sums a sample
 * the same way). */
static inline double fm_block_sq(const codec_block_t *b)
{
    if (!b->values)
        return (double)b->n;
    double sq = 0;
    for (uint32_t j = 0; j < b->n; j++) {
        double x = (double)b->values[j];
        sq += x * x;
    }
    return sq;
}

/* FM: w holds K = k + 1 floats per id in lookup order (bias row first).
 * The margin is the same expression, in the same order, as train_fm.c's
 * forward(), so that exports score bit for bit as the trainer predicted. */
static void fm_score(const codec_block_t *shared, const codec_block_t *items, uint32_t n_items,
                     const float *w, uint32_t k, bool norm, float *scores)
{
    const uint32_t K = k + 1;
    double S[MODEL_FM_MAX_K] = {0}, Q[MODEL_FM_MAX_K] = {0};
    double Si[MODEL_FM_MAX_K], Qi[MODEL_FM_MAX_K];
    const double bias = (double)w[0];
    w += K;
    const double lin_shared = fm_block_any(shared, w, k, S, Q);
    const double base = bias + lin_shared;
    const double sq_shared = norm ? fm_block_sq(shared) : 0;
    w += (size_t)shared->n * K;
    for (uint32_t i = 0; i < n_items; i++) {
        memset(Si, 0, k * sizeof *Si);
        memset(Qi, 0, k * sizeof *Qi);
        double lin_i = fm_block_any(&items[i], w, k, Si, Qi);
        w += (size_t)items[i].n * K;
        double pair = 0;
        for (uint32_t f = 0; f < k; f++) {
            double s = S[f] + Si[f];
            pair += s * s - (Q[f] + Qi[f]);
        }
        if (!norm) {
            scores[i] = sigmoid((base + lin_i) + 0.5 * pair);
            continue;
        }
        double sq = sq_shared + fm_block_sq(&items[i]);
        double s = 1, s2 = 1;
        if (sq > 0) {
            s2 = 1.0 / sq;
            s = sqrt(s2);
        }
        scores[i] = sigmoid(bias + s * (lin_shared + lin_i) + s2 * (0.5 * pair));
    }
}

/* Checks that sc holds the request for m: 0 with its id count in *total
 * (bias included), or -E2BIG. */
static int fits(const model_t *m, const codec_block_t *shared, const codec_block_t *items,
                uint32_t n_items, const model_scratch_t *sc, size_t *total)
{
    const uint32_t K = store_value_floats(m->store);
    size_t t = 1 + shared->n;
    for (uint32_t i = 0; i < n_items; i++)
        t += items[i].n;
    *total = t;
    return t > sc->cap || t > sc->fcap / K || m->work_bytes > sc->wbytes ? -E2BIG : 0;
}

/* Where the request's ids lie: after the bias, back to back from *ids
 * (total - 1 of them), as the decoder leaves them; or gathered with the bias
 * into sc->keys (*ids = NULL). */
static const uint64_t *request_ids(const codec_block_t *shared, const codec_block_t *items,
                                   uint32_t n_items, model_scratch_t *sc)
{
    bool contiguous = shared->n > 0;
    const uint64_t *next = contiguous ? shared->ids + shared->n : NULL; /* NULL + 0 is UB */
    for (uint32_t i = 0; i < n_items && contiguous; i++) {
        contiguous = items[i].n == 0 || items[i].ids == next;
        next += items[i].n;
    }
    if (contiguous)
        return shared->ids;
    uint64_t *k = sc->keys;
    *k++ = MODEL_BIAS_ID;
    if (shared->n) /* memcpy from NULL is undefined even for 0 bytes */
        memcpy(k, shared->ids, (size_t)shared->n * sizeof *k);
    k += shared->n;
    for (uint32_t i = 0; i < n_items; i++) {
        if (items[i].n)
            memcpy(k, items[i].ids, (size_t)items[i].n * sizeof *k);
        k += items[i].n;
    }
    return NULL;
}

/* Overlays ov[first..n) over the rows (the first one writes last: it
 * wins); ids as request_ids said. */
static void overlay_rows(model_overlay_t *const *ov, uint32_t first, uint32_t n,
                         const uint64_t *ids, size_t total, uint32_t K, model_scratch_t *sc)
{
    static const uint64_t bias_id = MODEL_BIAS_ID;
    for (uint32_t o = n; o-- > first;) {
        if (ids) {
            model_overlay_lookup(ov[o], &bias_id, 1, sc->weights, NULL);
            model_overlay_lookup(ov[o], ids, total - 1, sc->weights + K, NULL);
        } else {
            model_overlay_lookup(ov[o], sc->keys, total, sc->weights, NULL);
        }
    }
}

/* The ONE batched lookup: the rows of every id of the request into
 * sc->weights, through m's base and all its overlays.  Returns the ids as
 * request_ids does. */
static const uint64_t *lookup_rows(const model_t *m, const codec_block_t *shared,
                                   const codec_block_t *items, uint32_t n_items, size_t total,
                                   model_scratch_t *sc)
{
    const uint32_t K = store_value_floats(m->store);
    const uint64_t *ids = request_ids(shared, items, n_items, sc);
    if (ids) {
        store_lookup(m->store, MODEL_BIAS_ID, sc->weights);
        store_team_lookup(sc->team, m->store, ids, total - 1, sc->weights + K, NULL);
    } else {
        store_team_lookup(sc->team, m->store, sc->keys, total, sc->weights, NULL);
    }
    overlay_rows(m->overlays, 0, m->n_overlays, ids, total, K, sc);
    return ids;
}

/* m's kind's scorer on the rows in sc->weights (read only). */
static void score_rows(const model_t *m, const codec_block_t *shared, const codec_block_t *items,
                       uint32_t n_items, float *scores, model_scratch_t *sc)
{
    const uint32_t K = store_value_floats(m->store);
    switch (m->meta.model_kind) {
    case STORE_MODEL_FM:
        fm_score(shared, items, n_items, sc->weights, K - 1, m->fm_norm, scores);
        break;
    case STORE_MODEL_FFM:
        model_ffm_scores(shared, items, n_items, sc->weights, m->ffm_fields, m->ffm_k, m->ffm_norm,
                   sc->work, scores);
        break;
    case STORE_MODEL_DNN:
    {
        const dnn_net_t *net = model__mlp_enter(m); /* installed online, or the snapshot's */
        model_dnn_scores(net, shared, items, n_items, sc->weights, sc->work, scores);
        model__mlp_exit();
        break;
    }
    default:
        model_lr_scores(sc->weights, shared, items, n_items, scores);
    }
}

int model_score(const model_t *m, const codec_block_t *shared, const codec_block_t *items,
                uint32_t n_items, float *scores, model_scratch_t *sc)
{
    size_t total;
    if (fits(m, shared, items, n_items, sc, &total) != 0)
        return -E2BIG;
    lookup_rows(m, shared, items, n_items, total, sc);
    score_rows(m, shared, items, n_items, scores, sc);
    return 0;
}

int model_score_pair(const model_t *m, const model_t *next, const codec_block_t *shared,
                     const codec_block_t *items, uint32_t n_items, float *scores,
                     float *next_scores, model_scratch_t *sc)
{
    size_t total;
    bool over = model_same_base(m, next) && next->n_overlays == m->n_overlays + 1 &&
                memcmp(next->overlays + 1, m->overlays,
                       m->n_overlays * sizeof m->overlays[0]) == 0;
    if (!over) {
        int rc = model_score(m, shared, items, n_items, scores, sc);
        return rc ? rc : model_score(next, shared, items, n_items, next_scores, sc);
    }
    if (fits(m, shared, items, n_items, sc, &total) != 0)
        return -E2BIG;
    const uint64_t *ids = lookup_rows(m, shared, items, n_items, total, sc);
    score_rows(m, shared, items, n_items, scores, sc);
    overlay_rows(next->overlays, 0, 1, ids, total, store_value_floats(m->store), sc);
    score_rows(next, shared, items, n_items, next_scores, sc);
    return 0;
}
