/* bus_publish.c — publishing to the bus's stream: one message acknowledged, or a batch
 * pipelined (bus.h).
 *
 * Publishing. bus_publish is js_Publish with jsPubOptions.MsgId: JetStream's answer carries
 * the stream sequence, and the id makes a retry after a timeout safe (stored once within the
 * stream's dedup window). bus_publish_batch pipelines: every item goes out through
 * js_PublishMsgAsync, then js_PublishAsyncComplete waits for the acknowledgements. The ack
 * handler runs on a nats.c thread and records each item's fate in the batch:
 *
 *     caller thread                          nats.c delivery thread
 *     lock pub_mu; bus->batch = b
 *     for item: natsMsg -> PublishMsgAsync ----> (server) ----> on_ack(msg, pa|pae)
 *     PublishAsyncComplete(timeout)                               find item of msg (cursor)
 *     on timeout: take back pending msgs                          lock b->mu; record; done++
 *     wait until done + taken_back == sent <---------------------- signal
 *     bus->batch = NULL; unlock pub_mu
 *
 * A message is either still pending (js_PublishAsyncGetPendingList hands it back to us: not
 * acked) or already removed by nats.c for its handler, never both, so the wait ends. Acks
 * mostly come in order, so the item of a message is found by a cursor, falling back to a scan.
 *
 * THREAD SAFETY: pub_mu serializes publishers (the jsCtx's async-pending set is one per
 * context); on_ack runs on nats.c's thread against the one batch in flight.
 */
#define _GNU_SOURCE
#include "server/bus_impl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- publishing ---- */

int bus_publish(bus_t *bus, const char *subject, const void *data, size_t len,
                const char *msg_id, bus_ack_t *ack, bus_error_t *err)
{
    if (!bus || !bus__subject_ok(subject) || (len && !data) || len > BUS_MAX_DATA ||
        (msg_id && (!*msg_id || strlen(msg_id) > 128)) || !ack) {
        bus__set_err(err, BUS_E_ARG, "bus publish to stream %s: a subject, data of at most %u bytes, an "
                "ack and a message id of 1..128 bytes (or none) are required", bus ? bus->stream : "?",
                BUS_MAX_DATA);
        return -EINVAL;
    }
    if (!bus__is_ready(bus)) {
        bus__set_err(err, BUS_E_CONNECT, "publish to %s: the stream %s is not set up yet (no server of "
                "%.120s has answered)", subject, bus->stream, bus->servers);
        return -ENOTCONN;
    }
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MsgId = msg_id;
    po.MaxWait = bus->timeout_ms;
    po.ExpectStream = bus->stream;
    jsPubAck *pa = NULL;
    jsErrCode jerr = 0;
    pthread_mutex_lock(&bus->pub_mu);
    INC(bus, published, 1);
    natsStatus s = js_Publish(&pa, bus->js, subject, data, (int)len, &po, &jerr);
    pthread_mutex_unlock(&bus->pub_mu);
    if (s != NATS_OK) {
        INC(bus, failed, 1);
        bus__set_err(err, bus__status_code(s, BUS_E_PUBLISH),
                "publish to %s (stream %s, message id %.64s) not acknowledged: %s (%d)%s", subject,
                bus->stream, msg_id ? msg_id : "none", bus__why(s), (int)jerr,
                s == NATS_TIMEOUT ? ": it may be stored, retry with the same message id" : "");
        return bus__status_errno(s);
    }
    ack->seq = pa->Sequence;
    ack->duplicate = pa->Duplicate;
    bus__note_last(bus, pa->Sequence);
    INC(bus, acked, 1);
    if (pa->Duplicate)
        INC(bus, duplicates, 1);
    jsPubAck_Destroy(pa);
    return 0;
}

/* Item index of a message of batch b, or -1: acks come mostly in order, so start at the
 * cursor. msgs[] slots are atomics: the caller fills later ones while this runs. */
static int find_item(struct batch *b, natsMsg *m, natsMsg *_Atomic *msgs)
{
    int c = atomic_load_explicit(&b->cursor, memory_order_relaxed);
    for (int k = 0; k < b->n; k++) {
        int i = c + k < b->n ? c + k : c + k - b->n;
        if (atomic_load_explicit(&msgs[i], memory_order_acquire) == m) {
            atomic_store_explicit(&msgs[i], NULL, memory_order_relaxed);
            atomic_store_explicit(&b->cursor, i + 1 < b->n ? i + 1 : 0, memory_order_relaxed);
            return i;
        }
    }
    return -1;
}

