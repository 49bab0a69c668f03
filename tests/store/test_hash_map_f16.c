/*
 * test_hash_map_f16.c — single-threaded tests of tl_hash_map
 * (store/tl_hash_map*.c): the fp16 conversions values are stored with: known
 * values, an exhaustive round trip of all 65536 halves, and random floats
 * stored and read back against an independent reference rounding.
 *
 * Shared helpers and the reference map: hash_map_testutil.h.  SIZES: see there.
 *
 * THREAD SAFETY: single-threaded; test_concurrent.c covers readers during
 * writes.
 */

#include "hash_map_testutil.h"

/* ---- (e) fp16 -------------------------------------------------------------- */

/* The exact value of a finite half, from the definition of binary16. */
static double half_value(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

static bool half_is_nan(uint16_t h)
{
    return (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0;
}

/* Round-to-nearest-even fp32 -> fp16 by search over the finite halves:
 * slow and independent of any bit trick. */
static uint16_t ref_f32_to_f16(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, 4);
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000);
    if (isnan(f))
        return sign | 0x7E00;
    double a = fabs((double)f);
    if (a >= 65520.0) /* MAX + half an ulp rounds to infinity (tie: inf is even) */
        return sign | 0x7C00;
    uint32_t lo = 0, hi = 0x7C00; /* value(lo) <= a < value(hi); value(0x7C00) := 65536 */
    while (hi - lo > 1) {
        uint32_t mid = (lo + hi) / 2;
        if (half_value((uint16_t)mid) <= a)
            lo = mid;
        else
            hi = mid;
    }
    double vlo = half_value((uint16_t)lo), vhi = hi == 0x7C00 ? 65536.0 : half_value((uint16_t)hi);
    double midpoint = (vlo + vhi) / 2; /* exact: both have 11 significant bits */
    uint32_t h = a < midpoint ? lo : a > midpoint ? hi : (lo & 1) ? hi : lo;
    return (uint16_t)(sign | h);
}

static void check_to_f16(float f, uint16_t want, const char *what)
{
    uint16_t got = store_f32_to_f16(f);
    if (half_is_nan(want) ? !half_is_nan(got) : got != want)
        fail_msg("store_f32_to_f16(%s = %a, bits %#010x) = %#06x, expected %#06x", what,
                 (double)f, bits_f32(f), got, want);
}

static void check_from_f16(uint16_t h, float want, const char *what)
{
    float got = store_f16_to_f32(h);
    bool ok = isnan(want) ? isnan(got) : bits_f32(got) == bits_f32(want);
    if (!ok)
        fail_msg("store_f16_to_f32(%#06x, %s) = %a, expected %a", h, what, (double)got,
                 (double)want);
}

