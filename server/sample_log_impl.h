/*
 * sample_log_impl.h — private to server/sample_log*.c: the record layout's
 * constants, the byte helpers and the file helpers that the writer
 * (sample_log.c) and the reader (sample_log_read.c) share.  Not a public
 * header: the trainer includes sample_log.h only.
 */
#ifndef TL_SERVER_SAMPLE_LOG_IMPL_H
#define TL_SERVER_SAMPLE_LOG_IMPL_H

#include "sample_log.h"

#include <endian.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <xxhash.h>

#define SEG_NAME_LEN 25                    /* 20 digits + ".slog" */
#define BATCH_MAX ((size_t)1 << 30)        /* bytes of one append's batch */
#define BODY_MAX (SAMPLE_LOG_REC_MAX - 16u) /* largest body_len */
#define FLAG_WEIGHTS 0x1u

/* Fills *err (may be NULL) and returns rc. */
int sample_log__fail(sample_log_error_t *err, int rc, sample_log_errc_t code, const char *file,
                     int64_t offset, const char *fmt, ...)
    __attribute__((cold, format(printf, 6, 7)));

/* The segments of dir, first positions ascending, into a malloc'ed *out
 * (caller frees); *cap (may be NULL) gets its capacity in entries. */
int sample_log__list_segments(const char *dir, uint64_t **out, size_t *n, size_t *cap);

/* pread of exactly n bytes unless the file ends: bytes read or -errno. */
ssize_t sample_log__pread_full(int fd, void *buf, size_t n, uint64_t off);

/* Grows *buf (realloc, doubling from 64 KiB) to at least need bytes: 0 or -ENOMEM. */
int sample_log__grow(uint8_t **buf, size_t *cap, size_t need);

/* inline defs */

static inline uint32_t get32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return le32toh(v);
}

static inline uint64_t get64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return le64toh(v);
}

static inline void put32(uint8_t *p, uint32_t v)
{
    v = htole32(v);
    memcpy(p, &v, 4);
}

static inline void put64(uint8_t *p, uint64_t v)
{
    v = htole64(v);
    memcpy(p, &v, 8);
}

static inline uint32_t check_of(const uint8_t *rec, uint32_t body_len)
{
    return (uint32_t)XXH3_64bits(rec + 8, 8 + (size_t)body_len);
}

static inline void seg_name(char out[SEG_NAME_LEN + 1], uint64_t first)
{
    snprintf(out, SEG_NAME_LEN + 1, "%020llu.slog", (unsigned long long)first);
}

#endif /* TL_SERVER_SAMPLE_LOG_IMPL_H */
