/*
 * gate_snap.c — writes a variant of a snapshot for the validation gate's
 * integration test (test_gate.py): every value scaled, optionally one key's
 * first float set, under a new version.
 *
 *   gate_snap IN OUT VERSION SCALE [SET_VALUE]
 *
 * Loads IN (store_snapshot_load: every checksum verified), copies each entry
 * into a new store with its values multiplied by SCALE (and the first float
 * of the first key visited in shard 0 set to SET_VALUE when given, e.g. 1e5
 * for a value over --gate-max-abs), and writes it to OUT with the same
 * model name and kind and version VERSION.  Extras are not copied (LR and
 * FM models only).  Exit 0, or 1 with the store's error on stderr.
 */
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct copy {
    store_t *dst;
    float scale;
    float set;
    int have_set;
    uint32_t k;
    int failed;
};

static int visit(void *ctx, uint64_t key, const float *value)
{
    struct copy *c = ctx;
    float v[STORE_MAX_VALUE_FLOATS];
    for (uint32_t i = 0; i < c->k; i++)
        v[i] = value[i] * c->scale;
    if (c->have_set) {
        v[0] = c->set;
        c->have_set = 0;
    }
    if (store_upsert(c->dst, key, v) < 0) {
        c->failed = 1;
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: gate_snap IN OUT VERSION SCALE [SET_VALUE]\n");
        return 2;
    }
    store_t *src, *dst;
    store_meta_t meta;
    store_error_t err;
    if (store_snapshot_load(argv[1], 1, &src, &meta, &err) != 0) {
        fprintf(stderr, "gate_snap: %s\n", err.msg);
        return 1;
    }
    store_options_t opt = {.value_floats = store_value_floats(src),
                           .shards = store_shards(src),
                           .expected_keys = store_count(src)};
    if (store_create(&opt, &dst) != 0) {
        fprintf(stderr, "gate_snap: cannot create the store\n");
        return 1;
    }
    struct copy c = {dst, strtof(argv[4], NULL), argc == 6 ? strtof(argv[5], NULL) : 0, argc == 6,
                     opt.value_floats, 0};
    for (uint32_t s = 0; s < store_shards(src) && !c.failed; s++)
        store_foreach(src, s, visit, &c);
    if (c.failed) {
        fprintf(stderr, "gate_snap: upsert failed\n");
        return 1;
    }
    meta.version = strtoull(argv[3], NULL, 10);
    meta.parent_version = 0;
    meta.created_unix = 0;
    if (store_snapshot_write(dst, argv[2], &meta, &err) != 0) {
        fprintf(stderr, "gate_snap: %s\n", err.msg);
        return 1;
    }
    store_destroy(src);
    store_destroy(dst);
    return 0;
}
