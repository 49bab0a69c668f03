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

/* The key section (update_keys.c): keys are read from keys + i x stride
 * (the first u64 of each element), n of them, strictly ascending. */
size_t update__keys_varint_bytes(const void *keys, size_t stride, uint32_t n);
unsigned update__rice_param(const void *keys, size_t stride, uint32_t n);
size_t update__keys_rice_bytes(const void *keys, size_t stride, uint32_t n, unsigned r);
/* Writes the Rice section (update__keys_rice_bytes of it); returns its bytes. */
size_t update__put_keys_rice(uint8_t *p, const void *keys, size_t stride, uint32_t n, unsigned r);

/* Walks a key section [section, end), varint or Rice, checking each key:
 * begin, then next once per key (0, or -1 with code, why and bad_at set),
 * then end (0, or -1: bytes left over, or non-zero padding). */
typedef struct update_key_reader {
    const uint8_t *p, *end;  /* varint: the next byte; Rice: the byte of bit `at` */
    bool rice;
    unsigned r;              /* Rice parameter */
    const uint8_t *bits;     /* Rice: the bit stream after r and the first key */
    uint64_t nbits, at;
    uint64_t prev;           /* the last key read */
    uint32_t i;              /* keys read */
    update_errc_t code;      /* on failure */
    const char *why;
    const uint8_t *bad_at;
} update_key_reader_t;
void update__keys_begin(update_key_reader_t *kr, const uint8_t *section, const uint8_t *end, bool rice);
int update__keys_next(update_key_reader_t *kr, uint64_t *key);
int update__keys_end(update_key_reader_t *kr);
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
    const uint32_t v2_flags = UPDATE_F_NONNEG_HALF | UPDATE_F_PART | UPDATE_F_LOG4 | UPDATE_F_RICE;
    return (flags & v2_flags) || k > UPDATE_V1_MAX_K ? UPDATE_FORMAT_VERSION : UPDATE_FORMAT_VERSION_V1;
}

#endif
