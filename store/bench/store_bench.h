/*
 * store_bench.h — what the parts of the store benchmark share: the flags it
 * runs with (struct config), its memory readings and batch scratch, the key
 * and value generators the timed loops inline, and the environment
 * functions (store_bench_env.c: temp dir, errors, clocks, /proc, CPU
 * pinning, output) and flag parsing (store_bench_flags.c).  What the
 * benchmark measures and why the figures are honest: store_bench.c.
 *
 * THREAD SAFETY: a program; the globals are the main thread's, except
 * g_root_made, which the fatal-signal handler reads.
 */
#ifndef TL_STORE_BENCH_H
#define TL_STORE_BENCH_H

#define _GNU_SOURCE
#include "store/store.h"
#include "store/synthetic.h"
#include "mem_limit.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

/* umap_baseline.cc: std::unordered_map<uint64_t, float> behind a C face. */
typedef struct umap umap_t;
int umap_create(uint64_t reserve, umap_t **out);
int umap_insert_batch(umap_t *m, const uint64_t *keys, const float *values, size_t n);
size_t umap_find_batch(const umap_t *m, const uint64_t *keys, size_t n, float *out);
uint64_t umap_size(const umap_t *m);
void umap_destroy(umap_t *m);

#define BATCH 1024                     /* keys per store_lookup_batch call */
#define DEFAULT_LOOKUPS 20000000ull
#define DEFAULT_BASELINE_CAP 20000000ull
#define VERIFY_SAMPLE (1u << 20)       /* lookups that check the loaded store */

struct config {
    uint64_t keys;          /* N */
    uint32_t value_floats;  /* K */
    store_dtype_t dtype;    /* storage dtype of the store */
    uint64_t baseline_keys; /* M; 0 = skip the unordered_map phase */
    uint64_t expected_keys; /* E: the build's sizing hint (N unless given) */
    uint32_t shards;        /* 0 = the store's default */
    uint32_t threads;       /* builder and loader threads */
    uint64_t lookups;       /* L: per lookup phase and per limit run */
    uint64_t seed;          /* key(i) = store_mix64(seed + i) */
    const char *tmp;        /* parent of the snapshot temp dir */
    bool json;              /* last line: the JSON object */
};

struct mem {
    uint64_t rss;       /* bytes resident */
    uint64_t anon_huge; /* bytes of that in transparent huge pages */
};

/* Scratch for one batch; allocated once, never on a timed path. */
struct bufs {
    uint64_t *keys;  /* BATCH keys (or limit-array indices) */
    float *out;      /* BATCH * K floats */
    uint8_t *found;  /* BATCH flags, for diagnosing a failed check */
};

/* ---- keys, values, random numbers (inlined into the timed loops) -------- */

/* Key i: splitmix64's output function (store_mix64), a bijection. */
static inline uint64_t key_of(uint64_t seed, uint64_t i)
{
    return store_mix64(seed + i);
}

/* Float j of key's value: an integer from 11 (f16) or 24 (f32) of the key's
 * bits, scaled by a power of two, so it is exact in the storage dtype. */
static inline float value_of(uint64_t key, uint32_t j, store_dtype_t dt)
{
    unsigned rot = (j * 13u) & 63u; /* 13 is odd: K <= 64 floats, 64 rotations */
    uint64_t b = rot ? (key >> rot) | (key << (64 - rot)) : key;
    if (dt == STORE_DTYPE_F16)
        return (float)((int32_t)(b & 0x7ffu) - 1024) * 0.0625f;
    return (float)((int32_t)(b & 0xffffffu) - 0x800000) * (1.0f / 65536.0f);
}

extern char g_root[4096];         /* <tmp>/store_bench.XXXXXX */
extern char g_snap[4096 + 16];    /* <root>/snapshot */
extern volatile sig_atomic_t g_root_made;
void remove_tmp(void);
void on_fatal_signal(int sig);
void fatal(const char *fmt, ...) __attribute__((noreturn, cold, format(printf, 1, 2)));
void usage(FILE *f);
void usage_error(const char *fmt, ...) __attribute__((noreturn, cold, format(printf, 1, 2)));
double now_s(void);
double tv_s(struct timeval tv);
struct mem mem_now(void);
uint64_t status_bytes(const char *name);
bool reset_hwm(void);
uint64_t mem_available(void);
extern int g_cpu;       /* the CPU of the single-core phases */
extern bool g_pinnable;
void pin_init(void);
void pin_one(void);
void pin_all(void);
uint32_t usable_cpus(void);
void line(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *dtype_name(store_dtype_t dt);
void parse_flags(int argc, char **argv, struct config *c);

#endif
