/*
 * impression_log.h — the impression log: the feature blocks of PREDICTs
 * flagged for logging, kept for a window so that a later FEEDBACK can be
 * joined to what was served and become a training sample.
 *
 *   workers (any, several)                 trainer (per model or shared)
 *   ----------------------                 -----------------------------
 *   PREDICT flagged for logging:           every few ms:
 *     impression_log_put(id, blocks)         impression_log_expire(now, emit)
 *       copies the blocks; a full stripe       entries older than window_ms
 *       evicts its oldest (-> negatives          -> a negative per item with
 *       through cfg.evict_emit)                     no feedback, an impression's
 *                                                   together (one shared block)
 *   FEEDBACK (maybe another connection):
 *     impression_log_feedback(id, item, label, weight, emit)
 *       OK: emit(sample) once, the item marked
 *
 * A sample handed to an emit function points into the log: it is valid only
 * during the call; the callee copies what it keeps (into the trainer's
 * queue).  An emit function must not call back into the log (the stripe's
 * lock is held: it would deadlock) and should be short (it holds up other
 * puts and feedback that hash to the same stripe).
 *
 * THREAD SAFETY
 *   Every function may be called from any thread at any time between
 *   impression_log_create and impression_log_destroy.  The log is split in
 *   stripes (by a keyed hash of the impression id), each with its own mutex;
 *   one call takes one stripe's lock once (expire and stats take each
 *   stripe's in turn).  No call allocates after create.  All calls may block
 *   briefly on a stripe lock; none sleeps or does I/O.
 *
 * ERRORS
 *   Put returns 0 or -errno (see its comment); feedback returns an
 *   impression_log_fb_t status that impression_log_fb_str names.  Every
 *   refusal is counted (impression_log_stats).
 */
#ifndef TL_SERVER_IMPRESSION_LOG_H
#define TL_SERVER_IMPRESSION_LOG_H

#include "codec/codec.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct impression_log impression_log_t;

/* Where an emitted sample comes from. */
typedef enum impression_src {
    IMPRESSION_SRC_FEEDBACK = 1, /* a FEEDBACK joined to its impression */
    IMPRESSION_SRC_EXPIRED = 2,  /* a negative: the window passed, no feedback */
    IMPRESSION_SRC_EVICTED = 3,  /* a negative: evicted early for space, no feedback */
} impression_src_t;

/* One training sample, a view into the log (valid during the emit call only). */
typedef struct impression_sample {
    uint64_t impression_id;
    uint64_t version;       /* the model version that scored the impression */
    uint64_t impression_ms; /* when it was logged (the put's clock, made monotonic per stripe) */
    uint32_t model_id;
    uint32_t item;    /* index of the item in its PREDICT */
    uint32_t n_items; /* items of the impression */
    float label;      /* [0, 1]; 0 for negatives */
    float weight;     /* > 0; cfg.negative_weight for negatives */
    impression_src_t src;
    codec_block_t shared; /* the user/context block, as put (values NULL when none were) */
    codec_block_t block;  /* the item's block, as put */
} impression_sample_t;

/* An impression's negatives, a view into the log (valid during the emit call
 * only): one shared block and n items, each label 0 with weight
 * cfg.negative_weight.  An impression's unlabeled items come in one call,
 * or in calls of IMPRESSION_NEGATIVES_MAX items when it has more: a sink
 * learns them as one TRAIN record with the shared block once, not one
 * record (and one log append) per item. */
#define IMPRESSION_NEGATIVES_MAX 256u
typedef struct impression_negatives {
    uint64_t impression_id;
    uint64_t version;       /* the model version that scored the impression */
    uint64_t impression_ms; /* when it was logged */
    uint32_t model_id;
    uint32_t n_items;       /* items of the impression */
    float weight;           /* cfg.negative_weight */
    impression_src_t src;   /* EXPIRED or EVICTED */
    codec_block_t shared;   /* the user/context block, as put */
    uint32_t n;             /* 1..IMPRESSION_NEGATIVES_MAX negatives in this call */
    const uint32_t *item;   /* [n] their item indices, ascending */
    const codec_block_t *block; /* [n] their item blocks, as put */
} impression_negatives_t;

