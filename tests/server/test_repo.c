/*
 * test_repo.c — server/repo.c alone: which version the policy picks, which
 * models a repository serves (each with its own policy state), and the
 * chain loader (a full version and two
 * deltas rebuilt into the exact model the writer meant, a gap and a model
 * of another name refused with their reasons).  No threads, no sockets.
 */
#define _GNU_SOURCE /* repo.c is included: pipe2 */
/* cmocka needs these first, in this order */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include "server/repo.c" /* static helpers: is_refused; repo__add_refusal */
#include "server/repo_admin.c"
#include "server/repo_chain.c"
#include "store/delta.h"
#include "tests/test_fs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char base[512];

static const char *tmpdir(void)
{
    const char *t = getenv("TL_TEST_TMP");
    return t && *t ? t : "/tmp";
}

static int refuse_odd(void *arg, uint64_t v)
{
    (void)arg;
    return (int)(v & 1);
}

static void test_pick_version(void **state)
{
    (void)state;
    const uint64_t v[] = {1, 2, 3, 7, 9};
    assert_int_equal(repo_pick_version(v, 5, NULL, NULL), 9);
    assert_int_equal(repo_pick_version(v, 5, refuse_odd, NULL), 2);
    assert_int_equal(repo_pick_version(v, 0, NULL, NULL), 0);
    const uint64_t odd[] = {1, 3};
    assert_int_equal(repo_pick_version(odd, 2, refuse_odd, NULL), 0);
}

/* Refusals: listed ascending, replaced in place, and past REPO_REFUSED_MAX
 * the lowest leaves the list but stays refused (else, with every higher
 * version refused, it would be loaded and refused forever). */
static struct repo_model ma, mb; /* two models' states (about 140 KiB each) */

static void test_refusals(void **state)
{
    (void)state;
    struct repo_model *r = &ma;
    memset(r, 0, sizeof *r);
    repo__add_refusal(r, 5, 1, "five");
    repo__add_refusal(r, 3, 1, "three");
    repo__add_refusal(r, 5, 2, "five again");
    assert_int_equal(r->n_refused, 2);
    assert_int_equal(r->refused[0].version, 3);
    assert_string_equal(r->refused[1].error, "five again");
    assert_true(is_refused(r, 3) && is_refused(r, 5) && !is_refused(r, 4));
    for (uint64_t v = 10; v < 10 + REPO_REFUSED_MAX; v++)
        repo__add_refusal(r, v, 1, "many");
    assert_int_equal(r->n_refused, REPO_REFUSED_MAX);
    assert_int_equal(r->refused[0].version, 10);
    assert_true(is_refused(r, 3) && is_refused(r, 5) && !is_refused(r, 7));
    assert_false(is_refused(r, 10 + REPO_REFUSED_MAX));
    const uint64_t v[] = {3, 5, 10, 11};
    assert_int_equal(repo_pick_version(v, 4, is_refused, r), 0);
    /* Another model's state is untouched by all of it. */
    memset(&mb, 0, sizeof mb);
    assert_false(is_refused(&mb, 3) || is_refused(&mb, 5) || is_refused(&mb, 11));
    assert_int_equal(repo_pick_version(v, 4, is_refused, &mb), 11);
    memset(r, 0, sizeof *r);
}

static void test_list_models(void **state)
{
    (void)state;
    server_config_t c;
    memset(&c, 0, sizeof c);
    char models[SERVER_MODELS_MAX][64], why[2400], p[1100];
    snprintf(c.model_repo, sizeof c.model_repo, "%s/pick", base);
    test_mkdir_p(c.model_repo);
    assert_int_equal(repo_list_models(&c, models, SERVER_MODELS_MAX, why, sizeof why), -1);
    assert_non_null(strstr(why, "no model"));
    snprintf(p, sizeof p, "%s/.tmp-x-1", c.model_repo); /* ignored */
    test_mkdir_p(p);
    snprintf(p, sizeof p, "%s/beta", c.model_repo);
    test_mkdir_p(p);
    assert_int_equal(repo_list_models(&c, models, SERVER_MODELS_MAX, why, sizeof why), 1);
    assert_string_equal(models[0], "beta");
    snprintf(p, sizeof p, "%s/alpha", c.model_repo);
    test_mkdir_p(p);
    /* Several: all of them, sorted. */
    assert_int_equal(repo_list_models(&c, models, SERVER_MODELS_MAX, why, sizeof why), 2);
    assert_string_equal(models[0], "alpha");
    assert_string_equal(models[1], "beta");
    /* More than the server serves: refused, naming the count and the way out. */
    assert_int_equal(repo_list_models(&c, models, 1, why, sizeof why), -1);
    assert_non_null(strstr(why, "2 models"));
    assert_non_null(strstr(why, "--model-name"));
    snprintf(c.model_name, sizeof c.model_name, "beta");
    assert_int_equal(repo_list_models(&c, models, SERVER_MODELS_MAX, why, sizeof why), 1);
    assert_string_equal(models[0], "beta");
    snprintf(c.model_name, sizeof c.model_name, "%s", "");
    snprintf(c.model_repo, sizeof c.model_repo, "%s/missing", base);
    assert_int_equal(repo_list_models(&c, models, SERVER_MODELS_MAX, why, sizeof why), -1);
    assert_non_null(strstr(why, "cannot read"));
}

