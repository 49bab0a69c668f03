/*
 * train_sync.h — what partitioned replicas need from a trainer
 * (server/online_sync.c): each step's additive statistics out, and peers'
 * statistics in.  Two families: LR-FTRL (below: (dz, dn) per coordinate)
 * and ROWS (FM, FFM, the DNN's embeddings and wide part: a row per id).
 *
 * FTRL's per-coordinate state is [z | n | w] with w a closed form of (z, n)
 * (train_lr.c).  A step changes z by dz and n by dn; both are sums over the
 * samples seen, so replicas that exchange (dz, dn) and add them hold, once
 * every increment has arrived, the same z and n whatever the order of
 * arrival (float rounding of the sums aside), and so the same w.  dn >= 0
 * always (a sum of squared gradients).
 *
 * ROWS.  With Adagrad a coordinate's state is (x, G): a step adds
 * dG = g^2 >= 0 and moves x by dx = -alpha g / (sqrt(G) + eps) (L2 in g).
 * Replicas exchange, per id a step wrote, the row's (dx, dG) for each of
 * its R coordinates (R = the served row's floats) and add them: sums
 * commute, so a late or repaired message is simply added, and once every
 * message has arrived the replicas hold the same rows (float rounding of
 * the sums aside).  Each replica's dx was made with its own G, which did
 * not yet hold its peers' latest dG: the replicas agree with each other,
 * and approximately with one node that saw every sample.  SGD: dx, and
 * dG = 0.  FM's w under FTRL: (dz, dn) in coordinate 0's two places, w
 * recomputed from FTRL's closed form, as LR's.  What is not synced stays
 * each replica's own: FM's occurrence count (its 1/c factor shrinkage).
 * The DNN's MLP is dense: frozen online, or (partitioned replicas) synced
 * as a whole vector per interval by 1-bit Adam (DENSE below,
 * train_dnn_sync.c), the server swapping whole copies in for its scorers.
 *
 *   d[0 .. R)    dx_i   (FM-FTRL: d[0] = dz)
 *   d[R .. 2R)   dG_i >= 0 on a step (FM-FTRL: d[R] = dn; SGD: 0)
 *
 * THREAD SAFETY
 *   All calls belong to the trainer's one writer (train.h): the hook runs
 *   on the thread that calls train_update, and train_lr_sync_apply and
 *   train_rows_sync_apply must be called under the same exclusion as
 *   train_update (the server: the model's writer lock).
 */
#ifndef TL_MODEL_TRAIN_SYNC_H
#define TL_MODEL_TRAIN_SYNC_H

#include "train.h"

#include <stdint.h>

/* Called once per coordinate a step wrote (the bias included, under
 * MODEL_BIAS_ID), after the write, with the step's dz and dn.  Must not
 * block or allocate: it runs on the training hot path. */
typedef void (*train_sync_fn)(void *ctx, uint64_t id, float dz, float dn);

/* Installs fn (NULL removes it).  0, or -ENOTSUP when t is not LR with
 * FTRL (the only trainer whose statistics are additive today). */
int train_lr_sync_hook(train_t *t, train_sync_fn fn, void *ctx);

/* Adds a peer's (dz, dn) to id's state: z += dz, n += dn, w recomputed
 * from the closed form, the row written to the state and, when attached,
 * w to the live store (an id the state lacks starts as a step would start
 * it: from the live weight).  The hook is NOT called (a peer's increment is
 * not this replica's to send).  0; -ENOTSUP (not LR-FTRL); -ERANGE when a
 * value or the result is not finite or n would go below 0 (nothing
 * written); -ENOMEM from the stores. */
int train_lr_sync_apply(train_t *t, uint64_t id, float dz, float dn);

/* ---- ROWS ------------------------------------------------------------------ */

/* Called once per row a step wrote (the bias's included, under
 * MODEL_BIAS_ID), after the write, with d[0..n), n = 2R (ROWS above).
 * Must not block or allocate: it runs on the training hot path.  Steps on
 * threads (train_threads.h) do not call it. */
typedef void (*train_rows_sync_fn)(void *ctx, uint64_t id, const float *d, uint32_t n);

/* R, the coordinates a row of t syncs (d holds 2R floats), or 0 when t is
 * not a row trainer (LR: its own calls above). */
uint32_t train_rows_sync_width(const train_t *t);

/* Installs fn (NULL removes it).  0, or -ENOTSUP when t is not FM, FFM or
 * the DNN. */
int train_rows_sync_hook(train_t *t, train_rows_sync_fn fn, void *ctx);

/* Adds a peer's d[0..2R) to id's state row (x += dx, G += dG; FM-FTRL's w
 * from (z, n)) and, when attached live, writes the serving row into the
 * live store exactly as a step writes it; an id the state lacks starts as
 * a step would start it (from the served row, else as a new id).  The hook
 * is NOT called.  0; -ENOTSUP (not a row trainer); -ERANGE when a value of
 * d or of the result is not finite or an accumulator would go below 0
 * (nothing written); -ENOMEM from the stores. */
