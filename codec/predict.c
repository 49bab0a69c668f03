/*
 * predict.c — PREDICT (ranking request) and PREDICT_RESULT (its scores).
 *
 * PREDICT payload:
 *
 *   [u64 impression_id] | u8 name_len | name | u64 version | varint items |
 *   block shared | block item[items]
 *
 * impression_id is there only with the header flag LOG (0 is BAD_VALUE).
 * It comes first so that the rest of a logged PREDICT is, byte for byte, a
 * plain one: the decoder reads it and goes on exactly as for a plain
 * PREDICT, and whoever keeps raw payloads (the gate's shadow sample, an
 * impression log) keeps payload + 8 without re-encoding.
 *
 * The decoder reads the fixed fields into codec_predict_t, checks `items`
 * against the limits and against the bytes left (every block is at least 2
 * bytes: n and flags) before it takes the item array from the arena, then
 * decodes the blocks (block.c).  The request-wide feature limit is kept in
 * struct rd as the blocks go by.  Nothing may follow the last block.
 *
 * PREDICT_RESULT payload:
 *
 *   u64 version | varint items | f32 score[items]
 *
 * Scores are probabilities: a score that is NaN or outside [0, 1] is
 * BAD_VALUE, on both sides.
 *
 * THREAD SAFETY: per-call state only.
 */
#include "codec_internal.h"

int codec_decode_predict(const uint8_t *payload, size_t len, uint16_t flags, codec_arena_t *arena,
                         codec_predict_t *out, codec_error_t *err)
{
    struct rd r = {.p = payload, .len = len, .arena = arena, .err = err, .msg = "PREDICT"};
    int rc;
    if (unlikely(flags & ~CODEC_PREDICT_LOG))
        return codec__fail(err, CODEC_E_BAD_HEADER, CODEC_NO_OFFSET,
                           "PREDICT: flags 0x%04x undefined", flags);
    out->impression_id = 0;
    if (flags & CODEC_PREDICT_LOG) {
        if ((rc = codec__rd_need(&r, 8, "impression_id")))
            return rc;
        out->impression_id = get_u64(payload);
        if (unlikely(out->impression_id == 0))
            return codec__fail(err, CODEC_E_BAD_VALUE, 0,
                               "PREDICT: impression_id 0 at offset 0 (LOG needs a non-zero id)");
        r.off = 8;
    }
    if ((rc = codec__rd_name(&r, out->name)))
        return rc;
    if ((rc = codec__rd_need(&r, 8, "version")))
        return rc;
    out->version = get_u64(payload + r.off);
    r.off += 8;
    if ((rc = codec__rd_count(&r, &out->items, "items", 2)))
        return rc;
    if ((rc = codec__rd_block(&r, &out->shared, "shared block", -1)))
        return rc;
    out->item = codec__rd_alloc(&r, out->items * sizeof *out->item, "item blocks");
    if (!out->item)
        return r.err ? r.err->code : CODEC_E_INTERNAL;
    for (uint32_t i = 0; i < out->items; i++)
        if ((rc = codec__rd_block(&r, &out->item[i], "item", i)))
            return rc;
    return codec__rd_end(&r);
}