/* The per-model states: found by name only while running, added once,
 * at most SERVER_MODELS_MAX; the admin's calls act on their model only. */
static void test_models_state(void **state)
{
    (void)state;
    char why[2400];
    snprintf(R.dir, sizeof R.dir, "%s/pick", base);
    R.n_models = 0;
    assert_int_equal(repo__add_model("alpha", why, sizeof why), 0);
    assert_int_equal(repo__add_model("beta", why, sizeof why), 0);
    assert_int_equal(repo__add_model("alpha", why, sizeof why), -EEXIST);
    assert_null(repo__find("alpha")); /* not running */
    R.running = true;
    struct repo_model *a = repo__find("alpha"), *b = repo__find("beta");
    assert_non_null(a);
    assert_non_null(b);
    assert_ptr_not_equal(a, b);
    assert_null(repo__find("gamma"));
    assert_null(repo__find(NULL));
    char want[1200];
    snprintf(want, sizeof want, "%s/beta", R.dir);
    assert_string_equal(b->model_dir, want);
    assert_int_equal(repo_rolled_back("beta", 4, 3), 0);
    assert_int_equal(repo_rolled_back("gamma", 4, 3), -ENOENT);
    assert_true(is_refused(b, 4));
    assert_false(is_refused(a, 4));
    b->pinned = 4;
    assert_int_equal(repo_rolled_back("beta", 4, 3), 0);
    assert_int_equal(b->pinned, 3); /* the pin follows the rollback */
    assert_int_equal(a->pinned, 0);
    a->loading = 7;
    uint64_t v = 0;
    assert_int_equal(repo_loading("alpha", &v), 1);
    assert_int_equal(v, 7);
    assert_int_equal(repo_loading("beta", &v), 0);
    assert_int_equal(repo_unpin("gamma"), -ENODEV);
    assert_int_equal(repo_unpin("beta"), 0);
    assert_int_equal(b->pinned, 0);
    repo_status_t *rs = malloc(sizeof *rs);
    assert_non_null(rs);
    assert_int_equal(repo_get_status("beta", rs), 0);
    assert_true(rs->enabled);
    assert_string_equal(rs->model, "beta");
    assert_int_equal(rs->n_rolled_back, 1);
    assert_int_equal(rs->loading, 0);
    assert_int_equal(repo_get_status(NULL, rs), 0); /* the first model */
    assert_string_equal(rs->model, "alpha");
    assert_int_equal(rs->loading, 7);
    assert_int_equal(rs->n_rolled_back, 0);
    assert_int_equal(repo_get_status("gamma", rs), -ENOENT);
    assert_false(rs->enabled);
    char names[SERVER_MODELS_MAX][64];
    assert_int_equal(repo_models(names, SERVER_MODELS_MAX), 2);
    assert_string_equal(names[1], "beta");
    for (unsigned i = 2; i < SERVER_MODELS_MAX; i++) {
        char n[16];
        snprintf(n, sizeof n, "m%u", i);
        assert_int_equal(repo__add_model(n, why, sizeof why), 0);
    }
    assert_int_equal(repo__add_model("one-too-many", why, sizeof why), -ENOSPC);
    assert_int_equal(repo_models(names, SERVER_MODELS_MAX), SERVER_MODELS_MAX);
    R.running = false;
    assert_int_equal(repo_get_status(NULL, rs), -ENOENT);
    assert_int_equal(repo_models(names, SERVER_MODELS_MAX), 0);
    free(rs);
    R.n_models = 0;
}