/* Called with an impression's negatives while the stripe is locked, under an
 * emit function's rules: returns how many of the n it took (0..n; the rest
 * are counted as dropped). */
typedef uint32_t (*impression_log_negatives_fn)(const impression_negatives_t *b, void *ctx);

/* Called with a sample while the stripe is locked: copy, do not call the
 * log.  Returns 0 when it took the sample, non-zero when it could not (a
 * full trainer queue): a feedback is then not marked (IMPRESSION_FB_NOT_TAKEN,
 * the client may send it again) and a negative is counted as dropped. */
typedef int (*impression_log_emit_fn)(const impression_sample_t *s, void *ctx);

typedef struct impression_log_config {
    uint64_t max_bytes;    /* entry bytes over all stripes (each gets max_bytes / stripes) */
    uint64_t max_entries;  /* impressions held at most (index: 32 B each); 0 = max_bytes / 1024 */
    uint64_t window_ms;    /* feedback window: older entries expire */
    uint32_t stripes;      /* a power of two in 1..4096; 0 = 64 */
    bool emit_negatives;   /* expiry and eviction emit a negative per unlabeled item */
    float negative_weight; /* weight of those negatives, > 0 and finite (1 is usual) */
    /* The sink for the negatives of entries evicted early by a put (called on
     * the putting worker's thread, stripe locked, same rules as any emit).
     * NULL: those negatives are counted in negatives_dropped instead. */
    impression_log_negatives_fn evict_emit;
    void *evict_ctx;
} impression_log_config_t;

/* Defaults: 1 GiB, 10 minutes, 64 stripes, negatives on with weight 1. */
impression_log_config_t impression_log_config_default(void);

/* Creates a log: the stripes' arenas are reserved up front (mmap, touched as
 * used, so RSS follows the bytes held) and the per-process hash key drawn
 * from getrandom.  Returns 0 and *out (the caller owns it: destroy), -EINVAL
 * for a bad config (stripes not a power of two or over 4096, max_bytes under
 * 4 KiB per stripe or over 32 GiB per stripe, window 0, a bad negative
 * weight), -ENOMEM.  Cold: call at start-up. */
int impression_log_create(const impression_log_config_t *cfg, impression_log_t **out);

/* Frees the log and everything in it (no emits: call impression_log_expire
 * with now_ms = UINT64_MAX first to turn what is left into negatives).  No
 * other call may run or follow.  NULL is a no-op. */
void impression_log_destroy(impression_log_t *log);

/* ---- workers ---------------------------------------------------------------- */

/* Logs a scored PREDICT: copies shared and items[0..n_items) (ids, and values
 * when a block has them) under impression_id.  now_ms is the caller's clock
 * (CLOCK_MONOTONIC in ms; any clock that all callers share).  A put that does
 * not fit its stripe evicts the stripe's oldest entries first (counted in
 * evicted; their unlabeled items go to cfg.evict_emit as negatives).
 * Returns 0, or:
 *   -EEXIST  impression_id is already held (the first one is kept)
 *   -E2BIG   the entry is larger than a stripe (max_bytes / stripes)
 *   -EINVAL  n_items 0, a NULL pointer with a count, a block over
 *            CODEC_MAX_BLOCK_FEATURES
 * Does not allocate; takes one stripe lock once. */
int impression_log_put(impression_log_t *log, uint64_t impression_id, uint32_t model_id,
                       uint64_t version, uint64_t now_ms, const codec_block_t *shared,
                       const codec_block_t *items, uint32_t n_items);

typedef enum impression_log_fb {
    IMPRESSION_FB_OK = 0,             /* joined: emit was called once */
    IMPRESSION_FB_UNKNOWN_IMPRESSION, /* never logged, expired (past the window) or evicted */
    IMPRESSION_FB_ITEM_OUT_OF_RANGE,  /* item >= the impression's item count */
    IMPRESSION_FB_WRONG_MODEL,        /* logged for another model id */
    IMPRESSION_FB_DUPLICATE,          /* this item already had its feedback */
    IMPRESSION_FB_BAD_VALUE,          /* label not in [0, 1] or weight not in [0, 1e6], or NaN */
    IMPRESSION_FB_NOT_TAKEN,          /* emit could not take the sample: the item stays unlabeled */
    IMPRESSION_FB_COUNT_
} impression_log_fb_t;

