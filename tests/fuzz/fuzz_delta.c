/*
 * fuzz_delta.c — libFuzzer target for the delta reader's verification and
 * iteration (store__delta_open_mem: the checks store_delta_open runs on the
 * files it read; store_delta_foreach; store_delta_apply onto an empty
 * store when the parent matches).
 *
 * The input is one delta shard file.  The target builds a delta manifest
 * that matches it, so that mutations reach past the size and checksum
 * checks into the header and record checks:
 *   - K, dtype, shard count and shard index come from the input's header
 *     when valid (count limited to 1..8), defaults otherwise (the header
 *     then disagrees: MISMATCH);
 *   - upserts and deletes come from the header when 64 + U*R + D*8 equals
 *     the input's size, else U = (size - 64) / R, D = 0 (a ragged tail gives
 *     SIZE);
 *   - xxh3 = XXH3_64bits of the input; if the header checksum field (bytes
 *     56..63) is all zero the target writes the right one first, so an input
 *     passes the header check without the fuzzer solving a hash;
 *   - the other shards are valid empty delta files.
 * Oracle: an accepted delta iterates exactly U upserts and D deletes per the
 * manifest, keys strictly ascending in each list, every key in its shard,
 * every value finite, no key in both lists; a refused one names the shard's
 * file and an offset inside it.  Anything else abort()s.
 *
 *   cmake -DTL_FUZZ=ON -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ ..
 *   ./fuzz_delta -max_len=4096 ../tests/fuzz/corpus/delta
 *
 * The seeds in corpus/delta/ are tiny delta files, valid and broken
 * (unsorted, duplicate, deleted and upserted, NaN, wrong shard, bad magic,
 * a snapshot shard).  Without TL_FUZZ this target replays them under ctest.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "store/delta_internal.h"

#define MAX_FUZZ_SHARDS 8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond, const char *what, const store_error_t *err)
{
    if (!cond) {
        fprintf(stderr, "fuzz_delta: %s (%s: %s)\n", what, err ? store_errc_name(err->code) : "-",
                err ? err->msg : "");
        abort();
    }
}

static uint32_t le32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

struct walk {
    uint32_t shard, shards, K;
    uint64_t ups, dels, last;
    const store_delta_t *d;
};

static int on_up(void *ctx, uint64_t key, const float *v)
{
    struct walk *w = ctx;
    check(w->ups == 0 || key > w->last, "upserts not strictly ascending", NULL);
    check(store__shard_of_key(key, w->shards) == w->shard, "upsert in the wrong shard", NULL);
    for (uint32_t j = 0; j < w->K; j++)
        check(isfinite(v[j]), "a non-finite value accepted", NULL);
    w->last = key;
    w->ups++;
    return 0;
}

static int on_del(void *ctx, uint64_t key)
{
    struct walk *w = ctx;
    check(w->dels == 0 || key > w->last, "deletes not strictly ascending", NULL);
    check(store__shard_of_key(key, w->shards) == w->shard, "delete in the wrong shard", NULL);
    w->last = key;
    w->dels++;
    return 0;
}

/* Is key among shard's upserts?  (Linear: inputs are small.) */
struct find {
    uint64_t key;
    int found;
};

static int find_up(void *ctx, uint64_t key, const float *v)
{
    (void)v;
    struct find *f = ctx;
    f->found |= key == f->key;
    return 0;
}

