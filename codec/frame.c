/*
 * frame.c — the 24-byte frame header, the header half of every encoder
 * (codec__frame_begin), and the small control messages (ERROR, PING/PONG).
 * Whole-frame dispatch to the message decoders is msg.c's: this file calls
 * no message file, so they can all call it.
 *
 *  0       4    5    6         8                 16        20        24
 *  +-------+----+----+---------+-----------------+---------+---------+---------
 *  | magic |ver |type| flags   | request_id      | payload | reserved| payload
 *  | "TLW1"| =1 |    | u16     | u64             | _len u32| u32 = 0 |
 *  +-------+----+----+---------+-----------------+---------+---------+---------
 *
 * The header is checked in field order: magic, version, payload_len,
 * reserved, flags, so the first bad field is the one reported.  Those are
 * the framing errors after which the stream cannot be trusted.  An unknown
 * type is not a framing error: its payload_len is still good, so the reader
 * can skip it and answer UNKNOWN_TYPE on the same connection.  Flags are
 * checked only for known types 1..11 (PREDICT, TRAIN and LOOKUP define bit
 * 0, the others nothing).
 *
 * ERROR payload:  u16 code | u16 msg_len (<= 1024) | msg
 * PING/PONG:      0..64 opaque bytes
 * Out-of-range fields in them (code 0, msg_len over 1024, a 65-byte PING)
 * are BAD_VALUE.
 *
 * THREAD SAFETY: per-call state only.
 */
#include "codec_internal.h"

static const char *const errc_names[] = {
    [CODEC_OK] = "OK",
    [CODEC_E_BAD_MAGIC] = "BAD_MAGIC",
    [CODEC_E_BAD_VERSION] = "BAD_VERSION",
    [CODEC_E_FRAME_TOO_LARGE] = "FRAME_TOO_LARGE",
    [CODEC_E_BAD_HEADER] = "BAD_HEADER",
    [CODEC_E_UNKNOWN_TYPE] = "UNKNOWN_TYPE",
    [CODEC_E_TRUNCATED] = "TRUNCATED",
    [CODEC_E_TRAILING_BYTES] = "TRAILING_BYTES",
    [CODEC_E_BAD_VARINT] = "BAD_VARINT",
    [CODEC_E_BAD_NAME] = "BAD_NAME",
    [CODEC_E_UNKNOWN_MODEL] = "UNKNOWN_MODEL",
    [CODEC_E_UNKNOWN_VERSION] = "UNKNOWN_VERSION",
    [CODEC_E_NO_ITEMS] = "NO_ITEMS",
    [CODEC_E_TOO_MANY_ITEMS] = "TOO_MANY_ITEMS",
    [CODEC_E_TOO_MANY_FEATURES] = "TOO_MANY_FEATURES",
    [CODEC_E_UNSORTED_FEATURES] = "UNSORTED_FEATURES",
    [CODEC_E_BAD_VALUE] = "BAD_VALUE",
    [CODEC_E_OVERLOADED] = "OVERLOADED",
    [CODEC_E_SHUTTING_DOWN] = "SHUTTING_DOWN",
    [CODEC_E_INTERNAL] = "INTERNAL",
};

const char *codec_errc_name(int code)
{
    if (code == CODEC_NEED_MORE)
        return "NEED_MORE";
    if (code < 0 || (size_t)code >= sizeof errc_names / sizeof errc_names[0])
        return "?";
    return errc_names[code];
}

size_t codec_arena_bound(size_t payload_len)
{
    /* Each feature costs >= 1 payload byte and <= 12 arena bytes (id + value);
     * each block array entry and its two allocations' alignment <= 24 + 16;
     * labels and weights, or scores, 8 per item; a FEEDBACK event (>= 17
     * payload bytes) takes 24 and a FEEDBACK_ACK refusal (>= 2) 8, both under
     * the block array's share; slack for the per-array alignment. */
    size_t features =
        payload_len < CODEC_MAX_REQUEST_FEATURES ? payload_len : CODEC_MAX_REQUEST_FEATURES;
    return features * 12 + (CODEC_MAX_ITEMS + 1) * (sizeof(codec_block_t) + 16) +
           CODEC_MAX_ITEMS * 8 + 64;
}