int train_rows_sync_apply(train_t *t, uint64_t id, const float *d);

/* FTRL's weight of (z, n) with the trainer's alpha, beta and l1, l2 (0 for
 * the bias): what train_lr_sync_apply writes.  Exposed for the tests. */
float train_lr_ftrl_weight(double z, double n, double alpha, double beta, double l1, double l2);

/* ---- DENSE: the DNN's MLP under 1-bit Adam (train_dnn_sync.c) ---------------- */

#include "update_codec.h"

#include <stddef.h>

typedef struct train_dnn_sync train_dnn_sync_t; /* opaque */

typedef struct train_dnn_sync_config {
    uint32_t n;                 /* the MLP's parameters (floats), 1..UPDATE_MAX_COUNT */
    uint32_t chunk;             /* values per 1-bit scale, 1..65535 */
    uint32_t warmup_steps;      /* local Adam steps before the variance freezes, >= 1 */
    uint32_t value_bits;        /* after the warm-up a value goes as 1 bit (sign and the
                                   chunk's mean; 0 means 1) or 4 (UPDATE_F_LOG4: sign and a
                                   power of two under the chunk's largest) */
    float lr, beta1, beta2, eps; /* Adam's */
    uint64_t producer;          /* this replica's id on the bus (nonzero) */
    const char *model;          /* the model name messages carry */
    size_t max_msg_bytes;       /* a message's largest size (the bus's); 0: no limit.  A
                                   turn whose message would pass it goes out as parts
                                   (update_codec.h: UPDATE_F_PART), each at most this */
} train_dnn_sync_config_t;

/* All memory is allocated here (state, pending delta, error, scratch);
 * step, publish and apply never allocate.  0, -EINVAL (a config field out
 * of range) or -ENOMEM. */
int train_dnn_sync_create(train_dnn_sync_t **out, const train_dnn_sync_config_t *cfg);
void train_dnn_sync_destroy(train_dnn_sync_t *s);

/* One local Adam step of x[0..n) on gradient g[0..n): during the warm-up
 * m and v both move, after it v is frozen and only m moves; the step's
 * change of x is added to the interval's pending delta.  -EINVAL (nothing
 * changed) when g, or the result, is not finite. */
int train_dnn_sync_step(train_dnn_sync_t *s, float *x, const float *g);

bool train_dnn_sync_frozen(const train_dnn_sync_t *s); /* warm-up over */
uint64_t train_dnn_sync_steps(const train_dnn_sync_t *s); /* local steps taken */
/* The bytes of a turn's messages at most (all its parts, exact). */
size_t train_dnn_sync_bound(const train_dnn_sync_t *s);
/* The messages a turn writes at most: 1 unless an exact message of the
 * whole MLP passes max_msg_bytes. */
uint32_t train_dnn_sync_max_parts(const train_dnn_sync_t *s);

/* Encode the interval's pending delta into buf[0..cap): exact f32 during
 * the warm-up, 1 bit with the sender's error feedback after it, as one
 * message, or as parts laid end to end (update_msg_span walks them; each
 * takes the next sequence number) when one would pass max_msg_bytes.  x
 * (this replica's parameters, which already hold the true delta) is
 * corrected to hold what was sent, so every replica holds x0 + the sum of
 * sent messages once all have arrived; what was not sent stays in the
 * error vector for the next interval.  The pending delta is reset.
 * Returns the bytes written (every part), -ENOBUFS (cap under
 * train_dnn_sync_bound; nothing changed). */
long train_dnn_sync_publish(train_dnn_sync_t *s, float *x, uint8_t *buf, size_t cap);
/* Sends everything owed exact: the pending delta plus the error vector,
 * which is then 0, and x gets the error back (x holds every local step
 * again).  For a quiet interval, so that replicas that stop learning agree
 * on all their steps.  Returns the length, -ENOBUFS (cap under the bound),
 * -EINVAL (not finite; nothing changed). */
long train_dnn_sync_flush(train_dnn_sync_t *s, float *x, uint8_t *buf, size_t cap);
/* Whether a pending delta or an error vector is nonzero. */
bool train_dnn_sync_owes(const train_dnn_sync_t *s);
/* The bus header of the next published message: this producer's sequence
 * (shared with its row messages) and the model version it was made on. */
void train_dnn_sync_set_header(train_dnn_sync_t *s, uint64_t seq, uint64_t base_version);

/* Add a peer's message buf[0..len) to x[0..n) (a part: to its range).  0;
 * -EBADMSG (the bytes do not decode) or -EINVAL (not DENSE, a vector of
 * another length than n, another model, this replica's own message, a
 * result not finite): nothing written, *err names the reason (err may be
 * NULL). */
