/*
 * test_delta_repo.c — delta versions in a repository (store/delta.h):
 * chains (links, a gap, a cycle, a foreign parent, a misnamed directory),
 * listings that skip temporaries, and kill -9 of a writer at every step of
 * its commit and at random times: the version is either absent or whole,
 * and whatever else is left is a ".tmp-*" directory that readers ignore.
 * store_snapshot_publish (a full version with a producer and a side file)
 * likewise: read back, refused over an existing version, and killed at
 * random times.
 *
 * Scratch directories go under $TL_TEST_TMP (created when missing).
 */
#define _GNU_SOURCE

#include "tests/store/delta_testutil.h"

#include <signal.h>
#include <sys/wait.h>

static void test_chain(void **state)
{
    (void)state;
    char root[PATH_MAX], p[PATH_MAX];
    scratch_dir(root);
    store_t *a = make_store(100, 0, STORE_DTYPE_F32, 0x5);
    store_meta_t ma = meta_of("ch", 1);
    store_error_t err;
    path2(p, root, "1");
    assert_int_equal(store_snapshot_write(a, p, &ma, &err), 0);
    store_delta_layout_t l;
    store_delta_layout_of(a, &ma, &l);
    path2(p, root, "2");
    write_delta(p, &l, 1, 2, 1, 10, 0, 0);
    path2(p, root, "3");
    write_delta(p, &l, 2, 3, 1, 10, 50, 60);
    store_chain_t *ch = malloc(sizeof *ch);
    assert_int_equal(store_version_chain(root, 3, ch, &err), 0);
    assert_int_equal(ch->n, 3);
    assert_int_equal(ch->versions[0], 1);
    assert_int_equal(ch->versions[1], 2);
    assert_int_equal(ch->versions[2], 3);
    assert_int_equal(store_version_chain(root, 1, ch, &err), 0);
    assert_int_equal(ch->n, 1);

    /* a gap: 5's parent 4 is missing */
    path2(p, root, "5");
    write_delta(p, &l, 4, 5, 1, 10, 0, 0);
    expect_err(store_version_chain(root, 5, ch, &err), &err, STORE_E_NO_MANIFEST,
               "delta 5 names parent 4, which is missing (a gap in the chain)");
    /* a cycle: 7 -> 6 -> 7 */
    path2(p, root, "6");
    write_delta(p, &l, 7, 6, 1, 10, 0, 0);
    path2(p, root, "7");
    write_delta(p, &l, 6, 7, 1, 10, 0, 0);
    expect_err(store_version_chain(root, 7, ch, &err), &err, STORE_E_MISMATCH, "a cycle");
    /* a foreign parent: other K */
    store_delta_layout_t l2 = l;
    l2.value_floats = 2;
    path2(p, root, "8");
    write_delta(p, &l2, 3, 8, 1, 10, 0, 0);
    expect_err(store_version_chain(root, 8, ch, &err), &err, STORE_E_MISMATCH,
               "delta 8 names parent 3, a foreign version: K 2 vs 3");
    /* a directory that holds another version */
    char q[PATH_MAX];
    path2(p, root, "3");
    path2(q, root, "30");
    assert_int_equal(rename(p, q), 0);
    path2(p, root, "31");
    write_delta(p, &l, 30, 31, 1, 10, 0, 0);
    expect_err(store_version_chain(root, 31, ch, &err), &err, STORE_E_MISMATCH,
               "holds version 3, not 30");
    /* the version asked for is missing */
    expect_err(store_version_chain(root, 99, ch, &err), &err, STORE_E_NO_MANIFEST, "version 99");

    /* listings skip temporaries and other names */
    path2(p, root, ".tmp-40-123");
    test_mkdir_p(p);
    path2(p, root, "007");
    test_mkdir_p(p);
    path2(p, root, "notes");
    test_mkdir_p(p);
    uint64_t vs[16];
    long n = store_version_list(root, vs, 16);
    assert_int_equal(n, 8); /* 1 2 5 6 7 8 30 31 */
    assert_int_equal(vs[0], 1);
    assert_int_equal(vs[7], 31);
    assert_int_equal(store_version_list(root, vs, 2), 8);
    assert_true(store_version_is_temp(".tmp-40-123"));
    assert_false(store_version_is_temp("40"));
    uint64_t v = 0;
    assert_true(store_version_parse("9223372036854775807", &v)); /* 2^63-1, a manifest's most */
    assert_true(v == (uint64_t)INT64_MAX);
    assert_false(store_version_parse("9223372036854775808", &v));
    assert_false(store_version_parse("18446744073709551615", &v));
    assert_false(store_version_parse("18446744073709551616", &v));
    assert_false(store_version_parse("0", &v));
    assert_false(store_version_parse("", &v));
    assert_false(store_version_parse("12a", &v));
    free(ch);
    store_destroy(a);
    test_rm_rf(root);
}

