/*
 * report.c — turns a run's merged statistics into tlgen's verdict, its human
 * table and its JSON line.
 *
 * VALIDITY: a run measures the server only if the sender kept to the
 * schedule.  It is invalid when tlgen's own mean lag (actual send - due)
 * is over 1 ms, or when it handed fewer than 98% of the window's due
 * requests to a connection (no connection up counts too: the load was not
 * offered; so is a full send backlog, and the rest of the schedule skipped
 * when the sender is still over 1 s behind at the end).  Errors and timeouts
 * do not make a run invalid: they are the server's result; but a run where
 * not one request succeeded is (a wrong --model or --host, a server refusing
 * everything): its latencies are of error answers, not of scoring, and a
 * script that trusts exit 0 must not take them for figures.
 *
 * RATES: offered = the --rate asked for; achieved = requests sent in the
 * measured window / its length; completed = successful responses / length.
 * The 98% test compares sent with the window's due count, so a Poisson
 * run's natural variation does not fail it.
 *
 * SWEEP TABLES (report_row): one line per run with the corrected
 * percentiles only, so a sweep or a search reads as a latency-vs-throughput
 * curve; the JSON objects of a sweep are report_json_members() nested by
 * sweep.c.
 *
 * THREAD SAFETY: main thread, after the run.
 */
#include "tlgen.h"

#include "codec/codec.h"

#include <stdio.h>
#include <string.h>

#define MAX_MEAN_LAG_NS 1000000.0 /* 1 ms */
#define LATE_LAG_NS 10000000.0    /* 10 ms: a send this late is a tail of tlgen's own */
#define MIN_SENT_FRACTION 0.98

static const struct {
    const char *label; /* human */
    const char *key;   /* JSON suffix */
    double pct;
} pcts[] = {
    {"p50", "p50", 50.0},    {"p90", "p90", 90.0},       {"p99", "p99", 99.0},
    {"p99.9", "p999", 99.9}, {"p99.99", "p9999", 99.99},
};

uint64_t report_errors(const tlgen_stats_t *s)
{
    uint64_t n = s->err_other + s->timeouts + s->conn_errors + s->unsent + s->backlogged +
                 s->skipped + s->bad_responses;
    for (int i = 0; i < TLGEN_NCODES; i++)
        n += s->err_code[i];
    return n;
}

static double us(uint64_t ns)
{
    return (double)ns / 1000.0;
}

/* count per second over dur (0 over an empty window: an interrupt before it began) */
static double per_s(uint64_t count, double dur)
{
    return dur > 0 ? (double)count / dur : 0;
}

double report_measured_s(const tlgen_run_t *run)
{
    uint64_t cut = atomic_load(&run->cut_ns);
    if (!cut || cut >= run->end_ns)
        return run->o->duration_s;
    return cut > run->measure_ns ? (double)(cut - run->measure_ns) / 1e9 : 0;
}

void report_judge(tlgen_report_t *r)
{
    const tlgen_stats_t *s = r->st;
    r->valid = true;
    r->why[0] = '\0';
    size_t n = 0;
    if (r->measured_s < r->o->duration_s) {
        r->valid = false;
        n += (size_t)snprintf(r->why, sizeof r->why,
                              "interrupted after %.1f of %.1f measured seconds", r->measured_s,
                              r->o->duration_s);
    }
    double mean_lag = hist_mean(&s->lag);
    if (s->sent > 0 && mean_lag > MAX_MEAN_LAG_NS) {
        r->valid = false;
        if (n > 0 && n < sizeof r->why)
            n += (size_t)snprintf(r->why + n, sizeof r->why - n, "; ");
        if (n < sizeof r->why)
            n += (size_t)snprintf(r->why + n, sizeof r->why - n,
                              "the sender fell behind the schedule by %.0f us on average (max "
                              "%.0f us)",
                              mean_lag / 1000.0, us(s->lag.max));
    }
    if (s->scheduled == 0 || (double)s->sent < MIN_SENT_FRACTION * (double)s->scheduled) {
        r->valid = false;
        if (n > 0 && n < sizeof r->why)
            n += (size_t)snprintf(r->why + n, sizeof r->why - n, "; ");
        if (n < sizeof r->why)
            snprintf(r->why + n, sizeof r->why - n,
                     "only %llu of %llu due requests were sent (%llu with no connection up, "
                     "%llu refused by a full send backlog, %llu skipped with the sender over "
                     "1 s behind)",
                     (unsigned long long)s->sent, (unsigned long long)s->scheduled,
                     (unsigned long long)s->unsent, (unsigned long long)s->backlogged,
                     (unsigned long long)s->skipped);
    }
    uint64_t errors = report_errors(s);
    if (s->ok == 0 && errors > 0) {
        int top = -1; /* the most frequent wire code, named in the reason */
        for (int i = 0; i < TLGEN_NCODES; i++)
            if (s->err_code[i] && (top < 0 || s->err_code[i] > s->err_code[top]))
                top = i;
        r->valid = false;
        n = strlen(r->why);
        if (n > 0 && n < sizeof r->why)
            n += (size_t)snprintf(r->why + n, sizeof r->why - n, "; ");
        if (n < sizeof r->why)
            snprintf(r->why + n, sizeof r->why - n,
                     "no request succeeded (%llu errors%s%s): the latencies are of error "
                     "answers",
                     (unsigned long long)errors, top >= 0 ? ", most of them " : "",
                     top >= 0 ? codec_errc_name(top) : "");
    }
}

