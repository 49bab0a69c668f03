/*
 * test_gate.c — the validation gate (server/gate.c, #included for its
 * statics): sanity refusals (NaN, Inf, over --gate-max-abs, a kind or width
 * change), the sample ring (wraps, skips payloads over a slot, samples one
 * in GATE_SAMPLE_EVERY once full), PSI and mean shift on known
 * distributions, and shadow scoring refusing a shifted candidate.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "server/gate.c"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NKEYS 64

static server_t srv;

static void configure(const char *const *flags)
{
    char *argv[32] = {"tlserve", "--log-level", "error"};
    int argc = 3;
    for (; flags && *flags; flags++)
        argv[argc++] = (char *)*flags;
    memset(&srv.cfg, 0, sizeof srv.cfg);
    assert_int_equal(server_config_load(&srv.cfg, argc, argv), 0);
}

/* A model "ctr": LR (k = 0) or FM with k factors; bias `bias`, ids 1..NKEYS
 * with w = scale * ((id % 7) - 3) / 8 and factors 0.01; `bad_id` (0: none)
 * gets the value bad instead. */
static server_model_t *make_model(const char *name, uint32_t k, float bias, float scale,
                                  uint64_t bad_id, float bad)
{
    store_options_t opt = {.value_floats = 1 + k, .shards = 4, .expected_keys = NKEYS + 1};
    store_t *s;
    assert_int_equal(store_create(&opt, &s), 0);
    float v[8] = {0};
    assert_true(k < 8);
    v[0] = bias;
    assert_int_equal(store_upsert(s, MODEL_BIAS_ID, v), 1);
    for (uint64_t id = 1; id <= NKEYS; id++) {
        v[0] = scale * (float)((int)(id % 7) - 3) / 8.0f;
        for (uint32_t f = 1; f <= k; f++)
            v[f] = 0.01f;
        if (id == bad_id)
            v[k] = bad;
        assert_int_equal(store_upsert(s, id, v), 1);
    }
    store_meta_t meta = {.model_kind = k ? STORE_MODEL_FM : STORE_MODEL_LR, .version = 1};
    snprintf(meta.model_name, sizeof meta.model_name, "%s", name);
    model_t *m;
    assert_int_equal(model_from_store(s, &meta, &m), 0);
    server_model_t *sm;
    assert_int_equal(server_model_wrap(m, &sm), 0);
    return sm;
}

static void activate(server_model_t *sm)
{
    server_model_retire(server_model_swap(&srv, sm));
}

static int setup(void **state)
{
    (void)state;
    configure(NULL);
    srv.nworkers = 1;
    atomic_store(&srv.models[0].active, NULL);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    server_model_retire(atomic_exchange(&srv.models[0].active, NULL));
    gate_sample_stop();
    return 0;
}

/* ---- sanity --------------------------------------------------------------------- */

static void test_sanity_passes_a_sound_model(void **state)
{
    (void)state;
    server_model_t *c = make_model("ctr", 0, 0.1f, 1, 0, 0);
    gate_verdict_t v;
    assert_int_equal(gate_check(&srv, c, &v), 0);
    assert_true(v.pass);
    assert_false(v.shadow); /* no active version */
    assert_int_equal(v.values_checked, NKEYS + 1);
    server_model_release(c);
}

static void refuse_value(uint32_t k, float bad, const char *want)
{
    server_model_t *c = make_model("ctr", k, 0.1f, 1, 17, bad);
    gate_verdict_t v;
    assert_int_equal(gate_check(&srv, c, &v), -EPERM);
    assert_false(v.pass);
    print_message("%s\n", v.msg);
    assert_non_null(strstr(v.msg, "key 17"));
    assert_non_null(strstr(v.msg, want));
    server_model_release(c);
}

static void test_sanity_refuses_nan_inf_and_large(void **state)
{
    (void)state;
    uint64_t before = G.refused;
    refuse_value(0, NAN, "nan");
    refuse_value(2, INFINITY, "inf");     /* a factor, not the weight */
    refuse_value(0, -2e4f, "-20000");      /* over the default 1e4 */
    assert_int_equal(G.refused, before + 3);
    const char *flags[] = {"--gate-max-abs", "0.5", NULL};
    configure(flags);
    refuse_value(0, 0.6f, "0.6");
    configure(NULL);
}

