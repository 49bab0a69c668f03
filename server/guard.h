/*
 * guard.h — the post-swap guard (internal to server/): after a load makes a
 * new version of a model live, watch its error rate and mean prediction for
 * --guard-window-ms and roll back by itself when they leave their bounds;
 * each model is watched on its own.
 *
 *   workers (data plane)               loader thread          guard thread
 *   --------------------               -------------          ------------
 *   answer_predict, per PREDICT        guard_arm(srv, next)   every GUARD_TICK_MS:
 *   scored (OK or failed by scoring):    baseline = the        sum the tallies of the
 *     guard_account(m, gen, scores)      active version's      active version; keep a
 *       own tally slot of that gen:      counts over the       ring of them (baselines)
 *       requests, failed, items,         last window         watching: guard_decide on
 *       sum of finite scores           server_model_swap       the new version's counts
 *                                                              since the swap; out of
 *                                                              bounds -> rollback +
 *                                                              repo_rolled_back, WARN
 *
 * WHAT COUNTS AS FAILED: a PREDICT that reached scoring and did not get its
 * scores (model_score or the encoding failed: an internal error), or got a
 * non-finite score (each such item is also counted in bad_items and left out
 * of the mean).  Client mistakes (a bad frame, an unknown model or version)
 * never reach the tally: they say nothing about the version.
 *
 * THREAD SAFETY
 *   A worker's tally slots (server_metrics_t.tally) have one writer, that
 *   worker: relaxed loads and stores, no read-modify-write, no lock, no
 *   syscall.  A slot is tagged with the version generation it counts; when
 *   a worker scores with a generation it has no slot for, it recycles the
 *   slot of the oldest generation (gen set to 0, counts zeroed, then the new
 *   gen published with release): the guard reads a slot seqlock-style and
 *   drops a read that straddled a recycle.  Everything else in guard.c is
 *   under the guard's own lock, a leaf: it is never held while calling the
 *   registry, the repository or the loader, so guard_arm may be called with
 *   the loader's lock held.
 */
#ifndef TL_SERVER_GUARD_H
#define TL_SERVER_GUARD_H

#include "server.h"

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- accounting on the data plane ----------------------------------------- */

/* Accounts one PREDICT scored with the version of generation gen (> 0) on
 * the calling worker's metrics m: n scores (NULL when n is 0), failed when
 * scoring or answering failed.  A non-finite score makes the request failed
 * and is left out of the sum.  O(n) loads of the scores, a few relaxed
 * stores to the worker's own line; never blocks.  Only m's worker calls it. */
static inline void guard_account(server_metrics_t *m, uint64_t gen, const float *scores,
                                 uint32_t n, bool failed)
{
    server_tally_t *t = NULL, *oldest = &m->tally[0];
    uint64_t oldest_gen = UINT64_MAX;
    for (unsigned i = 0; i < SERVER_TALLY_SLOTS; i++) {
        uint64_t g = atomic_load_explicit(&m->tally[i].gen, memory_order_relaxed);
        if (g == gen) {
            t = &m->tally[i];
            break;
        }
        if (g < oldest_gen) {
            oldest_gen = g;
            oldest = &m->tally[i];
        }
    }
    if (unlikely(!t)) { /* first request of this generation on this worker */
        t = oldest;
        atomic_store_explicit(&t->gen, 0, memory_order_relaxed);
        atomic_thread_fence(memory_order_release);
        atomic_store_explicit(&t->requests, 0, memory_order_relaxed);
        atomic_store_explicit(&t->failed, 0, memory_order_relaxed);
        atomic_store_explicit(&t->items, 0, memory_order_relaxed);
        atomic_store_explicit(&t->bad_items, 0, memory_order_relaxed);
        atomic_store_explicit(&t->sum, 0.0, memory_order_relaxed);
        atomic_store_explicit(&t->gen, gen, memory_order_release);
    }
    double sum = 0;
    uint32_t bad = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (likely(isfinite(scores[i])))
            sum += scores[i];
        else
            bad++;
    }
#define GUARD_BUMP_(f, v) \
    atomic_store_explicit(&t->f, atomic_load_explicit(&t->f, memory_order_relaxed) + (v), \
                          memory_order_relaxed)
    GUARD_BUMP_(requests, 1);
    GUARD_BUMP_(failed, (failed || bad) ? 1 : 0);
    GUARD_BUMP_(items, n - bad);
    GUARD_BUMP_(bad_items, bad);
    GUARD_BUMP_(sum, sum);
#undef GUARD_BUMP_
}

/* ---- the decision (pure) ---------------------------------------------------- */

