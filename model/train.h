/*
 * train.h — training every model kind through one handle: a train_t made
 * from a train_options_t, driven by per-sample updates, exported as a
 * serving snapshot that model_load() and tlserve accept.  Each kind (LR, FM,
 * FFM, DNN) is one table of functions, train_ops_t (as Redis's dictType),
 * implemented in one file: train_lr.c, train_fm.c, train_ffm.c,
 * train_dnn.c.  The option checks they share and the create-store-reserve
 * step live once, in train.c; callers (tltrain, train_bench, the server's
 * online trainer) switch on nothing.
 *
 * A SAMPLE is what the server has after decoding a request: a shared block
 * (user, context) and one item block, both codec_block_t (ids, values;
 * values NULL = all 1), with a label (0 or 1) and a weight (>= 0; 1 for
 * plain logloss).  Its features are the shared block's followed by the
 * item's, in that order.  An update scores the sample (the prediction made
 * BEFORE the step), then takes one optimizer step on logloss x weight.
 *
 * Predictions are the scoring path's: a trainer computes p with the
 * arithmetic model_score() runs (model.c, ffm.c, dnn.c) on the serving
 * floats of its state rows, so an export scores a sample given as the
 * shared block with an empty item bit for bit as the trainer predicted it
 * (with a non-empty item the sums run in one pass over both blocks, which
 * model_score splits in two: equal to rounding).
 *
 * WHERE THE SERVED WEIGHTS ARE.  An update writes the very floats that
 * export copies out and model_score then reads, but inside state rows that
 * are wider than serving rows (the rows and K of each kind are below):
 *
 *   LR    store_t; the weight is float 2 of FTRL's [z | n | w], float 0 of
 *         Adagrad's [w | G] and of SGD's [w]: FTRL's is NOT a prefix
 *   FM    store_t; the serving row [w | v] is the first 1 + k floats
 *   FFM   a private row table (train_ffm.c says why); [w | v] the first 1 + F k
 *   DNN   store_t; [w | e] the first 1 + d floats; the MLP is a dense array
 *         in the trainer's memory that Adam steps in place
 *
 * The bias is the row under MODEL_BIAS_ID, its weight where an id's w is.
 * So a live scorer can read today the stores of LR, FM and DNN
 * (train_store()) with store_lookup_batch, taking each row's served floats
 * at the offsets above; model_score() cannot point at such a store,
 * since it takes K from the store and the trainer's K is the state's.  The
 * online trainer that scores what it trains needs: a scorer that reads a
 * row's served floats out of a wider row (an offset for LR-FTRL, or its row
 * reordered to [w | z | n]), FFM's rows in a store_t, and a published copy
 * of the DNN's MLP (swapped whole, as model versions are) rather than the
 * array being stepped.
 *
 * THREAD SAFETY
 *   One writer: a train_t is driven by one thread (update, reserve,
 *   predict and export all reuse its work space).  LR's, FM's and DNN's
 *   state is a store_t (train_store()): store.h's rule holds, one writer
 *   per store shard (the trainer owns every shard of its store) and any
 *   number of lock-free readers (store_lookup_batch): neither side waits
 *   for the other.  A reader may see a row of more than one float halfway
 *   through its update (old and new floats mixed; store.h promises untorn
 *   reads for one-float rows only), which scoring tolerates as it
 *   tolerates the sample's own step.  FFM's row table and the DNN's MLP
 *   are stepped in place without a publication protocol: only the writer
 *   may read them (train_store() is NULL for FFM).
 *   Training on several threads (LR, FM, FFM) is train_threads.h's
 *   train_threads_epoch, which takes the handle whole for its duration:
 *   no other call on it may run meanwhile.
 *
 * ERRORS: -EINVAL with a sentence for bad options, -ENOMEM when the state or
 * the work space cannot grow (the model is then partially updated); exports
 * return -errno with a store_error_t naming what failed.
 */
