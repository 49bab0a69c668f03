/*
 * guard.c — the post-swap guard (guard.h): one thread that, every
 * GUARD_TICK_MS, sums the workers' tallies of each model's active version,
 * and while a model's freshly loaded version is watched judges it against
 * the version it replaced; out of bounds, it rolls back by itself.  Each
 * model has a watch of its own (W below): a load of one model never ends or
 * hides the watch of another.
 *
 * BASELINES
 *   The previous version's counts "over the last window before the swap"
 *   come from a ring, per model, of its active version's running totals, one entry at
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
 *   G.lock guards everything in G and its watches; it is a leaf (see guard.h).  The
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

/* One model's ring of totals and its watch. */
typedef struct watch {
    char model[64];          /* the model's name; "" : not in use */
    ring_entry_t ring[GUARD_RING];
    unsigned ring_head, ring_len;
    bool pending;            /* armed, not yet seen active */
    uint64_t armed_ms;
    uint64_t gen;            /* the watched version's generation */
    uint64_t until_ms;       /* WATCHING: when the window ends */
    guard_counts_t base;     /* the previous version's window before the swap */
    guard_counts_t start;    /* the watched version's totals when it was first seen */
    guard_status_t st;       /* what guard_get_status copies */
} watch_t;

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;    /* signalled by guard_stop */
    pthread_t thread;
    bool running;           /* the thread was started (guard_start to guard_stop) */
    bool stop;
    bool enabled;           /* --guard-window-ms > 0 */
    server_t *srv;
    guard_limits_t lim;
    uint64_t window_ms;
    watch_t w[SERVER_MODELS_MAX];
    int last;               /* the watch armed or judged last, -1: none */
    guard_decision_t last_decision; /* the latest evaluation of any model (metrics) */
} G = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER, .last = -1};

/* The watch of model name, made when create and a place is free; NULL
 * otherwise.  G.lock held. */
static watch_t *watch_of(const char *name, bool create)
{
    watch_t *free_w = NULL;
    for (int i = 0; i < SERVER_MODELS_MAX; i++) {
        if (strcmp(G.w[i].model, name) == 0 && name[0])
            return &G.w[i];
        if (!free_w && !G.w[i].model[0])
            free_w = &G.w[i];
    }
    if (!create || !free_w || !name[0])
        return NULL;
    memset(free_w, 0, sizeof *free_w);
    snprintf(free_w->model, sizeof free_w->model, "%s", name);
    snprintf(free_w->st.model, sizeof free_w->st.model, "%s", name);
    free_w->st.enabled = true;
    free_w->st.state = GUARD_IDLE;
    free_w->st.last.mean = free_w->st.last.base_mean = free_w->st.last.base_error_rate =
        free_w->st.last.ratio = NAN;
    return free_w;
}

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

/* The generation and version of the active version of model name; 0: none. */
static uint64_t active_of(server_t *srv, const char *name, uint64_t *version)
{
    server_model_t *sm = server_model_acquire_named(srv, name);
    if (!sm)
        return 0;
    *version = model_meta(sm->model)->version;
    uint64_t gen = sm->gen;
    server_model_release(sm);
    return gen;
}

/* ---- arming ------------------------------------------------------------------------ */

