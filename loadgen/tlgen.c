/*
 * tlgen.c — the open-loop load generator for tlserve: command line, setup
 * (request pool, server address), the mode, and a single run's report.
 *
 * OPEN LOOP: requests are due on a schedule (constant gaps or Poisson
 * arrivals at --rate) whatever the server does; each one's latency runs from
 * its due time, so a server stall is charged to every request that arrived
 * during it (no coordinated omission).  The uncorrected (closed-loop) and
 * from-send figures are reported beside it; tlgen.h defines all three.
 *
 * TIMELINE:  start ... warm-up (discarded) ... measure_ns ... duration ...
 * end_ns, then up to --timeout-ms of draining for responses still out.
 *
 * Each of --threads threads owns connections/threads connections (the
 * first ones get the remainder) and its share of the schedule (sched.h);
 * their histograms are merged at the end.  The sender's own lateness is
 * measured; a run where it fell behind is reported invalid (report.c).
 *
 * MODES: one run at --rate; a sweep (--sweep, or --sweep-from/to/steps:
 * one run per rate); a search for the highest rate meeting a p99 bound
 * (--search-p99-us).  Every run of every mode is the same tlgen_measure()
 * (measure.c): fresh connections, warm-up, measured window, drain.  sweep.c
 * sequences the multi-run modes.
 *
 * EXIT: 0 valid run, 3 run finished but invalid, 1 setup failure, 2 usage.
 * A sweep exits 3 when any run was invalid; a search when no probe passed.
 * SIGINT or SIGTERM stops the sending: what is out drains, the report covers
 * the seconds measured (invalid, "interrupted"), and the exit is 128 + the
 * signal; a second one kills tlgen at once (no report).
 *
 * THREAD SAFETY: the main thread sets up, starts the drivers, joins them and
 * reports; drivers share only read-only state.
 */
#define _GNU_SOURCE
#include "tlgen.h"

#include "codec/codec.h"

#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <unistd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char usage[] =
    "usage: tlgen --port P --model NAME --duration S --rate R [options]\n"
    "       tlgen --port P --model NAME --duration S --sweep R1,R2,... [options]\n"
    "       tlgen --port P --model NAME --duration S --sweep-from A --sweep-to B\n"
    "             --sweep-steps N [options]\n"
    "       tlgen --port P --model NAME --duration S --search-p99-us US\n"
    "             [--search-from A] [--search-to B] [options]\n"
    "Open-loop load for tlserve: requests are due on a schedule whatever the server does, and\n"
    "each latency is measured from the request's due time (no coordinated omission).\n"
    "\n"
    "  --host H          server address (default 127.0.0.1)\n"
    "  --port P          data plane port (required)\n"
    "  --model NAME      model to score with (required)\n"
    "  --rate R          offered requests per second over all threads (required)\n"
    "  --poisson         Poisson arrivals (default: constant gaps)\n"
    "  --duration S      measured seconds (required)\n"
    "  --warmup S        seconds sent before and discarded (default 0)\n"
    "  --connections C   TCP connections, requests pipelined on each (default 4)\n"
    "  --threads T       sender threads, each with C/T connections (default 1)\n"
    "  --items N         items per request (default 200)\n"
    "  --shared N        ids in the shared block (default 300)\n"
    "  --per-item N      ids per item block (default 200)\n"
    "  --key-space N     ids are tlsynth model's key(i), i < N (default 10000000)\n"
    "  --zipf S          Zipf exponent S > 0 over the key space (default: uniform)\n"
    "  --seed N          the model's tlsynth model --seed (default 42)\n"
    "  --pool N          distinct pre-encoded requests cycled, 1..2^20 and at most\n"
    "                    1 GiB of them (default 64)\n"
    "  --timeout-ms MS   a request without response this long after its due time is a\n"
    "                    timeout, counted in the corrected latencies at the time it was\n"
    "                    given up (a lower bound); 1..60000 (default 10000)\n"
    "  --json            print one JSON object as the last line\n"
    "  --spectrum FILE   write the corrected percentile spectrum (HdrHistogram text format)\n"
    "  --spectrum-dir D  write one spectrum per rate run, D/spectrum-<rate>rps.hgrm\n"
    "  --interval-ms MS  (one run) also cut the measured window into MS-long intervals by\n"
    "                    due time and write each one's latency buckets, counts, errors and\n"
    "                    answer versions as JSON lines to --interval-out FILE (format:\n"
    "                    loadgen/interval.h); the other output is unchanged\n"
    "  --interval-out F  the file for --interval-ms\n"
    "  --help            print this\n"
    "\n"
    "Sweep (one run per rate, in the order given, each with its own warm-up and duration on\n"
    "fresh connections; one table row per rate; with --json the last line is\n"
    "{\"interrupted\":false,\"sweep\":[one single-run object per rate]}):\n"
    "  --sweep R1,R2,... the offered rates (at most 256)\n"
    "  --sweep-from A --sweep-to B --sweep-steps N\n"
    "                    N rates from A to B in geometric steps (N >= 2; rounded to whole\n"
    "                    requests/s from 10/s up)\n"
    "\n"
    "Max-rate search: the highest offered rate whose run is valid, has at most 0.1% errors\n"
    "and a corrected p99 <= US.  Probes A, 2A, 4A, ... until B is reached or two probes in\n"
    "a row fail with a p99 no lower than the probe before (saturation; a server that idles\n"
    "between requests can be slower at low rates than at high ones), then bisects between\n"
    "the highest pass and the first fail above it (6 probes, or until they are within\n"
    "1%).  Each probe runs --warmup + --duration; a row is printed per probe; with --json\n"
    "the last line is {\"max_rps\":..,\"p99_us_at_max\":..,\"probes\":[...]}.\n"
    "  --search-p99-us US  the corrected p99 bound in microseconds\n"
    "  --search-from A     the first probe (default 100)\n"
    "  --search-to B       the highest probe (default 1000000)\n"
    "\n"
    "Latencies: corrected = response (or timeout) - due time; from send = response - actual\n"
    "send; uncorrected = response - max(actual send, previous response on the connection):\n"
    "what a closed-loop client would record only with one request in flight per connection,\n"
    "answered in order (pipelined, it is the gap between answers).  The run is invalid when\n"
    "the sender fell behind its schedule (mean lag over 1 ms, or under 98% of due requests\n"
    "sent), or when not one request succeeded (the latencies would be of error answers).\n"
    "Exit status: 0 valid, 3 invalid, 1 setup error, 2 usage error.  A sweep exits 3 when\n"
    "any of its runs was invalid; a search exits 3 when no probe passed.\n"
    "Ctrl-C (SIGINT) or SIGTERM stops sending: what is out drains, the run is reported over\n"
    "the seconds it measured (invalid: interrupted), a sweep or search stops after it, and the\n"
    "exit status is 128 + the signal.  A second one quits at once, without a report.\n";

