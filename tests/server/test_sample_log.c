/*
 * test_sample_log.c — the local sample log (server/sample_log.c) on a real
 * directory: round trips across segments, readers from any position,
 * reopen, kill -9 of a real appending child, torn tails at every byte,
 * corruption refused with file and offset, trim, and records over the
 * limits refused.
 *
 * Records are generated from their position (gen_rec), so any record read
 * back is checked field by field against what was appended there.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "server/sample_log.h"
#include "tests/test_fs.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAXS 4 /* samples per generated record */
#define MAXF 40 /* features per generated block */

/* A generated record and the storage its pointers use. */
struct gen {
    sample_log_rec_t rec;
    codec_block_t blocks[MAXS];
    uint64_t ids[MAXS + 1][MAXF];
    float vals[MAXS + 1][MAXF];
    float labels[MAXS];
    float weights[MAXS];
    uint8_t mark[SAMPLE_LOG_MARK_BYTES];
};

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void gen_block(codec_block_t *b, uint64_t *ids, float *vals, uint64_t seed)
{
    uint32_t n = (uint32_t)(mix(seed) % MAXF);
    uint64_t id = mix(seed + 1) % 1000;
    for (uint32_t i = 0; i < n; i++) {
        id += 1 + mix(seed + 2 + i) % 100000;
        ids[i] = id;
        vals[i] = (float)(mix(seed + 3 + i) % 7) * 0.5f;
    }
    b->ids = ids;
    b->n = n;
    b->values = (seed & 1) ? vals : NULL;
}

/* The record appended at position pos. */
static void gen_rec(struct gen *g, uint64_t pos)
{
    memset(&g->rec, 0, sizeof g->rec);
    snprintf(g->rec.train.name, sizeof g->rec.train.name, "m%u", (unsigned)(pos % 3));
    uint32_t s = 1 + (uint32_t)(mix(pos * 7) % MAXS);
    g->rec.train.samples = s;
    gen_block(&g->rec.train.shared, g->ids[MAXS], g->vals[MAXS], pos * 101);
    for (uint32_t i = 0; i < s; i++) {
        gen_block(&g->blocks[i], g->ids[i], g->vals[i], pos * 101 + 11 * (i + 1));
        g->labels[i] = (float)(mix(pos + i) & 1);
        g->weights[i] = 0.25f * (float)(i + 1);
    }
    g->rec.train.labels = g->labels;
    g->rec.train.sample = g->blocks;
    g->rec.weights = (pos % 4 == 0) ? NULL : g->weights;
    for (uint32_t i = 0; i < SAMPLE_LOG_MARK_BYTES; i++) /* every third record: a mark */
        g->mark[i] = (uint8_t)mix(pos * 13 + i);
    g->rec.mark = (pos % 3 == 1) ? g->mark : NULL;
}

static void same_block(const codec_block_t *a, const codec_block_t *b)
{
    assert_int_equal(a->n, b->n);
    if (a->n)
        assert_memory_equal(a->ids, b->ids, a->n * sizeof *a->ids);
    assert_int_equal(a->values != NULL, b->values != NULL);
    if (a->values && a->n)
        assert_memory_equal(a->values, b->values, a->n * sizeof *a->values);
}

/* Checks that rec is what gen_rec made for pos. */
static void check_rec(const sample_log_rec_t *rec, uint64_t pos)
{
    static struct gen g;
    gen_rec(&g, pos);
    assert_string_equal(rec->train.name, g.rec.train.name);
    assert_int_equal(rec->train.samples, g.rec.train.samples);
    same_block(&rec->train.shared, &g.rec.train.shared);
    assert_non_null(rec->weights);
    assert_int_equal(rec->mark != NULL, g.rec.mark != NULL);
    if (g.rec.mark)
        assert_memory_equal(rec->mark, g.mark, SAMPLE_LOG_MARK_BYTES);
    for (uint32_t i = 0; i < g.rec.train.samples; i++) {
        assert_true(rec->train.labels[i] == g.labels[i]);
        assert_true(rec->weights[i] == (g.rec.weights ? g.weights[i] : 1.0f));
        same_block(&rec->train.sample[i], &g.blocks[i]);
    }
}

