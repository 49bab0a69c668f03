/*
 * block.c — the payload reader and the fields that several messages share:
 * model names, counts and feature blocks.
 *
 * A FEATURE BLOCK on the wire (docs/wire.md, "Feature block"):
 *
 *   varint n | u8 flags | varint delta[0] ... delta[n-1] | f32 value[0] ... value[n-1]
 *                 bit 0:  delta[0] = id[0],                 only when flags bit 0
 *                 values  delta[i] = id[i] - id[i-1] >= 1
 *
 * Decoding checks, in this order, each failure naming the block ("item[17]")
 * and the payload offset of the field:
 *   n: varint (TRUNCATED, BAD_VARINT), <= MAX_BLOCK_FEATURES and the request
 *      total <= MAX_REQUEST_FEATURES (TOO_MANY_FEATURES);
 *   flags: present (TRUNCATED), no bit but bit 0 (BAD_VALUE);
 *   size: at least n bytes of deltas (+ 4n of values) left (TRUNCATED) —
 *      before the arena is touched, so a hostile count cannot make it
 *      allocate more than the payload could describe;
 *   deltas: varints, none 0 after the first, no 64-bit overflow
 *      (UNSORTED_FEATURES);
 *   values: finite (BAD_VALUE).
 * The ids and values arrays come from the arena; values is NULL when flags
 * bit 0 is clear.
 *
 * Encoding is split in two: codec__block_check validates a block and adds its exact
 * size, codec__wr_block writes it with no checks.  The encoders run every check
 * first, size the frame, and only then write.
 *
 * THREAD SAFETY: per-call state only.
 */
#include "codec_internal.h"

#include <endian.h>

#include <stdarg.h>
#include <stdio.h>

static float no_values[1]; /* values of an empty block whose flags say "values" */

int codec__fail(codec_error_t *err, int code, size_t offset, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        err->code = (uint16_t)code;
        err->offset = offset > CODEC_NO_OFFSET ? CODEC_NO_OFFSET : (uint32_t)offset;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* "item[17]" or "shared" into buf, for messages. */
static const char *label(char *buf, size_t n, const char *what, long index)
{
    if (index < 0)
        snprintf(buf, n, "%s", what);
    else
        snprintf(buf, n, "%s[%ld]", what, index);
    return buf;
}

/* ---- reader --------------------------------------------------------------------- */

int codec__rd_need(struct rd *r, size_t n, const char *what)
{
    if (likely(n <= rd_left(r)))
        return CODEC_OK;
    return codec__fail(r->err, CODEC_E_TRUNCATED, r->off,
                       "%s: %s needs %zu bytes at offset %zu, payload has %zu left", r->msg, what,
                       n, r->off, rd_left(r));
}

int codec__rd_varint(struct rd *r, uint64_t *v, const char *what)
{
    int k = codec_varint_decode(r->p + r->off, rd_left(r), v);
    if (likely(k > 0)) {
        r->off += (size_t)k;
        return CODEC_OK;
    }
    if (k == 0)
        return codec__fail(r->err, CODEC_E_TRUNCATED, r->off,
                           "%s: varint %s at offset %zu runs past the payload end", r->msg, what,
                           r->off);
    return codec__fail(r->err, CODEC_E_BAD_VARINT, r->off,
                       "%s: varint %s at offset %zu is over 10 bytes or 64 bits", r->msg, what,
                       r->off);
}

void *codec__rd_alloc(struct rd *r, size_t n, const char *what)
{
    codec_arena_t *a = r->arena;
    if (unlikely(!a)) {
        codec__fail(r->err, CODEC_E_INTERNAL, CODEC_NO_OFFSET, "%s: no arena for %s", r->msg, what);
        return NULL;
    }
    size_t at = (a->used + 7) & ~(size_t)7;
    if (unlikely(at > a->cap || n > a->cap - at)) {
        codec__fail(r->err, CODEC_E_INTERNAL, r->off,
                    "%s: arena full: %s needs %zu bytes, %zu of %zu used", r->msg, what, n, a->used,
                    a->cap);
        return NULL;
    }
    a->used = at + n;
    return a->base + at;
}

int codec__rd_end(struct rd *r)
{
    if (likely(r->off == r->len))
        return CODEC_OK;
    return codec__fail(r->err, CODEC_E_TRAILING_BYTES, r->off,
                       "%s: %zu bytes after the last field at offset %zu", r->msg, rd_left(r),
                       r->off);
}

int codec__rd_name(struct rd *r, char name[CODEC_MAX_NAME + 1])
{
    int rc = codec__rd_need(r, 1, "name_len");
    if (rc)
        return rc;
    size_t at = r->off;
    uint8_t n = r->p[r->off++];
    if (unlikely(n == 0 || n > CODEC_MAX_NAME))
        return codec__fail(r->err, CODEC_E_BAD_NAME, at,
                           "%s: model name_len %u at offset %zu is not 1..64", r->msg, n, at);
    if ((rc = codec__rd_need(r, n, "model name")))
        return rc;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = r->p[r->off + i];
        if (unlikely(!codec_name_char(c)))
            return codec__fail(r->err, CODEC_E_BAD_NAME, r->off + i,
                               "%s: model name byte 0x%02x at offset %zu is not [A-Za-z0-9_.-]",
                               r->msg, c, r->off + i);
    }
    memcpy(name, r->p + r->off, n);
    name[n] = '\0';
    r->off += n;
    return CODEC_OK;
}

