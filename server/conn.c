/*
 * conn.c — the protocol engine of one connection: cut frames out of the
 * received bytes, answer each (PREDICT with scores, PING with PONG, anything
 * else with an ERROR frame) into the connection's output buffer, in order.
 *
 * THE REQUEST PATH (PREDICT): the payload is decoded in place into the
 * worker's arena (codec_decode_predict), the active model is pinned
 * (server_model_acquire), model_score does one batched store lookup for all
 * ids of the request and sums, and codec_encode_result writes the response
 * straight into c->out.  No heap allocation (the buffers only grow to the
 * largest frame seen), no lock, no syscall: the latency recorded in the
 * histogram runs from "frame complete" to "response encoded".
 *
 * ERRORS: a framing error (bad magic, version, reserved bits, a payload over
 * the configured limit) means the byte stream cannot be trusted: one ERROR
 * frame with request id 0, then the connection closes.  Every other problem
 * gets an ERROR frame with the request's id and the connection goes on.
 * Every ERROR is counted by code.  The functions below return 0 or -errno:
 * -ENOMEM when a buffer cannot grow, -EINVAL when a frame we built does not
 * encode (a bug), and conn_feed's reasons to close (worker.h).
 *
 * BACK-PRESSURE: a connection may hold --max-inflight unsent responses, or
 * --max-unsent-bytes of them (large answers: a peer that does not read
 * costs the scoring of a few, not of --max-inflight).  At the limit the
 * remaining frames wait unanswered in c->in and the driver
 * stops reading the socket (c->paused) until conn_resume, so a peer that
 * pipelines and never reads is slowed down by TCP and costs its own
 * requests only: no limit is shared by a worker's connections, whose
 * unsent answers are that peer's problem.  A response counts until its
 * last byte is sent (conn_sent walks the frames it queued), not until
 * c->out empties.
 *
 * MEMORY: a worker's input buffers together are held under
 * --max-input-bytes and its output buffers under --max-output-bytes.  Past
 * either, the connections holding the most are closed (conn_shed_input,
 * conn_shed): the cost falls on the hogs, not on whoever asks next; a
 * connection that holds the most input itself gets OVERLOADED and closes.  Buffers grow to the largest frame or backlog seen and are
 * given back once the connection has been quiet for a second (conn_trim).
 *
 * A PEER THAT HAS GONE: frames that were received before the peer closed
 * (or half-closed: either ends the conversation, as in Redis and memcached)
 * are not answered once that is known; answers already queued are still
 * sent (a half-closed peer reads them; to a closed one the send fails).  The kernel knows before we read the
 * end of the stream, so while a connection has answers queued and unsent
 * (a pipelining peer, or one that closed), every CONN_PEER_CHECK-th frame
 * asks it (worker_peer_gone: one getsockopt per that many answers, none for
 * a peer that reads as it sends).
 *
 * REAPING: on the drivers' tick, conn_reap_reason names connections to
 * close: a partial frame older than --frame-timeout-ms (a slow sender),
 * output that made no progress for --send-timeout-ms (a peer that does not
 * read), nothing received or awaited for --idle-timeout-ms.  At
 * --max-connections, the longest idle connection makes room for a new one
 * (conn_evictable; sockets.c).
 *
 * THREAD SAFETY: a connection belongs to one worker thread.
 */
#include "worker.h"

#include "guard.h"
#include "online.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