__attribute__((cold, noreturn)) static void die_usage(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "tlgen: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n%s", usage);
    exit(2);
}

static long long arg_int(const char *flag, const char *v, long long lo, long long hi)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        char range[64];
        snprintf(range, sizeof range, "%lld..%lld", lo, hi);
        fprintf(stderr, "tlgen: %s '%s' is not an integer in %s\n%s", flag, v, range, usage);
        exit(2);
    }
    return x;
}

static double arg_num(const char *flag, const char *v, double lo, double hi)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= lo && x <= hi)) {
        fprintf(stderr, "tlgen: %s '%s' is not a number in %g..%g\n%s", flag, v, lo, hi, usage);
        exit(2);
    }
    return x;
}

/* --sweep's comma-separated rates, into o->sweep_rates. */
__attribute__((cold)) static void parse_rates(const char *list, tlgen_opts_t *o)
{
    char buf[32];
    o->nsweep = 0;
    for (const char *p = list;;) {
        size_t n = strcspn(p, ",");
        if (n == 0 || n >= sizeof buf)
            die_usage("--sweep '%s': expected rates separated by commas%s", list, "");
        if (o->nsweep == TLGEN_MAX_RATES)
            die_usage("--sweep '%s': more than 256 rates%s", list, "");
        memcpy(buf, p, n);
        buf[n] = '\0';
        o->sweep_rates[o->nsweep++] = arg_num("--sweep", buf, 0.001, 1e8);
        if (p[n] == '\0')
            break;
        p += n + 1;
    }
}

