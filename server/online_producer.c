/*
 * online_producer.c — the producer string of the online trainer's exports
 * (online.h: EXPORTS), "tlserve-online log=P id=X", read back from a
 * version's manifest at a restart to find the sample-log position P the
 * version covers.  The manifest is on disk and anyone may have written it:
 * the parse checks every byte and refuses, never guesses.  Pure; apart from
 * online_export.c so that its fuzz target (tests/fuzz/fuzz_online_producer.c)
 * links it alone.
 */
#include "online.h"

#include <stdint.h>
#include <string.h>

int online_export_producer_pos(const char *producer, uint64_t *pos)
{
    static const char pre[] = ONLINE_EXPORT_PRODUCER " log=";
    if (strncmp(producer, pre, sizeof pre - 1) != 0)
        return 0;
    const char *p = producer + sizeof pre - 1;
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
    *pos = v;
    return 1;
}
