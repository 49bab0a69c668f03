/*
 * f16.c — IEEE 754 binary16 <-> binary32 conversions for fp16 embedding
 * storage.  Plain integer code, so it behaves the same under gcc and clang
 * and needs no F16C instructions; the store converts on every lookup of an
 * fp16 table, which costs a few cycles per float next to a cache miss.
 *
 * binary16: 1 sign | 5 exponent (bias 15) | 10 mantissa
 * binary32: 1 sign | 8 exponent (bias 127) | 23 mantissa
 *
 * THREAD SAFETY: pure functions.
 */
#include "store_internal.h"

#include <string.h>

uint16_t store_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t man = x & 0x7fffffu;

    if (exp == 0xffu) /* inf or NaN: keep NaN a (quiet) NaN */
        return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0));

    int32_t e = (int32_t)exp - 127 + 15;
    if (e >= 0x1f) /* too large: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) { /* subnormal half or zero */
        if (e < -10)
            return sign;
        man |= 0x800000u; /* implicit leading one */
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1u)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1u)))
        half++; /* may carry into the exponent, up to infinity: correct */
    return (uint16_t)(sign | half);
}

float store_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t x;

    if (exp == 0x1fu) {
        x = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) {
        if (man == 0) {
            x = sign;
        } else { /* subnormal: normalise */
            int32_t e = -1;
            do {
                man <<= 1;
                e++;
            } while (!(man & 0x400u));
            x = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else {
        x = sign | ((exp - 15 + 127) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}