static float weight(uint64_t k, uint64_t version)
{
    return (float)((k * 7 + version * 13) % 101) / 100.0f - 0.5f;
}

/* <base>/chain/<name>/1 full (keys 1..1000), 2 a delta (keys 1..100
 * rewritten, 901..1000 deleted, 2001..2050 added), 3 a delta (key 1
 * rewritten, 2001 deleted). */
static void write_chain(const char *model_dir, const char *name)
{
    store_options_t o = {.value_floats = 1, .shards = 4};
    store_t *s;
    assert_int_equal(store_create(&o, &s), 0);
    for (uint64_t k = 1; k <= 1000; k++) {
        float w = weight(k, 1);
        assert_int_equal(store_upsert(s, k, &w), 1);
    }
    store_meta_t meta = {.model_kind = STORE_MODEL_LR, .version = 1};
    snprintf(meta.model_name, sizeof meta.model_name, "%s", name);
    char dir[800];
    store_error_t err;
    snprintf(dir, sizeof dir, "%s/1", model_dir);
    assert_int_equal(store_snapshot_write(s, dir, &meta, &err), 0);
    store_delta_layout_t layout;
    store_delta_layout_of(s, &meta, &layout);
    store_destroy(s);

    store_delta_writer_t *w;
    snprintf(dir, sizeof dir, "%s/2", model_dir);
    assert_int_equal(store_delta_begin(dir, &layout, 1, 2, "test", &w, &err), 0);
    for (uint64_t k = 1; k <= 100; k++) {
        float v = weight(k, 2);
        assert_int_equal(store_delta_put(w, k, &v), 0);
    }
    for (uint64_t k = 901; k <= 1000; k++)
        assert_int_equal(store_delta_del(w, k), 0);
    for (uint64_t k = 2001; k <= 2050; k++) {
        float v = weight(k, 2);
        assert_int_equal(store_delta_put(w, k, &v), 0);
    }
    assert_int_equal(store_delta_commit(w, &err), 0);

    snprintf(dir, sizeof dir, "%s/3", model_dir);
    assert_int_equal(store_delta_begin(dir, &layout, 2, 3, "test", &w, &err), 0);
    float v = weight(1, 3);
    assert_int_equal(store_delta_put(w, 1, &v), 0);
    assert_int_equal(store_delta_del(w, 2001), 0);
    assert_int_equal(store_delta_commit(w, &err), 0);
}

static void test_open_chain(void **state)
{
    (void)state;
    server_t srv;
    memset(&srv, 0, sizeof srv);
    srv.cfg.load_threads = 1;
    char model_dir[700];
    snprintf(model_dir, sizeof model_dir, "%s/chain/cm", base);
    test_mkdir_p(model_dir);
    write_chain(model_dir, "cm");

    server_model_t *sm = NULL;
    store_error_t err;
    assert_int_equal(repo_open_version(&srv, model_dir, 3, &sm, &err), 0);
    const store_t *s = model_store(sm->model);
    assert_int_equal(model_meta(sm->model)->version, 3);
    assert_int_equal(store_count(s), 1000 - 100 + 50 - 1);
    float got;
    assert_int_equal(store_lookup(s, 1, &got), 1);
    assert_true(got == weight(1, 3));
    assert_int_equal(store_lookup(s, 50, &got), 1);
    assert_true(got == weight(50, 2));
    assert_int_equal(store_lookup(s, 500, &got), 1);
    assert_true(got == weight(500, 1));
    assert_int_equal(store_lookup(s, 950, &got), 0);
    assert_int_equal(store_lookup(s, 2001, &got), 0);
    assert_int_equal(store_lookup(s, 2002, &got), 1);
    assert_true(got == weight(2002, 2));
    server_model_release(sm);

    /* A full version alone. */
    assert_int_equal(repo_open_version(&srv, model_dir, 1, &sm, &err), 0);
    assert_int_equal(store_count(model_store(sm->model)), 1000);
    server_model_release(sm);

    /* A gap: version 2 gone, 3 names it. */
    char from[800], to[800];
    snprintf(from, sizeof from, "%s/2", model_dir);
    snprintf(to, sizeof to, "%s/chain/away-2", base);
    assert_int_equal(rename(from, to), 0);
    sm = NULL;
    assert_true(repo_open_version(&srv, model_dir, 3, &sm, &err) < 0);
    assert_null(sm);
    assert_non_null(strstr(err.msg, "missing"));
    assert_int_equal(rename(to, from), 0);

    /* The model directory's name must be the manifests' model. */
    snprintf(to, sizeof to, "%s/chain/other", base);
    assert_int_equal(rename(model_dir, to), 0);
    assert_true(repo_open_version(&srv, to, 3, &sm, &err) < 0);
    assert_null(sm);
    if (!strstr(err.msg, "holds model 'cm', not 'other'"))
        fail_msg("err: %s", err.msg);
}

