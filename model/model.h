/*
 * model.h — scoring: a loaded model version and the one interface every model
 * kind scores through ("given the shared block and N item blocks, write N
 * scores").  This first cut implements LR; FM, FFM and DNN come with the
 * models issue behind the same calls.
 *
 * THREAD SAFETY
 *   A model_t is immutable once loaded: any number of threads may score with
 *   it at once, each with its own model_scratch_t.  The server pins a model
 *   version for the duration of a request (epochs or refcounts are the
 *   server's business); model_destroy() needs no concurrent scorer.
 */
#ifndef TL_MODEL_H
#define TL_MODEL_H

#include "store/store.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct model model_t;             /* opaque */
typedef struct model_scratch model_scratch_t; /* opaque: per-thread work space */

/* One block of features: ids (64-bit, field in the top 8 bits) and their
 * values; values == NULL means every value is 1.0 (binary features). */
typedef struct model_block {
    const uint64_t *ids;
    const float *values;
    uint32_t n;
} model_block_t;

/* The LR bias is the weight of this reserved id (field 0, hash 0). */
#define MODEL_BIAS_ID UINT64_C(0)

/* Wraps a loaded store as a model (the model takes ownership of s).  Only
 * LR (K = 1) is implemented yet: other kinds return -ENOTSUP.  Returns 0 or
 * -errno; on failure s is still the caller's. */
int model_from_store(store_t *s, const store_meta_t *meta, model_t **out);

/* Loads the snapshot in dir (store_snapshot_load) and wraps it.  On failure
 * returns -1 and fills *err; nothing stays allocated. */
int model_load(const char *dir, int threads, model_t **out, store_error_t *err);

void model_destroy(model_t *m);

const store_meta_t *model_meta(const model_t *m);
const store_t *model_store(const model_t *m);

/* Work space for requests of up to max_features features in all blocks
 * together.  Allocate one per worker thread at start (it is the only
 * allocation scoring needs); returns 0 or -ENOMEM. */
int model_scratch_create(size_t max_features, model_scratch_t **out);
void model_scratch_destroy(model_scratch_t *sc);

/* Scores n_items items: scores[i] = sigmoid(bias + sum over the shared block
 * + sum over item i's block of weight * value); a feature the model has not
 * seen contributes 0.  The shared block is summed once per request.  Never
 * allocates, never blocks.  Returns 0, or -E2BIG when the request has more
 * features than the scratch was made for. */
int model_score(const model_t *m, const model_block_t *shared, const model_block_t *items,
                uint32_t n_items, float *scores, model_scratch_t *sc);

#ifdef __cplusplus
}
#endif
#endif /* TL_MODEL_H */
