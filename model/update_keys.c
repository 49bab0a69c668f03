/*
 * update_keys.c — the key section of a sparse update message
 * (update_codec.h), in its two codings, and a reader that checks every
 * key of either as it walks them.
 *
 * VARINT: count LEB128 varints, the first key then each gap to the next.
 *
 * RICE (UPDATE_F_RICE): keys are 64-bit hashed ids, so a message's sorted
 * keys are close to uniform over 2^64 and their gaps close to geometric,
 * which a Golomb-Rice code stores in about log2(mean gap) + 1.5 bits: the
 * information in the key set itself (log2 C(2^64, n) / n, within a few
 * tenths of a bit), where a varint rounds every gap up to 7 bits a byte.
 * At 100k keys a gap is about 2^47: 6.1 bytes a key against 7.0.
 *
 *   u8 r (0..63), u64 first key (LE), then for each later key its gap g
 *   (>= 1): q = (g - 1) >> r as q one-bits and a zero-bit, then the low r
 *   bits of g - 1, least significant first; bits fill each byte from its
 *   least significant bit; the last byte's unused bits are zero and the
 *   section ends there.
 *
 * The encoder takes r = floor(log2(mean gap x ln 2)) (the unary part then
 * averages 2 bits) and writes whichever coding is shorter, so a message is
 * never larger than with varints alone.
 */
#include "update_codec_impl.h"

#include <string.h>

#define KEY_AT(keys, stride, i) (*(const uint64_t *)(const void *)((const uint8_t *)(keys) + (size_t)(i) * (stride)))

size_t update__keys_varint_bytes(const void *keys, size_t stride, uint32_t n)
{
    size_t bytes = 0;
    uint64_t prev = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t gap = KEY_AT(keys, stride, i) - prev;
        prev = KEY_AT(keys, stride, i);
        bytes++;
        while (gap >= 0x80) {
            gap >>= 7;
            bytes++;
        }
    }
    return bytes;
}

unsigned update__rice_param(const void *keys, size_t stride, uint32_t n)
{
    if (n < 2)
        return 0;
    double mean = (double)(KEY_AT(keys, stride, n - 1) - KEY_AT(keys, stride, 0)) / (n - 1);
    double t = mean * 0.6931471805599453;
    unsigned r = 0;
    while (r < 63 && t >= 2.0) {
        t *= 0.5;
        r++;
    }
    return r;
}

size_t update__keys_rice_bytes(const void *keys, size_t stride, uint32_t n, unsigned r)
{
    if (n == 0)
        return 0;
    uint64_t bits = 0;
    for (uint32_t i = 1; i < n; i++)
        bits += ((KEY_AT(keys, stride, i) - KEY_AT(keys, stride, i - 1) - 1) >> r) + 1 + r;
    return 9 + (size_t)((bits + 7) / 8);
}

/* Appends the low n bits of v (n <= 64) at bit *at of p (zeroed ahead). */
static void put_bits(uint8_t *p, uint64_t *at, uint64_t v, unsigned n)
{
    while (n > 0) {
        unsigned room = 8 - (unsigned)(*at & 7), take = n < room ? n : room;
        p[*at >> 3] |= (uint8_t)((v & ((1u << take) - 1)) << (*at & 7));
        v >>= take;
        *at += take;
        n -= take;
    }
}

size_t update__put_keys_rice(uint8_t *p, const void *keys, size_t stride, uint32_t n, unsigned r)
{
    if (n == 0)
        return 0;
    size_t bytes = update__keys_rice_bytes(keys, stride, n, r);
    memset(p, 0, bytes);
    p[0] = (uint8_t)r;
    uint64_t first = KEY_AT(keys, stride, 0);
    for (int b = 0; b < 8; b++)
        p[1 + b] = (uint8_t)(first >> (8 * b));
    uint8_t *bits = p + 9;
    uint64_t at = 0;
    for (uint32_t i = 1; i < n; i++) {
        uint64_t g = KEY_AT(keys, stride, i) - KEY_AT(keys, stride, i - 1) - 1;
        for (uint64_t q = g >> r; q > 0;) { /* q one-bits, 32 at a time */
            unsigned take = q < 32 ? (unsigned)q : 32;
            put_bits(bits, &at, (1ull << take) - 1, take);
            q -= take;
        }
        at++; /* the zero that ends the unary part */
        if (r)
            put_bits(bits, &at, g, r);
    }
    return bytes;
}

/* ---- reading ----------------------------------------------------------------- */

void update__keys_begin(update_key_reader_t *kr, const uint8_t *section, const uint8_t *end, bool rice)
{
    *kr = (update_key_reader_t){.p = section, .end = end, .rice = rice};
}

static int bit_at(const update_key_reader_t *kr, uint64_t i)
{
    return (kr->bits[i >> 3] >> (i & 7)) & 1;
}

/* The bits from bit `at` on (at < nbits), least significant first, in a
 * word: at least 57 of them, zeros past the section's end. */
