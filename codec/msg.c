/*
 * msg.c — whole frames: codec_decode_frame parses the header (frame.c) and
 * hands the payload to the decoder of its type; codec_encode_msg hands a
 * decoded message back to the encoder of its type.
 *
 *   msg.c ──> frame.c     header; ERROR, PING/PONG
 *         ──> predict.c   PREDICT, PREDICT_RESULT ──> frame.c, block.c
 *         ──> train.c     TRAIN, TRAIN_ACK        ──> frame.c, block.c
 *         ──> feedback.c  FEEDBACK, FEEDBACK_ACK  ──> frame.c, block.c
 *
 * The dispatch lives above the message files, never inside one of them: the
 * message encoders call down into frame.c (codec__frame_begin), so a frame.c
 * that also called up into predict.c and train.c would make a circle.
 *
 * PREDICT and TRAIN get the header's flags: their layout depends on them.
 *
 * An unknown type is UNKNOWN_TYPE (offset 5, the type byte) only after the
 * header passed and the whole payload is present, so the caller can skip it
 * and keep the connection.
 *
 * THREAD SAFETY: per-call state only.
 */
#include "codec_internal.h"

int codec_decode_frame(const uint8_t *buf, size_t len, codec_arena_t *arena, codec_msg_t *out,
                       codec_error_t *err)
{
    int rc = codec_parse_header(buf, len, &out->hdr, err);
    if (rc)
        return rc;
    if (len - CODEC_HEADER_SIZE < out->hdr.payload_len)
        return CODEC_NEED_MORE;
    const uint8_t *p = buf + CODEC_HEADER_SIZE;
    size_t n = out->hdr.payload_len;
    switch (out->hdr.type) {
    case CODEC_PREDICT:
        return codec_decode_predict(p, n, out->hdr.flags, arena, &out->u.predict, err);
    case CODEC_PREDICT_RESULT:
        return codec_decode_result(p, n, arena, &out->u.result, err);
    case CODEC_TRAIN:
        return codec_decode_train(p, n, out->hdr.flags, arena, &out->u.train, err);
    case CODEC_TRAIN_ACK:
        return codec_decode_train_ack(p, n, &out->u.ack, err);
    case CODEC_FEEDBACK:
        return codec_decode_feedback(p, n, arena, &out->u.feedback, err);
    case CODEC_FEEDBACK_ACK:
        return codec_decode_feedback_ack(p, n, arena, &out->u.feedback_ack, err);
    case CODEC_ERROR:
        return codec_decode_errmsg(p, n, &out->u.error, err);
    case CODEC_PING:
    case CODEC_PONG:
        return codec_decode_ping(p, n, &out->u.ping, err);
    default:
        return codec__fail(err, CODEC_E_UNKNOWN_TYPE, 5, "frame: message type %u not accepted",
                           out->hdr.type);
    }
}

int codec_encode_msg(uint8_t *buf, size_t cap, const codec_msg_t *m, size_t *len,
                     codec_error_t *err)
{
    uint64_t id = m->hdr.request_id;
    switch (m->hdr.type) {
    case CODEC_PREDICT:
        return codec_encode_predict(buf, cap, id, &m->u.predict, len, err);
    case CODEC_PREDICT_RESULT:
        return codec_encode_result(buf, cap, id, &m->u.result, len, err);
    case CODEC_TRAIN:
        return codec_encode_train(buf, cap, id, &m->u.train, len, err);
    case CODEC_TRAIN_ACK:
        return codec_encode_train_ack(buf, cap, id, &m->u.ack, len, err);
    case CODEC_FEEDBACK:
        return codec_encode_feedback(buf, cap, id, &m->u.feedback, len, err);
    case CODEC_FEEDBACK_ACK:
        return codec_encode_feedback_ack(buf, cap, id, &m->u.feedback_ack, len, err);
    case CODEC_ERROR:
        return codec_encode_errmsg(buf, cap, id, &m->u.error, len, err);
    case CODEC_PING:
    case CODEC_PONG:
        return codec_encode_ping(buf, cap, m->hdr.type, id, &m->u.ping, len, err);
    default:
        return codec__fail(err, CODEC_E_UNKNOWN_TYPE, CODEC_NO_OFFSET,
                           "encode: message type %u not supported", m->hdr.type);
    }
}
