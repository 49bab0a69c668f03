/*
 * interval.c — tlgen's per-interval statistics (interval.h): fixed
 * intervals of the measured window by due time, each a coarse log-linear
 * histogram plus counts, merged over threads and written as JSON lines.
 *
 * LAYOUT: one ival_t per interval and one flat array of n x IVAL_BUCKETS
 * uint32 counts (interval i's buckets at b[i * IVAL_BUCKETS]); uint32 is
 * enough: an interval of one thread never sees 4e9 answers.
 *
 * THREAD SAFETY: none; see interval.h.
 */
#define _GNU_SOURCE
#include "interval.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

_Static_assert(IVAL_BUCKETS == (36 - 5) * IVAL_SUB, "bucket count and layout disagree");

int ivals_init(ivals_t *v, uint64_t interval_ns, uint32_t n)
{
    memset(v, 0, sizeof *v);
    if (interval_ns == 0 || n == 0)
        return -EINVAL;
    v->iv = calloc(n, sizeof *v->iv);
    v->b = calloc((size_t)n * IVAL_BUCKETS, sizeof *v->b);
    if (!v->iv || !v->b) {
        ivals_free(v);
        return -ENOMEM;
    }
    v->interval_ns = interval_ns;
    v->n = n;
    return 0;
}

void ivals_free(ivals_t *v)
{
    free(v->iv);
    free(v->b);
    memset(v, 0, sizeof *v);
}

uint32_t ivals_bucket(uint64_t ns)
{
    if (ns < IVAL_SUB)
        return (uint32_t)ns;
    if (ns >= (UINT64_C(1) << 36))
        ns = (UINT64_C(1) << 36) - 1;
    uint32_t e = 63u - (uint32_t)__builtin_clzll(ns); /* 6..35 */
    uint32_t s = (uint32_t)(ns >> (e - 6)) & (IVAL_SUB - 1);
    return (e - 5) * IVAL_SUB + s;
}

uint64_t ivals_bucket_upper(uint32_t index)
{
    if (index < IVAL_SUB)
        return index;
    if (index >= IVAL_BUCKETS)
        index = IVAL_BUCKETS - 1;
    uint32_t e = index / IVAL_SUB + 5, s = index % IVAL_SUB;
    return ((uint64_t)(IVAL_SUB + s + 1) << (e - 6)) - 1;
}

static ival_t *at(ivals_t *v, uint64_t offset, uint32_t *i)
{
    uint64_t k = offset / v->interval_ns;
    *i = k < v->n ? (uint32_t)k : v->n - 1;
    return &v->iv[*i];
}

void ivals_scheduled(ivals_t *v, uint64_t offset)
{
    uint32_t i;
    at(v, offset, &i)->scheduled++;
}

void ivals_error(ivals_t *v, uint64_t offset)
{
    uint32_t i;
    at(v, offset, &i)->errors++;
}

void ivals_ok(ivals_t *v, uint64_t offset, uint64_t latency_ns, uint64_t version, uint64_t rx_ns)
{
    uint32_t i;
    ival_t *iv = at(v, offset, &i);
    iv->ok++;
    v->b[(size_t)i * IVAL_BUCKETS + ivals_bucket(latency_ns)]++;
    uint32_t k;
    for (k = 0; k < iv->nver && iv->ver[k] != version; k++)
        ;
    if (k < iv->nver) {
        iv->ver_n[k]++;
    } else if (k < IVAL_NVER) {
        iv->ver[k] = version;
        iv->ver_n[k] = 1;
        iv->nver++;
    } else {
        iv->ver_other++;
    }
    for (k = 0; k < v->nfirst && v->first_ver[k] != version; k++)
        ;
    if (k < v->nfirst) {
        if (rx_ns < v->first_rx[k])
            v->first_rx[k] = rx_ns;
    } else if (k < IVAL_NFIRST) {
        v->first_ver[k] = version;
        v->first_rx[k] = rx_ns;
        v->nfirst++;
    }
}

