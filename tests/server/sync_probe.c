/* sync_probe.c — publishes one hand-made update message (model/update_codec.h) on a JetStream
 * stream, as a peer replica would, for tests/integration/test_online_sync.py: gaps, unknown
 * producers, other models and stale versions are made with it.
 *
 *   sync_probe SERVERS STREAM BINDS SUBJECT PRODUCER SEQ BASE MODEL KEY DZ DN
 *       one exact message of producer PRODUCER, sequence SEQ, base version BASE, model MODEL,
 *       carrying (DZ, DN) for KEY (decimal u64), on SUBJECT of the stream that binds BINDS.
 *
 * Exit 0 when JetStream stored it ("ok seq <stream sequence>"), 1 with a line on stderr.
 */
#include "model/update_codec.h"
#include "server/bus.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc != 12) {
        fprintf(stderr, "usage: sync_probe SERVERS STREAM BINDS SUBJECT PRODUCER SEQ BASE MODEL KEY DZ DN\n");
        return 1;
    }
    update_acc_config_t ac = {.k = 2, .max_keys = 16, .producer = strtoull(argv[5], NULL, 10),
                              .first_seq = strtoull(argv[6], NULL, 10), .chunk = 256,
                              .model = argv[8]};
    update_acc_t *acc = NULL;
    if (update_acc_create(&acc, &ac) != 0) {
        fprintf(stderr, "sync_probe: bad accumulator settings (model name?)\n");
        return 1;
    }
    float inc[2] = {strtof(argv[10], NULL), strtof(argv[11], NULL)};
    static uint8_t buf[4096];
    update_encode_opts_t o = {.flags = UPDATE_F_EXACT, .select_count = UINT32_MAX,
                              .base_version = strtoull(argv[7], NULL, 10)};
    long len;
    if (update_acc_add(acc, strtoull(argv[9], NULL, 10), inc) != 0 ||
        (len = update_acc_encode(acc, &o, buf, sizeof buf)) < 0) {
        fprintf(stderr, "sync_probe: cannot encode\n");
        return 1;
    }
    update_acc_destroy(acc);
    const char *subjects[] = {argv[3]};
    bus_options_t bo = {.servers = argv[1], .stream = argv[2], .subjects = subjects,
                        .n_subjects = 1, .replicas = 3, .timeout_ms = 5000};
    bus_t *bus = NULL;
    bus_error_t err;
    bus_ack_t ack;
    if (bus_open(&bo, &bus, &err) != 0) {
        fprintf(stderr, "sync_probe: bus_open: %s\n", err.msg);
        return 1;
    }
    if (bus_publish(bus, argv[4], buf, (size_t)len, NULL, &ack, &err) != 0) {
        fprintf(stderr, "sync_probe: publish: %s\n", err.msg);
        bus_close(bus);
        return 1;
    }
    printf("ok seq %" PRIu64 "\n", ack.seq);
    bus_close(bus);
    return 0;
}
