/*
 * tlgen.h — what tlgen's parts share: the run's options, the per-thread
 * statistics that the report merges, and the driver (one event loop per
 * thread).  Internal to loadgen/.
 *
 * THE THREE LATENCIES of one successful request (all end when its response
 * has been read):
 *
 *   corrected    from its INTENDED send time (the schedule).  What a user
 *                arriving on schedule waits; free of coordinated omission.
 *   from send    from the moment tlgen handed it to its connection.  Equal
 *                to corrected minus the sender's own lag.
 *   uncorrected  from max(actual send, the previous response on the same
 *                connection): the per-connection FIFO service time, i.e. what
 *                a closed-loop client (one request at a time per connection,
 *                wrk-style) would have recorded.  A 1 s server stall shows
 *                up once per connection in it (the request caught in the
 *                stall), not once per request that arrived during the stall:
 *                the same figure as HdrHistogram's "uncorrected" histogram.
 *
 * THREAD SAFETY: each driver thread owns its tlgen_stats_t until joined.
 */
#ifndef TL_LOADGEN_TLGEN_H
#define TL_LOADGEN_TLGEN_H

#include "hist.h"
#include "interval.h"
#include "workload.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#define TLGEN_NCODES 20     /* wire ERROR codes 0..19 counted one by one */
#define TLGEN_MAX_RATES 256 /* rates in one --sweep */

typedef enum tlgen_mode {
    TLGEN_SINGLE, /* one run at --rate */
    TLGEN_SWEEP,  /* one run per rate of sweep_rates[] */
    TLGEN_SEARCH, /* the highest rate with a valid run and p99 <= search_p99_us */
} tlgen_mode_t;

typedef struct tlgen_opts {
    const char *host;         /* server address or name */
    int port;                 /* data plane port */
    tlgen_mode_t mode;        /* what main runs */
    double rate;              /* offered requests/s over all threads (this run's, in a sweep) */
    bool poisson;             /* Poisson arrivals instead of constant gaps */
    double duration_s;        /* measured seconds (after the warm-up) */
    double warmup_s;          /* seconds sent first and discarded */
    unsigned connections;     /* TCP connections over all threads */
    unsigned threads;         /* driver threads (each owns connections / threads) */
    int timeout_ms;           /* a request without a response this long after its due time */
    bool json;                /* last line: one JSON object */
    const char *spectrum;     /* file for the corrected percentile spectrum, or NULL */
    const char *spectrum_dir; /* one spectrum file per run's rate, or NULL */
    double sweep_rates[TLGEN_MAX_RATES]; /* TLGEN_SWEEP: the rates, in run order */
    unsigned nsweep;                     /* entries of sweep_rates */
    double search_p99_us;                /* TLGEN_SEARCH: the corrected p99 bound (us) */
    double search_from, search_to;       /* TLGEN_SEARCH: first probe, highest probe */
    workload_opts_t wl;                  /* request shape */
    double interval_ms;                  /* > 0: per-interval statistics (interval.h), one run */
    const char *interval_out;            /* where they go (--interval-out; required with it) */
} tlgen_opts_t;

/* Per-thread counters and histograms.  Everything counts only requests due
 * inside the measured window [measure_ns, end_ns), except `late` and
 * `frame_errors` (not tied to a window request). */
typedef struct tlgen_stats {
    hist_t corrected;                /* response - due time */
    hist_t from_send;                /* response - actual send */
    hist_t uncorrected;              /* response - max(send, previous response on the conn) */
    hist_t lag;                      /* actual send - due time: the sender's own lateness */
    uint64_t scheduled;              /* requests due in the window */
    uint64_t sent;                   /* of those, handed to a connection */
    uint64_t ok;                     /* PREDICT_RESULTs with the right item count */
    uint64_t err_code[TLGEN_NCODES]; /* ERROR responses by wire code */
    uint64_t err_other;              /* ERROR responses with a code >= TLGEN_NCODES */
    uint64_t timeouts;               /* no response within timeout_ms of the due time */
    uint64_t conn_errors;            /* in flight on a connection that failed */
    uint64_t unsent;                 /* due while no connection was up */
    uint64_t backlogged;             /* not sent: the connection's send backlog was full */
    uint64_t skipped;                /* not sent: the sender was over 1 s behind at the end */
    uint64_t bad_responses;          /* undecodable, wrong type or wrong item count */
    uint64_t late;                   /* responses to requests already timed out or unknown ids */
    uint64_t frame_errors;           /* ERROR frames with request id 0 (server closed the conn) */
    uint64_t disconnects;            /* connections lost during the run */
    ivals_t *iv;                     /* per-interval statistics, or NULL (owned) */
} tlgen_stats_t;