int ivals_merge(ivals_t *d, const ivals_t *s)
{
    if (d->interval_ns != s->interval_ns || d->n != s->n)
        return -EINVAL;
    for (uint32_t i = 0; i < s->n; i++) {
        ival_t *a = &d->iv[i];
        const ival_t *b = &s->iv[i];
        a->scheduled += b->scheduled;
        a->ok += b->ok;
        a->errors += b->errors;
        a->ver_other += b->ver_other;
        for (uint32_t k = 0; k < b->nver; k++) {
            uint32_t j;
            for (j = 0; j < a->nver && a->ver[j] != b->ver[k]; j++)
                ;
            if (j < a->nver) {
                a->ver_n[j] += b->ver_n[k];
            } else if (j < IVAL_NVER) {
                a->ver[j] = b->ver[k];
                a->ver_n[j] = b->ver_n[k];
                a->nver++;
            } else {
                a->ver_other += b->ver_n[k];
            }
        }
    }
    for (size_t i = 0; i < (size_t)s->n * IVAL_BUCKETS; i++)
        d->b[i] += s->b[i];
    for (uint32_t k = 0; k < s->nfirst; k++) {
        uint32_t j;
        for (j = 0; j < d->nfirst && d->first_ver[j] != s->first_ver[k]; j++)
            ;
        if (j < d->nfirst) {
            if (s->first_rx[k] < d->first_rx[j])
                d->first_rx[j] = s->first_rx[k];
        } else if (j < IVAL_NFIRST) {
            d->first_ver[j] = s->first_ver[k];
            d->first_rx[j] = s->first_rx[k];
            d->nfirst++;
        }
    }
    return 0;
}

static int64_t ns_of(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int ivals_write(const ivals_t *v, uint64_t origin_mono_ns, FILE *f)
{
    /* realtime - monotonic, read back to back: the mapping of tlgen's clock */
    int64_t shift = ns_of(CLOCK_REALTIME) - ns_of(CLOCK_MONOTONIC);
    double origin_ms = ((double)origin_mono_ns + (double)shift) / 1e6;
    double step_ms = (double)v->interval_ns / 1e6;
    fprintf(f,
            "{\"interval_ms\":%.3f,\"origin_unix_ms\":%.3f,\"intervals\":%u,\"bucket_sub\":%d,"
            "\"buckets\":%d}\n",
            step_ms, origin_ms, v->n, IVAL_SUB, IVAL_BUCKETS);
    for (uint32_t i = 0; i < v->n; i++) {
        const ival_t *iv = &v->iv[i];
        if (iv->scheduled == 0 && iv->ok == 0 && iv->errors == 0)
            continue;
        fprintf(f,
                "{\"i\":%u,\"start_unix_ms\":%.3f,\"scheduled\":%llu,\"ok\":%llu,\"errors\":%llu,"
                "\"versions\":{",
                i, origin_ms + step_ms * i, (unsigned long long)iv->scheduled,
                (unsigned long long)iv->ok, (unsigned long long)iv->errors);
        for (uint32_t k = 0; k < iv->nver; k++)
            fprintf(f, "%s\"%llu\":%llu", k ? "," : "", (unsigned long long)iv->ver[k],
                    (unsigned long long)iv->ver_n[k]);
        if (iv->ver_other)
            fprintf(f, "%s\"other\":%llu", iv->nver ? "," : "", (unsigned long long)iv->ver_other);
        fputs("},\"b\":[", f);
        const uint32_t *b = v->b + (size_t)i * IVAL_BUCKETS;
        int first = 1;
        for (uint32_t k = 0; k < IVAL_BUCKETS; k++) {
            if (!b[k])
                continue;
            fprintf(f, "%s[%u,%u]", first ? "" : ",", k, b[k]);
            first = 0;
        }
        fputs("]}\n", f);
    }
    fputs("{\"first_seen\":{", f);
    for (uint32_t k = 0; k < v->nfirst; k++)
        fprintf(f, "%s\"%llu\":%.3f", k ? "," : "", (unsigned long long)v->first_ver[k],
                ((double)v->first_rx[k] + (double)shift) / 1e6);
    fputs("}}\n", f);
    if (fflush(f) != 0 || ferror(f))
        return -EIO;
    return 0;
}