__attribute__((cold)) static void parse_args(int argc, char **argv, tlgen_opts_t *o)
{
    *o = (tlgen_opts_t){.host = "127.0.0.1",
                        .connections = 4,
                        .threads = 1,
                        .timeout_ms = 10000,
                        .duration_s = -1,
                        .rate = -1,
                        .search_p99_us = -1,
                        .search_from = 100,
                        .search_to = 1e6,
                        .wl = {.items = 200,
                               .shared = 300,
                               .per_item = 200,
                               .key_space = 10000000,
                               .zipf = 0.0,
                               .seed = 42,
                               .pool = 64}};
    double sweep_from = -1, sweep_to = -1;
    long long sweep_steps = 0;
    bool search_range = false;
    const char *seen[64]; /* the options given so far: a second one is refused, not taken */
    int nseen = 0;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        for (int j = 0; j < nseen && strncmp(f, "--", 2) == 0; j++)
            if (!strcmp(seen[j], f))
                die_usage("%s is given twice%s", f, "");
        if (nseen < 64)
            seen[nseen++] = f;
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            fputs(usage, stdout);
            exit(0);
        }
        if (!strcmp(f, "--poisson")) {
            o->poisson = true;
            continue;
        }
        if (!strcmp(f, "--json")) {
            o->json = true;
            continue;
        }
        if (i + 1 >= argc)
            die_usage("%s needs a value, or is not an option (--help)%s", f, "");
        const char *v = argv[++i];
        if (!strcmp(f, "--host"))
            o->host = v;
        else if (!strcmp(f, "--port"))
            o->port = (int)arg_int(f, v, 1, 65535);
        else if (!strcmp(f, "--model")) {
            if (strlen(v) > CODEC_MAX_NAME) /* the request's name field would cut it */
                die_usage("--model '%s' is longer than a model name's 64 bytes%s", v, "");
            o->wl.model = v;
        }
        else if (!strcmp(f, "--rate"))
            o->rate = arg_num(f, v, 0.001, 1e8);
        else if (!strcmp(f, "--duration"))
            o->duration_s = arg_num(f, v, 0.001, 86400.0 * 7);
        else if (!strcmp(f, "--warmup"))
            o->warmup_s = arg_num(f, v, 0.0, 86400.0);
        else if (!strcmp(f, "--connections"))
            o->connections = (unsigned)arg_int(f, v, 1, 65536);
        else if (!strcmp(f, "--threads"))
            o->threads = (unsigned)arg_int(f, v, 1, 1024);
        else if (!strcmp(f, "--items"))
            o->wl.items = (uint32_t)arg_int(f, v, 1, CODEC_MAX_ITEMS);
        else if (!strcmp(f, "--shared"))
            o->wl.shared = (uint32_t)arg_int(f, v, 0, CODEC_MAX_BLOCK_FEATURES);
        else if (!strcmp(f, "--per-item"))
            o->wl.per_item = (uint32_t)arg_int(f, v, 0, CODEC_MAX_BLOCK_FEATURES);
        else if (!strcmp(f, "--key-space"))
            o->wl.key_space = (uint64_t)arg_int(f, v, 1, 1LL << 62);
        else if (!strcmp(f, "--zipf"))
            o->wl.zipf = arg_num(f, v, 0.0, 100.0);
        else if (!strcmp(f, "--seed"))
            o->wl.seed = (uint64_t)arg_int(f, v, 0, 1LL << 62);
        else if (!strcmp(f, "--pool"))
            o->wl.pool = (unsigned)arg_int(f, v, 1, 1 << 20);
        else if (!strcmp(f, "--timeout-ms"))
            o->timeout_ms = (int)arg_int(f, v, 1, 60000); /* the histograms end at 60 s */
        else if (!strcmp(f, "--spectrum"))
            o->spectrum = v;
        else if (!strcmp(f, "--spectrum-dir"))
            o->spectrum_dir = v;
        else if (!strcmp(f, "--interval-ms"))
            o->interval_ms = arg_num(f, v, 1.0, 3600000.0);
        else if (!strcmp(f, "--interval-out"))
            o->interval_out = v;
        else if (!strcmp(f, "--sweep"))
            parse_rates(v, o);
        else if (!strcmp(f, "--sweep-from"))
            sweep_from = arg_num(f, v, 0.001, 1e8);
        else if (!strcmp(f, "--sweep-to"))
            sweep_to = arg_num(f, v, 0.001, 1e8);
        else if (!strcmp(f, "--sweep-steps"))
            sweep_steps = arg_int(f, v, 2, TLGEN_MAX_RATES);
        else if (!strcmp(f, "--search-p99-us"))
            o->search_p99_us = arg_num(f, v, 0.001, HIST_MAX_NS / 1000.0);
        else if (!strcmp(f, "--search-from")) {
            o->search_from = arg_num(f, v, 0.001, 1e8);
            search_range = true;
        } else if (!strcmp(f, "--search-to")) {
            o->search_to = arg_num(f, v, 0.001, 1e8);
            search_range = true;
        } else
            die_usage("unknown option '%s'%s", f, "");
    }
    if (!o->port || !o->wl.model || o->duration_s < 0)
        die_usage("--port, --model and --duration are required%s%s", "", "");

    /* exactly one of: --rate, a sweep, a search */
    bool ranged = sweep_from >= 0 || sweep_to >= 0 || sweep_steps > 0;
    if (ranged && (sweep_from < 0 || sweep_to < 0 || sweep_steps == 0))
        die_usage("--sweep-from, --sweep-to and --sweep-steps go together%s%s", "", "");
    if (ranged && o->nsweep > 0)
        die_usage("give either --sweep or --sweep-from/--sweep-to/--sweep-steps%s%s", "", "");
    if (ranged) {
        o->nsweep = (unsigned)sweep_steps;
        for (unsigned k = 0; k < o->nsweep; k++) {
            double x = sweep_from * pow(sweep_to / sweep_from, (double)k / (double)(o->nsweep - 1));
            o->sweep_rates[k] = x >= 10.0 ? round(x) : x; /* tables read better in whole req/s */
        }
    }
    for (unsigned k = 1; k < o->nsweep; k++) /* a rate names its run's spectrum file and row */
        for (unsigned j = 0; j < k; j++)
            if (o->sweep_rates[j] == o->sweep_rates[k]) {
                char rate[32];
                snprintf(rate, sizeof rate, "%.10g", o->sweep_rates[k]);
                die_usage("the sweep has rate %s twice%s: each rate runs once", rate,
                          ranged ? " (after rounding to whole req/s: fewer --sweep-steps)" : "");
            }
    int modes = (o->rate >= 0) + (o->nsweep > 0) + (o->search_p99_us >= 0);
    if (modes != 1)
        die_usage("give exactly one of --rate, --sweep (or --sweep-from/to/steps) and "
                  "--search-p99-us%s%s",
                  "", "");
    if (search_range && o->search_p99_us < 0)
        die_usage("--search-from and --search-to need --search-p99-us%s%s", "", "");
    if (o->search_p99_us >= 0 && o->search_from > o->search_to)
        die_usage("--search-from is above --search-to%s%s", "", "");
    o->mode = o->nsweep > 0 ? TLGEN_SWEEP : o->search_p99_us >= 0 ? TLGEN_SEARCH : TLGEN_SINGLE;
    if (o->mode != TLGEN_SINGLE && o->spectrum)
        die_usage("--spectrum is for one run: use --spectrum-dir with a sweep or a search%s%s", "",
                  "");
    if ((o->interval_ms > 0) != (o->interval_out != NULL))
        die_usage("--interval-ms and --interval-out go together%s%s", "", "");
    if (o->interval_ms > 0 && o->mode != TLGEN_SINGLE)
        die_usage("--interval-ms is for one run (--rate), not a sweep or a search%s%s", "", "");
    /* an interval is 8 KB a thread and once more merged: 100,000 hold 800 MB a thread */
    if (o->interval_ms > 0 && o->duration_s * 1e3 / o->interval_ms > 100000.0)
        die_usage("--interval-ms: more than 100,000 intervals in --duration (8 KB each a "
                  "thread)%s%s", "", "");
    if (o->threads > o->connections)
        die_usage("--threads is more than --connections: every thread needs a connection%s%s", "",
                  "");
}

