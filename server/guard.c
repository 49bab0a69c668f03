/*
 * guard.c — the post-swap guard (guard.h): one thread that, every
 * GUARD_TICK_MS, sums the workers' tallies of the active version, and while
 * a freshly loaded version is watched judges it against the version it
 * replaced; out of bounds, it rolls back by itself.
 *
 * BASELINES
 *   The previous version's counts "over the last window before the swap"
 *   come from a ring of the active version's running totals, one entry at
 *   most every window / (GUARD_RING / 2) (and at least GUARD_TICK_MS apart):
 *
 *     ring: [t0 gen5 totals] [t1 gen5 totals] ... [tn gen5 totals]
 *     guard_arm at t:  baseline = totals(gen5, now) - the oldest entry of
 *                      gen5 with t0 >= t - window (none: since gen5 began)
 *
 *   The totals are the tallies summed over the workers (guard.h); a
 *   version's tallies start at zero when it first scores on a worker.
 *
 * A WATCH
 *   guard_arm runs before the swap, so the watch starts "pending": it
 *   begins (start totals, window deadline) at the first tick that sees the
 *   armed generation active.  Each tick then judges the counts since the
 *   start (guard_decide).  Out of bounds: server_model_rollback to the
 *   newest standby, repo_rolled_back so that the repository's policy does
 *   not pick the version again, a WARN naming the reason and the numbers;
 *   with nothing to roll back to, an ERROR and tlserve_guard_stuck_total.
 *   A watch whose version stops being active by another swap (an admin
 *   rollback or activation, or the next load) ends without a verdict; one
 *   still pending after PENDING_MS (the swap never happened) is dropped.
 *
 * THREAD SAFETY
 *   G.lock guards everything in G; it is a leaf (see guard.h).  The
 *   rollback runs on the guard thread without it, so between the check and
 *   the rollback an admin may swap first: server_model_rollback then rolls
 *   back whatever is active, and the log names the versions it reports.
 */
#include "guard.h"

#include "log.h"
#include "repo.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define GUARD_RING 128    /* totals kept for baselines */
#define PENDING_MS 10000  /* an armed version not seen active by then is dropped */

typedef struct ring_entry {
    uint64_t t_ms;
    uint64_t gen;
    guard_counts_t totals;
} ring_entry_t;

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;    /* signalled by guard_stop */
    pthread_t thread;
    bool running;           /* the thread was started (guard_start to guard_stop) */
    bool stop;
    server_t *srv;
    guard_limits_t lim;
    uint64_t window_ms;
    ring_entry_t ring[GUARD_RING];
    unsigned ring_head, ring_len;
    /* the watch */
    bool pending;           /* armed, not yet seen active */
    uint64_t armed_ms;
    uint64_t gen;           /* the watched version's generation */
    uint64_t until_ms;      /* WATCHING: when the window ends */
    guard_counts_t base;    /* the previous version's window before the swap */
    guard_counts_t start;   /* the watched version's totals when it was first seen */
    guard_status_t st;      /* what guard_get_status copies */
} G = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

const char *guard_state_name(guard_state_t st)
{
    switch (st) {
    case GUARD_IDLE: return "idle";
    case GUARD_WATCHING: return "watching";
    case GUARD_PASSED: return "passed";
    case GUARD_ROLLED_BACK: return "rolled_back";
    case GUARD_STUCK: return "stuck";
    case GUARD_ENDED: return "ended";
    }
    return "unknown";
}

/* ---- the decision -------------------------------------------------------------- */

