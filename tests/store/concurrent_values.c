/*
 * concurrent_values.c — keys, generations and values of the concurrent
 * tl_hash_map test (test_concurrent.c explains the encoding): key ids to keys
 * and kinds, a generation encoded into a value a reader can check without
 * knowing it, the per-thread anomaly notes, and small helpers.
 *
 * THREAD SAFETY: every function is pure or works on its caller's state
 * (an rng, a struct notes); the globals are set before any thread starts.
 */

#include "concurrent_harness.h"

const char *const anomaly_name[A_N] = {
    "stable key missed", "never-inserted key found", "invalid value", "torn value",
    "generation went backwards", "absent key not zero-filled", "batch count wrong",
    "writer saw a wrong result",
};

double g_seconds = 3.0; /* TL_CONCURRENT_SECONDS */
uint64_t g_key_inv;

/* ---- helpers ------------------------------------------------------------ */

uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t rng_next(uint64_t *s)
{
    *s += 0x9E3779B97F4A7C15ull;
    return mix64(*s);
}

uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t key_of(uint64_t c)
{
    return c * KEY_MUL;
}

enum kind kind_of(const struct world *w, uint64_t c)
{
    return c < w->sc->n_stable                  ? KIND_STABLE
           : c < w->sc->n_stable + w->sc->n_pool ? KIND_POOL
                                                 : KIND_NEVER;
}

void note(struct notes *n, enum anomaly a, const char *fmt, ...)
{
    n->count[a]++;
    if (n->n >= NOTES)
        return;
    int len = snprintf(n->text[n->n], sizeof n->text[0], "%s: ", anomaly_name[a]);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(n->text[n->n] + len, sizeof n->text[0] - (size_t)len, fmt, ap);
    va_end(ap);
    n->n++;
}

void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (p == NULL) {
        fprintf(stderr, "out of memory\n");
        abort();
    }
    return p;
}

/* ---- value encoding ------------------------------------------------------ */

uint32_t max_gen(const struct world *w)
{
    return w->sc->dtype == STORE_DTYPE_F16 ? F16_MAX_GEN : F32_MAX_GEN;
}

static uint32_t check8(uint64_t key, uint32_t gen)
{
    return (uint32_t)(mix64(key ^ ((uint64_t)gen << 40)) >> 56);
}

void encode(const struct world *w, uint64_t key, uint32_t gen, float *v)
{
    float f;
    if (w->sc->dtype == STORE_DTYPE_F16) {
        f = (float)(gen * 32 + (uint32_t)(mix64(key) & 31));
    } else {
        uint32_t bits = 0x01000000u + (gen << 8 | check8(key, gen));
        memcpy(&f, &bits, 4);
    }
    for (uint32_t j = 0; j < w->sc->k; j++)
        v[j] = f;
}

/* The generation a value encodes, or 0 when no write produced it. */
uint32_t decode(const struct world *w, uint64_t key, float f)
{
    if (w->sc->dtype == STORE_DTYPE_F16) {
        if (!(f >= 32.0f && f < 2048.0f) || f != (float)(uint32_t)f)
            return 0;
        uint32_t x = (uint32_t)f;
        return (x & 31) == (mix64(key) & 31) ? x >> 5 : 0;
    }
    uint32_t bits;
    memcpy(&bits, &f, 4);
    if (bits < 0x01000100u || bits - 0x01000000u > (F32_MAX_GEN << 8 | 0xFF))
        return 0;
    uint32_t x = bits - 0x01000000u, gen = x >> 8;
    return (x & 0xFF) == check8(key, gen) ? gen : 0;
}

bool floats_equal(const float *v, uint32_t k)
{
    for (uint32_t j = 1; j < k; j++)
        if (memcmp(&v[j], &v[0], sizeof(float)) != 0)
            return false;
    return true;
}
