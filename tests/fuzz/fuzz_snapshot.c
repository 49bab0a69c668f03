/*
 * fuzz_snapshot.c — libFuzzer target for the snapshot loader's per-shard
 * verification and build path (store__snapshot_load_mem, the code that
 * store_snapshot_load runs on mmap windows of real files).
 *
 * The input is one shard file.  The target builds a manifest that matches
 * it, so that mutations reach past the size and checksum checks into the
 * header and record checks:
 *   - K, dtype, shard count and shard index come from the input's own header
 *     when they are valid (count limited to 1..8), defaults otherwise (then
 *     the header disagrees with the manifest: MISMATCH);
 *   - entries = (size - 64) / record size, bytes = 64 + entries * record
 *     size (a ragged tail gives SIZE), xxh3 = XXH3_64bits of the input;
 *   - if the header checksum field (bytes 56..63) is all zero, the target
 *     writes the correct header checksum first: an input can pass the
 *     header check without the fuzzer solving a hash;
 *   - the other shards of the snapshot are valid empty files.
 * Oracle: a load that succeeds must hold exactly the input's records (every
 * key found, every value bit-identical after fp16 widening); a load that
 * fails must name the shard's file, an offset inside it, and, for DUPLICATE,
 * WRONG_SHARD and VALUE, a record boundary whose record really is what the
 * error says.  Anything else abort()s.
 *
 *   cmake -DTL_FUZZ=ON -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ ..
 *   ./fuzz_snapshot -max_len=4096 ../tests/fuzz/corpus/snapshot
 *
 * The seeds in corpus/snapshot/ are tiny shard files (valid ones with real
 * checksums, valid ones with a zeroed header checksum, and broken ones:
 * duplicate, wrong shard, NaN, ragged tail, bad magic, bad version).
 * Without TL_FUZZ this target replays them under ctest.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "store/snapshot_internal.h"
#include "store/store_internal.h"

#define MAX_FUZZ_SHARDS 8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond, const char *what, const store_error_t *err)
{
    if (!cond) {
        fprintf(stderr, "fuzz_snapshot: %s (%s: %s)\n", what,
                err ? store_errc_name(err->code) : "-", err ? err->msg : "");
        abort();
    }
}

static uint32_t le32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v; /* little-endian host (the store assumes it too) */
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static int finite_value(const uint8_t *v, uint32_t K, store_dtype_t dt)
{
    for (uint32_t j = 0; j < K; j++) {
        if (dt == STORE_DTYPE_F32 && (le32(v + 4 * j) & 0x7f800000u) == 0x7f800000u)
            return 0;
        if (dt == STORE_DTYPE_F16) {
            uint16_t h;
            memcpy(&h, v + 2 * j, 2);
            if ((h & 0x7c00u) == 0x7c00u)
                return 0;
        }
    }
    return 1;
}

/* After a successful load: s holds exactly the file's records. */
static void check_loaded(const store_t *s, const uint8_t *file, uint64_t entries, size_t rec,
                         uint32_t K, store_dtype_t dt)
{
    check(store_count(s) == entries, "count differs from the file's records", NULL);
    float got[STORE_MAX_VALUE_FLOATS];
    for (uint64_t r = 0; r < entries; r++) {
        const uint8_t *p = file + SHARD_HEADER_BYTES + r * rec;
        check(store_lookup(s, le64(p), got) == 1, "a loaded key is missing", NULL);
        for (uint32_t j = 0; j < K; j++) {
            float want;
            if (dt == STORE_DTYPE_F32) {
                memcpy(&want, p + 8 + 4 * j, 4);
            } else {
                uint16_t h;
                memcpy(&h, p + 8 + 2 * j, 2);
                want = store_f16_to_f32(h);
            }
            check(memcmp(&want, &got[j], 4) == 0, "a loaded value differs", NULL);
        }
    }
}

/* After a refused load: the error names the file and a plausible offset,
 * and record errors point at a record that really is bad. */