uint16_t codec__defined_flags(uint8_t type, bool *known)
{
    *known = type >= CODEC_PREDICT && type <= CODEC_FEEDBACK_ACK;
    switch (type) {
    case CODEC_PREDICT:
        return CODEC_PREDICT_LOG;
    case CODEC_TRAIN:
        return CODEC_TRAIN_WEIGHTS;
    case CODEC_LOOKUP:
        return CODEC_LOOKUP_PARTIAL;
    default:
        return 0;
    }
}

int codec_parse_header(const uint8_t *buf, size_t len, codec_header_t *hdr, codec_error_t *err)
{
    if (len < CODEC_HEADER_SIZE)
        return CODEC_NEED_MORE;
    if (unlikely(memcmp(buf, CODEC_MAGIC, 4) != 0))
        return codec__fail(err, CODEC_E_BAD_MAGIC, 0,
                           "frame: magic %02x %02x %02x %02x at offset 0 is not \"TLW1\"", buf[0],
                           buf[1], buf[2], buf[3]);
    if (unlikely(buf[4] != CODEC_WIRE_VERSION))
        return codec__fail(err, CODEC_E_BAD_VERSION, 4,
                           "frame: wire version %u at offset 4, this server speaks 1", buf[4]);
    uint32_t payload_len = get_u32(buf + 16);
    if (unlikely(payload_len > CODEC_MAX_PAYLOAD))
        return codec__fail(err, CODEC_E_FRAME_TOO_LARGE, 16,
                           "frame: payload_len %u at offset 16 is over %u", payload_len,
                           CODEC_MAX_PAYLOAD);
    uint32_t reserved = get_u32(buf + 20);
    if (unlikely(reserved != 0))
        return codec__fail(err, CODEC_E_BAD_HEADER, 20,
                           "frame: reserved field 0x%08x at offset 20 is not 0", reserved);
    bool known;
    uint16_t flags = get_u16(buf + 6);
    uint16_t ok = codec__defined_flags(buf[5], &known);
    if (unlikely(known && (flags & ~ok)))
        return codec__fail(err, CODEC_E_BAD_HEADER, 6,
                           "frame: flags 0x%04x at offset 6 undefined for type %u", flags, buf[5]);
    hdr->type = buf[5];
    hdr->flags = flags;
    hdr->request_id = get_u64(buf + 8);
    hdr->payload_len = payload_len;
    return CODEC_OK;
}

void codec_write_header(uint8_t out[CODEC_HEADER_SIZE], const codec_header_t *hdr)
{
    memcpy(out, CODEC_MAGIC, 4);
    out[4] = CODEC_WIRE_VERSION;
    out[5] = hdr->type;
    put_u16(out + 6, hdr->flags);
    put_u64(out + 8, hdr->request_id);
    put_u32(out + 16, hdr->payload_len);
    put_u32(out + 20, 0);
}

int codec__frame_begin(uint8_t *buf, size_t cap, uint8_t type, uint16_t flags, uint64_t request_id,
                       size_t payload, size_t *len, codec_error_t *err)
{
    if (payload > CODEC_MAX_PAYLOAD)
        return codec__fail(err, CODEC_E_FRAME_TOO_LARGE, CODEC_NO_OFFSET,
                           "encode: payload of %zu bytes is over %u", payload, CODEC_MAX_PAYLOAD);
    *len = CODEC_HEADER_SIZE + payload;
    if (cap < *len || !buf)
        return codec__fail(err, CODEC_NEED_MORE, CODEC_NO_OFFSET,
                           "encode: frame needs %zu bytes, buffer has %zu", *len, cap);
    codec_header_t h = {
        .type = type, .flags = flags, .request_id = request_id, .payload_len = (uint32_t)payload};
    codec_write_header(buf, &h);
    return CODEC_OK;
}