static char *tmpdir(const char *name)
{
    static char path[512];
    const char *base = getenv("TL_TEST_TMP");
    snprintf(path, sizeof path, "%s/slog_%s_%d", base ? base : "/tmp", name, (int)getpid());
    test_rm_rf(path);
    char parent[512];
    snprintf(parent, sizeof parent, "%s", base ? base : "/tmp");
    test_mkdir_p(parent);
    return path;
}

static codec_arena_t arena;

static void append_range(sample_log_t *log, uint64_t from, uint64_t to, size_t batch)
{
    static struct gen g[64];
    static sample_log_rec_t recs[64];
    assert_true(batch <= 64);
    for (uint64_t p = from; p < to;) {
        size_t n = 0;
        for (; n < batch && p + n < to; n++) {
            gen_rec(&g[n], p + n);
            recs[n] = g[n].rec;
        }
        uint64_t first = UINT64_MAX;
        sample_log_error_t err;
        int rc = sample_log_append(log, recs, n, &first, &err);
        if (rc)
            fail_msg("append: %s", err.msg);
        assert_int_equal(first, p);
        p += n;
    }
    assert_int_equal(sample_log_next_pos(log), to);
}

/* Reads from `from` to the end, checking each record; returns the end. */
static uint64_t read_all(const char *dir, uint64_t from)
{
    sample_log_reader_t *r = NULL;
    sample_log_error_t err;
    int rc = sample_log_reader_open(dir, from, &r, &err);
    if (rc)
        fail_msg("reader_open(%llu): %s", (unsigned long long)from, err.msg);
    uint64_t want = from, pos;
    sample_log_rec_t rec;
    for (;;) {
        codec_arena_reset(&arena);
        rc = sample_log_next(r, &arena, &rec, &pos, &err);
        if (rc == SAMPLE_LOG_END)
            break;
        if (rc)
            fail_msg("next at %llu: %s", (unsigned long long)want, err.msg);
        assert_int_equal(pos, want);
        check_rec(&rec, pos);
        want++;
    }
    assert_int_equal(sample_log_reader_pos(r), want);
    sample_log_reader_close(r);
    return want;
}

static const sample_log_config_t small = {.segment_bytes = 8192, .sync = SAMPLE_LOG_SYNC_NEVER};

/* Files of dir whose names end with suffix. */
static int count_named(const char *dir, const char *suffix)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    size_t ls = strlen(suffix);
    while (d && (e = readdir(d))) {
        size_t l = strlen(e->d_name);
        n += l >= ls && strcmp(e->d_name + l - ls, suffix) == 0;
    }
    if (d)
        closedir(d);
    return n;
}

static void round_trip_and_readers(void **state)
{
    (void)state;
    char *dir = tmpdir("rt");
    sample_log_t *log;
    sample_log_error_t err;
    uint64_t torn = 99;
    assert_int_equal(sample_log_open(dir, &small, &log, &torn, &err), 0);
    assert_int_equal(torn, 0);
    append_range(log, 0, 300, 1);
    append_range(log, 300, 700, 16);
    assert_true(count_named(dir, ".slog") >= 5);
    assert_int_equal(read_all(dir, 0), 700);   /* from the start */
    assert_int_equal(read_all(dir, 351), 700); /* from the middle */
    assert_int_equal(read_all(dir, 699), 700); /* from the last record */
    assert_int_equal(read_all(dir, 700), 700); /* from the end */
    sample_log_reader_t *r;
    assert_int_equal(sample_log_reader_open(dir, 701, &r, &err), -ERANGE);
    assert_int_equal(err.code, SAMPLE_LOG_E_POSITION);

    /* A reader at the end sees what is appended after it looked. */
    assert_int_equal(sample_log_reader_open(dir, 700, &r, &err), 0);
    sample_log_rec_t rec;
    uint64_t pos;
    assert_int_equal(sample_log_next(r, &arena, &rec, &pos, &err), SAMPLE_LOG_END);
    append_range(log, 700, 800, 16);
    for (uint64_t p = 700; p < 800; p++) {
        codec_arena_reset(&arena);
        assert_int_equal(sample_log_next(r, &arena, &rec, &pos, &err), 0);
        assert_int_equal(pos, p);
        check_rec(&rec, p);
    }
    assert_int_equal(sample_log_next(r, &arena, &rec, &pos, &err), SAMPLE_LOG_END);
    sample_log_reader_close(r);

    /* A second writer is refused; reopen continues the positions. */
    sample_log_t *other;
    assert_int_equal(sample_log_open(dir, &small, &other, NULL, &err), -EBUSY);
    assert_int_equal(sample_log_close(log), 0);
    assert_int_equal(sample_log_open(dir, &small, &log, &torn, &err), 0);
    assert_int_equal(torn, 0);
    assert_int_equal(sample_log_next_pos(log), 800);
    append_range(log, 800, 900, 7);
    assert_int_equal(sample_log_close(log), 0);
    assert_int_equal(read_all(dir, 0), 900);
    test_rm_rf(dir);
}

