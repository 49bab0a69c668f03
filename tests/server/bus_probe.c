/* bus_probe.c — drives server/bus.c against a real JetStream cluster for
 * tests/integration/test_bus.py (which starts the cluster and kills nodes).
 *
 *   bus_probe publish SERVERS STREAM N BATCH SIZE   publish N messages (ids m-<i>, payload:
 *       the index i as 8 bytes LE, then filler to SIZE bytes) in batches of BATCH (1: the
 *       synchronous call), retrying every unacked item with its id until acked; prints
 *       "leader <node>" first and "progress <acked>" after each batch (the test kills a node
 *       on those lines), then reads the stream back from 1 and checks: sequences 1..N with no
 *       gap, every index exactly once, every acked index at the sequence its ack named.
 *   bus_probe read SERVERS STREAM FROM N [PAUSE_MS] read from sequence FROM to N, in order,
 *       no gap; with PAUSE_MS, print "progress <read>" and pause after every 500 (the test
 *       kills a node while the reader is in the middle).
 *   bus_probe mismatch SERVERS STREAM              bus_open with replicas 1 and another max
 *       age on the existing stream must fail with -EEXIST; prints the sentence.
 *   bus_probe dedup SERVERS STREAM                 the same id twice: one sequence, stored once.
 *   bus_probe raw|rawhex SERVERS STREAM BINDS SUBJECT TEXT publish TEXT's bytes (rawhex: TEXT
 *                                   is hex) on SUBJECT of the
 *       stream that binds BINDS (replicas 3): a stranger's message for test_online_bus.py.
 *
 * Exit 0 when every check holds, 1 with a line on stderr naming the first that did not.
 */
#include "server/bus.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FAIL(...) do { fprintf(stderr, "bus_probe: " __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)

static char SUBJ[96];   /* tl.s.<stream>: streams of one cluster may not share subjects */

static bus_t *open_bus(const char *servers, const char *stream, int replicas, int64_t max_age_ms)
{
    const char *subjects[] = {SUBJ};
    bus_options_t o = {.servers = servers, .stream = stream, .subjects = subjects, .n_subjects = 1,
                       .replicas = replicas, .max_age_ms = max_age_ms, .timeout_ms = 5000};
    bus_t *bus = NULL;
    bus_error_t err;
    int rc = bus_open(&o, &bus, &err);
    if (rc < 0)
        FAIL("bus_open: %d: %s", rc, err.msg);
    return bus;
}

static uint64_t index_of(const bus_msg_t *m)
{
    uint64_t i;
    if (m->len < 8)
        FAIL("message %" PRIu64 " has %zu bytes, fewer than the 8-byte index", m->seq, m->len);
    memcpy(&i, m->data, 8);
    return i;
}

/* Reads sequences from..to; fills seq_of[index] (when not NULL) and checks order and gaps. */
static void read_range(bus_t *bus, uint64_t from, uint64_t to, uint64_t *seq_of, uint64_t n,
                       int pause_ms)
{
    bus_reader_t *r;
    bus_error_t err;
    int rc;
    /* right after a node restarts, creating the consumer may time out once or twice while
     * the stream's leader settles: a caller retries, as the trainer will */
    for (int tries = 0; (rc = bus_reader_open(bus, NULL, from, &r, &err)) == -ETIMEDOUT && tries < 10; tries++)
        fprintf(stderr, "bus_probe: reader open timed out, retrying: %s\n", err.msg);
    if (rc < 0)
        FAIL("bus_reader_open from %" PRIu64 ": %d: %s", from, rc, err.msg);
    uint64_t want = from;
    int idle = 0;
    while (want <= to) {
        bus_msg_t m;
        rc = bus_reader_next(r, 1000, &m, &err);
        if (rc == BUS_READ_TIMEOUT) {
            if (++idle == 30)
                FAIL("read stalled at sequence %" PRIu64 " of %" PRIu64, want, to);
            continue;
        }
        idle = 0;
        if (rc < 0)
            FAIL("bus_reader_next at %" PRIu64 ": %d: %s", want, rc, err.msg);
        if (rc == BUS_READ_GAP)
            FAIL("gap: %" PRIu64 " sequences missing before %" PRIu64, m.skipped, m.seq);
        if (m.seq != want || bus_reader_position(r) != want + 1)
            FAIL("sequence %" PRIu64 " where %" PRIu64 " was expected", m.seq, want);
        if (strcmp(m.subject, SUBJ) != 0)
            FAIL("sequence %" PRIu64 " on subject %s", m.seq, m.subject);
        uint64_t i = index_of(&m);
        if (seq_of) {
            if (i >= n)
                FAIL("sequence %" PRIu64 " holds index %" PRIu64 " beyond %" PRIu64, m.seq, i, n);
            if (seq_of[i])
                FAIL("index %" PRIu64 " stored twice: sequences %" PRIu64 " and %" PRIu64, i, seq_of[i], m.seq);
            seq_of[i] = m.seq;
        }
        want++;
        if (pause_ms && (want - from) % 500 == 0) {
            printf("progress %" PRIu64 "\n", want - from);
            fflush(stdout);
            struct timespec ts = {pause_ms / 1000, (long)(pause_ms % 1000) * 1000000};
            nanosleep(&ts, NULL);
        }
    }
    bus_reader_close(r);
}

