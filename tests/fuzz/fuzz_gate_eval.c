/*
 * fuzz_gate_eval.c — libFuzzer target for the gate's evaluation file
 * (server/gate_eval.c): the file is untrusted, so any bytes must load into
 * rows or be refused with a message naming the file, never crash.
 *
 * Each input is loaded twice (max_rows 1000 and 2, so that the row bound
 * and the truncation run too).  A load must return 0 with 1..max_rows rows
 * or a negative errno with an error code and a message that names the file;
 * a loaded set is scored by a small LR model and its logloss must be finite
 * and non-negative (p is clipped).  Anything else abort()s.
 *
 *   ./fuzz_gate_eval -max_len=4096 ../tests/fuzz/corpus/gate_eval
 *
 * Without TL_FUZZ the same target replays the seed corpus under ctest.
 */
#include "server/gate_eval.h"
#include "server/log.h"

#include "store/store.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int server_log_level = LL_ERROR; /* config.c's, which this target does not link */

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_gate_eval: %s\n", what);
        abort();
    }
}

static model_t *model(void)
{
    static model_t *m;
    if (m)
        return m;
    store_options_t opt = {.value_floats = 1, .shards = 2, .expected_keys = 64};
    store_t *s;
    check(store_create(&opt, &s) == 0, "store");
    for (uint64_t id = 0; id < 32; id++) {
        float v = (float)((int)(id % 5) - 2) * 3.0f;
        check(store_upsert(s, id, &v) == 1, "upsert");
    }
    store_meta_t meta = {.model_kind = STORE_MODEL_LR, .version = 1};
    snprintf(meta.model_name, sizeof meta.model_name, "ctr");
    check(model_from_store(s, &meta, &m) == 0, "model");
    return m;
}

static void run(const uint8_t *data, size_t size, uint32_t max_rows)
{
    gate_eval_t *e = NULL;
    gate_eval_error_t err;
    int rc = gate_eval_load_mem(data, size, "fuzz.eval", max_rows, &e, &err);
    if (rc != 0) {
        check(rc < 0 && e == NULL, "a refusal returned rows");
        check(err.code != GATE_EVAL_OK, "a refusal without a code");
        check(strstr(err.msg, "fuzz.eval") != NULL, "a refusal without the file's name");
        return;
    }
    check(e != NULL && err.code == GATE_EVAL_OK, "no rows");
    check(gate_eval_rows(e) >= 1 && gate_eval_rows(e) <= max_rows, "row count out of bounds");
    double ll = -1;
    check(gate_eval_logloss(e, model(), &ll) == 0, "scoring failed");
    check(isfinite(ll) && ll >= 0 && ll <= 35, "logloss out of range");
    gate_eval_free(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    run(data, size, 1000);
    run(data, size, 2);
    return 0;
}