uint64_t worker_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void worker_round_done(worker_t *w)
{
    if (worker_now_ms() - w->now_ms > WORKER_SLOW_ROUND_MS)
        atomic_fetch_add_explicit(&w->m->slow_rounds_total, 1, memory_order_relaxed);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

const char *const server_reap_names[SERVER_REAP_REASONS] = {
    [SERVER_REAP_IDLE] = "idle",
    [SERVER_REAP_FRAME_TIMEOUT] = "frame_timeout",
    [SERVER_REAP_SEND_TIMEOUT] = "send_timeout",
    [SERVER_REAP_OUTPUT_CAP] = "output_cap",
    [SERVER_REAP_INPUT_CAP] = "input_cap",
    [SERVER_REAP_EVICTED] = "evicted",
};

/* The output buffers' bytes held by w changed by delta (capacity, not use:
 * it is what the allocator holds). */
static void out_bytes_add(worker_t *w, ptrdiff_t delta)
{
    w->out_bytes += (size_t)delta;
    atomic_fetch_add_explicit(&w->m->output_bytes, delta, memory_order_relaxed);
}

conn_t *conn_new(worker_t *w, int fd)
{
    conn_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->fd = fd;
    c->active_ms = w->now_ms;
    c->next = w->conns;
    if (w->conns)
        w->conns->prev = c;
    w->conns = c;
    w->nconns++;
    atomic_fetch_add_explicit(&w->m->connections, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->m->connections_accepted_total, 1, memory_order_relaxed);
    return c;
}

void conn_free(worker_t *w, conn_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    w->inflight -= c->queued;
    atomic_fetch_sub_explicit(&w->m->inflight, c->queued, memory_order_relaxed);
    if (c->prev)
        c->prev->next = c->next;
    else
        w->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    w->nconns--;
    atomic_fetch_sub_explicit(&w->m->connections, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->m->connections_closed_total, 1, memory_order_relaxed);
    w->in_bytes -= c->in_cap;
    out_bytes_add(w, -(ptrdiff_t)(c->out_cap + c->out_sending_cap));
    free(c->in);
    free(c->out);
    free(c->out_sending);
    free(c);
}

/* Grows a buffer to hold at least need bytes (doubling); 0 or -ENOMEM. */
static int reserve(uint8_t **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 4096;
    while (n < need)
        n *= 2;
    uint8_t *p = realloc(*buf, n);
    if (!p)
        return -ENOMEM;
    *buf = p;
    *cap = n;
    return 0;
}

/* Room for a frame of up to `bytes` at the end of c->out.  While an io_uring
 * send is in flight the kernel reads c->out, so growing must not free it:
 * the old buffer is kept in out_sending until that send completes. */
static uint8_t *out_room(worker_t *w, conn_t *c, size_t bytes)
{
    if (c->out_off == c->out_len && !c->send_busy)
        c->out_off = c->out_len = c->out_done = 0; /* all sent: start over */
    size_t need = c->out_len + bytes;
    if (need <= c->out_cap)
        return c->out + c->out_len;
    size_t n = c->out_cap ? c->out_cap : 4096;
    while (n < need)
        n *= 2;
    uint8_t *p = malloc(n);
    if (!p)
        return NULL;
    if (c->out_len)
        memcpy(p, c->out, c->out_len);
    if (c->send_busy && !c->out_sending) {
        c->out_sending = c->out; /* the send in flight still reads it */
        c->out_sending_cap = c->out_cap;
    } else {
        free(c->out);
        out_bytes_add(w, -(ptrdiff_t)c->out_cap);
    }
    c->out = p;
    c->out_cap = n;
    out_bytes_add(w, (ptrdiff_t)n);
    return c->out + c->out_len;
}

static void queued_one(worker_t *w, conn_t *c, size_t frame_len)
{
    if (c->out_off == c->out_len)
        c->send_wait_ms = w->now_ms; /* output pending from now on */
    c->out_len += frame_len;
    c->queued++;
    w->inflight++;
    atomic_fetch_add_explicit(&w->m->inflight, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->m->bytes_out_total, frame_len, memory_order_relaxed);
}

void conn_sent(worker_t *w, conn_t *c, size_t n)
{
    c->out_off += n;
    if (n > 0)
        c->active_ms = c->send_wait_ms = w->now_ms;
    /* Release every response whose last byte has gone: walk our own frame
     * headers from out_done (c->out still holds the sent bytes). */
    uint32_t done = 0;
    while (c->queued > done && c->out_off - c->out_done >= CODEC_HEADER_SIZE) {
        codec_header_t h;
        if (codec_parse_header(c->out + c->out_done, CODEC_HEADER_SIZE, &h, NULL) != CODEC_OK)
            break; /* cannot happen: we built it; released when out empties */
        size_t end = c->out_done + CODEC_HEADER_SIZE + (size_t)h.payload_len;
        if (end > c->out_off)
            break;
        c->out_done = end;
        done++;
    }
    if (c->out_off >= c->out_len) { /* everything queued has gone */
        done = c->queued;
        c->out_off = c->out_len = c->out_done = 0;
    }
    c->queued -= done;
    w->inflight -= done;
    atomic_fetch_sub_explicit(&w->m->inflight, done, memory_order_relaxed);
}

void conn_send_ended(worker_t *w, conn_t *c)
{
    if (!c->out_sending)
        return;
    free(c->out_sending);
    out_bytes_add(w, -(ptrdiff_t)c->out_sending_cap);
    c->out_sending = NULL;
    c->out_sending_cap = 0;
}

/* Back-pressure: c may not be answered further until its peer reads. */
static bool over_limit(const worker_t *w, const conn_t *c)
{
    return c->queued >= (uint32_t)w->srv->cfg.max_inflight ||
           c->out_len - c->out_off >= (size_t)w->srv->cfg.max_unsent_bytes;
}

int conn_resume(worker_t *w, conn_t *c)
{
    if (!c->paused || c->closing || over_limit(w, c))
        return 0;
    c->paused = false;
    int rc = conn_feed(w, c, NULL, 0);
    return rc < 0 ? rc : 1;
}

int conn_reap_reason(const worker_t *w, const conn_t *c, uint64_t now_ms)
{
    const server_config_t *cfg = &w->srv->cfg;
    if (c->dead)
        return -1; /* being closed already */
    /* "now > since + timeout": the clocks are read at different moments of
     * a loop round, so now may be a little before since. */
    if (c->partial_since_ms && now_ms > c->partial_since_ms + (uint64_t)cfg->frame_timeout_ms)
        return SERVER_REAP_FRAME_TIMEOUT;
    if (c->out_off < c->out_len) /* output pending: is it moving? */
        return now_ms > c->send_wait_ms + (uint64_t)cfg->send_timeout_ms ? SERVER_REAP_SEND_TIMEOUT
                                                                           : -1;
    if (c->in_len == 0 && !c->closing && now_ms > c->active_ms + (uint64_t)cfg->idle_timeout_ms)
        return SERVER_REAP_IDLE;
    return -1;
}

/* Drops c's buffers: for a connection being closed whose output nobody will
 * read.  The output stays while an io_uring send reads it. */
static void drop_buffers(worker_t *w, conn_t *c)
{
    w->in_bytes -= c->in_cap;
    free(c->in);
    c->in = NULL;
    c->in_len = c->in_cap = 0;
    c->partial_since_ms = 0;
    if (c->send_busy)
        return;
    w->inflight -= c->queued;
    atomic_fetch_sub_explicit(&w->m->inflight, c->queued, memory_order_relaxed);
    c->queued = 0;
    out_bytes_add(w, -(ptrdiff_t)c->out_cap);
    free(c->out);
    c->out = NULL;
    c->out_off = c->out_len = c->out_done = c->out_cap = 0;
}

void conn_reap(worker_t *w, conn_t *c, server_reap_t reason)
{
    c->closing = c->dead = true;
    c->paused = false;
    drop_buffers(w, c);
    atomic_fetch_add_explicit(&w->m->reaped[reason], 1, memory_order_relaxed);
}

void conn_trim(worker_t *w, conn_t *c, uint64_t now_ms)
{
    if (now_ms < c->active_ms + 1000)
        return;
    if (c->in_len == 0 && c->in_cap > 0) {
        w->in_bytes -= c->in_cap;
        free(c->in);
        c->in = NULL;
        c->in_cap = 0;
    }
    if (c->out_off == c->out_len && c->out_cap > 0 && !c->send_busy) {
        out_bytes_add(w, -(ptrdiff_t)c->out_cap);
        free(c->out);
        c->out = NULL;
        c->out_off = c->out_len = c->out_done = c->out_cap = 0;
    }
}

conn_t *conn_evictable(const worker_t *w, uint64_t now_ms)
{
    conn_t *best = NULL;
    for (conn_t *c = w->conns; c; c = c->next) {
        if (c->closing || c->in_len || c->out_off < c->out_len || c->paused)
            continue; /* busy, or on its way out already */
        if (now_ms >= c->active_ms + CONN_EVICT_IDLE_MS &&
            (!best || c->active_ms < best->active_ms))
            best = c;
    }
    return best;
}

static size_t unsent(const conn_t *c)
{
    return c->out_len - c->out_off;
}

/* Past --max-output-bytes: closes the connections with the most unsent
 * output (the peers that do not read) until the rest fit.  A connection
 * being closed whose send is in flight keeps its buffer until the send
 * ends: it counts as given back, or one peer's close would cost others
 * theirs.  A connection with nothing unsent is never closed for it; if the
 * rest still do not fit, their idle buffers are given back at once. */
static void conn_shed(worker_t *w)
{
    size_t cap = (size_t)w->srv->cfg.max_output_bytes, dying = 0;
    for (conn_t *c = w->conns; c; c = c->next)
        if (c->dead)
            dying += c->out_cap + c->out_sending_cap;
    while (w->out_bytes - dying > cap) {
        conn_t *worst = NULL;
        for (conn_t *c = w->conns; c; c = c->next)
            if (!c->dead && unsent(c) && (!worst || unsent(c) > unsent(worst)))
                worst = c;
        if (!worst)
            break;
        conn_reap(w, worst, SERVER_REAP_OUTPUT_CAP);
        dying += worst->out_cap + worst->out_sending_cap; /* what a send still reads */
    }
    for (conn_t *c = w->conns; c && w->out_bytes - dying > cap; c = c->next)
        if (!c->dead && !unsent(c) && !c->send_busy && c->out_cap) {
            out_bytes_add(w, -(ptrdiff_t)c->out_cap);
            free(c->out);
            c->out = NULL;
            c->out_off = c->out_len = c->out_done = c->out_cap = 0;
        }
}

/* Growing c's input buffer to `after` bytes would take the worker past
 * --max-input-bytes: closes the other connections holding more input than
 * c would (peers whose frames wait unanswered because they do not read,
 * or that sent the start of a larger frame), the largest first, until it
 * fits.  Returns false when none holds more: then c is the one refused, so
 * peers holding as much as it asks keep what they have. */
static bool conn_shed_input(worker_t *w, conn_t *c, size_t after)
{
    size_t cap = (size_t)w->srv->cfg.max_input_bytes;
    while (w->in_bytes - c->in_cap + after > cap) {
        conn_t *worst = NULL;
        for (conn_t *o = w->conns; o; o = o->next)
            if (!o->dead && o != c && (!worst || o->in_cap > worst->in_cap))
                worst = o;
        if (!worst || worst->in_cap <= after)
            return false;
        conn_reap(w, worst, SERVER_REAP_INPUT_CAP);
    }
    return true;
}

/* Queues an ERROR frame; counts it.  Returns 0, -ENOMEM (c->out cannot
 * grow) or -EINVAL (the frame does not encode: a bug). */
__attribute__((format(printf, 5, 6))) static int send_error(worker_t *w, conn_t *c, uint64_t id,
                                                            int code, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof msg)
        n = sizeof msg - 1;
    codec_errmsg_t e = {(uint16_t)code, (uint16_t)n, msg};
    size_t need = CODEC_HEADER_SIZE + 4 + (size_t)n, len;
    uint8_t *dst = out_room(w, c, need);
    if (!dst)
        return -ENOMEM;
    if (codec_encode_errmsg(dst, need, id, &e, &len, NULL) != CODEC_OK)
        return -EINVAL;
    queued_one(w, c, len);
    atomic_fetch_add_explicit(&w->m->errors_total, 1, memory_order_relaxed);
    if (code > 0 && code < SERVER_MAX_ERROR_CODES)
        atomic_fetch_add_explicit(&w->m->errors_by_code[code], 1, memory_order_relaxed);
    return 0;
}