static void publish(const char *servers, const char *stream, uint64_t n, int batch, size_t size)
{
    bus_t *bus = open_bus(servers, stream, 3, 0);
    bus_item_t *items = calloc((size_t)batch, sizeof *items);
    char (*ids)[32] = calloc((size_t)batch, sizeof *ids);
    uint8_t *payload = calloc((size_t)batch, size);
    uint64_t *acked_seq = calloc(n, sizeof *acked_seq);
    uint64_t *seq_of = calloc(n, sizeof *seq_of);
    uint64_t unacked_reports = 0, retries = 0;
    if (!items || !ids || !payload || !acked_seq || !seq_of)
        FAIL("no memory");
    printf("started\n");
    fflush(stdout);
    for (uint64_t base = 0; base < n; base += (uint64_t)batch) {
        int k = (int)(n - base < (uint64_t)batch ? n - base : (uint64_t)batch);
        for (int j = 0; j < k; j++) {
            uint64_t i = base + (uint64_t)j;
            uint8_t *p = payload + (size_t)j * size;
            memset(p, (int)(i & 0xff), size);
            memcpy(p, &i, 8);
            snprintf(ids[j], sizeof ids[j], "m-%" PRIu64, i);
            items[j] = (bus_item_t){.subject = SUBJ, .data = p, .len = size, .msg_id = ids[j]};
        }
        /* retry the unacked ones with the same ids until all are acked (60 s at most) */
        int left = k, attempts = 0;
        bool done[65536] = {0};
        while (left > 0) {
            bus_item_t todo[4096];
            int map[4096], t = 0;
            for (int j = 0; j < k; j++)
                if (!done[j]) {
                    todo[t] = items[j];
                    map[t++] = j;
                }
            bus_error_t err;
            int got;
            if (batch == 1) {
                int rc = bus_publish(bus, todo[0].subject, todo[0].data, todo[0].len, todo[0].msg_id,
                                     &todo[0].ack, &err);
                todo[0].acked = rc == 0;
                got = rc == 0;
            } else {
                got = bus_publish_batch(bus, todo, t, &err);
                if (got < 0)
                    FAIL("bus_publish_batch: %d: %s", got, err.msg);
            }
            for (int q = 0; q < t; q++)
                if (todo[q].acked) {
                    uint64_t i = base + (uint64_t)map[q];
                    acked_seq[i] = todo[q].ack.seq;
                    done[map[q]] = true;
                    left--;
                }
            if (got < t) {
                unacked_reports += (uint64_t)(t - got);
                if (err.msg[0] == 0)
                    FAIL("%d items unacked but no error sentence", t - got);
                fprintf(stderr, "bus_probe: unacked %d: %s\n", t - got, err.msg);
                if (++attempts > 600) /* 100 ms apart: the 60 s above */
                    FAIL("items of batch at %" PRIu64 " still unacked after 600 attempts (60 s)",
                         base);
                struct timespec ts = {0, 100000000};
                nanosleep(&ts, NULL);
                retries++;
            }
        }
        printf("progress %" PRIu64 "\n", base + (uint64_t)k);
        fflush(stdout);
    }
    read_range(bus, 1, n, seq_of, n, 0);
    for (uint64_t i = 0; i < n; i++) {
        if (!seq_of[i])
            FAIL("index %" PRIu64 " acknowledged at %" PRIu64 " but not in the stream", i, acked_seq[i]);
        if (seq_of[i] != acked_seq[i])
            FAIL("index %" PRIu64 " acknowledged at %" PRIu64 " but stored at %" PRIu64, i, acked_seq[i], seq_of[i]);
    }
    /* nothing beyond n: a retried message stored twice would sit there */
    bus_reader_t *r;
    bus_error_t err;
    int rc;
    for (int tries = 0; (rc = bus_reader_open(bus, NULL, n + 1, &r, &err)) == -ETIMEDOUT && tries < 10; tries++)
        ;
    if (rc < 0)
        FAIL("reader past the end: %s", err.msg);
    bus_msg_t m;
    rc = bus_reader_next(r, 500, &m, &err);
    if (rc != BUS_READ_TIMEOUT)
        FAIL("a message at %" PRIu64 " beyond the %" PRIu64 " published (rc %d)", m.seq, n, rc);
    bus_reader_close(r);
    bus_stats_t st;
    bus_stats(bus, &st);
    printf("ok published %" PRIu64 " unacked_reports %" PRIu64 " retries %" PRIu64 " acked %" PRIu64
           " failed %" PRIu64 " duplicates %" PRIu64 " reconnects %" PRIu64 " disconnects %" PRIu64 "\n",
           n, unacked_reports, retries, st.acked, st.failed, st.duplicates, st.reconnects, st.disconnects);
    bus_close(bus);
    free(items), free(ids), free(payload), free(acked_seq), free(seq_of);
}

