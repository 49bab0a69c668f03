/*
 * update_codec_impl.h — helpers shared by update_codec.c (the wire format,
 * decoding, the dense encoder) and update_acc.c (the sparse accumulator).
 * Not public: other folders include update_codec.h.
 */
#ifndef TL_MODEL_UPDATE_CODEC_IMPL_H
#define TL_MODEL_UPDATE_CODEC_IMPL_H

#include "model/update_codec.h"

#include <math.h>

/* Upper bound of a message's bytes (keys counted at 10 varint bytes). */
size_t update__msg_bound(uint32_t count, uint32_t k, uint32_t chunk, uint32_t flags, size_t name_len);
/* Write the 48-byte header and the name; returns the offset after the name.
 * The body length is filled by update__finish. */
size_t update__write_header(uint8_t *buf, uint32_t flags, uint64_t producer, uint64_t seq, uint64_t base,
                            uint32_t count, uint32_t k, uint32_t chunk, const char *model, size_t name_len);
/* Fill the body length (len - name_end) and append the checksum; returns the total length. */
size_t update__finish(uint8_t *buf, size_t name_end, size_t len);
size_t update__put_varint(uint8_t *p, uint64_t v);
int update__name_check(const char *name, size_t *len_out);
/* 1-bit quantization of v[0..n) in chunks of `chunk`: scales (f32 LE) to
 * scales_out, sign bit of v[i] at bit (bit0 + i) of bits (pre-zeroed), and
 * v[i] replaced by its quantization error v[i] - q[i]. */
void update__quantize(float *v, uint32_t n, uint32_t chunk, uint8_t *scales_out, uint8_t *bits, uint64_t bit0);
/* The same for a non-negative column (UPDATE_F_NONNEG_LAST): scale = the
 * chunk's mean of max(v, 0); bit set (value +scale) where v >= scale > 0,
 * v -= scale there; elsewhere the value is 0 and v stays. */
void update__quantize_nonneg(float *v, uint32_t n, uint32_t chunk, uint8_t *scales_out, uint8_t *bits,
                             uint64_t bit0);

/* UPDATE_F_LOG4's quantization of v[0..n) in chunks of `chunk`: scales
 * (f32 LE, each chunk's largest |v|, or largest v when onesided) to
 * scales_out, value i's nibble at nibble (nib0 + i) of nibbles (pre-zeroed),
 * and v[i] replaced by its quantization error. */
void update__quantize_log4(float *v, uint32_t n, uint32_t chunk, uint8_t *scales_out, uint8_t *nibbles,
                           uint64_t nib0, bool onesided);
/* The value of a LOG4 nibble under scale s. */
static inline float update__log4_value(float s, unsigned nib)
{
    unsigned e = nib & 7u;
    float mag = e == UPDATE_LOG4_ZERO ? 0.0f : ldexpf(s, -(int)e);
    return (nib & 8u) ? -mag : mag;
}

/* Whether column j of k is quantized one-sided (NONNEG_LAST, NONNEG_HALF). */
static inline bool update__onesided(uint32_t flags, uint32_t k, uint32_t j)
{
    return ((flags & UPDATE_F_NONNEG_LAST) && j == k - 1) || ((flags & UPDATE_F_NONNEG_HALF) && j >= k / 2);
}

/* The format version a message of flags and k is written as. */
static inline unsigned update__version_for(uint32_t flags, uint32_t k)
{
    const uint32_t v2_flags = UPDATE_F_NONNEG_HALF | UPDATE_F_PART | UPDATE_F_LOG4;
    return (flags & v2_flags) || k > UPDATE_V1_MAX_K ? UPDATE_FORMAT_VERSION : UPDATE_FORMAT_VERSION_V1;
}

#endif