/* The registry's standby list (model_registry.c): versions kept after a
 * swap, up to keep_versions, newest first; rollback and activation of a
 * kept version are pointer swaps; what falls off the list is retired. */
static size_t standby_versions(server_t *srv, uint64_t *v)
{
    server_kept_t k[SERVER_KEEP_VERSIONS_MAX];
    size_t n = server_model_standby(srv, k, SERVER_KEEP_VERSIONS_MAX);
    for (size_t i = 0; i < n; i++)
        v[i] = k[i].version;
    return n;
}

static uint64_t active_version_of(server_t *srv)
{
    server_model_t *sm = server_model_acquire(srv);
    uint64_t v = sm ? model_meta(sm->model)->version : 0;
    server_model_release(sm);
    return v;
}

static void test_standby_and_rollback(void **state)
{
    (void)state;
    server_t srv;
    memset(&srv, 0, sizeof srv);
    srv.cfg.load_threads = 1;
    srv.cfg.keep_versions = 2;
    atomic_init(&srv.models[0].active, NULL);
    atomic_init(&srv.nmodels, 0);
    char model_dir[700];
    snprintf(model_dir, sizeof model_dir, "%s/standby/sb", base);
    test_mkdir_p(model_dir);
    write_chain(model_dir, "sb");
    server_model_t *h[4] = {0};
    store_error_t err;
    for (int v = 1; v <= 3; v++)
        assert_int_equal(repo_open_version(&srv, model_dir, (uint64_t)v, &h[v], &err), 0);

    uint64_t sb[SERVER_KEEP_VERSIONS_MAX], from = 0, to = 0;
    server_model_retire(server_model_swap(&srv, h[1]));
    assert_int_equal(standby_versions(&srv, sb), 0);
    server_model_retire(server_model_swap(&srv, h[2]));
    server_model_retire(server_model_swap(&srv, h[3]));
    assert_int_equal(standby_versions(&srv, sb), 2);
    assert_int_equal(sb[0], 2);
    assert_int_equal(sb[1], 1);

    assert_int_equal(server_model_rollback(&srv, "other", &from, &to), -ENOENT);
    assert_int_equal(active_version_of(&srv), 3);
    assert_int_equal(server_model_rollback(&srv, "sb", &from, &to), 0);
    assert_int_equal(from, 3);
    assert_int_equal(to, 2);
    assert_int_equal(active_version_of(&srv), 2);
    assert_int_equal(standby_versions(&srv, sb), 1); /* 3 was rolled back: not kept */
    assert_int_equal(sb[0], 1);

    assert_int_equal(server_model_activate_kept(&srv, "sb", 3, &from), -ESRCH);
    assert_int_equal(server_model_activate_kept(&srv, "sb", 1, &from), 0);
    assert_int_equal(from, 2);
    assert_int_equal(active_version_of(&srv), 1);
    assert_int_equal(standby_versions(&srv, sb), 1);
    assert_int_equal(sb[0], 2);
    assert_int_equal(server_model_activate_kept(&srv, "sb", 1, &from), 0); /* already active */
    assert_int_equal(from, 1);
    assert_int_equal(active_version_of(&srv), 1);

    assert_int_equal(server_model_rollback(&srv, "sb", &from, &to), 0);
    assert_int_equal(active_version_of(&srv), 2);
    assert_int_equal(server_model_rollback(&srv, "sb", &from, &to), -ESRCH);
    assert_int_equal(active_version_of(&srv), 2);

    /* keep_versions 1: the older standby is retired when a newer one comes. */
    srv.cfg.keep_versions = 1;
    assert_int_equal(repo_open_version(&srv, model_dir, 3, &h[3], &err), 0);
    server_model_retire(server_model_swap(&srv, h[3]));
    assert_int_equal(repo_open_version(&srv, model_dir, 1, &h[1], &err), 0);
    server_model_retire(server_model_swap(&srv, h[1]));
    assert_int_equal(standby_versions(&srv, sb), 1);
    assert_int_equal(sb[0], 3);
    /* The same version loaded again is not kept twice. */
    assert_int_equal(repo_open_version(&srv, model_dir, 3, &h[3], &err), 0);
    server_model_retire(server_model_swap(&srv, h[3]));
    assert_int_equal(standby_versions(&srv, sb), 1);
    assert_int_equal(sb[0], 1);

    /* keep_versions 0: nothing kept. */
    srv.cfg.keep_versions = 0;
    server_model_drop_standby(&srv);
    assert_int_equal(repo_open_version(&srv, model_dir, 2, &h[2], &err), 0);
    server_model_retire(server_model_swap(&srv, h[2]));
    assert_int_equal(standby_versions(&srv, sb), 0);
    server_model_release(atomic_exchange(&srv.models[0].active, NULL));
    usleep(100000); /* the rollbacks' retire threads */
}

