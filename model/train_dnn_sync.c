/*
 * train_dnn_sync.c — the DNN's MLP shared by partitioned replicas with
 * 1-bit Adam (Tang et al. 2021): the MLP is dense, every sample moves every
 * parameter, so its exchange is a whole vector per interval, and a few
 * bits per value (4, or 1 as the paper; update_codec.h's DENSE messages) is
 * what makes it affordable.
 *
 * VARIANT.  1-bit Adam, not 0/1 Adam (Lu et al. 2022).  0/1 Adam freezes
 * the variance adaptively and skips rounds by a schedule that every worker
 * follows in lockstep (its rounds are synchronous all-reduces with a common
 * step count).  Our replicas exchange asynchronously: each trains on its
 * own samples at its own pace and publishes every interval; peers' messages
 * arrive late and in any order.  1-bit Adam's one decision, "the variance
 * freezes after W local steps", needs no agreement between replicas, and
 * a frozen v makes the step a linear function of the momentum, which is
 * what lets compressed deltas be summed.  From 0/1 Adam we keep only the
 * idea that replicas take local steps between exchanges (our intervals).
 *
 * ALGORITHM (per replica; x the MLP's n floats):
 *   step:    m = b1 m + (1-b1) g; during the warm-up also v = b2 v +
 *            (1-b2) g^2 (bias-corrected); x += d = -lr m / (sqrt(v)+eps);
 *            pending += d.  At the freeze v is floored at 1% of its mean,
 *            and afterwards |m / (sqrt(v)+eps)| is clipped at
 *            (1-b1)/sqrt(1-b2), the most plain Adam's ratio can reach:
 *            CTR gradients are rare and bursty (ipinyou: 1% positives),
 *            so a v frozen over a quiet warm-up is too small for a later
 *            positive's gradient, and unclipped such a step sent the MLP
 *            to NaN within a thousand samples.
 *   publish: warm-up: send pending as exact f32.  After: send
 *            q = quantize(pending + e) and keep e = pending + e - q
 *            (the sender's error feedback, update_dense_encode), q in
 *            value_bits: 4 (a sign and a power of two under the chunk's
 *            largest, UPDATE_F_LOG4) or 1 (a sign and the chunk's mean).
 *            One bit moves a value by at most its chunk's mean a message:
 *            a weight that every step pushes the same way (an output
 *            weight on a stream of rare positives) is sent at a fraction
 *            of its pace, and since x holds only what was sent, its
 *            gradient keeps asking for the same step until e winds up
 *            and lands late and at once (ipinyou, 4 replicas: the MLP ran
 *            off; docs/performance.md).  With 4 bits the chunk's largest
 *            goes out at its size.  Then
 *            x += e_old - e_new, so that x holds exactly what peers will
 *            add: every replica's x is x0 + the sum of all sent messages
 *            plus only its own pending steps.
 *            A message past max_msg_bytes (the bus's) goes out as parts
 *            over ranges of x on chunk boundaries: the same values sent.
 *   apply:   x += q of a peer (decoded; refused whole if bad), a part
 *            into its range.
 *   flush:   a quiet interval (the server: no local step) sends pending +
 *            e exact and empties e, x += e: replicas that stop learning
 *            end with every local step, not less each one's residual.
 * The sum of what a replica has sent equals the sum of its true deltas
 * minus its residual e: nothing is lost, only delayed.
 *
 * RECEIVER-SIDE ERROR FEEDBACK.  The paper's second error vector belongs to
 * its two-stage all-reduce, where a server averages and re-compresses.  On
 * our bus every replica broadcasts to every other and nobody re-compresses
 * or re-broadcasts, so there is no second quantization and nothing for a
 * receiver's error vector to hold: the receiver adds the decoded message
 * as it is.
 *
 * ORDER OF APPLICATION.  apply is an addition, so once every message has
 * arrived every replica holds the same x whatever the order (float
 * rounding of the sums aside).  Between arrivals, a replica's local steps
 * see whichever peers' messages have arrived, so the gradients (and the
 * momentum m, which stays each replica's own) depend on timing; the
 * deltas, not x, are what is exchanged, so a late message still lands.
 * v is each replica's own too: frozen after its own warm-up on its own
 * samples (partitions of one stream, so close).
 *
 * Summing (not averaging) deltas makes R replicas behave like one node
 * stepping on every sample, as the ROWS sync does (train_sync.h).
 *
 * THREAD SAFETY
 *   A train_dnn_sync_t and its x belong to one writer (the trainer); the
 *   caller serialises step, publish and apply.
 */