/* ---- ERROR --------------------------------------------------------------------- */

int codec_decode_errmsg(const uint8_t *payload, size_t len, codec_errmsg_t *out, codec_error_t *err)
{
    struct rd r = {.p = payload, .len = len, .err = err, .msg = "ERROR"};
    int rc = codec__rd_need(&r, 2, "code"); /* wire order: the code, then msg_len */
    if (rc)
        return rc;
    out->code = get_u16(payload);
    if (unlikely(out->code == 0))
        return codec__fail(err, CODEC_E_BAD_VALUE, 0, "ERROR: code 0 at offset 0");
    r.off = 2;
    if ((rc = codec__rd_need(&r, 2, "msg_len")))
        return rc;
    out->msg_len = get_u16(payload + 2);
    r.off = 4;
    if (unlikely(out->msg_len > CODEC_MAX_ERROR_MSG))
        return codec__fail(err, CODEC_E_BAD_VALUE, 2, "ERROR: msg_len %u at offset 2 is over %u",
                           out->msg_len, CODEC_MAX_ERROR_MSG);
    if ((rc = codec__rd_need(&r, out->msg_len, "msg")))
        return rc;
    out->msg = (const char *)payload + 4;
    r.off += out->msg_len;
    return codec__rd_end(&r);
}

int codec_encode_errmsg(uint8_t *buf, size_t cap, uint64_t request_id, const codec_errmsg_t *e,
                        size_t *len, codec_error_t *err)
{
    if (e->code == 0)
        return codec__fail(err, CODEC_E_BAD_VALUE, CODEC_NO_OFFSET, "ERROR: code 0");
    if (e->msg_len > CODEC_MAX_ERROR_MSG)
        return codec__fail(err, CODEC_E_BAD_VALUE, CODEC_NO_OFFSET, "ERROR: msg_len %u is over %u",
                           e->msg_len, CODEC_MAX_ERROR_MSG);
    int rc = codec__frame_begin(buf, cap, CODEC_ERROR, 0, request_id, 4u + e->msg_len, len, err);
    if (rc)
        return rc;
    struct wr w = {.p = buf, .off = CODEC_HEADER_SIZE};
    wr_u16(&w, e->code);
    wr_u16(&w, e->msg_len);
    wr_bytes(&w, e->msg, e->msg_len);
    return CODEC_OK;
}

/* ---- PING / PONG ----------------------------------------------------------------- */

int codec_decode_ping(const uint8_t *payload, size_t len, codec_ping_t *out, codec_error_t *err)
{
    if (unlikely(len > CODEC_MAX_PING))
        return codec__fail(err, CODEC_E_BAD_VALUE, CODEC_MAX_PING,
                           "PING: payload of %zu bytes is over %u", len, CODEC_MAX_PING);
    out->data = payload;
    out->len = (uint32_t)len;
    return CODEC_OK;
}

int codec_encode_ping(uint8_t *buf, size_t cap, uint8_t type, uint64_t request_id,
                      const codec_ping_t *p, size_t *len, codec_error_t *err)
{
    if (type != CODEC_PING && type != CODEC_PONG)
        return codec__fail(err, CODEC_E_INTERNAL, CODEC_NO_OFFSET, "PING: type %u", type);
    if (p->len > CODEC_MAX_PING)
        return codec__fail(err, CODEC_E_BAD_VALUE, CODEC_NO_OFFSET,
                           "PING: payload of %u bytes is over %u", p->len, CODEC_MAX_PING);
    int rc = codec__frame_begin(buf, cap, type, 0, request_id, p->len, len, err);
    if (rc)
        return rc;
    struct wr w = {.p = buf, .off = CODEC_HEADER_SIZE};
    wr_bytes(&w, p->data, p->len);
    return CODEC_OK;
}
