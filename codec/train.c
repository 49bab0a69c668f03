/*
 * train.c — TRAIN (labeled click feedback) and TRAIN_ACK.
 *
 * TRAIN payload, PREDICT's shape with a label before each block:
 *
 *   u8 name_len | name | varint samples | block shared |
 *   { f32 label | [f32 weight] | block features } x samples
 *
 * A label is 0.0 or 1.0 (-0.0 compares equal to 0.0 and is kept bit for
 * bit); anything else, NaN included, is BAD_VALUE.  The weight is there
 * only with the header flag WEIGHTS: finite, in [0, 1e6], else BAD_VALUE;
 * without it the decoder leaves weights NULL (all 1.0), as a block without
 * values.  `samples` uses the item limits (NO_ITEMS, TOO_MANY_ITEMS) and is
 * checked against the bytes left (at least 6 per sample, 10 with weights)
 * before the arena is touched.
 *
 * TRAIN_ACK payload:  varint accepted (0..MAX_ITEMS).
 *
 * THREAD SAFETY: per-call state only.
 */
#include "codec_internal.h"

int codec_decode_train(const uint8_t *payload, size_t len, uint16_t flags, codec_arena_t *arena,
                       codec_train_t *out, codec_error_t *err)
{
    struct rd r = {.p = payload, .len = len, .arena = arena, .err = err, .msg = "TRAIN"};
    if (unlikely(flags & ~CODEC_TRAIN_WEIGHTS))
        return codec__fail(err, CODEC_E_BAD_HEADER, CODEC_NO_OFFSET,
                           "TRAIN: flags 0x%04x undefined", flags);
    bool weighted = flags & CODEC_TRAIN_WEIGHTS;
    int rc = codec__rd_name(&r, out->name);
    if (rc)
        return rc;
    if ((rc = codec__rd_count(&r, &out->samples, "samples", weighted ? 10 : 6)))
        return rc;
    if ((rc = codec__rd_block(&r, &out->shared, "shared block", -1)))
        return rc;
    out->weights = NULL;
    out->labels = codec__rd_alloc(&r, out->samples * sizeof *out->labels, "labels");
    if (out->labels && weighted)
        out->weights = codec__rd_alloc(&r, out->samples * sizeof *out->weights, "weights");
    out->sample = out->labels && (out->weights || !weighted)
                      ? codec__rd_alloc(&r, out->samples * sizeof *out->sample, "samples")
                      : NULL;
    if (!out->sample)
        return r.err ? r.err->code : CODEC_E_INTERNAL;
    for (uint32_t i = 0; i < out->samples; i++) {
        if ((rc = codec__rd_need(&r, 4, "label")))
            return rc;
        float l = get_f32(payload + r.off);
        if (unlikely(!codec__label_ok(l)))
            return codec__fail(err, CODEC_E_BAD_VALUE, r.off,
                               "TRAIN: sample[%u] label at offset %zu is not 0 or 1", i, r.off);
        out->labels[i] = l;
        r.off += 4;
        if (weighted) {
            if ((rc = codec__rd_need(&r, 4, "weight")))
                return rc;
            float wt = get_f32(payload + r.off);
            if (unlikely(!codec__weight_ok(wt)))
                return codec__fail(err, CODEC_E_BAD_VALUE, r.off,
                                   "TRAIN: sample[%u] weight at offset %zu is not in [0, 1e6]", i,
                                   r.off);
            out->weights[i] = wt;
            r.off += 4;
        }
        if ((rc = codec__rd_block(&r, &out->sample[i], "sample", i)))
            return rc;
    }
    return codec__rd_end(&r);
}