#include "train_sync.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct train_dnn_sync {
    uint32_t n;             /* parameters */
    uint32_t warmup_steps;  /* local steps before v freezes (a restored state's own) */
    uint32_t warmup_cfg;    /* the configured one: a reset goes back to it */
    uint64_t steps;         /* local steps taken */
    uint32_t quantized_flags; /* after the warm-up: 0 (1 bit) or UPDATE_F_LOG4 */
    float lr, beta1, beta2, eps;
    float ratio_max;        /* (1-b1)/sqrt(1-b2): plain Adam's largest |m/sqrt(v)| */
    double b1_pow, b2_pow;  /* beta^t for the bias correction */
    uint64_t producer;      /* own id: own messages are refused on apply */
    size_t name_len;
    char model[UPDATE_NAME_MAX];
    uint64_t bytes_sent;    /* sum of published message lengths */
    uint64_t base_version;  /* in the next message's header */
    size_t max_msg_bytes;   /* 0: no limit */
    float *m;               /* n: momentum (this replica's own) */
    float *v;               /* n: variance, bias-corrected once frozen */
    float *pending;         /* n: sum of this interval's local deltas */
    float *scratch;         /* n: old error on publish, decoded message on apply */
    update_dense_t *enc;    /* 1-bit encoder with the sender's error vector */
};

static uint32_t parts_of(const train_dnn_sync_t *s, uint32_t flags, uint32_t *per_out);

int train_dnn_sync_create(train_dnn_sync_t **out, const train_dnn_sync_config_t *cfg)
{
    *out = NULL;
    if (!cfg->n || cfg->n > UPDATE_MAX_COUNT || !cfg->warmup_steps || !cfg->chunk || cfg->chunk > 65535 || !cfg->producer || !cfg->model)
        return -EINVAL;
    if (cfg->value_bits != 0 && cfg->value_bits != 1 && cfg->value_bits != 4)
        return -EINVAL;
    size_t name_len = strlen(cfg->model);
    if (!name_len || name_len > UPDATE_NAME_MAX)
        return -EINVAL;
    if (!(cfg->lr > 0) || !(cfg->beta1 >= 0 && cfg->beta1 < 1) || !(cfg->beta2 >= 0 && cfg->beta2 < 1) ||
        !(cfg->eps > 0) || !isfinite(cfg->lr))
        return -EINVAL;
    train_dnn_sync_t *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->n = cfg->n;
    s->warmup_steps = cfg->warmup_steps;
    s->warmup_cfg = cfg->warmup_steps;
    s->quantized_flags = cfg->value_bits == 4 ? UPDATE_F_LOG4 : 0;
    s->lr = cfg->lr;
    s->beta1 = cfg->beta1;
    s->beta2 = cfg->beta2;
    s->eps = cfg->eps;
    s->ratio_max = (1 - cfg->beta1) / sqrtf(1 - cfg->beta2);
    s->b1_pow = 1;
    s->b2_pow = 1;
    s->producer = cfg->producer;
    s->max_msg_bytes = cfg->max_msg_bytes;
    s->name_len = name_len;
    memcpy(s->model, cfg->model, name_len);
    s->m = calloc(cfg->n, sizeof(float));
    s->v = calloc(cfg->n, sizeof(float));
    s->pending = calloc(cfg->n, sizeof(float));
    s->scratch = calloc(cfg->n, sizeof(float));
    int rc = -ENOMEM;
    if (!s->m || !s->v || !s->pending || !s->scratch)
        goto out;
    rc = update_dense_create(&s->enc, cfg->n, cfg->chunk, cfg->producer, 1, cfg->model);
    if (rc < 0)
        goto out;
    uint32_t per;
    rc = -EINVAL;
    if (parts_of(s, UPDATE_F_EXACT, &per) == 0)
        goto out; /* max_msg_bytes under a message of one value */
    *out = s;
    return 0;
out:
    train_dnn_sync_destroy(s);
    return rc;
}

void train_dnn_sync_destroy(train_dnn_sync_t *s)
{
    if (!s)
        return;
    update_dense_destroy(s->enc);
    free(s->m);
    free(s->v);
    free(s->pending);
    free(s->scratch);
    free(s);
}

bool train_dnn_sync_frozen(const train_dnn_sync_t *s) { return s->steps >= s->warmup_steps; }

uint64_t train_dnn_sync_steps(const train_dnn_sync_t *s) { return s->steps; }