guard_call_t guard_decide(const guard_limits_t *lim, const guard_counts_t *base,
                          const guard_counts_t *cur, guard_decision_t *out)
{
    memset(out, 0, sizeof *out);
    out->error_rate = cur->requests ? (double)cur->failed / (double)cur->requests : 0.0;
    out->mean = cur->items ? cur->sum / (double)cur->items : NAN;
    bool have_base = base->requests >= lim->min_requests && base->requests > 0;
    out->base_error_rate = have_base ? (double)base->failed / (double)base->requests : NAN;
    out->base_mean = have_base && base->items ? base->sum / (double)base->items : NAN;
    out->ratio = NAN;
    if (isfinite(out->mean) && isfinite(out->base_mean)) {
        double a = fabs(out->mean), b = fabs(out->base_mean);
        if (a == b)
            out->ratio = 1.0;
        else if (a == 0 || b == 0)
            out->ratio = INFINITY;
        else
            out->ratio = a > b ? a / b : b / a;
    }
    out->call = GUARD_OK;
    if (cur->requests < lim->min_requests || cur->requests == 0) {
        snprintf(out->why, sizeof out->why, "%llu of %llu requests needed seen",
                 (unsigned long long)cur->requests, (unsigned long long)lim->min_requests);
    } else if (out->error_rate > lim->max_error_rate) {
        out->call = GUARD_BAD_ERRORS;
        snprintf(out->why, sizeof out->why,
                 "error rate %.4f (%llu of %llu requests failed, %llu non-finite scores) is over "
                 "--guard-max-error-rate %.4f (the previous version's: %.4f)",
                 out->error_rate, (unsigned long long)cur->failed,
                 (unsigned long long)cur->requests, (unsigned long long)cur->bad_items,
                 lim->max_error_rate, out->base_error_rate);
    } else if (isfinite(out->ratio) ? out->ratio > lim->max_mean_ratio : out->ratio == INFINITY) {
        out->call = GUARD_BAD_MEAN;
        snprintf(out->why, sizeof out->why,
                 "mean prediction %.6f against the previous version's %.6f: ratio %.3f is over "
                 "--guard-max-mean-ratio %.3f (%llu requests, %llu items)",
                 out->mean, out->base_mean, out->ratio, lim->max_mean_ratio,
                 (unsigned long long)cur->requests, (unsigned long long)cur->items);
    } else {
        snprintf(out->why, sizeof out->why,
                 "in bounds: error rate %.4f, mean %.6f (previous %.6f, ratio %.3f) over %llu "
                 "requests",
                 out->error_rate, out->mean, out->base_mean, out->ratio,
                 (unsigned long long)cur->requests);
    }
    return out->call;
}

/* ---- reading the tallies ------------------------------------------------------ */

/* One worker's counts of gen: 0 when it has no slot of gen, or when every
 * try straddled a recycle (the slot left gen: its counts are gone). */
static void read_slot(const server_tally_t *t, uint64_t gen, guard_counts_t *acc)
{
    for (int tries = 0; tries < 4; tries++) {
        uint64_t g1 = atomic_load_explicit(&t->gen, memory_order_acquire);
        if (g1 != gen)
            return;
        guard_counts_t c = {
            atomic_load_explicit(&t->requests, memory_order_relaxed),
            atomic_load_explicit(&t->failed, memory_order_relaxed),
            atomic_load_explicit(&t->items, memory_order_relaxed),
            atomic_load_explicit(&t->bad_items, memory_order_relaxed),
            atomic_load_explicit(&t->sum, memory_order_relaxed),
        };
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&t->gen, memory_order_relaxed) == gen) {
            acc->requests += c.requests;
            acc->failed += c.failed;
            acc->items += c.items;
            acc->bad_items += c.bad_items;
            acc->sum += c.sum;
            return;
        }
    }
}

/* The tallies of gen summed over the workers. */
static guard_counts_t totals_of(server_t *srv, uint64_t gen)
{
    guard_counts_t c = {0};
    for (int w = 0; w < srv->nworkers; w++)
        for (unsigned i = 0; i < SERVER_TALLY_SLOTS; i++)
            read_slot(&srv->metrics[w].tally[i], gen, &c);
    return c;
}