static void check_refused(const store_error_t *err, const char *name, const uint8_t *file,
                          size_t size, size_t rec, uint32_t K, store_dtype_t dt,
                          uint32_t shard_count, uint32_t index)
{
    check(err->code != STORE_OK && err->msg[0] != '\0', "refusal without a code or message", err);
    check(err->code != STORE_E_MANIFEST && err->code != STORE_E_INVALID && err->code != STORE_E_IO,
          "unexpected error class for an in-memory shard", err);
    if (err->code == STORE_E_NOMEM)
        return;
    check(strcmp(err->file, name) == 0, "error names another file", err);
    check(err->offset >= -1 && err->offset <= (int64_t)size, "offset outside the file", err);
    if (err->code != STORE_E_DUPLICATE && err->code != STORE_E_WRONG_SHARD &&
        err->code != STORE_E_VALUE)
        return;
    check(err->offset >= (int64_t)SHARD_HEADER_BYTES &&
              (err->offset - SHARD_HEADER_BYTES) % (int64_t)rec == 0 &&
              (size_t)err->offset + rec <= size,
          "record error not at a record boundary", err);
    const uint8_t *p = file + err->offset;
    if (err->code == STORE_E_VALUE) {
        check(!finite_value(p + 8, K, dt), "VALUE for a finite value", err);
    } else if (err->code == STORE_E_DUPLICATE) {
        int seen = 0;
        for (const uint8_t *q = file + SHARD_HEADER_BYTES; q < p && !seen; q += rec)
            seen = le64(q) == le64(p);
        check(seen, "DUPLICATE for a key not seen before", err);
    } else {
        store_options_t opt = {.value_floats = K, .dtype = dt, .shards = shard_count};
        store_t *router = NULL;
        if (store_create(&opt, &router) == 0) {
            check(store_shard_of(router, le64(p)) != index, "WRONG_SHARD for an owned key", err);
            store_destroy(router);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *file = malloc(size ? size : 1);
    if (!file)
        return 0;
    memcpy(file, data, size);

    uint32_t K = 1, count = 1, index = 0;
    store_dtype_t dt = STORE_DTYPE_F32;
    if (size >= SHARD_HEADER_BYTES) {
        uint32_t hc = le32(file + 16), hi = le32(file + 12), hk = le32(file + 20);
        uint32_t hd = le32(file + 24);
        if (hc >= 1 && hc <= MAX_FUZZ_SHARDS && (hc & (hc - 1)) == 0)
            count = hc;
        if (hi < count)
            index = hi;
        if (hk >= 1 && hk <= STORE_MAX_VALUE_FLOATS)
            K = hk;
        if (hd == STORE_DTYPE_F16)
            dt = STORE_DTYPE_F16;
        if (le64(file + SNAPSHOT_HEADER_XXH3_AT) == 0) {
            uint64_t x = XXH3_64bits(file, SNAPSHOT_HEADER_XXH3_AT);
            memcpy(file + SNAPSHOT_HEADER_XXH3_AT, &x, 8);
        }
    }
    const size_t rec = 8 + K * (dt == STORE_DTYPE_F16 ? 2u : 4u);
    const uint64_t entries = size >= SHARD_HEADER_BYTES ? (size - SHARD_HEADER_BYTES) / rec : 0;

    uint8_t empty[MAX_FUZZ_SHARDS][SHARD_HEADER_BYTES];
    const uint8_t *files[MAX_FUZZ_SHARDS];
    size_t sizes[MAX_FUZZ_SHARDS];
    manifest_shard_t shards[MAX_FUZZ_SHARDS];
    memset(shards, 0, sizeof shards);
    for (uint32_t i = 0; i < count; i++) {
        manifest_shard_t *ms = &shards[i];
        ms->index = i;
        snprintf(ms->file, sizeof ms->file, "shard-%05u.tls", i);
        if (i == index) {
            files[i] = file;
            sizes[i] = size;
            ms->entries = entries;
            ms->bytes = SHARD_HEADER_BYTES + entries * rec;
            ms->xxh3 = XXH3_64bits(file, size);
        } else {
            snapshot_header_t h = {
                .format_version = SNAPSHOT_FORMAT_VERSION,
                .shard_index = i,
                .shard_count = count,
                .value_floats = K,
                .dtype = (uint32_t)dt,
                .value_bytes = (uint32_t)(rec - 8),
                .entries = 0,
            };
            store__snapshot_header_encode(&h, empty[i]);
            files[i] = empty[i];
            sizes[i] = SHARD_HEADER_BYTES;
            ms->bytes = SHARD_HEADER_BYTES;
            ms->xxh3 = XXH3_64bits(empty[i], SHARD_HEADER_BYTES);
        }
    }
    manifest_t m = {
        .format_version = MANIFEST_FORMAT_VERSION,
        .meta = {.model_name = "fuzz", .model_kind = STORE_MODEL_LR, .version = 1},
        .value_floats = K,
        .dtype = dt,
        .shard_count = count,
        .shards = shards,
    };

    store_t *s = (store_t *)(uintptr_t)1;
    store_error_t err;
    int rc = store__snapshot_load_mem(&m, files, sizes, &s, &err);
    static int verbose = -1;
    if (verbose < 0)
        verbose = getenv("FUZZ_SNAPSHOT_VERBOSE") != NULL;
    if (verbose)
        fprintf(stderr, "%s\n", rc == 0 ? "loaded" : err.msg);
    if (rc == 0) {
        check(err.code == STORE_OK, "success with an error code", &err);
        check_loaded(s, file, entries, rec, K, dt);
        store_destroy(s);
    } else {
        check(rc < 0 && rc == store_errc_errno(err.code),
              "load returned neither 0 nor its code's -errno", &err);
        check(s == (store_t *)(uintptr_t)1, "failed load set *out", &err);
        check_refused(&err, shards[index].file, file, size, rec, K, dt, count, index);
    }
    free(file);
    return 0;
}