static void test_sanity_refuses_kind_or_width_change(void **state)
{
    (void)state;
    activate(make_model("ctr", 2, 0.1f, 1, 0, 0)); /* FM, K = 3 */
    server_model_t *lr = make_model("ctr", 0, 0.1f, 1, 0, 0);
    server_model_t *fm4 = make_model("ctr", 3, 0.1f, 1, 0, 0);
    server_model_t *other = make_model("other", 2, 0.1f, 1, 0, 0);
    gate_verdict_t v;
    assert_int_equal(gate_check(&srv, lr, &v), -EPERM);
    assert_non_null(strstr(v.msg, "kind lr"));
    assert_int_equal(gate_check(&srv, fm4, &v), -EPERM);
    assert_non_null(strstr(v.msg, "4 floats per key"));
    /* Another model name: not a version of the active one, values only. */
    assert_int_equal(gate_check(&srv, other, &v), 0);
    assert_false(v.shadow);
    const char *flags[] = {"--gate-allow-kind-change", NULL};
    configure(flags);
    assert_int_equal(gate_check(&srv, lr, &v), 0);
    assert_int_equal(gate_check(&srv, fm4, &v), 0);
    configure(NULL);
    const char *off[] = {"--gate=false", NULL};
    configure(off);
    server_model_t *nan = make_model("ctr", 0, 0.1f, 1, 3, NAN);
    assert_int_equal(gate_check(&srv, nan, &v), 0); /* the gate is off */
    configure(NULL);
    server_model_release(nan);
    server_model_release(lr);
    server_model_release(fm4);
    server_model_release(other);
}

/* ---- the ring -------------------------------------------------------------------- */

static void test_ring_wraps_skips_and_samples(void **state)
{
    (void)state;
    assert_int_equal(gate_sample_start(2, 8, 16), 0); /* 2 rings of 4 slots of 16 bytes */
    gate_ring_t *r = gate_sample_ring(0);
    assert_non_null(r);
    assert_non_null(gate_sample_ring(1));
    assert_null(gate_sample_ring(2));
    assert_int_equal(r->nslots, 4);
    uint8_t p[32];
    for (int i = 0; i < 4; i++) { /* every request until the ring is full */
        memset(p, i, sizeof p);
        gate_sample_offer(r, p, 10, NULL);
    }
    assert_int_equal(r->filled, 4);
    assert_int_equal(r->head, 0);
    memset(p, 7, sizeof p);
    for (int i = 0; i < GATE_SAMPLE_EVERY - 1; i++) /* then 1 in 16: these are not */
        gate_sample_offer(r, p, 10, NULL);
    assert_int_equal(r->head, 0);
    memset(p, 9, sizeof p);
    gate_sample_offer(r, p, 12, NULL); /* the 16th is: it wraps over slot 0 */
    assert_int_equal(r->head, 1);
    for (int i = 0; i < GATE_SAMPLE_EVERY - 1; i++)
        gate_sample_offer(r, p, 10, NULL);
    gate_sample_offer(r, p, 17, NULL); /* sampled, but over the 16-byte slot: skipped */
    assert_int_equal(r->skipped, 1);
    assert_int_equal(r->head, 1);
    memset(p, 5, sizeof p);
    for (int i = 0; i < GATE_SAMPLE_EVERY; i++)
        gate_sample_offer(r, p, 10, NULL);
    assert_int_equal(r->head, 2);

    uint8_t *buf;
    uint32_t lens[16];
    int n = gate_sample_copy(&buf, lens, 16);
    assert_int_equal(n, 4); /* ring 1 is empty */
    size_t off = 0;
    int want[4] = {9, 5, 2, 3};
    for (int i = 0; i < n; i++) {
        assert_int_equal(lens[i], want[i] == 9 ? 12 : 10);
        for (uint32_t b = 0; b < lens[i]; b++)
            assert_int_equal(buf[off + b], want[i]);
        off += lens[i];
    }
    free(buf);
    assert_int_equal(gate_sample_copy(&buf, lens, 2), 2); /* max respected */
    free(buf);
    gate_sample_stop();
    assert_null(gate_sample_ring(0));
    assert_int_equal(gate_sample_copy(&buf, lens, 16), 0);
    assert_null(buf);
    gate_sample_offer(NULL, p, 10, NULL); /* sampling off: a no-op */
    assert_int_equal(gate_sample_start(0, 8, 16), -EINVAL);
    assert_int_equal(gate_sample_start(1, 0, 16), 0);
    assert_null(gate_sample_ring(0));
}

/* ---- statistics ------------------------------------------------------------------- */

