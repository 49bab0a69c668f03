/*
 * redis_load.c — loads a tlserve LR snapshot into a Redis server, for the
 * Redis peer of the benchmark suite (loadgen/bench.sh, redis_adapter.c).
 *
 *   redis_load --snapshot DIR --redis-port P [--redis-host H] [--pipeline 1000]
 *              [--depth 16] [--threads T]
 *
 * ENCODING: the compact, binary-safe layout a careful team would pick for an
 * LR model in Redis — one plain string key per feature id, no hashes, no text:
 *
 *   key   = the id's 8 bytes, little-endian (the in-memory order on x86-64 and
 *           arm64; redis_adapter.c builds its MGET keys the same way)
 *   value = the weight's 4 bytes, IEEE binary32, little-endian
 *
 *   key  0x0123456789abcdef -> "\xef\xcd\xab\x89\x67\x45\x23\x01"
 *   value 0.5f              -> "\x00\x00\x00\x3f"
 *
 * The bias lives under id 0 (MODEL_BIAS_ID), like every other weight.
 *
 * LOADING: store_snapshot_load() verifies the snapshot; store_foreach() walks
 * each shard and the entries go out as MSET commands of --pipeline keys each
 * (one round trip per MSET costs nothing: up to --depth MSETs are in flight
 * before the first reply is read).  MSET is what a bulk loader uses; per-key
 * SETs would only make the load slower, not the stored data different.
 *
 * OUTPUT: keys/s of the load, and Redis's used_memory (INFO memory) before
 * and after, per key loaded, next to the tlserve store's own bytes per key
 * (store_stats table_bytes) for the same snapshot.  The last line is JSON.
 *
 * THREAD SAFETY: single-threaded after the (multi-threaded) snapshot load.
 */
#include "store/store.h"

#include <hiredis/hiredis.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

_Static_assert(sizeof(float) == 4 && sizeof(uint64_t) == 8, "wire sizes");

