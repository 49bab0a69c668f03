/*
 * stats.c — tlgen's per-thread statistics: set up, free, merge.  Merging
 * adds counters and histogram buckets; percentiles are only ever read from
 * the merged histograms (averaging per-thread percentiles would be wrong).
 *
 * THREAD SAFETY: merge after the threads have been joined.
 */
#include "tlgen.h"

#include <string.h>

void tlgen_stats_init(tlgen_stats_t *s)
{
    memset(s, 0, sizeof *s);
    hist_init(&s->corrected);
    hist_init(&s->from_send);
    hist_init(&s->uncorrected);
    hist_init(&s->lag);
}

void tlgen_stats_free(tlgen_stats_t *s)
{
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
