/*
 * online_producer.c — the producer string of the online trainer's exports
 * (online.h: EXPORTS), "tlserve-online log=P id=X" (every sample-log
 * record below P is in the version) or, with the bus in replay mode,
 * "tlserve-online stream=S id=X" (every stream message up to sequence S),
 * read back from a version's manifest at a restart to find where to go on.  The manifest is on disk
 * and anyone may have written it: the parse checks every byte and refuses, never guesses.  Pure;
 * apart from online_export.c so that its fuzz target (tests/fuzz/fuzz_online_producer.c) links it
 * alone.
 */
#include "online.h"

#include <stdint.h>
#include <string.h>

/* "<ONLINE_EXPORT_PRODUCER> <key>=<decimal>" then the end or a space: 1 with *v. */
static int parse_field(const char *producer, const char *pre, size_t pre_len, uint64_t *out)
{
    if (strncmp(producer, pre, pre_len) != 0)
        return 0;
    const char *p = producer + pre_len;
    uint64_t v = 0;
    if (*p < '0' || *p > '9')
        return 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
            return 0;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (*p != '\0' && *p != ' ')
        return 0;
    *out = v;
    return 1;
}

int online_export_producer_pos(const char *producer, uint64_t *pos)
{
    static const char pre[] = ONLINE_EXPORT_PRODUCER " log=";
    return parse_field(producer, pre, sizeof pre - 1, pos);
}

int online_export_producer_stream(const char *producer, uint64_t *seq)
{
    static const char pre[] = ONLINE_EXPORT_PRODUCER " stream=";
    return parse_field(producer, pre, sizeof pre - 1, seq);
}