/* ---- kill -9 ------------------------------------------------------------- */

#define KILL_UPSERTS 30000

/* In a child: writes the delta, killed at step `at` (0: never), or after
 * `delay_us` by the parent. */
static void kill_child(const char *dir, int at)
{
    store__delta_kill_at = at;
    store_delta_layout_t l;
    layout_for(&l, "kill", K, SHARDS);
    store_delta_writer_t *w = NULL;
    if (store_delta_begin(dir, &l, 1, 2, "kill test", &w, NULL) != 0)
        _exit(3);
    float v[K];
    for (uint64_t k = 1; k <= KILL_UPSERTS; k++) {
        value_of(k, 1, v);
        if (store_delta_put(w, k, v) != 0)
            _exit(4);
    }
    for (uint64_t k = KILL_UPSERTS + 1; k <= KILL_UPSERTS + 500; k++)
        if (store_delta_del(w, k) != 0)
            _exit(4);
    _exit(store_delta_commit(w, NULL) == 0 ? 0 : 5);
}

/* The version dir is absent or whole; anything else in root is a
 * temporary.  Returns 1 when the version exists. */
static int check_after_kill(const char *root, const char *dir)
{
    struct stat st;
    int exists = stat(dir, &st) == 0;
    if (exists) {
        store_delta_t *d = NULL;
        store_error_t err;
        int rc = store_delta_open(dir, &d, &err);
        if (rc != 0)
            print_error("a killed writer left a bad version: %s\n", err.msg);
        assert_int_equal(rc, 0);
        assert_int_equal(store_delta_info(d)->upserts, KILL_UPSERTS);
        assert_int_equal(store_delta_info(d)->deletes, 500);
        for (uint32_t i = 0; i < SHARDS; i++) {
            struct collect col = {0}; /* ascending within a shard */
            assert_int_equal(store_delta_foreach(d, i, col_up, NULL, &col), 0);
            assert_int_equal(col.bad, 0);
        }
        store_delta_close(d);
    }
    DIR *dp = opendir(root);
    struct dirent *e;
    while ((e = readdir(dp)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
            strcmp(e->d_name, "2") == 0)
            continue;
        assert_true(store_version_is_temp(e->d_name));
    }
    closedir(dp);
    long n = store_version_list(root, NULL, 0);
    assert_int_equal(n, exists ? 1 : 0);
    return exists;
}

static void test_kill_at_every_step(void **state)
{
    (void)state;
    char root[PATH_MAX], dir[PATH_MAX];
    scratch_dir(root);
    path2(dir, root, "2");
    int absent = 0, whole = 0, finished = 0;
    for (int at = 1; at <= 40 && !finished; at++) {
        test_rm_rf(root);
        test_mkdir_p(root);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
            kill_child(dir, at);
        int status = 0;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        int killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
        assert_true(killed || (WIFEXITED(status) && WEXITSTATUS(status) == 0));
        finished = !killed; /* every step passed: the commit finished */
        if (check_after_kill(root, dir))
            whole++;
        else
            absent++;
    }
    assert_true(finished);  /* the loop reached past the last step */
    assert_true(absent > 5); /* kills before the rename */
    assert_true(whole >= 2); /* kill after the rename, and the finished run */
    test_rm_rf(root);
}

static void test_kill_at_random_times(void **state)
{
    (void)state;
    char root[PATH_MAX], dir[PATH_MAX];
    scratch_dir(root);
    path2(dir, root, "2");
    /* how long a whole write takes here, so the kills land inside it */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        kill_child(dir, 0);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long span_us = (t1.tv_sec - t0.tv_sec) * 1000000L + (t1.tv_nsec - t0.tv_nsec) / 1000;
    if (span_us < 100)
        span_us = 100;
    srand(42);
    for (int run = 0; run < 24; run++) {
        test_rm_rf(root);
        test_mkdir_p(root);
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
            kill_child(dir, 0);
        usleep((useconds_t)(rand() % (span_us + span_us / 4)));
        kill(pid, SIGKILL);
        assert_int_equal(waitpid(pid, &status, 0), pid);
        check_after_kill(root, dir);
    }
    test_rm_rf(root);
}