#ifndef TL_MODEL_TRAIN_H
#define TL_MODEL_TRAIN_H

#include "codec/codec.h"
#include "dnn.h"
#include "store/store.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum train_optimizer {
    TRAIN_FTRL = 0,
    TRAIN_ADAGRAD = 1,
    TRAIN_SGD = 2,
} train_optimizer_t;

/* "ftrl" / "adagrad" / "sgd" -> optimizer; 0 or -EINVAL. */
int train_optimizer_parse(const char *name, train_optimizer_t *out);
const char *train_optimizer_name(train_optimizer_t opt);

/* ---- options, one struct per kind ------------------------------------------
 *
 * LR (train_lr.c), state per id (fp32):
 *   FTRL     K = 3  [ z | n | w ]   w = the weight implied by z, n (cached)
 *   Adagrad  K = 2  [ w | sum g^2 ]
 *   SGD      K = 1  [ w ]
 * The bias is the entry under MODEL_BIAS_ID, trained like a feature of value
 * 1 but never regularised (no L1/L2). */
typedef struct train_lr_options {
    train_optimizer_t optimizer;
    double alpha;           /* learning rate (FTRL alpha, Adagrad/SGD step); > 0 */
    double beta;            /* FTRL beta (>= 0); Adagrad: epsilon added to sqrt(sum g^2) */
    double l1;              /* FTRL only; >= 0 */
    double l2;              /* >= 0 */
    uint64_t expected_keys; /* sizing hint; 0 = small */
    uint32_t shards;        /* trainer store shards; 0 = 16 */
} train_lr_options_t;

/* FM (train_fm.c):
 *
 * margin = bias + s sum_j w_j x_j + s^2 0.5 sum_f [(sum_j v_jf x_j)^2 - sum_j (v_jf x_j)^2]
 *
 * s = 1 / sqrt(sum_j x_j^2) with instance normalisation (norm: every sample
 * scaled to unit L2 norm, as xLearn does; s = 1 for a sample whose x are all
 * 0), else s = 1.  The export records norm in the snapshot's params.
 *
 * Trainer state per id (fp32); the serving row [w | v_1..v_k] is its prefix:
 *
 *   SGD      K = 2 + k       [ w | v_1..v_k | c ]                      k <= 64
 *   Adagrad  K = 3 + 2k      [ w | v_1..v_k | Gw | Gv_1..Gv_k | c ]    k <= 64
 *   FTRL     K = 4 + 2k      [ w | v_1..v_k | z | n | Gv_1..Gv_k | c ] k <= 64
 *                            (FTRL-Proximal for w, Adagrad for v;
 *                            c: the id's occurrences so far)
 *
 * A new id's v starts as N(0, init_stdev^2) drawn from a hash of (seed, id,
 * f): the same for any sample order.  The bias (MODEL_BIAS_ID, first float)
 * is never regularised.  The factors' L2 at an id's c-th occurrence is
 * l2_v + l2_v_freq / c (frequency-adaptive: rare ids' factors shrink hard,
 * frequent ids' are left to the data; train_fm.c says why). */
typedef struct train_fm_options {
    train_optimizer_t optimizer;
    uint32_t k;             /* factors: 1..64 (MODEL_FM_MAX_K) */
    double alpha;           /* learning rate (w and v; FTRL alpha for w); > 0 */
    double beta;            /* FTRL beta for w; Adagrad epsilon; >= 0 */
    double l1;              /* FTRL (w) only; >= 0 */
    double l2;              /* L2 on w; >= 0 */
    double l2_v;            /* L2 on v; >= 0 */
    double l2_v_freq;       /* + l2_v_freq / c on v at an id's c-th occurrence; >= 0 */
    double init_stdev;      /* v ~ N(0, init_stdev^2); >= 0 */
    bool norm;              /* instance normalisation (s = 1/|x|) */
    uint64_t seed;          /* of the v initialisation */
    uint64_t expected_keys; /* sizing hint; 0 = small */
    uint32_t shards;        /* trainer store shards; 0 = 16 */
} train_fm_options_t;

