/*
 * test_train_state.c — a trainer's optimizer state out and in
 * (model/train.h: the optimizer state, the state file), as the online
 * server's restart uses it.  For every kind and optimizer (LR FTRL,
 * Adagrad, SGD; FM Adagrad, FTRL, SGD; FFM Adagrad, SGD; the DNN):
 *
 *   - a served model (a trainer's export, loaded twice: A and B, as the
 *     crashed server and the restarted one each load it); trainer T1
 *     attached to A learns a first stream; the served rows it wrote are
 *     copied into B (what the chain of exports carries) and its state rows
 *     of every id it stepped, the bias's included, go through a state file
 *     into a fresh trainer T2 attached to B;
 *   - T2's state rows equal T1's bit for bit; then both learn the same
 *     second stream (ids old and new, whole samples and a shared block with
 *     items): every prediction made before a step is bit-identical, and
 *     afterwards every id's state row and served row are too;
 *   - the control: a trainer restarted the old way (served rows copied,
 *     state fresh) predicts differently on that stream where the optimizer
 *     has state beyond the weights, so the check above can fail;
 *   - bad files change nothing and say what was wrong: a flipped byte (the
 *     checksum), a cut file, another version, a trainer of another
 *     width or optimizer, a missing file (-ENOENT).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "model/model.h"
#include "model/train.h"
#include "train_samples.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { SAMPLES = 200, NS = 5, NI = 3, NF = NS + NI, FIELDS = 4, NEW_BASE = 1000 };
#define MAX_IDS (2 * SAMPLES * NF + 1)

struct data {
    uint64_t ids[SAMPLES][NF];
    float vals[SAMPLES][NF];
    float labels[SAMPLES];
};

/* Samples over FIELDS fields; with fresh, the last id of each is new. */
static void make_data(struct data *d, uint64_t seed, bool fresh)
{
    make_samples(&d->ids[0][0], &d->vals[0][0], d->labels, SAMPLES, NF, FIELDS, NEW_BASE, seed,
                 fresh, true);
}

struct config {
    store_model_kind_t kind;
    train_optimizer_t opt;
    bool has_state; /* state beyond the served floats: a fresh state differs */
};

static const struct config configs[] = {
    {STORE_MODEL_LR, TRAIN_FTRL, true},     {STORE_MODEL_LR, TRAIN_ADAGRAD, true},
    {STORE_MODEL_LR, TRAIN_SGD, false},     {STORE_MODEL_FM, TRAIN_ADAGRAD, true},
    {STORE_MODEL_FM, TRAIN_FTRL, true},     {STORE_MODEL_FM, TRAIN_SGD, true},
    {STORE_MODEL_FFM, TRAIN_ADAGRAD, true}, {STORE_MODEL_FFM, TRAIN_SGD, false},
    {STORE_MODEL_DNN, TRAIN_ADAGRAD, true},
};

static void options_for(const struct config *c, train_options_t *o)
{
    assert_int_equal(train_defaults(c->kind, c->opt, o), 0);
    if (c->kind == STORE_MODEL_FFM) {
        o->ffm.optimizer = c->opt;
        o->ffm.fields = FIELDS;
        o->ffm.k = 2;
    } else if (c->kind == STORE_MODEL_DNN) {
        o->dnn.fields = FIELDS;
        o->dnn.dim = 3;
        o->dnn.n_hidden = 1;
        o->dnn.hidden[0] = 8;
        o->dnn.lr_sparse = 0.1;
    } else if (c->kind == STORE_MODEL_FM) {
        o->fm.k = 3;
        o->fm.l2_v_freq = 0.5; /* FM-SGD's occurrence count matters */
    }
}

static const char *tmp_dir(void)
{
    const char *tmp = getenv("TL_TEST_TMP");
    return tmp && *tmp && strlen(tmp) <= 300 ? tmp : "/tmp";
}

/* The served model: a trainer's export after one pass over d, loaded
 * `copies` times from one directory. */