struct loader {
    redisContext *rc;    /* owned */
    unsigned batch;      /* keys per MSET */
    unsigned depth;      /* MSETs in flight before a reply is read */
    unsigned queued;     /* keys in the batch being built */
    unsigned inflight;   /* MSETs sent (appended) whose reply is not read */
    uint64_t loaded;     /* keys acknowledged or sent */
    uint64_t *keys;      /* batch keys, little-endian in memory */
    float *vals;         /* batch values */
    const char **argv;   /* 1 + 2 * batch: "MSET", k0, v0, k1, v1, ... */
    size_t *argvlen;
    char err[256];       /* first error, "" when none */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Reads one MSET reply.  Returns 0, or -1 with l->err filled. */
static int read_reply(struct loader *l)
{
    redisReply *r = NULL;
    if (redisGetReply(l->rc, (void **)&r) != REDIS_OK || !r) {
        snprintf(l->err, sizeof l->err, "redis: %s", l->rc->errstr[0] ? l->rc->errstr : "no reply");
        return -1;
    }
    int rc = 0;
    if (r->type != REDIS_REPLY_STATUS || strcmp(r->str, "OK") != 0) {
        snprintf(l->err, sizeof l->err, "redis: MSET answered %s",
                 r->type == REDIS_REPLY_ERROR ? r->str : "something other than OK");
        rc = -1;
    }
    freeReplyObject(r);
    l->inflight--;
    return rc;
}

/* Sends the batch being built as one MSET; keeps at most depth in flight. */
static int send_batch(struct loader *l)
{
    if (l->queued == 0)
        return 0;
    l->argv[0] = "MSET";
    l->argvlen[0] = 4;
    for (unsigned i = 0; i < l->queued; i++) {
        l->argv[1 + 2 * i] = (const char *)&l->keys[i];
        l->argvlen[1 + 2 * i] = 8;
        l->argv[2 + 2 * i] = (const char *)&l->vals[i];
        l->argvlen[2 + 2 * i] = 4;
    }
    if (redisAppendCommandArgv(l->rc, 1 + 2 * (int)l->queued, l->argv, l->argvlen) != REDIS_OK) {
        snprintf(l->err, sizeof l->err, "redis: %s", l->rc->errstr);
        return -1;
    }
    l->loaded += l->queued;
    l->queued = 0;
    l->inflight++;
    while (l->inflight >= l->depth)
        if (read_reply(l) != 0)
            return -1;
    return 0;
}

static int visit(void *ctx, uint64_t key, const float *value)
{
    struct loader *l = ctx;
    l->keys[l->queued] = key; /* native order is little-endian on our targets */
    l->vals[l->queued] = value[0];
    if (++l->queued == l->batch)
        return send_batch(l) != 0;
    return 0;
}

/* INFO memory's used_memory in bytes, or -1. */
static long long used_memory(redisContext *rc)
{
    redisReply *r = redisCommand(rc, "INFO memory");
    long long v = -1;
    if (r && r->type == REDIS_REPLY_STRING) {
        const char *p = strstr(r->str, "\nused_memory:");
        if (!p && strncmp(r->str, "used_memory:", 12) == 0)
            p = r->str - 1;
        if (p)
            v = strtoll(p + 13, NULL, 10);
    }
    if (r)
        freeReplyObject(r);
    return v;
}

static long long db_size(redisContext *rc)
{
    redisReply *r = redisCommand(rc, "DBSIZE");
    long long v = (r && r->type == REDIS_REPLY_INTEGER) ? r->integer : -1;
    if (r)
        freeReplyObject(r);
    return v;
}

__attribute__((cold)) static void usage(FILE *f)
{
    fputs("usage: redis_load --snapshot DIR --redis-port P [options]\n"
          "Loads a tlserve LR snapshot into Redis: one string key per feature id (the id's 8\n"
          "little-endian bytes) holding the weight (4 bytes, binary32), sent as MSET batches.\n\n"
          "  --snapshot DIR    snapshot directory (tlsynth model --out DIR)\n"
          "  --redis-host H    Redis address (default 127.0.0.1)\n"
          "  --redis-port P    Redis port (required)\n"
          "  --pipeline N      keys per MSET command (default 1000)\n"
          "  --depth D         MSET commands in flight (default 16)\n"
          "  --threads T       snapshot loader threads (default: one per core)\n"
          "  --help            print this\n"
          "Prints keys/s and Redis used_memory per key; the last line is JSON.\n",
          f);
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *host = "127.0.0.1";
    long port = 0, batch = 1000, depth = 16, threads = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "redis_load: %s needs a value\n", argv[i]);
            return 2;
        }
        const char *f = argv[i], *v = argv[++i];
        if (!strcmp(f, "--snapshot")) {
            dir = v;
            continue;
        }
        if (!strcmp(f, "--redis-host")) {
            host = v;
            continue;
        }
        char *end;
        errno = 0;
        long x = strtol(v, &end, 10);
        if (errno || *end || end == v || x < 0) {
            fprintf(stderr, "redis_load: %s '%s' is not a number\n", f, v);
            return 2;
        }
        if (!strcmp(f, "--redis-port") && x >= 1 && x <= 65535)
            port = x;
        else if (!strcmp(f, "--pipeline") && x >= 1 && x <= 1000000)
            batch = x;
        else if (!strcmp(f, "--depth") && x >= 1 && x <= 4096)
            depth = x;
        else if (!strcmp(f, "--threads") && x <= 1024)
            threads = x;
        else {
            fprintf(stderr, "redis_load: unknown option or value out of range: %s %s\n", f, v);
            return 2;
        }
    }
    if (!dir || !port) {
        usage(stderr);
        return 2;
    }

    int rc = 1;
    store_t *s = NULL;
    struct loader l = {.batch = (unsigned)batch, .depth = (unsigned)depth};
    store_meta_t meta;
    store_error_t serr;
    double t0 = now_s();
    if (store_snapshot_load(dir, (int)threads, &s, &meta, &serr) != 0) {
        fprintf(stderr, "redis_load: %s\n", serr.msg);
        goto out;
    }
    if (store_value_floats(s) != 1) {
        fprintf(stderr, "redis_load: %s: %u floats per key; only LR (1 float) is supported\n", dir,
                store_value_floats(s));
        goto out;
    }
    double t_snap = now_s() - t0;
    uint64_t entries = store_count(s);
    store_stats_t st;
    store_stats(s, &st);
    printf("redis_load: snapshot %s: model '%s' v%llu, %llu keys, loaded in %.2f s\n", dir,
           meta.model_name, (unsigned long long)meta.version, (unsigned long long)entries, t_snap);

    struct timeval tv = {10, 0};
    l.rc = redisConnectWithTimeout(host, (int)port, tv);
    if (!l.rc || l.rc->err) {
        fprintf(stderr, "redis_load: cannot connect to Redis at %s:%ld: %s\n", host, port,
                l.rc ? l.rc->errstr : "out of memory");
        goto out;
    }
    long long before = db_size(l.rc);
    if (before > 0)
        fprintf(stderr, "redis_load: warning: Redis already holds %lld keys\n", before);
    long long mem0 = used_memory(l.rc);

    l.keys = malloc(l.batch * sizeof *l.keys);
    l.vals = malloc(l.batch * sizeof *l.vals);
    l.argv = malloc((1 + 2 * (size_t)l.batch) * sizeof *l.argv);
    l.argvlen = malloc((1 + 2 * (size_t)l.batch) * sizeof *l.argvlen);
    if (!l.keys || !l.vals || !l.argv || !l.argvlen) {
        fprintf(stderr, "redis_load: out of memory\n");
        goto out;
    }

    double t1 = now_s();
    for (uint32_t sh = 0; sh < store_shards(s); sh++)
        if (store_foreach(s, sh, visit, &l) != 0)
            goto fail;
    if (send_batch(&l) != 0)
        goto fail;
    while (l.inflight > 0)
        if (read_reply(&l) != 0)
            goto fail;
    double t_load = now_s() - t1;

    long long after = db_size(l.rc);
    long long mem1 = used_memory(l.rc);
    double per_key = (mem1 >= 0 && mem0 >= 0 && l.loaded) ? (double)(mem1 - mem0) / l.loaded : -1;
    double store_per_key = entries ? (double)st.table_bytes / entries : 0;
    double kps = t_load > 0 ? l.loaded / t_load : 0;
    printf("redis_load: %llu keys in %.2f s = %.0f keys/s (MSET x %u, %u in flight); DBSIZE %lld\n",
           (unsigned long long)l.loaded, t_load, kps, l.batch, l.depth, after);
    printf("redis_load: Redis used_memory %lld -> %lld bytes: %.1f bytes/key "
           "(tlserve store: %.1f bytes/key, raw 12)\n",
           mem0, mem1, per_key, store_per_key);
    if (after >= 0 && (uint64_t)after != l.loaded + (before > 0 ? (uint64_t)before : 0))
        fprintf(stderr, "redis_load: warning: DBSIZE %lld after loading %llu keys\n", after,
                (unsigned long long)l.loaded);
    printf("{\"keys\":%llu,\"seconds\":%.3f,\"keys_per_s\":%.0f,\"used_memory_before\":%lld,"
           "\"used_memory\":%lld,\"redis_bytes_per_key\":%.2f,\"store_bytes_per_key\":%.2f,"
           "\"dbsize\":%lld}\n",
           (unsigned long long)l.loaded, t_load, kps, mem0, mem1, per_key, store_per_key, after);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "redis_load: %s\n", l.err[0] ? l.err : "load failed");
out:
    if (l.rc)
        redisFree(l.rc);
    free(l.keys);
    free(l.vals);
    free(l.argv);
    free(l.argvlen);
    store_destroy(s);
    return rc;
}
