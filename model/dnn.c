/*
 * dnn.c — the Wide & Deep forward pass (dnn.h) and the network's
 * description in a snapshot's extras.
 *
 * A request is one shared block plus n items; item i's sample is the shared
 * block together with item i's block.  Sum-pooling splits over the blocks
 * exactly as FM's sums do (model.c), so the shared block is pooled ONCE and
 * each item's input row starts as a copy of it:
 *
 *   input_i = pooled(shared) + pooled(item i)          (F*d floats)
 *   wide_i  = sum_shared w x + sum_item_i w x          (double)
 *
 * The MLP then runs over a chunk of up to DNN_CHUNK items as one matrix
 * product per layer (cblas_sgemm, one BLAS thread: the caller's), each
 * followed by a bias + ReLU loop the compiler vectorises:
 *
 *   act[0]  chunk x width[0]   pooled inputs
 *   act[1]  chunk x width[1]   relu(act[0] W_0 + b_0)
 *   ...
 *   act[L]  chunk x 1          act[L-1] W_{L-1} + b_{L-1}
 *   score_i = sigmoid(((bias + wide_shared) + wide_i) + act[L][i])
 *
 * Work space (floats, every buffer starting on a 64-byte boundary, the base
 * aligned inside the caller's buffer so that the layout and the BLAS code
 * paths never depend on where the caller's memory lies):
 *
 *   +-------------+----------------+-----+----------------+----------------+
 *   | shared pool | act[0]         | ... | act[L]         | wide_i doubles |
 *   | F*d         | CHUNK*width[0] |     | CHUNK*width[L] | CHUNK          |
 *   +-------------+----------------+-----+----------------+----------------+
 *
 * Pooling runs in float in feature order, the wide sums in double in
 * feature order, and single-threaded BLAS is deterministic for a given
 * shape: the same request always gives the same floats, which is what lets
 * an export score bit for bit as the trainer predicted (train_dnn.c scores
 * through this very function with the sample as the shared block and one
 * empty item).  Across shapes it is not: an item scored among n others goes
 * through an sgemm of n rows, whose blocking rounds its sums differently, so
 * its score can move by an ulp or two with the request's item count.
 *
 * THREAD SAFETY: model_dnn_scores() reads the net and writes only the caller's
 * work and scores: any number of threads at once, one work space each.
 * OpenBLAS's own buffers are thread-safe in the pthread build.
 */
#include "dnn.h"
#include "sigmoid.h"

#include <cblas.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ALIGN_FLOATS 16 /* 64 bytes */

static inline size_t round_up(size_t n)
{
    return (n + ALIGN_FLOATS - 1) & ~(size_t)(ALIGN_FLOATS - 1);
}

/* Offsets (in floats from the aligned base) of the work buffers. */
struct layout {
    size_t pool;                    /* shared pooled input */
    size_t act[DNN_MAX_LAYERS + 1]; /* activations per layer */
    size_t wide;                    /* DNN_CHUNK doubles */
    size_t total;                   /* floats from the base */
};

static void layout_of(const dnn_net_t *net, struct layout *lo)
{
    size_t off = 0;
    lo->pool = off;
    off += round_up(net->width[0]);
    for (uint32_t l = 0; l <= net->n_layers; l++) {
        lo->act[l] = off;
        off += round_up((size_t)DNN_CHUNK * net->width[l]);
    }
    lo->wide = off;
    off += round_up(2 * (size_t)DNN_CHUNK);
    lo->total = off;
}

static inline float *aligned_base(const float *work)
{
    uintptr_t p = (uintptr_t)work;
    p = (p + ALIGN_FLOATS * sizeof(float) - 1) & ~(uintptr_t)(ALIGN_FLOATS * sizeof(float) - 1);
    return (float *)p;
}

size_t model_dnn_work_floats(const dnn_net_t *net)
{
    struct layout lo;
    layout_of(net, &lo);
    return lo.total + ALIGN_FLOATS; /* slack for aligning the base */
}

const float *model_dnn_activations(const dnn_net_t *net, const float *work, uint32_t layer)
{
    struct layout lo;
    layout_of(net, &lo);
    return aligned_base(work) + lo.act[layer];
}