static void served_models(const train_options_t *o, const struct data *d, const char *tag,
                          model_t **m, int copies)
{
    train_t *t;
    char why[256];
    if (train_create(o, &t, why, sizeof why) != 0)
        fail_msg("create: %s", why);
    for (int i = 0; i < SAMPLES; i++) {
        codec_block_t whole = {.ids = d->ids[i], .values = d->vals[i], .n = NF};
        assert_int_equal(train_update(t, &whole, NULL, 1, &d->labels[i], NULL, NULL), 0);
    }
    char dir[400], cmd[1000];
    snprintf(dir, sizeof dir, "%s/train_state_%d_%s", tmp_dir(), (int)getpid(), tag);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && rm -rf '%s'", tmp_dir(), dir);
    assert_int_equal(system(cmd), 0);
    store_meta_t meta = {.model_name = "state", .version = 1};
    store_error_t err;
    if (train_export(t, dir, &meta, &err) != 0)
        fail_msg("export: %s", err.msg);
    for (int i = 0; i < copies; i++)
        if (model_load(dir, 1, &m[i], &err) != 0)
            fail_msg("model_load: %s", err.msg);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    train_destroy(t);
}

static train_t *attached(const train_options_t *o, model_t *m, const char *what)
{
    train_t *t;
    char why[256];
    if (train_create(o, &t, why, sizeof why) != 0)
        fail_msg("%s create: %s", what, why);
    if (train_attach_live_model(t, model_base_store(m), model_extras(m), why, sizeof why) != 0)
        fail_msg("%s attach: %s", what, why);
    return t;
}

/* Learns d: whole samples, then each sample as a shared block and an item;
 * p gets every prediction (2 SAMPLES). */
static void learn(train_t *t, const struct data *d, float *p)
{
    for (int i = 0; i < SAMPLES; i++) {
        codec_block_t w = {.ids = d->ids[i], .values = d->vals[i], .n = NF};
        assert_int_equal(train_update(t, &w, NULL, 1, &d->labels[i], NULL, &p[i]), 0);
    }
    for (int i = 0; i < SAMPLES; i++) {
        codec_block_t shared = {.ids = d->ids[i], .values = d->vals[i], .n = NS};
        codec_block_t item = {.ids = d->ids[i] + NS, .values = d->vals[i] + NS, .n = NI};
        assert_int_equal(train_update(t, &shared, &item, 1, &d->labels[i], NULL,
                                      &p[SAMPLES + i]), 0);
    }
}

/* The distinct ids of d1 and d2, the bias first. */
static size_t ids_of(const struct data *d1, const struct data *d2, uint64_t *ids)
{
    size_t n = 0;
    ids[n++] = MODEL_BIAS_ID;
    const struct data *ds[2] = {d1, d2};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < SAMPLES; i++)
            for (int j = 0; j < NF; j++) {
                uint64_t id = ds[k]->ids[i][j];
                size_t a = 0;
                while (a < n && ids[a] != id)
                    a++;
                if (a == n)
                    ids[n++] = id;
            }
    return n;
}

/* Copies the served rows of ids from one store to another (the chain). */
static void copy_served(const store_t *from, store_t *to, const uint64_t *ids, size_t n)
{
    float row[STORE_MAX_VALUE_FLOATS];
    for (size_t i = 0; i < n; i++)
        if (store_lookup(from, ids[i], row))
            assert_true(store_upsert(to, ids[i], row) >= 0);
}

/* Both trainers' state rows, and both served stores' rows, equal bit for bit. */
static void check_same(train_t *a, train_t *b, const store_t *sa, const store_t *sb,
                       const uint64_t *ids, size_t n, const char *what)
{
    uint32_t w = train_state_width(a);
    assert_int_equal(w, train_state_width(b));
    float *ra = calloc(n * w, sizeof *ra), *rb = calloc(n * w, sizeof *rb);
    uint8_t *fa = malloc(n), *fb = malloc(n);
    assert_true(ra && rb && fa && fb);
    size_t ha = train_state_get(a, ids, n, ra, fa), hb = train_state_get(b, ids, n, rb, fb);
    assert_int_equal(ha, hb);
    assert_true(ha > 1);
    assert_int_equal(fa[0], 1); /* the bias */
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(fa[i], fb[i]);
        if (fa[i] && memcmp(ra + i * w, rb + i * w, w * sizeof *ra) != 0)
            fail_msg("%s: the state rows of id %#llx differ", what, (unsigned long long)ids[i]);
    }
    uint32_t K = store_value_floats(sa);
    float x[STORE_MAX_VALUE_FLOATS], y[STORE_MAX_VALUE_FLOATS];
    for (size_t i = 0; i < n; i++) {
        int ina = store_lookup(sa, ids[i], x), inb = store_lookup(sb, ids[i], y);
        assert_int_equal(ina, inb);
        if (ina && memcmp(x, y, K * sizeof *x) != 0)
            fail_msg("%s: the served rows of id %#llx differ", what, (unsigned long long)ids[i]);
    }
    free(ra);
    free(rb);
    free(fa);
    free(fb);
}

