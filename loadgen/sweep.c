/*
 * sweep.c — tlgen's multi-run modes: a rate sweep, and the search for the
 * highest rate that meets a latency bound.  Both are a sequence of ordinary
 * single-rate runs (tlgen_measure), each with the same warm-up, duration
 * and validity rules as a lone `--rate` run, on fresh connections, with a
 * SETTLE_NS pause between runs so the server finishes the previous run's
 * stragglers before the next schedule starts.
 *
 * SWEEP: the rates of o->sweep_rates in order.  A table row per rate is
 * printed (and flushed) as soon as its run ends, so a long sweep shows its
 * progress; reasons for invalid runs follow the table.
 *
 * SEARCH: a probe passes when its run is valid, it got at least one
 * successful response, at most MAX_ERROR_FRACTION of its requests failed
 * (timeouts and OVERLOADED answers are fast but are not service), and its
 * corrected p99 is within the bound.  Probes go
 *
 *   A, 2A, 4A, ... min(2^k A, B)      until two probes in a row fail with a
 *                                     p99 no lower than the probe before
 *                                     (the server is saturated), or B passes
 *   then (lo + hi) / 2                between the highest pass lo and the
 *                                     first fail above it hi, BISECT_PROBES
 *                                     times or until hi - lo <= 1% of lo
 *
 * Failures alone do not end the doubling: at low rates a server that idles
 * between requests finds its caches and TLB cold (measured here: LR p50
 * 2.7 ms at 2-12 req/s against 1.2 ms at 200-500 req/s; lookup_floor
 * --gap-us shows the same lookup 1.8x slower after 20 ms idle), so latency
 * can FALL as the rate rises, for several doublings, and a search that
 * stopped at the first failures would report "none" for a server that meets
 * the bound at higher rates.  A probe that failed on the p99 bound alone
 * (valid, <= 0.1% errors) with a p99 below the previous probe's is such a
 * case and does not count; any other failure does: a p99 as high as or
 * higher than the probe before (latency that rises with the rate is
 * saturation), errors (an overloaded server's fast OVERLOADED answers can
 * lower the p99 of the rest) or an invalid run.
 * The answer is lo (0 when no probe passed).  Latency is not monotone in
 * the rate, so the answer is "the highest passing probe on the path", not a
 * proof that every lower rate passes.
 *
 * JSON: the per-run objects are the single-run object's members
 * (report_json_members) collected in a memory stream while the runs go,
 * and printed as one line at the end:
 *
 *   sweep:   {"interrupted":false,"sweep":[{run},{run},...]}
 *   search:  {"max_rps":R,"p99_us_at_max":P|null,"bound_p99_us":B,
 *             "first_fail_rps":F|null,"interrupted":false,
 *             "probes":[{run,"pass":..,"fail_reason":..},...]}
 *   An interrupt (SIGINT, SIGTERM) ends the sequence after the run it cut
 *   short (which is printed, invalid); "interrupted" is then true and a
 *   search names no max rate (R 0, P and F null).
 *
 * THREAD SAFETY: main thread only; each run's drivers are joined before the
 * next starts.
 */
#define _GNU_SOURCE
#include "tlgen.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SETTLE_NS 100000000ull   /* 100 ms between runs */
#define BISECT_PROBES 6          /* probes after the doubling phase */
#define BISECT_RESOLUTION 0.01   /* stop when hi - lo <= 1% of lo */
#define MAX_ERROR_FRACTION 0.001 /* a passing probe has at most 0.1% errors */

/* The state of one sweep or search: its output streams and counters. */
typedef struct multi {
    tlgen_run_t *run;
    const tlgen_opts_t *base; /* the options as parsed (restored into run->o at the end) */
    tlgen_opts_t *ro;         /* this run's copy, rate set (owned) */
    FILE *json;               /* the runs' JSON objects, comma-separated (owned) */
    char *json_buf;
    size_t json_len;
    FILE *notes; /* lines printed after the table: invalid runs' reasons (owned) */
    char *notes_buf;
    size_t notes_len;
    unsigned runs;    /* finished runs */
    unsigned invalid; /* of those, invalid */
    bool save_failed; /* a spectrum file could not be written */
} multi_t;

/* What one run came to, for the search. */
typedef struct probe {
    double rate;
    bool pass;
    bool slow;     /* failed on the p99 bound alone: valid, answered, few errors */
    double p99_us; /* corrected */
} probe_t;

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
                          .tv_nsec = (long)(ns % 1000000000ull)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* A bisection midpoint, rounded like --sweep-from/to's rates. */
static double round_rate(double x)
{
    return x >= 10.0 ? round(x) : round(x * 1000.0) / 1000.0;
}