static void batch_fail(struct batch *b, bus_errcode_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void batch_fail(struct batch *b, bus_errcode_t code, const char *fmt, ...)
{
    pthread_mutex_lock(&b->mu);
    if (b->first.code == BUS_OK) {
        b->first.code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(b->first.msg, sizeof b->first.msg, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&b->mu);
}

/* nats.c's ack thread: record the fate of one asynchronous publish. */
void bus__on_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure)
{
    (void)js;
    bus_t *bus = closure;
    struct batch *b = atomic_load_explicit(&bus->batch, memory_order_acquire);
    if (b) {
        int i = find_item(b, msg, (natsMsg *_Atomic *)b->msgs);
        if (i >= 0 && pa) {
            b->items[i].ack.seq = pa->Sequence;
            b->items[i].ack.duplicate = pa->Duplicate;
            b->items[i].acked = true;
            bus__note_last(bus, pa->Sequence);
            INC(bus, acked, 1);
            if (pa->Duplicate)
                INC(bus, duplicates, 1);
        } else {
            INC(bus, failed, 1);
            natsStatus s = pae ? pae->Err : NATS_ERR;
            batch_fail(b, bus__status_code(s, BUS_E_PUBLISH),
                       "batch publish to %s (stream %s), item %d: not acknowledged: %s%s%s", natsMsg_GetSubject(msg),
                       bus->stream, i, natsStatus_GetText(s), pae && pae->ErrText ? ": " : "",
                       pae && pae->ErrText ? pae->ErrText : "");
        }
        atomic_fetch_add_explicit(&b->done, 1, memory_order_release);
    }
    natsMsg_Destroy(msg);
}

int bus_publish_batch(bus_t *bus, bus_item_t *items, int n, bus_error_t *err)
{
    if (err)
        err->code = BUS_OK, err->msg[0] = 0;
    if (!bus || !items || n < 0 || n > BUS_MAX_BATCH) {
        bus__set_err(err, BUS_E_ARG, "bus batch publish: 0..%d items are required", BUS_MAX_BATCH);
        return -EINVAL;
    }
    for (int i = 0; i < n; i++) {
        bus_item_t *it = &items[i];
        it->acked = false;
        it->ack.seq = 0, it->ack.duplicate = false;
        if (!bus__subject_ok(it->subject) || (it->len && !it->data) || it->len > BUS_MAX_DATA ||
            (it->msg_id && (!*it->msg_id || strlen(it->msg_id) > 128))) {
            bus__set_err(err, BUS_E_ARG, "bus batch publish to stream %s: item %d needs a subject, data of at "
                    "most %u bytes and a message id of 1..128 bytes (or none)", bus->stream, i, BUS_MAX_DATA);
            return -EINVAL;
        }
    }
    if (n == 0)
        return 0;
    if (!bus__is_ready(bus)) {
        bus__set_err(err, BUS_E_CONNECT, "bus batch publish: the stream %s is not set up yet (no server "
                "of %.120s has answered)", bus->stream, bus->servers);
        return -ENOTCONN;
    }
    struct batch b = {.items = items, .n = n};
    b.msgs = calloc((size_t)n, sizeof *b.msgs);
    if (!b.msgs) {
        bus__set_err(err, BUS_E_NATS, "bus batch publish to stream %s: no memory for %d items", bus->stream, n);
        return -ENOMEM;
    }
    pthread_mutex_init(&b.mu, NULL);
    natsMsg *_Atomic *msgs = (natsMsg *_Atomic *)b.msgs;

    pthread_mutex_lock(&bus->pub_mu);
    atomic_store_explicit(&bus->batch, &b, memory_order_release);
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = bus->timeout_ms;
    po.ExpectStream = bus->stream;
    for (int i = 0; i < n; i++) {
        natsMsg *m = NULL;
        natsStatus s = natsMsg_Create(&m, items[i].subject, NULL, items[i].data, (int)items[i].len);
        if (s == NATS_OK) {
            atomic_store_explicit(&msgs[i], m, memory_order_release);
            po.MsgId = items[i].msg_id;
            s = js_PublishMsgAsync(bus->js, &m, &po);
        }
        if (s != NATS_OK) {
            /* not handed over: m is still ours (NULL if the library took it) */
            atomic_store_explicit(&msgs[i], NULL, memory_order_relaxed);
            natsMsg_Destroy(m);
            INC(bus, failed, n - i);
            batch_fail(&b, bus__status_code(s, BUS_E_PUBLISH),
                       "batch publish to %s (stream %s): item %d of %d not sent: %s", items[i].subject,
                       bus->stream, i, n, bus__why(s));
            break;
        }
        INC(bus, published, 1);
        b.sent++;
    }
    jsPubOptions co;
    jsPubOptions_Init(&co);
    co.MaxWait = bus->timeout_ms;
    natsStatus s = js_PublishAsyncComplete(bus->js, &co);
    if (s != NATS_OK) {
        /* take back what is still pending: those are not acked, and no handler will run */
        natsMsgList pending = {0};
        if (js_PublishAsyncGetPendingList(&pending, bus->js) == NATS_OK) {
            for (int k = 0; k < pending.Count; k++) {
                natsMsg *m = pending.Msgs[k];
                if (find_item(&b, m, msgs) >= 0)
                    b.taken_back++;
                INC(bus, failed, 1);
            }
            natsMsgList_Destroy(&pending);
        }
        batch_fail(&b, bus__status_code(s, BUS_E_PUBLISH),
                   "batch publish to stream %s: %d of %d items not acknowledged within %lld ms: %s",
                   bus->stream, b.taken_back, n, (long long)bus->timeout_ms, natsStatus_GetText(s));
    }
    /* handlers already running finish their bookkeeping */
    while (atomic_load_explicit(&b.done, memory_order_acquire) + b.taken_back < b.sent) {
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    atomic_store_explicit(&bus->batch, NULL, memory_order_release);
    pthread_mutex_unlock(&bus->pub_mu);

    int acked = 0;
    for (int i = 0; i < n; i++)
        acked += items[i].acked;
    if (acked < n && err) {
        *err = b.first;
        if (err->code == BUS_OK)
            bus__set_err(err, BUS_E_PUBLISH, "batch publish to stream %s: %d of %d items not acknowledged",
                    bus->stream, n - acked, n);
    }
    pthread_mutex_destroy(&b.mu);
    free(b.msgs);
    return acked;
}

