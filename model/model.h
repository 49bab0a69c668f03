/*
 * model.h — scoring: a loaded model version and the one interface every model
 * kind scores through ("given the shared block and N item blocks, write N
 * scores"): LR, FM, FFM (fields from the feature id) and a Wide & Deep DNN.
 *
 * THREAD SAFETY
 *   A model_t is immutable once loaded: any number of threads may score with
 *   it at once, each with its own model_scratch_t.  The server pins a model
 *   version for the duration of a request (epochs or refcounts are the
 *   server's business); model_destroy() needs no concurrent scorer.
 */
#ifndef TL_MODEL_H
#define TL_MODEL_H

#include "codec/codec.h" /* codec_block_t: a block of feature ids and values */
#include "store/store.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct model model_t;             /* opaque */
typedef struct model_scratch model_scratch_t; /* opaque: per-thread work space */

/* The bias is the (first float of the) value of this reserved id (field 0,
 * hash 0). */
#define MODEL_BIAS_ID UINT64_C(0)

/* Largest FM factor count k (value_floats = 1 + k). */
#define MODEL_FM_MAX_K 64

/* Wraps a loaded store as a model (the model takes ownership of s).
 * Accepted: LR with K = 1 float per key, FM with K = 1 + k floats per key
 * ([w, v_1..v_k], k = 1..MODEL_FM_MAX_K).  Anything else (FFM and DNN need
 * the snapshot's extras: model_load) returns -ENOTSUP.  Returns 0 or -errno;
 * on failure s is still the caller's. */
int model_from_store(store_t *s, const store_meta_t *meta, model_t **out);

/* model_from_store plus the snapshot's extras x (params, dense arrays): any
 * kind, for a store built other than by model_load (a full snapshot with
 * deltas applied: the extras are the full snapshot's, since deltas carry
 * none).  On success the model owns s and x's arrays (*x is zeroed); on
 * failure both stay the caller's and *err (may be NULL) says what is wrong
 * (STORE_E_MODEL: a model this build cannot score; STORE_E_NOMEM). */
int model_from_store_ex(store_t *s, const store_meta_t *meta, store_extras_t *x, model_t **out,
                        store_error_t *err);

/* Loads the snapshot in dir (store_snapshot_load_ex) and wraps it: any kind.
 * FFM reads params fields, k, norm (K must be 1 + fields x k); DNN reads its
 * params and layers (dnn.h).  On failure returns -errno and fills *err
 * with a sentence naming what is wrong: the store's errors as
 * store_snapshot_load_ex returns them, -ENOMEM, or -EBADMSG with code
 * STORE_E_MODEL when the snapshot is sound but its model is one this build
 * cannot score.  Nothing stays allocated. */
int model_load(const char *dir, int threads, model_t **out, store_error_t *err);

/* The model's hyper-parameters and dense arrays (FM: maybe "norm"; LR:
 * none). */
const store_extras_t *model_extras(const model_t *m);

void model_destroy(model_t *m);

/* ---- the DNN's served MLP, learned online (model_mlp.c) ---------------------------
 * Every version derived from one base (model_derive) serves the same MLP:
 * the snapshot's until the first install, then the last installed. */
struct dnn_net;
/* The MLP's parameter count (weights and biases of every layer), 0 if m
 * is not a DNN. */
size_t model_dnn_mlp_floats(const model_t *m);
/* Copies net (the same shape as m's MLP) and makes it the MLP requests
 * score with, by pointer swap: a request sees the old or the new one,
 * never a mix.  Blocks until no request still reads the copy it replaced
 * (store_epoch_synchronize; one forward pass at most), which the next
 * install reuses: no allocation after the first.  Callers serialise
 * installs and model_dnn_served_mlp (the server: the model's writer
 * lock).  0; -EINVAL (not a DNN, or another shape), -ERANGE (a value not
 * finite: nothing changed), -ENOMEM (the first install). */
int model_dnn_install_mlp(model_t *m, const struct dnn_net *net);
/* The MLP served now (installed, else the snapshot's), owned by m's base;
 * valid until the next install (same serialisation).  NULL if not a DNN. */
const struct dnn_net *model_dnn_served_mlp(const model_t *m);
/* Installs into m's base so far (any thread). */
uint64_t model_dnn_mlp_installs(const model_t *m);

const store_meta_t *model_meta(const model_t *m);
/* The base's store itself, for its one writer (the fold of a delta, the
 * server's online trainer), which must keep to store.h's rule: one writer
 * per shard while readers score.  Every version sharing the base (model_derive)
 * sees the writes. */
store_t *model_base_store(model_t *m);
const store_t *model_store(const model_t *m);