int main(int argc, char **argv)
{
    if (argc < 4)
        FAIL("usage: bus_probe publish|read|mismatch|dedup SERVERS STREAM ...");
    const char *cmd = argv[1], *servers = argv[2], *stream = argv[3];
    snprintf(SUBJ, sizeof SUBJ, "tl.s.%.64s", stream);
    if ((strcmp(cmd, "raw") == 0 || strcmp(cmd, "rawhex") == 0) && argc == 7) {
        snprintf(SUBJ, sizeof SUBJ, "%.95s", argv[4]);
        bus_t *bus = open_bus(servers, stream, 3, 0);
        bus_ack_t ack;
        bus_error_t err;
        const char *data = argv[6];
        size_t len = strlen(data);
        static char bytes[1 << 20];
        if (strcmp(cmd, "rawhex") == 0) { /* TEXT is the bytes in hex */
            if (len % 2 || len / 2 > sizeof bytes)
                FAIL("rawhex: an even number of hex digits, at most %zu bytes", sizeof bytes);
            for (size_t i = 0; i < len / 2; i++) {
                unsigned v;
                if (sscanf(data + 2 * i, "%2x", &v) != 1)
                    FAIL("rawhex: not hex at %zu", 2 * i);
                bytes[i] = (char)v;
            }
            data = bytes;
            len /= 2;
        }
        if (bus_publish(bus, argv[5], data, len, NULL, &ack, &err) < 0)
            FAIL("raw publish: %s", err.msg);
        printf("ok raw seq %" PRIu64 "\n", ack.seq);
        bus_close(bus);
        return 0;
    }
    if (strcmp(cmd, "publish") == 0 && argc == 7) {
        int batch = atoi(argv[5]);
        if (batch < 1 || batch > 4096)
            FAIL("batch must be 1..4096");
        publish(servers, stream, strtoull(argv[4], NULL, 10), batch, (size_t)atoi(argv[6]));
    } else if (strcmp(cmd, "read") == 0 && (argc == 6 || argc == 7)) {
        bus_t *bus = open_bus(servers, stream, 3, 0);
        read_range(bus, strtoull(argv[4], NULL, 10), strtoull(argv[5], NULL, 10), NULL, 0,
                   argc == 7 ? atoi(argv[6]) : 0);
        bus_stats_t st;
        bus_stats(bus, &st);
        printf("ok read %s..%s delivered %" PRIu64 " gaps %" PRIu64 " reconnects %" PRIu64 "\n", argv[4],
               argv[5], st.delivered, st.gaps, st.reconnects);
        bus_close(bus);
    } else if (strcmp(cmd, "mismatch") == 0) {
        const char *subjects[] = {SUBJ};
        bus_options_t o = {.servers = servers, .stream = stream, .subjects = subjects, .n_subjects = 1,
                           .replicas = 1, .timeout_ms = 3000};
        bus_t *bus = NULL;
        bus_error_t err;
        int rc = bus_open(&o, &bus, &err);
        if (rc != -EEXIST || bus || err.code != BUS_E_STREAM || !strstr(err.msg, stream) ||
            !strstr(err.msg, "replicas"))
            FAIL("bus_open with replicas 1 on an R3 stream: rc %d, '%s'", rc, err.msg);
        printf("refused: %s\n", err.msg);
        o.replicas = 3;
        o.max_age_ms = 3600 * 1000;
        rc = bus_open(&o, &bus, &err);
        if (rc != -EEXIST || !strstr(err.msg, "max age"))
            FAIL("bus_open with another max age: rc %d, '%s'", rc, err.msg);
        printf("refused: %s\n", err.msg);
        const char *other[] = {"tl.other"};
        o.max_age_ms = 0;
        o.subjects = other;
        rc = bus_open(&o, &bus, &err);
        if (rc != -EEXIST || !strstr(err.msg, "subjects"))
            FAIL("bus_open with other subjects: rc %d, '%s'", rc, err.msg);
        printf("refused: %s\n", err.msg);
    } else if (strcmp(cmd, "dedup") == 0) {
        bus_t *bus = open_bus(servers, stream, 3, 0);
        bus_ack_t a1, a2, a3;
        bus_error_t err;
        uint64_t i = 7;
        if (bus_publish(bus, SUBJ, &i, 8, "dedup-1", &a1, &err) < 0 ||
            bus_publish(bus, SUBJ, &i, 8, "dedup-1", &a2, &err) < 0)
            FAIL("publish: %s", err.msg);
        if (a1.duplicate || !a2.duplicate || a1.seq != a2.seq)
            FAIL("same id twice: seq %" PRIu64 "/%" PRIu64 " duplicate %d/%d", a1.seq, a2.seq, a1.duplicate, a2.duplicate);
        bus_item_t it[3] = {{.subject = SUBJ, .data = &i, .len = 8, .msg_id = "dedup-1"},
                            {.subject = SUBJ, .data = &i, .len = 8, .msg_id = "dedup-2"},
                            {.subject = SUBJ, .data = &i, .len = 8, .msg_id = "dedup-2"}};
        int got = bus_publish_batch(bus, it, 3, &err);
        if (got != 3 || it[0].ack.seq != a1.seq || !it[0].ack.duplicate || it[2].ack.seq != it[1].ack.seq ||
            !it[2].ack.duplicate || it[1].ack.seq != a1.seq + 1)
            FAIL("batch with repeated ids: got %d, seqs %" PRIu64 " %" PRIu64 " %" PRIu64, got, it[0].ack.seq,
                 it[1].ack.seq, it[2].ack.seq);
        if (bus_publish(bus, SUBJ, &i, 8, NULL, &a3, &err) < 0 || a3.seq != a1.seq + 2)
            FAIL("a publish after the duplicates: seq %" PRIu64 ", wanted %" PRIu64, a3.seq, a1.seq + 2);
        bus_stats_t st;
        bus_stats(bus, &st);
        if (st.duplicates != 3)
            FAIL("duplicates counter %" PRIu64 ", wanted 3", st.duplicates);
        printf("ok dedup seq %" PRIu64 "\n", a1.seq);
        bus_close(bus);
    } else {
        FAIL("unknown command or arguments");
    }
    return 0;
}