/* Rolled-back versions: ascending, refused by the policy, the lowest
 * forgotten past REPO_ROLLED_BACK_MAX. */
static void test_rolled_back(void **state)
{
    (void)state;
    struct repo_model *r = &ma;
    memset(r, 0, sizeof *r);
    assert_int_equal(repo__add_rolled_back(r, 5), 0);
    assert_int_equal(repo__add_rolled_back(r, 3), 0);
    assert_int_equal(repo__add_rolled_back(r, 5), 0); /* once */
    assert_int_equal(r->n_rolled_back, 2);
    assert_int_equal(r->rolled_back[0], 3);
    assert_true(is_refused(r, 3));
    assert_true(is_refused(r, 5));
    assert_false(is_refused(r, 4));
    const uint64_t v[] = {1, 3, 4, 5};
    assert_int_equal(repo_pick_version(v, 4, is_refused, r), 4);
    for (uint64_t k = 10; k < 10 + REPO_ROLLED_BACK_MAX - 2; k++)
        assert_int_equal(repo__add_rolled_back(r, k), 0);
    assert_int_equal(repo__add_rolled_back(r, 100), 1);
    assert_int_equal(r->n_rolled_back, REPO_ROLLED_BACK_MAX);
    assert_false(is_refused(r, 3)); /* the lowest went */
    assert_true(is_refused(r, 100));
    repo__forget_rolled_back(r, 100);
    assert_false(is_refused(r, 100));
    memset(r, 0, sizeof *r);
}

/* The marks a restart keeps (repo_persist.c): a rollback, an admin's and
 * the gate's refusals and a pin are in the model's marks file once made,
 * and a model listed again starts with them; a load's refusal for bad
 * files is not kept; no marks, no file; a damaged file refuses the model,
 * naming the file and the line. */