/* Passes over the training data that the FM Adagrad defaults are tuned for. */
#define TRAIN_FM_DEFAULT_EPOCHS 10

/* FFM (train_ffm.c):
 *
 *   margin = bias + s sum_j w_j x_j
 *                 + s^2 sum_{j<l} <v_{j,field(l)}, v_{l,field(j)}> x_j x_l
 *
 * (s = 1/|x| with instance normalisation, else 1).  Trainer state per id
 * (fp32, K = 1 + F k); the serving row [w | v_0 .. v_{F-1}] is its prefix:
 *
 *   SGD      [ w | v (F k) ]                    1 + F k  <= STORE_MAX_VALUE_FLOATS
 *   Adagrad  [ w | v (F k) | Gw | Gv (F k) ]    2 + 2F k <= STORE_MAX_VALUE_FLOATS
 *   FTRL     [ w | v (F k) | z | n | Gv (F k) ] 3 + 2F k <= STORE_MAX_VALUE_FLOATS
 *            (FTRL-Proximal for the bias and w, as FM: w the closed form of
 *            z, n with alpha x w_ratio, beta, l1, l2; the bias with l1 = l2 =
 *            0.  Adagrad for v with alpha, epsilon beta and l2_v)
 *
 * A new id's v starts uniform in [0, init_stdev) from a hash of (seed, id,
 * coordinate): the same for any sample order. */
typedef struct train_ffm_options {
    train_optimizer_t optimizer; /* TRAIN_ADAGRAD (default), TRAIN_FTRL or TRAIN_SGD */
    uint32_t fields, k;     /* F in 1..FFM_MAX_FIELDS, k >= 1; the state row must fit
                             * STORE_MAX_VALUE_FLOATS */
    double alpha;           /* learning rate of v; > 0 */
    double w_ratio;         /* the bias and w step at alpha x w_ratio (FTRL: that is
                             * their FTRL alpha); > 0 */
    double beta;            /* Adagrad: added to sqrt(sum g^2) (v, and w unless FTRL);
                             * FTRL: beta for w; >= 0 */
    double l1;              /* FTRL only: L1 on w; >= 0 */
    double l2;              /* L2 on w (FTRL: in the closed form); >= 0 */
    double l2_v;            /* L2 on v; >= 0 */
    double init_stdev;      /* v starts uniform in [0, init_stdev) (LIBFFM's 1/sqrt(k)
                             * for k = 4 by default); >= 0 */
    bool norm;              /* instance normalisation (s = 1/|x|) */
    uint64_t seed;          /* of the v initialisation */
    uint64_t expected_keys; /* sizing hint; 0 = small */
} train_ffm_options_t;

/* Passes over the training data that the FFM defaults are tuned for. */
#define TRAIN_FFM_DEFAULT_EPOCHS 11

/* DNN (train_dnn.c), the Wide & Deep network of dnn.h: Adagrad for the
 * sparse part (wide weights, embeddings, the global bias), Adam for the
 * dense MLP.  Trainer state per id (fp32); the serving row [w | e] is its
 * prefix:
 *
 *   [ w | e_1..e_d | Gw | Ge_1..Ge_d ]     K = 2 + 2d, d <= 511
 *
 * A new id's e starts as N(0, init_stdev^2) drawn from a hash of (seed, id,
 * coordinate).  The MLP goes into the snapshot's extras. */
#define TRAIN_DNN_MAX_DIM ((STORE_MAX_VALUE_FLOATS - 2) / 2) /* 511 */
#define TRAIN_DNN_DEFAULT_EPOCHS 1 /* passes tltrain makes unless told */

