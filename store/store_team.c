/*
 * store_team.c — one large batched lookup split over helper threads (the API
 * and its contract: store.h, "split lookups").
 *
 * The team holds ONE job: a lookup cut into nchunks chunks of `chunk` keys.
 * Its owner (the caller that won `busy`) writes the job's description, resets
 * `done` and publishes the job by storing a new generation into `claim`:
 *
 *   claim = generation << 32 | next chunk to take
 *
 * then bumps `seq` and wakes the sleeping helpers (a futex on seq).  Owner and
 * helpers take chunks with a CAS on claim; a CAS that succeeds took chunk
 * `next` of that generation, and the owner does not end the generation until
 * `done` counts every chunk, so the description a taker reads AFTER its CAS is
 * that generation's.  A helper that woke late, or read a claim of a finished
 * generation, fails its CAS (the word has moved on) and takes nothing.  The
 * owner takes chunks too, then waits until the chunks helpers hold are done
 * (at most one chunk each: ~1/8 of a share, tens of microseconds).
 *
 * The wait spins for at most OWNER_SPIN_NS, then sleeps on a futex on `done`
 * that the helper finishing a chunk wakes.  A chunk takes tens of
 * microseconds (2,500 keys of a 40,000-key request), so a helper still on
 * its chunk after half a millisecond is not running: only then does the
 * owner sleep (a sleep costs a wake-up, and on a VM an idle vCPU's exit).  On a machine with more runnable
 * threads than cores a helper can be preempted inside its chunk; an owner
 * spinning on then keeps its own core busy while the helper waits for a
 * core, and the request stalls for the other thread's whole time slice
 * (milliseconds).  Asleep, the owner frees its core for the helper.  The
 * handshake is Dekker's: the owner stores owner_waits then loads done, a
 * helper adds to done then loads owner_waits, all sequentially consistent,
 * so either the owner sees the chunk done or the helper sees it waiting and
 * wakes it; futex_wait returns at once if done moved since it was read.
 *
 * Memory ordering: the description is written with relaxed stores before the
 * release store of claim and read with relaxed loads after an acquire CAS on
 * claim; results (out, found) are published by the release increment of done
 * and read by the owner's acquire load of it.  busy is taken with acquire and
 * given back with release, so the next owner starts after the last one ended.
 */
#include "store_internal.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_MIN_KEYS 8192
#define MIN_CHUNK 1024
#define CHUNKS_PER_THREAD 8
#define OWNER_SPIN_NS 500000 /* ten chunks' time and more: past it the owner sleeps */

struct store_team {
    /* the job's description, written by its owner between generations */
    _Atomic(const store_t *) store;
    _Atomic(const uint64_t *) keys;
    _Atomic(float *) out;
    _Atomic(uint8_t *) found;
    atomic_size_t n, chunk;
    atomic_uint nchunks;
    /* the job's progress */
    _Alignas(64) _Atomic uint64_t claim; /* generation << 32 | next chunk */
    atomic_uint done;                    /* chunks of this generation finished; futex word */
    atomic_bool owner_waits;             /* the owner sleeps on done */
    atomic_size_t hits;                  /* keys found in them */
    /* the team */
    _Alignas(64) atomic_bool busy; /* a caller owns the job */
    atomic_uint seq;               /* futex word: bumped per job and at stop */
    atomic_bool stopping;
    _Atomic uint64_t splits;
    _Atomic uint64_t sleeps; /* owner waits that went to sleep */
    size_t min_keys;
    int helpers; /* threads running */
    pthread_t thread[];
};

static void futex_wait(atomic_uint *word, unsigned seen)
{
    syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
}