static void trim_whole_segments(void **state)
{
    (void)state;
    char *dir = tmpdir("trim");
    sample_log_t *log;
    sample_log_error_t err;
    assert_int_equal(sample_log_open(dir, &small, &log, NULL, &err), 0);
    append_range(log, 0, 500, 8);
    int before = count_named(dir, ".slog");
    assert_int_equal(sample_log_trim(log, 0), 0);
    int k = sample_log_trim(log, 250);
    assert_true(k >= 1);
    assert_int_equal(count_named(dir, ".slog"), before - k);
    uint64_t first = sample_log_first_pos(log);
    assert_true(first > 0 && first <= 250);
    assert_int_equal(read_all(dir, 250), 500); /* still there */
    assert_int_equal(read_all(dir, first), 500);
    sample_log_reader_t *r;
    assert_int_equal(sample_log_reader_open(dir, first - 1, &r, &err), -ERANGE);
    /* Never the segment being written, even past the end. */
    sample_log_trim(log, UINT64_MAX);
    assert_int_equal(count_named(dir, ".slog"), 1);
    append_range(log, 500, 520, 4);
    assert_int_equal(sample_log_close(log), 0);
    assert_int_equal(sample_log_open(dir, &small, &log, NULL, &err), 0);
    assert_int_equal(sample_log_next_pos(log), 520);
    assert_int_equal(read_all(dir, sample_log_first_pos(log)), 520);
    sample_log_close(log);
    test_rm_rf(dir);
}

static void too_large_and_bad_refused(void **state)
{
    (void)state;
    char *dir = tmpdir("big");
    sample_log_t *log;
    sample_log_error_t err;
    assert_int_equal(sample_log_open(dir, &small, &log, NULL, &err), 0);
    static struct gen g;
    gen_rec(&g, 1);
    sample_log_rec_t recs[2] = {g.rec, g.rec};

    recs[1].train.samples = CODEC_MAX_ITEMS + 1; /* over MAX_ITEMS */
    assert_int_equal(sample_log_append(log, recs, 2, NULL, &err), -E2BIG);
    assert_int_equal(err.code, SAMPLE_LOG_E_TOO_LARGE);
    assert_non_null(strstr(err.msg, "record 1"));

    /* Over MAX_REQUEST_FEATURES: 17 blocks of 65536 features. */
    static uint64_t ids[CODEC_MAX_BLOCK_FEATURES];
    for (uint32_t i = 0; i < CODEC_MAX_BLOCK_FEATURES; i++)
        ids[i] = i + 1;
    static codec_block_t blocks[17];
    static float labels[17];
    for (int i = 0; i < 17; i++)
        blocks[i] = (codec_block_t){.ids = ids, .n = CODEC_MAX_BLOCK_FEATURES};
    recs[1] = g.rec;
    recs[1].train.samples = 17;
    recs[1].train.sample = blocks;
    recs[1].train.labels = labels;
    recs[1].weights = NULL;
    assert_int_equal(sample_log_append(log, recs, 2, NULL, &err), -E2BIG);
    assert_int_equal(err.code, SAMPLE_LOG_E_TOO_LARGE);

    /* Unsorted ids, a bad label, a bad weight: refused, naming the record. */
    recs[1] = g.rec;
    uint64_t unsorted[2] = {5, 3};
    codec_block_t ub = {.ids = unsorted, .n = 2};
    recs[1].train.shared = ub;
    assert_int_equal(sample_log_append(log, recs, 2, NULL, &err), -EINVAL);
    assert_int_equal(err.code, SAMPLE_LOG_E_RECORD);
    recs[1] = g.rec;
    float bad_w[MAXS] = {1, 1, 1, 1};
    bad_w[0] = -1.0f;
    recs[1].weights = bad_w;
    assert_int_equal(sample_log_append(log, recs, 2, NULL, &err), -EINVAL);
    float bad_l[MAXS] = {0.5f, 0.5f, 0.5f, 0.5f};
    recs[1] = g.rec;
    recs[1].train.labels = bad_l;
    assert_int_equal(sample_log_append(log, recs, 2, NULL, &err), -EINVAL);

    /* Nothing was written by any refusal. */
    assert_int_equal(sample_log_next_pos(log), 0);
    assert_int_equal(read_all(dir, 0), 0);
    sample_log_close(log);
    test_rm_rf(dir);
}

