/*
 * bench_data.c — bench_data.h: a training file read whole into memory.
 */
#include "bench_data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int grow(void **p, uint64_t *cap, uint64_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    uint64_t c = *cap ? *cap : 1024;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * size);
    if (!q)
        return -ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

int bench_data_load(const char *prog, const char *path, reader_format_t fmt, struct data *d)
{
    reader_options_t o = {.format = fmt};
    reader_t *r;
    char why[512];
    if (reader_open(path, &o, &r, why, sizeof why) != 0) {
        fprintf(stderr, "%s: %s\n", prog, why);
        return -1;
    }
    reader_sample_t s;
    int rc;
    while ((rc = reader_next(r, &s)) == 1) {
        if (grow((void **)&d->ids, &d->cap_ids, d->features + s.n, sizeof *d->ids) ||
            grow((void **)&d->values, &d->cap_values, d->features + s.n, sizeof *d->values) ||
            grow((void **)&d->start, &d->cap_start, d->samples + 2, sizeof *d->start) ||
            grow((void **)&d->labels, &d->cap_labels, d->samples + 2, sizeof *d->labels)) {
            fprintf(stderr, "%s: out of memory at sample %llu\n", prog,
                    (unsigned long long)d->samples);
            reader_close(r);
            return -1;
        }
        memcpy(d->ids + d->features, s.ids, (size_t)s.n * sizeof *d->ids);
        for (uint32_t j = 0; j < s.n; j++) {
            d->values[d->features + j] = s.values ? s.values[j] : 1.0f;
            if ((uint32_t)(s.ids[j] >> 56) > d->max_field)
                d->max_field = (uint32_t)(s.ids[j] >> 56);
        }
        if (s.n > d->max_n)
            d->max_n = s.n;
        d->start[d->samples] = d->features;
        d->labels[d->samples] = s.label;
        d->features += s.n;
        d->samples++;
    }
    if (d->start)
        d->start[d->samples] = d->features;
    if (rc < 0)
        fprintf(stderr, "%s: %s: %s\n", prog, path, reader_error(r));
    reader_close(r);
    if (rc == 0 && !d->samples)
        fprintf(stderr, "%s: %s: no samples\n", prog, path);
    return rc < 0 || !d->samples ? -1 : 0;
}

void bench_data_free(struct data *d)
{
    free(d->ids);
    free(d->values);
    free(d->start);
    free(d->labels);
    *d = (struct data){0};
}