/* a - b, each count clamped at 0 (a recycled slot may make a smaller). */
static guard_counts_t minus(const guard_counts_t *a, const guard_counts_t *b)
{
#define SUB_(f) (a->f > b->f ? a->f - b->f : 0)
    guard_counts_t d = {SUB_(requests), SUB_(failed), SUB_(items), SUB_(bad_items),
                        a->sum - b->sum};
#undef SUB_
    if (d.items == 0)
        d.sum = 0;
    return d;
}

/* The generation, name and version of the active version of model name (the
 * first model when name is empty); 0: none. */
static uint64_t active_of(server_t *srv, char *name, size_t len, uint64_t *version)
{
    server_model_t *sm = name[0] ? server_model_acquire_named(srv, name) : server_model_acquire(srv);
    if (!sm)
        return 0;
    const store_meta_t *meta = model_meta(sm->model);
    snprintf(name, len, "%s", meta->model_name);
    *version = meta->version;
    uint64_t gen = sm->gen;
    server_model_release(sm);
    return gen;
}

/* ---- arming ------------------------------------------------------------------------ */

void guard_arm(server_t *srv, const server_model_t *next)
{
    if (srv->cfg.guard_window_ms <= 0)
        return;
    char name[64];
    uint64_t version = 0;
    snprintf(name, sizeof name, "%s", model_meta(next->model)->model_name);
    uint64_t gen = active_of(srv, name, sizeof name, &version);
    guard_counts_t now = gen ? totals_of(srv, gen) : (guard_counts_t){0};
    uint64_t t = now_ms();
    const store_meta_t *meta = model_meta(next->model);

    pthread_mutex_lock(&G.lock);
    if (!G.running) {
        pthread_mutex_unlock(&G.lock);
        return;
    }
    guard_counts_t from = {0};
    for (unsigned k = 0; k < G.ring_len; k++) { /* oldest first */
        const ring_entry_t *e = &G.ring[(G.ring_head + GUARD_RING - G.ring_len + k) % GUARD_RING];
        if (e->gen == gen && e->t_ms + G.window_ms >= t) {
            from = e->totals;
            break;
        }
    }
    G.base = gen ? minus(&now, &from) : (guard_counts_t){0};
    G.pending = true;
    G.armed_ms = t;
    G.gen = next->gen;
    memset(&G.st.counts, 0, sizeof G.st.counts);
    memset(&G.st.last, 0, sizeof G.st.last);
    G.st.last.mean = G.st.last.base_mean = G.st.last.base_error_rate = G.st.last.ratio = NAN;
    snprintf(G.st.model, sizeof G.st.model, "%s", meta->model_name);
    G.st.version = meta->version;
    G.st.rolled_back_to = 0;
    G.st.remaining_ms = G.window_ms;
    G.st.state = GUARD_WATCHING;
    guard_counts_t base = G.base;
    uint64_t window = G.window_ms;
    pthread_mutex_unlock(&G.lock);
    LOG(LL_INFO,
        "guard: watching %s version %llu for %llu ms (baseline: version %llu, %llu requests, "
        "mean %.6f)",
        meta->model_name, (unsigned long long)meta->version, (unsigned long long)window,
        (unsigned long long)version, (unsigned long long)base.requests,
        base.items ? base.sum / (double)base.items : NAN);
}

/* ---- the thread ---------------------------------------------------------------------- */