int codec_encode_train(uint8_t *buf, size_t cap, uint64_t request_id, const codec_train_t *req,
                       size_t *len, codec_error_t *err)
{
    int rc = codec__name_check(req->name, "TRAIN", err);
    if (rc)
        return rc;
    if (req->samples == 0)
        return codec__fail(err, CODEC_E_NO_ITEMS, CODEC_NO_OFFSET, "TRAIN: samples is 0");
    if (req->samples > CODEC_MAX_ITEMS)
        return codec__fail(err, CODEC_E_TOO_MANY_ITEMS, CODEC_NO_OFFSET,
                           "TRAIN: samples %u is over %u", req->samples, CODEC_MAX_ITEMS);
    if (!req->sample || !req->labels)
        return codec__fail(err, CODEC_E_INTERNAL, CODEC_NO_OFFSET,
                           "TRAIN: sample or labels is NULL");
    uint32_t features = 0;
    size_t payload = 1 + strlen(req->name) + codec_varint_size(req->samples);
    if ((rc = codec__block_check(&req->shared, "TRAIN", "shared block", -1, &features, &payload,
                                 err)))
        return rc;
    for (uint32_t i = 0; i < req->samples; i++) {
        if (!codec__label_ok(req->labels[i]))
            return codec__fail(err, CODEC_E_BAD_VALUE, CODEC_NO_OFFSET,
                               "TRAIN: sample[%u] label is not 0 or 1", i);
        if (req->weights && !codec__weight_ok(req->weights[i]))
            return codec__fail(err, CODEC_E_BAD_VALUE, CODEC_NO_OFFSET,
                               "TRAIN: sample[%u] weight is not in [0, 1e6]", i);
        payload += req->weights ? 8 : 4;
        if ((rc = codec__block_check(&req->sample[i], "TRAIN", "sample", i, &features, &payload,
                                     err)))
            return rc;
    }
    if ((rc = codec__frame_begin(buf, cap, CODEC_TRAIN, req->weights ? CODEC_TRAIN_WEIGHTS : 0,
                                 request_id, payload, len, err)))
        return rc;

    struct wr w = {.p = buf, .off = CODEC_HEADER_SIZE};
    codec__wr_name(&w, req->name);
    wr_varint(&w, req->samples);
    codec__wr_block(&w, &req->shared);
    for (uint32_t i = 0; i < req->samples; i++) {
        wr_f32(&w, req->labels[i]);
        if (req->weights)
            wr_f32(&w, req->weights[i]);
        codec__wr_block(&w, &req->sample[i]);
    }
    return CODEC_OK;
}

int codec_decode_train_ack(const uint8_t *payload, size_t len, codec_train_ack_t *out,
                           codec_error_t *err)
{
    struct rd r = {.p = payload, .len = len, .err = err, .msg = "TRAIN_ACK"};
    uint64_t v;
    int rc = codec__rd_varint(&r, &v, "accepted");
    if (rc)
        return rc;
    if (unlikely(v > CODEC_MAX_ITEMS))
        return codec__fail(err, CODEC_E_TOO_MANY_ITEMS, 0, "TRAIN_ACK: accepted %llu is over %u",
                           (unsigned long long)v, CODEC_MAX_ITEMS);
    out->accepted = (uint32_t)v;
    return codec__rd_end(&r);
}

int codec_encode_train_ack(uint8_t *buf, size_t cap, uint64_t request_id,
                           const codec_train_ack_t *ack, size_t *len, codec_error_t *err)
{
    if (ack->accepted > CODEC_MAX_ITEMS)
        return codec__fail(err, CODEC_E_TOO_MANY_ITEMS, CODEC_NO_OFFSET,
                           "TRAIN_ACK: accepted %u is over %u", ack->accepted, CODEC_MAX_ITEMS);
    int rc = codec__frame_begin(buf, cap, CODEC_TRAIN_ACK, 0, request_id,
                                codec_varint_size(ack->accepted), len, err);
    if (rc)
        return rc;
    struct wr w = {.p = buf, .off = CODEC_HEADER_SIZE};
    wr_varint(&w, ack->accepted);
    return CODEC_OK;
}