int codec__rd_count(struct rd *r, uint32_t *n, const char *what, size_t min_bytes_each)
{
    size_t at = r->off;
    uint64_t v;
    int rc = codec__rd_varint(r, &v, what);
    if (rc)
        return rc;
    if (unlikely(v == 0))
        return codec__fail(r->err, CODEC_E_NO_ITEMS, at, "%s: %s is 0 at offset %zu", r->msg, what,
                           at);
    if (unlikely(v > CODEC_MAX_ITEMS))
        return codec__fail(r->err, CODEC_E_TOO_MANY_ITEMS, at,
                           "%s: %s %llu at offset %zu is over %u", r->msg, what,
                           (unsigned long long)v, at, CODEC_MAX_ITEMS);
    if (unlikely(v * min_bytes_each > rd_left(r)))
        return codec__fail(r->err, CODEC_E_TRUNCATED, at,
                           "%s: %s %llu at offset %zu need %llu bytes, %zu left", r->msg, what,
                           (unsigned long long)v, at, (unsigned long long)(v * min_bytes_each),
                           rd_left(r));
    *n = (uint32_t)v;
    return CODEC_OK;
}

/* codec_varint_decode without a loop or a data-dependent branch for up to
 * 9 bytes: find the first byte with its top bit clear in one 8-byte load,
 * mask the bytes after it off, gather the 7-bit groups, and add a 9th byte
 * under a mask.  Same results as codec_varint_decode (length, or -1 over 64
 * bits).  Needs CODEC_MAX_VARINT readable bytes at p. */
static inline int varint_decode_fast(const uint8_t *p, uint64_t *v)
{
    uint64_t w;
    memcpy(&w, p, 8);
    w = le64toh(w);
    uint64_t stop = ~w & 0x8080808080808080ull; /* top bit clear: the last byte */
    w &= stop ^ (stop - 1);                     /* keep bytes up to it (all 8 if none) */
    unsigned bytes = ((unsigned)__builtin_ctzll(stop | (1ull << 63)) >> 3) + 1;
    uint64_t x = (w & 0x7full) | ((w >> 1) & (0x7full << 7)) | ((w >> 2) & (0x7full << 14)) |
                 ((w >> 3) & (0x7full << 21)) | ((w >> 4) & (0x7full << 28)) |
                 ((w >> 5) & (0x7full << 35)) | ((w >> 6) & (0x7full << 42)) |
                 ((w >> 7) & (0x7full << 49));
    if (likely(stop)) {
        *v = x;
        return (int)bytes;
    }
    x |= (uint64_t)(p[8] & 0x7f) << 56; /* a 9th byte */
    if (!(p[8] & 0x80)) {
        *v = x;
        return 9;
    }
    if (p[9] > 1)  /* a 10th: only deltas >= 2^63 */
        return -1; /* over 64 bits, or an 11th byte */
    *v = x | (uint64_t)p[9] << 63;
    return 10;
}

/* Copies n >= 1 fixed u64 ids from the payload and returns non-zero when
 * one is not above the one before it.  One pass: load, compare, store. */