static void row(FILE *f, const char *label, uint64_t a, uint64_t b, uint64_t c)
{
    fprintf(f, "  %-8s %14.1f %14.1f %14.1f\n", label, us(a), us(b), us(c));
}

void report_print(FILE *f, const tlgen_report_t *r)
{
    const tlgen_opts_t *o = r->o;
    const tlgen_stats_t *s = r->st;
    double dur = r->measured_s;
    fprintf(f,
            "tlgen: %s:%d model %s, %g req/s %s for %.1f s (warm-up %.1f s discarded), "
            "%u connections, %u threads\n",
            o->host, o->port, o->wl.model, o->rate, o->poisson ? "Poisson" : "constant", dur,
            o->warmup_s, o->connections, o->threads);
    fprintf(f,
            "requests: %u items, %.0f ids, %.0f bytes on average (pool of %u, %s keys over "
            "%llu)\n",
            r->wl->items, r->wl->avg_features, r->wl->avg_len, r->wl->n,
            o->wl.zipf > 0 ? "Zipf" : "uniform", (unsigned long long)o->wl.key_space);
    fprintf(f, "\nlatency (us)     corrected      from send    uncorrected\n");
    fprintf(f, "                (from due)  (from actual) (answer gaps)\n");
    for (size_t i = 0; i < sizeof pcts / sizeof pcts[0]; i++)
        row(f, pcts[i].label, hist_percentile(&s->corrected, pcts[i].pct),
            hist_percentile(&s->from_send, pcts[i].pct),
            hist_percentile(&s->uncorrected, pcts[i].pct));
    row(f, "max", s->corrected.total ? s->corrected.max : 0,
        s->from_send.total ? s->from_send.max : 0, s->uncorrected.total ? s->uncorrected.max : 0);
    fprintf(f, "  %-8s %14.1f %14.1f %14.1f\n", "mean", hist_mean(&s->corrected) / 1000.0,
            hist_mean(&s->from_send) / 1000.0, hist_mean(&s->uncorrected) / 1000.0);

    fprintf(f,
            "\nrate: offered %.1f/s, achieved (sent) %.1f/s (%.1f%% of due), completed ok "
            "%.1f/s\n",
            o->rate, per_s(s->sent, dur),
            s->scheduled ? 100.0 * (double)s->sent / (double)s->scheduled : 0.0,
            per_s(s->ok, dur));
    fprintf(f, "requests: %llu due, %llu sent, %llu ok\n", (unsigned long long)s->scheduled,
            (unsigned long long)s->sent, (unsigned long long)s->ok);
    fprintf(f, "sender lag (us): mean %.1f, p99 %.1f, max %.1f\n", hist_mean(&s->lag) / 1000.0,
            us(hist_percentile(&s->lag, 99.0)), us(s->lag.total ? s->lag.max : 0));
    uint64_t errs = report_errors(s);
    fprintf(f, "errors: %llu", (unsigned long long)errs);
    const char *sep = " (";
    for (int i = 0; i < TLGEN_NCODES; i++)
        if (s->err_code[i]) {
            fprintf(f, "%s%s %llu", sep, codec_errc_name(i), (unsigned long long)s->err_code[i]);
            sep = ", ";
        }
    struct {
        const char *name;
        uint64_t n;
    } other[] = {{"other codes", s->err_other},     {"timeout", s->timeouts},
                 {"connection", s->conn_errors},    {"unsent", s->unsent},
                 {"backlog full", s->backlogged},   {"skipped", s->skipped},
                 {"bad response", s->bad_responses}};
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
        if (other[i].n) {
            fprintf(f, "%s%s %llu", sep, other[i].name, (unsigned long long)other[i].n);
            sep = ", ";
        }
    fprintf(f, "%s\n", errs ? ")" : "");
    if (s->late || s->frame_errors || s->disconnects)
        fprintf(f,
                "also: %llu late responses, %llu connection-level ERROR frames, %llu "
                "disconnects\n",
                (unsigned long long)s->late, (unsigned long long)s->frame_errors,
                (unsigned long long)s->disconnects);
    double lag999 = s->lag.total ? (double)hist_percentile(&s->lag, 99.9) : 0;
    if (r->valid && lag999 > LATE_LAG_NS) /* a short hiccup of tlgen's own: its mean hides it */
        fprintf(f, "valid: yes on average, but the sender was over %.0f ms late for more than "
                "0.1%% of requests (p99.9 lag %.1f ms): the corrected tail at that level may be "
                "tlgen's own, not the server's\n", LATE_LAG_NS / 1e6, lag999 / 1e6);
    else if (r->valid)
        fprintf(f, "valid: yes (the sender kept to the schedule)\n");
    else
        fprintf(f, "valid: NO: %s\n", r->why);
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", *s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

static void json_hist(FILE *f, const char *prefix, const hist_t *h)
{
    for (size_t i = 0; i < sizeof pcts / sizeof pcts[0]; i++)
        fprintf(f, ",\"%s%s_us\":%.3f", prefix, pcts[i].key, us(hist_percentile(h, pcts[i].pct)));
    fprintf(f, ",\"%smax_us\":%.3f,\"%smean_us\":%.3f", prefix, us(h->total ? h->max : 0), prefix,
            hist_mean(h) / 1000.0);
}

void report_json(FILE *f, const tlgen_report_t *r)
{
    fputc('{', f);
    report_json_members(f, r);
    fputs("}\n", f);
}

void report_json_members(FILE *f, const tlgen_report_t *r)
{
    const tlgen_opts_t *o = r->o;
    const tlgen_stats_t *s = r->st;
    double dur = r->measured_s;
    fprintf(f, "\"host\":");
    json_str(f, o->host);
    fprintf(f, ",\"port\":%d,\"model\":", o->port);
    json_str(f, o->wl.model);
    fprintf(f,
            ",\"arrivals\":\"%s\",\"duration_s\":%.3f,\"warmup_s\":%.3f,\"connections\":%u,"
            "\"threads\":%u,\"items\":%u",
            o->poisson ? "poisson" : "constant", dur, o->warmup_s, o->connections, o->threads,
            r->wl->items);
    fprintf(f, ",\"offered_rps\":%.3f,\"achieved_rps\":%.3f,\"completed_rps\":%.3f", o->rate,
            per_s(s->sent, dur), per_s(s->ok, dur));
    fprintf(f, ",\"scheduled\":%llu,\"sent\":%llu,\"ok\":%llu", (unsigned long long)s->scheduled,
            (unsigned long long)s->sent, (unsigned long long)s->ok);
    json_hist(f, "", &s->corrected);
    json_hist(f, "uncorrected_", &s->uncorrected);
    json_hist(f, "send_", &s->from_send);
    fprintf(f, ",\"sender_lag_mean_us\":%.3f,\"sender_lag_p99_us\":%.3f,\"sender_lag_p999_us\":%.3f,"
            "\"sender_lag_max_us\":%.3f",
            hist_mean(&s->lag) / 1000.0, us(hist_percentile(&s->lag, 99.0)),
            us(hist_percentile(&s->lag, 99.9)), us(s->lag.total ? s->lag.max : 0));
    fprintf(f, ",\"errors\":%llu,\"errors_by_code\":{", (unsigned long long)report_errors(s));
    const char *sep = "";
    for (int i = 0; i < TLGEN_NCODES; i++)
        if (s->err_code[i]) {
            fprintf(f, "%s\"%s\":%llu", sep, codec_errc_name(i),
                    (unsigned long long)s->err_code[i]);
            sep = ",";
        }
    fprintf(f,
            "%s\"other_codes\":%llu,\"timeout\":%llu,\"connection\":%llu,\"unsent\":%llu,"
            "\"backlog_full\":%llu,\"skipped\":%llu,\"bad_response\":%llu}",
            sep, (unsigned long long)s->err_other, (unsigned long long)s->timeouts,
            (unsigned long long)s->conn_errors, (unsigned long long)s->unsent,
            (unsigned long long)s->backlogged, (unsigned long long)s->skipped,
            (unsigned long long)s->bad_responses);
    fprintf(f, ",\"late_responses\":%llu,\"frame_errors\":%llu,\"disconnects\":%llu",
            (unsigned long long)s->late, (unsigned long long)s->frame_errors,
            (unsigned long long)s->disconnects);
    fprintf(f, ",\"valid\":%s,\"invalid_reason\":", r->valid ? "true" : "false");
    json_str(f, r->why);
}

/*
 * The sweep table: corrected latencies only (the one a user sees), one row
 * per run, so a sweep reads as a latency-vs-throughput curve.
 */
void report_row_header(FILE *f, bool with_pass)
{
    fprintf(f, "%10s %10s %10s %10s %10s %10s %10s %8s %5s%s\n", "offered/s", "achieved/s",
            "p50 us", "p90 us", "p99 us", "p99.9 us", "max us", "errors", "valid",
            with_pass ? "  pass" : "");
}

void report_row(FILE *f, const tlgen_report_t *r, const char *pass)
{
    const tlgen_stats_t *s = r->st;
    const hist_t *h = &s->corrected;
    fprintf(f, "%10.1f %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f %8llu %5s", r->o->rate,
            per_s(s->sent, r->measured_s), us(hist_percentile(h, 50.0)),
            us(hist_percentile(h, 90.0)), us(hist_percentile(h, 99.0)),
            us(hist_percentile(h, 99.9)), us(h->total ? h->max : 0),
            (unsigned long long)report_errors(s), r->valid ? "yes" : "NO");
    if (pass)
        fprintf(f, "  %s", pass);
    fputc('\n', f);
}
