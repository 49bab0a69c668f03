/*
 * feedback.c — FEEDBACK (labels for logged impressions) and FEEDBACK_ACK.
 *
 * A PREDICT sent with the LOG flag carries a client-chosen impression id and
 * the server keeps its feature blocks for a while; a FEEDBACK names items of
 * such impressions and gives each a label, so the server can join the label
 * to the features it scored and train on the sample.
 *
 * FEEDBACK payload:
 *
 *   u8 name_len | name | varint events |
 *   { u64 impression_id | varint item | f32 label | f32 weight } x events
 *
 *   impression_id  non-zero (0 is BAD_VALUE)
 *   item           the item's index in the logged PREDICT; < MAX_ITEMS here
 *                  (else BAD_VALUE), the logged request's own count is the
 *                  server's to check (FEEDBACK_ACK reason ITEM_OUT_OF_RANGE)
 *   label          0.0 or 1.0
 *   weight         finite, in [0, 1e6]
 *
 * `events` uses the item limits (NO_ITEMS, TOO_MANY_ITEMS) and is checked
 * against the bytes left (at least 17 per event) before the arena is
 * touched; the fields are then checked in wire order, so the first bad one
 * is reported.
 *
 * FEEDBACK_ACK payload:
 *
 *   varint accepted | varint refused | { varint event | u8 reason } x refused
 *
 *   accepted + refused = the FEEDBACK's events: 1..MAX_ITEMS (0: NO_ITEMS,
 *   over: TOO_MANY_ITEMS); each count alone over MAX_ITEMS is TOO_MANY_ITEMS
 *   as soon as it is read.  Refused event indices are strictly increasing and
 *   below accepted + refused; a reason is 1..4 (codec_refusal_t); anything
 *   else is BAD_VALUE.
 *
 * THREAD SAFETY: per-call state only.
 */
#include "codec_internal.h"

#define EVENT_MIN_BYTES 17u  /* u64 id + 1-byte varint + 2 f32 */
#define REFUSAL_MIN_BYTES 2u /* 1-byte varint + u8 reason */

int codec_decode_feedback(const uint8_t *payload, size_t len, codec_arena_t *arena,
                          codec_feedback_t *out, codec_error_t *err)
{
    struct rd r = {.p = payload, .len = len, .arena = arena, .err = err, .msg = "FEEDBACK"};
    int rc = codec__rd_name(&r, out->name);
    if (rc)
        return rc;
    if ((rc = codec__rd_count(&r, &out->events, "events", EVENT_MIN_BYTES)))
        return rc;
    if (!(out->event = codec__rd_alloc(&r, out->events * sizeof *out->event, "events")))
        return r.err ? r.err->code : CODEC_E_INTERNAL;
    for (uint32_t i = 0; i < out->events; i++) {
        codec_feedback_event_t *e = &out->event[i];
        if ((rc = codec__rd_need(&r, 8, "impression_id")))
            return rc;
        e->impression_id = get_u64(payload + r.off);
        if (unlikely(e->impression_id == 0))
            return codec__fail(err, CODEC_E_BAD_VALUE, r.off,
                               "FEEDBACK: event[%u] impression_id 0 at offset %zu", i, r.off);
        r.off += 8;
        size_t at = r.off;
        uint64_t item;
        if ((rc = codec__rd_varint(&r, &item, "item")))
            return rc;
        if (unlikely(item >= CODEC_MAX_ITEMS))
            return codec__fail(err, CODEC_E_BAD_VALUE, at,
                               "FEEDBACK: event[%u] item %llu at offset %zu is not below %u", i,
                               (unsigned long long)item, at, CODEC_MAX_ITEMS);
        e->item = (uint32_t)item;
        if ((rc = codec__rd_need(&r, 4, "label")))
            return rc;
        e->label = get_f32(payload + r.off);
        if (unlikely(!codec__label_ok(e->label)))
            return codec__fail(err, CODEC_E_BAD_VALUE, r.off,
                               "FEEDBACK: event[%u] label at offset %zu is not 0 or 1", i, r.off);
        r.off += 4;
        if ((rc = codec__rd_need(&r, 4, "weight")))
            return rc;
        e->weight = get_f32(payload + r.off);
        if (unlikely(!codec__weight_ok(e->weight)))
            return codec__fail(err, CODEC_E_BAD_VALUE, r.off,
                               "FEEDBACK: event[%u] weight at offset %zu is not in [0, 1e6]", i,
                               r.off);
        r.off += 4;
    }
    return codec__rd_end(&r);
}

