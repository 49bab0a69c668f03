/*
 * concurrent_harness.h — the parts of the concurrent tl_hash_map test
 * (test_concurrent.c) and what they share: the scenario, the world the
 * writer and reader threads run in, the anomaly notes, and the key and value
 * encoding (concurrent_values.c), the writer and reader threads
 * (concurrent_threads.c).  KEYS, VALUES and the contract the threads follow:
 * test_concurrent.c.
 *
 * THREAD SAFETY: a world is shared by its threads as test_concurrent.c
 * describes; each writer and reader owns its struct writer / struct reader.
 */
#ifndef TL_TESTS_CONCURRENT_HARNESS_H
#define TL_TESTS_CONCURRENT_HARNESS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store/store.h"
#include "store/store_internal.h"

#define KEY_MUL 0x9E3779B97F4A7C15ull
#define MAX_THREADS 8
#define MAX_BATCH 256
#define F32_MAX_GEN ((1u << 22) - 1)
#define F16_MAX_GEN 63u
#define NOTES 4 /* anomaly descriptions kept per thread */

enum kind { KIND_STABLE, KIND_POOL, KIND_NEVER };
enum mode { MODE_GROWTH, MODE_CHURN, MODE_OVERWRITE };

enum anomaly {
    A_MISS,        /* a stable key not found */
    A_PHANTOM,     /* a never-inserted key found */
    A_BAD_VALUE,   /* a value no write ever produced for that key */
    A_TORN,        /* the K floats of one value differ */
    A_BACKWARDS,   /* a key's generation went down */
    A_NOT_ZERO,    /* an absent key of a batch not zero-filled */
    A_COUNT,       /* batch return value != number found */
    A_WRITER,      /* a writer's return value or own read-back was wrong */
    A_N
};
extern const char *const anomaly_name[A_N];

struct scenario {
    const char *name;
    enum mode mode;
    uint32_t k;
    store_dtype_t dtype;
    uint32_t shards;
    int writers, readers;
    uint64_t n_stable, n_pool, n_never;
    double max_load; /* 0 = the store's default */
    unsigned churn_permille; /* churn: share of the pool kept present (0 = 900) */
    bool reserve_exact;      /* reserve per sub-table, exactly (the loader's way) */
    double seconds;
};

struct notes {
    uint64_t count[A_N];
    int n;
    char text[NOTES][200];
};

struct world;

struct writer {
    struct world *w;
    pthread_t tid;
    uint64_t seed;
    uint32_t *stable; /* ids this writer owns */
    size_t n_stable;
    uint32_t *pool;
    size_t n_pool;
    uint64_t ops, inserts, deletes, overwrites;
    uint64_t stashed_max; /* store_stats().stashed, sampled */
    struct notes notes;
};

struct reader {
    struct world *w;
    pthread_t tid;
    uint64_t seed;
    uint32_t *last;  /* [n_ids]: highest generation seen per key */
    uint64_t lookups, hits, batches, singles;
    struct notes notes;
};

struct world {
    const struct scenario *sc;
    store_t *s;
    uint64_t n_ids;
    uint32_t *gen;      /* [n_ids]: written by the owning writer only */
    uint8_t *present;   /* [n_ids]: idem */
    uint64_t deadline;  /* CLOCK_MONOTONIC ns: writers stop here */
    pthread_barrier_t start;
    atomic_int writers_left;
    atomic_bool stop;   /* readers stop when set */
    struct writer wr[MAX_THREADS];
    struct reader rd[MAX_THREADS];
};

extern double g_seconds; /* TL_CONCURRENT_SECONDS */
extern uint64_t g_key_inv;

uint64_t mix64(uint64_t z);
uint64_t rng_next(uint64_t *s);
uint64_t now_ns(void);
uint64_t key_of(uint64_t c);
enum kind kind_of(const struct world *w, uint64_t c);
void note(struct notes *n, enum anomaly a, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void *xcalloc(size_t n, size_t size);
uint32_t max_gen(const struct world *w);
void encode(const struct world *w, uint64_t key, uint32_t gen, float *v);
uint32_t decode(const struct world *w, uint64_t key, float f);
bool floats_equal(const float *v, uint32_t k);
void *writer_main(void *arg);
void *reader_main(void *arg);

#endif
