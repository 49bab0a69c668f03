/* bus_bench.c — what the online-learning bus carries: publish and read rates of server/bus.c
 * into an R3 JetStream stream (deploy/nats-cluster.sh on loopback), not run in CI.
 *
 *   deploy/nats-cluster.sh start /tmp/nc 14222
 *   build/server/bus_bench "$(deploy/nats-cluster.sh urls /tmp/nc)" [SECONDS_PER_CASE] [BATCH]
 *
 * For 1 KiB and 16 KiB messages: synchronous publish (one round trip and a quorum write per
 * message), batched publish (BATCH messages in flight, then every ack awaited), and an ordered
 * reader from sequence 1 over what the batched case wrote. Each case gets its own stream
 * (deleted first when a previous run left it), so the figures do not mix. Prints msgs/s and
 * MB/s per case; the figures depend on the disk and the cores the three servers share.
 */
#include "server/bus.h"

#include <nats/nats.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void drop_stream(const char *servers, const char *name)
{
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    if (natsConnection_ConnectTo(&nc, servers) != NATS_OK)
        return;
    if (natsConnection_JetStream(&js, nc, NULL) == NATS_OK)
        js_DeleteStream(js, name, NULL, NULL);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
}

static bus_t *open_stream(const char *servers, const char *name, char *subject, size_t cap)
{
    snprintf(subject, cap, "bench.%s", name);
    const char *subjects[] = {subject};
    drop_stream(servers, name);
    bus_options_t o = {.servers = servers, .stream = name, .subjects = subjects, .n_subjects = 1,
                       .replicas = 3, .timeout_ms = 10000};
    bus_t *bus = NULL;
    bus_error_t err;
    if (bus_open(&o, &bus, &err) < 0) {
        fprintf(stderr, "bus_bench: %s\n", err.msg);
        exit(1);
    }
    return bus;
}

static void report(const char *what, size_t size, uint64_t n, double secs)
{
    printf("%-28s %6zu B  %9.0f msgs/s  %8.1f MB/s  (%llu msgs in %.2f s)\n", what, size, (double)n / secs,
           (double)n * (double)size / secs / 1e6, (unsigned long long)n, secs);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bus_bench SERVERS [SECONDS_PER_CASE] [BATCH]\n");
        return 2;
    }
    const char *servers = argv[1];
    double secs = argc > 2 ? atof(argv[2]) : 3.0;
    int batch = argc > 3 ? atoi(argv[3]) : 512;
    if (secs <= 0 || batch < 1 || batch > 65536) {
        fprintf(stderr, "bus_bench: SECONDS > 0 and BATCH 1..65536\n");
        return 2;
    }
    const size_t sizes[] = {1024, 16384};
    bus_item_t *items = calloc((size_t)batch, sizeof *items);
    char *payload = malloc(16384);
    if (!items || !payload)
        return 1;
    memset(payload, 'x', 16384);
    for (int s = 0; s < 2; s++) {
        size_t size = sizes[s];
        char name[32], subject[64];
        bus_error_t err;

        snprintf(name, sizeof name, "BENCHSYNC%zu", size);
        bus_t *bus = open_stream(servers, name, subject, sizeof subject);
        uint64_t n = 0;
        double t0 = now_s();
        while (now_s() - t0 < secs) {
            bus_ack_t ack;
            if (bus_publish(bus, subject, payload, size, NULL, &ack, &err) < 0) {
                fprintf(stderr, "bus_bench: %s\n", err.msg);
                return 1;
            }
            n++;
        }
        report("publish sync", size, n, now_s() - t0);
        bus_close(bus);

        snprintf(name, sizeof name, "BENCHBATCH%zu", size);
        bus = open_stream(servers, name, subject, sizeof subject);
        for (int i = 0; i < batch; i++)
            items[i] = (bus_item_t){.subject = subject, .data = payload, .len = size};
        n = 0;
        t0 = now_s();
        while (now_s() - t0 < secs) {
            int got = bus_publish_batch(bus, items, batch, &err);
            if (got != batch) {
                fprintf(stderr, "bus_bench: %s\n", err.msg);
                return 1;
            }
            n += (uint64_t)batch;
        }
        char what[64];
        snprintf(what, sizeof what, "publish batched (%d)", batch);
        report(what, size, n, now_s() - t0);

        bus_reader_t *r;
        if (bus_reader_open(bus, NULL, 1, &r, &err) < 0) {
            fprintf(stderr, "bus_bench: %s\n", err.msg);
            return 1;
        }
        uint64_t got = 0;
        t0 = now_s();
        while (got < n) {
            bus_msg_t m;
            int rc = bus_reader_next(r, 5000, &m, &err);
            if (rc != BUS_READ_MSG) {
                fprintf(stderr, "bus_bench: read stopped at %llu of %llu (rc %d) %s\n",
                        (unsigned long long)got, (unsigned long long)n, rc, rc < 0 ? err.msg : "");
                return 1;
            }
            got++;
        }
        report("read ordered", size, got, now_s() - t0);
        bus_reader_close(r);
        bus_close(bus);
        drop_stream(servers, name);
        snprintf(name, sizeof name, "BENCHSYNC%zu", size);
        drop_stream(servers, name);
    }
    free(items);
    free(payload);
    return 0;
}
