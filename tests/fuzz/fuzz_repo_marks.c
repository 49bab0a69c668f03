/*
 * fuzz_repo_marks.c — libFuzzer target for the parser of a model's marks
 * file (server/repo_marks.c), which a restarted server reads before it
 * serves.  The input is the file's bytes.  A parse must either refuse them
 * with a sentence naming a line, or give marks within their caps, ascending,
 * that format back to exactly the input bytes (nothing accepted is
 * ignored) and parse again to the same marks.  Anything else abort()s.
 *
 *   ./fuzz_repo_marks ../tests/fuzz/corpus/repo_marks
 *
 * Without TL_FUZZ the same target replays the seed corpus under ctest.
 */
#include "repo_marks.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static repo_marks_t m, again;
    static char out[REPO_MARKS_FILE_MAX];
    char why[512];
    why[0] = '\0';
    int rc = repo_marks_parse((const char *)data, size, "ctr", &m, why, sizeof why);
    if (rc != 0) {
        if (rc != -EINVAL || strncmp(why, "line ", 5) != 0)
            abort();
        return 0;
    }
    if (m.n_rolled_back > REPO_ROLLED_BACK_MAX || m.n_refused > REPO_REFUSED_MAX)
        abort();
    for (unsigned i = 1; i < m.n_rolled_back; i++)
        if (m.rolled_back[i - 1] >= m.rolled_back[i])
            abort();
    for (unsigned i = 0; i < m.n_refused; i++)
        if (m.refused[i].version == 0 || strlen(m.refused[i].reason) > REPO_MARKS_REASON_MAX ||
            (i && m.refused[i - 1].version >= m.refused[i].version))
            abort();
    size_t len = repo_marks_format(&m, "ctr", out, sizeof out);
    if (len != size || memcmp(out, data, size) != 0)
        abort();
    if (repo_marks_parse(out, len, "ctr", &again, why, sizeof why) != 0 ||
        memcmp(&m, &again, sizeof m) != 0)
        abort();
    return 0;
}