static void record_latency(worker_t *w, uint64_t ns)
{
    atomic_fetch_add_explicit(&w->m->latency_bucket[server_lat_bucket(ns)], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->m->latency_ns_sum, ns, memory_order_relaxed);
}

/* UNKNOWN_MODEL naming what this server holds (cold: the models' names). */
static cold int send_unknown_model(worker_t *w, conn_t *c, uint64_t id, const char *name)
{
    char names[SERVER_MODELS_MAX][64], list[512] = "";
    size_t n = server_model_names(w->srv, names, SERVER_MODELS_MAX), off = 0;
    size_t live = 0;
    for (size_t i = 0; i < n && i < SERVER_MODELS_MAX && off < sizeof list - 70; i++) {
        server_model_t *sm = server_model_acquire_named(w->srv, names[i]);
        if (!sm)
            continue; /* no version live */
        server_model_release(sm);
        off += (size_t)snprintf(list + off, sizeof list - off, "%s'%s'", live++ ? ", " : "",
                                names[i]);
    }
    if (live == 0)
        return send_error(w, c, id, CODEC_E_UNKNOWN_MODEL,
                          "unknown model '%s': no model is loaded", name);
    return send_error(w, c, id, CODEC_E_UNKNOWN_MODEL, "unknown model '%s' (this server has %s)",
                      name, list);
}