/* Writes t's rows of ids (those it has) as a state file of version v at path. */
static void write_state(train_t *t, const uint64_t *ids, size_t n, uint64_t v, const char *dir)
{
    uint32_t w = train_state_width(t);
    float *rows = malloc(n * w * sizeof *rows);
    uint8_t *found = malloc(n);
    uint64_t *have = malloc(n * sizeof *have);
    assert_true(rows && found && have);
    train_state_get(t, ids, n, rows, found);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (found[i]) {
            have[k] = ids[i];
            memmove(rows + k * w, rows + i * w, w * sizeof *rows);
            k++;
        }
    train_state_header_t h;
    train_state_header_of(t, &h);
    h.count = k;
    h.version = v;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    assert_true(dfd >= 0);
    assert_int_equal(train_state_write_at(dfd, TRAIN_STATE_FILE, &h, have, rows), 0);
    close(dfd);
    free(rows);
    free(found);
    free(have);
}

static void test_restored_trainer_equals_the_original(void **state)
{
    (void)state;
    struct data *old = malloc(sizeof *old), *d1 = malloc(sizeof *d1), *d2 = malloc(sizeof *d2);
    uint64_t *ids = malloc(MAX_IDS * sizeof *ids);
    float *p1 = malloc(2 * SAMPLES * sizeof *p1), *p2 = malloc(2 * SAMPLES * sizeof *p2);
    assert_true(old && d1 && d2 && ids && p1 && p2);
    make_data(old, 0x2545f4914f6cdd1dULL, false);
    make_data(d1, 0x9e3779b97f4a7c15ULL, true);
    make_data(d2, 0x51afd7ed558ccd2ULL, true);
    size_t n = ids_of(d1, d2, ids);
    char dir[400], path[500], cmd[1000];
    snprintf(dir, sizeof dir, "%s/train_state_%d_files", tmp_dir(), (int)getpid());
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    assert_int_equal(system(cmd), 0);
    snprintf(path, sizeof path, "%s/" TRAIN_STATE_FILE, dir);
    for (size_t ci = 0; ci < sizeof configs / sizeof *configs; ci++) {
        const struct config *c = &configs[ci];
        char what[64];
        snprintf(what, sizeof what, "%s_%s", store_model_kind_name(c->kind),
                 train_optimizer_name(c->opt));
        train_options_t o;
        options_for(c, &o);
        model_t *m[3];
        served_models(&o, old, what, m, 3);
        train_t *t1 = attached(&o, m[0], what);
        learn(t1, d1, p1);
        /* the export: served rows into B and C, T1's state through a file into T2 */
        copy_served(model_base_store(m[0]), model_base_store(m[1]), ids, n);
        copy_served(model_base_store(m[0]), model_base_store(m[2]), ids, n);
        write_state(t1, ids, n, 7, dir);
        train_t *t2 = attached(&o, m[1], what), *t3 = attached(&o, m[2], what);
        train_state_error_t err;
        if (train_state_load(t2, path, 7, true, &err) != 0)
            fail_msg("%s: load: %s", what, err.msg);
        check_same(t1, t2, model_base_store(m[0]), model_base_store(m[1]), ids, n, what);

        learn(t1, d2, p1);
        learn(t2, d2, p2);
        for (int i = 0; i < 2 * SAMPLES; i++)
            if (memcmp(&p1[i], &p2[i], sizeof *p1) != 0)
                fail_msg("%s: prediction %d: original %.9g, restored %.9g", what, i, p1[i], p2[i]);
        check_same(t1, t2, model_base_store(m[0]), model_base_store(m[1]), ids, n, what);

        /* the control: fresh state over the same served rows */
        learn(t3, d2, p2);
        bool differ = false;
        for (int i = 0; i < 2 * SAMPLES; i++)
            differ |= memcmp(&p1[i], &p2[i], sizeof *p1) != 0;
        if (differ != c->has_state)
            fail_msg("%s: a fresh state %s the original", what,
                     differ ? "differs from" : "predicts as");
        train_destroy(t1);
        train_destroy(t2);
        train_destroy(t3);
        for (int i = 0; i < 3; i++)
            model_destroy(m[i]);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    free(old);
    free(d1);
    free(d2);
    free(ids);
    free(p1);
    free(p2);
}

static size_t read_all(const char *path, uint8_t *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

static void write_all(const char *path, const uint8_t *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, len, f), len);
    fclose(f);
}