/* Counts of one version over some span (differences of the tallies). */
typedef struct guard_counts {
    uint64_t requests;  /* PREDICTs that reached scoring */
    uint64_t failed;    /* of them, failed by scoring or with a non-finite score */
    uint64_t items;     /* items with a finite score */
    uint64_t bad_items; /* items with a non-finite score */
    double sum;         /* sum of the finite scores */
} guard_counts_t;

typedef struct guard_limits {
    uint64_t min_requests; /* no verdict on fewer requests (nor a baseline from fewer) */
    double max_error_rate; /* failed / requests above it: roll back */
    double max_mean_ratio; /* max(new/old, old/new) of |mean prediction| above it: roll back */
} guard_limits_t;

typedef enum guard_call {
    GUARD_OK,          /* in bounds, or too few requests to tell: keep watching */
    GUARD_BAD_ERRORS,  /* error rate over the bound */
    GUARD_BAD_MEAN,    /* mean prediction moved past the ratio */
} guard_call_t;

typedef struct guard_decision {
    guard_call_t call;
    double error_rate; /* cur failed / requests (0 with no request) */
    double mean;       /* cur mean prediction (NAN: no finite item) */
    double base_mean;  /* the baseline's (NAN: no usable baseline) */
    double base_error_rate; /* the baseline's (NAN: no usable baseline) */
    double ratio;      /* max(mean/base, base/mean) of the absolute means (NAN: unknown) */
    char why[256];     /* one sentence with the numbers, for the log and /v1/models */
} guard_decision_t;

/* Judges cur, the new version's counts since it went live, against base,
 * the previous version's over the window before the swap (all zero: none).
 * The error rate is judged once cur has lim->min_requests requests; the
 * mean once, in addition, base has min_requests requests and both have a
 * finite item.  The error check comes first.  Pure: no state, no lock. */
guard_call_t guard_decide(const guard_limits_t *lim, const guard_counts_t *base,
                          const guard_counts_t *cur, guard_decision_t *out);

/* ---- the guard ---------------------------------------------------------------- */

#define GUARD_TICK_MS 50 /* how often the guard reads the tallies */

/* Starts the guard thread (srv->cfg.guard_window_ms 0: does nothing and
 * returns 0).  0 or -errno.  Called once, before any load can swap. */
int guard_start(server_t *srv);

/* Stops and joins the guard thread (not started: no-op).  A watch under way
 * ends undecided. */
void guard_stop(void);

/* Tells the guard that next (held by the caller, not yet active) is about
 * to become the active version by a load: it records the baseline of the
 * version active now and watches next from the moment it is seen active.
 * Called on the loader thread right before server_model_swap; a rollback
 * or an admin activation of a kept version does not call it (a swap the
 * guard did not arm ends a watch under way).  Never blocks (takes the
 * guard's leaf lock, pins the active version for a few loads). */
void guard_arm(server_t *srv, const server_model_t *next);

typedef enum guard_state {
    GUARD_IDLE,        /* no load since start (or the guard is off) */
    GUARD_WATCHING,    /* watching model/version until until_ms */
    GUARD_PASSED,      /* the window ended in bounds */
    GUARD_ROLLED_BACK, /* rolled back: why */
    GUARD_STUCK,       /* out of bounds but nothing to roll back to: why */
    GUARD_ENDED,       /* another swap replaced the version before the window ended */
} guard_state_t;

/* The guard's state, as /v1/models and /metrics show it (a copy). */
typedef struct guard_status {
    bool enabled;            /* --guard-window-ms > 0 */
    guard_state_t state;
    char model[64];          /* the model */
    uint64_t version;
    uint64_t rolled_back_to; /* ROLLED_BACK: the version now active */
    uint64_t remaining_ms;   /* WATCHING: until the window ends */
    guard_counts_t counts;   /* the version's counts since it went live */
    guard_decision_t last;   /* the latest evaluation */
    uint64_t rollbacks;      /* the model's rollbacks done by the guard since start */
    uint64_t stuck;          /* its out-of-bounds verdicts with nothing to roll back to */
    uint64_t passed;         /* its windows ended in bounds */
} guard_status_t;

/* Copies model's state into *out (IDLE when the guard has not seen it; NULL:
 * the model armed or judged last).  Takes the guard's lock for the copy
 * only. */
void guard_get_status(const char *model, guard_status_t *out);

/* "idle", "watching", "passed", "rolled_back", "stuck" or "ended". */
const char *guard_state_name(guard_state_t st);

/* Writes the guard's Prometheus lines into buf (len bytes, NUL-terminated
 * when len > 0); returns the bytes written (truncated to fit). */
size_t guard_metrics_format(char *buf, size_t len);

#endif /* TL_SERVER_GUARD_H */
