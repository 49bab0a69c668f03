/*
 * fuzz_file_marks.c — libFuzzer target for the parser of an export's
 * TRAINFILE_MARKS (server/online_file_marks.c), which a restart reads back
 * from the repository.  The input is the file's bytes.  A parse must either
 * refuse them with a sentence or give at most ONLINE_FILE_MARKS_MAX marks
 * each of which decodes alone, and then encode back to exactly the input
 * bytes (nothing accepted is ignored, nothing cut is taken).  Every mark
 * also goes through the table (online__file_marks_put), which must never
 * hold more than its room or two entries of one file.  Anything else
 * abort()s.
 *
 *   ./fuzz_file_marks ../tests/fuzz/corpus/file_marks
 *
 * Without TL_FUZZ the same target replays the seed corpus under ctest.
 */
#include "online_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- what online_file_marks.c's finding takes from the server (not fuzzed here) ---- */

struct online_state online__G;
int server_log_level = -1;

online_model_t *online__model_get(const char *name, char *why, size_t why_len)
{
    (void)name;
    (void)why;
    (void)why_len;
    return NULL;
}

server_model_t *server_model_acquire_named(server_t *srv, const char *name)
{
    (void)srv;
    (void)name;
    return NULL;
}

void server_model_release(server_model_t *sm)
{
    (void)sm;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static online_file_progress_t got[ONLINE_FILE_MARKS_MAX], table[ONLINE_FILE_MARKS_MAX];
    static uint8_t again[16 + ONLINE_FILE_MARKS_MAX * (SAMPLE_LOG_MARK_BYTES + 8) + 8];
    char why[300] = "";
    uint32_t n = 12345;
    int rc = online__file_marks_parse(data, size, got, &n, why, sizeof why);
    if (rc != 0) {
        if (rc != -EINVAL || n != 0 || why[0] == '\0')
            abort();
        return 0;
    }
    if (n > ONLINE_FILE_MARKS_MAX || online__file_marks_size(n) != size)
        abort();
    online__file_marks_encode(got, n, again);
    if (memcmp(again, data, size) != 0)
        abort();
    uint32_t held = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint8_t one[SAMPLE_LOG_MARK_BYTES];
        online_file_mark_t m;
        online__file_mark_encode(&got[i].m, one);
        if (online__file_mark_decode(one, &m, why, sizeof why) != 0)
            abort();
        online__file_marks_put(table, &held, &m, got[i].pos);
        if (held > ONLINE_FILE_MARKS_MAX)
            abort();
    }
    for (uint32_t i = 0; i < held; i++)
        for (uint32_t j = i + 1; j < held; j++)
            if (table[i].m.key == table[j].m.key)
                abort();
    return 0;
}