/* Out of bounds: roll back (no lock held), then record the outcome. */
static void roll_back(server_t *srv, const char *model, uint64_t version,
                      const guard_decision_t *d)
{
    uint64_t from = 0, to = 0;
    int rc = server_model_rollback(srv, model, &from, &to);
    if (rc == 0)
        repo_rolled_back(model, from, to); /* -ENOENT without a repository: nothing to record */
    pthread_mutex_lock(&G.lock);
    G.st.last = *d;
    if (rc == 0) {
        G.st.state = GUARD_ROLLED_BACK;
        G.st.rolled_back_to = to;
        G.st.rollbacks++;
    } else if (rc == -ESRCH) {
        G.st.state = GUARD_STUCK;
        G.st.stuck++;
    } else {
        G.st.state = GUARD_ENDED; /* the active model is no longer model */
    }
    G.st.remaining_ms = 0;
    pthread_mutex_unlock(&G.lock);
    if (rc == 0)
        LOG(LL_WARN, "guard: rolled %s back from version %llu to %llu: %s", model,
            (unsigned long long)from, (unsigned long long)to, d->why);
    else if (rc == -ESRCH)
        LOG(LL_ERROR,
            "guard: %s version %llu is out of bounds but there is nothing to roll back to "
            "(no standby version; see --keep-versions): %s",
            model, (unsigned long long)version, d->why);
    else
        LOG(LL_WARN, "guard: %s version %llu out of bounds but no longer active: %s", model,
            (unsigned long long)version, d->why);
}

static void tick(server_t *srv)
{
    char name[64];
    uint64_t version = 0;
    pthread_mutex_lock(&G.lock);
    snprintf(name, sizeof name, "%s", G.st.model); /* the watched model ("": the first) */
    pthread_mutex_unlock(&G.lock);
    uint64_t gen = active_of(srv, name, sizeof name, &version);
    guard_counts_t tot = gen ? totals_of(srv, gen) : (guard_counts_t){0};
    uint64_t t = now_ms();
    bool act = false, passed = false;
    guard_decision_t d = {0};
    char model[64] = "";
    uint64_t wversion = 0;

    pthread_mutex_lock(&G.lock);
    /* The ring of the active version's totals, for the next baseline. */
    uint64_t every = G.window_ms / (GUARD_RING / 2);
    if (every < GUARD_TICK_MS)
        every = GUARD_TICK_MS;
    const ring_entry_t *last =
        G.ring_len ? &G.ring[(G.ring_head + GUARD_RING - 1) % GUARD_RING] : NULL;
    if (gen && (!last || last->gen != gen || last->t_ms + every <= t)) {
        G.ring[G.ring_head] = (ring_entry_t){t, gen, tot};
        G.ring_head = (G.ring_head + 1) % GUARD_RING;
        if (G.ring_len < GUARD_RING)
            G.ring_len++;
    }
    if (G.st.state != GUARD_WATCHING)
        goto out;
    if (G.pending) {
        if (gen == G.gen) {
            G.pending = false;
            G.start = tot;
            G.until_ms = t + G.window_ms;
        } else if (t - G.armed_ms > PENDING_MS) {
            G.st.state = GUARD_ENDED;
            G.st.remaining_ms = 0;
        }
        goto out;
    }
    if (gen != G.gen) { /* swapped by someone else: no verdict */
        G.st.state = GUARD_ENDED;
        G.st.remaining_ms = 0;
        LOG(LL_INFO, "guard: %s version %llu is no longer active (now version %llu): watch ended",
            G.st.model, (unsigned long long)G.st.version, (unsigned long long)version);
        goto out;
    }
    G.st.counts = minus(&tot, &G.start);
    guard_decide(&G.lim, &G.base, &G.st.counts, &d);
    G.st.last = d;
    G.st.remaining_ms = G.until_ms > t ? G.until_ms - t : 0;
    if (d.call != GUARD_OK) {
        act = true;
        snprintf(model, sizeof model, "%s", G.st.model);
        wversion = G.st.version;
    } else if (t >= G.until_ms) {
        passed = true;
        G.st.state = GUARD_PASSED;
        G.st.passed++;
        G.st.remaining_ms = 0;
    }
out:
    pthread_mutex_unlock(&G.lock);
    if (passed)
        LOG(LL_INFO, "guard: %s version %llu passed its window: %s", name,
            (unsigned long long)version, d.why);
    if (act)
        roll_back(srv, model, wversion, &d);
}