int codec_encode_feedback(uint8_t *buf, size_t cap, uint64_t request_id,
                          const codec_feedback_t *fb, size_t *len, codec_error_t *err)
{
    int rc = codec__name_check(fb->name, "FEEDBACK", err);
    if (rc)
        return rc;
    if (fb->events == 0)
        return codec__fail(err, CODEC_E_NO_ITEMS, CODEC_NO_OFFSET, "FEEDBACK: events is 0");
    if (fb->events > CODEC_MAX_ITEMS)
        return codec__fail(err, CODEC_E_TOO_MANY_ITEMS, CODEC_NO_OFFSET,
                           "FEEDBACK: events %u is over %u", fb->events, CODEC_MAX_ITEMS);
    if (!fb->event)
        return codec__fail(err, CODEC_E_INTERNAL, CODEC_NO_OFFSET, "FEEDBACK: event is NULL");
    size_t payload = 1 + strlen(fb->name) + codec_varint_size(fb->events);
    for (uint32_t i = 0; i < fb->events; i++) {
        const codec_feedback_event_t *e = &fb->event[i];
        if (e->impression_id == 0)
            return codec__fail(err, CODEC_E_BAD_VALUE, CODEC_NO_OFFSET,
                               "FEEDBACK: event[%u] impression_id is 0", i);
        if (e->item >= CODEC_MAX_ITEMS)
            return codec__fail(err, CODEC_E_BAD_VALUE, CODEC_NO_OFFSET,
                               "FEEDBACK: event[%u] item %u is not below %u", i, e->item,
                               CODEC_MAX_ITEMS);
        if (!codec__label_ok(e->label))
            return codec__fail(err, CODEC_E_BAD_VALUE, CODEC_NO_OFFSET,
                               "FEEDBACK: event[%u] label is not 0 or 1", i);
        if (!codec__weight_ok(e->weight))
            return codec__fail(err, CODEC_E_BAD_VALUE, CODEC_NO_OFFSET,
                               "FEEDBACK: event[%u] weight is not in [0, 1e6]", i);
        payload += 8 + codec_varint_size(e->item) + 8;
    }
    if ((rc = codec__frame_begin(buf, cap, CODEC_FEEDBACK, 0, request_id, payload, len, err)))
        return rc;
    struct wr w = {.p = buf, .off = CODEC_HEADER_SIZE};
    codec__wr_name(&w, fb->name);
    wr_varint(&w, fb->events);
    for (uint32_t i = 0; i < fb->events; i++) {
        wr_u64(&w, fb->event[i].impression_id);
        wr_varint(&w, fb->event[i].item);
        wr_f32(&w, fb->event[i].label);
        wr_f32(&w, fb->event[i].weight);
    }
    return CODEC_OK;
}

static bool reason_ok(uint8_t r)
{
    return r >= CODEC_REFUSE_UNKNOWN_IMPRESSION && r <= CODEC_REFUSE_DUPLICATE;
}

/* Reads one of the ack's two counts: TOO_MANY_ITEMS over MAX_ITEMS. */
static int rd_ack_count(struct rd *r, uint32_t *n, const char *what)
{
    size_t at = r->off;
    uint64_t v;
    int rc = codec__rd_varint(r, &v, what);
    if (rc)
        return rc;
    if (unlikely(v > CODEC_MAX_ITEMS))
        return codec__fail(r->err, CODEC_E_TOO_MANY_ITEMS, at,
                           "FEEDBACK_ACK: %s %llu at offset %zu is over %u", what,
                           (unsigned long long)v, at, CODEC_MAX_ITEMS);
    *n = (uint32_t)v;
    return CODEC_OK;
}