static int answer_predict(worker_t *w, conn_t *c, const codec_header_t *h, const uint8_t *payload)
{
    codec_predict_t req;
    codec_error_t err;
    codec_arena_reset(&w->arena);
    int rc = codec_decode_predict(payload, h->payload_len, h->flags, &w->arena, &req, &err);
    if (rc != CODEC_OK)
        return send_error(w, c, h->request_id, rc, "%s", err.msg);
    size_t log_id = req.impression_id ? 8 : 0; /* past it, a LOG PREDICT is a plain one */
    gate_sample_offer(w->sample, payload + log_id, h->payload_len - log_id, &req);

    server_model_t *sm = server_model_acquire_named(w->srv, req.name);
    if (!sm)
        return send_unknown_model(w, c, h->request_id, req.name);
    const store_meta_t *meta = model_meta(sm->model);
    if (req.version != 0 && req.version != meta->version) {
        /* Pinned to a version kept for rollback (cold: the registry's lock). */
        server_model_t *kept = server_model_acquire_kept(w->srv, req.name, req.version);
        if (!kept) {
            rc = send_error(w, c, h->request_id, CODEC_E_UNKNOWN_VERSION,
                            "model '%s' version %llu is not loaded (active: %llu; kept "
                            "versions: GET /v1/models/%s/versions)",
                            req.name, (unsigned long long)req.version,
                            (unsigned long long)meta->version, req.name);
            goto out;
        }
        server_model_release(sm);
        sm = kept;
        meta = model_meta(sm->model);
    }
    for (uint32_t i = 0; i < req.items; i++)
        w->blocks[i] = (codec_block_t){req.item[i].ids, req.item[i].values, req.item[i].n};
    codec_block_t shared = {req.shared.ids, req.shared.values, req.shared.n};
    /* A version this worker has not scored with yet: size the scratch for it
     * (rows of its floats per key, its kind's work space) to the decoder's
     * bound, once, before scoring; growing is rare (a swap to a larger kind),
     * and on -ENOMEM the next request of that version tries again. */
    if (unlikely(sm->gen != w->scratch_gen) &&
        model_scratch_fit(w->scratch, sm->model, CODEC_MAX_REQUEST_FEATURES) >= 0)
        w->scratch_gen = sm->gen;
    rc = model_score(sm->model, &shared, w->blocks, req.items, w->scores, w->scratch);
    if (rc != 0) {
        guard_account(w->m, sm->gen, NULL, 0, true); /* failed by scoring (guard.h) */
        rc = send_error(w, c, h->request_id, CODEC_E_TOO_MANY_FEATURES,
                        "request has more features than this worker's scratch holds "
                        "(or the scratch could not grow for this model)");
        goto out;
    }
    codec_result_t res = {meta->version, req.items, w->scores};
    size_t need = CODEC_HEADER_SIZE + 8 + CODEC_MAX_VARINT + 4 * (size_t)req.items, len;
    uint8_t *dst = out_room(w, c, need);
    if (!dst || codec_encode_result(dst, need, h->request_id, &res, &len, &err) != CODEC_OK) {
        guard_account(w->m, sm->gen, NULL, 0, true);
        rc = dst ? -EINVAL : -ENOMEM;
        goto out;
    }
    queued_one(w, c, len);
    if (req.impression_id) /* flagged LOG: kept for its FEEDBACK (online.h) */
        online_log_impression(w->srv, &req, w->blocks, meta);
    guard_account(w->m, sm->gen, w->scores, req.items, false); /* non-finite: failed */
    atomic_fetch_add_explicit(&w->m->predict_total, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->m->items_total, req.items, memory_order_relaxed);
    rc = 0;
out:
    server_model_release(sm);
    return rc;
}