static void *guard_main(void *arg)
{
    server_t *srv = arg;
    pthread_mutex_lock(&G.lock);
    while (!G.stop) {
        pthread_mutex_unlock(&G.lock);
        tick(srv);
        pthread_mutex_lock(&G.lock);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += GUARD_TICK_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        if (!G.stop)
            pthread_cond_timedwait(&G.cond, &G.lock, &ts);
    }
    pthread_mutex_unlock(&G.lock);
    return NULL;
}

cold int guard_start(server_t *srv)
{
    pthread_mutex_lock(&G.lock);
    G.st.enabled = srv->cfg.guard_window_ms > 0;
    if (!G.st.enabled || G.running) {
        pthread_mutex_unlock(&G.lock);
        return 0;
    }
    G.srv = srv;
    G.window_ms = (uint64_t)srv->cfg.guard_window_ms;
    G.lim = (guard_limits_t){(uint64_t)srv->cfg.guard_min_requests,
                             srv->cfg.guard_max_error_rate, srv->cfg.guard_max_mean_ratio};
    G.stop = false;
    int rc = pthread_create(&G.thread, NULL, guard_main, srv);
    G.running = rc == 0;
    pthread_mutex_unlock(&G.lock);
    return -rc;
}

cold void guard_stop(void)
{
    pthread_mutex_lock(&G.lock);
    if (!G.running) {
        pthread_mutex_unlock(&G.lock);
        return;
    }
    G.stop = true;
    pthread_cond_signal(&G.cond);
    pthread_mutex_unlock(&G.lock);
    pthread_join(G.thread, NULL);
    pthread_mutex_lock(&G.lock);
    G.running = false;
    pthread_mutex_unlock(&G.lock);
}

void guard_get_status(guard_status_t *out)
{
    pthread_mutex_lock(&G.lock);
    *out = G.st;
    pthread_mutex_unlock(&G.lock);
}

/* A gauge value Prometheus parses: NaN is "no value yet" (0), Inf the largest double. */
static double gauge(double v)
{
    return isnan(v) ? 0.0 : isinf(v) ? 1e308 : v;
}

size_t guard_metrics_format(char *buf, size_t len)
{
    guard_status_t st;
    guard_get_status(&st);
    int n = snprintf(buf, len,
                     "# HELP tlserve_guard_rollbacks_total Rollbacks done by the post-swap guard\n"
                     "# TYPE tlserve_guard_rollbacks_total counter\n"
                     "tlserve_guard_rollbacks_total %llu\n"
                     "# HELP tlserve_guard_stuck_total Versions the guard found out of bounds "
                     "with nothing to roll back to\n"
                     "# TYPE tlserve_guard_stuck_total counter\n"
                     "tlserve_guard_stuck_total %llu\n"
                     "# HELP tlserve_guard_passed_total Guard windows that ended in bounds\n"
                     "# TYPE tlserve_guard_passed_total counter\n"
                     "tlserve_guard_passed_total %llu\n"
                     "# HELP tlserve_guard_watching 1 while the guard watches a new version\n"
                     "# TYPE tlserve_guard_watching gauge\n"
                     "tlserve_guard_watching %d\n"
                     "# HELP tlserve_guard_last_mean_ratio Mean prediction ratio (new/old or "
                     "old/new) at the guard's latest evaluation (0: unknown)\n"
                     "# TYPE tlserve_guard_last_mean_ratio gauge\n"
                     "tlserve_guard_last_mean_ratio %.6f\n"
                     "# HELP tlserve_guard_last_error_rate Error rate of the watched version at "
                     "the guard's latest evaluation\n"
                     "# TYPE tlserve_guard_last_error_rate gauge\n"
                     "tlserve_guard_last_error_rate %.6f\n",
                     (unsigned long long)st.rollbacks, (unsigned long long)st.stuck,
                     (unsigned long long)st.passed, st.state == GUARD_WATCHING ? 1 : 0,
                     gauge(st.last.ratio), gauge(st.last.error_rate));
    if (n < 0)
        return 0;
    return (size_t)n < len ? (size_t)n : len ? len - 1 : 0;
}
