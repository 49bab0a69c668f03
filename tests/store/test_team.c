/*
 * test_team.c — store_team_lookup (store/store_team.c) returns exactly what
 * store_lookup_batch returns: the same floats, found flags and hit count, for
 * batches below and above the split size, with one and several helpers, and
 * with several callers at once (one wins the team, the others run alone;
 * every caller's answer must still be its own and complete), and with the
 * caller and its helpers on one CPU, where a helper is preempted inside its
 * chunks and the caller sleeps for it (store_team_sleeps) instead of
 * spinning through the helper's wait.
 *
 * The store holds keys k = i * 7 + 1 (i < N_KEYS) with K = 3 floats each,
 * value(k, j) = k * 0.5 + j; queried keys are a mix of present and absent
 * (even multiples of 7 plus 2 are never inserted).
 */
#define _GNU_SOURCE /* sched_setaffinity, cpu_set_t */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "store/store.h"

#define K 3
#define N_KEYS 200000
#define MAX_BATCH 50000
#define CALLERS 4
#define CALLS_PER_CALLER 60

static store_t *g_store;

static uint64_t present_key(uint64_t i)
{
    return i * 7 + 1;
}
static uint64_t absent_key(uint64_t i)
{
    return i * 7 + 2;
}

static uint64_t next_rand(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* n keys, about one in five absent. */
static void make_keys(uint64_t *keys, size_t n, uint64_t *rng)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t r = next_rand(rng);
        keys[i] = r % 5 == 0 ? absent_key(r % N_KEYS) : present_key(r % N_KEYS);
    }
}

/* Checks out/found/hits of a lookup of keys against the store's contents. */
static void check_answer(const uint64_t *keys, size_t n, const float *out, const uint8_t *found,
                         size_t hits)
{
    size_t want_hits = 0;
    for (size_t i = 0; i < n; i++) {
        int present = keys[i] % 7 == 1;
        want_hits += (size_t)present;
        if (found)
            assert_int_equal(found[i], present);
        for (int j = 0; j < K; j++) {
            float want = present ? (float)keys[i] * 0.5f + (float)j : 0.0f;
            if (out[i * K + j] != want)
                fail_msg("key %zu (%llu) float %d: got %g, want %g", i, (unsigned long long)keys[i],
                         j, out[i * K + j], want);
        }
    }
    assert_int_equal(hits, want_hits);
}

static int setup(void **state)
{
    (void)state;
    store_options_t opt = {.value_floats = K, .shards = 4, .expected_keys = N_KEYS};
    if (store_create(&opt, &g_store))
        return -1;
    for (uint64_t i = 0; i < N_KEYS; i++) {
        uint64_t k = present_key(i);
        float v[K];
        for (int j = 0; j < K; j++)
            v[j] = (float)k * 0.5f + (float)j;
        if (store_upsert(g_store, k, v) != 1)
            return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    store_destroy(g_store);
    return 0;
}

static void test_bad_arguments(void **state)
{
    (void)state;
    store_team_t *t = (store_team_t *)1;
    assert_int_equal(store_team_create(0, 0, &t), -EINVAL);
    assert_null(t);
    assert_int_equal(store_team_create(STORE_TEAM_MAX_HELPERS + 1, 0, &t), -EINVAL);
    store_team_destroy(NULL);
    assert_int_equal(store_team_splits(NULL), 0);
    assert_int_equal(store_team_sleeps(NULL), 0);
}

/* One caller, sizes around the split threshold and chunk edges, 1 and 3 helpers. */
static void test_one_caller_matches_batch(void **state)
{
    (void)state;
    static uint64_t keys[MAX_BATCH];
    static float out[MAX_BATCH * K];
    static uint8_t found[MAX_BATCH];
    const size_t sizes[] = {0, 1, 100, 8191, 8192, 8193, 20000, 40301, MAX_BATCH};
    const int helpers[] = {1, 3};
    uint64_t rng = 88172645463325252ull;
    for (size_t h = 0; h < sizeof helpers / sizeof helpers[0]; h++) {
        store_team_t *t;
        assert_int_equal(store_team_create(helpers[h], 8192, &t), 0);
        uint64_t want_splits = 0;
        for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
            size_t n = sizes[z];
            make_keys(keys, n, &rng);
            memset(out, 0xff, sizeof out); /* NaN: a float nobody wrote shows */
            memset(found, 7, sizeof found);
            size_t hits = store_team_lookup(t, g_store, keys, n, out, found);
            check_answer(keys, n, out, found, hits);
            memset(out, 0xff, sizeof out);
            hits = store_team_lookup(t, g_store, keys, n, out, NULL);
            check_answer(keys, n, out, NULL, hits);
            want_splits += n >= 8192 ? 2 : 0; /* one caller: the team is always free */
            assert_int_equal(store_team_splits(t), want_splits);
        }
        store_team_destroy(t);
    }
}

