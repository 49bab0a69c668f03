/*
 * fuzz_seal.h — how the fuzz targets of checksummed formats get past the
 * checksum: an input whose last 8 bytes are zero gets them replaced by the
 * XXH3-64 of the bytes before (little-endian), so mutations reach the checks
 * behind the checksum; any other input is taken as it is (the checksum's
 * own refusal is fuzzed too).
 */
#ifndef TL_TESTS_FUZZ_SEAL_H
#define TL_TESTS_FUZZ_SEAL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* A malloc'd copy of data[0..size) (at least 1 byte allocated), sealed as
 * above; NULL without memory. */
static inline uint8_t *fuzz_copy_sealed(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return NULL;
    memcpy(buf, data, size);
    static const uint8_t zero[8];
    if (size >= 8 && memcmp(buf + size - 8, zero, 8) == 0) {
        uint64_t h = XXH3_64bits(buf, size - 8);
        for (int i = 0; i < 8; i++)
            buf[size - 8 + i] = (uint8_t)(h >> (8 * i));
    }
    return buf;
}

#endif