/* What every driver thread reads (read-only during the run but cut_ns). */
typedef struct tlgen_run {
    const tlgen_opts_t *o;
    const workload_t *wl;
    struct sockaddr_storage addr; /* the server, for reconnects */
    socklen_t addrlen;
    uint64_t start_ns;   /* first due time (CLOCK_MONOTONIC) */
    uint64_t measure_ns; /* start_ns + warm-up */
    uint64_t end_ns;     /* measure_ns + duration: nothing is due from here */
    _Atomic uint64_t cut_ns; /* 0, or when an interrupt stopped the sending (the
                              * latest thread's: every request sent was due before) */
} tlgen_run_t;

/* SIGINT or SIGTERM (its number; 0 before one came): the drivers stop sending,
 * drain what is out, and the run is reported over the seconds it measured
 * (invalid, "interrupted"); a sweep or search stops after that run. */
extern _Atomic int tlgen_interrupted;

void tlgen_stats_init(tlgen_stats_t *s);
void tlgen_stats_free(tlgen_stats_t *s);
/* Sets up s->iv for o's --interval-ms over o's measured window (nothing
 * when it is 0).  Returns 0 or -ENOMEM.  Freed by tlgen_stats_free. */
int tlgen_stats_intervals(tlgen_stats_t *s, const tlgen_opts_t *o);
/* Adds src into dst (histograms bucket by bucket; intervals when both have them). */
void tlgen_stats_merge(tlgen_stats_t *dst, const tlgen_stats_t *src);

uint64_t tlgen_now_ns(void);

/* ---- measure.c ---- */

/* One measured window at run->o->rate against run->addr: connects
 * o->connections fresh connections, runs o->threads drivers over the
 * warm-up and the duration, and merges their statistics into *all
 * (initialized by the caller).  Sets run->start_ns, measure_ns, end_ns.
 * Returns 0, or -errno when a connection or a thread could not be set up
 * (message printed).  Blocks for the whole run (warm-up + duration + drain). */
int tlgen_measure(tlgen_run_t *run, tlgen_stats_t *all);

/* One connection to run->addr (TCP_NODELAY, non-blocking), waiting at most
 * timeout_ms: the fd, or -errno.  main probes the server with it before it
 * builds the request pool, so a dead port fails at once. */
int tlgen_connect(const tlgen_run_t *run, int timeout_ms);

/* Writes h (hist_write_spectrum) to o->spectrum when set, and to
 * o->spectrum_dir/spectrum-<o->rate>rps.hgrm when set (the directory
 * exists).  Returns 0 or the first -errno (message printed). */
int tlgen_save_spectrum(const tlgen_opts_t *o, const hist_t *h);

/* ---- sweep.c ---- */

/* Runs the sweep (o->mode TLGEN_SWEEP) or the max-rate search
 * (TLGEN_SEARCH) described by run->o: one tlgen_measure per rate, a table
 * row printed as each finishes, and with o->json one JSON line at the end.
 * run->o is replaced by per-rate copies during the runs and restored.
 * Returns the exit status (0, 1 or 3; see tlgen.c).  Blocks for all runs. */
int sweep_main(tlgen_run_t *run);

/* Runs thread `thread`'s share of the schedule on its nconns connected,
 * non-blocking sockets fds[] (it takes them over and closes them) until
 * end_ns plus the drain of outstanding requests (at most timeout_ms).
 * Fills *st (initialized by the caller).  Returns 0 or -errno when its
 * event loop cannot be set up.  Blocks for the whole run. */
int driver_run(tlgen_run_t *run, unsigned thread, const int *fds, unsigned nconns,
               tlgen_stats_t *st);

/* ---- report.c ---- */

/* The merged outcome of a run. */
typedef struct tlgen_report {
    const tlgen_opts_t *o;
    const workload_t *wl;
    const tlgen_stats_t *st; /* merged over threads */
    double measured_s;       /* the duration, or less when interrupted (report_measured_s) */
    bool valid;              /* the sender kept up with the schedule */
    char why[512];           /* when not valid: the reasons, "; "-separated */
} tlgen_report_t;

/* The seconds of run's measured window that were sent: o->duration_s, or
 * up to the interrupt (0 when it came before the window began). */
double report_measured_s(const tlgen_run_t *run);
/* Decides r->valid and r->why from r->st and r->measured_s. */
void report_judge(tlgen_report_t *r);
/* The human table. */
void report_print(FILE *f, const tlgen_report_t *r);
/* One JSON object on one line. */
void report_json(FILE *f, const tlgen_report_t *r);
/* The same object's members, without braces or newline (to nest it). */
void report_json_members(FILE *f, const tlgen_report_t *r);
/* A sweep table: the header, then one row per run (offered, achieved,
 * corrected p50 p90 p99 p99.9 max, errors, valid; and when pass is not
 * NULL, a last column with it). */
void report_row_header(FILE *f, bool with_pass);
void report_row(FILE *f, const tlgen_report_t *r, const char *pass);
/* Errors of any kind among the window's requests. */
uint64_t report_errors(const tlgen_stats_t *s);

#endif /* TL_LOADGEN_TLGEN_H */
