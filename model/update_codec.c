/*
 * update_codec.c — the update message's wire format (update_codec.h draws
 * it): writing the header and checksum, 1-bit quantization, the dense
 * encoder with error feedback, and the decoder that trusts nothing.
 *
 * Quantization: a chunk of C values v_i becomes one scale s and a sign per
 * value, q_i = sign(v_i) * s.  The s that minimises the squared error
 * sum (v_i - sign(v_i) s)^2 is the mean |v_i| (set the derivative
 * 2 sum (s - |v_i|) to zero), so the mean |v| is both the textbook scale and
 * the best one; the error v_i - q_i goes back to the sender's residual, so
 * nothing is lost.  Scales are computed in double and stored as f32; the
 * sender subtracts exactly the f32 the receiver adds.
 *
 * Decoding walks the buffer once for the header, lengths and checksum and
 * once for the keys (sorted, no overflow), the scales (finite, >= 0) or the
 * exact values (finite) and the sign padding; it keeps pointers into the
 * caller's buffer and allocates nothing.  update_msg_foreach walks the keys
 * again and expands the values, K floats on the stack at a time.
 *
 * THREAD SAFETY
 *   A dense encoder belongs to one thread; decoding is reentrant.
 */
#include "model/update_codec_impl.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

enum {
    H_MAGIC = 0, H_VERSION = 4, H_FLAGS = 6, H_PRODUCER = 8, H_SEQ = 16, H_BASE = 24,
    H_COUNT = 32, H_K = 36, H_CHUNK = 38, H_BODY = 40, H_NAME_LEN = 44, H_RESERVED = 46,
};
_Static_assert(H_RESERVED + 2 == UPDATE_HEADER_BYTES, "update header layout");

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint16_t get16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static float getf(const uint8_t *p) { float v; memcpy(&v, p, 4); return v; }

const char *update_errc_name(update_errc_t code)
{
    static const char *const names[] = {
        [UPDATE_OK] = "OK", [UPDATE_E_SIZE] = "SIZE", [UPDATE_E_MAGIC] = "MAGIC",
        [UPDATE_E_VERSION] = "VERSION", [UPDATE_E_FLAGS] = "FLAGS", [UPDATE_E_LIMIT] = "LIMIT",
        [UPDATE_E_LENGTH] = "LENGTH", [UPDATE_E_CHECKSUM] = "CHECKSUM", [UPDATE_E_NAME] = "NAME",
        [UPDATE_E_KEYS] = "KEYS", [UPDATE_E_ORDER] = "ORDER", [UPDATE_E_SCALE] = "SCALE",
        [UPDATE_E_VALUE] = "VALUE", [UPDATE_E_PADDING] = "PADDING",
    };
    if ((unsigned)code < sizeof names / sizeof names[0] && names[code])
        return names[code];
    return "?";
}

/* ------------------------------------------------------------- writing */

static uint64_t chunks_of(uint64_t count, uint64_t chunk) { return (count + chunk - 1) / chunk; }

/* Payload bytes after the keys: exact values, or scales and sign bits. */
static uint64_t payload_bytes(uint64_t count, uint64_t k, uint64_t chunk, uint32_t flags)
{
    if (flags & UPDATE_F_EXACT)
        return 4 * k * count;
    if (flags & UPDATE_F_LOG4)
        return 4 * k * chunks_of(count, chunk) + (k * count + 1) / 2;
    return 4 * k * chunks_of(count, chunk) + (k * count + 7) / 8;
}

size_t update__msg_bound(uint32_t count, uint32_t k, uint32_t chunk, uint32_t flags, size_t name_len)
{
    uint64_t keys = (flags & UPDATE_F_DENSE) ? 0 : 10ull * count;
    return UPDATE_HEADER_BYTES + name_len + keys + payload_bytes(count, k, chunk, flags) + 8;
}

