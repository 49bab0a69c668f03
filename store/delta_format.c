/*
 * delta_format.c — the delta shard file and its verifier.
 *
 * A DELTA VERSION DIRECTORY holds
 *   MANIFEST          as a snapshot's (manifest.h) with version_kind DELTA,
 *                     format_version 2, parent_version, producer, and per
 *                     shard: file, entries (= upserts), deletes, bytes, xxh3
 *   delta-00000.tld   one file per shard, named "delta-%05u.tld"
 *   ...               (no dense files: a delta changes sparse keys only)
 *
 * A DELTA SHARD FILE is a 64-byte header, the upsert records sorted by key,
 * then the deleted keys sorted, all little-endian:
 *
 *   0               8        12       16       20       24       28       32
 *   +---------------+--------+--------+--------+--------+--------+--------+
 *   | magic         | format | shard  | shard  | value  | dtype  | value  |
 *   | "TLDELTA1"    | version| index  | count  | floats | 0 f32  | bytes  |
 *   | (no NUL)      | = 1    |        |        | = K    | 1 f16  |        |
 *   +---------------+--------+--------+--------+--------+--------+--------+
 *   32              40              48              56               64
 *   +---------------+---------------+---------------+----------------+
 *   | upserts (u64) | deletes (u64) | zero padding  | XXH3_64bits of |
 *   |               |               |               | bytes 0..55    |
 *   +---------------+---------------+---------------+----------------+
 *   64                 upsert 0 = { u64 key | K x f32 or K x f16 }, R = 8 + value_bytes
 *   64 + R             upsert 1 ...       (the snapshot record layout)
 *   64 + U*R           delete 0 = u64 key
 *   64 + U*R + 8       delete 1 ...
 *   file size = 64 + U*R + D*8, exactly
 *
 * Upsert keys are strictly ascending, delete keys strictly ascending, no
 * key is in both lists, and every key belongs to the file's shard.  The
 * magic differs from a snapshot shard's ("TLSHARD1"), so neither loader can
 * take one file for the other.
 *
 * VERIFICATION (store__delta_check_file), cheapest first: size against the
 * manifest (TRUNCATED / SIZE), XXH3 of the whole file (CHECKSUM), header
 * magic, format, checksum and padding (HEADER), header fields against the
 * manifest (MISMATCH), then one pass over the records: ownership
 * (WRONG_SHARD), order and uniqueness (DUPLICATE: "out of order" or
 * "twice"), values (VALUE), then a merge of the two sorted lists for a key
 * both upserted and deleted (DUPLICATE).  Every error names the file and
 * the byte offset of the record at fault.
 *
 * THREAD SAFETY: reentrant; no global state.
 */
#include "delta_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

static uint32_t value_bytes_of(const manifest_t *m)
{
    return m->value_floats * (m->dtype == STORE_DTYPE_F16 ? 2u : 4u);
}

void store__delta_header_encode(const manifest_t *m, uint32_t i, uint64_t upserts,
                                uint64_t deletes, uint8_t out[SHARD_HEADER_BYTES])
{
    memset(out, 0, SHARD_HEADER_BYTES);
    memcpy(out + D_MAGIC, DELTA_SHARD_MAGIC, 8);
    put_le32(out + D_FORMAT, DELTA_FORMAT_VERSION);
    put_le32(out + D_INDEX, i);
    put_le32(out + D_COUNT, m->shard_count);
    put_le32(out + D_FLOATS, m->value_floats);
    put_le32(out + D_DTYPE, (uint32_t)m->dtype);
    put_le32(out + D_VBYTES, value_bytes_of(m));
    put_le64(out + D_UPSERTS, upserts);
    put_le64(out + D_DELETES, deletes);
    put_le64(out + D_XXH3, XXH3_64bits(out, D_XXH3));
}

