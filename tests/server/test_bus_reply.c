/* test_bus_reply.c — bus__parse_reply (server/bus.c): the stream sequence of a JetStream
 * delivery read from its reply subject, both forms the servers send, and refusals. */
#include "server/bus.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

static int parse(const char *s, uint64_t *seq)
{
    *seq = 0;
    return bus__parse_reply(s, strlen(s), seq);
}

static void test_accepts(void **state)
{
    (void)state;
    uint64_t seq;
    assert_int_equal(parse("$JS.ACK.KILLB.abc123.1.17.17.1732583835000000000.0", &seq), 0);
    assert_int_equal(seq, 17);
    assert_int_equal(parse("$JS.ACK._.ACCHASH.S.C.2.18446744073709551615.3.1732583835000000000.9.rnd", &seq), 0);
    assert_true(seq == UINT64_MAX);
    assert_int_equal(parse("$JS.ACK.hub.ACCHASH.S.C.2.5.3.17.9", &seq), 0);
    assert_int_equal(seq, 5);
}

static void test_refuses(void **state)
{
    (void)state;
    static const char *bad[] = {
        "",
        "_INBOX.abc.def",
        "$JS.ACK.S.C.1.0.1.1.0",                    /* sequence 0 */
        "$JS.ACK.S.C.1.18446744073709551616.1.1.0", /* 2^64 */
        "$JS.ACK.S..1.5.1.1.0",                     /* empty token */
        "$JS.ACK.S.C.1.5.1.1.0.",                   /* trailing dot */
        "$JS.ACK.S.C.1.5x.1.1.0",                   /* not a number */
        "$JS.ACK.S.C.1.5.1.1",                      /* 8 tokens */
        "$JS.ACK.S.C.1.5.1.1.0.0",                  /* 10 tokens */
        "$JS.ACK.a.b.S.C.1.5.1.1.0.r.x",            /* 13 tokens */
        "$JS.ACK.S.C.-1.5.1.1.0",                   /* a sign */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t seq = 99;
        assert_int_equal(bus__parse_reply(bad[i], strlen(bad[i]), &seq), -22);
        assert_int_equal(seq, 99);   /* untouched on refusal */
    }
    uint64_t seq;
    /* the length bounds the parse: a valid subject cut short is refused */
    const char *ok = "$JS.ACK.S.C.1.5.1.1.0";
    assert_int_equal(bus__parse_reply(ok, strlen(ok) - 2, &seq), -22);
    assert_int_equal(bus__parse_reply(NULL, 0, &seq), -22);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accepts),
        cmocka_unit_test(test_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