static void test_psi_and_mean(void **state)
{
    (void)state;
    enum { N = 10000 };
    float *a = malloc(N * sizeof *a), *c = malloc(N * sizeof *c);
    assert_non_null(a);
    assert_non_null(c);
    for (int i = 0; i < N; i++)
        a[i] = c[i] = (float)(i + 0.5) / N; /* uniform on (0, 1) */
    assert_true(fabs(gate_mean(a, N) - 0.5) < 1e-6);
    assert_true(fabs(gate_psi(a, N, c, N)) < 1e-9); /* the same distribution */
    /* Everything in the top decile: c = 0.9..1 in one bin of 0.1 -> one bin
     * with 1.0, nine with the floor: PSI = (1-0.1) ln 10 + 9 (1e-4 - 0.1) ln(1e-3). */
    for (int i = 0; i < N; i++)
        c[i] = 0.95f;
    double want = 0.9 * log(10.0) + 9 * (1e-4 - 0.1) * log(1e-3);
    assert_true(fabs(gate_psi(a, N, c, N) - want) < 1e-3);
    /* Half the candidate's mass moved from the bottom half up by 0.5:
     * bins 0-4 get 0, 5-9 get 0.2 each: 5 (0.2-0.1) ln 2 + 5 (1e-4-0.1) ln(1e-3). */
    for (int i = 0; i < N; i++)
        c[i] = a[i] < 0.5f ? a[i] + 0.5f : a[i];
    want = 5 * 0.1 * log(2.0) + 5 * (1e-4 - 0.1) * log(1e-3);
    assert_true(fabs(gate_psi(a, N, c, N) - want) < 1e-2);
    assert_true(fabs(gate_mean(c, N) - 0.75) < 1e-3);
    /* A small shift stays small. */
    for (int i = 0; i < N; i++)
        c[i] = a[i] * 0.98f + 0.01f;
    assert_true(gate_psi(a, N, c, N) < 0.01);
    assert_true(gate_psi(a, 0, c, N) == 0);
    free(a);
    free(c);
}

/* ---- shadow scoring ------------------------------------------------------------------ */

static void offer_request(gate_ring_t *r, const char *name, uint64_t first)
{
    /* feature values spread over (0.3, 1.3): scores that are not a few ties */
    double g = (double)first * 0.6180339887;
    float x = 0.3f + (float)(g - floor(g));
    const float vals[4] = {x, 1.3f - x, x * x, 1};
    uint64_t sh[2] = {first % NKEYS + 1, (first + 3) % NKEYS + 1};
    if (sh[0] > sh[1]) {
        uint64_t t = sh[0];
        sh[0] = sh[1];
        sh[1] = t;
    }
    if (sh[0] == sh[1])
        sh[1]++;
    uint64_t it[2][1] = {{(first + 1) % NKEYS + 1}, {(first + 5) % NKEYS + 1}};
    codec_block_t items[2] = {{it[0], vals, 1}, {it[1], vals, 1}};
    codec_predict_t req = {.items = 2, .shared = {sh, vals, 2}, .item = items};
    snprintf(req.name, sizeof req.name, "%s", name);
    uint8_t frame[512];
    size_t len;
    assert_int_equal(codec_encode_predict(frame, sizeof frame, 1, &req, &len, NULL), CODEC_OK);
    gate_sample_offer(r, frame + CODEC_HEADER_SIZE, len - CODEC_HEADER_SIZE, NULL);
}

/* A request larger than a slot is kept as its shared block and its first
 * items, re-encoded: the slot decodes to a PREDICT with the same name,
 * shared block and leading items. */