/* Adds block b's embeddings (rows of K = d + 1 floats from rows) times
 * their values to pooled[field * d ...] and returns sum w x in double.
 * Feature order throughout.  Always inlined so that the callers with a
 * constant d get unrolled, vectorised loops (the same additions per lane in
 * the same order: the same floats as the generic d). */
static inline __attribute__((always_inline)) double
pool_block(const codec_block_t *b, const float *restrict rows, uint32_t d,
           const uint16_t *field_of, float *restrict pooled)
{
    const uint32_t K = d + 1;
    double lin = 0;
    if (b->values) {
        for (uint32_t j = 0; j < b->n; j++, rows += K) {
            const float x = b->values[j];
            float *restrict p = pooled + (size_t)field_of[b->ids[j] >> 56] * d;
            lin += (double)rows[0] * x;
            for (uint32_t k = 0; k < d; k++)
                p[k] += rows[1 + k] * x;
        }
    } else {
        for (uint32_t j = 0; j < b->n; j++, rows += K) {
            float *restrict p = pooled + (size_t)field_of[b->ids[j] >> 56] * d;
            lin += (double)rows[0];
            for (uint32_t k = 0; k < d; k++)
                p[k] += rows[1 + k];
        }
    }
    return lin;
}

static double pool_8(const codec_block_t *b, const float *r, const uint16_t *fo, float *p)
{
    return pool_block(b, r, 8, fo, p);
}
static double pool_16(const codec_block_t *b, const float *r, const uint16_t *fo, float *p)
{
    return pool_block(b, r, 16, fo, p);
}
static double pool_32(const codec_block_t *b, const float *r, const uint16_t *fo, float *p)
{
    return pool_block(b, r, 32, fo, p);
}
static double pool_d(const codec_block_t *b, const float *r, uint32_t d, const uint16_t *fo,
                     float *p)
{
    return pool_block(b, r, d, fo, p);
}

static inline double pool_any(const codec_block_t *b, const float *r, uint32_t d,
                              const uint16_t *fo, float *p)
{
    switch (d) {
    case 8: return pool_8(b, r, fo, p);
    case 16: return pool_16(b, r, fo, p);
    case 32: return pool_32(b, r, fo, p);
    default: return pool_d(b, r, d, fo, p);
    }
}

/* out[i][k] = relu(out[i][k] + b[k]) (relu) or out[i][k] + b[k]. */
static void add_bias(float *restrict out, const float *restrict b, uint32_t m, uint32_t n,
                     bool relu)
{
    for (uint32_t i = 0; i < m; i++, out += n) {
        if (relu) {
            for (uint32_t k = 0; k < n; k++) {
                float v = out[k] + b[k];
                out[k] = v > 0.0f ? v : 0.0f;
            }
        } else {
            for (uint32_t k = 0; k < n; k++)
                out[k] += b[k];
        }
    }
}

/* The MLP over m rows of act[0]: one product per layer. */
static void mlp(const dnn_net_t *net, float *base, const struct layout *lo, uint32_t m)
{
    for (uint32_t l = 0; l < net->n_layers; l++) {
        const uint32_t k = net->width[l], n = net->width[l + 1];
        const float *in = base + lo->act[l];
        float *out = base + lo->act[l + 1];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0f, in,
                    (int)k, net->W[l], (int)n, 0.0f, out, (int)n);
        add_bias(out, net->b[l], m, n, l + 1 < net->n_layers);
    }
}