static void test_marks_kept(void **state)
{
    (void)state;
    char why[2400], dir[1100], path[1200];
    snprintf(R.dir, sizeof R.dir, "%s/marks", base);
    snprintf(dir, sizeof dir, "%s/ctr", R.dir);
    snprintf(path, sizeof path, "%s/.tlserve-marks", dir);
    test_mkdir_p(dir);
    R.marks_dir[0] = '\0';
    R.n_models = 0;
    assert_int_equal(repo__add_model("ctr", why, sizeof why), 0);
    R.running = true;
    struct repo_model *r = repo__find("ctr");
    assert_non_null(r);
    assert_int_equal(repo_rolled_back("ctr", 5, 4), 0);
    assert_int_equal(access(path, F_OK), 0); /* on disk once answered */
    assert_int_equal(repo_refuse("ctr", 7, "off in the A/B"), 0);
    pthread_mutex_lock(&R.lock);
    repo__add_refusal(r, 9, 0xabcdef, "cannot load version 9: CORRUPT"); /* not kept */
    repo__add_refusal(r, 8, 0x1234, "version 8 refused by the gate: PSI 0.4");
    r->refused[1].by_gate = true; /* 7 admin, 8 gate, 9 files */
    repo__add_refusal(r, 11, 0x5678, "delta version 11 extends version 6, which is neither ...");
    r->refused[3].by_lineage = true; /* and 11 lineage */
    r->pinned = 4;
    r->marks_dirty = true;
    pthread_mutex_unlock(&R.lock);
    repo__marks_flush();
    assert_false(r->marks_dirty);
    assert_false(r->marks_failed);

    R.n_models = 0; /* the restart: the model listed again */
    assert_int_equal(repo__add_model("ctr", why, sizeof why), 0);
    r = repo__find("ctr");
    assert_int_equal(r->pinned, 4);
    assert_true(r->pin_restored);
    assert_int_equal(r->n_rolled_back, 1);
    assert_int_equal(r->rolled_back[0], 5);
    assert_int_equal(r->n_refused, 3);
    assert_int_equal(r->refused[0].version, 7);
    assert_true(r->refused[0].by_admin);
    assert_string_equal(r->refused[0].error, "refused by admin: off in the A/B");
    assert_int_equal(r->refused[1].version, 8);
    assert_true(r->refused[1].by_gate);
    assert_false(r->refused[1].by_lineage);
    assert_int_equal(r->refused_sig[1], 0x1234);
    assert_int_equal(r->refused[2].version, 11);
    assert_true(r->refused[2].by_lineage);
    assert_false(r->refused[2].by_gate || r->refused[2].by_admin);
    assert_int_equal(r->refused_sig[2], 0x5678);
    assert_true(is_refused(r, 5) && is_refused(r, 7) && is_refused(r, 8) && is_refused(r, 11));
    assert_false(is_refused(r, 9));

    /* Activating and unpinning clears them: no marks, no file. */
    pthread_mutex_lock(&R.lock);
    r->n_refused = 0;
    r->n_rolled_back = 0;
    pthread_mutex_unlock(&R.lock);
    assert_int_equal(repo_unpin("ctr"), 0);
    assert_int_equal(access(path, F_OK), -1);

    /* A damaged file: the model is not added, the file and line named. */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("tlserve-marks 1 ctr\nrolled_back 5\nrolled_back 3\nend 2\n", f);
    fclose(f);
    R.n_models = 0;
    assert_int_equal(repo__add_model("ctr", why, sizeof why), -EINVAL);
    assert_non_null(strstr(why, path));
    assert_non_null(strstr(why, "line 3: rolled-back versions not ascending"));
    assert_int_equal(R.n_models, 0);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("tlserve-marks 1 ctr\npinned 4\n", f); /* cut short */
    fclose(f);
    assert_int_equal(repo__add_model("ctr", why, sizeof why), -EINVAL);
    assert_non_null(strstr(why, "no end line"));
    unlink(path);
    R.running = false;
    R.n_models = 0;
}

/* A marks file that is not a regular file (a FIFO left in the model's
 * directory) refuses the model naming it, rather than blocking the start
 * (and R.lock) in open() forever: SIGALRM fails the test if it blocks. */
static void test_marks_not_a_file(void **state)
{
    (void)state;
    char why[2400], dir[1100], path[1200];
    snprintf(R.dir, sizeof R.dir, "%s/marks_fifo", base);
    snprintf(dir, sizeof dir, "%s/ctr", R.dir);
    snprintf(path, sizeof path, "%s/.tlserve-marks", dir);
    test_mkdir_p(dir);
    R.marks_dir[0] = '\0';
    R.n_models = 0;
    assert_int_equal(mkfifo(path, 0644), 0);
    alarm(10);
    assert_int_equal(repo__add_model("ctr", why, sizeof why), -EINVAL);
    alarm(0);
    assert_non_null(strstr(why, path));
    assert_non_null(strstr(why, "not a regular file"));
    assert_int_equal(R.n_models, 0);
    unlink(path);
}

int main(void)
{
    snprintf(base, sizeof base, "%s/test_repo_%d", tmpdir(), (int)getpid());
    test_rm_rf(base);
    test_mkdir_p(base);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pick_version),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_list_models),
        cmocka_unit_test(test_models_state),
        cmocka_unit_test(test_open_chain),
        cmocka_unit_test(test_standby_and_rollback),
        cmocka_unit_test(test_rolled_back),
        cmocka_unit_test(test_marks_kept),
        cmocka_unit_test(test_marks_not_a_file),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    test_rm_rf(base);
    return rc;
}
