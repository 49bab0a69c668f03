/*
 * varint.c — unsigned LEB128 varints, as the wire uses them for counts and
 * id deltas.
 *
 *   value bits:  ... | 20..14 | 13..7 | 6..0
 *   bytes:       b0 = 1xxxxxxx (bits 6..0), b1 = 1xxxxxxx (bits 13..7), ...,
 *                last = 0xxxxxxx
 *
 * 64 bits need at most 10 bytes, and the 10th byte carries only bit 63: so
 * it must be 0 or 1.  A 10th byte of 2..127 overflows, one of 128..255 says
 * an 11th byte follows: both are refused (-1, BAD_VARINT).  A varint cut off
 * by the end of the buffer returns 0: the caller reports TRUNCATED (the
 * field runs past the payload).  Non-minimal forms (0x80 0x00) are accepted;
 * the encoder always writes the minimal one.
 *
 * THREAD SAFETY: pure functions.
 */
#include "codec_internal.h"

unsigned codec_varint_size(uint64_t v)
{
    /* bits needed = 64 - clz, varint bytes = ceil(bits / 7), at least 1 */
    unsigned bits = v ? 64u - (unsigned)__builtin_clzll(v) : 1u;
    return (bits + 6) / 7;
}

unsigned codec_varint_encode(uint8_t out[CODEC_MAX_VARINT], uint64_t v)
{
    unsigned n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

int codec_varint_decode(const uint8_t *p, size_t len, uint64_t *v)
{
    uint64_t x = 0;
    size_t max = len < CODEC_MAX_VARINT ? len : CODEC_MAX_VARINT;
    for (size_t i = 0; i < max; i++) {
        uint8_t b = p[i];
        if (unlikely(i == CODEC_MAX_VARINT - 1) && b > 1)
            return -1; /* overflow, or an 11th byte follows */
        x |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *v = x;
            return (int)(i + 1);
        }
    }
    return 0; /* ran off the end: ten bytes always end or fail above */
}