static void test_f16_known_values(void **state)
{
    (void)state;
    check_to_f16(0.0f, 0x0000, "0");
    check_to_f16(-0.0f, 0x8000, "-0");
    check_to_f16(1.0f, 0x3C00, "1");
    check_to_f16(-2.0f, 0xC000, "-2");
    check_to_f16(0.5f, 0x3800, "0.5");
    check_to_f16(65504.0f, 0x7BFF, "65504 (max)");
    check_to_f16(65519.0f, 0x7BFF, "65519 (below the overflow tie)");
    check_to_f16(65520.0f, 0x7C00, "65520 (overflow tie -> inf)");
    check_to_f16(1e6f, 0x7C00, "1e6");
    check_to_f16(-1e6f, 0xFC00, "-1e6");
    check_to_f16(INFINITY, 0x7C00, "inf");
    check_to_f16(-INFINITY, 0xFC00, "-inf");
    check_to_f16(NAN, 0x7E00, "NaN");
    check_to_f16(f32_bits(0x7F800001), 0x7E00, "NaN with only low payload bits");
    check_to_f16(f32_bits(0xFF800001), 0x7E00, "-NaN with only low payload bits");
    check_to_f16(f32_bits(0x7FC00000), 0x7E00, "quiet NaN");
    check_to_f16(1e-8f, 0x0000, "1e-8 (underflows to 0)");
    check_to_f16(-1e-8f, 0x8000, "-1e-8 (underflows to -0)");
    check_to_f16(1e-30f, 0x0000, "1e-30");
    check_to_f16(f32_bits(1), 0x0000, "smallest fp32 subnormal");
    check_to_f16(0x1p-24f, 0x0001, "2^-24 (smallest subnormal)");
    check_to_f16(3e-8f, 0x0001, "3e-8 (just above half the smallest subnormal)");
    check_to_f16(0x1p-25f, 0x0000, "2^-25 (tie -> even 0)");
    check_to_f16(0x1.8p-24f, 0x0002, "1.5 * 2^-24 (tie -> even 2)");
    check_to_f16(0x1.4p-23f, 0x0002, "2.5 * 2^-24 (tie -> even 2)");
    check_to_f16(1023.0f * 0x1p-24f, 0x03FF, "largest subnormal");
    check_to_f16(1023.5f * 0x1p-24f, 0x0400, "largest subnormal + half (tie -> min normal)");
    check_to_f16(0x1p-14f, 0x0400, "2^-14 (min normal)");
    check_to_f16(1.0f + 0x1p-11f, 0x3C00, "1 + 2^-11 (tie -> even 1)");
    check_to_f16(1.0f + 3 * 0x1p-11f, 0x3C02, "1 + 3*2^-11 (tie -> even 1 + 2^-9)");
    check_to_f16(1.0f + 0x1p-11f + 0x1p-20f, 0x3C01, "just above the tie");
    check_to_f16(1.0f + 0x1p-11f - 0x1p-20f, 0x3C00, "just below the tie");
    check_to_f16(2047.0f, 0x67FF, "2047");
    check_to_f16(2049.0f, 0x6800, "2049 (tie -> even 2048)");
    check_to_f16(2051.0f, 0x6802, "2051 (tie -> even 2052)");
    check_to_f16(0.1f, 0x2E66, "0.1");
    check_to_f16(1.0f / 3.0f, 0x3555, "1/3");

    check_from_f16(0x0000, 0.0f, "0");
    check_from_f16(0x8000, -0.0f, "-0");
    check_from_f16(0x3C00, 1.0f, "1");
    check_from_f16(0xC000, -2.0f, "-2");
    check_from_f16(0x7BFF, 65504.0f, "max");
    check_from_f16(0x0001, 0x1p-24f, "smallest subnormal");
    check_from_f16(0x03FF, 1023.0f * 0x1p-24f, "largest subnormal");
    check_from_f16(0x0400, 0x1p-14f, "min normal");
    check_from_f16(0x3555, 0.333251953125f, "1/3");
    check_from_f16(0x7C00, INFINITY, "inf");
    check_from_f16(0xFC00, -INFINITY, "-inf");
    check_from_f16(0x7E00, NAN, "qNaN");
    check_from_f16(0x7C01, NAN, "sNaN");
    check_from_f16(0xFFFF, NAN, "-NaN");
}

