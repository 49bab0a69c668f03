/*
 * score_check.c — integration check that scores over the wire are exactly
 * the scores the model computes in-process.
 *
 *   score_check --port P --model-dir DIR [--requests N]
 *
 * Loads the snapshot in DIR with model_load (the same loader tlserve uses),
 * collects known ids from its store, builds N requests mixing known and
 * unknown ids (with and without values), sends each to the running tlserve
 * with libtlclient and compares every score bit for bit with model_score.
 * Exits 0 when all match, 1 at the first difference (printed).
 */
#include "codec/tlclient.h"
#include "model/model.h"
#include "store/synthetic.h" /* store_splitmix64 */

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_KNOWN 100000

struct known {
    uint64_t ids[MAX_KNOWN];
    uint32_t n;
};

static int collect(void *ctx, uint64_t key, const float *value)
{
    (void)value;
    struct known *k = ctx;
    if (k->n < MAX_KNOWN)
        k->ids[k->n++] = key;
    return k->n < MAX_KNOWN ? 0 : 1;
}

int main(int argc, char **argv)
{
    int port = 0, requests = 20;
    const char *dir = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--port"))
            port = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--model-dir"))
            dir = argv[i + 1];
        else if (!strcmp(argv[i], "--requests"))
            requests = atoi(argv[i + 1]);
    }
    if (!port || !dir) {
        fputs("usage: score_check --port P --model-dir DIR [--requests N]\n", stderr);
        return 2;
    }
    model_t *m;
    store_error_t err;
    if (model_load(dir, 0, &m, &err) != 0) {
        fprintf(stderr, "score_check: %s\n", err.msg);
        return 1;
    }
    static struct known k;
    for (uint32_t s = 0; s < store_shards(model_store(m)) && k.n < MAX_KNOWN; s++)
        store_foreach(model_store(m), s, collect, &k);
    if (k.n == 0) {
        fputs("score_check: the model is empty\n", stderr);
        return 1;
    }
    tlclient_t *c;
    int rc = tlclient_connect("127.0.0.1", port, 5000, &c);
    if (rc) {
        fprintf(stderr, "score_check: connect: %s\n", strerror(-rc));
        return 1;
    }
    enum { ITEMS = 64, SHARED = 100, PER = 150 }; /* 9,700 ids: over the team's split size */
    static uint64_t ids[SHARED + ITEMS * PER];
    static float vals[SHARED + ITEMS * PER];
    codec_block_t blocks[ITEMS];
    codec_block_t mblocks[ITEMS];
    float wire[ITEMS], local[ITEMS];
    model_scratch_t *sc;
    if (model_scratch_create(SHARED + ITEMS * PER, &sc) ||
        model_scratch_fit(sc, m, SHARED + ITEMS * PER) < 0) { /* any kind's rows and work */
        fputs("score_check: out of memory\n", stderr);
        return 1;
    }
    uint64_t seed = 7;
    for (int r = 0; r < requests; r++) {
        bool with_values = r % 2;
        for (size_t j = 0; j < SHARED + ITEMS * PER; j++) {
            uint64_t x = store_splitmix64(&seed);
            ids[j] = x % 4 ? k.ids[x % k.n] : x; /* 1 in 4 unknown */
            vals[j] = (float)(x % 1000) / 250.0f - 2.0f;
        }
        codec_predict_t req = {.version = 0, .items = ITEMS, .item = blocks};
        snprintf(req.name, sizeof req.name, "%s", model_meta(m)->model_name);
        req.shared = (codec_block_t){ids, with_values ? vals : NULL, 0};
        req.shared.n = codec_sort_unique(ids, with_values ? vals : NULL, SHARED);
        for (int i = 0; i < ITEMS; i++) {
            uint64_t *bi = ids + SHARED + (size_t)i * PER;
            float *bv = with_values ? vals + SHARED + (size_t)i * PER : NULL;
            blocks[i] = (codec_block_t){bi, bv, codec_sort_unique(bi, bv, PER)};
            mblocks[i] = (codec_block_t){blocks[i].ids, blocks[i].values, blocks[i].n};
        }
        codec_error_t cerr;
        uint64_t version;
        rc = tlclient_predict(c, &req, wire, &version, 5000, &cerr);
        if (rc) {
            fprintf(stderr, "score_check: request %d: %s\n", r,
                    rc > 0 ? cerr.msg : strerror(-rc));
            return 1;
        }
        codec_block_t shared = {req.shared.ids, req.shared.values, req.shared.n};
        if (model_score(m, &shared, mblocks, ITEMS, local, sc) != 0) {
            fputs("score_check: local scoring failed\n", stderr);
            return 1;
        }
        for (int i = 0; i < ITEMS; i++) {
            if (memcmp(&wire[i], &local[i], sizeof(float)) != 0) {
                fprintf(stderr, "score_check: request %d item %d: wire %.9g != local %.9g\n", r, i,
                        wire[i], local[i]);
                return 1;
            }
        }
        if (version != model_meta(m)->version) {
            fprintf(stderr, "score_check: version %llu != %llu\n", (unsigned long long)version,
                    (unsigned long long)model_meta(m)->version);
            return 1;
        }
    }
    printf("score_check: %d requests x %d items: every score equal bit for bit\n", requests, ITEMS);
    model_scratch_destroy(sc);
    tlclient_close(c);
    model_destroy(m);
    return 0;
}
