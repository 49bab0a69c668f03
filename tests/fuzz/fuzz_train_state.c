/*
 * fuzz_train_state.c — libFuzzer target for the trainer state file's
 * parser (model/train.h: the state file; train_state_parse), which a
 * restarted tlserve runs on every online export of its chain.
 *
 * The input is one file.  If its last 8 bytes (the checksum) are all zero
 * the target writes the right XXH3 there first, so mutations reach past the
 * checksum into the header and the rows.
 * Oracle: a refused file is -EBADMSG with a sentence starting "byte N: "
 * (N inside the input); an accepted one has exactly 48 + count x (8 + 4
 * width) bytes, visits count rows, each of width finite floats, and, when
 * its kind, optimizer and width are LR-FTRL's, every row goes into a real
 * trainer through train_state_put and reads back equal.  Anything else
 * abort()s.
 *
 *   cmake -DTL_FUZZ=ON -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ ..
 *   ./fuzz_train_state -max_len=4096 ../tests/fuzz/corpus/train_state
 *
 * The seeds in corpus/train_state/ are small files (LR-FTRL rows, none, an
 * FM width, the bias) and broken ones (cut, a count too large, a NaN, a
 * width 0), all with a zero checksum.  Without TL_FUZZ this target replays
 * them under ctest.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <errno.h>
#include "fuzz_seal.h"

#include "model/train.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_train_state: %s\n", what);
        abort();
    }
}

struct visit {
    uint32_t width;
    uint64_t rows;
    train_t *t; /* NULL: count only */
};

static int visit(void *ctx, uint64_t id, const float *row)
{
    struct visit *v = ctx;
    for (uint32_t c = 0; c < v->width; c++)
        check(isfinite(row[c]), "a visited float is not finite");
    v->rows++;
    if (v->t) {
        float back[3];
        uint8_t found = 0;
        check(train_state_put(v->t, &id, 1, row) == 0, "put of an accepted row failed");
        check(train_state_get(v->t, &id, 1, back, &found) == 1 && found, "a put row is missing");
        check(memcmp(back, row, 3 * sizeof *row) == 0, "a put row reads back otherwise");
    }
    return 0;
}

static train_t *ftrl(void)
{
    static train_t *t;
    if (!t) {
        train_options_t o;
        char why[200];
        train_defaults(STORE_MODEL_LR, TRAIN_FTRL, &o);
        o.lr.expected_keys = 1024;
        check(train_create(&o, &t, why, sizeof why) == 0, "cannot create the LR trainer");
    }
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = fuzz_copy_sealed(data, size);
    check(buf != NULL, "no memory");
    train_state_header_t h;
    train_state_error_t err = {{0}};
    struct visit v = {0};
    int rc = train_state_parse(buf, size, NULL, &h, NULL, NULL, &err);
    if (rc != 0) {
        check(rc == -EBADMSG, "refused with another code than -EBADMSG");
        unsigned long at;
        check(sscanf(err.msg, "byte %lu: ", &at) == 1 && at <= size,
              "a refusal without its byte inside the input");
        free(buf);
        return 0;
    }
    check(h.width >= 1 && h.width <= STORE_MAX_VALUE_FLOATS, "accepted a bad width");
    check((uint64_t)size == 48 + h.count * (8 + 4 * (uint64_t)h.width), "accepted a bad length");
    v.width = h.width;
    check(train_state_parse(buf, size, NULL, NULL, visit, &v, &err) == 0, "second parse failed");
    check(v.rows == h.count, "visited another number of rows than count");
    train_state_header_t want;
    train_state_header_of(ftrl(), &want);
    want.version = h.version;
    if (h.kind == want.kind && h.optimizer == want.optimizer && h.width == want.width) {
        struct visit p = {.width = h.width, .t = ftrl()};
        check(train_state_parse(buf, size, &want, NULL, visit, &p, &err) == 0,
              "refused against its own header");
        check(p.rows == h.count, "put another number of rows than count");
    }
    free(buf);
    return 0;
}