/* The last segment's path and size. */
static off_t last_segment(const char *dir, char *path, size_t cap)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    char best[256] = "";
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".slog") && strcmp(e->d_name, best) > 0)
            snprintf(best, sizeof best, "%s", e->d_name);
    closedir(d);
    snprintf(path, cap, "%s/%s", dir, best);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return st.st_size;
}

static void copy_file(const char *from, const char *to, off_t len)
{
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    assert_non_null(a);
    assert_non_null(b);
    char buf[4096];
    off_t done = 0;
    while (done < len) {
        size_t want = (size_t)(len - done < (off_t)sizeof buf ? len - done : (off_t)sizeof buf);
        size_t k = fread(buf, 1, want, a);
        assert_true(k > 0);
        fwrite(buf, 1, k, b);
        done += (off_t)k;
    }
    fclose(a);
    fclose(b);
}

static void torn_tail_every_offset(void **state)
{
    (void)state;
    char *dir = tmpdir("torn");
    char keep[600];
    snprintf(keep, sizeof keep, "%s.keep", dir);
    sample_log_t *log;
    sample_log_error_t err;
    const sample_log_config_t big = {.sync = SAMPLE_LOG_SYNC_NEVER};
    assert_int_equal(sample_log_open(dir, &big, &log, NULL, &err), 0);
    append_range(log, 0, 40, 4);
    off_t before = 0;
    {
        char p[600];
        before = last_segment(dir, p, sizeof p);
    }
    append_range(log, 40, 41, 1);
    sample_log_close(log);
    char seg[600];
    off_t full = last_segment(dir, seg, sizeof seg);
    copy_file(seg, keep, full);
    for (off_t cut = before; cut < full; cut++) {
        copy_file(keep, seg, cut);
        uint64_t torn = 0;
        int rc = sample_log_open(dir, &big, &log, &torn, &err);
        if (rc)
            fail_msg("cut at %lld: %s", (long long)cut, err.msg);
        assert_int_equal(torn, (uint64_t)(cut - before));
        assert_int_equal(sample_log_next_pos(log), 40);
        sample_log_close(log);
        struct stat st;
        assert_int_equal(stat(seg, &st), 0);
        assert_int_equal(st.st_size, before);
    }
    assert_int_equal(read_all(dir, 0), 40);
    /* The last record with a bad checksum (nothing after it): torn too. */
    copy_file(keep, seg, full);
    int fd = open(seg, O_RDWR);
    uint8_t b;
    assert_int_equal(pread(fd, &b, 1, full - 3), 1);
    b ^= 0x40;
    assert_int_equal(pwrite(fd, &b, 1, full - 3), 1);
    close(fd);
    assert_int_equal(read_all(dir, 0), 40); /* a reader sees the end there */
    uint64_t torn = 0;
    assert_int_equal(sample_log_open(dir, &big, &log, &torn, &err), 0);
    assert_int_equal(torn, (uint64_t)(full - before));
    sample_log_close(log);
    /* Zeros after the last record (a power cut's pages): torn. */
    fd = open(seg, O_RDWR);
    assert_int_equal(ftruncate(fd, before + 5000), 0);
    close(fd);
    assert_int_equal(read_all(dir, 0), 40); /* a reader sees the end there too */
    assert_int_equal(sample_log_open(dir, &big, &log, &torn, &err), 0);
    assert_int_equal(torn, 5000);
    assert_int_equal(sample_log_next_pos(log), 40);
    sample_log_close(log);
    unlink(keep);
    test_rm_rf(dir);
}

