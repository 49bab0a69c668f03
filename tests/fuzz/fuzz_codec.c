/*
 * fuzz_codec.c — libFuzzer target for codec_decode_frame() and the encoders.
 *
 * Each input is decoded twice as one frame (header + payload): as given, and
 * with its header patched to be valid (magic, version, payload_len = the
 * rest of the input, reserved 0, the type byte kept, flags cut to bit 0 for
 * PREDICT (LOG) and TRAIN (WEIGHTS) and 0 for the rest), so that mutations
 * reach the payload decoders, FEEDBACK and FEEDBACK_ACK included, and both
 * layouts of PREDICT and TRAIN, instead of dying on the header.  The
 * arena is codec_arena_bound(payload_len), so INTERNAL (arena full) is a bug.
 *
 * Whatever decodes must re-encode (at most 1/7 longer: the encoder writes
 * minimal varints, or fixed ids where varints would average over 7 bytes an
 * id), decode again to the same message, and re-encode to the same bytes.  A refusal must carry a wire code the decoder may produce and a
 * message.  Any other outcome abort()s.
 *
 *   cmake -DTL_FUZZ=ON -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ ..
 *   ./fuzz_codec -max_len=4096 ../tests/fuzz/corpus/codec
 *
 * Without TL_FUZZ the same target replays the seed corpus under ctest.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_codec: %s\n", what);
        abort();
    }
}

static bool block_eq(const codec_block_t *a, const codec_block_t *b)
{
    if (a->n != b->n || (a->values == NULL) != (b->values == NULL))
        return false;
    if (a->n && memcmp(a->ids, b->ids, a->n * sizeof *a->ids) != 0)
        return false;
    return !a->values || !a->n || memcmp(a->values, b->values, a->n * sizeof(float)) == 0;
}

static bool msg_eq(const codec_msg_t *a, const codec_msg_t *b)
{
    if (a->hdr.type != b->hdr.type || a->hdr.flags != b->hdr.flags ||
        a->hdr.request_id != b->hdr.request_id)
        return false;
    switch (a->hdr.type) {
    case CODEC_PREDICT: {
        const codec_predict_t *x = &a->u.predict, *y = &b->u.predict;
        if (strcmp(x->name, y->name) || x->version != y->version || x->items != y->items ||
            x->impression_id != y->impression_id || !block_eq(&x->shared, &y->shared))
            return false;
        for (uint32_t i = 0; i < x->items; i++)
            if (!block_eq(&x->item[i], &y->item[i]))
                return false;
        return true;
    }
    case CODEC_PREDICT_RESULT: {
        const codec_result_t *x = &a->u.result, *y = &b->u.result;
        return x->version == y->version && x->items == y->items &&
               memcmp(x->scores, y->scores, x->items * sizeof(float)) == 0;
    }
    case CODEC_TRAIN: {
        const codec_train_t *x = &a->u.train, *y = &b->u.train;
        if (strcmp(x->name, y->name) || x->samples != y->samples ||
            !block_eq(&x->shared, &y->shared) ||
            memcmp(x->labels, y->labels, x->samples * sizeof(float)) != 0 ||
            (x->weights == NULL) != (y->weights == NULL) ||
            (x->weights && memcmp(x->weights, y->weights, x->samples * sizeof(float)) != 0))
            return false;
        for (uint32_t i = 0; i < x->samples; i++)
            if (!block_eq(&x->sample[i], &y->sample[i]))
                return false;
        return true;
    }
    case CODEC_TRAIN_ACK:
        return a->u.ack.accepted == b->u.ack.accepted;
    case CODEC_FEEDBACK: {
        const codec_feedback_t *x = &a->u.feedback, *y = &b->u.feedback;
        if (strcmp(x->name, y->name) || x->events != y->events)
            return false;
        for (uint32_t i = 0; i < x->events; i++) {
            const codec_feedback_event_t *p = &x->event[i], *q = &y->event[i];
            if (p->impression_id != q->impression_id || p->item != q->item ||
                memcmp(&p->label, &q->label, 4) || memcmp(&p->weight, &q->weight, 4))
                return false;
        }
        return true;
    }
    case CODEC_FEEDBACK_ACK: {
        const codec_feedback_ack_t *x = &a->u.feedback_ack, *y = &b->u.feedback_ack;
        if (x->accepted != y->accepted || x->refused != y->refused)
            return false;
        for (uint32_t i = 0; i < x->refused; i++)
            if (x->refusal[i].event != y->refusal[i].event ||
                x->refusal[i].reason != y->refusal[i].reason)
                return false;
        return true;
    }
    case CODEC_ERROR:
        return a->u.error.code == b->u.error.code && a->u.error.msg_len == b->u.error.msg_len &&
               memcmp(a->u.error.msg, b->u.error.msg, a->u.error.msg_len) == 0;
    case CODEC_PING:
    case CODEC_PONG:
        return a->u.ping.len == b->u.ping.len &&
               (a->u.ping.len == 0 || memcmp(a->u.ping.data, b->u.ping.data, a->u.ping.len) == 0);
    default:
        return false;
    }
}

static codec_arena_t arena(size_t payload_len)
{
    size_t cap = codec_arena_bound(payload_len);
    codec_arena_t a = {.base = malloc(cap), .cap = cap};
    check(a.base != NULL, "out of memory");
    return a;
}

static void one(const uint8_t *data, size_t size)
{
    codec_arena_t a = arena(size);
    codec_msg_t m;
    codec_error_t e = {0};
    int rc = codec_decode_frame(data, size, &a, &m, &e);
    if (rc == CODEC_NEED_MORE)
        goto out;
    if (rc != CODEC_OK) {
        check(rc >= CODEC_E_BAD_MAGIC && rc <= CODEC_E_BAD_VALUE, "unexpected error code");
        check(rc != CODEC_E_UNKNOWN_MODEL && rc != CODEC_E_UNKNOWN_VERSION,
              "server-only error code");
        check(e.code == rc, "error struct code differs");
        check(e.msg[0] != '\0' && memchr(e.msg, '\0', sizeof e.msg), "refusal without a sentence");
        goto out;
    }
    check(a.used <= a.cap, "arena overrun");

    size_t len = 0, len2 = 0;
    rc = codec_encode_msg(NULL, 0, &m, &len, &e);
    check(rc == CODEC_NEED_MORE, "a decoded message does not size");
    /* minimal varints never grow; a varint block the encoder sends as fixed
     * ids (only when the varints averaged over 7 bytes an id) grows by < 1/7 */
    check(len <= CODEC_HEADER_SIZE + (size_t)m.hdr.payload_len + m.hdr.payload_len / 7 + 1,
          "re-encoding is longer than the bound");
    uint8_t *buf = malloc(len), *buf2 = malloc(len);
    check(buf && buf2, "out of memory");
    rc = codec_encode_msg(buf, len, &m, &len2, &e);
    check(rc == CODEC_OK && len2 == len, "a decoded message does not re-encode");

    codec_arena_t a2 = arena(len);
    codec_msg_t m2;
    rc = codec_decode_frame(buf, len, &a2, &m2, &e);
    if (rc != CODEC_OK)
        fprintf(stderr, "fuzz_codec: %s\n", e.msg);
    check(rc == CODEC_OK, "a re-encoded message does not decode");
    check(msg_eq(&m, &m2), "round trip changed the message");
    rc = codec_encode_msg(buf2, len, &m2, &len2, &e);
    check(rc == CODEC_OK && len2 == len && memcmp(buf, buf2, len) == 0,
          "encoding is not deterministic");
    free(a2.base);
    free(buf);
    free(buf2);
out:
    free(a.base);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    one(data, size);

    /* Again with a valid header, to fuzz the payload decoders. */
    if (size >= CODEC_HEADER_SIZE && size - CODEC_HEADER_SIZE <= CODEC_MAX_PAYLOAD) {
        uint8_t *copy = malloc(size);
        if (!copy)
            return 0;
        memcpy(copy, data, size);
        bool flagged = data[5] == CODEC_PREDICT || data[5] == CODEC_TRAIN;
        codec_header_t h = {.type = data[5],
                            .flags = flagged ? (uint16_t)(data[6] & 1) : 0,
                            .request_id = 0,
                            .payload_len = (uint32_t)(size - CODEC_HEADER_SIZE)};
        memcpy(&h.request_id, data + 8, sizeof h.request_id);
        codec_write_header(copy, &h);
        one(copy, size);
        free(copy);
    }
    return 0;
}
