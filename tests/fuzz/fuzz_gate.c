/*
 * fuzz_gate.c — libFuzzer target for the validation gate's shadow replay
 * (server/gate.c): the sampled payloads come off the wire and are decoded
 * again by the gate, so any bytes in the ring must be skipped or scored,
 * never crash it.
 *
 * The input is cut into payloads, each [len u16 little-endian][len bytes]
 * (a short tail is one last payload), offered to a one-worker ring of
 * 64 slots of 2 KiB (larger ones are skipped, as in the server), then one
 * gate_check runs with a small LR model "ctr" active and a 3x variant as the
 * candidate.  The verdict must be 0 or -EPERM with a message; n_sampled may
 * not exceed the payloads offered; the figures must be finite or the check
 * refused.  Anything else abort()s.
 *
 *   ./fuzz_gate -max_len=8192 ../tests/fuzz/corpus/gate
 *
 * Without TL_FUZZ the same target replays the seed corpus under ctest.
 */
#include "server/gate.h"

#include "codec/codec.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static server_t srv;
static server_model_t *cand;

static server_model_t *make(float scale)
{
    store_options_t opt = {.value_floats = 1, .shards = 2, .expected_keys = 65};
    store_t *s;
    if (store_create(&opt, &s) != 0)
        abort();
    for (uint64_t id = 0; id <= 64; id++) {
        float v = scale * (float)((int)(id % 5) - 2) / 4.0f;
        if (store_upsert(s, id, &v) < 0)
            abort();
    }
    store_meta_t meta = {.model_name = "ctr", .model_kind = STORE_MODEL_LR, .version = 1};
    model_t *m;
    server_model_t *sm;
    if (model_from_store(s, &meta, &m) != 0 || server_model_wrap(m, &sm) != 0)
        abort();
    return sm;
}

static void init(void)
{
    char *argv[] = {"tlserve", "--log-level", "error", "--gate-sample", "64", NULL};
    if (server_config_load(&srv.cfg, 5, argv) != 0)
        abort();
    srv.cfg.load_threads = 1;
    srv.nworkers = 1;
    server_model_retire(server_model_swap(&srv, make(1)));
    cand = make(3);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!cand)
        init();
    if (gate_sample_start(1, 64, 2048) != 0)
        abort();
    gate_ring_t *r = gate_sample_ring(0);
    uint32_t offered = 0;
    size_t pos = 0;
    while (pos < size) {
        size_t len = size - pos >= 2 ? (size_t)(data[pos] | data[pos + 1] << 8) : 0;
        pos += size - pos >= 2 ? 2 : size - pos;
        if (len > size - pos)
            len = size - pos;
        gate_sample_offer(r, data + pos, len, NULL);
        offered++;
        pos += len;
    }
    gate_verdict_t v;
    int rc = gate_check(&srv, cand, &v);
    if (rc != 0 && rc != -EPERM)
        abort();
    if (!v.msg[0] || v.n_sampled > offered || v.n_sampled > 64)
        abort();
    if (rc == 0 && v.shadow && (!isfinite(v.psi) || !isfinite(v.mean_active)))
        abort();
    gate_sample_stop();
    return 0;
}
