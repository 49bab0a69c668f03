/*
 * gate.h — the validation gate a candidate version passes before it goes
 * live (internal to server/), and the sample of live PREDICT requests its
 * shadow scoring replays.
 *
 *   workers (data plane)                 loader thread
 *   --------------------                 -------------
 *   answer_predict: decoded OK           open candidate
 *     gate_sample_offer(ring, payload)   gate_check(srv, candidate, &verdict)
 *       one branch; sampled: memcpy        1. sanity: every store value finite and
 *       into the worker's own ring            |v| <= --gate-max-abs; kind and K
 *                                             as the active version's (same name)
 *                                          2. shadow: replay the sample through the
 *                                             active and the candidate; refuse on mean
 *                                             shift or PSI past their bounds
 *                                          3. eval (--gate-eval-file, gate_eval.h):
 *                                             logloss of both on labeled rows; refuse
 *                                             when the candidate's is worse by more
 *                                             than --gate-max-logloss-increase
 *                                        pass: swap in; refuse: the load FAILS with
 *                                        verdict.msg (never served)
 *
 * THREAD SAFETY
 *   A ring has one writer, its worker, and no lock: slots are published with
 *   a sequence number (odd while being written), and the gate copies a slot
 *   and keeps it only when the number was even and unchanged around the copy.
 *   gate_check runs on one thread at a time (the loader); the verdict
 *   counters are read by the admin thread under the gate's own lock.
 */
#ifndef TL_SERVER_GATE_H
#define TL_SERVER_GATE_H

#include "server.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the sample of live requests ------------------------------------------ */

/* Once a worker's ring is full, one offered request in GATE_SAMPLE_EVERY is
 * copied (a power of two); until then every one is. */
#define GATE_SAMPLE_EVERY 16

/* One slot: a PREDICT payload of at most slot_bytes bytes.
 *   [ seq (atomic u32) | len (u32) | payload bytes ............ ]
 * seq is even when the slot is stable, odd while its worker writes it, 0 when
 * it never held a request. */
typedef struct gate_slot {
    _Atomic uint32_t seq;
    _Atomic uint32_t len;
    uint8_t bytes[];
} gate_slot_t;

/* A worker's ring (opaque outside gate.c but for the inline offer below:
 * use the functions).  Written by its worker only. */
typedef struct gate_ring {
    uint8_t *base;      /* nslots slots of stride bytes (mmap: pages are touched as used) */
    size_t stride;      /* sizeof(gate_slot_t) + slot_bytes, rounded to 64 */
    size_t slot_bytes;  /* largest payload a slot holds; larger ones are skipped */
    uint32_t nslots;    /* > 0 */
    uint32_t head;      /* next slot to write */
    uint32_t filled;    /* slots written so far, up to nslots */
    uint32_t tick;      /* requests offered since the ring filled */
    uint64_t skipped;   /* requests sampled but over slot_bytes */
} gate_ring_t;

/* Copies len payload bytes into the ring's next slot, or, when they do not
 * fit and req (the decoded request) is given, re-encodes its shared block
 * and as many first items as fit (library-private: call gate_sample_offer). */
void gate__ring_put(gate_ring_t *r, const uint8_t *payload, size_t len, const codec_predict_t *req);

/* Offers one decoded PREDICT (its payload bytes and the decoded request) to
 * a worker's ring (r NULL: sampling off).  Every request while the ring is
 * not full, then one in GATE_SAMPLE_EVERY; one larger than a slot is kept as
 * its shared block and first items.  No lock, no allocation, never blocks. */
static inline void gate_sample_offer(gate_ring_t *r, const uint8_t *payload, size_t len,
                                     const codec_predict_t *req)
{
    if (!r)
        return;
    if (r->filled == r->nslots && (++r->tick & (GATE_SAMPLE_EVERY - 1)) != 0)
        return;
    gate__ring_put(r, payload, len, req);
}

/* Creates the rings of nworkers workers holding `total` requests together
 * (each ring ceil(total / nworkers) slots of slot_bytes), replacing none:
 * call once, before the workers start.  total 0 (or the gate off): no rings,
 * gate_sample_ring returns NULL.  Returns 0, -EINVAL (nworkers < 1,
 * slot_bytes 0) or -ENOMEM (nothing left allocated).  Main thread. */
int gate_sample_start(int nworkers, int total, size_t slot_bytes);

/* Worker i's ring, or NULL when sampling is off.  Owned by the gate. */
gate_ring_t *gate_sample_ring(int i);

/* Frees the rings, after the workers have stopped writing them; waits for a
 * gate reading them to finish.  Safe to call twice. */
void gate_sample_stop(void);

/* Copies up to max stable sampled payloads (slot order, ring by ring) into
 * one buffer the caller frees: *buf holds them back to back, lens[i] their
 * sizes.  Returns the count (0 when none), or -ENOMEM.  Loader thread. */
int gate_sample_copy(uint8_t **buf, uint32_t *lens, int max);

/* ---- the verdict ------------------------------------------------------------ */

typedef struct gate_verdict {
    bool pass;               /* false: the candidate must not be served */
    bool shadow;             /* shadow scoring ran (an active version and a sample) */
    uint64_t values_checked; /* store floats (and dense floats) checked by sanity */
    uint32_t n_sampled;      /* sampled requests scored by both versions */
    uint64_t n_items;        /* items scored by each version */
    double mean_active;      /* mean prediction of the active version on the sample */
    double mean_candidate;   /* of the candidate */
    double mean_shift;       /* |mean_candidate - mean_active| / mean_active */
    double psi;              /* population stability index, 10 decile bins of the active's */
    bool eval;               /* the evaluation file was scored (--gate-eval-file) */
    uint32_t eval_rows;      /* its rows scored by each version */
    double eval_logloss_candidate; /* mean logloss of the candidate on them */
    double eval_logloss_active;    /* of the active version; NAN without one (first load) */
    double eval_seconds;     /* scoring them (and re-reading the file when it changed) */
    double seconds;          /* the whole check */
    double cpu_seconds;      /* of it, CPU on the calling thread (not its helpers') */
    char msg[1024];          /* refused: why, with the numbers; passed: the numbers */
} gate_verdict_t;

/* Checks candidate (not yet active; the caller keeps its reference) against
 * srv->cfg's gate settings and the active version, on the calling thread
 * with cfg.load_threads helpers for the sanity pass.  Blocks for a pass over
 * every value of the candidate's store plus the shadow replay.  Logs and
 * counts the verdict.  Returns 0 when it passes (or the gate is off:
 * --gate=false), -EPERM when it refuses (v->msg says why, naming the value,
 * bound or figure), -ENOMEM when it cannot run (v->msg says so; the load
 * fails: a version that was not checked is not served). */
int gate_check(server_t *srv, server_model_t *candidate, gate_verdict_t *v);

/* Pure helpers of the shadow comparison, for tests: the mean of n scores,
 * and the PSI of cand against the decile bins of active (n_a, n_c > 0;
 * empty bins count as 1e-4).  gate_psi returns -ENOMEM as a negative
 * value when it cannot sort. */
double gate_mean(const float *x, size_t n);
double gate_psi(const float *active, size_t n_a, const float *cand, size_t n_c);

/* The verdict counters, as Prometheus text (tlserve_gate_*), into buf:
 * returns the length written (truncated to len - 1).  Any thread. */
size_t gate_metrics_format(char *buf, size_t len);

#endif /* TL_SERVER_GATE_H */