typedef struct train_dnn_options {
    uint32_t fields;        /* F: an id's field is (id >> 56) % F; 1..256 */
    uint32_t dim;           /* d: embedding size, 1..TRAIN_DNN_MAX_DIM; F*d <= DNN_MAX_WIDTH */
    uint32_t n_hidden;      /* hidden layers: 0..DNN_MAX_LAYERS-1 */
    uint32_t hidden[DNN_MAX_LAYERS - 1]; /* their widths, 1..DNN_MAX_WIDTH */
    bool wide;              /* train and serve the wide weights w */
    double lr_sparse;       /* Adagrad step for w, e and the bias; > 0 */
    double lr_dense;        /* Adam step for the MLP (beta1 .9, beta2 .999, eps 1e-8); > 0 */
    double l2;              /* L2 on w and e; >= 0 */
    double l2_dense;        /* L2 on the MLP weights (not its biases); >= 0 */
    double init_stdev;      /* e ~ N(0, init_stdev^2); >= 0 */
    uint64_t seed;          /* of the embedding and MLP initialisation */
    uint64_t expected_keys; /* sizing hint; 0 = small */
    uint32_t shards;        /* trainer store shards; 0 = 16 */
} train_dnn_options_t;

/* Fills o with each kind's tuned defaults (train_*.c say where from).  LR,
 * FM and FFM take the optimizer; FM's Adagrad defaults are the tuned ones
 * (norm on, alpha 0.2, beta 1, l2 and l2_v 2e-5, l2_v_freq 3), FTRL's and
 * SGD's untuned starting points (norm off).  FFM: k 4, norm on, fields left
 * 0 (the caller must set them); Adagrad's are the tuned ones, FTRL keeps
 * them for v and has its own l1, l2 for w (train_ffm.c).  DNN: 26 fields,
 * d 16, hidden 256,128, wide. */
void train_lr_defaults(train_optimizer_t opt, train_lr_options_t *o);
void train_fm_defaults(train_optimizer_t opt, train_fm_options_t *o);
void train_ffm_defaults(train_optimizer_t opt, train_ffm_options_t *o);
void train_dnn_defaults(train_dnn_options_t *o);

/* A trainer's options: the kind, and that kind's struct. */
typedef struct train_options {
    store_model_kind_t kind; /* STORE_MODEL_LR, _FM, _FFM or _DNN */
    union {
        train_lr_options_t lr;
        train_fm_options_t fm;
        train_ffm_options_t ffm;
        train_dnn_options_t dnn;
    };
} train_options_t;

/* o = kind's defaults (the optimizer is used by LR, FM and FFM; DNN has
 * its own).  0, or -EINVAL for a kind nobody trains. */
int train_defaults(store_model_kind_t kind, train_optimizer_t opt, train_options_t *o);

/* The optimizer a kind is tuned with: FTRL for LR, Adagrad for FM and FFM
 * (and the DNN's embeddings, whose optimizer is fixed).  FM and FFM also
 * train with FTRL (FTRL-Proximal for the bias and w, Adagrad for v). */
train_optimizer_t train_default_optimizer(store_model_kind_t kind);

/* The passes over a training file the defaults are tuned for. */
uint32_t train_default_epochs(const train_options_t *o);

/* Where the kind keeps its field count (FFM, DNN), NULL when it has none:
 * for a caller that learns the fields from the data before creating. */
uint32_t *train_options_fields(train_options_t *o);

/* ---- the table of functions a kind implements ------------------------------
 *
 * impl is the kind's own state, made by create.  A sample reaches the kind
 * as one run of features (ids, values may be NULL = all 1; n of them):
 * train.c joins the shared and the item block when both are non-empty.
 * Calls come from the one writer thread. */