/* The ERROR frame for an online_submit / online_feedback refusal (online.h)
 * of a request for model name. */
static int send_online_refusal(worker_t *w, conn_t *c, uint64_t id, int online_rc,
                               const char *name, const char *what, const char *why)
{
    switch (online_rc) {
    case ONLINE_NO_MODEL:
        return send_unknown_model(w, c, id, name);
    case ONLINE_OFF:
    case ONLINE_KIND:
        return send_error(w, c, id, CODEC_E_UNKNOWN_TYPE, "%s: %s", what, why);
    case ONLINE_BAD_VALUE:
        return send_error(w, c, id, CODEC_E_BAD_VALUE, "%s", why);
    case ONLINE_TOO_BIG: /* never taken: not OVERLOADED, which says retry */
        return send_error(w, c, id, CODEC_E_TOO_MANY_ITEMS, "%s", why);
    default: /* FULL, RATE, NOMEM, LOG (the sample log failed: not acknowledged) */
        return send_error(w, c, id, CODEC_E_OVERLOADED, "%s", why);
    }
}

/* TRAIN: checked as the wire says, then queued for the model's trainer
 * (online.h) and acknowledged; refusals say why. */
static int answer_train(worker_t *w, conn_t *c, const codec_header_t *h, const uint8_t *payload)
{
    if (!w->srv->cfg.online)
        return send_error(w, c, h->request_id, CODEC_E_UNKNOWN_TYPE,
                          "TRAIN: online learning is not enabled on this server (--online)");
    codec_train_t req;
    codec_error_t err;
    codec_arena_reset(&w->arena);
    int rc = codec_decode_train(payload, h->payload_len, h->flags, &w->arena, &req, &err);
    if (rc != CODEC_OK)
        return send_error(w, c, h->request_id, rc, "%s", err.msg);
    char why[256];
    rc = online_submit(w->srv, &req, h->flags, payload, h->payload_len, why, sizeof why);
    if (rc != ONLINE_QUEUED)
        return send_online_refusal(w, c, h->request_id, rc, req.name, "TRAIN", why);
    codec_train_ack_t ack = {req.samples};
    size_t need = CODEC_HEADER_SIZE + CODEC_MAX_VARINT, len;
    uint8_t *dst = out_room(w, c, need);
    if (!dst)
        return -ENOMEM;
    if (codec_encode_train_ack(dst, need, h->request_id, &ack, &len, NULL) != CODEC_OK)
        return -EINVAL;
    queued_one(w, c, len);
    return 0;
}

