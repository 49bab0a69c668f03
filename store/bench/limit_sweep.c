/*
 * limit_sweep.c — the random-read limit (mem_limit.c) over arrays of
 * several sizes, one core: shows how the rate falls as the array outgrows
 * the caches and the translation caches.
 *
 *   limit_sweep [MiB ...]        (default: 1 8 32 128 512 1536)
 *
 * Each size: a huge-page array of that many MiB, every word written, then
 * the best of prefetch distances 16..128 over 8M random 8-byte reads,
 * measured twice and the second run printed.  A benchmark: it never fails
 * on timing.
 *
 * THREAD SAFETY: a program; single-threaded.
 */
#include "mem_limit.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

int main(int argc, char **argv)
{
    static const char *defaults[] = {"1", "8", "32", "128", "512", "1536"};
    const char **sizes = argc > 1 ? (const char **)argv + 1 : defaults;
    int n = argc > 1 ? argc - 1 : (int)(sizeof defaults / sizeof defaults[0]);
    static uint64_t idx[1024];
    for (int i = 0; i < n; i++) {
        char *end;
        unsigned long mib = strtoul(sizes[i], &end, 10);
        if (*end || mib < 1 || mib > (1ul << 20)) {
            fprintf(stderr, "limit_sweep: '%s' is not a size in MiB (1..1048576)\n", sizes[i]);
            return 2;
        }
        size_t len;
        int huge_ok;
        uint64_t *a = mem_limit_map((uint64_t)mib << 20, &len, &huge_ok);
        if (!a) {
            fprintf(stderr, "limit_sweep: mmap of %lu MiB failed: %s\n", mib, strerror(errno));
            return 1;
        }
        mem_limit_best(a, len / 8, 8u << 20, 42, idx, 1024, NULL); /* warm-up */
        double r = mem_limit_best(a, len / 8, 8u << 20, 42, idx, 1024, NULL);
        printf("limit_reads_per_s over %5lu MiB: %.0f%s\n", mib, r, huge_ok ? "" : " (4 KiB pages)");
        munmap(a, len);
    }
    return 0;
}