void model_dnn_scores(const dnn_net_t *net, const codec_block_t *shared, const codec_block_t *items,
                uint32_t n_items, const float *rows, float *work, float *scores)
{
    const uint32_t d = net->dim, K = d + 1, in_w = net->width[0];
    struct layout lo;
    layout_of(net, &lo);
    float *base = aligned_base(work);
    float *pool = base + lo.pool;
    float *in = base + lo.act[0];
    const float *out = base + lo.act[net->n_layers];
    double *wide = (double *)(base + lo.wide);

    uint16_t field_of[256]; /* (id >> 56) % F without a division per feature */
    for (uint32_t t = 0; t < 256; t++)
        field_of[t] = (uint16_t)(t % net->fields);

    const double bias = (double)rows[0];
    rows += K;
    memset(pool, 0, in_w * sizeof *pool);
    const double ws = pool_any(shared, rows, d, field_of, pool);
    rows += (size_t)shared->n * K;
    const double head = net->wide ? bias + ws : bias;

    for (uint32_t c0 = 0; c0 < n_items; c0 += DNN_CHUNK) {
        const uint32_t m = n_items - c0 < DNN_CHUNK ? n_items - c0 : DNN_CHUNK;
        for (uint32_t i = 0; i < m; i++) {
            const codec_block_t *it = &items[c0 + i];
            float *x = in + (size_t)i * in_w;
            memcpy(x, pool, in_w * sizeof *x);
            wide[i] = pool_any(it, rows, d, field_of, x);
            rows += (size_t)it->n * K;
        }
        mlp(net, base, &lo, m);
        for (uint32_t i = 0; i < m; i++) {
            double margin = net->wide ? head + wide[i] : head;
            scores[c0 + i] = sigmoid(margin + (double)out[i]);
        }
    }
}

/* ---- the description in a snapshot's extras ------------------------------ */