/* FEEDBACK: each event joined to its logged impression and queued for the
 * model's trainer (online.h); FEEDBACK_ACK says which were refused and why. */
static int answer_feedback(worker_t *w, conn_t *c, const codec_header_t *h,
                           const uint8_t *payload)
{
    static _Thread_local codec_refused_t refusals[CODEC_MAX_ITEMS];
    if (!w->srv->cfg.online)
        return send_error(w, c, h->request_id, CODEC_E_UNKNOWN_TYPE,
                          "FEEDBACK: online learning is not enabled on this server (--online)");
    codec_feedback_t req;
    codec_error_t err;
    codec_arena_reset(&w->arena);
    int rc = codec_decode_feedback(payload, h->payload_len, &w->arena, &req, &err);
    if (rc != CODEC_OK)
        return send_error(w, c, h->request_id, rc, "%s", err.msg);
    char why[320];
    codec_feedback_ack_t ack;
    rc = online_feedback(w->srv, &req, &ack, refusals, why, sizeof why);
    if (rc != ONLINE_QUEUED)
        return send_online_refusal(w, c, h->request_id, rc, req.name, "FEEDBACK", why);
    size_t need = CODEC_HEADER_SIZE + 2 * CODEC_MAX_VARINT +
                  (size_t)ack.refused * (CODEC_MAX_VARINT + 1), len;
    uint8_t *dst = out_room(w, c, need);
    if (!dst)
        return -ENOMEM;
    if (codec_encode_feedback_ack(dst, need, h->request_id, &ack, &len, NULL) != CODEC_OK)
        return -EINVAL;
    queued_one(w, c, len);
    return 0;
}