size_t update__write_header(uint8_t *buf, uint32_t flags, uint64_t producer, uint64_t seq, uint64_t base,
                            uint32_t count, uint32_t k, uint32_t chunk, const char *model, size_t name_len)
{
    put32(buf + H_MAGIC, UPDATE_MAGIC);
    put16(buf + H_VERSION, (uint16_t)update__version_for(flags, k));
    put16(buf + H_FLAGS, (uint16_t)flags);
    put64(buf + H_PRODUCER, producer);
    put64(buf + H_SEQ, seq);
    put64(buf + H_BASE, base);
    put32(buf + H_COUNT, count);
    put16(buf + H_K, (uint16_t)k);
    put16(buf + H_CHUNK, (uint16_t)chunk);
    put32(buf + H_BODY, 0);
    put16(buf + H_NAME_LEN, (uint16_t)name_len);
    put16(buf + H_RESERVED, 0);
    memcpy(buf + UPDATE_HEADER_BYTES, model, name_len);
    return UPDATE_HEADER_BYTES + name_len;
}

size_t update__finish(uint8_t *buf, size_t name_end, size_t len)
{
    put32(buf + H_BODY, (uint32_t)(len - name_end));
    put64(buf + len, XXH3_64bits(buf, len));
    return len + 8;
}