int train_dnn_sync_apply(train_dnn_sync_t *s, float *x, const uint8_t *buf, size_t len, update_error_t *err);

/* A restart (server/online_sync_dense.c): this replica's own message of an
 * earlier run, buf[0..len), subtracted from the pending delta, so the next
 * publish sends what the replayed steps add beyond what the peers already
 * hold.  x is not touched.  0; -EBADMSG, or -EINVAL (not DENSE, wrong n,
 * another model, another producer than this one's, not finite), *err
 * naming it (err may be NULL). */
int train_dnn_sync_subtract_own(train_dnn_sync_t *s, const uint8_t *buf, size_t len,
                                update_error_t *err);
/* Back to a fresh state (moments, warm-up and its configured length,
 * pending delta, error vector): for a model version whose MLP is another
 * snapshot's. */
void train_dnn_sync_reset(train_dnn_sync_t *s);

/* The state a partitioned export keeps of s (server/online_sync_export.c)
 * so that a restart continues where it stood: the step counts, and n floats
 * each of moments, pending delta and error vector, in the caller's arrays. */
typedef struct train_dnn_sync_saved {
    uint32_t n;             /* the arrays' length: s's parameters */
    uint32_t warmup_steps;  /* local steps before v freezes */
    uint64_t steps;         /* local steps taken */
    double b1_pow, b2_pow;  /* beta^t of the bias correction */
    float *m, *v;           /* n each: momentum, variance (bias-corrected once frozen) */
    float *pending, *error; /* n each: the delta not yet published, the sender's error */
} train_dnn_sync_saved_t;
/* Copies s's state into *out (its n set by the caller, its arrays the
 * caller's).  0, or -EINVAL (out->n is not s's; nothing written). */
int train_dnn_sync_save(const train_dnn_sync_t *s, train_dnn_sync_saved_t *out);
/* Puts a saved state back into s: s then publishes, steps and freezes as
 * the one saved would have (its warm-up length included).  0, or -EINVAL
 * (another n, a value not finite, v below 0, a power outside [0, 1], a
 * warm-up of 0: nothing changed). */
int train_dnn_sync_restore(train_dnn_sync_t *s, const train_dnn_sync_saved_t *in);

/* The sender's error vector (n floats): the sum of true deltas published
 * minus the sum of what messages carried. */
const float *train_dnn_sync_residual(const train_dnn_sync_t *s);
uint64_t train_dnn_sync_bytes_sent(const train_dnn_sync_t *s);
uint32_t train_dnn_sync_count(const train_dnn_sync_t *s); /* n */

/* A DNN trainer's MLP stepped by s (not owned; NULL detaches: Adam's own
 * step again) instead of its own Adam: each train_update calls
 * train_dnn_sync_step with the sample's MLP gradient (L2 folded in); a
 * step that would not be finite is -ERANGE.  s's lr, betas and eps are the
 * caller's (the trainer's lr_dense is not read).  0, -ENOTSUP (t is not a
 * DNN), -EINVAL (s's n is not the MLP's parameter count). */
int train_dnn_sync_attach(train_t *t, train_dnn_sync_t *s);
/* The MLP's parameter count of a DNN trainer (the n its sync needs), 0 if
 * t is not a DNN. */
size_t train_dnn_mlp_floats(const train_t *t);
/* t's MLP as a network (W, b into the trainer's parameters), for the
 * server to copy into its scorers (model_dnn_install_mlp); NULL if t is not
 * a DNN.  Valid while t lives; read it where t's writer is excluded. */
const dnn_net_t *train_dnn_sync_net(const train_t *t);
/* Copies net's weights over t's MLP (the served MLP a new trainer starts
 * from when the one served is no longer the snapshot's).  0, -ENOTSUP (not
 * a DNN), -EINVAL (another shape: nothing copied). */
int train_dnn_sync_load_mlp(train_t *t, const dnn_net_t *net);
/* t's MLP as its n floats (train_dnn_mlp_floats), copied out to x or in
 * from x (every value finite).  0, -ENOTSUP (not a DNN), -EINVAL (another
 * n, or a value not finite: nothing copied). */
int train_dnn_sync_get_params(const train_t *t, float *x, size_t n);
int train_dnn_sync_set_params(train_t *t, const float *x, size_t n);
/* train_dnn_sync_publish / _apply on t's MLP; -ENOTSUP when t has no s. */
long train_dnn_sync_publish_mlp(train_t *t, uint8_t *buf, size_t cap);
long train_dnn_sync_flush_mlp(train_t *t, uint8_t *buf, size_t cap); /* _flush on t's MLP */
int train_dnn_sync_apply_mlp(train_t *t, const uint8_t *buf, size_t len, update_error_t *err);

#endif
