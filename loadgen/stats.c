/*
 * stats.c — tlgen's per-thread statistics: set up, free, merge.  Merging
 * adds counters and histogram buckets; percentiles are only ever read from
 * the merged histograms (averaging per-thread percentiles would be wrong).
 *
 * THREAD SAFETY: merge after the threads have been joined.
 */
#include "tlgen.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void tlgen_stats_init(tlgen_stats_t *s)
{
    memset(s, 0, sizeof *s);
    hist_init(&s->corrected);
    hist_init(&s->from_send);
    hist_init(&s->uncorrected);
    hist_init(&s->lag);
}

int tlgen_stats_intervals(tlgen_stats_t *s, const tlgen_opts_t *o)
{
    if (o->interval_ms <= 0)
        return 0;
    uint64_t step = (uint64_t)(o->interval_ms * 1e6);
    if (step == 0)
        step = 1;
    uint64_t n = ((uint64_t)(o->duration_s * 1e9) + step - 1) / step;
    if (n == 0)
        n = 1;
    if (n > UINT32_MAX)
        return -EINVAL;
    s->iv = calloc(1, sizeof *s->iv);
    if (!s->iv)
        return -ENOMEM;
    int e = ivals_init(s->iv, step, (uint32_t)n);
    if (e != 0) {
        free(s->iv);
        s->iv = NULL;
    }
    return e;
}

void tlgen_stats_free(tlgen_stats_t *s)
{
    if (s->iv) {
        ivals_free(s->iv);
        free(s->iv);
        s->iv = NULL;
    }
    hist_free(&s->corrected);
    hist_free(&s->from_send);
    hist_free(&s->uncorrected);
    hist_free(&s->lag);
}

void tlgen_stats_merge(tlgen_stats_t *d, const tlgen_stats_t *s)
{
    hist_merge(&d->corrected, &s->corrected);
    hist_merge(&d->from_send, &s->from_send);
    hist_merge(&d->uncorrected, &s->uncorrected);
    hist_merge(&d->lag, &s->lag);
    if (d->iv && s->iv)
        ivals_merge(d->iv, s->iv);
    d->scheduled += s->scheduled;
    d->sent += s->sent;
    d->ok += s->ok;
    for (int i = 0; i < TLGEN_NCODES; i++)
        d->err_code[i] += s->err_code[i];
    d->err_other += s->err_other;
    d->timeouts += s->timeouts;
    d->conn_errors += s->conn_errors;
    d->unsent += s->unsent;
    d->backlogged += s->backlogged;
    d->skipped += s->skipped;
    d->bad_responses += s->bad_responses;
    d->late += s->late;
    d->frame_errors += s->frame_errors;
    d->disconnects += s->disconnects;
}