void guard_arm(server_t *srv, const server_model_t *next)
{
    if (srv->cfg.guard_window_ms <= 0)
        return;
    const store_meta_t *meta = model_meta(next->model);
    uint64_t version = 0;
    uint64_t gen = active_of(srv, meta->model_name, &version);
    guard_counts_t now = gen ? totals_of(srv, gen) : (guard_counts_t){0};
    uint64_t t = now_ms();

    pthread_mutex_lock(&G.lock);
    watch_t *w = G.running ? watch_of(meta->model_name, true) : NULL;
    if (!w) { /* not running, or no place (cannot happen: one a model the server holds) */
        pthread_mutex_unlock(&G.lock);
        return;
    }
    guard_counts_t from = {0};
    for (unsigned k = 0; k < w->ring_len; k++) { /* oldest first */
        const ring_entry_t *e = &w->ring[(w->ring_head + GUARD_RING - w->ring_len + k) % GUARD_RING];
        if (e->gen == gen && e->t_ms + G.window_ms >= t) {
            from = e->totals;
            break;
        }
    }
    w->base = gen ? minus(&now, &from) : (guard_counts_t){0};
    w->pending = true;
    w->armed_ms = t;
    w->gen = next->gen;
    memset(&w->st.counts, 0, sizeof w->st.counts);
    memset(&w->st.last, 0, sizeof w->st.last);
    w->st.last.mean = w->st.last.base_mean = w->st.last.base_error_rate = w->st.last.ratio = NAN;
    w->st.version = meta->version;
    w->st.rolled_back_to = 0;
    w->st.remaining_ms = G.window_ms;
    w->st.state = GUARD_WATCHING;
    G.last = (int)(w - G.w);
    guard_counts_t base = w->base;
    uint64_t window = G.window_ms;
    pthread_mutex_unlock(&G.lock);
    if (!gen)
        LOG(LL_INFO, "guard: watching %s version %llu for %llu ms (no baseline: the model's "
            "first version; its error rate is judged alone)", meta->model_name,
            (unsigned long long)meta->version, (unsigned long long)window);
    else
        LOG(LL_INFO,
            "guard: watching %s version %llu for %llu ms (baseline: version %llu, %llu requests, "
            "mean %.6f)",
            meta->model_name, (unsigned long long)meta->version, (unsigned long long)window,
            (unsigned long long)version, (unsigned long long)base.requests,
            base.items ? base.sum / (double)base.items : NAN);
}

/* ---- the thread ---------------------------------------------------------------------- */

/* Out of bounds: roll back (no lock held), then record the outcome in
 * model's watch. */
