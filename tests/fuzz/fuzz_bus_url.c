/*
 * fuzz_bus_url.c — libFuzzer target for bus__url_ok (server/bus.c), which checks each server
 * of --bus-servers before nats.c is given it: a bad URL must be refused at start, since a
 * bus that connects in the background would otherwise wait for it forever.
 *
 * The input is one URL (any bytes; cut at its first NUL). Accepted means: not empty, a
 * scheme (when "://" is present) of letters only, a non-empty host without spaces, '/', '?'
 * or '#', and, when a port follows the host, 1..65535 in decimal (re-read here
 * independently). Anything else abort()s; so does a read past the NUL (ASan).
 *
 *   ./fuzz_bus_url -max_len=128 ../tests/fuzz/corpus/bus_url
 *
 * Without TL_FUZZ the same target replays the seed corpus under ctest.
 */
#include "server/bus.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1); /* exact size plus the NUL, so ASan sees any overread */
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = 0;
    if (bus__url_ok(s)) {
        const char *u = s, *p = strstr(s, "://");
        if (p) {
            if (p == s)
                abort();
            for (const char *c = s; c < p; c++)
                if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z')))
                    abort();
            u = p + 3;
        }
        const char *at = strrchr(u, '@');
        if (at)
            u = at + 1;
        const char *end = *u == '[' ? strchr(u, ']') : u + strcspn(u, ":");
        if (!end)
            abort();
        if (*u == '[')
            end++;
        if (end == u)
            abort();
        for (const char *c = u; c < end; c++)
            if ((unsigned char)*c <= ' ' || *c == '/' || *c == '?' || *c == '#')
                abort();
        if (*end) {
            if (*end != ':')
                abort();
            char *rest = NULL;
            long port = strtol(end + 1, &rest, 10);
            if (*rest || port < 1 || port > 65535 || end[1] < '0' || end[1] > '9')
                abort();
        }
    }
    free(s);
    return 0;
}
