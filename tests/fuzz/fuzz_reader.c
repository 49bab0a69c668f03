/*
 * fuzz_reader.c — libFuzzer targets for the data readers (model/reader.h):
 * built once per format (fuzz_reader_libsvm, fuzz_reader_libffm,
 * fuzz_reader_criteo: FUZZ_FORMAT names it), each with its own corpus.
 *
 * Each input is read as a whole file in the target's format, twice:
 * failing on the first malformed line, and skipping bad lines with a small
 * line limit (so that the over-long-line discard path runs too).  Every
 * sample must have a 0/1 label and finite values, libsvm ids must lie in
 * field 0, a refusal must carry a message naming the file and a line, and
 * the reader must stop at the end.  Any other outcome abort()s.
 *
 *   ./fuzz_reader_libffm -max_len=4096 ../tests/fuzz/corpus/reader_libffm
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_reader: %s\n", what);
        abort();
    }
}

static void run(const uint8_t *data, size_t size, reader_format_t f, int skip, size_t max_line)
{
    reader_options_t o = {.format = f, .skip_bad = skip, .max_line = max_line};
    reader_t *r;
    char err[256];
    check(reader_open_mem(data, size, "fuzz.in", &o, &r, err, sizeof err) == 0, "open");
    reader_sample_t s;
    int rc;
    uint64_t rows = 0;
    while ((rc = reader_next(r, &s)) == 1) {
        check(s.label == 0.0f || s.label == 1.0f, "label not 0/1");
        for (uint32_t i = 0; i < s.n; i++) {
            check(isfinite(s.values[i]), "non-finite value");
            if (f == READER_LIBSVM)
                check(s.ids[i] >> 56 == 0, "libsvm id outside field 0");
            if (f != READER_CRITEO)
                check((s.ids[i] & ((UINT64_C(1) << 56) - 1)) != 0, "sparse id low bits 0");
            if (f == READER_CRITEO)
                check(s.ids[i] >> 56 < 39, "criteo field > 38");
        }
        check(++rows <= size + 1, "more samples than lines");
    }
    if (rc < 0) {
        check(rc == -EINVAL || rc == -E2BIG, "unexpected error code");
        check(!skip || rc != -EINVAL, "skip_bad returned EINVAL");
        check(strncmp(reader_error(r), "fuzz.in:", 8) == 0, "error does not name the file");
        check(reader_next(r, &s) == rc, "error not sticky");
    } else {
        check(reader_next(r, &s) == 0, "EOF not sticky");
    }
    reader_close(r);
}

#ifndef FUZZ_FORMAT
#error "build with -DFUZZ_FORMAT=READER_LIBSVM, READER_LIBFFM or READER_CRITEO"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    run(data, size, FUZZ_FORMAT, 0, 0);
    run(data, size, FUZZ_FORMAT, 1, 64);
    return 0;
}
