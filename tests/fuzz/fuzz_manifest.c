/*
 * fuzz_manifest.c — libFuzzer target for store__manifest_decode().
 *
 * Each input is decoded twice: as given (length, identifier and checksum
 * paths), and with its last 8 bytes replaced by the correct xxh3 of the
 * rest, so that mutations get past the checksum into the FlatBuffers
 * verifier and the field checks.  Whatever decodes must re-encode, decode
 * again to the same manifest, and re-encode to the same bytes; whatever is
 * refused must be refused with -EBADMSG and a sentence.  Any other outcome
 * abort()s.
 *
 *   cmake -DTL_FUZZ=ON -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ ..
 *   ./fuzz_manifest -max_len=4096 ../tests/fuzz/corpus/manifest
 *
 * Without TL_FUZZ the same target replays the seed corpus under ctest.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "store/manifest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_manifest: %s\n", what);
        abort();
    }
}

static int same(const manifest_t *a, const manifest_t *b)
{
    if (a->format_version != b->format_version || a->value_floats != b->value_floats ||
        a->dtype != b->dtype || a->shard_count != b->shard_count ||
        strcmp(a->meta.model_name, b->meta.model_name) != 0 ||
        a->meta.model_kind != b->meta.model_kind || a->meta.version != b->meta.version ||
        a->meta.parent_version != b->meta.parent_version ||
        a->meta.created_unix != b->meta.created_unix || a->hash_seed != b->hash_seed)
        return 0;
    for (uint32_t i = 0; i < a->shard_count; i++) {
        const manifest_shard_t *x = &a->shards[i], *y = &b->shards[i];
        if (x->index != y->index || strcmp(x->file, y->file) != 0 || x->entries != y->entries ||
            x->bytes != y->bytes || x->xxh3 != y->xxh3)
            return 0;
    }
    return 1;
}

static void one(const uint8_t *data, size_t size)
{
    manifest_t m;
    char why[256];
    int rc = store__manifest_decode(data, size, &m, why, sizeof why);
    if (rc != 0) {
        check(rc == -EBADMSG || rc == -ENOMEM, "decode returned an unexpected error");
        check(strncmp(why, "manifest: ", 10) == 0, "refusal without a sentence");
        check(m.shards == NULL && m.shard_count == 0, "refusal left output behind");
        return;
    }
    check(why[0] == '\0', "success with a why");
    check(m.shard_count > 0 && m.shards != NULL, "success without shards");
    for (uint32_t i = 0; i < m.shard_count; i++)
        check(memchr(m.shards[i].file, '\0', sizeof m.shards[i].file) != NULL,
              "unterminated file name");
    check(memchr(m.meta.model_name, '\0', sizeof m.meta.model_name) != NULL,
          "unterminated model name");

    uint8_t *buf = NULL, *buf2 = NULL;
    size_t len = 0, len2 = 0;
    rc = store__manifest_encode(&m, &buf, &len, why, sizeof why);
    if (rc == -ENOMEM)
        goto out;
    check(rc == 0, "a decoded manifest does not re-encode");

    manifest_t m2;
    rc = store__manifest_decode(buf, len, &m2, why, sizeof why);
    if (rc == -ENOMEM)
        goto out;
    check(rc == 0, "a re-encoded manifest does not decode");
    check(same(&m, &m2), "round trip changed the manifest");

    rc = store__manifest_encode(&m2, &buf2, &len2, why, sizeof why);
    if (rc == 0)
        check(len == len2 && memcmp(buf, buf2, len) == 0, "encoding is not deterministic");
    store__manifest_free(&m2);
out:
    free(buf);
    free(buf2);
    store__manifest_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    one(data, size);

    /* Again with a valid trailer, to fuzz what lies behind the checksum. */
    if (size >= 16 && size <= MANIFEST_MAX_BYTES) {
        uint8_t *copy = malloc(size);
        if (!copy)
            return 0;
        memcpy(copy, data, size);
        uint64_t h = XXH3_64bits(copy, size - 8);
        for (int i = 0; i < 8; i++)
            copy[size - 8 + i] = (uint8_t)(h >> (8 * i));
        one(copy, size);
        free(copy);
    }
    return 0;
}