typedef struct train_ops {
    store_model_kind_t kind;
    const char *name; /* "lr", "fm", "ffm", "dnn" */
    /* 0, -EINVAL (a sentence in why) or -ENOMEM; may block (mmap). */
    int (*create)(const train_options_t *o, void **impl, char *why, size_t why_len);
    void (*destroy)(void *impl);
    /* Sizes the work space for samples of up to n features: 0 or -ENOMEM. */
    int (*reserve)(void *impl, uint32_t n);
    /* p under the current parameters (unseen ids count 0, as served); NAN
     * when the work space cannot grow. */
    float (*predict)(void *impl, const uint64_t *ids, const float *values, uint32_t n);
    /* One step on logloss x weight; *p (when non-NULL) gets the prediction
     * made before the step.  0 or -ENOMEM. */
    int (*update)(void *impl, const uint64_t *ids, const float *values, uint32_t n, float label,
                  float weight, float *p);
    /* Serving snapshot into dir (store_snapshot_write rules); blocks.  0, or
     * -errno with *err filled (train_export). */
    int (*export_snapshot)(const void *impl, const char *dir, const store_meta_t *meta,
                           store_error_t *err);
    /* The state store (NULL when the kind keeps no store_t). */
    const store_t *(*store)(const void *impl);
    /* One line of hyper-parameters, for logs. */
    void (*describe)(const void *impl, char *buf, size_t len);
    /* train_attach_live_model (x NULL from train_attach_live); NULL when the
     * kind cannot write a served store. */
    int (*attach_live)(void *impl, store_t *live, const store_extras_t *x, char *why,
                       size_t why_len);
    /* train_update of a whole batch (the shared block and n_items items),
     * with the same steps, predictions and results as update() item by item
     * on shared ++ item; NULL when the kind has none (train_update then
     * joins and calls update() per item). */
    int (*update_batch)(void *impl, const codec_block_t *shared, const codec_block_t *items,
                        uint32_t n_items, const float *labels, const float *weights, float *p);
    /* Library-private (train_impl.h): how train_threads_epoch trains the
     * kind on threads; NULL when it cannot (the DNN). */
    const struct train__par_ops *par;
    /* Library-private (train_sync_impl.h): partitioned replicas' row sync
     * (train_sync.h: ROWS); NULL when the kind has none (LR: FTRL's own). */
    const struct train__rows_ops *rows;
} train_ops_t;

/* The table of a kind, NULL when nobody trains it. */
const train_ops_t *train_ops_for(store_model_kind_t kind);

/* The table whose name is name ("lr", "fm", "ffm", "dnn"), NULL when none:
 * for a command line's --model. */
const train_ops_t *train_ops_named(const char *name);

/* ---- the trainer (one writer thread) ----------------------------------------- */

typedef struct train train_t; /* opaque */

/* Checks o and creates a trainer with an empty model and work space for
 * samples of 64 features.  0, -EINVAL (bad options; a sentence in why when
 * why_len > 0) or -ENOMEM.  The caller owns *out (train_destroy).  May
 * block (allocation, mmap). */
int train_create(const train_options_t *o, train_t **out, char *why, size_t why_len);
void train_destroy(train_t *t);

const train_ops_t *train_ops(const train_t *t);
const train_options_t *train_options(const train_t *t);

/* Sizes the work space for samples of up to n features in shared and item
 * together (0 or -ENOMEM); update and predict grow it themselves, so a
 * caller that wants no allocation on its path calls this once. */
int train_reserve(train_t *t, uint32_t n);

/* The click probability of the sample (shared, item) under the current
 * parameters; item may be NULL (no item features).  NAN when the work space
 * cannot grow. */
float train_predict(train_t *t, const codec_block_t *shared, const codec_block_t *item);

/* One optimizer step per item: sample i is (shared, items[i]) with
 * labels[i] and weights[i] (weights NULL: all 1).  p (when non-NULL) gets
 * n_items predictions, each made before its own step (so item i sees the
 * steps of items 0..i-1).  0, or -ENOMEM (items before the failing one are
 * learned; the failing one is partially), or -ERANGE (LR: a step would
 * have made a non-finite value, which is not written: the sample is learned
 * up to that feature; every value held stays finite.  FM: a serving row
 * would not be finite; the items before are learned and written, the
 * failing one not at all, train_fm_batch.c). */
