/*
 * sample_log_bench.c — what the local sample log costs the trainer's
 * acknowledgement path: append rate (records/s, MB/s) for the page view of
 * docs/wire.md's standard shape cut to one sample (a shared block of 500 ids
 * and one item block of 50 ids, random 64-bit ids, no values), in batches of
 * 1, 16 and 256, with fsync never and on every append; then the replay rate
 * of a reader decoding the whole log.
 *
 *   sample_log_bench [DIR] [--seconds S]
 *
 * Each append case runs for S seconds (default 0.5) into a fresh log in DIR
 * (default $TMPDIR or /tmp), trimming as it goes so the disk use stays at a
 * couple of segments; the replay reads the records of one batches-of-256
 * run (kept untrimmed, at most 200k records).  One line per case; figures
 * depend on the disk and the page cache, and never fail anything.
 */
#include "server/sample_log.h"
#include "tests/test_fs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void fill_ids(uint64_t *ids, uint32_t n, uint64_t *seed)
{
    for (uint32_t i = 0; i < n; i++)
        ids[i] = rnd(seed);
    qsort(ids, n, sizeof *ids, cmp_u64);
    for (uint32_t i = 1; i < n; i++) /* unique: random 64-bit ids almost never collide */
        if (ids[i] <= ids[i - 1])
            ids[i] = ids[i - 1] + 1;
}

#define VARIANTS 64 /* distinct records cycled through, built before timing */

static uint64_t shared_ids[VARIANTS][500], item_ids[VARIANTS][50];
static codec_block_t items[VARIANTS];
static float label1[1] = {1.0f};
static sample_log_rec_t variants[VARIANTS];
static sample_log_rec_t batch[256];

static void run_append(const char *dir, size_t bsize, sample_log_sync_t sync, double secs,
                       bool keep)
{
    test_rm_rf(dir);
    sample_log_t *log;
    sample_log_error_t err;
    sample_log_config_t cfg = {.sync = sync};
    if (sample_log_open(dir, &cfg, &log, NULL, &err)) {
        fprintf(stderr, "open: %s\n", err.msg);
        exit(1);
    }
    uint64_t recs = 0, bytes0 = 0;
    double t0 = now_s(), t;
    size_t v = 0;
    do {
        for (size_t i = 0; i < bsize; i++)
            batch[i] = variants[v++ % VARIANTS];
        if (sample_log_append(log, batch, bsize, NULL, &err)) {
            fprintf(stderr, "append: %s\n", err.msg);
            exit(1);
        }
        recs += bsize;
        if (!keep)
            sample_log_trim(log, sample_log_next_pos(log));
        t = now_s();
    } while (t - t0 < secs && !(keep && recs >= 200000));
    (void)bytes0;
    sample_log_close(log);
    /* Bytes per record from one encoded record's size on disk. */
    static double rec_bytes;
    if (rec_bytes == 0) {
        char d2[600];
        snprintf(d2, sizeof d2, "%s.one", dir);
        test_rm_rf(d2);
        sample_log_open(d2, &cfg, &log, NULL, &err);
        sample_log_append(log, variants, 1, NULL, &err);
        sample_log_close(log);
        char p[700];
        snprintf(p, sizeof p, "%s/00000000000000000000.slog", d2);
        struct stat st;
        rec_bytes = stat(p, &st) == 0 ? (double)st.st_size : 0;
        test_rm_rf(d2);
    }
    double dt = t - t0;
    printf("append batch=%-3zu fsync=%-12s %9.0f records/s %8.1f MB/s (%llu records, %.0f B each)\n",
           bsize, sync == SAMPLE_LOG_SYNC_NEVER ? "never" : "every-append", (double)recs / dt,
           (double)recs * rec_bytes / dt / 1e6, (unsigned long long)recs, rec_bytes);
}

static void run_replay(const char *dir)
{
    sample_log_reader_t *r;
    sample_log_error_t err;
    if (sample_log_reader_open(dir, 0, &r, &err)) {
        fprintf(stderr, "reader: %s\n", err.msg);
        exit(1);
    }
    codec_arena_t arena = {.cap = sample_log_arena_bound()};
    arena.base = malloc(arena.cap);
    sample_log_rec_t rec;
    uint64_t n = 0, features = 0;
    double t0 = now_s();
    int rc;
    while (codec_arena_reset(&arena), (rc = sample_log_next(r, &arena, &rec, NULL, &err)) == 0) {
        n++;
        features += rec.train.shared.n + rec.train.sample[0].n;
    }
    double dt = now_s() - t0;
    if (rc != SAMPLE_LOG_END)
        fprintf(stderr, "replay stopped: %s\n", err.msg);
    printf("replay %9.0f records/s %8.1f M features/s (%llu records, page cache warm)\n",
           (double)n / dt, (double)features / dt / 1e6, (unsigned long long)n);
    free(arena.base);
    sample_log_reader_close(r);
}

int main(int argc, char **argv)
{
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    double secs = 0.5;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            secs = atof(argv[++i]);
        else
            base = argv[i];
    }
    char dir[512];
    snprintf(dir, sizeof dir, "%s/sample_log_bench_%d", base, (int)getpid());
    uint64_t seed = 42;
    for (int v = 0; v < VARIANTS; v++) {
        fill_ids(shared_ids[v], 500, &seed);
        fill_ids(item_ids[v], 50, &seed);
        items[v] = (codec_block_t){.ids = item_ids[v], .n = 50};
        variants[v].train = (codec_train_t){.samples = 1,
                                            .shared = {.ids = shared_ids[v], .n = 500},
                                            .labels = label1,
                                            .sample = &items[v]};
        snprintf(variants[v].train.name, sizeof variants[v].train.name, "ctr");
    }
    size_t sizes[] = {1, 16, 256};
    for (int s = 0; s < 2; s++)
        for (size_t k = 0; k < 3; k++)
            run_append(dir, sizes[k], s ? SAMPLE_LOG_SYNC_EVERY_APPEND : SAMPLE_LOG_SYNC_NEVER,
                       secs, false);
    run_append(dir, 256, SAMPLE_LOG_SYNC_NEVER, 60, true);
    run_replay(dir);
    test_rm_rf(dir);
    return 0;
}