size_t update__put_varint(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

int update__name_check(const char *name, size_t *len_out)
{
    if (!name)
        return -EINVAL;
    size_t len = strnlen(name, UPDATE_NAME_MAX + 1);
    if (len == 0 || len > UPDATE_NAME_MAX)
        return -EINVAL;
    for (size_t i = 0; i < len; i++)
        if (name[i] < 0x21 || name[i] > 0x7e)
            return -EINVAL;
    *len_out = len;
    return 0;
}

void update__quantize(float *v, uint32_t n, uint32_t chunk, uint8_t *scales_out, uint8_t *bits, uint64_t bit0)
{
    for (uint32_t c0 = 0, ci = 0; c0 < n; c0 += chunk, ci++) {
        uint32_t c1 = n - c0 < chunk ? n : c0 + chunk;
        double sum = 0;
        for (uint32_t i = c0; i < c1; i++)
            sum += fabsf(v[i]);
        float s = (float)(sum / (double)(c1 - c0));
        memcpy(scales_out + 4 * (size_t)ci, &s, 4);
        for (uint32_t i = c0; i < c1; i++) {
            if (signbit(v[i]) && v[i] != 0.0f) {
                uint64_t b = bit0 + i;
                bits[b >> 3] |= (uint8_t)(1u << (b & 7));
                v[i] = v[i] + s;
            } else {
                v[i] = v[i] - s;
            }
        }
    }
}

void update__quantize_nonneg(float *v, uint32_t n, uint32_t chunk, uint8_t *scales_out, uint8_t *bits,
                             uint64_t bit0)
{
    for (uint32_t c0 = 0, ci = 0; c0 < n; c0 += chunk, ci++) {
        uint32_t c1 = n - c0 < chunk ? n : c0 + chunk;
        double sum = 0;
        for (uint32_t i = c0; i < c1; i++)
            sum += v[i] > 0 ? v[i] : 0;
        float s = (float)(sum / (double)(c1 - c0));
        memcpy(scales_out + 4 * (size_t)ci, &s, 4);
        for (uint32_t i = c0; i < c1; i++) {
            if (s > 0 && v[i] >= s) {
                uint64_t b = bit0 + i;
                bits[b >> 3] |= (uint8_t)(1u << (b & 7));
                v[i] = v[i] - s;
            }
        }
    }
}

void update__quantize_log4(float *v, uint32_t n, uint32_t chunk, uint8_t *scales_out, uint8_t *nibbles,
                           uint64_t nib0, bool onesided)
{
    for (uint32_t c0 = 0, ci = 0; c0 < n; c0 += chunk, ci++) {
        uint32_t c1 = n - c0 < chunk ? n : c0 + chunk;
        float s = 0;
        for (uint32_t i = c0; i < c1; i++) {
            float a = onesided ? v[i] : fabsf(v[i]);
            s = a > s ? a : s;
        }
        memcpy(scales_out + 4 * (size_t)ci, &s, 4);
        for (uint32_t i = c0; i < c1; i++) {
            float a = onesided ? (v[i] > 0 ? v[i] : 0) : fabsf(v[i]);
            unsigned e = 0;
            while (e < UPDATE_LOG4_ZERO && ldexpf(s, -(int)e) > a)
                e++; /* the first level not above a (7: none, a is under the least) */
            if (!onesided) { /* the nearer of it and the level above */
                float lo = e == UPDATE_LOG4_ZERO ? 0.0f : ldexpf(s, -(int)e);
                float hi = e == 0 ? lo : ldexpf(s, -(int)e + 1);
                if (hi - a < a - lo)
                    e--;
            }
            unsigned nib = e | (!onesided && signbit(v[i]) && v[i] != 0.0f ? 8u : 0u);
            if (e == UPDATE_LOG4_ZERO)
                nib = UPDATE_LOG4_ZERO;
            uint64_t b = nib0 + i;
            nibbles[b >> 1] |= (uint8_t)(nib << ((b & 1) * 4));
            v[i] -= update__log4_value(s, nib);
        }
    }
}

/* ------------------------------------------------------------- decoding */

__attribute__((cold, format(printf, 4, 5))) static int fail(update_error_t *err, update_errc_t code,
                                                            size_t off, const char *fmt, ...)
{
    if (err) {
        err->code = code;
        err->offset = off;
        int n = snprintf(err->msg, sizeof err->msg, "update message: %s at byte %zu: ",
                         update_errc_name(code), off);
        if (n > 0 && (size_t)n < sizeof err->msg) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(err->msg + n, sizeof err->msg - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return -EBADMSG;
}

static int check_header(const uint8_t *buf, size_t len, update_msg_t *m, update_error_t *err)
{
    if (len < 4)
        return fail(err, UPDATE_E_SIZE, 0, "%zu bytes, under the %u-byte header", len, UPDATE_HEADER_BYTES);
    if (get32(buf + H_MAGIC) != UPDATE_MAGIC)
        return fail(err, UPDATE_E_MAGIC, H_MAGIC, "magic 0x%08x is not \"TLUP\"", get32(buf));
    if (len < UPDATE_HEADER_BYTES + 8)
        return fail(err, UPDATE_E_SIZE, 0, "%zu bytes, under the %u-byte header and checksum", len,
                    UPDATE_HEADER_BYTES + 8);
    unsigned ver = get16(buf + H_VERSION);
    if (ver != UPDATE_FORMAT_VERSION && ver != UPDATE_FORMAT_VERSION_V1)
        return fail(err, UPDATE_E_VERSION, H_VERSION, "format version %u, this build reads %u and %u", ver,
                    UPDATE_FORMAT_VERSION_V1, UPDATE_FORMAT_VERSION);
    m->flags = get16(buf + H_FLAGS);
    if (m->flags & ~UPDATE_F_ALL)
        return fail(err, UPDATE_E_FLAGS, H_FLAGS, "unknown flag bits 0x%x", m->flags & ~UPDATE_F_ALL);
    if ((m->flags & UPDATE_F_NONNEG_LAST) && (m->flags & (UPDATE_F_EXACT | UPDATE_F_DENSE)))
        return fail(err, UPDATE_E_FLAGS, H_FLAGS, "flag NONNEG_LAST with EXACT or DENSE (flags 0x%x)", m->flags);
    if ((m->flags & UPDATE_F_NONNEG_HALF) &&
        (m->flags & (UPDATE_F_EXACT | UPDATE_F_DENSE | UPDATE_F_NONNEG_LAST)))
        return fail(err, UPDATE_E_FLAGS, H_FLAGS, "flag NONNEG_HALF with EXACT, DENSE or NONNEG_LAST (flags 0x%x)",
                    m->flags);
    if ((m->flags & UPDATE_F_NONNEG_HALF) && ver == UPDATE_FORMAT_VERSION_V1)
        return fail(err, UPDATE_E_FLAGS, H_FLAGS, "flag NONNEG_HALF in a format version 1 message");
    if (get16(buf + H_RESERVED) != 0)
        return fail(err, UPDATE_E_FLAGS, H_RESERVED, "reserved field is %u, not 0", get16(buf + H_RESERVED));
    m->producer = get64(buf + H_PRODUCER);
    m->seq = get64(buf + H_SEQ);
    m->base_version = get64(buf + H_BASE);
    m->count = get32(buf + H_COUNT);
    m->k = get16(buf + H_K);
    m->chunk = get16(buf + H_CHUNK);
    m->model_len = get16(buf + H_NAME_LEN);
    const unsigned max_k = ver == UPDATE_FORMAT_VERSION_V1 ? UPDATE_V1_MAX_K : UPDATE_MAX_K;
    if (m->k == 0 || m->k > max_k || ((m->flags & UPDATE_F_DENSE) && m->k != 1))
        return fail(err, UPDATE_E_LIMIT, H_K, "K %u outside 1..%u (1 for a dense vector; format version %u)",
                    m->k, max_k, ver);
    if ((m->flags & UPDATE_F_NONNEG_HALF) && (m->k & 1))
        return fail(err, UPDATE_E_LIMIT, H_K, "K %u is odd: NONNEG_HALF needs two halves", m->k);
    if (m->chunk == 0)
        return fail(err, UPDATE_E_LIMIT, H_CHUNK, "chunk size 0");
    if (m->count > UPDATE_MAX_COUNT)
        return fail(err, UPDATE_E_LIMIT, H_COUNT, "count %u over the limit %u", m->count, UPDATE_MAX_COUNT);
    if (m->model_len == 0 || m->model_len > UPDATE_NAME_MAX)
        return fail(err, UPDATE_E_LIMIT, H_NAME_LEN, "model name length %u outside 1..%u", m->model_len,
                    UPDATE_NAME_MAX);
    uint64_t body = get32(buf + H_BODY);
    uint64_t want = (uint64_t)UPDATE_HEADER_BYTES + m->model_len + body + 8;
    if (want != len)
        return fail(err, UPDATE_E_SIZE, H_BODY, "header says %llu bytes (body %llu), the buffer holds %zu",
                    (unsigned long long)want, (unsigned long long)body, len);
    if ((m->flags & UPDATE_F_PART) && !(m->flags & UPDATE_F_DENSE))
        return fail(err, UPDATE_E_FLAGS, H_FLAGS, "flag PART without DENSE (flags 0x%x)", m->flags);
    if ((m->flags & UPDATE_F_PART) && ver == UPDATE_FORMAT_VERSION_V1)
        return fail(err, UPDATE_E_FLAGS, H_FLAGS, "flag PART in a format version 1 message");
    if ((m->flags & UPDATE_F_LOG4) && (m->flags & UPDATE_F_EXACT))
        return fail(err, UPDATE_E_FLAGS, H_FLAGS, "flag LOG4 with EXACT (flags 0x%x)", m->flags);
    if ((m->flags & UPDATE_F_LOG4) && ver == UPDATE_FORMAT_VERSION_V1)
        return fail(err, UPDATE_E_FLAGS, H_FLAGS, "flag LOG4 in a format version 1 message");
    if ((m->flags & UPDATE_F_RICE) && (m->flags & UPDATE_F_DENSE))
        return fail(err, UPDATE_E_FLAGS, H_FLAGS, "flag RICE with DENSE (flags 0x%x)", m->flags);
    if ((m->flags & UPDATE_F_RICE) && ver == UPDATE_FORMAT_VERSION_V1)
        return fail(err, UPDATE_E_FLAGS, H_FLAGS, "flag RICE in a format version 1 message");
    uint64_t pay = payload_bytes(m->count, m->k, m->chunk, m->flags);
    uint64_t part = (m->flags & UPDATE_F_PART) ? UPDATE_PART_BYTES : 0;
    uint64_t keys_min = (m->flags & UPDATE_F_DENSE) ? part
                        : !(m->flags & UPDATE_F_RICE) ? m->count
                        : m->count ? 9 + ((uint64_t)m->count - 1 + 7) / 8 : 0; /* a bit a gap */
    uint64_t keys_max = (m->flags & UPDATE_F_DENSE) ? part : 10ull * m->count;
    if (body < pay + keys_min || body > pay + keys_max)
        return fail(err, UPDATE_E_LENGTH, H_BODY,
                    "body of %llu bytes cannot hold %u keys with K %u, chunk %u (%llu payload bytes)",
                    (unsigned long long)body, m->count, m->k, m->chunk, (unsigned long long)pay);
    uint64_t want_sum = get64(buf + len - 8), sum = XXH3_64bits(buf, len - 8);
    if (want_sum != sum)
        return fail(err, UPDATE_E_CHECKSUM, len - 8, "checksum %016llx, the bytes hash to %016llx",
                    (unsigned long long)want_sum, (unsigned long long)sum);
    m->model = (const char *)buf + UPDATE_HEADER_BYTES;
    for (uint32_t i = 0; i < m->model_len; i++)
        if (m->model[i] < 0x21 || m->model[i] > 0x7e)
            return fail(err, UPDATE_E_NAME, UPDATE_HEADER_BYTES + i,
                        "model name byte %u is 0x%02x, not printable ASCII", i, (uint8_t)m->model[i]);
    m->end = buf + len - 8;
    m->payload = m->end - pay;
    m->keys = (m->flags & UPDATE_F_DENSE) ? NULL : buf + UPDATE_HEADER_BYTES + m->model_len;
    m->dense_total = m->count;
    m->dense_offset = 0;
    if (part) {
        size_t at = UPDATE_HEADER_BYTES + m->model_len;
        m->dense_total = get32(buf + at);
        m->dense_offset = get32(buf + at + 4);
        if (m->count == 0 || m->dense_total > UPDATE_MAX_COUNT ||
            (uint64_t)m->dense_offset + m->count > m->dense_total)
            return fail(err, UPDATE_E_LIMIT, at,
                        "part of %u values at offset %u of a vector of %u: must be a non-empty "
                        "range inside it (at most %u)",
                        m->count, m->dense_offset, m->dense_total, UPDATE_MAX_COUNT);
    }
    return 0;
}

int update_msg_decode(const uint8_t *buf, size_t len, update_msg_t *msg, update_error_t *err)
{
    update_msg_t m = {0};
    int rc = check_header(buf, len, &m, err);
    if (rc)
        return rc;
    if (m.keys) {
        update_key_reader_t kr;
        update__keys_begin(&kr, m.keys, m.payload, m.flags & UPDATE_F_RICE);
        uint64_t key;
        for (uint32_t i = 0; i < m.count; i++)
            if (update__keys_next(&kr, &key) != 0)
                return fail(err, kr.code, (size_t)(kr.bad_at - buf), "key %u: %s", i, kr.why);
        if (update__keys_end(&kr) != 0)
            return fail(err, kr.code, (size_t)(kr.bad_at - buf), "after key %u: %s", m.count, kr.why);
    }
    if (m.flags & UPDATE_F_EXACT) {
        for (uint64_t i = 0; i < (uint64_t)m.count * m.k; i++) {
            float v = getf(m.payload + 4 * i);
            if (!isfinite(v))
                return fail(err, UPDATE_E_VALUE, (size_t)(m.payload - buf) + 4 * i,
                            "value %llu (key %llu, column %llu) is not finite", (unsigned long long)i,
                            (unsigned long long)(i / m.k), (unsigned long long)(i % m.k));
        }
    } else {
        uint64_t ns = (uint64_t)m.k * chunks_of(m.count, m.chunk);
        for (uint64_t i = 0; i < ns; i++) {
            float s = getf(m.payload + 4 * i);
            if (!isfinite(s) || signbit(s))
                return fail(err, UPDATE_E_SCALE, (size_t)(m.payload - buf) + 4 * i,
                            "scale %llu is %g: must be finite and >= 0", (unsigned long long)i, (double)s);
        }
        uint64_t nbits = (uint64_t)m.k * m.count;
        const uint8_t *nibs = m.payload + 4 * ns;
        for (uint32_t j = 0; (m.flags & UPDATE_F_LOG4) && j < m.k; j++) {
            if (!update__onesided(m.flags, m.k, j))
                continue;
            for (uint64_t i = (uint64_t)j * m.count; i < (uint64_t)(j + 1) * m.count; i++)
                if ((nibs[i >> 1] >> ((i & 1) * 4)) & 8u)
                    return fail(err, UPDATE_E_VALUE, (size_t)(nibs + (i >> 1) - buf),
                                "value of key %llu, column %u is negative: the column is one-sided",
                                (unsigned long long)(i - (uint64_t)j * m.count), j);
        }
        if ((m.flags & UPDATE_F_LOG4) && (nbits & 1)) {
            const uint8_t *last = m.end - 1;
            if (*last >> 4)
                return fail(err, UPDATE_E_PADDING, (size_t)(last - buf), "padding nibble 0x%x not zero",
                            *last >> 4);
        } else if (!(m.flags & UPDATE_F_LOG4) && (nbits & 7)) {
            const uint8_t *last = m.end - 1;
            if (*last >> (nbits & 7))
                return fail(err, UPDATE_E_PADDING, (size_t)(last - buf), "sign padding bits 0x%02x not zero",
                            *last >> (nbits & 7));
        }
    }
    *msg = m;
    return 0;
}

int update_msg_foreach(const update_msg_t *m, int (*fn)(void *ctx, uint64_t key, const float *vals), void *ctx)
{
    float vals[UPDATE_MAX_K];
    update_key_reader_t kr;
    if (m->keys)
        update__keys_begin(&kr, m->keys, m->payload, m->flags & UPDATE_F_RICE);
    uint64_t key = 0;
    uint64_t nchunks = chunks_of(m->count, m->chunk);
    const uint8_t *bits = m->payload + 4 * (uint64_t)m->k * nchunks;
    for (uint32_t i = 0; i < m->count; i++) {
        if (m->keys) {
            if (update__keys_next(&kr, &key) != 0)
                return -EBADMSG; /* not a decoded message */
        } else {
            key = (uint64_t)m->dense_offset + i;
        }
        if (m->flags & UPDATE_F_EXACT) {
            memcpy(vals, m->payload + 4 * (uint64_t)i * m->k, 4 * (size_t)m->k);
        } else if (m->flags & UPDATE_F_LOG4) {
            for (uint32_t j = 0; j < m->k; j++) {
                float s = getf(m->payload + 4 * (j * nchunks + i / m->chunk));
                uint64_t b = (uint64_t)j * m->count + i;
                vals[j] = update__log4_value(s, (bits[b >> 1] >> ((b & 1) * 4)) & 15u);
            }
        } else {
            for (uint32_t j = 0; j < m->k; j++) {
                float s = getf(m->payload + 4 * (j * nchunks + i / m->chunk));
                uint64_t b = (uint64_t)j * m->count + i;
                bool set = (bits[b >> 3] >> (b & 7)) & 1;
                if (update__onesided(m->flags, m->k, j))
                    vals[j] = set ? s : 0.0f;
                else
                    vals[j] = set ? -s : s;
            }
        }
        int rc = fn(ctx, key, vals);
        if (rc)
            return rc;
    }
    return 0;
}

struct dense_ctx {
    float *out;
};

static int dense_put(void *ctx, uint64_t key, const float *vals)
{
    ((struct dense_ctx *)ctx)->out[key] = vals[0];
    return 0;
}

int update_msg_dense(const update_msg_t *msg, float *out, uint32_t n)
{
    if (!(msg->flags & UPDATE_F_DENSE) || msg->dense_total != n || msg->k != 1 ||
        (uint64_t)msg->dense_offset + msg->count > n)
        return -EINVAL;
    struct dense_ctx c = {out};
    return update_msg_foreach(msg, dense_put, &c);
}

size_t update_msg_span(const uint8_t *buf, size_t len)
{
    if (len < UPDATE_HEADER_BYTES + 8)
        return 0;
    uint64_t span = (uint64_t)UPDATE_HEADER_BYTES + get16(buf + H_NAME_LEN) + get32(buf + H_BODY) + 8;
    return span <= len ? (size_t)span : 0;
}

/* --------------------------------------------------------- dense encoder */

struct update_dense {
    uint32_t n;         /* vector length */
    uint32_t chunk;     /* values per scale */
    uint64_t producer;  /* in every message */
    uint64_t next_seq;  /* sequence of the next message */
    size_t name_len;
    char model[UPDATE_NAME_MAX];
    float *err;         /* n: quantization error carried to the next vector */
    float *work;        /* n: v + err while quantizing */
};

int update_dense_create(update_dense_t **out, uint32_t n, uint32_t chunk, uint64_t producer, uint64_t first_seq,
                        const char *model)
{
    size_t name_len;
    if (n == 0 || n > UPDATE_MAX_COUNT || chunk == 0 || chunk > 0xffff || update__name_check(model, &name_len))
        return -EINVAL;
    update_dense_t *d = calloc(1, sizeof *d);
    if (!d)
        return -ENOMEM;
    d->err = calloc(n, sizeof(float));
    d->work = calloc(n, sizeof(float));
    if (!d->err || !d->work) {
        update_dense_destroy(d);
        return -ENOMEM;
    }
    d->n = n;
    d->chunk = chunk;
    d->producer = producer;
    d->next_seq = first_seq;
    d->name_len = name_len;
    memcpy(d->model, model, name_len);
    *out = d;
    return 0;
}

void update_dense_destroy(update_dense_t *d)
{
    if (!d)
        return;
    free(d->err);
    free(d->work);
    free(d);
}

size_t update_dense_bound(const update_dense_t *d, uint32_t flags)
{
    return update_dense_part_bound(d, d->n, flags);
}

size_t update_dense_part_bound(const update_dense_t *d, uint32_t count, uint32_t flags)
{
    size_t part = count < d->n ? UPDATE_PART_BYTES : 0;
    return update__msg_bound(count, 1, d->chunk, (flags & (UPDATE_F_EXACT | UPDATE_F_LOG4)) | UPDATE_F_DENSE,
                             d->name_len) + part;
}

const float *update_dense_error(const update_dense_t *d) { return d->err; }

uint32_t update_dense_chunk(const update_dense_t *d) { return d->chunk; }

void update_dense_set_next_seq(update_dense_t *d, uint64_t seq) { d->next_seq = seq; }

void update_dense_clear_error(update_dense_t *d) { memset(d->err, 0, sizeof(float) * d->n); }

void update_dense_set_error(update_dense_t *d, const float *err)
{
    memcpy(d->err, err, sizeof(float) * d->n);
}

long update_dense_encode(update_dense_t *d, const float *v, uint32_t flags, uint64_t base_version, uint8_t *buf,
                         size_t cap)
{
    return update_dense_encode_part(d, v, 0, d->n, flags, base_version, buf, cap);
}

long update_dense_encode_part(update_dense_t *d, const float *v, uint32_t offset, uint32_t count,
                              uint32_t flags, uint64_t base_version, uint8_t *buf, size_t cap)
{
    if ((flags & ~(UPDATE_F_EXACT | UPDATE_F_LOG4)) || (flags & UPDATE_F_EXACT && flags & UPDATE_F_LOG4))
        return -EINVAL;
    if (count == 0 || offset > d->n || count > d->n - offset)
        return -EINVAL;
    size_t need = update_dense_part_bound(d, count, flags);
    flags |= UPDATE_F_DENSE | (count < d->n ? UPDATE_F_PART : 0);
    if (cap < need)
        return -ENOBUFS;
    const float *vp = v + offset;
    for (uint32_t i = 0; i < count; i++)
        if (!isfinite(vp[i]))
            return -EINVAL;
    size_t off = update__write_header(buf, flags, d->producer, d->next_seq, base_version, count, 1, d->chunk,
                                      d->model, d->name_len);
    size_t name_end = off;
    if (flags & UPDATE_F_PART) {
        put32(buf + off, d->n);
        put32(buf + off + 4, offset);
        off += UPDATE_PART_BYTES;
    }
    if (flags & UPDATE_F_EXACT) {
        memcpy(buf + off, vp, 4 * (size_t)count);
        off += 4 * (size_t)count;
    } else {
        float *work = d->work + offset, *err = d->err + offset;
        for (uint32_t i = 0; i < count; i++)
            work[i] = vp[i] + err[i];
        uint64_t nchunks = chunks_of(count, d->chunk);
        uint8_t *bits = buf + off + 4 * nchunks;
        size_t vbytes = flags & UPDATE_F_LOG4 ? ((size_t)count + 1) / 2 : ((size_t)count + 7) / 8;
        memset(bits, 0, vbytes);
        if (flags & UPDATE_F_LOG4)
            update__quantize_log4(work, count, d->chunk, buf + off, bits, 0, false);
        else
            update__quantize(work, count, d->chunk, buf + off, bits, 0);
        memcpy(err, work, 4 * (size_t)count);
        off += 4 * nchunks + vbytes;
    }
    d->next_seq++;
    return (long)update__finish(buf, name_end, off);
}