static void middle_corruption_refused(void **state)
{
    (void)state;
    char *dir = tmpdir("flip");
    sample_log_t *log;
    sample_log_error_t err;
    assert_int_equal(sample_log_open(dir, &small, &log, NULL, &err), 0);
    append_range(log, 0, 200, 4);
    sample_log_close(log);
    assert_true(count_named(dir, ".slog") >= 3);

    /* A byte of a middle record of the last segment. */
    char seg[600];
    off_t size = last_segment(dir, seg, sizeof seg);
    assert_true(size > 200);
    int fd = open(seg, O_RDWR);
    uint8_t b;
    off_t at = 100;
    assert_int_equal(pread(fd, &b, 1, at), 1);
    b ^= 0x01;
    assert_int_equal(pwrite(fd, &b, 1, at), 1);
    close(fd);
    assert_int_equal(sample_log_open(dir, &small, &log, NULL, &err), -EBADMSG);
    assert_int_equal(err.code, SAMPLE_LOG_E_CORRUPT);
    assert_non_null(strstr(err.msg, strrchr(seg, '/') + 1));
    assert_non_null(strstr(err.msg, "byte offset"));
    assert_true(err.offset >= 0 && err.offset <= at);
    /* Readers refuse it too, naming the same place. */
    sample_log_reader_t *r;
    assert_int_equal(sample_log_reader_open(dir, 0, &r, &err), 0);
    sample_log_rec_t rec;
    int rc;
    do {
        codec_arena_reset(&arena);
        rc = sample_log_next(r, &arena, &rec, NULL, &err);
    } while (rc == 0);
    assert_int_equal(rc, -EBADMSG);
    assert_non_null(strstr(err.msg, strrchr(seg, '/') + 1));
    sample_log_reader_close(r);
    fd = open(seg, O_RDWR);
    b ^= 0x01;
    assert_int_equal(pwrite(fd, &b, 1, at), 1);
    close(fd);

    /* A gap: the first segment's last record removed. */
    DIR *d = opendir(dir);
    char first[600] = "";
    struct dirent *e;
    char best[256] = "~";
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".slog") && strcmp(e->d_name, best) < 0)
            snprintf(best, sizeof best, "%s", e->d_name);
    closedir(d);
    snprintf(first, sizeof first, "%s/%s", dir, best);
    struct stat st;
    assert_int_equal(stat(first, &st), 0);
    assert_int_equal(sample_log_open(dir, &small, &log, NULL, &err), 0); /* intact again */
    sample_log_close(log);
    /* Truncating a finished segment is corruption, not a torn tail. */
    assert_int_equal(truncate(first, st.st_size - 10), 0);
    assert_int_equal(sample_log_open(dir, &small, &log, NULL, &err), -EBADMSG);
    assert_non_null(strstr(err.msg, best));
    test_rm_rf(dir);
}

/* A child appends batches in a loop and reports each returned position on a
 * pipe; it is SIGKILLed at random moments.  Every reported record must
 * survive, intact, with contiguous positions. */
static void kill9_loses_nothing(void **state)
{
    (void)state;
    char *dir = tmpdir("kill");
    srand(17);
    uint64_t acked = 0; /* records the children reported appended */
    for (int round = 0; round < 10; round++) {
        int pfd[2];
        assert_int_equal(pipe(pfd), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(pfd[0]);
            sample_log_t *log;
            sample_log_error_t err;
            /* odd rounds: INTERVAL, its rolls pending until a flush commits them,
             * flushes (the three-step split the trainer uses) at random appends */
            sample_log_config_t cfg = {.segment_bytes = 16384,
                                       .sync = round % 2 ? SAMPLE_LOG_SYNC_INTERVAL
                                                         : SAMPLE_LOG_SYNC_NEVER,
                                       .sync_interval_ms = 1};
            if (sample_log_open(dir, &cfg, &log, NULL, &err))
                _exit(2);
            uint64_t clock_ms = 0;
            static struct gen g[32];
            static sample_log_rec_t recs[32];
            uint64_t start = sample_log_next_pos(log); /* opened: the kill's clock starts */
            if (write(pfd[1], &start, sizeof start) != sizeof start)
                _exit(4);
            for (uint64_t p = start;;) {
                size_t n = 1 + (size_t)(mix(p) % 32);
                for (size_t i = 0; i < n; i++) {
                    gen_rec(&g[i], p + i);
                    recs[i] = g[i].rec;
                }
                uint64_t first;
                if (sample_log_append(log, recs, n, &first, &err) || first != p)
                    _exit(3);
                p += n;
                if (write(pfd[1], &p, sizeof p) != sizeof p)
                    _exit(4);
                sample_log_flush_t f;
                if (mix(p) % 4 == 0 && sample_log_sync_begin(log, clock_ms += 2, &f)) {
                    int src = sample_log_sync_end(&f);
                    sample_log_sync_done(log, &f, src);
                    if (src)
                        _exit(5);
                }
            }
        }
        close(pfd[1]);
        uint64_t p;
        assert_int_equal(read(pfd[0], &p, sizeof p), (ssize_t)sizeof p); /* it has opened */
        usleep((useconds_t)(3000 + rand() % 30000));
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        assert_true(WIFSIGNALED(status));
        while (read(pfd[0], &p, sizeof p) == sizeof p)
            acked = p;
        close(pfd[0]);

        sample_log_t *log;
        sample_log_error_t err;
        uint64_t torn = 0;
        int rc = sample_log_open(dir, NULL, &log, &torn, &err);
        if (rc)
            fail_msg("round %d: %s", round, err.msg);
        uint64_t end = sample_log_next_pos(log);
        print_message("round %d: %llu acknowledged, %llu on disk, %llu torn bytes cut\n", round,
                      (unsigned long long)acked, (unsigned long long)end,
                      (unsigned long long)torn);
        assert_true(end >= acked);
        sample_log_close(log);
        assert_int_equal(read_all(dir, 0), end); /* every record intact, contiguous */
        assert_int_equal(count_named(dir, ".slog.new"), 0); /* committed at open */
    }
    assert_true(acked > 0);
    test_rm_rf(dir);
}