static int answer_ping(worker_t *w, conn_t *c, const codec_header_t *h, const uint8_t *payload)
{
    codec_ping_t p;
    codec_error_t err;
    int rc = codec_decode_ping(payload, h->payload_len, &p, &err);
    if (rc != CODEC_OK)
        return send_error(w, c, h->request_id, rc, "%s", err.msg);
    size_t need = CODEC_HEADER_SIZE + p.len, len;
    uint8_t *dst = out_room(w, c, need);
    if (!dst)
        return -ENOMEM;
    if (codec_encode_ping(dst, need, CODEC_PONG, h->request_id, &p, &len, NULL) != CODEC_OK)
        return -EINVAL;
    queued_one(w, c, len);
    return 0;
}

/* Answers one complete frame: a response or an ERROR frame queued on c->out.
 * Returns 0, or -ENOMEM / -EINVAL from the queueing (send_error). */
static int answer(worker_t *w, conn_t *c, const codec_header_t *h, const uint8_t *payload)
{
    uint64_t t0 = now_ns();
    atomic_fetch_add_explicit(&w->m->requests_total, 1, memory_order_relaxed);
    int rc;
    if (atomic_load_explicit(&w->srv->stopping, memory_order_relaxed) && h->type != CODEC_PING) {
        rc = send_error(w, c, h->request_id, CODEC_E_SHUTTING_DOWN, "the server is shutting down");
    } else if (h->type == CODEC_PREDICT) {
        rc = answer_predict(w, c, h, payload);
    } else if (h->type == CODEC_PING) {
        rc = answer_ping(w, c, h, payload);
    } else if (h->type == CODEC_TRAIN) {
        rc = answer_train(w, c, h, payload);
    } else if (h->type == CODEC_FEEDBACK) {
        rc = answer_feedback(w, c, h, payload);
    } else {
        rc = send_error(w, c, h->request_id, CODEC_E_UNKNOWN_TYPE,
                        "message type %u is not a request this server accepts", h->type);
    }
    record_latency(w, now_ns() - t0);
    return rc;
}