/* A bad file is refused naming what was wrong, and puts nothing. */
static void expect_refused(train_t *t, const char *path, uint64_t version, const char *needle)
{
    train_state_error_t err = {{0}};
    uint64_t id = 5;
    float row[STORE_MAX_VALUE_FLOATS];
    uint8_t found;
    int rc = train_state_load(t, path, version, true, &err);
    if (rc != -EBADMSG || !strstr(err.msg, needle))
        fail_msg("expected -EBADMSG naming '%s', got %d: %s", needle, rc, err.msg);
    assert_int_equal(train_state_get(t, &id, 1, row, &found), 0);
}

static void test_bad_files_are_refused(void **state)
{
    (void)state;
    char dir[400], path[500], cmd[1000];
    snprintf(dir, sizeof dir, "%s/train_state_%d_bad", tmp_dir(), (int)getpid());
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    assert_int_equal(system(cmd), 0);
    snprintf(path, sizeof path, "%s/" TRAIN_STATE_FILE, dir);
    train_options_t o;
    char why[200];
    assert_int_equal(train_defaults(STORE_MODEL_LR, TRAIN_FTRL, &o), 0);
    train_t *t, *ada;
    assert_int_equal(train_create(&o, &t, why, sizeof why), 0);
    assert_int_equal(train_defaults(STORE_MODEL_LR, TRAIN_ADAGRAD, &o), 0);
    assert_int_equal(train_create(&o, &ada, why, sizeof why), 0);
    train_state_error_t err;
    assert_int_equal(train_state_load(t, path, 3, true, &err), -ENOENT);

    /* a good file of one row, id 5 */
    train_state_header_t h;
    train_state_header_of(t, &h);
    assert_int_equal(h.width, 3);
    h.count = 1;
    h.version = 3;
    uint64_t id = 5;
    float row[3] = {-0.5f, 2.0f, 0.25f}, back[3];
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    assert_true(dfd >= 0);
    assert_int_equal(train_state_write_at(dfd, TRAIN_STATE_FILE, &h, &id, row), 0);
    uint8_t good[256], b[256];
    size_t len = read_all(path, good, sizeof good);
    assert_int_equal(len, 48 + 8 + 12);

    expect_refused(t, path, 4, "version");
    expect_refused(ada, path, 3, "optimizer");
    memcpy(b, good, len);
    b[44] ^= 1; /* a float's bit: the checksum */
    write_all(path, b, len);
    expect_refused(t, path, 3, "checksum");
    write_all(path, good, len - 5); /* cut */
    expect_refused(t, path, 3, "checksum");
    write_all(path, good, 20);
    expect_refused(t, path, 3, "header");
    memcpy(b, good, len);
    b[0] = 'X';
    write_all(path, b, len);
    expect_refused(t, path, 3, "magic");

    /* the good one puts the row, and the parser alone reads it back */
    write_all(path, good, len);
    assert_int_equal(train_state_load(t, path, 3, true, &err), 0);
    uint8_t found = 0;
    assert_int_equal(train_state_get(t, &id, 1, back, &found), 1);
    assert_memory_equal(back, row, sizeof row);
    train_state_header_t got;
    assert_int_equal(train_state_parse(good, len, NULL, &got, NULL, NULL, &err), 0);
    assert_int_equal(got.count, 1);
    assert_int_equal(got.version, 3);
    /* a non-finite value is refused by put */
    float inf[3] = {INFINITY, 0, 0};
    assert_int_equal(train_state_put(t, &id, 1, inf), -ERANGE);
    close(dfd);
    train_destroy(t);
    train_destroy(ada);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_restored_trainer_equals_the_original),
        cmocka_unit_test(test_bad_files_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