/* The parts a turn of flags sends (1: the whole vector in one message),
 * each of *per values but the last (the rest); 0 when a message of one
 * value passes max_msg_bytes.  Parts are as many as the limit needs and as
 * even as they can be. */
static uint32_t parts_of(const train_dnn_sync_t *s, uint32_t flags, uint32_t *per_out)
{
    *per_out = s->n;
    if (!s->max_msg_bytes || update_dense_bound(s->enc, flags) <= s->max_msg_bytes)
        return 1;
    if (update_dense_part_bound(s->enc, 1, flags) > s->max_msg_bytes)
        return 0;
    uint32_t lo = 1, hi = s->n - 1; /* the most values a part fits: in [lo, hi] */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo + 1) / 2;
        if (update_dense_part_bound(s->enc, mid, flags) <= s->max_msg_bytes)
            lo = mid;
        else
            hi = mid - 1;
    }
    /* Parts start on chunk boundaries, so a 1-bit part's scales are the
     * whole message's: parts change the framing, not one value sent. */
    uint32_t c = update_dense_chunk(s->enc);
    if (lo >= c)
        lo -= lo % c;
    uint32_t parts = s->n / lo + (s->n % lo != 0);
    uint32_t per = s->n / parts + (s->n % parts != 0); /* <= lo: as many, evened out */
    if (lo >= c && per % c)
        per += c - per % c; /* still <= lo, a multiple of c */
    *per_out = per;
    return s->n / per + (s->n % per != 0);
}

size_t train_dnn_sync_bound(const train_dnn_sync_t *s)
{
    uint32_t per, parts = parts_of(s, UPDATE_F_EXACT, &per);
    if (parts <= 1)
        return update_dense_bound(s->enc, UPDATE_F_EXACT);
    return (size_t)(parts - 1) * update_dense_part_bound(s->enc, per, UPDATE_F_EXACT) +
           update_dense_part_bound(s->enc, s->n - (parts - 1) * per, UPDATE_F_EXACT);
}

uint32_t train_dnn_sync_max_parts(const train_dnn_sync_t *s)
{
    uint32_t per;
    return parts_of(s, UPDATE_F_EXACT, &per);
}

/* v[0..n) encoded as the turn's messages of flags into buf, end to end:
 * the bytes, -ENOBUFS or -E2BIG (no part fits the limit). */
static long encode_parts(train_dnn_sync_t *s, const float *v, uint32_t flags, uint8_t *buf, size_t cap)
{
    uint32_t per, parts = parts_of(s, flags, &per);
    if (!parts)
        return -E2BIG;
    size_t off = 0;
    for (uint32_t at = 0; at < s->n; at += per) {
        uint32_t count = s->n - at < per ? s->n - at : per;
        long len = update_dense_encode_part(s->enc, v, at, count, flags, s->base_version, buf + off, cap - off);
        if (len < 0)
            return len;
        off += (size_t)len;
    }
    return (long)off;
}

const float *train_dnn_sync_residual(const train_dnn_sync_t *s) { return update_dense_error(s->enc); }

uint64_t train_dnn_sync_bytes_sent(const train_dnn_sync_t *s) { return s->bytes_sent; }

uint32_t train_dnn_sync_count(const train_dnn_sync_t *s) { return s->n; }

/* v bias-corrected, and floored at VAR_FLOOR x its mean: a parameter
 * whose gradient was still 0 at the freeze (a ReLU that never fired, an
 * input field not yet seen) would otherwise step by lr m / eps for ever. */
#define VAR_FLOOR 0.01
static void freeze_variance(train_dnn_sync_t *s, float c2)
{
    double sum = 0;
    for (uint32_t i = 0; i < s->n; i++)
        sum += (double)s->v[i] * c2;
    float floor_v = (float)(VAR_FLOOR * sum / s->n);
    for (uint32_t i = 0; i < s->n; i++) {
        float v = s->v[i] * c2;
        s->v[i] = v > floor_v ? v : floor_v;
    }
}

