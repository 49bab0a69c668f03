/*
 * le_bytes.h — little-endian integers in byte buffers, for the side files an
 * online export writes (SYNC_STATE, TRAINFILE_MARKS): the same bytes on
 * every host, read back from unaligned offsets.
 */
#ifndef TL_SERVER_LE_BYTES_H
#define TL_SERVER_LE_BYTES_H

#include <stdint.h>

static inline void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t get_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

#endif
