/*
 * test_row_table.c — the trainers' in-place rows (model/row_table.h):
 *
 *   - upsert creates a zeroed row once per id and then returns the same
 *     row; find sees exactly the ids upserted;
 *   - rows keep their address and contents while the index grows many
 *     times over (100,000 ids from an index sized for none) and across
 *     chunk boundaries;
 *   - foreach visits every row once with its own id, and stops on a
 *     non-zero return;
 *   - rows of less than a cache line made one after the other (a
 *     sample's first ids, the hottest) lie in different lines, and no two
 *     rows of a chunk overlap;
 *   - bad sizes are refused.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h> /* after the headers it needs */

#include "model/row_table.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum {
    FLOATS = 5,
    NIDS = 100000
};

/* Spread ids (field bits set, not sequential) so that probing is real. */
static uint64_t id_of(uint32_t i)
{
    return ((uint64_t)(i % 7) << 56) | ((uint64_t)i * UINT64_C(0x9e3779b97f4a7c15) >> 9);
}

static void test_upsert_find_grow(void **state)
{
    (void)state;
    train__row_table_t *t;
    assert_int_equal(train__row_table_create(FLOATS, 0, &t), 0);
    float **where = malloc(NIDS * sizeof *where);
    assert_non_null(where);
    for (uint32_t i = 0; i < NIDS; i++) {
        bool created = false;
        float *row = train__row_table_upsert(t, id_of(i), &created);
        assert_non_null(row);
        assert_true(created);
        for (int c = 0; c < FLOATS; c++) {
            assert_true(row[c] == 0);
            row[c] = (float)i + (float)c / 8;
        }
        where[i] = row;
        if (i % 997 == 0) { /* the same id again: the same row, not created */
            bool again = true;
            assert_ptr_equal(train__row_table_upsert(t, id_of(i), &again), row);
            assert_false(again);
        }
    }
    assert_int_equal(train__row_table_count(t), NIDS);
    assert_true(NIDS > 2 * ROW_TABLE_CHUNK); /* several chunks */
    for (uint32_t i = 0; i < NIDS; i++) {
        float *row = train__row_table_find(t, id_of(i));
        assert_ptr_equal(row, where[i]); /* never moved */
        for (int c = 0; c < FLOATS; c++)
            assert_true(row[c] == (float)i + (float)c / 8);
    }
    for (uint32_t i = NIDS; i < NIDS + 1000; i++)
        assert_null(train__row_table_find(t, id_of(i)));
    free(where);
    train__row_table_destroy(t);
}

struct visit {
    uint32_t seen, stop_after;
    uint8_t *hit;
};

static int visit_row(void *ctx, uint64_t id, const float *row)
{
    struct visit *v = ctx;
    uint32_t i = (uint32_t)row[0];
    assert_true(i < 3000);
    assert_true(id == id_of(i)); /* the row is its own id's */
    assert_int_equal(v->hit[i], 0);
    v->hit[i] = 1;
    return ++v->seen == v->stop_after ? 7 : 0;
}

static void test_foreach(void **state)
{
    (void)state;
    train__row_table_t *t;
    assert_int_equal(train__row_table_create(FLOATS, 3000, &t), 0);
    for (uint32_t i = 0; i < 3000; i++) {
        bool created;
        float *row = train__row_table_upsert(t, id_of(i), &created);
        assert_non_null(row);
        row[0] = (float)i;
    }
    uint8_t hit[3000] = {0};
    struct visit v = {.seen = 0, .stop_after = 0, .hit = hit};
    assert_int_equal(train__row_table_foreach(t, visit_row, &v), 0);
    assert_int_equal(v.seen, 3000);
    for (uint32_t i = 0; i < 3000; i++)
        assert_int_equal(hit[i], 1);
    memset(hit, 0, sizeof hit);
    v = (struct visit){.seen = 0, .stop_after = 10, .hit = hit};
    assert_int_equal(train__row_table_foreach(t, visit_row, &v), 7);
    assert_int_equal(v.seen, 10);
    train__row_table_destroy(t);
}

static int by_address(const void *a, const void *b)
{
    const uintptr_t x = (uintptr_t)*(float *const *)a, y = (uintptr_t)*(float *const *)b;
    return x < y ? -1 : x > y;
}

/* The first 512 rows of a chunk (256 of one float) lie in as many
 * different 64-byte lines. */

static void test_small_rows_apart(void **state)
{
    (void)state;
    static const uint32_t floats[] = {1, 3, 5, 15};
    for (size_t f = 0; f < sizeof floats / sizeof *floats; f++) {
        const uint32_t k = floats[f], apart = k == 1 ? 256 : 512;
        train__row_table_t *t;
        assert_int_equal(train__row_table_create(k, 0, &t), 0);
        float **row = malloc(ROW_TABLE_CHUNK * sizeof *row);
        uintptr_t *line = malloc(apart * sizeof *line);
        assert_non_null(row);
        assert_non_null(line);
        for (uint32_t i = 0; i < ROW_TABLE_CHUNK; i++) {
            bool created;
            assert_non_null(row[i] = train__row_table_upsert(t, id_of(i), &created));
            if (i < apart)
                line[i] = (uintptr_t)row[i] / 64;
        }
        for (uint32_t i = 0; i < apart; i++)
            for (uint32_t j = i + 1; j < apart; j++)
                if (line[i] == line[j]) /* a row may straddle: its first line counts */
                    fail_msg("%u floats: rows %u and %u share a line", k, i, j);
        qsort(row, ROW_TABLE_CHUNK, sizeof *row, by_address);
        for (uint32_t i = 1; i < ROW_TABLE_CHUNK; i++)
            assert_true(row[i - 1] + k <= row[i]); /* no overlap */
        free(line);
        free(row);
        train__row_table_destroy(t);
    }
}

static void test_bad_sizes(void **state)
{
    (void)state;
    train__row_table_t *t = NULL;
    assert_int_equal(train__row_table_create(0, 10, &t), -EINVAL);
    assert_null(t);
    train__row_table_destroy(NULL); /* a no-op */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_upsert_find_grow),
        cmocka_unit_test(test_foreach),
        cmocka_unit_test(test_small_rows_apart),
        cmocka_unit_test(test_bad_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
