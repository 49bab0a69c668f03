/*
 * umap_baseline.cc — the yardstick for store_bench: std::unordered_map<
 * uint64_t, float>, the map a C++ engineer reaches for first, behind a small
 * C interface so that store_bench.c drives it with the same keys, the same
 * random order and the same RSS measurement as the store.
 *
 * Why the figures are fair to the map:
 *   - reserve(M) before inserting, so no rehash leaves freed bucket arrays in
 *     malloc's free lists to inflate the RSS delta: the figure is the map at
 *     rest.  With libstdc++ and glibc malloc that is a bucket array (8 B per
 *     bucket, ~1 bucket per key at max_load_factor 1) plus one node per key
 *     (next pointer, key, float, padding: 24 B, a 32 B malloc chunk).
 *   - find() one key at a time, which is all the container offers: no batch
 *     API, no prefetch.  The loop over a batch lives here, compiled at the
 *     same -O level as the store, so the C/C++ boundary is crossed once per
 *     batch, not once per key.
 *   - umap_destroy() frees everything and calls malloc_trim(0), so that the
 *     store's later RSS deltas start from a clean heap.
 *
 * Exceptions never cross into C: std::bad_alloc and std::length_error
 * become -ENOMEM.
 *
 * THREAD SAFETY: none; one thread drives a map.
 */
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <new>
#include <stdexcept>
#include <unordered_map>

#include <malloc.h>

struct umap {
    std::unordered_map<uint64_t, float> map; /* the baseline itself */
};

extern "C" {
/* The C face; store_bench.h declares the same prototypes. */
int umap_create(uint64_t reserve, struct umap **out);
int umap_insert_batch(struct umap *m, const uint64_t *keys, const float *values, size_t n);
size_t umap_find_batch(const struct umap *m, const uint64_t *keys, size_t n, float *out);
uint64_t umap_size(const struct umap *m);
void umap_destroy(struct umap *m);
}

/* Creates an empty map with room for `reserve` keys (no rehash below that).
 * Returns 0 and sets *out (caller owns it; free with umap_destroy), or
 * -ENOMEM. */
int umap_create(uint64_t reserve, struct umap **out)
{
    *out = nullptr;
    try {
        umap *m = new umap;
        try {
            m->map.reserve(static_cast<size_t>(reserve));
        } catch (...) {
            delete m;
            throw;
        }
        *out = m;
        return 0;
    } catch (const std::bad_alloc &) {
        return -ENOMEM;
    } catch (const std::length_error &) {
        return -ENOMEM;
    }
}

/* Inserts n keys with their values.  Returns 0, -EEXIST when a key was
 * already present (the caller's keys are meant to be distinct), or -ENOMEM
 * (keys before the failing one stay inserted). */
int umap_insert_batch(struct umap *m, const uint64_t *keys, const float *values, size_t n)
{
    try {
        for (size_t i = 0; i < n; i++)
            if (!m->map.emplace(keys[i], values[i]).second)
                return -EEXIST;
        return 0;
    } catch (const std::bad_alloc &) {
        return -ENOMEM;
    } catch (const std::length_error &) {
        return -ENOMEM;
    }
}

/* Looks up n keys one find() at a time; out[i] gets the value or 0.0f when
 * absent.  Returns the number found.  Never allocates. */
size_t umap_find_batch(const struct umap *m, const uint64_t *keys, size_t n, float *out)
{
    const auto &map = m->map;
    const auto end = map.end();
    size_t found = 0;
    for (size_t i = 0; i < n; i++) {
        auto it = map.find(keys[i]);
        if (it != end) {
            out[i] = it->second;
            found++;
        } else {
            out[i] = 0.0f;
        }
    }
    return found;
}

uint64_t umap_size(const struct umap *m)
{
    return m->map.size();
}

/* Frees the map and hands glibc's free memory back to the kernel. */
void umap_destroy(struct umap *m)
{
    delete m;
    malloc_trim(0);
}