/* The search verdict on one run; why says what failed ("" on a pass). */
static bool judge_probe(const tlgen_report_t *r, double bound_us, char *why, size_t len,
                        bool *slow)
{
    const tlgen_stats_t *s = r->st;
    double p99 = (double)hist_percentile(&s->corrected, 99.0) / 1000.0;
    uint64_t errs = report_errors(s);
    why[0] = '\0';
    *slow = false;
    if (!r->valid)
        snprintf(why, len, "invalid run");
    else if (s->ok == 0)
        snprintf(why, len, "no successful response");
    else if ((double)errs > MAX_ERROR_FRACTION * (double)s->scheduled)
        snprintf(why, len, "%.2f%% errors", 100.0 * (double)errs / (double)s->scheduled);
    else if (p99 > bound_us) {
        snprintf(why, len, "p99 %.1f us > %.1f us", p99, bound_us);
        *slow = true;
    }
    return why[0] == '\0';
}

/* Runs one rate: measures, prints its row, saves its spectrum, appends its
 * JSON object.  With a search bound (bound_us >= 0) it is judged as a probe
 * into *p.  Returns 0 or -errno from tlgen_measure (run not counted). */
static int one_rate(multi_t *m, double rate, double bound_us, probe_t *p)
{
    *m->ro = *m->base;
    m->ro->rate = rate;
    m->run->o = m->ro;
    if (m->runs > 0)
        sleep_ns(SETTLE_NS);
    tlgen_stats_t st;
    tlgen_stats_init(&st);
    int rc = tlgen_measure(m->run, &st);
    if (rc != 0)
        goto out;
    tlgen_report_t r = {.o = m->ro, .wl = m->run->wl, .st = &st,
                        .measured_s = report_measured_s(m->run)};
    report_judge(&r);
    char why[128] = "";
    bool search = bound_us >= 0;
    bool slow = false;
    bool pass = search && judge_probe(&r, bound_us, why, sizeof why, &slow);
    char col[160];
    snprintf(col, sizeof col, pass ? "yes" : "no: %s", why);
    report_row(stdout, &r, search ? col : NULL);
    fflush(stdout);
    if (!r.valid) {
        fprintf(m->notes, "  %.10g/s: invalid: %s\n", rate, r.why);
        m->invalid++;
    }
    if (tlgen_save_spectrum(m->ro, &st.corrected) != 0)
        m->save_failed = true;
    fprintf(m->json, "%s{", m->runs ? "," : "");
    report_json_members(m->json, &r);
    if (search)
        fprintf(m->json, ",\"pass\":%s,\"fail_reason\":\"%s\"}", pass ? "true" : "false", why);
    else
        fputc('}', m->json);
    if (p)
        *p = (probe_t){.rate = rate,
                       .pass = pass,
                       .slow = slow,
                       .p99_us = (double)hist_percentile(&st.corrected, 99.0) / 1000.0};
    m->runs++;
out:
    tlgen_stats_free(&st);
    return rc;
}

static void print_intro(const tlgen_opts_t *o, const workload_t *wl, const char *what)
{
    printf("tlgen %s: %s:%d model %s, %s arrivals, %.1f s per run (warm-up %.1f s discarded), "
           "%u connections, %u threads\n",
           what, o->host, o->port, o->wl.model, o->poisson ? "Poisson" : "constant", o->duration_s,
           o->warmup_s, o->connections, o->threads);
    printf("requests: %u items, %.0f ids, %.0f bytes on average (pool of %u, %s keys over "
           "%llu)\n",
           wl->items, wl->avg_features, wl->avg_len, wl->n, o->wl.zipf > 0 ? "Zipf" : "uniform",
           (unsigned long long)o->wl.key_space);
}

/* The search's probes (see the essay).  Sets *best (0: none passed) and
 * *first_fail (0: none failed).  Returns 0 or -errno from a run. */
static int search(multi_t *m, probe_t *best, double *first_fail)
{
    const tlgen_opts_t *o = m->base;
    probe_t p;
    double rate = o->search_from;
    int rc;
    *best = (probe_t){0};
    *first_fail = 0;
    int fails_in_a_row = 0;
    double prev_p99 = 0; /* the previous probe's, 0 before the first */
    for (;;) {
        if ((rc = one_rate(m, rate, o->search_p99_us, &p)) != 0)
            return rc;
        if (atomic_load(&tlgen_interrupted))
            return -EINTR; /* the interrupted probe's figures are not a verdict */
        if (p.pass) {
            *best = p;
            *first_fail = 0; /* only a failure above the best pass bounds the bisection */
            fails_in_a_row = 0;
        } else {
            if (*first_fail == 0)
                *first_fail = rate;
            if (p.slow && prev_p99 > 0 && p.p99_us < prev_p99)
                fails_in_a_row = 0; /* faster at a higher rate: not saturated (see above) */
            else if (++fails_in_a_row == 2)
                break;
        }
        prev_p99 = p.p99_us;
        if (rate >= o->search_to)
            break;
        rate = fmin(round_rate(rate * 2.0), o->search_to);
    }
    if (best->rate == 0 || *first_fail == 0)
        return 0; /* nothing passed, or B passed */
    for (int k = 0; k < BISECT_PROBES; k++) {
        if (*first_fail - best->rate <= BISECT_RESOLUTION * best->rate)
            break;
        double mid = round_rate((best->rate + *first_fail) / 2.0);
        if (mid <= best->rate || mid >= *first_fail)
            break; /* rounding left no rate in between */
        if ((rc = one_rate(m, mid, o->search_p99_us, &p)) != 0)
            return rc;
        if (atomic_load(&tlgen_interrupted))
            return -EINTR;
        if (p.pass)
            *best = p;
        else
            *first_fail = mid;
    }
    return 0;
}