static void test_f16_exhaustive(void **state)
{
    (void)state;
    /* Every half: decodes to its exact value and encodes back to itself. */
    for (uint32_t h = 0; h <= 0xFFFF; h++) {
        float f = store_f16_to_f32((uint16_t)h);
        if (half_is_nan((uint16_t)h)) {
            if (!isnan(f))
                fail_msg("half %#06x (NaN) decoded to %a", h, (double)f);
            if (!half_is_nan(store_f32_to_f16(f)))
                fail_msg("half %#06x (NaN) did not round-trip to a NaN", h);
            continue;
        }
        double want = (h & 0x7C00) == 0x7C00 ? ((h & 0x8000) ? -INFINITY : INFINITY)
                                             : half_value((uint16_t)h);
        if ((double)f != want || !signbit(f) != !signbit(want))
            fail_msg("half %#06x decoded to %a, expected %a", h, (double)f, want);
        uint16_t back = store_f32_to_f16(f);
        if (back != h)
            fail_msg("half %#06x -> %a -> %#06x", h, (double)f, back);
    }
    /* Around every rounding boundary: the midpoints between neighbouring
     * halves and the floats either side of them. */
    for (uint32_t h = 0; h < 0x7C00; h++) {
        double lo = half_value((uint16_t)h), hi = h == 0x7BFF ? 65536.0 : half_value((uint16_t)(h + 1));
        float mid = (float)((lo + hi) / 2);
        const float probes[] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY), (float)lo};
        for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
            check_to_f16(probes[i], ref_f32_to_f16(probes[i]), "boundary probe");
            check_to_f16(-probes[i], ref_f32_to_f16(-probes[i]), "negative boundary probe");
        }
    }
    /* Random fp32 bit patterns (all exponents, NaNs, infinities). */
    struct rng r = {0xF16};
    size_t n = scaled(4000000);
    for (size_t i = 0; i < n; i++) {
        uint32_t b = (uint32_t)rng_next(&r);
        if (i & 1) /* half the time, near the fp16 range */
            b = (b & 0x807FFFFF) | ((uint32_t)(100 + (b >> 23) % 50) << 23);
        float f = f32_bits(b);
        check_to_f16(f, ref_f32_to_f16(f), "random");
#ifdef __FLT16_MAX__
        /* The compiler's own conversion, a third opinion. */
        _Float16 hw = (_Float16)f;
        uint16_t hb;
        memcpy(&hb, &hw, 2);
        if (!isnan(f) && hb != ref_f32_to_f16(f))
            fail_msg("test bug: reference rounding of %a gives %#06x, _Float16 gives %#06x",
                     (double)f, ref_f32_to_f16(f), hb);
#endif
    }
}

/* Input float j of a test value: subnormal ties, the overflow edge, -0,
 * ties at 1, and random floats across the whole fp16 range. */
static float f16_test_input(uint64_t x, uint32_t j)
{
    switch (j) {
    case 0: return 0x1p-25f * (float)(x % 4);
    case 1: return 65504.0f + (float)(x % 32);
    case 2: return -0.0f;
    case 3: return 1.0f + (float)(x % 8) * 0x1p-11f;
    default: return f32_bits(((uint32_t)x & 0x807FFFFF) | (uint32_t)(103 + (x >> 32) % 40) << 23);
    }
}

/* A K=16 fp16 store returns exactly the fp16-rounded inputs (rounded by the
 * test's own reference, not by the store's converter). */
static void test_f16_store_values(void **state)
{
    (void)state;
    const uint32_t k = 16;
    store_t *s = make_store(k, STORE_DTYPE_F16, 4, 0, 0);
    assert_int_equal(store_value_bytes(s), k * 2);
    const size_t n = 20000;
    float in[16], out[16];
    struct rng r = {16};
    for (size_t i = 0; i < n; i++) {
        for (uint32_t j = 0; j < k; j++)
            in[j] = f16_test_input(rng_next(&r), j);
        if (store_upsert(s, key_of(i), in) != 1)
            fail_msg("fp16 store: upsert of new key %zu failed", i);
    }
    r.s = 16; /* the same inputs again */
    for (size_t i = 0; i < n; i++) {
        for (uint32_t j = 0; j < k; j++)
            in[j] = f16_test_input(rng_next(&r), j);
        if (store_lookup(s, key_of(i), out) != 1)
            fail_msg("fp16 store: key %zu missing", i);
        for (uint32_t j = 0; j < k; j++) {
            float want = (float)half_value(ref_f32_to_f16(in[j]));
            if ((ref_f32_to_f16(in[j]) & 0x7C00) == 0x7C00)
                want = copysignf(INFINITY, in[j]);
            if (bits_f32(out[j]) != bits_f32(want))
                fail_msg("fp16 store: key %zu float %u: input %a, got %a, expected %a", i, j,
                         (double)in[j], (double)out[j], (double)want);
        }
    }
    store_destroy(s);
}

/* ---- main ------------------------------------------------------------------- */

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_known_values),
        cmocka_unit_test(test_f16_exhaustive),
        cmocka_unit_test(test_f16_store_values),
    };
    return cmocka_run_group_tests(tests, setup_globals, NULL);
}