static int side_ok(void *ctx, int dirfd)
{
    (void)ctx;
    int fd = openat(dirfd, "SIDE", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    int rc = write(fd, "side", 4) == 4 ? 0 : -EIO;
    close(fd);
    return rc;
}

static int side_fails(void *ctx, int dirfd)
{
    (void)ctx;
    (void)dirfd;
    return -ENOSPC;
}

/* Nothing but dot entries and `keep` in root. */
static void assert_only(const char *root, const char *keep)
{
    DIR *dp = opendir(root);
    struct dirent *e;
    while ((e = readdir(dp)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            assert_string_equal(e->d_name, keep ? keep : "(nothing)");
    closedir(dp);
}

static void test_publish(void **state)
{
    (void)state;
    char root[PATH_MAX], p[PATH_MAX], f[PATH_MAX + 8];
    scratch_dir(root);
    test_rm_rf(root);
    test_mkdir_p(root);
    store_t *a = make_store(500, 0, STORE_DTYPE_F32, 0x7);
    store_meta_t ma = meta_of("pub", 9);
    store_error_t err;
    path2(p, root, "9");
    /* a failing side file: no version, no temporary */
    expect_err(store_snapshot_publish(a, p, &ma, NULL, "me", side_fails, NULL, &err), &err,
               STORE_E_IO, "side file");
    assert_only(root, NULL);
    assert_int_equal(store_snapshot_publish(a, p, &ma, NULL, "tlserve-online log=5 id=ab",
                                            side_ok, NULL, &err),
                     0);
    assert_only(root, "9");
    char producer[STORE_PRODUCER_MAX];
    bool full = false;
    store_meta_t m;
    assert_int_equal(store_version_producer(p, producer, &full, &m, &err), 0);
    assert_string_equal(producer, "tlserve-online log=5 id=ab");
    assert_true(full);
    assert_int_equal(m.version, 9);
    snprintf(f, sizeof f, "%s/SIDE", p);
    struct stat st;
    assert_int_equal(stat(f, &st), 0);
    assert_int_equal(st.st_size, 4);
    store_t *b = NULL;
    assert_int_equal(store_snapshot_load(p, 1, &b, NULL, &err), 0);
    assert_stores_equal(a, b);
    store_destroy(b);
    /* over an existing version: refused, the version untouched, no temporary */
    expect_err(store_snapshot_publish(a, p, &ma, NULL, NULL, NULL, NULL, &err), &err,
               STORE_E_EXISTS, "cannot rename");
    assert_only(root, "9");
    /* a delta's producer reads the same way */
    store_delta_layout_t l;
    store_delta_layout_of(a, &ma, &l);
    path2(p, root, "10");
    write_delta(p, &l, 9, 10, 1, 10, 0, 0);
    assert_int_equal(store_version_producer(p, producer, &full, NULL, &err), 0);
    assert_false(full);
    store_destroy(a);
    test_rm_rf(root);
}

/* In a child: publishes a full version of KILL_UPSERTS keys into dir. */
static void publish_child(const char *dir)
{
    store_t *a = make_store(KILL_UPSERTS, 0, STORE_DTYPE_F32, 0x9);
    store_meta_t ma = meta_of("kill", 2);
    _exit(store_snapshot_publish(a, dir, &ma, NULL, "kill test", side_ok, NULL, NULL) == 0 ? 0
                                                                                          : 5);
}

static void test_publish_killed_at_random_times(void **state)
{
    (void)state;
    char root[PATH_MAX], dir[PATH_MAX], f[PATH_MAX + 8];
    scratch_dir(root);
    path2(dir, root, "2");
    struct timespec t0, t1;
    int status = 0, whole = 0, absent = 0;
    srand(43);
    long span_us = 0;
    for (int run = 0; run < 25; run++) {
        test_rm_rf(root);
        test_mkdir_p(root);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
            publish_child(dir);
        if (run > 0) { /* the first run times a whole write */
            usleep((useconds_t)(rand() % (span_us + span_us / 4)));
            kill(pid, SIGKILL);
        }
        assert_int_equal(waitpid(pid, &status, 0), pid);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (run == 0) {
            assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
            span_us = (t1.tv_sec - t0.tv_sec) * 1000000L + (t1.tv_nsec - t0.tv_nsec) / 1000;
            span_us = span_us < 100 ? 100 : span_us;
        }
        struct stat st;
        if (stat(dir, &st) == 0) { /* whole: loads, with its side file */
            store_t *b = NULL;
            store_error_t err;
            assert_int_equal(store_snapshot_load(dir, 1, &b, NULL, &err), 0);
            assert_int_equal(store_count(b), KILL_UPSERTS);
            store_destroy(b);
            snprintf(f, sizeof f, "%s/SIDE", dir);
            assert_int_equal(stat(f, &st), 0);
            whole++;
        } else {
            absent++;
        }
        DIR *dp = opendir(root);
        struct dirent *e;
        while ((e = readdir(dp)) != NULL)
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
                strcmp(e->d_name, "2") != 0)
                assert_true(store_version_is_temp(e->d_name));
        closedir(dp);
    }
    assert_true(whole >= 1);
    (void)absent;
    test_rm_rf(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chain),
        cmocka_unit_test(test_kill_at_every_step),
        cmocka_unit_test(test_kill_at_random_times),
        cmocka_unit_test(test_publish),
        cmocka_unit_test(test_publish_killed_at_random_times),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