static void test_large_request_kept_truncated(void **state)
{
    (void)state;
    enum { ITEMS = 400 };
    assert_int_equal(gate_sample_start(1, 4, 1024), 0);
    gate_ring_t *r = gate_sample_ring(0);
    static uint64_t ids[ITEMS];
    static codec_block_t items[ITEMS];
    static uint64_t sh[3] = {1, 2, 3};
    for (uint32_t i = 0; i < ITEMS; i++) {
        ids[i] = 10 + i;
        items[i] = (codec_block_t){&ids[i], NULL, 1};
    }
    codec_predict_t req = {.items = ITEMS, .shared = {sh, NULL, 3}, .item = items};
    snprintf(req.name, sizeof req.name, "ctr");
    static uint8_t frame[16384];
    size_t len;
    assert_int_equal(codec_encode_predict(frame, sizeof frame, 1, &req, &len, NULL), CODEC_OK);
    assert_true(len - CODEC_HEADER_SIZE > 1024);
    gate_sample_offer(r, frame + CODEC_HEADER_SIZE, len - CODEC_HEADER_SIZE, NULL);
    assert_int_equal(r->skipped, 1); /* without the decoded request: skipped */
    gate_sample_offer(r, frame + CODEC_HEADER_SIZE, len - CODEC_HEADER_SIZE, &req);
    assert_int_equal(r->skipped, 1);

    uint8_t *buf = NULL;
    uint32_t lens[4];
    int n = gate_sample_copy(&buf, lens, 4);
    assert_int_equal(n, 1);
    assert_true(lens[0] <= 1024);
    static uint8_t arena_mem[1 << 16];
    codec_arena_t arena = {.base = arena_mem, .cap = sizeof arena_mem};
    codec_predict_t got;
    assert_int_equal(codec_decode_predict(buf, lens[0], 0, &arena, &got, NULL), CODEC_OK);
    assert_string_equal(got.name, "ctr");
    assert_int_equal(got.shared.n, 3);
    assert_true(got.items > 8 && got.items < ITEMS);
    for (uint32_t i = 0; i < got.items; i++) {
        assert_int_equal(got.item[i].n, 1);
        assert_int_equal(got.item[i].ids[0], 10 + i);
    }
    free(buf);
    gate_sample_stop();
}

static void test_shadow_refuses_a_shifted_candidate(void **state)
{
    (void)state;
    assert_int_equal(gate_sample_start(1, 256, 4096), 0);
    gate_ring_t *r = gate_sample_ring(0);
    for (uint64_t i = 0; i < 200; i++)
        offer_request(r, "ctr", i);
    offer_request(r, "someone-else", 1); /* another model's request: not replayed */
    activate(make_model("ctr", 0, -1.0f, 1, 0, 0));

    server_model_t *same = make_model("ctr", 0, -1.0f, 1.02f, 0, 0);
    gate_verdict_t v;
    int rc = gate_check(&srv, same, &v);
    print_message("%s\n", v.msg);
    assert_int_equal(rc, 0);
    assert_true(v.shadow);
    assert_int_equal(v.n_sampled, 200);
    assert_int_equal(v.n_items, 400);
    assert_true(v.mean_shift < 0.05);
    assert_true(v.psi < 0.25);
    /* --gate-items-per-request caps the items scored of each request */
    int cap = srv.cfg.gate_items_per_request;
    srv.cfg.gate_items_per_request = 1;
    assert_int_equal(gate_check(&srv, same, &v), 0);
    assert_int_equal(v.n_sampled, 200);
    assert_int_equal(v.n_items, 200);
    srv.cfg.gate_items_per_request = cap;

    server_model_t *x10 = make_model("ctr", 0, -1.0f, 10, 0, 0); /* weights x10 */
    assert_int_equal(gate_check(&srv, x10, &v), -EPERM);
    assert_non_null(strstr(v.msg, "PSI"));
    assert_true(v.psi > 0.25);
    assert_non_null(strstr(v.msg, "n_sampled 200"));

    server_model_t *up = make_model("ctr", 0, 1.5f, 1, 0, 0); /* bias -1 -> 1.5 */
    assert_int_equal(gate_check(&srv, up, &v), -EPERM);
    assert_non_null(strstr(v.msg, "mean prediction moved"));
    assert_true(v.mean_candidate > 1.5 * v.mean_active);

    const char *loose[] = {"--gate-max-mean-shift", "100", "--gate-max-psi", "100", NULL};
    configure(loose);
    assert_int_equal(gate_check(&srv, up, &v), 0);
    configure(NULL);

    char text[2048];
    size_t n = gate_metrics_format(text, sizeof text);
    assert_true(n > 0 && n < sizeof text);
    assert_non_null(strstr(text, "tlserve_gate_verdicts_total{result=\"refuse\"}"));
    assert_non_null(strstr(text, "tlserve_gate_seconds"));
    server_model_release(same);
    server_model_release(x10);
    server_model_release(up);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sanity_passes_a_sound_model, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sanity_refuses_nan_inf_and_large, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sanity_refuses_kind_or_width_change, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ring_wraps_skips_and_samples, setup, teardown),
        cmocka_unit_test_setup_teardown(test_psi_and_mean, setup, teardown),
        cmocka_unit_test_setup_teardown(test_large_request_kept_truncated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shadow_refuses_a_shifted_candidate, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