static uint64_t window(const update_key_reader_t *kr, uint64_t at)
{
    uint64_t byte = at >> 3, left = (kr->nbits >> 3) - byte, w = 0;
    const uint8_t *b = kr->bits + byte;
    if (left >= 8)
        for (int i = 7; i >= 0; i--) /* little endian whatever the host's order */
            w = w << 8 | b[i];
    else
        for (uint64_t i = left; i-- > 0;)
            w = w << 8 | b[i];
    return w >> (at & 7);
}

/* n (<= 63) bits from bit at, least significant first; at + n <= nbits. */
static uint64_t get_bits(const update_key_reader_t *kr, uint64_t at, unsigned n)
{
    if (n == 0)
        return 0;
    if (n <= 56)
        return window(kr, at) & ((UINT64_C(1) << n) - 1);
    uint64_t lo = window(kr, at) & 0xffffffffu;
    return lo | (window(kr, at + 32) & ((UINT64_C(1) << (n - 32)) - 1)) << 32;
}

static int fail(update_key_reader_t *kr, const uint8_t *at, update_errc_t code, const char *why)
{
    kr->bad_at = at;
    kr->code = code;
    kr->why = why;
    return -1;
}

static int varint_next(update_key_reader_t *kr, uint64_t *gap)
{
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 70; shift += 7) {
        if (kr->p >= kr->end)
            return -1;
        uint8_t b = *kr->p++;
        if (shift == 63 && b > 1)
            return -1;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *gap = v;
            return 0;
        }
    }
    return -1;
}

int update__keys_next(update_key_reader_t *kr, uint64_t *key)
{
    const uint8_t *start = kr->p;
    uint64_t gap;
    if (!kr->rice) {
        if (varint_next(kr, &gap) != 0)
            return fail(kr, start, UPDATE_E_KEYS, "varint runs past the key section or 64 bits");
    } else if (kr->i == 0) {
        if (kr->end - kr->p < 9)
            return fail(kr, start, UPDATE_E_KEYS, "the Rice key section is shorter than its 9-byte start");
        kr->r = kr->p[0];
        if (kr->r > 63)
            return fail(kr, start, UPDATE_E_KEYS, "Rice parameter over 63");
        gap = 0;
        for (int b = 0; b < 8; b++)
            gap |= (uint64_t)kr->p[1 + b] << (8 * b);
        kr->bits = kr->p + 9;
        kr->nbits = (uint64_t)(kr->end - kr->bits) * 8;
        kr->p = kr->bits;
    } else {
        uint64_t q = 0; /* the unary part: ones up to a zero, a word at a time */
        while (kr->at < kr->nbits) {
            unsigned valid = 64 - (unsigned)(kr->at & 7);
            uint64_t inv = ~window(kr, kr->at);
            unsigned ones = inv ? (unsigned)__builtin_ctzll(inv) : 64;
            ones = ones < valid ? ones : valid;
            q += ones;
            kr->at += ones;
            if (ones < valid)
                break;
        }
        const uint8_t *here = kr->bits + (kr->at >> 3);
        if (kr->at + 1 + kr->r > kr->nbits)
            return fail(kr, here < kr->end ? here : kr->end - 1, UPDATE_E_KEYS,
                        "Rice code runs past the key section");
        kr->at++;
        if (kr->r > 0 && (q >> (64 - kr->r)) != 0)
            return fail(kr, here, UPDATE_E_ORDER, "Rice gap passes 2^64");
        uint64_t low = get_bits(kr, kr->at, kr->r);
        kr->at += kr->r;
        uint64_t g1 = (kr->r ? q << kr->r : q) | low;
        if (g1 == UINT64_MAX)
            return fail(kr, here, UPDATE_E_ORDER, "Rice gap passes 2^64");
        gap = g1 + 1;
        kr->p = kr->bits + (kr->at >> 3);
    }
    if (kr->i > 0 && gap == 0)
        return fail(kr, start, UPDATE_E_ORDER, "a key equals the one before it (keys must be strictly ascending)");
    if (gap > UINT64_MAX - kr->prev)
        return fail(kr, start, UPDATE_E_ORDER, "a gap passes 2^64");
    kr->prev += gap;
    kr->i++;
    *key = kr->prev;
    return 0;
}

int update__keys_end(update_key_reader_t *kr)
{
    if (!kr->rice) {
        if (kr->p != kr->end)
            return fail(kr, kr->p, UPDATE_E_LENGTH, "bytes left between the last key and the payload");
        return 0;
    }
    if (kr->i == 0)
        return kr->p == kr->end ? 0 : fail(kr, kr->p, UPDATE_E_LENGTH,
                                           "bytes left between the last key and the payload");
    uint64_t used = (kr->at + 7) / 8;
    if (kr->bits + used != kr->end)
        return fail(kr, kr->bits + used, UPDATE_E_LENGTH, "bytes left between the last key and the payload");
    for (uint64_t i = kr->at; i < used * 8; i++)
        if (bit_at(kr, i))
            return fail(kr, kr->bits + (i >> 3), UPDATE_E_PADDING, "Rice padding bits are not zero");
    return 0;
}