int train_dnn_sync_step(train_dnn_sync_t *s, float *x, const float *g)
{
    for (uint32_t i = 0; i < s->n; i++)
        if (!isfinite(g[i]))
            return -EINVAL;
    bool frozen = train_dnn_sync_frozen(s);
    float b1 = s->beta1, b2 = s->beta2;
    double b1_pow = s->b1_pow * b1;
    float c1 = (float)(1.0 / (1.0 - b1_pow)); /* momentum bias correction */
    float c2 = 1.0f;
    double b2_pow = s->b2_pow;
    if (!frozen) {
        b2_pow *= b2;
        c2 = (float)(1.0 / (1.0 - b2_pow));
    }
    /* First pass: the step's delta into scratch, refused whole if any
     * result is not finite (x, m, v untouched). */
    for (uint32_t i = 0; i < s->n; i++) {
        float m = b1 * s->m[i] + (1 - b1) * g[i];
        float v = frozen ? s->v[i] : b2 * s->v[i] + (1 - b2) * g[i] * g[i];
        float ratio = (m * c1) / (sqrtf(frozen ? v : v * c2) + s->eps);
        if (frozen) /* never further than plain Adam can step */
            ratio = ratio > s->ratio_max ? s->ratio_max : ratio < -s->ratio_max ? -s->ratio_max : ratio;
        float d = -s->lr * ratio;
        if (!isfinite(d) || !isfinite(x[i] + d) || !isfinite(v))
            return -EINVAL;
        s->scratch[i] = d;
    }
    for (uint32_t i = 0; i < s->n; i++) {
        s->m[i] = b1 * s->m[i] + (1 - b1) * g[i];
        if (!frozen)
            s->v[i] = b2 * s->v[i] + (1 - b2) * g[i] * g[i];
        x[i] += s->scratch[i];
        s->pending[i] += s->scratch[i];
    }
    s->b1_pow = b1_pow;
    s->b2_pow = b2_pow;
    s->steps++;
    if (!frozen && train_dnn_sync_frozen(s))
        freeze_variance(s, c2);
    return 0;
}

long train_dnn_sync_publish(train_dnn_sync_t *s, float *x, uint8_t *buf, size_t cap)
{
    bool onebit = train_dnn_sync_frozen(s);
    uint32_t flags = onebit ? s->quantized_flags : UPDATE_F_EXACT;
    if (cap < train_dnn_sync_bound(s)) /* every part fits: none is half sent */
        return -ENOBUFS;
    const float *err = update_dense_error(s->enc);
    memcpy(s->scratch, err, sizeof(float) * s->n);
    long len = encode_parts(s, s->pending, flags, buf, cap);
    if (len < 0)
        return len; /* -EINVAL cannot happen: step keeps pending finite */
    if (onebit)
        for (uint32_t i = 0; i < s->n; i++)
            x[i] += s->scratch[i] - err[i];
    memset(s->pending, 0, sizeof(float) * s->n);
    s->bytes_sent += (uint64_t)len;
    return len;
}

long train_dnn_sync_flush(train_dnn_sync_t *s, float *x, uint8_t *buf, size_t cap)
{
    if (cap < train_dnn_sync_bound(s))
        return -ENOBUFS;
    const float *err = update_dense_error(s->enc);
    for (uint32_t i = 0; i < s->n; i++) {
        s->scratch[i] = s->pending[i] + err[i];
        if (!isfinite(s->scratch[i]) || !isfinite(x[i] + err[i]))
            return -EINVAL;
    }
    long len = encode_parts(s, s->scratch, UPDATE_F_EXACT, buf, cap);
    if (len < 0)
        return len;
    for (uint32_t i = 0; i < s->n; i++) /* x back to every local step: the peers get them all */
        x[i] += err[i];
    update_dense_clear_error(s->enc);
    memset(s->pending, 0, sizeof(float) * s->n);
    s->bytes_sent += (uint64_t)len;
    return len;
}

bool train_dnn_sync_owes(const train_dnn_sync_t *s)
{
    const float *err = update_dense_error(s->enc);
    for (uint32_t i = 0; i < s->n; i++)
        if (err[i] != 0 || s->pending[i] != 0)
            return true;
    return false;
}

void train_dnn_sync_set_header(train_dnn_sync_t *s, uint64_t seq, uint64_t base_version)
{
    update_dense_set_next_seq(s->enc, seq);
    s->base_version = base_version;
}

static int refuse(update_error_t *err, const char *fmt, unsigned long long a, unsigned long long b)
{
    if (err) {
        err->code = UPDATE_OK;
        err->offset = 0;
        snprintf(err->msg, sizeof err->msg, fmt, a, b);
    }
    return -EINVAL;
}

/* Decodes a DENSE message of this model and n into s->scratch[dense_offset,
 * + count): 0, or the refusal (the producer is checked by the callers). */