/* Resolves host:port into run->addr.  Returns 0, or -errno (-EHOSTUNREACH
 * when the name does not resolve; message printed). */
__attribute__((cold)) static int resolve_addr(const tlgen_opts_t *o, tlgen_run_t *run)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    int e = getaddrinfo(o->host, port, &hints, &ai);
    if (e != 0) {
        int rc = e == EAI_SYSTEM && errno ? -errno : -EHOSTUNREACH;
        fprintf(stderr, "tlgen: cannot resolve %s: %s\n", o->host, gai_strerror(e));
        return rc;
    }
    memcpy(&run->addr, ai->ai_addr, ai->ai_addrlen);
    run->addrlen = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

/* 0 when the directory file would be written into exists and takes a new
 * file, else -1 (said): checked before the run, not after it. */
__attribute__((cold)) static int check_writable_dir(const char *flag, const char *file)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", file);
    char *slash = strrchr(buf, '/');
    const char *dir = slash ? (slash == buf ? "/" : (*slash = '\0', buf)) : ".";
    if (access(dir, W_OK | X_OK) != 0) {
        fprintf(stderr, "tlgen: %s %s: cannot write into %s: %s\n", flag, file, dir,
                strerror(errno));
        return -1;
    }
    return 0;
}

/* Creates directory `path` and its missing parents (mkdir -p).  Returns 0 or
 * -errno (-ENOTDIR when a component is a file). */
__attribute__((cold)) static int mkdir_p(const char *path)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf)
        return -ENAMETOOLONG;
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1;; p++) {
        bool last = *p == '\0';
        if (*p != '/' && !last)
            continue;
        *p = '\0';
        struct stat st;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return -errno;
        if (stat(buf, &st) != 0)
            return -errno;
        if (!S_ISDIR(st.st_mode))
            return -ENOTDIR;
        if (last)
            return 0;
        *p = '/';
    }
}