static void parse_partial_is_end(void **state)
{
    (void)state;
    char *dir = tmpdir("parse");
    sample_log_t *log;
    sample_log_error_t err;
    assert_int_equal(sample_log_open(dir, &small, &log, NULL, &err), 0);
    append_range(log, 0, 1, 1);
    sample_log_close(log);
    char seg[600];
    off_t size = last_segment(dir, seg, sizeof seg);
    uint8_t buf[8192];
    FILE *f = fopen(seg, "rb");
    assert_int_equal(fread(buf, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    sample_log_rec_t rec;
    uint64_t pos;
    size_t len;
    for (off_t k = 0; k < size; k++) {
        codec_arena_reset(&arena);
        assert_int_equal(sample_log_parse(buf, (size_t)k, 0, &arena, &rec, &pos, &len, &err),
                         SAMPLE_LOG_END);
    }
    codec_arena_reset(&arena);
    assert_int_equal(sample_log_parse(buf, (size_t)size, 0, &arena, &rec, &pos, &len, &err), 0);
    assert_int_equal(len, (size_t)size);
    check_rec(&rec, 0);
    codec_arena_reset(&arena);
    assert_int_equal(sample_log_parse(buf, (size_t)size, 1, &arena, &rec, &pos, &len, &err),
                     -EBADMSG); /* the wrong position */
    codec_arena_t tiny = {.base = arena.base, .cap = 16};
    assert_int_equal(sample_log_parse(buf, (size_t)size, 0, &tiny, &rec, &pos, &len, &err),
                     -ENOMEM);
    test_rm_rf(dir);
}

static void sync_policies(void **state)
{
    (void)state;
    char *dir = tmpdir("sync");
    sample_log_t *log;
    sample_log_error_t err;
    /* INTERVAL (the zero config): due only when dirty and the interval passed. */
    const sample_log_config_t iv = {.segment_bytes = 1 << 20, .sync_interval_ms = 100}; /* no roll */
    assert_int_equal(sample_log_open(dir, &iv, &log, NULL, &err), 0);
    assert_int_equal(sample_log_sync_if_due(log, 1000), 0); /* clean */
    append_range(log, 0, 10, 3);
    assert_int_equal(sample_log_sync_if_due(log, 1000), 1);
    append_range(log, 10, 20, 3);
    assert_int_equal(sample_log_sync_if_due(log, 1050), 0); /* too soon */
    assert_int_equal(sample_log_sync_if_due(log, 1100), 1);
    assert_int_equal(sample_log_sync_if_due(log, 5000), 0); /* clean again */
    assert_int_equal(sample_log_close(log), 0);
    /* EVERY_APPEND: flushed before append returns, nothing left to sync. */
    const sample_log_config_t ea = {.segment_bytes = 8192, .sync = SAMPLE_LOG_SYNC_EVERY_APPEND};
    assert_int_equal(sample_log_open(dir, &ea, &log, NULL, &err), 0);
    append_range(log, 20, 120, 5);
    assert_int_equal(sample_log_sync_if_due(log, 10000), 0);
    assert_int_equal(sample_log_close(log), 0);
    assert_int_equal(read_all(dir, 0), 120);
    /* A bad config is refused. */
    const sample_log_config_t bad = {.segment_bytes = 100};
    assert_int_equal(sample_log_open(dir, &bad, &log, NULL, &err), -EINVAL);
    test_rm_rf(dir);
}

/* The trainer's flush, in its three steps. */
static int flush(sample_log_t *log, uint64_t now_ms)
{
    sample_log_flush_t f;
    if (!sample_log_sync_begin(log, now_ms, &f))
        return 0;
    int rc = sample_log_sync_end(&f);
    sample_log_sync_done(log, &f, rc);
    return rc ? rc : 1;
}

static const sample_log_config_t interval = {.segment_bytes = 8192, .sync_interval_ms = 1000};

/* Appends one record at a time until a roll is pending: the end. */
static uint64_t append_until_pending(sample_log_t *log, const char *dir, uint64_t from)
{
    uint64_t p = from;
    while (count_named(dir, ".slog.new") == 0) {
        append_range(log, p, p + 1, 1);
        p++;
        assert_true(p - from < 10000);
    }
    return p;
}

/* Under INTERVAL an append past segment_bytes opens <first>.slog.new and
 * flushes nothing; the segment grows rather than rolling again until a
 * flush commits the roll (due at once, not at the interval); readers read
 * through a pending segment; close commits one. */
static void interval_rolls_commit_off_the_append(void **state)
{
    (void)state;
    char *dir = tmpdir("roll");
    sample_log_t *log;
    sample_log_error_t err;
    assert_int_equal(sample_log_open(dir, &interval, &log, NULL, &err), 0);
    uint64_t p = append_until_pending(log, dir, 0);
    assert_int_equal(count_named(dir, ".slog"), 1);
    append_range(log, p, p + 200, 4); /* far past segment_bytes: no second roll */
    p += 200;
    assert_int_equal(count_named(dir, ".slog.new"), 1);
    assert_int_equal(count_named(dir, ".slog"), 1);
    assert_int_equal(read_all(dir, 0), p);
    assert_int_equal(read_all(dir, p - 3), p);
    assert_int_equal(flush(log, 10), 1); /* due for the roll, though the interval is not */
    assert_int_equal(count_named(dir, ".slog.new"), 0);
    assert_int_equal(count_named(dir, ".slog"), 2);
    assert_int_equal(flush(log, 20), 0); /* nothing due now */
    p = append_until_pending(log, dir, p);
    assert_int_equal(read_all(dir, 0), p);
    assert_int_equal(sample_log_close(log), 0); /* commits */
    assert_int_equal(count_named(dir, ".slog.new"), 0);
    assert_int_equal(count_named(dir, ".slog"), 3);
    uint64_t torn = 99;
    assert_int_equal(sample_log_open(dir, &interval, &log, &torn, &err), 0);
    assert_int_equal(torn, 0);
    assert_int_equal(sample_log_next_pos(log), p);
    sample_log_close(log);
    assert_int_equal(read_all(dir, 0), p);
    test_rm_rf(dir);
}

/* A child leaves a roll pending and exits without closing (a crash); the
 * parent may then cut the finished segment's tail (a power cut taking what
 * was written after its last flush).  Returns the records appended. */
static uint64_t crash_with_pending_roll(const char *dir)
{
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        sample_log_t *log;
        sample_log_error_t err;
        if (sample_log_open(dir, &interval, &log, NULL, &err))
            _exit(2);
        uint64_t p = append_until_pending(log, dir, 0);
        append_range(log, p, p + 5, 1);
        p += 5;
        _exit(write(pfd[1], &p, sizeof p) == sizeof p ? 0 : 3); /* no close */
    }
    close(pfd[1]);
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    uint64_t n = 0;
    assert_int_equal(read(pfd[0], &n, sizeof n), (ssize_t)sizeof n);
    close(pfd[0]);
    assert_int_equal(count_named(dir, ".slog.new"), 1);
    return n;
}

static void pending_roll_after_a_crash(void **state)
{
    (void)state;
    char *dir = tmpdir("pendcrash");
    /* kill -9: the page cache kept everything; open commits the roll */
    uint64_t n = crash_with_pending_roll(dir);
    sample_log_t *log;
    sample_log_error_t err;
    uint64_t torn = 99;
    assert_int_equal(sample_log_open(dir, &interval, &log, &torn, &err), 0);
    assert_int_equal(torn, 0);
    assert_int_equal(sample_log_next_pos(log), n);
    assert_int_equal(count_named(dir, ".slog.new"), 0);
    assert_int_equal(count_named(dir, ".slog"), 2);
    sample_log_close(log);
    assert_int_equal(read_all(dir, 0), n);
    test_rm_rf(dir);

    /* a power cut: the finished segment lost its last record and a half; the
     * pending segment after the gap is set aside, not read as corruption */
    n = crash_with_pending_roll(dir);
    char first[600];
    snprintf(first, sizeof first, "%s/%020d.slog", dir, 0);
    struct stat st;
    assert_int_equal(stat(first, &st), 0);
    sample_log_reader_t *r;
    assert_int_equal(sample_log_reader_open(dir, 0, &r, &err), 0);
    uint64_t keep = 0, pos;
    sample_log_rec_t rec;
    for (;;) { /* the finished segment's records */
        codec_arena_reset(&arena);
        assert_int_equal(sample_log_next(r, &arena, &rec, &pos, &err), 0);
        if (pos == n - 6)
            break;
        keep = pos + 1;
    }
    sample_log_reader_close(r);
    assert_true(keep > 2);
    off_t cut_at = 0; /* the end of record keep - 2, plus 10 bytes of the next */
    {
        int fd = open(first, O_RDONLY);
        uint8_t h[16];
        for (uint64_t i = 0; i < keep - 1; i++) {
            assert_int_equal(pread(fd, h, 16, cut_at), 16);
            uint32_t body;
            memcpy(&body, h, 4);
            cut_at += 16 + (off_t)body;
        }
        close(fd);
    }
    assert_int_equal(truncate(first, cut_at + 10), 0);
    char pend[600];
    snprintf(pend, sizeof pend, "%s/%020llu.slog.new", dir, (unsigned long long)(n - 6));
    struct stat pst;
    assert_int_equal(stat(pend, &pst), 0);
    assert_int_equal(sample_log_open(dir, &interval, &log, &torn, &err), 0);
    assert_int_equal(sample_log_next_pos(log), keep - 1);
    assert_int_equal((uint64_t)torn, 10 + (uint64_t)pst.st_size);
    assert_int_equal(count_named(dir, ".slog.new"), 0);
    assert_int_equal(count_named(dir, ".slog.orphan"), 1);
    append_range(log, keep - 1, keep + 20, 3); /* the log goes on from the gap */
    sample_log_close(log);
    assert_int_equal(read_all(dir, 0), keep + 20);
    test_rm_rf(dir);
}

/* Only the newest segment's roll can be pending: any other .new is refused. */
static void stray_pending_refused(void **state)
{
    (void)state;
    char *dir = tmpdir("stray");
    sample_log_t *log;
    sample_log_error_t err;
    assert_int_equal(sample_log_open(dir, &small, &log, NULL, &err), 0);
    append_range(log, 0, 200, 4);
    sample_log_close(log);
    assert_true(count_named(dir, ".slog") >= 3);
    char from[600], to[600];
    snprintf(from, sizeof from, "%s/%020d.slog", dir, 0);
    snprintf(to, sizeof to, "%s/%020d.slog.new", dir, 0);
    assert_int_equal(rename(from, to), 0);
    assert_int_equal(sample_log_open(dir, &small, &log, NULL, &err), -EBADMSG);
    assert_int_equal(err.code, SAMPLE_LOG_E_CORRUPT);
    assert_non_null(strstr(err.msg, "pending"));
    test_rm_rf(dir);
}

int main(void)
{
    arena.cap = sample_log_arena_bound();
    arena.base = malloc(arena.cap);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip_and_readers),
        cmocka_unit_test(trim_whole_segments),
        cmocka_unit_test(too_large_and_bad_refused),
        cmocka_unit_test(torn_tail_every_offset),
        cmocka_unit_test(middle_corruption_refused),
        cmocka_unit_test(kill9_loses_nothing),
        cmocka_unit_test(parse_partial_is_end),
        cmocka_unit_test(sync_policies),
        cmocka_unit_test(interval_rolls_commit_off_the_append),
        cmocka_unit_test(pending_roll_after_a_crash),
        cmocka_unit_test(stray_pending_refused),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    free(arena.base);
    return rc;
}
