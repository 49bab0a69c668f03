/*
 * test_hash.c — codec/hash.c: feature ids against the vectors of
 * codec/test_vectors.txt (TL_CODEC_VECTORS), which the Python implementation
 * checks too, and codec_sort_unique's order and dedup rule.
 */
#include "codec_test_util.h"

static void test_feature_vectors(void **state)
{
    (void)state;
    FILE *f = fopen(TL_CODEC_VECTORS, "r");
    assert_non_null(f);
    char line[512];
    int vectors = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n' || strncmp(line, "frame ", 6) == 0)
            continue; /* frame vectors: test_feedback.c */
        unsigned field;
        char raw_hex[256];
        unsigned long long want;
        assert_int_equal(sscanf(line, "%u %255s %llx", &field, raw_hex, &want), 3);
        assert_true(field <= 255);
        uint8_t raw[128];
        int n = unhex(raw_hex, raw, sizeof raw);
        assert_true(n >= 0);
        uint64_t id = codec_feature_id((uint8_t)field, raw, (size_t)n);
        if (id != want)
            fail_msg("vector %d: field %u raw %s: want %016llx got %016llx", vectors, field,
                     raw_hex, want, (unsigned long long)id);
        assert_true(id >> 56 == field);
        vectors++;
    }
    fclose(f);
    assert_true(vectors >= 10);
    /* XXH3_64bits("") = 0x2d06800538d394c2 is xxHash's own published value */
    assert_true(codec_feature_id(0, "", 0) == UINT64_C(0x0006800538d394c2));
}

static void test_sort_unique(void **state)
{
    (void)state;
    uint64_t ids[] = {9, 3, 7, 3, 1, 9, 9, 0};
    float vals[] = {0.5f, 2.0f, 1.0f, -1.0f, 4.0f, 0.25f, 3.0f, -0.0f};
    uint32_t n = codec_sort_unique(ids, vals, 8);
    assert_int_equal(n, 5);
    uint64_t want_ids[] = {0, 1, 3, 7, 9};
    float want_vals[] = {-0.0f, 4.0f, 2.0f, 1.0f, 3.0f};
    for (uint32_t i = 0; i < n; i++) {
        assert_true(ids[i] == want_ids[i]);
        assert_true(vals[i] == want_vals[i]);
    }
    /* +0.0 beats -0.0 whatever the order */
    uint64_t z[] = {5, 5};
    float zv[] = {-0.0f, 0.0f};
    assert_int_equal(codec_sort_unique(z, zv, 2), 1);
    assert_false(signbit(zv[0]));

    /* binary, larger, reverse order with repeats */
    enum {
        N = 5000
    };
    uint64_t *big = malloc(N * sizeof *big);
    for (uint32_t i = 0; i < N; i++)
        big[i] = (uint64_t)(N - i) / 2 * UINT64_C(0x9e3779b97f4a7c15);
    n = codec_sort_unique(big, NULL, N);
    assert_int_equal(n, N / 2 + 1);
    for (uint32_t i = 1; i < n; i++)
        assert_true(big[i] > big[i - 1]);
    free(big);
    assert_int_equal(codec_sort_unique(NULL, NULL, 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_feature_vectors),
        cmocka_unit_test(test_sort_unique),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
