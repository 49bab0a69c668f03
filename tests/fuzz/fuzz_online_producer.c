/*
 * fuzz_online_producer.c — libFuzzer target for the parse of an online
 * export's producer string (server/online_producer.c), which a restart
 * reads from a version's manifest.  The input (NUL added, cut at 63 bytes
 * as a manifest's producer is) must be refused, or give a position whose
 * decimal form, written back as the producer's prefix, parses to the same
 * position; "stream=S" (the bus's) likewise, and never both.  Anything else
 * abort()s.
 *
 *   ./fuzz_online_producer ../tests/fuzz/corpus/online_producer
 *
 * Without TL_FUZZ the same target replays the seed corpus under ctest.
 */
#include "server/online.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char s[64];
    size_t n = size < sizeof s - 1 ? size : sizeof s - 1;
    memcpy(s, data, n);
    s[n] = '\0';
    uint64_t pos = 0, again = 0, seq = 0;
    int is_log = online_export_producer_pos(s, &pos);
    int is_stream = online_export_producer_stream(s, &seq);
    if (is_log && is_stream)
        abort(); /* one producer string, two meanings */
    if (is_stream) {
        if (strncmp(s, ONLINE_EXPORT_PRODUCER " stream=",
                    strlen(ONLINE_EXPORT_PRODUCER " stream=")) != 0)
            abort();
        char back[64];
        snprintf(back, sizeof back, ONLINE_EXPORT_PRODUCER " stream=%" PRIu64 " id=0", seq);
        if (!online_export_producer_stream(back, &again) || again != seq)
            abort();
        return 0;
    }
    if (!is_log)
        return 0;
    if (strncmp(s, ONLINE_EXPORT_PRODUCER " log=", strlen(ONLINE_EXPORT_PRODUCER " log=")) != 0)
        abort(); /* accepted another producer */
    char back[64];
    snprintf(back, sizeof back, ONLINE_EXPORT_PRODUCER " log=%" PRIu64 " id=0", pos);
    if (!online_export_producer_pos(back, &again) || again != pos)
        abort();
    return 0;
}
