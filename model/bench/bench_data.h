/*
 * bench_data.h — a training file read whole into memory for the model
 * benchmarks (train_bench, dnn_sync_bench): every sample back to back, so
 * that the timed loops read no file.
 */
#ifndef TL_MODEL_BENCH_DATA_H
#define TL_MODEL_BENCH_DATA_H

#include "model/reader.h"

#include <stdint.h>

/* All samples of a file, back to back.  Zero it before bench_data_load. */
struct data {
    uint64_t *ids;
    float *values;    /* 1 where the file gave none */
    uint64_t *start;  /* samples + 1 offsets into ids/values */
    float *labels;
    uint64_t samples, features;
    uint64_t cap_ids, cap_values, cap_start, cap_labels;
    uint32_t max_field, max_n; /* the largest field (id >> 56) and sample size seen */
};

/* Appends every sample of path (format fmt) to d.  0, or -1 after a line on
 * stderr prefixed with prog (unreadable file, a bad line, no memory, no
 * samples). */
int bench_data_load(const char *prog, const char *path, reader_format_t fmt, struct data *d);

void bench_data_free(struct data *d);

#endif