int codec_encode_predict(uint8_t *buf, size_t cap, uint64_t request_id, const codec_predict_t *req,
                         size_t *len, codec_error_t *err)
{
    int rc = codec__name_check(req->name, "PREDICT", err);
    if (rc)
        return rc;
    if (req->items == 0)
        return codec__fail(err, CODEC_E_NO_ITEMS, CODEC_NO_OFFSET, "PREDICT: items is 0");
    if (req->items > CODEC_MAX_ITEMS)
        return codec__fail(err, CODEC_E_TOO_MANY_ITEMS, CODEC_NO_OFFSET,
                           "PREDICT: items %u is over %u", req->items, CODEC_MAX_ITEMS);
    if (!req->item)
        return codec__fail(err, CODEC_E_INTERNAL, CODEC_NO_OFFSET, "PREDICT: item is NULL");
    uint32_t features = 0;
    size_t logged = req->impression_id ? 8 : 0;
    size_t payload = logged + 1 + strlen(req->name) + 8 + codec_varint_size(req->items);
    if ((rc = codec__block_check(&req->shared, "PREDICT", "shared block", -1, &features, &payload,
                                 err)))
        return rc;
    for (uint32_t i = 0; i < req->items; i++)
        if ((rc =
                 codec__block_check(&req->item[i], "PREDICT", "item", i, &features, &payload, err)))
            return rc;
    if ((rc = codec__frame_begin(buf, cap, CODEC_PREDICT, logged ? CODEC_PREDICT_LOG : 0,
                                 request_id, payload, len, err)))
        return rc;

    struct wr w = {.p = buf, .off = CODEC_HEADER_SIZE};
    if (logged)
        wr_u64(&w, req->impression_id);
    codec__wr_name(&w, req->name);
    wr_u64(&w, req->version);
    wr_varint(&w, req->items);
    codec__wr_block(&w, &req->shared);
    for (uint32_t i = 0; i < req->items; i++)
        codec__wr_block(&w, &req->item[i]);
    return CODEC_OK;
}

static bool score_ok(float s)
{
    return s >= 0.0f && s <= 1.0f; /* false for NaN */
}

int codec_decode_result(const uint8_t *payload, size_t len, codec_arena_t *arena,
                        codec_result_t *out, codec_error_t *err)
{
    struct rd r = {.p = payload, .len = len, .arena = arena, .err = err, .msg = "PREDICT_RESULT"};
    int rc = codec__rd_need(&r, 8, "version");
    if (rc)
        return rc;
    out->version = get_u64(payload);
    r.off = 8;
    if ((rc = codec__rd_count(&r, &out->items, "items", 4)))
        return rc;
    if (!(out->scores = codec__rd_alloc(&r, out->items * sizeof *out->scores, "scores")))
        return r.err ? r.err->code : CODEC_E_INTERNAL;
    for (uint32_t i = 0; i < out->items; i++) {
        float s = get_f32(payload + r.off);
        if (unlikely(!score_ok(s)))
            return codec__fail(err, CODEC_E_BAD_VALUE, r.off,
                               "PREDICT_RESULT: score[%u] at offset %zu is not in [0, 1]", i,
                               r.off);
        out->scores[i] = s;
        r.off += 4;
    }
    return codec__rd_end(&r);
}

int codec_encode_result(uint8_t *buf, size_t cap, uint64_t request_id, const codec_result_t *res,
                        size_t *len, codec_error_t *err)
{
    if (res->items == 0)
        return codec__fail(err, CODEC_E_NO_ITEMS, CODEC_NO_OFFSET, "PREDICT_RESULT: items is 0");
    if (res->items > CODEC_MAX_ITEMS)
        return codec__fail(err, CODEC_E_TOO_MANY_ITEMS, CODEC_NO_OFFSET,
                           "PREDICT_RESULT: items %u is over %u", res->items, CODEC_MAX_ITEMS);
    if (!res->scores)
        return codec__fail(err, CODEC_E_INTERNAL, CODEC_NO_OFFSET,
                           "PREDICT_RESULT: scores is NULL");
    for (uint32_t i = 0; i < res->items; i++)
        if (!score_ok(res->scores[i]))
            return codec__fail(err, CODEC_E_BAD_VALUE, CODEC_NO_OFFSET,
                               "PREDICT_RESULT: score[%u] is not in [0, 1]", i);
    size_t payload = 8 + codec_varint_size(res->items) + (size_t)res->items * 4;
    int rc = codec__frame_begin(buf, cap, CODEC_PREDICT_RESULT, 0, request_id, payload, len, err);
    if (rc)
        return rc;
    struct wr w = {.p = buf, .off = CODEC_HEADER_SIZE};
    wr_u64(&w, res->version);
    wr_varint(&w, res->items);
    for (uint32_t i = 0; i < res->items; i++)
        wr_f32(&w, res->scores[i]);
    return CODEC_OK;
}