/* A short lower-case name for a status ("unknown impression", ...). */
const char *impression_log_fb_str(impression_log_fb_t st);

/* Joins a FEEDBACK to its impression: on OK calls emit(sample, ctx) once,
 * with src FEEDBACK, the given label and weight (not for weight 0: nothing
 * to learn), and marks the item so that it gets no second feedback and no
 * negative.  Checked in this order: bad
 * value, unknown impression (also one older than window_ms at now_ms that
 * expire has not popped yet), wrong model, item out of range, duplicate.
 * Does not allocate; takes one stripe lock once (emit runs under it). */
impression_log_fb_t impression_log_feedback(impression_log_t *log, uint64_t impression_id,
                                            uint32_t model_id, uint32_t item, float label,
                                            float weight, uint64_t now_ms,
                                            impression_log_emit_fn emit, void *ctx);

/* ---- trainer ---------------------------------------------------------------- */

typedef struct impression_log_expired {
    uint64_t entries;   /* impressions popped */
    uint64_t negatives; /* negatives emitted for them */
    uint64_t early;     /* of entries, evicted early by the high-water mark (counted in evicted) */
} impression_log_expired_t;

/* Pops every entry older than window_ms at now_ms (now_ms - logged >
 * window_ms) and, when cfg.emit_negatives, emits a negative (label 0, weight
 * cfg.negative_weight, src EXPIRED) for each of its items without feedback,
 * an impression's together (impression_negatives_t).
 * Then evicts each stripe down to 7/8 of its bytes and entries, oldest
 * first (src EVICTED): puts, on the workers, then seldom evict.
 * now_ms = UINT64_MAX pops everything (a flush at shutdown).  emit may be
 * NULL (the negatives are then counted as dropped).  Takes each stripe's lock
 * in turn; the work is proportional to what it pops. */
impression_log_expired_t impression_log_expire(impression_log_t *log, uint64_t now_ms,
                                               impression_log_negatives_fn emit, void *ctx);

/* ---- metrics ---------------------------------------------------------------- */

/* The counters, defined once: X(name, help).  All count since create. */
#define IMPRESSION_LOG_COUNTERS(X)                                          \
    X(puts, "impressions logged")                                           \
    X(refused_duplicate, "puts refused: impression id already held")        \
    X(refused_too_big, "puts refused: entry larger than a stripe")          \
    X(refused_invalid, "puts refused: bad arguments")                       \
    X(fb_ok, "feedback joined to its impression")                           \
    X(fb_unknown, "feedback for an unknown, expired or evicted impression") \
    X(fb_out_of_range, "feedback for an item index out of range")           \
    X(fb_wrong_model, "feedback naming another model")                      \
    X(fb_duplicate, "feedback for an item that already had it")             \
    X(fb_bad_value, "feedback with a label or weight out of range")         \
    X(fb_not_taken, "feedback joined but not taken by the sink (left unlabeled)") \
    X(expired, "impressions expired at the end of the window")              \
    X(evicted, "impressions evicted early to make room")                    \
    X(negatives_emitted, "negatives emitted for unlabeled items")           \
    X(negatives_dropped, "negatives not emitted: no sink, or the sink could not take them")

typedef struct impression_log_stats {
#define IMPRESSION_LOG_FIELD_(name, help) uint64_t name;
    IMPRESSION_LOG_COUNTERS(IMPRESSION_LOG_FIELD_)
#undef IMPRESSION_LOG_FIELD_
    uint64_t entries;   /* impressions held now */
    uint64_t bytes;     /* arena bytes they use now */
    uint64_t max_bytes; /* arena bytes over all stripes (config, rounded down) */
    uint32_t probe_max; /* longest index probe seen (slots visited by one lookup or insert) */
} impression_log_stats_t;

/* Sums the stripes' counters (taking each stripe's lock in turn: a snapshot
 * that is consistent per stripe, not across them). */
void impression_log_stats(impression_log_t *log, impression_log_stats_t *out);

#endif /* TL_SERVER_IMPRESSION_LOG_H */