int train_update(train_t *t, const codec_block_t *shared, const codec_block_t *items,
                 uint32_t n_items, const float *labels, const float *weights, float *p);

/* Writes the current weights as a serving snapshot of the trainer's kind
 * into dir (meta's model_kind is replaced by it).  Blocks.  0, or -errno
 * with *err filled: the store's (store_snapshot_write_ex), -ENOMEM, or
 * -EINVAL with code STORE_E_MODEL when the model's params do not fit a
 * snapshot's extras. */
int train_export(const train_t *t, const char *dir, const store_meta_t *meta, store_error_t *err);

/* Makes live, a served store of the trainer's kind (its serving rows, fp32:
 * LR's one float per key, FM's 1 + k, FFM's 1 + F k), the model the trainer
 * learns in place, for the server's online learning: each step also writes
 * the new served floats of every id it touched, the bias's included, into
 * live (a key new to live is inserted), and an id the trainer's state
 * lacks starts from live's served floats with zero optimizer statistics
 * (train_lr.c, train_fm.c and train_ffm.c say how FTRL's z is chosen so
 * that the served weight does not move before the id's first step; an id
 * live lacks too starts as a new id), so training continues the served
 * model rather than starting afresh; predictions read live for the ids
 * the state lacks, so train_predict is the served score.  A row whose served floats would not
 * be finite is never written into live: the step stops there with -ERANGE
 * (the caller's alarm: stop training this trainer).  The caller must be
 * live's only writer while attached (store.h: one writer per shard);
 * readers never wait; train_threads_epoch refuses an attached trainer.
 * live NULL detaches.  0, or -EINVAL with a sentence in why: a kind whose
 * served model is more than its store (the DNN: train_attach_live_model),
 * or a store of another width or dtype. */
int train_attach_live(train_t *t, store_t *live, char *why, size_t why_len);

/* train_attach_live with the served model's extras x (model_extras()), for
 * every kind; the DNN needs them: it copies the served MLP (which must have
 * the trainer's shape) over its own and freezes it while attached, so its
 * online part is the wide weights, the embeddings and the bias
 * (train_dnn.c: LIVE).  The other kinds ignore x.  x is read during the
 * call only.  0, or -EINVAL with a sentence in why. */
int train_attach_live_model(train_t *t, store_t *live, const store_extras_t *x, char *why,
                            size_t why_len);

/* The trainer's state store (rows as above), NULL for FFM (THREAD SAFETY). */
const store_t *train_store(const train_t *t);

/* One line of the trainer's hyper-parameters ("lr/ftrl alpha=0.1 ..."). */
void train_describe(const train_t *t, char *buf, size_t len);

/* ---- the optimizer state, out and in (train_state.c) -------------------------
 *
 * A trainer's STATE ROW of an id is the per-id row of the layouts above
 * (LR's [z | n | w], FM's [w | v | ... | c], FFM's, the DNN's), the bias's
 * under MODEL_BIAS_ID included: everything a step reads of that id.  Copying
 * the rows of the ids a trainer has stepped into a fresh trainer of the same
 * options makes it, float for float, the trainer it was (predictions, steps,
 * state), provided both read the same served rows and, for the DNN, the
 * same MLP (attached to the same served model: train_attach_live_model).
 * This is what lets the online server restart from its exports instead of
 * from a fresh optimizer (server/online_export.c writes the file below).
 *
 * THREAD SAFETY: the trainer's one writer (get reads the row table FFM
 * steps in place; put writes the state).  get never allocates or blocks;
 * put grows the state as a step does. */

/* Floats per id of t's state row (LR-FTRL 3, FM-Adagrad 3 + 2k, ...). */
uint32_t train_state_width(const train_t *t);