/* A NULL team looks up alone. */
static void test_null_team(void **state)
{
    (void)state;
    static uint64_t keys[20000];
    static float out[20000 * K];
    uint64_t rng = 42;
    make_keys(keys, 20000, &rng);
    size_t hits = store_team_lookup(NULL, g_store, keys, 20000, out, NULL);
    check_answer(keys, 20000, out, NULL, hits);
}

struct caller {
    store_team_t *team;
    uint64_t seed;
    int failures;
};

static void *caller_main(void *arg)
{
    struct caller *c = arg;
    uint64_t *keys = malloc(MAX_BATCH * sizeof *keys);
    float *out = malloc(MAX_BATCH * K * sizeof *out);
    uint8_t *found = malloc(MAX_BATCH);
    if (!keys || !out || !found) {
        c->failures = -1;
        goto done;
    }
    for (int call = 0; call < CALLS_PER_CALLER; call++) {
        size_t n = 1 + next_rand(&c->seed) % MAX_BATCH;
        make_keys(keys, n, &c->seed);
        memset(out, 0xff, n * K * sizeof *out);
        size_t hits = store_team_lookup(c->team, g_store, keys, n, out, found);
        size_t want_hits = 0;
        for (size_t i = 0; i < n; i++) {
            int present = keys[i] % 7 == 1;
            want_hits += (size_t)present;
            c->failures += found[i] != present;
            for (int j = 0; j < K; j++)
                c->failures +=
                    out[i * K + j] != (present ? (float)keys[i] * 0.5f + (float)j : 0.0f);
        }
        c->failures += hits != want_hits;
    }
done:
    free(keys);
    free(out);
    free(found);
    return NULL;
}

/* Several callers share one team: each answer is complete and its own. */
static void test_concurrent_callers(void **state)
{
    (void)state;
    store_team_t *t;
    assert_int_equal(store_team_create(2, 8192, &t), 0);
    struct caller c[CALLERS];
    pthread_t th[CALLERS];
    for (int i = 0; i < CALLERS; i++) {
        c[i] = (struct caller){t, 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1), 0};
        assert_int_equal(pthread_create(&th[i], NULL, caller_main, &c[i]), 0);
    }
    for (int i = 0; i < CALLERS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < CALLERS; i++)
        assert_int_equal(c[i].failures, 0);
    uint64_t splits = store_team_splits(t);
    assert_true(splits > 0);
    assert_true(splits <= CALLERS * CALLS_PER_CALLER);
    store_team_destroy(t);
}

/* Caller and three helpers on the caller's first allowed CPU: helpers run
 * only when the caller yields or is preempted, so the caller's wait for the
 * chunks they hold goes to sleep; every answer must be complete. */
static void test_one_cpu(void **state)
{
    (void)state;
    cpu_set_t old, one;
    assert_int_equal(sched_getaffinity(0, sizeof old, &old), 0);
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &old)) {
            CPU_SET(c, &one);
            break;
        }
    assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
    store_team_t *t;
    assert_int_equal(store_team_create(3, 8192, &t), 0); /* the helpers inherit one CPU */
    static uint64_t keys[MAX_BATCH];
    static float out[MAX_BATCH * K];
    static uint8_t found[MAX_BATCH];
    uint64_t rng = 7;
    for (int call = 0; call < 100; call++) {
        make_keys(keys, MAX_BATCH, &rng);
        memset(out, 0xff, sizeof out);
        size_t hits = store_team_lookup(t, g_store, keys, MAX_BATCH, out, found);
        check_answer(keys, MAX_BATCH, out, found, hits);
    }
    assert_int_equal(store_team_splits(t), 100);
    assert_true(store_team_sleeps(t) <= 100);
    print_message("one CPU: %llu of 100 split lookups slept for a helper\n",
                  (unsigned long long)store_team_sleeps(t));
    store_team_destroy(t);
    assert_int_equal(sched_setaffinity(0, sizeof old, &old), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_one_caller_matches_batch),
        cmocka_unit_test(test_null_team),
        cmocka_unit_test(test_concurrent_callers),
        cmocka_unit_test(test_one_cpu),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
