/*
 * fuzz_sample_log.c — libFuzzer target for the sample log's record parser
 * and its recovery (server/sample_log.c).  The input is the bytes of one
 * segment file, `00000000000000000000.slog`:
 *   1. in memory: sample_log_parse walks the records from position 0 (the
 *      corpus has records with weights and with marks); each
 *      parsed record must have its position, a size within the input and
 *      1..CODEC_MAX_ITEMS samples with finite weights >= 0;
 *   2. on disk: the bytes become the only segment of a log in a temporary
 *      directory; sample_log_open must either refuse them (corrupt) or
 *      recover, and then end where the memory walk's checksummed records end
 *      (never past bytes it refused), and a reader from 0 must return the same
 *      records in order and then END or a refusal, nothing else.
 * Anything else abort()s.
 *
 *   ./fuzz_sample_log -max_len=65536 ../tests/fuzz/corpus/sample_log
 *
 * Without TL_FUZZ the same target replays the seed corpus under ctest.
 */
#include "server/sample_log.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static codec_arena_t arena;
static char dir[256];

static void check_rec(const sample_log_rec_t *rec)
{
    if (rec->train.samples < 1 || rec->train.samples > CODEC_MAX_ITEMS || !rec->weights)
        abort();
    for (uint32_t i = 0; i < rec->train.samples; i++)
        if (!isfinite(rec->weights[i]) || rec->weights[i] < 0.0f)
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!arena.base) {
        arena.cap = sample_log_arena_bound();
        arena.base = malloc(arena.cap);
        snprintf(dir, sizeof dir, "%s/fuzz_slog_%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
                 (int)getpid());
    }
    /* 1. in memory */
    size_t off = 0;
    uint64_t n = 0;
    for (;;) {
        sample_log_rec_t rec;
        uint64_t pos;
        size_t len = 0;
        sample_log_error_t err;
        codec_arena_reset(&arena);
        int rc = sample_log_parse(data + off, size - off, n, &arena, &rec, &pos, &len, &err);
        if (rc != 0)
            break;
        if (pos != n || len < SAMPLE_LOG_REC_HEADER || len > size - off)
            abort();
        check_rec(&rec);
        off += len;
        n++;
    }

    /* 2. on disk */
    char path[320];
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/00000000000000000000.slog", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        abort();
    if (size && write(fd, data, size) != (ssize_t)size)
        abort();
    close(fd);
    sample_log_t *log = NULL;
    sample_log_error_t err;
    uint64_t torn = 0;
    const sample_log_config_t cfg = {.sync = SAMPLE_LOG_SYNC_NEVER};
    int rc = sample_log_open(dir, &cfg, &log, &torn, &err);
    if (rc == 0) {
        uint64_t end = sample_log_next_pos(log);
        /* The memory walk stops at the first body the codec refuses too; the
         * open checks checksums only, so it never ends before the walk. */
        if (end < n || torn > size)
            abort();
        sample_log_close(log);
        sample_log_reader_t *r = NULL;
        if (sample_log_reader_open(dir, 0, &r, &err) != 0)
            abort();
        uint64_t k = 0;
        for (;;) {
            sample_log_rec_t rec;
            uint64_t pos;
            codec_arena_reset(&arena);
            rc = sample_log_next(r, &arena, &rec, &pos, &err);
            if (rc != 0)
                break;
            if (pos != k++)
                abort();
            check_rec(&rec);
        }
        if (rc != SAMPLE_LOG_END && rc != -EBADMSG)
            abort();
        if (rc == SAMPLE_LOG_END && k != end)
            abort();
        sample_log_reader_close(r);
    } else if (rc != -EBADMSG) {
        abort();
    }
    unlink(path);
    rmdir(dir);
    return 0;
}