static uint64_t copy_fixed_ids_scalar(const uint8_t *restrict src, uint64_t *restrict dst,
                                      uint32_t n)
{
    uint64_t bad = 0, prev = get_u64(src);
    dst[0] = prev;
    for (uint32_t i = 1; i < n; i++) {
        uint64_t v = get_u64(src + (size_t)i * 8);
        bad |= v <= prev;
        dst[i] = prev = v;
    }
    return bad;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* The same, four ids at a time with AVX2 (unsigned order via the sign-bit
 * flip, since AVX2 compares signed); chosen at run time when the CPU has it. */
__attribute__((target("avx2"))) static uint64_t
copy_fixed_ids_avx2(const uint8_t *restrict src, uint64_t *restrict dst, uint32_t n)
{
    const __m256i flip = _mm256_set1_epi64x(INT64_MIN), ones = _mm256_set1_epi64x(-1);
    __m256i bad = _mm256_setzero_si256();
    dst[0] = get_u64(src);
    uint32_t i = 1;
    for (; i + 4 <= n; i += 4) {
        __m256i cur = _mm256_loadu_si256((const __m256i *)(const void *)(src + (size_t)i * 8));
        __m256i prv =
            _mm256_loadu_si256((const __m256i *)(const void *)(src + (size_t)(i - 1) * 8));
        _mm256_storeu_si256((__m256i *)(void *)(dst + i), cur);
        __m256i gt = _mm256_cmpgt_epi64(_mm256_xor_si256(cur, flip), _mm256_xor_si256(prv, flip));
        bad = _mm256_or_si256(bad, _mm256_xor_si256(gt, ones));
    }
    uint64_t tail = 0;
    for (; i < n; i++) {
        uint64_t v = get_u64(src + (size_t)i * 8);
        tail |= v <= dst[i - 1];
        dst[i] = v;
    }
    return tail | (uint64_t)!_mm256_testz_si256(bad, bad);
}
#endif

static inline uint64_t copy_fixed_ids(const uint8_t *src, uint64_t *dst, uint32_t n)
{
#if defined(__x86_64__) && defined(__GNUC__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (__builtin_cpu_supports("avx2"))
        return copy_fixed_ids_avx2(src, dst, n);
#endif
    return copy_fixed_ids_scalar(src, dst, n);
}

int codec__rd_block(struct rd *r, codec_block_t *b, const char *what, long index)
{
    char lb[32];
    size_t at = r->off;
    uint64_t n;
    int k = codec_varint_decode(r->p + r->off, rd_left(r), &n);
    if (unlikely(k <= 0))
        return codec__fail(r->err, k ? CODEC_E_BAD_VARINT : CODEC_E_TRUNCATED, at,
                           k ? "%s %s: varint feature count at offset %zu is over 10 bytes or 64 bits"
                             : "%s %s: feature count at offset %zu runs past the payload end",
                           r->msg, label(lb, sizeof lb, what, index), at);
    r->off += (size_t)k;
    if (unlikely(n > CODEC_MAX_BLOCK_FEATURES))
        return codec__fail(r->err, CODEC_E_TOO_MANY_FEATURES, at,
                           "%s %s: %llu features at offset %zu, block limit %u", r->msg,
                           label(lb, sizeof lb, what, index), (unsigned long long)n, at,
                           CODEC_MAX_BLOCK_FEATURES);
    if (unlikely(r->features + n > CODEC_MAX_REQUEST_FEATURES))
        return codec__fail(r->err, CODEC_E_TOO_MANY_FEATURES, at,
                           "%s %s: %llu features at offset %zu bring the request over %u", r->msg,
                           label(lb, sizeof lb, what, index), (unsigned long long)n, at,
                           CODEC_MAX_REQUEST_FEATURES);
    if (unlikely(r->off >= r->len))
        return codec__fail(r->err, CODEC_E_TRUNCATED, r->off,
                           "%s %s: block flags at offset %zu run past the payload end", r->msg,
                           label(lb, sizeof lb, what, index), r->off);
    uint8_t flags = r->p[r->off];
    if (unlikely(flags & ~(CODEC_BLOCK_VALUES | CODEC_BLOCK_FIXED)))
        return codec__fail(r->err, CODEC_E_BAD_VALUE, r->off,
                           "%s %s: block flags 0x%02x at offset %zu set undefined bits", r->msg,
                           label(lb, sizeof lb, what, index), flags, r->off);
    r->off++;
    bool has_values = flags & CODEC_BLOCK_VALUES, fixed = flags & CODEC_BLOCK_FIXED;
    size_t min = (size_t)n * ((fixed ? 8 : 1) + (has_values ? 4 : 0));
    if (unlikely(min > rd_left(r)))
        return codec__fail(r->err, CODEC_E_TRUNCATED, r->off,
                           "%s %s: %llu features at offset %zu need >= %zu bytes, %zu left", r->msg,
                           label(lb, sizeof lb, what, index), (unsigned long long)n, r->off, min,
                           rd_left(r));

    r->features += (uint32_t)n;
    b->n = (uint32_t)n;
    b->ids = NULL;
    b->values = has_values ? no_values : NULL;
    if (n == 0)
        return CODEC_OK;
    uint64_t *ids = codec__rd_alloc(r, (size_t)n * sizeof *ids, "ids"); /* b's, written here */
    float *values = NULL;
    if (!ids)
        return r->err ? r->err->code : CODEC_E_INTERNAL;
    b->ids = ids;
    if (has_values && !(values = codec__rd_alloc(r, (size_t)n * sizeof *values, "values")))
        return r->err ? r->err->code : CODEC_E_INTERNAL;
    if (has_values)
        b->values = values;

    if (fixed) { /* n little-endian u64 ids: copy, then one pass for the order */
        uint64_t bad = copy_fixed_ids(r->p + r->off, ids, (uint32_t)n);
        if (unlikely(bad)) {
            uint32_t i = 1;
            while (b->ids[i] > b->ids[i - 1])
                i++;
            return codec__fail(r->err, CODEC_E_UNSORTED_FEATURES, r->off + (size_t)i * 8,
                               "%s %s: id[%u] at offset %zu is not above id[%u]", r->msg,
                               label(lb, sizeof lb, what, index), i, r->off + (size_t)i * 8, i - 1);
        }
        r->off += (size_t)n * 8;
    }
    uint64_t id = 0;
    for (uint32_t i = 0; i < n && !fixed; i++) {
        uint64_t d;
        at = r->off;
        if (likely(rd_left(r) >= CODEC_MAX_VARINT))
            k = varint_decode_fast(r->p + r->off, &d);
        else
            k = codec_varint_decode(r->p + r->off, rd_left(r), &d);
        if (unlikely(k <= 0))
            return codec__fail(r->err, k ? CODEC_E_BAD_VARINT : CODEC_E_TRUNCATED, at,
                               k ? "%s %s: varint delta[%u] at offset %zu is over 10 bytes or 64 bits"
                                 : "%s %s: delta[%u] at offset %zu runs past the payload end",
                               r->msg, label(lb, sizeof lb, what, index), i, at);
        r->off += (size_t)k;
        if (unlikely(i > 0 && (d == 0 || id + d < id)))
            return codec__fail(r->err, CODEC_E_UNSORTED_FEATURES, at,
                               d ? "%s %s: delta[%u] at offset %zu overflows 64 bits"
                                 : "%s %s: delta[%u] at offset %zu is 0 (duplicate id)",
                               r->msg, label(lb, sizeof lb, what, index), i, at);
        id += d;
        ids[i] = id;
    }
    if (!has_values)
        return CODEC_OK;
    if (unlikely(rd_left(r) < (size_t)n * 4))
        return codec__fail(r->err, CODEC_E_TRUNCATED, r->off,
                           "%s %s: %llu values at offset %zu run past the payload end", r->msg,
                           label(lb, sizeof lb, what, index), (unsigned long long)n, r->off);
    for (uint32_t i = 0; i < n; i++) {
        float v = get_f32(r->p + r->off);
        if (unlikely(!f32_finite(v)))
            return codec__fail(r->err, CODEC_E_BAD_VALUE, r->off,
                               "%s %s: value[%u] at offset %zu is NaN or infinite", r->msg,
                               label(lb, sizeof lb, what, index), i, r->off);
        values[i] = v;
        r->off += 4;
    }
    return CODEC_OK;
}

/* ---- encoding --------------------------------------------------------------------- */

int codec__name_check(const char *name, const char *msg, codec_error_t *err)
{
    size_t n = strnlen(name, CODEC_MAX_NAME + 1);
    if (n == 0 || n > CODEC_MAX_NAME)
        return codec__fail(err, CODEC_E_BAD_NAME, CODEC_NO_OFFSET,
                           "%s: model name must be 1..64 bytes", msg);
    for (size_t i = 0; i < n; i++)
        if (!codec_name_char((uint8_t)name[i]))
            return codec__fail(err, CODEC_E_BAD_NAME, CODEC_NO_OFFSET,
                               "%s: model name byte %zu (0x%02x) is not [A-Za-z0-9_.-]", msg, i,
                               (uint8_t)name[i]);
    return CODEC_OK;
}

void codec__wr_name(struct wr *w, const char *name)
{
    size_t n = strlen(name);
    wr_u8(w, (uint8_t)n);
    wr_bytes(w, name, n);
}

/* Bytes the ids of b take on the wire, and (when fixed != NULL) whether they
 * go as fixed u64s: when delta varints would average more than 7 bytes an
 * id (ids spread over most of the 64-bit space, e.g. 56 hash bits under the
 * field byte), fixed ids are barely larger and decode with one memcpy. */
static size_t block_id_bytes(const codec_block_t *b, bool *fixed)
{
    size_t v = 0;
    uint64_t prev = 0;
    for (uint32_t i = 0; i < b->n; i++) {
        v += codec_varint_size(b->ids[i] - prev);
        prev = b->ids[i];
    }
    bool f = v > (size_t)b->n * 7;
    if (fixed)
        *fixed = f;
    return f ? (size_t)b->n * 8 : v;
}

int codec__block_check(const codec_block_t *b, const char *msg, const char *what, long index,
                       uint32_t *features, size_t *bytes, codec_error_t *err)
{
    char lb[32];
    if (b->n > CODEC_MAX_BLOCK_FEATURES)
        return codec__fail(err, CODEC_E_TOO_MANY_FEATURES, CODEC_NO_OFFSET,
                           "%s %s: %u features, block limit %u", msg,
                           label(lb, sizeof lb, what, index), b->n, CODEC_MAX_BLOCK_FEATURES);
    if ((uint64_t)*features + b->n > CODEC_MAX_REQUEST_FEATURES)
        return codec__fail(err, CODEC_E_TOO_MANY_FEATURES, CODEC_NO_OFFSET,
                           "%s %s: %u features bring the request over %u", msg,
                           label(lb, sizeof lb, what, index), b->n, CODEC_MAX_REQUEST_FEATURES);
    if (b->n > 0 && !b->ids)
        return codec__fail(err, CODEC_E_INTERNAL, CODEC_NO_OFFSET, "%s %s: ids is NULL", msg,
                           label(lb, sizeof lb, what, index));
    size_t sz = codec_varint_size(b->n) + 1 + (b->values ? (size_t)b->n * 4 : 0);
    for (uint32_t i = 1; i < b->n; i++)
        if (b->ids[i] <= b->ids[i - 1])
            return codec__fail(err, CODEC_E_UNSORTED_FEATURES, CODEC_NO_OFFSET,
                               "%s %s: id[%u] is not above id[%u] (use codec_sort_unique)", msg,
                               label(lb, sizeof lb, what, index), i, i - 1);
    sz += block_id_bytes(b, NULL);
    if (b->values)
        for (uint32_t i = 0; i < b->n; i++)
            if (!f32_finite(b->values[i]))
                return codec__fail(err, CODEC_E_BAD_VALUE, CODEC_NO_OFFSET,
                                   "%s %s: value[%u] is NaN or infinite", msg,
                                   label(lb, sizeof lb, what, index), i);
    *features += b->n;
    *bytes += sz;
    return CODEC_OK;
}

void codec__wr_block(struct wr *w, const codec_block_t *b)
{
    bool fixed;
    block_id_bytes(b, &fixed);
    wr_varint(w, b->n);
    wr_u8(w, (b->values ? CODEC_BLOCK_VALUES : 0) | (fixed ? CODEC_BLOCK_FIXED : 0));
    uint64_t prev = 0;
    for (uint32_t i = 0; i < b->n; i++) {
        if (fixed) {
            uint64_t le = htole64(b->ids[i]);
            wr_bytes(w, &le, 8);
        } else {
            wr_varint(w, b->ids[i] - prev);
        }
        prev = b->ids[i];
    }
    if (b->values)
        for (uint32_t i = 0; i < b->n; i++)
            wr_f32(w, b->values[i]);
}
