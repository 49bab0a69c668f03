/*
 * fuzz_bus_reply.c — libFuzzer target for bus__parse_reply (server/bus.c), which reads the
 * stream sequence out of a JetStream delivery's reply subject: bytes that come off the wire.
 *
 * The input is the reply subject itself (any bytes, no NUL needed: the parser is given the
 * length). It must never read past the length; when it accepts, the input starts with
 * "$JS.ACK.", has 9, 11 or 12 non-empty dot-separated tokens, and the sequence is >= 1 and
 * equals the decimal token at its place (re-read here independently). Anything else abort()s.
 *
 *   ./fuzz_bus_reply -max_len=256 ../tests/fuzz/corpus/bus_reply
 *
 * Without TL_FUZZ the same target replays the seed corpus under ctest.
 */
#include "server/bus.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* an exact-size heap copy, so ASan sees any read past the end */
    char *s = malloc(size ? size : 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    uint64_t seq = 0;
    int rc = bus__parse_reply(s, size, &seq);
    if (rc == 0) {
        if (size < 8 || memcmp(s, "$JS.ACK.", 8) != 0 || seq == 0)
            abort();
        size_t tokens = 1, start = 0, at_tok = 0, want;
        for (size_t i = 0; i < size; i++)
            if (s[i] == '.') {
                if (i == start)
                    abort();   /* empty token accepted */
                tokens++;
                start = i + 1;
            }
        if (start == size || (tokens != 9 && tokens != 11 && tokens != 12))
            abort();
        want = tokens == 9 ? 5 : 7;
        uint64_t v = 0;
        for (size_t i = 0; i < size; i++) {
            if (s[i] == '.') {
                at_tok++;
                continue;
            }
            if (at_tok == want)
                v = v * 10 + (uint64_t)(s[i] - '0');
        }
        if (v != seq)
            abort();
    } else if (rc != -22) {
        abort();
    }
    free(s);
    return 0;
}