/* Writes the per-interval statistics to o->interval_out.  0 or -errno
 * (message printed). */
_Atomic int tlgen_interrupted;

static void on_interrupt(int sig)
{
    static const char msg[] = "\ntlgen: interrupted: draining what is out, then the report "
                              "(again to quit at once, without it)\n";
    atomic_store(&tlgen_interrupted, sig);
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
}

/* SIGINT and SIGTERM set tlgen_interrupted once; the second one is fatal. */
static void catch_interrupts(void)
{
    struct sigaction sa = {.sa_handler = on_interrupt, .sa_flags = SA_RESETHAND};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* rc, or 128 + the signal when one interrupted the run */
static int exit_status(int rc)
{
    int sig = atomic_load(&tlgen_interrupted);
    return sig ? 128 + sig : rc;
}

static int save_intervals(const tlgen_opts_t *o, const ivals_t *iv, uint64_t origin_ns)
{
    FILE *f = fopen(o->interval_out, "w");
    if (!f) {
        int e = -errno;
        fprintf(stderr, "tlgen: cannot write %s: %s\n", o->interval_out, strerror(-e));
        return e;
    }
    int e = ivals_write(iv, origin_ns, f);
    if (fclose(f) != 0 && e == 0)
        e = -EIO;
    if (e != 0)
        fprintf(stderr, "tlgen: cannot write %s: %s\n", o->interval_out, strerror(-e));
    return e;
}

int main(int argc, char **argv)
{
    tlgen_opts_t *o = calloc(1, sizeof *o); /* ~2 KB of sweep rates: not on the stack */
    if (!o) {
        fputs("tlgen: out of memory\n", stderr);
        return 1;
    }
    parse_args(argc, argv, o);
    signal(SIGPIPE, SIG_IGN);
    catch_interrupts();

    /* what can fail at once goes before the pool's build (seconds, a GiB) */
    workload_t wl;
    memset(&wl, 0, sizeof wl);
    tlgen_run_t run = {.o = o, .wl = &wl};
    int rc = 0, e;
    if (resolve_addr(o, &run) != 0) {
        free(o);
        return 1;
    }
    int probe = tlgen_connect(&run, o->timeout_ms);
    if (probe < 0) {
        fprintf(stderr, "tlgen: cannot connect to %s:%d: %s\n", o->host, o->port,
                strerror(-probe));
        free(o);
        return 1;
    }
    close(probe);
    if ((o->spectrum && check_writable_dir("--spectrum", o->spectrum) != 0) ||
        (o->interval_out && check_writable_dir("--interval-out", o->interval_out) != 0)) {
        free(o);
        return 1;
    }
    char why[256];
    e = workload_build(&wl, &o->wl, why, sizeof why);
    if (e != 0) {
        fprintf(stderr, "tlgen: %s\n", why);
        free(o);
        return e == -EINVAL ? 2 : 1;
    }
    if (o->spectrum_dir && (e = mkdir_p(o->spectrum_dir)) != 0) {
        fprintf(stderr, "tlgen: cannot create %s: %s\n", o->spectrum_dir, strerror(-e));
        rc = 1;
        goto out;
    }
    if (o->mode != TLGEN_SINGLE) {
        rc = sweep_main(&run);
        goto out;
    }

    tlgen_stats_t all;
    tlgen_stats_init(&all);
    if (tlgen_stats_intervals(&all, o) != 0) {
        fputs("tlgen: no memory for --interval-ms\n", stderr);
        tlgen_stats_free(&all);
        rc = 1;
        goto out;
    }
    if ((e = tlgen_measure(&run, &all)) != 0) {
        if (e == -EINTR)
            fputs("tlgen: interrupted before the run began: nothing measured\n", stderr);
        tlgen_stats_free(&all);
        rc = 1;
        goto out;
    }
    tlgen_report_t r = {.o = o, .wl = &wl, .st = &all, .measured_s = report_measured_s(&run)};
    report_judge(&r);
    report_print(stdout, &r);
    if (tlgen_save_spectrum(o, &all.corrected) != 0)
        rc = 1;
    if (all.iv && save_intervals(o, all.iv, run.measure_ns) != 0)
        rc = 1;
    if (o->json)
        report_json(stdout, &r);
    fflush(stdout);
    if (rc == 0 && !r.valid)
        rc = 3;
    tlgen_stats_free(&all);
out:
    workload_free(&wl);
    free(o);
    return exit_status(rc);
}