static int decode_dense(train_dnn_sync_t *s, const uint8_t *buf, size_t len, update_msg_t *msg,
                        update_error_t *err)
{
    int rc = update_msg_decode(buf, len, msg, err);
    if (rc < 0)
        return rc;
    if (!(msg->flags & UPDATE_F_DENSE))
        return refuse(err, "MLP message: not DENSE (flags 0x%llx)%.0llu", msg->flags, 0);
    if (msg->dense_total != s->n)
        return refuse(err, "MLP message: of a vector of %llu values, the MLP has %llu",
                      msg->dense_total, s->n);
    if (msg->model_len != s->name_len || memcmp(msg->model, s->model, s->name_len) != 0)
        return refuse(err, "MLP message: model name of %llu bytes is not this model's%.0llu",
                      msg->model_len, 0);
    rc = update_msg_dense(msg, s->scratch, s->n);
    if (rc < 0)
        return refuse(err, "MLP message: dense payload did not decode (%llu)%.0llu",
                      (unsigned long long)-rc, 0);
    return 0;
}

int train_dnn_sync_subtract_own(train_dnn_sync_t *s, const uint8_t *buf, size_t len,
                                update_error_t *err)
{
    update_msg_t msg;
    int rc = decode_dense(s, buf, len, &msg, err);
    if (rc < 0)
        return rc;
    if (msg.producer != s->producer)
        return refuse(err, "MLP message: producer %llu is not this replica (%llu)", msg.producer,
                      s->producer);
    const uint32_t lo = msg.dense_offset, hi = lo + msg.count;
    for (uint32_t i = lo; i < hi; i++)
        if (!isfinite(s->pending[i] - s->scratch[i]))
            return refuse(err, "MLP message: pending %llu would become non-finite%.0llu", i, 0);
    for (uint32_t i = lo; i < hi; i++)
        s->pending[i] -= s->scratch[i];
    return 0;
}

int train_dnn_sync_save(const train_dnn_sync_t *s, train_dnn_sync_saved_t *out)
{
    if (out->n != s->n)
        return -EINVAL;
    out->warmup_steps = s->warmup_steps;
    out->steps = s->steps;
    out->b1_pow = s->b1_pow;
    out->b2_pow = s->b2_pow;
    memcpy(out->m, s->m, sizeof(float) * s->n);
    memcpy(out->v, s->v, sizeof(float) * s->n);
    memcpy(out->pending, s->pending, sizeof(float) * s->n);
    memcpy(out->error, update_dense_error(s->enc), sizeof(float) * s->n);
    return 0;
}

int train_dnn_sync_restore(train_dnn_sync_t *s, const train_dnn_sync_saved_t *in)
{
    if (in->n != s->n || !in->warmup_steps || !(in->b1_pow >= 0 && in->b1_pow <= 1) ||
        !(in->b2_pow >= 0 && in->b2_pow <= 1))
        return -EINVAL;
    for (uint32_t i = 0; i < s->n; i++)
        if (!isfinite(in->m[i]) || !(in->v[i] >= 0) || !isfinite(in->v[i]) ||
            !isfinite(in->pending[i]) || !isfinite(in->error[i]))
            return -EINVAL;
    s->warmup_steps = in->warmup_steps;
    s->steps = in->steps;
    s->b1_pow = in->b1_pow;
    s->b2_pow = in->b2_pow;
    memcpy(s->m, in->m, sizeof(float) * s->n);
    memcpy(s->v, in->v, sizeof(float) * s->n);
    memcpy(s->pending, in->pending, sizeof(float) * s->n);
    update_dense_set_error(s->enc, in->error);
    return 0;
}

void train_dnn_sync_reset(train_dnn_sync_t *s)
{
    memset(s->m, 0, sizeof(float) * s->n);
    memset(s->v, 0, sizeof(float) * s->n);
    memset(s->pending, 0, sizeof(float) * s->n);
    update_dense_clear_error(s->enc);
    s->warmup_steps = s->warmup_cfg;
    s->steps = 0;
    s->b1_pow = 1;
    s->b2_pow = 1;
}

int train_dnn_sync_apply(train_dnn_sync_t *s, float *x, const uint8_t *buf, size_t len, update_error_t *err)
{
    update_msg_t msg;
    int rc = decode_dense(s, buf, len, &msg, err);
    if (rc < 0)
        return rc;
    if (msg.producer == s->producer)
        return refuse(err, "MLP message: producer %llu is this replica%.0llu", msg.producer, 0);
    const uint32_t lo = msg.dense_offset, hi = lo + msg.count;
    for (uint32_t i = lo; i < hi; i++)
        if (!isfinite(x[i] + s->scratch[i]))
            return refuse(err, "MLP message: parameter %llu would become non-finite%.0llu", i, 0);
    for (uint32_t i = lo; i < hi; i++)
        x[i] += s->scratch[i];
    return 0;
}