/* The state rows of ids[0..n) into rows (n x width floats), found[i] = 1
 * where t has a row for ids[i] (else found[i] = 0 and rows[i] is undefined).
 * Returns how many were found. */
size_t train_state_get(train_t *t, const uint64_t *ids, size_t n, float *rows, uint8_t *found);

/* Makes rows (n x width floats) the state rows of ids[0..n), in order (a
 * later id wins), replacing what t held.  Writes nothing into an attached
 * served store: the served floats of the rows' ids must already be what
 * the rows' serving prefix says (the server restores after loading the
 * chain whose versions carry them).  0, -ERANGE when a value is not finite
 * (rows before it are put), -ENOMEM. */
int train_state_put(train_t *t, const uint64_t *ids, size_t n, const float *rows);

/* ---- the state file ----------------------------------------------------------
 *
 * The rows of some ids as one file (an export's, in its version directory):
 *
 *   0   magic "TLTSTAT1"        8 bytes
 *   8   format                  u32 (TRAIN_STATE_FORMAT)
 *   12  kind                    u32 (store_model_kind_t)
 *   16  optimizer               u32 (train_optimizer_t; the DNN: TRAIN_ADAGRAD)
 *   20  width                   u32 (floats per row, 1..STORE_MAX_VALUE_FLOATS)
 *   24  count                   u64 (rows)
 *   32  version                 u64 (the model version it belongs to)
 *   40  rows: count x [id u64 | width x f32]
 *   ..  XXH3-64 of every byte before it, u64
 *
 * little-endian; the file is exactly 48 + count (8 + 4 width) bytes. */
#define TRAIN_STATE_FILE "TRAINER_STATE"
#define TRAIN_STATE_MAGIC "TLTSTAT1"
#define TRAIN_STATE_FORMAT 1u
#define TRAIN_STATE_HEADER_BYTES 40u

typedef struct train_state_header {
    uint32_t kind, optimizer, width; /* what a trainer must match to take the rows */
    uint64_t count;                  /* rows */
    uint64_t version;                /* the version the rows belong to */
} train_state_header_t;

/* What t's rows are (count 0, version 0: the caller's). */
void train_state_header_of(const train_t *t, train_state_header_t *h);

typedef struct train_state_error {
    char msg[256]; /* what was wrong and where ("byte 40: ...") */
} train_state_error_t;

/* Writes h->count rows (ids, rows of h->width floats) as the file `name`
 * in the directory dirfd, then fsyncs it.  0 or -errno.  Blocks. */
int train_state_write_at(int dirfd, const char *name, const train_state_header_t *h,
                         const uint64_t *ids, const float *rows);

/* Calls fn(ctx, id, row) for each row of buf (row: width aligned floats,
 * valid during the call) until fn returns non-zero, which is returned.
 * NULL fn: checks only. */
typedef int (*train_state_visit_fn)(void *ctx, uint64_t id, const float *row);

/* Parses and verifies untrusted bytes, everything before the first visit:
 * the length, the magic, the format, the checksum, width, count consistent
 * with the length, every value finite; with expect (non-NULL), kind,
 * optimizer, width and version equal to its.  *out (when non-NULL) gets the
 * header.  0 (or fn's non-zero), or -EBADMSG with err naming the byte and
 * what was wrong (err may be NULL). */
int train_state_parse(const void *buf, size_t len, const train_state_header_t *expect,
                      train_state_header_t *out, train_state_visit_fn fn, void *ctx,
                      train_state_error_t *err);

/* train_state_parse of the file at path against t's header (version
 * `version`) and, when apply, train_state_put of every row into t.
 * 0; -ENOENT (no file), -EBADMSG (err says why), -errno reading it, or
 * put's -ENOMEM (rows before it put).  Blocks. */
int train_state_load(train_t *t, const char *path, uint64_t version, bool apply,
                     train_state_error_t *err);

#ifdef __cplusplus
}
#endif
#endif /* TL_MODEL_TRAIN_H */
