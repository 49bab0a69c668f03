/*
 * fuzz_guard.c — libFuzzer target for the post-swap guard's arithmetic
 * (server/guard.c): guard_decide takes counts that are sums of untrusted
 * traffic (any scores a model produced: NaN, Inf, denormals, huge values)
 * and guard_account tallies raw scores.  Neither may crash, divide by zero
 * into a wrong verdict, or lose a request.
 *
 * The input is read as little-endian fields, a short tail zero-filled:
 *   [min_requests u16][max_error_rate f64][max_mean_ratio f64]
 *   [base: requests u32, failed u32, items u32, sum f64]
 *   then records until the input ends:
 *   [worker u8 (mod 3)][gen u8 (mod 8, +1)][failed u8][n u8 (mod 17)][n x f32 scores]
 * The records are tallied on three workers' metrics; for each generation the
 * guard's totals must equal the records' count of requests and failures, and
 * of items split finite / non-finite, unless its slot was recycled (more
 * than SERVER_TALLY_SLOTS generations on one worker: then at most).  Then
 * guard_decide on base and each generation's totals must give a verdict
 * consistent with the bounds: OK under min_requests; never BAD_ERRORS at an
 * error rate within the bound; a finite error rate in [0, 1].  Anything
 * else abort()s.
 *
 *   ./fuzz_guard -max_len=4096 ../tests/fuzz/corpus/guard
 *
 * Without TL_FUZZ the same target replays the seed corpus under ctest.
 */
#include "server/guard.c"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* guard.c records rollbacks with the repository; no repository here. */
int repo_rolled_back(const char *model, uint64_t from, uint64_t to)
{
    (void)model;
    (void)from;
    (void)to;
    return -ENOENT;
}

typedef struct cursor {
    const uint8_t *p;
    size_t left;
} cursor_t;

static void take(cursor_t *c, void *out, size_t n)
{
    memset(out, 0, n);
    size_t k = n < c->left ? n : c->left;
    memcpy(out, c->p, k);
    c->p += k;
    c->left -= k;
}

#define NW 3
#define NGEN 8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static server_metrics_t *m;
    if (!m && !(m = aligned_alloc(64, ((NW * sizeof *m) + 63) & ~(size_t)63)))
        abort();
    memset(m, 0, NW * sizeof *m);
    server_t s = {.nworkers = NW, .metrics = m};
    cursor_t c = {data, size};

    uint16_t minreq;
    double maxerr, maxratio, bsum;
    uint32_t breq, bfail, bitems;
    take(&c, &minreq, sizeof minreq);
    take(&c, &maxerr, sizeof maxerr);
    take(&c, &maxratio, sizeof maxratio);
    take(&c, &breq, sizeof breq);
    take(&c, &bfail, sizeof bfail);
    take(&c, &bitems, sizeof bitems);
    take(&c, &bsum, sizeof bsum);
    guard_limits_t lim = {minreq, maxerr, maxratio};
    guard_counts_t base = {breq, bfail < breq ? bfail : breq, bitems, 0, bsum};

    uint64_t want_req[NGEN + 1] = {0}, want_fail[NGEN + 1] = {0}, want_items[NGEN + 1] = {0},
             want_bad[NGEN + 1] = {0};
    unsigned gens_on[NW] = {0}; /* distinct generations per worker, for recycling */
    bool seen[NW][NGEN + 1] = {{false}};
    while (c.left > 0) {
        uint8_t hdr[4];
        take(&c, hdr, sizeof hdr);
        unsigned w = hdr[0] % NW, gen = hdr[1] % NGEN + 1, n = hdr[3] % 17;
        float scores[16];
        take(&c, scores, n * sizeof scores[0]);
        if (!seen[w][gen]) {
            seen[w][gen] = true;
            gens_on[w]++;
        }
        guard_account(&m[w], gen, n ? scores : NULL, n, hdr[2] & 1);
        uint32_t bad = 0;
        for (unsigned i = 0; i < n; i++)
            bad += !isfinite(scores[i]);
        want_req[gen]++;
        want_fail[gen] += (hdr[2] & 1) || bad;
        want_items[gen] += n - bad;
        want_bad[gen] += bad;
    }
    bool recycled = false;
    for (int w = 0; w < NW; w++)
        recycled |= gens_on[w] > SERVER_TALLY_SLOTS;
    for (unsigned g = 1; g <= NGEN; g++) {
        guard_counts_t t = totals_of(&s, g);
        if (recycled ? (t.requests > want_req[g] || t.failed > want_fail[g] ||
                        t.items > want_items[g] || t.bad_items > want_bad[g])
                     : (t.requests != want_req[g] || t.failed != want_fail[g] ||
                        t.items != want_items[g] || t.bad_items != want_bad[g]))
            abort();
        guard_decision_t d;
        guard_call_t call = guard_decide(&lim, &base, &t, &d);
        if (t.requests < lim.min_requests && call != GUARD_OK)
            abort();
        if (!(d.error_rate >= 0 && d.error_rate <= 1))
            abort();
        if (call == GUARD_BAD_ERRORS && !(d.error_rate > lim.max_error_rate))
            abort();
        if (d.why[0] == '\0' || memchr(d.why, '\0', sizeof d.why) == NULL)
            abort();
        /* The decision is pure: the same inputs, the same verdict. */
        guard_decision_t d2;
        if (guard_decide(&lim, &base, &t, &d2) != call)
            abort();
    }
    return 0;
}