int conn_feed(worker_t *w, conn_t *c, const uint8_t *data, size_t len)
{
    if (c->closing)
        return -EPIPE; /* closing already: ignore the rest */
    atomic_fetch_add_explicit(&w->m->bytes_in_total, len, memory_order_relaxed);
    if (len)
        c->active_ms = w->now_ms;
    /* Input buffers grow to the largest frame a connection sends; the sum
     * over a worker's connections is capped, or many clients each sending
     * the start of a large frame could exhaust memory. */
    size_t before = c->in_cap;
    if (c->in_len + len > before) {
        size_t after = before ? before : 4096;
        while (after < c->in_len + len)
            after *= 2;
        if (w->in_bytes - before + after > (size_t)w->srv->cfg.max_input_bytes &&
            !conn_shed_input(w, c, after)) {
            atomic_fetch_add_explicit(&w->m->overloaded_total, 1, memory_order_relaxed);
            send_error(w, c, 0, CODEC_E_OVERLOADED,
                       "this worker holds %zu bytes of unanswered input (limit %d); closing",
                       w->in_bytes, w->srv->cfg.max_input_bytes);
            c->closing = true;
            return -ENOBUFS;
        }
    }
    int rc = reserve(&c->in, &c->in_cap, c->in_len + len);
    if (rc != 0) { /* the bytes are lost, and with them the framing */
        c->closing = true;
        return rc;
    }
    w->in_bytes += c->in_cap - before;
    if (len)
        memcpy(c->in + c->in_len, data, len);
    c->in_len += len;

    size_t pos = 0;
    while (c->in_len - pos >= CODEC_HEADER_SIZE) {
        if (over_limit(w, c)) { /* back-pressure: the rest waits for the peer to read */
            if (!c->paused)
                atomic_fetch_add_explicit(&w->m->backpressure_total, 1, memory_order_relaxed);
            c->paused = true;
            break;
        }
        if (unlikely(c->queued && c->queued % CONN_PEER_CHECK == 0) && worker_peer_gone(c->fd)) {
            c->closing = true; /* the rest would be answered for nobody; what is queued still
                                * goes out (a half-closed peer reads it) */
            rc = -EPIPE;
            break;
        }
        codec_header_t h;
        codec_error_t err;
        int e = codec_parse_header(c->in + pos, c->in_len - pos, &h, &err);
        if (e == CODEC_OK && h.payload_len > (uint32_t)w->srv->cfg.max_frame_bytes) {
            e = CODEC_E_FRAME_TOO_LARGE;
            snprintf(err.msg, sizeof err.msg, "payload_len %u is over this server's limit of %d",
                     h.payload_len, w->srv->cfg.max_frame_bytes);
        }
        if (e != CODEC_OK) { /* framing lost */
            send_error(w, c, 0, e, "%s; closing the connection", err.msg);
            c->closing = true;
            rc = -EPROTO;
            break;
        }
        size_t frame = CODEC_HEADER_SIZE + (size_t)h.payload_len;
        if (c->in_len - pos < frame)
            break;
        rc = answer(w, c, &h, c->in + pos + CODEC_HEADER_SIZE);
        if (rc != 0) {
            c->closing = true;
            break;
        }
        pos += frame;
    }
    /* keep the unparsed tail at the front */
    if (pos > 0) {
        memmove(c->in, c->in + pos, c->in_len - pos);
        c->in_len -= pos;
    }
    if (c->in_len == 0 || c->paused) /* paused: we are the ones not reading */
        c->partial_since_ms = 0;
    else if (pos > 0 || c->partial_since_ms == 0)
        c->partial_since_ms = w->now_ms ? w->now_ms : 1; /* 0 means none */
    if (w->out_bytes > (size_t)w->srv->cfg.max_output_bytes) {
        conn_shed(w);
        if (c->dead && rc == 0)
            rc = -ENOBUFS; /* c was the worst */
    }
    return rc;
}
