/*
 * test_model_mlp.c — the DNN's served MLP replaced under scorers
 * (model/model_mlp.c: model_dnn_install_mlp).
 *
 *   - a DNN trained a little, exported and loaded; two MLPs A (the
 *     snapshot's) and B (A's weights halved) give the probe two different
 *     scores sA, sB;
 *   - two threads score the probe in a loop while the main thread installs
 *     B, A, B, ... (at least 3000 times, and until the readers scored 1000
 *     times): every score is bit for bit sA or sB (a
 *     request that read a half-copied matrix would score something else),
 *     and after the last install the score is the last MLP's;
 *   - an MLP with a NaN is refused (-ERANGE) and one of another shape
 *     (-EINVAL), the served one unchanged; model_dnn_mlp_installs counts.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include "model/dnn.h"
#include "model/model.h"
#include "model/train_impl.h"
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { NF = 6, INSTALLS = 3000 };
static const uint64_t probe_ids[NF] = {1, (1ull << 56) | 2, (2ull << 56) | 3, (3ull << 56) | 4,
                                       5, (1ull << 56) | 9};
static float sA, sB;
static atomic_bool stop;
static atomic_ulong scored, wrong;

static float score(const model_t *m, model_scratch_t *sc)
{
    codec_block_t shared = {.ids = probe_ids, .values = NULL, .n = NF};
    codec_block_t item = {.ids = probe_ids, .values = NULL, .n = 0};
    float s = NAN;
    assert_int_equal(model_score(m, &shared, &item, 1, &s, sc), 0);
    return s;
}

static void *reader(void *arg)
{
    const model_t *m = arg;
    model_scratch_t *sc;
    if (model_scratch_create(NF, &sc) != 0 || model_scratch_fit(sc, m, NF) < 0)
        abort();
    model_dnn_blas_init();
    while (!atomic_load(&stop)) {
        float s = score(m, sc);
        if (memcmp(&s, &sA, sizeof s) != 0 && memcmp(&s, &sB, sizeof s) != 0)
            atomic_fetch_add(&wrong, 1);
        atomic_fetch_add(&scored, 1);
    }
    model_scratch_destroy(sc);
    return NULL;
}

/* A copy of net's layers, owned (free with free_copy). */
static void copy_net(const dnn_net_t *net, dnn_net_t *out, float scale)
{
    *out = *net;
    for (uint32_t l = 0; l < net->n_layers; l++) {
        size_t nw = (size_t)net->width[l] * net->width[l + 1], nb = net->width[l + 1];
        float *w = malloc(nw * sizeof *w), *b = malloc(nb * sizeof *b);
        for (size_t i = 0; i < nw; i++)
            w[i] = net->W[l][i] * scale;
        for (size_t i = 0; i < nb; i++)
            b[i] = net->b[l][i] * scale;
        out->W[l] = w;
        out->b[l] = b;
    }
}

static void free_copy(dnn_net_t *n)
{
    for (uint32_t l = 0; l < n->n_layers; l++) {
        free((float *)n->W[l]);
        free((float *)n->b[l]);
    }
}

static model_t *trained_model(char *dir, size_t dir_len)
{
    train_dnn_options_t o;
    train_dnn_defaults(&o);
    o.fields = 4;
    o.dim = 4;
    o.n_hidden = 1;
    o.hidden[0] = 8;
    o.wide = true;
    o.init_stdev = 0.1;
    o.shards = 2;
    train_dnn_t *t;
    char why[160];
    if (train_dnn_create(&o, &t, why, sizeof why) != 0)
        fail_msg("train_dnn_create: %s", why);
    for (int i = 0; i < 200; i++)
        assert_int_equal(train_dnn_update(t, probe_ids, NULL, NF, (float)(i % 3 == 0), 1.0f,
                                          NULL), 0);
    snprintf(dir, dir_len, "%s/tl_model_mlp_%d", getenv("TL_TEST_TMP") ? getenv("TL_TEST_TMP") : "/tmp",
             (int)getpid());
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    store_meta_t meta = {.model_name = "dnn", .model_kind = STORE_MODEL_DNN, .version = 1};
    store_error_t err;
    if (train_dnn_export(t, dir, &meta, &err) != 0)
        fail_msg("export: %s", err.msg);
    train_dnn_destroy(t);
    model_t *m;
    if (model_load(dir, 1, &m, &err) != 0)
        fail_msg("model_load: %s", err.msg);
    return m;
}

static void test_install_under_readers(void **state)
{
    (void)state;
    char dir[512];
    model_t *m = trained_model(dir, sizeof dir);
    model_scratch_t *sc;
    assert_int_equal(model_scratch_create(NF, &sc), 0);
    assert_true(model_scratch_fit(sc, m, NF) >= 0);
    assert_int_equal(model_dnn_mlp_floats(m), 16 * 8 + 8 + 8 * 1 + 1);
    dnn_net_t a, b;
    copy_net(model_dnn_served_mlp(m), &a, 1.0f);
    copy_net(model_dnn_served_mlp(m), &b, 0.5f);
    sA = score(m, sc);
    assert_int_equal(model_dnn_install_mlp(m, &b), 0);
    sB = score(m, sc);
    assert_true(sA != sB);
    assert_int_equal(model_dnn_install_mlp(m, &a), 0);
    assert_true(memcmp(&(float){score(m, sc)}, &sA, sizeof sA) == 0);

    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, reader, m), 0);
    while (atomic_load(&scored) < 2) /* both readers running (a loaded host schedules late) */
        sched_yield();
    int installs = 0;
    while (installs < INSTALLS || atomic_load(&scored) < 1000 || installs % 2 != 0) {
        assert_int_equal(model_dnn_install_mlp(m, installs % 2 == 0 ? &b : &a), 0);
        installs++;
    }
    atomic_store(&stop, true);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    printf("test_model_mlp: %lu scores during %d installs, %lu of neither MLP\n",
           atomic_load(&scored), installs, atomic_load(&wrong));
    assert_int_equal(atomic_load(&wrong), 0);
    assert_true(atomic_load(&scored) > 0);
    assert_int_equal(model_dnn_mlp_installs(m), (uint64_t)installs + 2);
    float last = score(m, sc); /* installs even: the last install was a */
    assert_true(memcmp(&last, &sA, sizeof last) == 0);

    /* refusals leave the served MLP as it was */
    ((float *)b.W[0])[3] = NAN;
    assert_int_equal(model_dnn_install_mlp(m, &b), -ERANGE);
    dnn_net_t other = a;
    other.width[1] = 4;
    assert_int_equal(model_dnn_install_mlp(m, &other), -EINVAL);
    last = score(m, sc);
    assert_true(memcmp(&last, &sA, sizeof last) == 0);
    assert_int_equal(model_dnn_mlp_installs(m), (uint64_t)installs + 2);

    free_copy(&a);
    free_copy(&b);
    model_scratch_destroy(sc);
    model_destroy(m);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    model_dnn_blas_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_install_under_readers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