static int del_not_upserted(void *ctx, uint64_t key)
{
    struct walk *w = ctx;
    struct find f = {.key = key};
    store_delta_foreach(w->d, w->shard, find_up, NULL, &f);
    check(!f.found, "a key both upserted and deleted accepted", NULL);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < SHARD_HEADER_BYTES || size > (1u << 20))
        return 0;
    uint8_t *file = malloc(size);
    if (!file)
        return 0;
    memcpy(file, data, size);

    uint32_t K = le32(file + D_FLOATS), dt = le32(file + D_DTYPE);
    uint32_t count = le32(file + D_COUNT), index = le32(file + D_INDEX);
    if (K < 1 || K > 64)
        K = 1;
    if (dt > 1)
        dt = 0;
    if (count < 1 || count > MAX_FUZZ_SHARDS || (count & (count - 1)) != 0)
        count = 1;
    if (index >= count)
        index = 0;
    const size_t rec = 8 + (size_t)K * (dt ? 2 : 4);
    uint64_t ups = le64(file + D_UPSERTS), dels = le64(file + D_DELETES);
    const uint64_t body = size - SHARD_HEADER_BYTES;
    if (ups > body / rec || dels > body / 8 || ups * rec + dels * 8 != body) {
        ups = body / rec;
        dels = 0;
    }
    if (le64(file + D_XXH3) == 0)
        memcpy(file + D_XXH3, &(uint64_t){XXH3_64bits(file, D_XXH3)}, 8);

    manifest_shard_t shards[MAX_FUZZ_SHARDS];
    memset(shards, 0, sizeof shards);
    manifest_t m;
    memset(&m, 0, sizeof m);
    m.format_version = MANIFEST_FORMAT_VERSION_DELTA;
    m.kind = MANIFEST_KIND_DELTA;
    snprintf(m.meta.model_name, sizeof m.meta.model_name, "fuzz");
    m.meta.version = 2;
    m.meta.parent_version = 1;
    m.value_floats = K;
    m.dtype = (store_dtype_t)dt;
    m.shard_count = count;
    m.shards = shards;
    uint8_t empty[MAX_FUZZ_SHARDS][SHARD_HEADER_BYTES];
    const uint8_t *files[MAX_FUZZ_SHARDS];
    size_t sizes[MAX_FUZZ_SHARDS];
    for (uint32_t i = 0; i < count; i++) {
        snprintf(shards[i].file, sizeof shards[i].file, DELTA_SHARD_NAME_FMT, i);
        shards[i].index = i;
        if (i == index) {
            shards[i].entries = ups;
            shards[i].deletes = dels;
            shards[i].bytes = SHARD_HEADER_BYTES + ups * rec + dels * 8;
            shards[i].xxh3 = XXH3_64bits(file, size);
            files[i] = file;
            sizes[i] = size;
        } else {
            store__delta_header_encode(&m, i, 0, 0, empty[i]);
            shards[i].bytes = SHARD_HEADER_BYTES;
            shards[i].xxh3 = XXH3_64bits(empty[i], SHARD_HEADER_BYTES);
            files[i] = empty[i];
            sizes[i] = SHARD_HEADER_BYTES;
        }
    }

    store_delta_t *d = NULL;
    store_error_t err;
    int rc = store__delta_open_mem(&m, files, sizes, &d, &err);
    if (getenv("TL_FUZZ_VERBOSE")) /* what each seed reaches */
        fprintf(stderr, "fuzz_delta: %s\n", rc == 0 ? "accepted" : err.msg);
    if (rc == 0) {
        check(d != NULL, "success without a delta", NULL);
        for (uint32_t i = 0; i < count; i++) {
            struct walk w = {.shard = i, .shards = count, .K = K, .d = d};
            check(store_delta_foreach(d, i, on_up, NULL, &w) == 0, "foreach failed", NULL);
            w.last = 0;
            check(store_delta_foreach(d, i, NULL, on_del, &w) == 0, "foreach failed", NULL);
            check(w.ups == shards[i].entries && w.dels == shards[i].deletes,
                  "iterated counts differ from the manifest", NULL);
            check(store_delta_foreach(d, i, NULL, del_not_upserted, &w) == 0, "foreach failed",
                  NULL);
        }
        /* applied to an empty store of version 1: refused when it deletes
         * (absent keys), else holds exactly the upserts */
        store_options_t o = {.value_floats = K, .dtype = (store_dtype_t)dt, .shards = count};
        store_t *s = NULL;
        if (store_create(&o, &s) == 0) {
            store_meta_t meta;
            memset(&meta, 0, sizeof meta);
            snprintf(meta.model_name, sizeof meta.model_name, "fuzz");
            meta.version = 1;
            int arc = store_delta_apply(s, &meta, d, &err);
            if (dels > 0)
                check(arc != 0 && err.code == STORE_E_MISMATCH && store_count(s) == 0,
                      "a delete of an absent key applied", &err);
            else
                check(arc == 0 && store_count(s) == ups && meta.version == 2,
                      "apply lost upserts", &err);
            store_destroy(s);
        }
        store_delta_close(d);
    } else {
        check(d == NULL, "failure left a delta", &err);
        check(err.code != STORE_OK && err.msg[0] != '\0', "refusal without a code or message",
              &err);
        if (err.code != STORE_E_NOMEM) {
            check(strcmp(err.file, shards[index].file) == 0, "error names another file", &err);
            check(err.offset >= -1 && err.offset <= (int64_t)size, "offset outside the file",
                  &err);
        }
    }
    free(file);
    return 0;
}