/* Header checks after the file's checksum held. */
static int check_header(const manifest_t *m, uint32_t i, const uint8_t *h, const char *file,
                        store_error_t *err)
{
    if (memcmp(h + D_MAGIC, DELTA_SHARD_MAGIC, 8) != 0) {
        store__snap_fail(err, STORE_E_HEADER, file, D_MAGIC,
                         "magic is not \"" DELTA_SHARD_MAGIC "\"%s",
                         memcmp(h, SNAPSHOT_SHARD_MAGIC, 8) == 0 ? " (a full snapshot's shard)"
                                                                 : "");
        return -1;
    }
    if (get_le32(h + D_FORMAT) != DELTA_FORMAT_VERSION) {
        store__snap_fail(err, STORE_E_HEADER, file, D_FORMAT, "format version is %" PRIu32
                         ", expected %u", get_le32(h + D_FORMAT), DELTA_FORMAT_VERSION);
        return -1;
    }
    uint64_t sum = XXH3_64bits(h, D_XXH3);
    if (get_le64(h + D_XXH3) != sum) {
        store__snap_fail(err, STORE_E_HEADER, file, D_XXH3,
                         "header checksum is 0x%016" PRIx64 ", bytes 0..55 hash to 0x%016" PRIx64,
                         get_le64(h + D_XXH3), sum);
        return -1;
    }
    if (get_le64(h + D_PAD) != 0) {
        store__snap_fail(err, STORE_E_HEADER, file, D_PAD, "padding is not zero");
        return -1;
    }
    const struct {
        unsigned off;
        uint64_t got, want;
        const char *what;
    } f[] = {
        {D_INDEX, get_le32(h + D_INDEX), i, "shard index"},
        {D_COUNT, get_le32(h + D_COUNT), m->shard_count, "shard count"},
        {D_FLOATS, get_le32(h + D_FLOATS), m->value_floats, "value floats (K)"},
        {D_DTYPE, get_le32(h + D_DTYPE), (uint64_t)m->dtype, "dtype"},
        {D_VBYTES, get_le32(h + D_VBYTES), value_bytes_of(m), "value bytes"},
        {D_UPSERTS, get_le64(h + D_UPSERTS), m->shards[i].entries, "upserts"},
        {D_DELETES, get_le64(h + D_DELETES), m->shards[i].deletes, "deletes"},
    };
    for (size_t j = 0; j < sizeof f / sizeof f[0]; j++) {
        if (f[j].got != f[j].want) {
            store__snap_fail(err, STORE_E_MISMATCH, file, f[j].off,
                             "header %s is %" PRIu64 ", the manifest says %" PRIu64, f[j].what,
                             f[j].got, f[j].want);
            return -1;
        }
    }
    return 0;
}

