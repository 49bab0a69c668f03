/*
 * tlgen.c — the open-loop load generator for tlserve: command line, setup
 * (request pool, connections, threads), and the report.
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
 * EXIT: 0 valid run, 3 run finished but invalid, 1 setup failure, 2 usage.
 *
 * THREAD SAFETY: the main thread sets up, starts the drivers, joins them and
 * reports; drivers share only read-only state.
 */
#define _GNU_SOURCE
#include "tlgen.h"

#include "codec/codec.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: tlgen --port P --model NAME --rate R --duration S [options]\n"
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
    "  --key-space N     ids are tlsnap's key(i), i < N (default 10000000)\n"
    "  --zipf S          Zipf exponent S > 0 over the key space (default: uniform)\n"
    "  --seed N          the model's tlsnap seed (default 42)\n"
    "  --pool N          distinct pre-encoded requests cycled (default 64)\n"
    "  --timeout-ms MS   a request without response this long after its due time is a\n"
    "                    timeout (default 10000)\n"
    "  --json            print one JSON object as the last line\n"
    "  --spectrum FILE   write the corrected percentile spectrum (HdrHistogram text format)\n"
    "  --help            print this\n"
    "\n"
    "Latencies: corrected = response - due time; from send = response - actual send;\n"
    "uncorrected = response - max(actual send, previous response on the connection), what a\n"
    "closed-loop client would have recorded.  The run is invalid when the sender fell behind\n"
    "its schedule (mean lag over 1 ms, or under 98% of due requests sent).\n"
    "Exit status: 0 valid, 3 invalid, 1 setup error, 2 usage error.\n";

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

__attribute__((cold)) static void parse_args(int argc, char **argv, tlgen_opts_t *o)
{
    *o = (tlgen_opts_t){.host = "127.0.0.1",
                        .connections = 4,
                        .threads = 1,
                        .timeout_ms = 10000,
                        .duration_s = -1,
                        .rate = -1,
                        .wl = {.items = 200,
                               .shared = 300,
                               .per_item = 200,
                               .key_space = 10000000,
                               .zipf = 0.0,
                               .seed = 42,
                               .pool = 64}};
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
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
            die_usage("%s needs a value%s", f, "");
        const char *v = argv[++i];
        if (!strcmp(f, "--host"))
            o->host = v;
        else if (!strcmp(f, "--port"))
            o->port = (int)arg_int(f, v, 1, 65535);
        else if (!strcmp(f, "--model"))
            o->wl.model = v;
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
            o->timeout_ms = (int)arg_int(f, v, 1, 3600000);
        else if (!strcmp(f, "--spectrum"))
            o->spectrum = v;
        else
            die_usage("unknown option '%s'%s", f, "");
    }
    if (!o->port || !o->wl.model || o->rate < 0 || o->duration_s < 0)
        die_usage("--port, --model, --rate and --duration are required%s%s", "", "");
    if (o->threads > o->connections)
        die_usage("--threads is more than --connections: every thread needs a connection%s%s", "",
                  "");
}

/* Resolves host:port into run->addr.  Returns 0 or -1 (message printed). */
__attribute__((cold)) static int resolve_addr(const tlgen_opts_t *o, tlgen_run_t *run)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    int e = getaddrinfo(o->host, port, &hints, &ai);
    if (e != 0) {
        fprintf(stderr, "tlgen: cannot resolve %s: %s\n", o->host, gai_strerror(e));
        return -1;
    }
    memcpy(&run->addr, ai->ai_addr, ai->ai_addrlen);
    run->addrlen = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

/* A connected non-blocking TCP socket with TCP_NODELAY, or -errno.
 * Blocks up to timeout_ms. */
__attribute__((cold)) static int connect_one(const tlgen_run_t *run, int timeout_ms)
{
    int fd = socket(run->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1, rc = 0;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (const struct sockaddr *)&run->addr, run->addrlen) != 0) {
        if (errno != EINPROGRESS) {
            rc = -errno;
            goto out;
        }
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int n = poll(&p, 1, timeout_ms);
        if (n == 0) {
            rc = -ETIMEDOUT;
            goto out;
        }
        int err = 0;
        socklen_t len = sizeof err;
        if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
            err = errno;
        if (err) {
            rc = -err;
            goto out;
        }
    }