static void roll_back(server_t *srv, const char *model, uint64_t version,
                      const guard_decision_t *d)
{
    uint64_t from = 0, to = 0;
    int rc = server_model_rollback(srv, model, &from, &to);
    if (rc == 0)
        repo_rolled_back(model, from, to); /* -ENOENT without a repository: nothing to record */
    pthread_mutex_lock(&G.lock);
    watch_t *w = watch_of(model, false);
    if (w) {
        w->st.last = *d;
        if (rc == 0) {
            w->st.state = GUARD_ROLLED_BACK;
            w->st.rolled_back_to = to;
            w->st.rollbacks++;
        } else if (rc == -ESRCH) {
            w->st.state = GUARD_STUCK;
            w->st.stuck++;
        } else {
            w->st.state = GUARD_ENDED; /* the active model is no longer model */
        }
        w->st.remaining_ms = 0;
        G.last = (int)(w - G.w);
    }
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

/* One model at a tick: its ring of totals, and its watch judged. */
static void tick_model(server_t *srv, const char *name)
{
    uint64_t version = 0;
    uint64_t gen = active_of(srv, name, &version);
    guard_counts_t tot = gen ? totals_of(srv, gen) : (guard_counts_t){0};
    uint64_t t = now_ms();
    bool act = false, passed = false;
    guard_decision_t d = {0};
    uint64_t wversion = 0;

    pthread_mutex_lock(&G.lock);
    watch_t *w = watch_of(name, true);
    if (!w)
        goto out;
    /* The ring of the active version's totals, for the next baseline. */
    uint64_t every = G.window_ms / (GUARD_RING / 2);
    if (every < GUARD_TICK_MS)
        every = GUARD_TICK_MS;
    const ring_entry_t *last =
        w->ring_len ? &w->ring[(w->ring_head + GUARD_RING - 1) % GUARD_RING] : NULL;
    if (gen && (!last || last->gen != gen || last->t_ms + every <= t)) {
        w->ring[w->ring_head] = (ring_entry_t){t, gen, tot};
        w->ring_head = (w->ring_head + 1) % GUARD_RING;
        if (w->ring_len < GUARD_RING)
            w->ring_len++;
    }
    if (w->st.state != GUARD_WATCHING)
        goto out;
    if (w->pending) {
        if (gen == w->gen) {
            w->pending = false;
            w->start = tot;
            w->until_ms = t + G.window_ms;
        } else if (t - w->armed_ms > PENDING_MS) {
            w->st.state = GUARD_ENDED;
            w->st.remaining_ms = 0;
        }
        goto out;
    }
    if (gen != w->gen) { /* swapped by someone else: no verdict */
        w->st.state = GUARD_ENDED;
        w->st.remaining_ms = 0;
        LOG(LL_INFO, "guard: %s version %llu is no longer active (now version %llu): watch ended",
            w->model, (unsigned long long)w->st.version, (unsigned long long)version);
        goto out;
    }
    w->st.counts = minus(&tot, &w->start);
    guard_decide(&G.lim, &w->base, &w->st.counts, &d);
    w->st.last = d;
    G.last_decision = d;
    G.last = (int)(w - G.w);
    w->st.remaining_ms = w->until_ms > t ? w->until_ms - t : 0;
    if (d.call != GUARD_OK) {
        act = true;
        wversion = w->st.version;
    } else if (t >= w->until_ms) {
        passed = true;
        w->st.state = GUARD_PASSED;
        w->st.passed++;
        w->st.remaining_ms = 0;
    }
out:
    pthread_mutex_unlock(&G.lock);
    if (passed)
        LOG(LL_INFO, "guard: %s version %llu passed its window: %s", name,
            (unsigned long long)version, d.why);
    if (act)
        roll_back(srv, name, wversion, &d);
}

static void tick(server_t *srv)
{
    char names[SERVER_MODELS_MAX][64];
    size_t n = server_model_names(srv, names, SERVER_MODELS_MAX);
    for (size_t i = 0; i < n; i++)
        tick_model(srv, names[i]);
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
    G.enabled = srv->cfg.guard_window_ms > 0;
    if (!G.enabled || G.running) {
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

void guard_get_status(const char *model, guard_status_t *out)
{
    pthread_mutex_lock(&G.lock);
    const watch_t *w = model ? watch_of(model, false) : G.last >= 0 ? &G.w[G.last] : NULL;
    if (w) {
        *out = w->st;
    } else {
        memset(out, 0, sizeof *out);
        out->state = GUARD_IDLE;
        snprintf(out->model, sizeof out->model, "%s", model ? model : "");
        out->last.mean = out->last.base_mean = out->last.base_error_rate = out->last.ratio = NAN;
    }
    out->enabled = G.enabled;
    pthread_mutex_unlock(&G.lock);
}

/* A gauge value Prometheus parses: NaN is "no value yet" (0), Inf the largest double. */
static double gauge(double v)
{
    return isnan(v) ? 0.0 : isinf(v) ? 1e308 : v;
}

size_t guard_metrics_format(char *buf, size_t len)
{
    guard_status_t st = {0}; /* the counters summed over the models */
    int watching = 0;
    pthread_mutex_lock(&G.lock);
    for (int i = 0; i < SERVER_MODELS_MAX; i++) {
        st.rollbacks += G.w[i].st.rollbacks;
        st.stuck += G.w[i].st.stuck;
        st.passed += G.w[i].st.passed;
        watching += G.w[i].model[0] && G.w[i].st.state == GUARD_WATCHING;
    }
    st.last = G.last_decision;
    if (G.last < 0)
        st.last.ratio = st.last.error_rate = NAN;
    pthread_mutex_unlock(&G.lock);
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
                     "# HELP tlserve_guard_watching Models whose new version the guard is "
                     "watching\n"
                     "# TYPE tlserve_guard_watching gauge\n"
                     "tlserve_guard_watching %d\n"
                     "# HELP tlserve_guard_last_mean_ratio Mean prediction ratio (new/old or "
                     "old/new) at the guard's latest evaluation, of any model (0: unknown)\n"
                     "# TYPE tlserve_guard_last_mean_ratio gauge\n"
                     "tlserve_guard_last_mean_ratio %.6f\n"
                     "# HELP tlserve_guard_last_error_rate Error rate of the watched version at "
                     "the guard's latest evaluation\n"
                     "# TYPE tlserve_guard_last_error_rate gauge\n"
                     "tlserve_guard_last_error_rate %.6f\n",
                     (unsigned long long)st.rollbacks, (unsigned long long)st.stuck,
                     (unsigned long long)st.passed, watching,
                     gauge(st.last.ratio), gauge(st.last.error_rate));
    if (n < 0)
        return 0;
    return (size_t)n < len ? (size_t)n : len ? len - 1 : 0;
}