int store__delta_check_file(const manifest_t *m, uint32_t i, const uint8_t *p, size_t n,
                            store_error_t *err)
{
    const manifest_shard_t *ms = &m->shards[i];
    const char *file = ms->file;
    if ((uint64_t)n < ms->bytes) {
        store__snap_fail(err, STORE_E_TRUNCATED, file, (int64_t)n,
                         "%zu bytes, the manifest says %" PRIu64, n, ms->bytes);
        return -1;
    }
    if ((uint64_t)n > ms->bytes) {
        store__snap_fail(err, STORE_E_SIZE, file, (int64_t)ms->bytes,
                         "%zu bytes, the manifest says %" PRIu64, n, ms->bytes);
        return -1;
    }
    uint64_t sum = XXH3_64bits(p, n);
    if (sum != ms->xxh3) {
        store__snap_fail(err, STORE_E_CHECKSUM, file, -1,
                         "bytes 0..%zu hash to 0x%016" PRIx64 ", the manifest says 0x%016" PRIx64,
                         n, sum, ms->xxh3);
        return -1;
    }
    /* manifest decode checked bytes == 64 + entries * R + deletes * 8 */
    if (check_header(m, i, p, file, err) != 0)
        return -1;
    const size_t rec = 8 + value_bytes_of(m);
    const uint8_t *up = p + SHARD_HEADER_BYTES;
    const uint8_t *del = up + ms->entries * rec;
    const uint32_t shards = m->shard_count;
    for (uint64_t r = 0; r < ms->entries; r++) {
        const uint64_t off = SHARD_HEADER_BYTES + r * rec;
        uint64_t key = get_le64(up + r * rec);
        if (store__shard_of_key(key, shards) != i) {
            store__snap_fail(err, STORE_E_WRONG_SHARD, file, (int64_t)off,
                             "upsert key 0x%" PRIx64 " belongs to shard %" PRIu32, key,
                             store__shard_of_key(key, shards));
            return -1;
        }
        if (r > 0) {
            uint64_t prev = get_le64(up + (r - 1) * rec);
            if (key <= prev) {
                store__snap_fail(err, STORE_E_DUPLICATE, file, (int64_t)off,
                                 "upsert key 0x%" PRIx64 " %s (previous 0x%" PRIx64 ")", key,
                                 key == prev ? "appears twice" : "is out of order", prev);
                return -1;
            }
        }
    }
    uint32_t which = 0;
    size_t bad = store__snap_first_bad_value(up, (size_t)ms->entries, rec, m->value_floats,
                                             m->dtype, &which);
    if (bad < ms->entries) {
        store__snap_fail_value(err, file, SHARD_HEADER_BYTES + bad * rec, up + bad * rec, which,
                               m->dtype);
        return -1;
    }
    const uint64_t del_at = SHARD_HEADER_BYTES + ms->entries * rec;
    uint64_t u = 0; /* merge cursor into the upserts */
    for (uint64_t r = 0; r < ms->deletes; r++) {
        const uint64_t off = del_at + r * 8;
        uint64_t key = get_le64(del + r * 8);
        if (store__shard_of_key(key, shards) != i) {
            store__snap_fail(err, STORE_E_WRONG_SHARD, file, (int64_t)off,
                             "deleted key 0x%" PRIx64 " belongs to shard %" PRIu32, key,
                             store__shard_of_key(key, shards));
            return -1;
        }
        if (r > 0) {
            uint64_t prev = get_le64(del + (r - 1) * 8);
            if (key <= prev) {
                store__snap_fail(err, STORE_E_DUPLICATE, file, (int64_t)off,
                                 "deleted key 0x%" PRIx64 " %s (previous 0x%" PRIx64 ")", key,
                                 key == prev ? "appears twice" : "is out of order", prev);
                return -1;
            }
        }
        while (u < ms->entries && get_le64(up + u * rec) < key)
            u++;
        if (u < ms->entries && get_le64(up + u * rec) == key) {
            store__snap_fail(err, STORE_E_DUPLICATE, file, (int64_t)off,
                             "key 0x%" PRIx64 " is deleted and also upserted at offset %" PRIu64,
                             key, SHARD_HEADER_BYTES + u * rec);
            return -1;
        }
    }
    return 0;
}

void store__delta_layout_of_manifest(const manifest_t *m, store_delta_layout_t *out)
{
    memset(out, 0, sizeof *out);
    memcpy(out->model_name, m->meta.model_name, sizeof out->model_name);
    out->model_name[sizeof out->model_name - 1] = '\0';
    out->model_kind = m->meta.model_kind;
    out->value_floats = m->value_floats;
    out->dtype = m->dtype;
    out->shards = m->shard_count;
    out->hash_seed = m->hash_seed;
}

int store__delta_layout_diff(const store_delta_layout_t *a, const store_delta_layout_t *b,
                             char *why, size_t len)
{
    if (strncmp(a->model_name, b->model_name, sizeof a->model_name) != 0)
        snprintf(why, len, "model \"%.63s\" vs \"%.63s\"", a->model_name, b->model_name);
    else if (a->model_kind != b->model_kind)
        snprintf(why, len, "model kind %s vs %s", store_model_kind_name(a->model_kind),
                 store_model_kind_name(b->model_kind));
    else if (a->value_floats != b->value_floats)
        snprintf(why, len, "K %" PRIu32 " vs %" PRIu32, a->value_floats, b->value_floats);
    else if (a->dtype != b->dtype)
        snprintf(why, len, "dtype %s vs %s", a->dtype == STORE_DTYPE_F16 ? "f16" : "f32",
                 b->dtype == STORE_DTYPE_F16 ? "f16" : "f32");
    else if (a->shards != b->shards)
        snprintf(why, len, "shard count %" PRIu32 " vs %" PRIu32, a->shards, b->shards);
    else
        return 0;
    return -1;
}