out:
    if (rc != 0) {
        close(fd);
        return rc;
    }
    return fd;
}

typedef struct job {
    const tlgen_run_t *run;
    unsigned thread;
    int *fds;
    unsigned nconns;
    tlgen_stats_t st;
    int rc;
} job_t;

static void *job_main(void *arg)
{
    job_t *j = arg;
    j->rc = driver_run(j->run, j->thread, j->fds, j->nconns, &j->st);
    return NULL;
}

int main(int argc, char **argv)
{
    tlgen_opts_t o;
    parse_args(argc, argv, &o);
    signal(SIGPIPE, SIG_IGN);

    workload_t wl;
    char why[256];
    int e = workload_build(&wl, &o.wl, why, sizeof why);
    if (e != 0) {
        fprintf(stderr, "tlgen: %s\n", why);
        return e == -EINVAL ? 2 : 1;
    }
    tlgen_run_t run = {.o = &o, .wl = &wl};
    if (resolve_addr(&o, &run) != 0)
        return 1;
    int *fds = calloc(o.connections, sizeof *fds);
    job_t *jobs = calloc(o.threads, sizeof *jobs);
    pthread_t *tids = calloc(o.threads, sizeof *tids);
    if (!fds || !jobs || !tids) {
        fputs("tlgen: out of memory\n", stderr);
        return 1;
    }
    for (unsigned i = 0; i < o.connections; i++) {
        fds[i] = connect_one(&run, o.timeout_ms);
        if (fds[i] < 0) {
            fprintf(stderr, "tlgen: cannot connect to %s:%d: %s\n", o.host, o.port,
                    strerror(-fds[i]));
            return 1;
        }
    }

    /* everyone starts on the same clock a little after the threads exist */
    run.start_ns = tlgen_now_ns() + 20000000ull;
    run.measure_ns = run.start_ns + (uint64_t)(o.warmup_s * 1e9);
    run.end_ns = run.measure_ns + (uint64_t)(o.duration_s * 1e9);
    unsigned next = 0;
    for (unsigned t = 0; t < o.threads; t++) {
        job_t *j = &jobs[t];
        j->run = &run;
        j->thread = t;
        j->nconns = o.connections / o.threads + (t < o.connections % o.threads);
        j->fds = fds + next;
        next += j->nconns;
        tlgen_stats_init(&j->st);
        e = pthread_create(&tids[t], NULL, job_main, j);
        if (e != 0) {
            fprintf(stderr, "tlgen: cannot start thread %u: %s\n", t, strerror(e));
            return 1;
        }
    }
    tlgen_stats_t all;
    tlgen_stats_init(&all);
    int rc = 0;
    for (unsigned t = 0; t < o.threads; t++) {
        pthread_join(tids[t], NULL);
        if (jobs[t].rc != 0) {
            fprintf(stderr, "tlgen: thread %u failed: %s\n", t, strerror(-jobs[t].rc));
            rc = 1;
        }
        tlgen_stats_merge(&all, &jobs[t].st);
        tlgen_stats_free(&jobs[t].st);
    }

    tlgen_report_t r = {.o = &o, .wl = &wl, .st = &all};
    report_judge(&r);
    report_print(stdout, &r);
    if (o.spectrum) {
        FILE *f = fopen(o.spectrum, "w");
        if (!f || hist_write_spectrum(&all.corrected, f) != 0 || fclose(f) != 0) {
            fprintf(stderr, "tlgen: cannot write %s: %s\n", o.spectrum, strerror(errno));
            rc = 1;
        }
    }
    if (o.json)
        report_json(stdout, &r);
    fflush(stdout);
    if (rc == 0 && !r.valid)
        rc = 3;
    tlgen_stats_free(&all);
    workload_free(&wl);
    free(fds);
    free(jobs);
    free(tids);
    return rc;
}
