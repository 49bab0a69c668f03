/*
 * codec_internal.h — helpers shared by the codec's sources; not installed,
 * included by no file outside codec/.  Little-endian loads and stores, the
 * payload reader, the writer, error reporting and the feature-block coder
 * that PREDICT and TRAIN share.
 *
 * NAMES: the out-of-line helpers are defined in one file and called from
 * others, so they carry the library-private prefix codec__ (block.c:
 * codec__fail, codec__rd_*, codec__wr_name, codec__wr_block,
 * codec__name_check, codec__block_check; frame.c: codec__frame_begin,
 * codec__defined_flags) and
 * libtlcodec exports nothing but codec_* and codec__* names.  The static
 * inline helpers below are copied into each file that includes this header
 * and export nothing, so they stay short.
 *
 * CALLS go one way: varint.c <- block.c <- frame.c <- predict.c, train.c, feedback.c
 * <- msg.c (whole-frame dispatch); hash.c calls none of them.
 * likely/unlikely/cold are defined here, once for the library.
 */
#ifndef TL_CODEC_INTERNAL_H
#define TL_CODEC_INTERNAL_H

#include "codec/codec.h"

#include <stdbool.h>
#include <string.h>

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define cold __attribute__((cold))

/* ---- little-endian fixed-width fields -------------------------------------- */

static inline uint16_t get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline uint64_t get_u64(const uint8_t *p)
{
    return (uint64_t)get_u32(p) | ((uint64_t)get_u32(p + 4) << 32);
}

static inline float get_f32(const uint8_t *p)
{
    uint32_t u = get_u32(p);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void put_u64(uint8_t *p, uint64_t v)
{
    put_u32(p, (uint32_t)v);
    put_u32(p + 4, (uint32_t)(v >> 32));
}

static inline void put_f32(uint8_t *p, float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    put_u32(p, u);
}

/* finite: exponent not all ones (NaN and +-inf have it all ones). */
static inline bool f32_finite(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (u & 0x7f800000u) != 0x7f800000u;
}

/* ---- errors ------------------------------------------------------------------ */

/* Fills *err (when not NULL) and returns code.  offset is a payload offset
 * or CODEC_NO_OFFSET.  The message is cut at 127 bytes. */
int codec__fail(codec_error_t *err, int code, size_t offset, const char *fmt, ...) cold
    __attribute__((format(printf, 4, 5)));

/* ---- payload reader ------------------------------------------------------------ */

struct rd {
    const uint8_t *p; /* payload */
    size_t len;       /* payload bytes */
    size_t off;       /* next byte to read */
    codec_arena_t *arena;
    codec_error_t *err;
    const char *msg;   /* message type for error text: "PREDICT", ... */
    uint32_t features; /* features decoded so far in this request */
};

static inline size_t rd_left(const struct rd *r)
{
    return r->len - r->off;
}

/* Reads a varint field named `what`; TRUNCATED or BAD_VARINT on failure. */
int codec__rd_varint(struct rd *r, uint64_t *v, const char *what);

/* Needs n more bytes for field `what`, else TRUNCATED. */
int codec__rd_need(struct rd *r, size_t n, const char *what);

/* Reads u8 name_len + name, checks 1..64 bytes of [A-Za-z0-9_.-] and copies
 * it NUL-terminated into name. */
int codec__rd_name(struct rd *r, char name[CODEC_MAX_NAME + 1]);

/* Reads a count varint (items / samples): NO_ITEMS at 0, TOO_MANY_ITEMS over
 * CODEC_MAX_ITEMS, TRUNCATED when fewer than min_bytes_each * n bytes are
 * left (checked before the arena is touched). */
int codec__rd_count(struct rd *r, uint32_t *n, const char *what, size_t min_bytes_each);

/* Decodes one feature block; what/index name it in errors (index < 0: none). */
int codec__rd_block(struct rd *r, codec_block_t *b, const char *what, long index);

/* Allocates n bytes, 8-byte aligned, from r->arena; INTERNAL when it is full. */
void *codec__rd_alloc(struct rd *r, size_t n, const char *what);

/* Fails with TRAILING_BYTES unless the whole payload was read. */
int codec__rd_end(struct rd *r);

/* ---- writer (sizes are computed first, so writes need no checks) ---------------- */

struct wr {
    uint8_t *p; /* frame start */
    size_t off; /* next byte to write */
};

static inline void wr_varint(struct wr *w, uint64_t v)
{
    w->off += codec_varint_encode(w->p + w->off, v);
}

static inline void wr_u8(struct wr *w, uint8_t v)
{
    w->p[w->off++] = v;
}

static inline void wr_u16(struct wr *w, uint16_t v)
{
    put_u16(w->p + w->off, v);
    w->off += 2;
}

static inline void wr_u64(struct wr *w, uint64_t v)
{
    put_u64(w->p + w->off, v);
    w->off += 8;
}

static inline void wr_f32(struct wr *w, float v)
{
    put_f32(w->p + w->off, v);
    w->off += 4;
}

static inline void wr_bytes(struct wr *w, const void *src, size_t n)
{
    if (n)
        memcpy(w->p + w->off, src, n);
    w->off += n;
}

/* Checks a model name for encoding; BAD_NAME unless 1..64 allowed chars. */
int codec__name_check(const char *name, const char *msg, codec_error_t *err);
void codec__wr_name(struct wr *w, const char *name);

/* Checks a block for encoding (the decoder's rules, plus the request's
 * running feature total) and adds its encoded size to *bytes. */
int codec__block_check(const codec_block_t *b, const char *msg, const char *what, long index,
                       uint32_t *features, size_t *bytes, codec_error_t *err);
void codec__wr_block(struct wr *w, const codec_block_t *b);

/* Common tail of every encoder: FRAME_TOO_LARGE / NEED_MORE checks on the
 * payload size, and the header.  Returns CODEC_OK when the caller may write
 * the payload at buf + CODEC_HEADER_SIZE. */
int codec__frame_begin(uint8_t *buf, size_t cap, uint8_t type, uint16_t flags, uint64_t request_id,
                       size_t payload, size_t *len, codec_error_t *err);

/* Header flags defined for a type (0 for none); *known is false for a type
 * outside 1..11.  The one table of flags for the header parser and the
 * decoders that take flags. */
uint16_t codec__defined_flags(uint8_t type, bool *known);

/* Checks a weight (TRAIN_WEIGHTS, FEEDBACK): finite, in [0, CODEC_MAX_WEIGHT]. */
static inline bool codec__weight_ok(float w)
{
    return w >= 0.0f && w <= CODEC_MAX_WEIGHT; /* false for NaN; +inf is over the max */
}

/* A label: 0.0 or 1.0 (-0.0 compares equal to 0.0). */
static inline bool codec__label_ok(float l)
{
    return l == 0.0f || l == 1.0f;
}

#endif /* TL_CODEC_INTERNAL_H */