int codec_decode_feedback_ack(const uint8_t *payload, size_t len, codec_arena_t *arena,
                              codec_feedback_ack_t *out, codec_error_t *err)
{
    struct rd r = {.p = payload, .len = len, .arena = arena, .err = err, .msg = "FEEDBACK_ACK"};
    int rc = rd_ack_count(&r, &out->accepted, "accepted");
    if (rc)
        return rc;
    size_t at = r.off;
    if ((rc = rd_ack_count(&r, &out->refused, "refused")))
        return rc;
    uint32_t events = out->accepted + out->refused;
    if (unlikely(events == 0))
        return codec__fail(err, CODEC_E_NO_ITEMS, at, "FEEDBACK_ACK: accepted + refused is 0");
    if (unlikely(events > CODEC_MAX_ITEMS))
        return codec__fail(err, CODEC_E_TOO_MANY_ITEMS, at,
                           "FEEDBACK_ACK: accepted + refused %u is over %u", events,
                           CODEC_MAX_ITEMS);
    if (unlikely((size_t)out->refused * REFUSAL_MIN_BYTES > rd_left(&r)))
        return codec__fail(err, CODEC_E_TRUNCATED, at,
                           "FEEDBACK_ACK: refused %u at offset %zu need %u bytes, %zu left",
                           out->refused, at, out->refused * REFUSAL_MIN_BYTES, rd_left(&r));
    out->refusal = NULL;
    if (out->refused &&
        !(out->refusal = codec__rd_alloc(&r, out->refused * sizeof *out->refusal, "refusals")))
        return r.err ? r.err->code : CODEC_E_INTERNAL;
    for (uint32_t i = 0; i < out->refused; i++) {
        at = r.off;
        uint64_t ev;
        if ((rc = codec__rd_varint(&r, &ev, "event")))
            return rc;
        if (unlikely(ev >= events || (i > 0 && ev <= out->refusal[i - 1].event)))
            return codec__fail(err, CODEC_E_BAD_VALUE, at,
                               "FEEDBACK_ACK: refusal[%u] event %llu at offset %zu is not "
                               "ascending below %u",
                               i, (unsigned long long)ev, at, events);
        if ((rc = codec__rd_need(&r, 1, "reason")))
            return rc;
        uint8_t reason = payload[r.off];
        if (unlikely(!reason_ok(reason)))
            return codec__fail(err, CODEC_E_BAD_VALUE, r.off,
                               "FEEDBACK_ACK: refusal[%u] reason %u at offset %zu is not 1..4", i,
                               reason, r.off);
        r.off += 1;
        out->refusal[i] = (codec_refused_t){.event = (uint32_t)ev, .reason = reason};
    }
    return codec__rd_end(&r);
}

int codec_encode_feedback_ack(uint8_t *buf, size_t cap, uint64_t request_id,
                              const codec_feedback_ack_t *ack, size_t *len, codec_error_t *err)
{
    if (ack->accepted > CODEC_MAX_ITEMS || ack->refused > CODEC_MAX_ITEMS ||
        ack->accepted + ack->refused > CODEC_MAX_ITEMS)
        return codec__fail(err, CODEC_E_TOO_MANY_ITEMS, CODEC_NO_OFFSET,
                           "FEEDBACK_ACK: accepted %u + refused %u is over %u", ack->accepted,
                           ack->refused, CODEC_MAX_ITEMS);
    uint32_t events = ack->accepted + ack->refused;
    if (events == 0)
        return codec__fail(err, CODEC_E_NO_ITEMS, CODEC_NO_OFFSET,
                           "FEEDBACK_ACK: accepted + refused is 0");
    if (ack->refused && !ack->refusal)
        return codec__fail(err, CODEC_E_INTERNAL, CODEC_NO_OFFSET,
                           "FEEDBACK_ACK: refusal is NULL");
    size_t payload = codec_varint_size(ack->accepted) + codec_varint_size(ack->refused);
    for (uint32_t i = 0; i < ack->refused; i++) {
        const codec_refused_t *f = &ack->refusal[i];
        if (f->event >= events || (i > 0 && f->event <= ack->refusal[i - 1].event))
            return codec__fail(err, CODEC_E_BAD_VALUE, CODEC_NO_OFFSET,
                               "FEEDBACK_ACK: refusal[%u] event %u is not ascending below %u", i,
                               f->event, events);
        if (!reason_ok(f->reason))
            return codec__fail(err, CODEC_E_BAD_VALUE, CODEC_NO_OFFSET,
                               "FEEDBACK_ACK: refusal[%u] reason %u is not 1..4", i, f->reason);
        payload += codec_varint_size(f->event) + 1;
    }
    int rc = codec__frame_begin(buf, cap, CODEC_FEEDBACK_ACK, 0, request_id, payload, len, err);
    if (rc)
        return rc;
    struct wr w = {.p = buf, .off = CODEC_HEADER_SIZE};
    wr_varint(&w, ack->accepted);
    wr_varint(&w, ack->refused);
    for (uint32_t i = 0; i < ack->refused; i++) {
        wr_varint(&w, ack->refusal[i].event);
        wr_u8(&w, ack->refusal[i].reason);
    }
    return CODEC_OK;
}