static void futex_wake(atomic_uint *word, int n)
{
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

/* Takes chunks of the current generation until none are left. */
static void take_chunks(store_team_t *t)
{
    uint64_t c = atomic_load_explicit(&t->claim, memory_order_acquire);
    for (;;) {
        uint32_t next = (uint32_t)c;
        if (next >= atomic_load_explicit(&t->nchunks, memory_order_relaxed))
            return;
        if (!atomic_compare_exchange_weak_explicit(&t->claim, &c, c + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue; /* c now holds the word as it is */
        size_t n = atomic_load_explicit(&t->n, memory_order_relaxed);
        size_t chunk = atomic_load_explicit(&t->chunk, memory_order_relaxed);
        const store_t *s = atomic_load_explicit(&t->store, memory_order_relaxed);
        const uint64_t *keys = atomic_load_explicit(&t->keys, memory_order_relaxed);
        float *out = atomic_load_explicit(&t->out, memory_order_relaxed);
        uint8_t *found = atomic_load_explicit(&t->found, memory_order_relaxed);
        size_t from = (size_t)next * chunk, len = n - from < chunk ? n - from : chunk;
        size_t K = store_value_floats(s);
        size_t hits =
            store_lookup_batch(s, keys + from, len, out + from * K, found ? found + from : NULL);
        atomic_fetch_add_explicit(&t->hits, hits, memory_order_relaxed);
        atomic_fetch_add_explicit(&t->done, 1, memory_order_seq_cst);
        if (atomic_load_explicit(&t->owner_waits, memory_order_seq_cst))
            futex_wake(&t->done, 1);
        c++;
    }
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The owner's wait for the chunks helpers still hold (see the top). */
static void wait_done(store_team_t *t, unsigned nchunks)
{
    uint64_t start = 0;
    for (unsigned spins = 1; atomic_load_explicit(&t->done, memory_order_acquire) < nchunks;
         spins++) {
        if ((spins & 255) == 0) {
            uint64_t now = mono_ns();
            if (!start)
                start = now;
            else if (now - start > OWNER_SPIN_NS)
                break;
        }
        cpu_relax();
    }
    unsigned d;
    bool slept = false;
    while ((d = atomic_load_explicit(&t->done, memory_order_seq_cst)) < nchunks) {
        atomic_store_explicit(&t->owner_waits, true, memory_order_seq_cst);
        if ((d = atomic_load_explicit(&t->done, memory_order_seq_cst)) >= nchunks)
            break;
        futex_wait(&t->done, d);
        slept = true;
    }
    atomic_store_explicit(&t->owner_waits, false, memory_order_relaxed);
    if (slept)
        atomic_fetch_add_explicit(&t->sleeps, 1, memory_order_relaxed);
}

static void *helper_main(void *arg)
{
    store_team_t *t = arg;
    for (;;) {
        unsigned seq = atomic_load_explicit(&t->seq, memory_order_acquire);
        if (atomic_load_explicit(&t->stopping, memory_order_relaxed))
            return NULL;
        take_chunks(t);
        futex_wait(&t->seq, seq); /* returns at once if seq moved since */
    }
}

int store_team_create(int helpers, size_t min_keys, store_team_t **out)
{
    *out = NULL;
    if (helpers < 1 || helpers > STORE_TEAM_MAX_HELPERS)
        return -EINVAL;
    store_team_t *t = calloc(1, sizeof *t + (size_t)helpers * sizeof t->thread[0]);
    if (!t)
        return -ENOMEM;
    t->min_keys = min_keys ? min_keys : DEFAULT_MIN_KEYS;
    if (t->min_keys < 2 * MIN_CHUNK)
        t->min_keys = 2 * MIN_CHUNK;
    for (; t->helpers < helpers; t->helpers++) {
        int rc = pthread_create(&t->thread[t->helpers], NULL, helper_main, t);
        if (rc) {
            store_team_destroy(t);
            return -rc;
        }
    }
    *out = t;
    return 0;
}

void store_team_destroy(store_team_t *t)
{
    if (!t)
        return;
    atomic_store_explicit(&t->stopping, true, memory_order_relaxed);
    atomic_fetch_add_explicit(&t->seq, 1, memory_order_release);
    futex_wake(&t->seq, t->helpers);
    for (int i = 0; i < t->helpers; i++)
        pthread_join(t->thread[i], NULL);
    free(t);
}

size_t store_team_lookup(store_team_t *t, const store_t *s, const uint64_t *keys, size_t n,
                         float *out, uint8_t *found)
{
    if (!t || n < t->min_keys || atomic_load_explicit(&t->busy, memory_order_relaxed) ||
        atomic_exchange_explicit(&t->busy, true, memory_order_acquire))
        return store_lookup_batch(s, keys, n, out, found);

    size_t chunk = n / ((size_t)(t->helpers + 1) * CHUNKS_PER_THREAD);
    if (chunk < MIN_CHUNK)
        chunk = MIN_CHUNK;
    unsigned nchunks = (unsigned)((n + chunk - 1) / chunk);
    atomic_store_explicit(&t->store, s, memory_order_relaxed);
    atomic_store_explicit(&t->keys, keys, memory_order_relaxed);
    atomic_store_explicit(&t->out, out, memory_order_relaxed);
    atomic_store_explicit(&t->found, found, memory_order_relaxed);
    atomic_store_explicit(&t->n, n, memory_order_relaxed);
    atomic_store_explicit(&t->chunk, chunk, memory_order_relaxed);
    atomic_store_explicit(&t->nchunks, nchunks, memory_order_relaxed);
    atomic_store_explicit(&t->done, 0, memory_order_relaxed);
    atomic_store_explicit(&t->hits, 0, memory_order_relaxed);
    uint64_t gen = (atomic_load_explicit(&t->claim, memory_order_relaxed) >> 32) + 1;
    atomic_store_explicit(&t->claim, gen << 32, memory_order_release);
    atomic_fetch_add_explicit(&t->seq, 1, memory_order_release);
    futex_wake(&t->seq, t->helpers);

    take_chunks(t);
    wait_done(t, nchunks);
    size_t hits = atomic_load_explicit(&t->hits, memory_order_relaxed);
    atomic_fetch_add_explicit(&t->splits, 1, memory_order_relaxed);
    atomic_store_explicit(&t->busy, false, memory_order_release);
    return hits;
}

uint64_t store_team_splits(const store_team_t *t)
{
    return t ? atomic_load_explicit(&t->splits, memory_order_relaxed) : 0;
}

uint64_t store_team_sleeps(const store_team_t *t)
{
    return t ? atomic_load_explicit(&t->sleeps, memory_order_relaxed) : 0;
}