int sweep_main(tlgen_run_t *run)
{
    const tlgen_opts_t *o = run->o;
    bool searching = o->mode == TLGEN_SEARCH;
    multi_t m = {.run = run, .base = o};
    int rc = 0;
    m.ro = malloc(sizeof *m.ro);
    m.json = open_memstream(&m.json_buf, &m.json_len);
    m.notes = open_memstream(&m.notes_buf, &m.notes_len);
    if (!m.ro || !m.json || !m.notes) {
        fputs("tlgen: out of memory\n", stderr);
        rc = 1;
        goto out;
    }

    print_intro(o, run->wl, searching ? "search" : "sweep");
    probe_t best = {0};
    double first_fail = 0;
    int e = 0;
    if (searching) {
        printf("search: the highest rate with a valid run, at most %.1f%% errors and a corrected "
               "p99 <= %.1f us; probes from %.10g/s up to %.10g/s\n",
               100.0 * MAX_ERROR_FRACTION, o->search_p99_us, o->search_from, o->search_to);
        printf("\nlatency (us, corrected: from the due time)\n");
        report_row_header(stdout, true);
        fflush(stdout);
        e = search(&m, &best, &first_fail);
    } else {
        printf("\nlatency (us, corrected: from the due time)\n");
        report_row_header(stdout, false);
        fflush(stdout);
        for (unsigned k = 0; k < o->nsweep && e == 0 && !atomic_load(&tlgen_interrupted); k++)
            e = one_rate(&m, o->sweep_rates[k], -1, NULL);
    }
    if (e == 0 && atomic_load(&tlgen_interrupted))
        e = -EINTR;
    if (e == -EINTR) { /* a cut-short probe is no verdict: no max rate */
        best = (probe_t){0};
        first_fail = 0;
    }
    fflush(m.notes);
    if (m.notes_len > 0)
        printf("\n%s", m.notes_buf);
    if (e == -EINTR)
        printf("\n%s interrupted after %u runs%s\n", searching ? "search" : "sweep", m.runs,
               searching ? ": no max rate (the last probe was cut short)" : "");
    else if (e != 0)
        printf("\n%s stopped after %u runs: a run could not be set up\n",
               searching ? "search" : "sweep", m.runs);
    if (searching && e == 0) {
        if (best.rate == 0)
            printf("\nmax rate: none: no probe passed (%u probes from %.10g req/s)\n", m.runs,
                   o->search_from);
        else if (first_fail > 0)
            printf("\nmax rate: %.10g req/s (corrected p99 %.1f us <= %.1f us); first failing "
                   "probe %.10g req/s\n",
                   best.rate, best.p99_us, o->search_p99_us, first_fail);
        else
            printf("\nmax rate: %.10g req/s (corrected p99 %.1f us <= %.1f us); no probe failed "
                   "up to --search-to\n",
                   best.rate, best.p99_us, o->search_p99_us);
    }
    fflush(m.json);
    if (o->json) {
        if (searching) {
            printf("{\"max_rps\":%.3f,\"p99_us_at_max\":", best.rate);
            if (best.rate > 0)
                printf("%.3f", best.p99_us);
            else
                printf("null");
            printf(",\"bound_p99_us\":%.3f,\"first_fail_rps\":", o->search_p99_us);
            if (first_fail > 0)
                printf("%.3f", first_fail);
            else
                printf("null");
            printf(",\"interrupted\":%s,\"probes\":[%s]}\n", e == -EINTR ? "true" : "false",
                   m.json_buf);
        } else {
            printf("{\"interrupted\":%s,\"sweep\":[%s]}\n", e == -EINTR ? "true" : "false",
                   m.json_buf);
        }
    }
    fflush(stdout);
    if (e != 0 || m.save_failed)
        rc = 1;
    else if (searching ? best.rate == 0 : m.invalid > 0)
        rc = 3;
out:
    if (m.json)
        fclose(m.json);
    if (m.notes)
        fclose(m.notes);
    free(m.json_buf);
    free(m.notes_buf);
    free(m.ro);
    run->o = o;
    return rc;
}
