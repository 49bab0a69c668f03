/*
 * measure.c — one measured window, the unit every tlgen mode is made of:
 * fresh connections, the driver threads over the warm-up and the duration,
 * their statistics merged; and the spectrum files of a run.
 *
 *   tlgen.c (main) ──> sweep.c ──┐
 *          │                     v
 *          └──────────────> measure.c ──> driver.c
 *
 * main calls tlgen_measure for a single run and sweep_main for the
 * multi-run modes, which call tlgen_measure once per rate.  Both call down
 * into this file and nothing here calls back up, so sweep.c never calls into
 * the file that calls it.
 *
 * The connections are split over the threads as tlgen.c describes; all
 * threads start on one clock 20 ms after the call, so that every thread
 * exists before the first request is due.
 *
 * THREAD SAFETY: called from the main thread only; the drivers it starts
 * share read-only state and are joined before it returns.
 */
#define _GNU_SOURCE
#include "tlgen.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A connected non-blocking TCP socket with TCP_NODELAY, or -errno.
 * Blocks up to timeout_ms. */
__attribute__((cold)) int tlgen_connect(const tlgen_run_t *run, int timeout_ms)
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
    tlgen_run_t *run;
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

/* Starts the drivers on connections already open in fds[] and joins them.
 * A thread that cannot be started leaves its connections to be closed here. */
static int run_threads(tlgen_run_t *run, int *fds, tlgen_stats_t *all)
{
    const tlgen_opts_t *o = run->o;
    job_t *jobs = calloc(o->threads, sizeof *jobs);
    pthread_t *tids = calloc(o->threads, sizeof *tids);
    unsigned started = 0, next = 0;
    int rc = 0;
    if (!jobs || !tids) {
        fputs("tlgen: out of memory\n", stderr);
        for (unsigned i = 0; i < o->connections; i++)
            close(fds[i]);
        rc = -ENOMEM;
        goto out;
    }
    /* everyone starts on the same clock a little after the threads exist */
    run->start_ns = tlgen_now_ns() + 20000000ull;
    run->measure_ns = run->start_ns + (uint64_t)(o->warmup_s * 1e9);
    run->end_ns = run->measure_ns + (uint64_t)(o->duration_s * 1e9);
    atomic_store(&run->cut_ns, 0);
    for (unsigned t = 0; t < o->threads; t++) {
        job_t *j = &jobs[t];
        j->run = run;
        j->thread = t;
        j->nconns = o->connections / o->threads + (t < o->connections % o->threads);
        j->fds = fds + next;
        next += j->nconns;
        tlgen_stats_init(&j->st);
        int e = tlgen_stats_intervals(&j->st, o);
        if (e != 0) {
            fprintf(stderr, "tlgen: no memory for the intervals of thread %u\n", t);
            tlgen_stats_free(&j->st);
            for (unsigned i = next - j->nconns; i < o->connections; i++)
                close(fds[i]);
            rc = e;
            break;
        }
        e = pthread_create(&tids[t], NULL, job_main, j);
        if (e != 0) {
            fprintf(stderr, "tlgen: cannot start thread %u: %s\n", t, strerror(e));
            tlgen_stats_free(&j->st);
            for (unsigned i = next - j->nconns; i < o->connections; i++)
                close(fds[i]);
            rc = -e;
            break;
        }
        started++;
    }
    for (unsigned t = 0; t < started; t++) {
        pthread_join(tids[t], NULL);
        if (jobs[t].rc != 0) {
            fprintf(stderr, "tlgen: thread %u failed: %s\n", t, strerror(-jobs[t].rc));
            rc = jobs[t].rc;
        }
        tlgen_stats_merge(all, &jobs[t].st);
        tlgen_stats_free(&jobs[t].st);
    }
out:
    free(jobs);
    free(tids);
    return rc;
}

int tlgen_measure(tlgen_run_t *run, tlgen_stats_t *all)
{
    const tlgen_opts_t *o = run->o;
    if (atomic_load(&tlgen_interrupted))
        return -EINTR; /* nothing sent: no run */
    int *fds = calloc(o->connections, sizeof *fds);
    if (!fds) {
        fputs("tlgen: out of memory\n", stderr);
        return -ENOMEM;
    }
    int rc = 0;
    for (unsigned i = 0; i < o->connections; i++) {
        fds[i] = tlgen_connect(run, o->timeout_ms);
        if (fds[i] < 0) {
            rc = fds[i];
            fprintf(stderr, "tlgen: cannot connect to %s:%d: %s\n", o->host, o->port,
                    strerror(-rc));
            while (i-- > 0)
                close(fds[i]);
            goto out;
        }
    }
    rc = run_threads(run, fds, all); /* the drivers close the connections */
out:
    free(fds);
    return rc;
}

/* Writes h to path.  Returns 0 or -errno (message printed). */
__attribute__((cold)) static int write_spectrum(const hist_t *h, const char *path)
{
    FILE *f = fopen(path, "w");
    int rc = f ? hist_write_spectrum(h, f) : -errno;
    if (f && fclose(f) != 0 && rc == 0)
        rc = -errno;
    if (rc != 0)
        fprintf(stderr, "tlgen: cannot write %s: %s\n", path, strerror(-rc));
    return rc;
}

__attribute__((cold)) int tlgen_save_spectrum(const tlgen_opts_t *o, const hist_t *h)
{
    int rc = 0;
    if (o->spectrum)
        rc = write_spectrum(h, o->spectrum);
    if (o->spectrum_dir) {
        char path[4096];
        int n = snprintf(path, sizeof path, "%s/spectrum-%.10grps.hgrm", o->spectrum_dir, o->rate);
        if (n < 0 || (size_t)n >= sizeof path) {
            fprintf(stderr, "tlgen: --spectrum-dir '%s' is too long\n", o->spectrum_dir);
            rc = -ENAMETOOLONG;
        } else {
            int e = write_spectrum(h, path);
            rc = rc ? rc : e;
        }
    }
    return rc;
}