/* Decimal digits only, 1..max; 0 or -1. */
static int parse_u32(const char *s, size_t len, uint32_t max, uint32_t *out)
{
    if (len == 0 || len > 10)
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (v < 1 || v > max)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

void model_dnn_layer_names(uint32_t layer, char weight[STORE_DENSE_NAME_MAX],
                     char bias[STORE_DENSE_NAME_MAX])
{
    snprintf(weight, STORE_DENSE_NAME_MAX, "mlp.%" PRIu32 ".weight", layer);
    snprintf(bias, STORE_DENSE_NAME_MAX, "mlp.%" PRIu32 ".bias", layer);
}

__attribute__((cold)) int model_dnn_net_from_extras(const store_extras_t *x, uint32_t value_floats,
                                              dnn_net_t *net, char *why, size_t why_len)
{
    char buf[256];
    const char *bad = buf;
    dnn_net_t n = {0};
    const char *fields = store_extras_get(x, "fields"), *dim = store_extras_get(x, "dim");
    const char *hidden = store_extras_get(x, "hidden"), *wide = store_extras_get(x, "wide");
    if (!fields || !dim || !hidden || !wide) {
        snprintf(buf, sizeof buf, "DNN param \"%s\" is missing",
                 !fields ? "fields" : !dim ? "dim" : !hidden ? "hidden" : "wide");
        goto out;
    }
    if (parse_u32(fields, strlen(fields), 256, &n.fields) != 0) {
        snprintf(buf, sizeof buf, "DNN param fields \"%s\" is not a number in 1..256", fields);
        goto out;
    }
    if (parse_u32(dim, strlen(dim), STORE_MAX_VALUE_FLOATS - 1, &n.dim) != 0) {
        snprintf(buf, sizeof buf, "DNN param dim \"%s\" is not a number in 1..%d", dim,
                 STORE_MAX_VALUE_FLOATS - 1);
        goto out;
    }
    if (value_floats != 1 + n.dim) {
        snprintf(buf, sizeof buf,
                 "DNN dim %" PRIu32 " needs %" PRIu32
                 " floats per key ([w | e]), the store has %" PRIu32,
                 n.dim, n.dim + 1, value_floats);
        goto out;
    }
    if ((uint64_t)n.fields * n.dim > DNN_MAX_WIDTH) {
        snprintf(buf, sizeof buf, "DNN input width fields x dim = %" PRIu32 " x %" PRIu32
                 " is more than %d", n.fields, n.dim, DNN_MAX_WIDTH);
        goto out;
    }
    if (strcmp(wide, "0") != 0 && strcmp(wide, "1") != 0) {
        snprintf(buf, sizeof buf, "DNN param wide \"%s\" is not 0 or 1", wide);
        goto out;
    }
    n.wide = wide[0] == '1';
    n.width[0] = n.fields * n.dim;
    n.n_layers = 1;
    for (const char *p = hidden; *hidden;) { /* "" = no hidden layer; "256," is bad */
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (n.n_layers == DNN_MAX_LAYERS) {
            snprintf(buf, sizeof buf, "DNN param hidden \"%s\" has more than %d layers", hidden,
                     DNN_MAX_LAYERS - 1);
            goto out;
        }
        if (parse_u32(p, len, DNN_MAX_WIDTH, &n.width[n.n_layers]) != 0) {
            snprintf(buf, sizeof buf,
                     "DNN param hidden \"%s\": \"%.*s\" is not a width in 1..%d (want e.g. "
                     "\"256,128\", or \"\" for none)",
                     hidden, (int)(len < 16 ? len : 16), p, DNN_MAX_WIDTH);
            goto out;
        }
        n.n_layers++;
        if (!e)
            break;
        p = e + 1;
    }
    n.width[n.n_layers] = 1;
    for (uint32_t l = 0; l <= n.n_layers; l++) {
        char wn[STORE_DENSE_NAME_MAX], bn[STORE_DENSE_NAME_MAX];
        model_dnn_layer_names(l, wn, bn);
        const store_dense_t *W = store_extras_dense(x, wn), *B = store_extras_dense(x, bn);
        if (l == n.n_layers) { /* one past the last layer: must not exist */
            if (W || B) {
                snprintf(buf, sizeof buf,
                         "DNN dense array %s is present but hidden \"%s\" gives %" PRIu32
                         " weight layers",
                         W ? wn : bn, hidden, n.n_layers);
                goto out;
            }
            break;
        }
        uint64_t want_w = (uint64_t)n.width[l] * n.width[l + 1], want_b = n.width[l + 1];
        if (!W || !B) {
            snprintf(buf, sizeof buf,
                     "DNN dense array %s is missing (hidden \"%s\" gives %" PRIu32
                     " weight layers)",
                     !W ? wn : bn, hidden, n.n_layers);
            goto out;
        }
        if (W->count != want_w || !W->data) {
            snprintf(buf, sizeof buf,
                     "DNN dense array %s has %" PRIu64 " floats, want %" PRIu32 " x %" PRIu32
                     " = %" PRIu64,
                     wn, W->count, n.width[l], n.width[l + 1], want_w);
            goto out;
        }
        if (B->count != want_b || !B->data) {
            snprintf(buf, sizeof buf, "DNN dense array %s has %" PRIu64 " floats, want %" PRIu64,
                     bn, B->count, want_b);
            goto out;
        }
        n.W[l] = W->data;
        n.b[l] = B->data;
    }
    bad = NULL;
    *net = n;
out:
    if (bad) {
        if (why_len)
            snprintf(why, why_len, "%s", bad);
        return -EINVAL;
    }
    return 0;
}

__attribute__((cold)) int model_dnn_net_to_extras(const dnn_net_t *net, store_extras_t *x)
{
    if (net->n_layers < 1 || net->n_layers > DNN_MAX_LAYERS || net->fields < 1 ||
        net->dim < 1 || net->width[0] != net->fields * net->dim ||
        net->width[net->n_layers] != 1)
        return -EINVAL;
    char hidden[STORE_PARAM_VALUE_MAX] = "", num[16];
    size_t len = 0;
    for (uint32_t l = 1; l < net->n_layers; l++)
        len += (size_t)snprintf(hidden + len, sizeof hidden - len, "%s%" PRIu32,
                                l > 1 ? "," : "", net->width[l]);
    snprintf(num, sizeof num, "%" PRIu32, net->fields);
    if (store_extras_set(x, "fields", num) != 0)
        return -EINVAL;
    snprintf(num, sizeof num, "%" PRIu32, net->dim);
    if (store_extras_set(x, "dim", num) != 0 || store_extras_set(x, "hidden", hidden) != 0 ||
        store_extras_set(x, "wide", net->wide ? "1" : "0") != 0)
        return -EINVAL;
    for (uint32_t l = 0; l < net->n_layers; l++) {
        char wn[STORE_DENSE_NAME_MAX], bn[STORE_DENSE_NAME_MAX];
        if (!net->W[l] || !net->b[l])
            return -EINVAL;
        model_dnn_layer_names(l, wn, bn);
        if (store_extras_add_dense(x, wn, net->W[l],
                                   (uint64_t)net->width[l] * net->width[l + 1]) != 0)
            return -EINVAL;
        if (store_extras_add_dense(x, bn, net->b[l], net->width[l + 1]) != 0)
            return -EINVAL;
    }
    return 0;
}