/* Work space for requests of up to max_features features in all blocks
 * together, sized for one float per key (LR).  Allocate one per worker
 * thread at start (it is the only allocation scoring needs); returns 0 or
 * -ENOMEM.  The caller owns *out (model_scratch_destroy). */
int model_scratch_create(size_t max_features, model_scratch_t **out);
void model_scratch_destroy(model_scratch_t *sc);

/* Lets scoring with sc split each request's one batched lookup over team's
 * helpers (store.h, "split lookups"); NULL (the default) looks up on the calling thread
 * alone.  The team must outlive sc's use. */
void model_scratch_set_team(model_scratch_t *sc, store_team_t *team);

/* Grows sc (never shrinks it) so that it holds max_features features of
 * value_floats floats each, e.g. after a swap to an FM model with K floats
 * per key (model_value_floats()).  Returns 1 when it grew, 0 when it was
 * already large enough (no allocation), -ENOMEM (sc unchanged and still
 * usable).  Allocates; call it off the per-request path or once when
 * model_score() said -E2BIG. */
int model_scratch_reserve(model_scratch_t *sc, size_t max_features, uint32_t value_floats);

/* Sizes sc for model m and requests of up to max_features features: the
 * rows (model_value_floats floats per key), the ids and the kind's work
 * space (FFM accumulators, DNN activations).  Grows sc when it holds less
 * than m needs; reallocates it to exactly m's size when it holds more than
 * twice the bytes m needs, giving the rest back to the system (after a
 * narrow model replaced a wide one).  Returns 1 when it reallocated (grew
 * or shrank), 0 when sc was left as it was (no allocation), -ENOMEM when it
 * had to grow and could not (sc unchanged and usable for the model it was
 * sized for).  A shrink that finds no memory keeps the larger buffers
 * (and grows only what m still lacks): giving memory back is best effort,
 * never a failure.  Allocates: call it when a model is swapped
 * in, or once when model_score() said -E2BIG, never per request. */
int model_scratch_fit(model_scratch_t *sc, const model_t *m, size_t max_features);

/* Bytes sc holds now (ids, rows and work space together).  For metrics and
 * tests; never allocates. */
size_t model_scratch_bytes(const model_scratch_t *sc);

/* Keys of this version: its store's count, or for a version with overlays
 * (a delta served over its parent: overlay.h) the count its deltas left. */
uint64_t model_key_count(const model_t *m);

/* Floats per key of m's store (1 for LR, 1 + k for FM). */
uint32_t model_value_floats(const model_t *m);

/* Scores n_items items; a feature the model has not seen contributes 0.
 *   LR: scores[i] = sigmoid(bias + sum over shared and item i of w x)
 *   FM: scores[i] = sigmoid(bias + s sum w x
 *                           + s^2 0.5 sum_f [(sum v_f x)^2 - sum v_f^2 x^2])
 *       the sums running over the shared block and item i together;
 *       s = 1 / sqrt(sum x^2) when the snapshot has param norm=1 (instance
 *       normalisation), else 1.
 *   FFM: field-aware pairs, DNN: Wide & Deep (ffm.h, dnn.h).
 * The shared block's sums (linear, and for FM the per-factor sums and
 * squares) are computed once per request.  Sums run in double in block
 * order: the same request always gives the same floats.  Never allocates,
 * never blocks.  Returns 0, or -E2BIG when the request has more features
 * than the scratch was made for, or when the scratch holds fewer floats per
 * key or less work space than the model needs (grow it with
 * model_scratch_fit()). */
int model_score(const model_t *m, const codec_block_t *shared, const codec_block_t *items,
                uint32_t n_items, float *scores, model_scratch_t *sc);

/* model_score of the same request with m and with next, into scores and
 * next_scores: the same floats as two model_score calls.  When next is m
 * plus one overlay (a delta served over m: overlay.h) the ids are looked up
 * once and only the overlay is applied between the two scorings (the gate's
 * shadow scoring of a delta); otherwise it is two model_score calls.
 * Returns 0 or -E2BIG as model_score. */
int model_score_pair(const model_t *m, const model_t *next, const codec_block_t *shared,
                     const codec_block_t *items, uint32_t n_items, float *scores,
                     float *next_scores, model_scratch_t *sc);

/* The LR arithmetic of model_score on weights already fetched, one per id
 * in the order [bias | shared ids | item 0 ids | item 1 ids ...]: for a
 * service that keeps its weights elsewhere (loadgen's Redis peer) and must
 * score to the bit as tlserve does.  Pure; never allocates. */
void model_lr_scores(const float *weights, const codec_block_t *shared,
                     const codec_block_t *items, uint32_t n_items, float *scores);

#ifdef __cplusplus
}
#endif
#endif /* TL_MODEL_H */
