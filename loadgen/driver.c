/*
 * driver.c — one tlgen thread: its share of the arrival schedule sent over
 * its connections, open loop, with responses matched by request id.
 *
 * THE LOOP (one epoll instance per thread, non-blocking sockets):
 *
 *   1. every request whose due time has come is issued: the next pool frame
 *      is copied into the next live connection's output buffer (round
 *      robin) and its request id patched in; its slot records due and send
 *      times.  Sending never waits for responses: a connection may carry
 *      any number of requests in flight (pipelining), and when the kernel's
 *      send buffer is full the bytes wait in the connection's buffer.
 *   2. dirty connections are flushed (write until EAGAIN, then EPOLLOUT).
 *   3. requests older than timeout_ms (from their due time) are expired.
 *   4. epoll_pwait2 sleeps until the next due time (ns precision; timer
 *      slack is set to 1 us), a socket event, or 10 ms.
 *   5. readable sockets are drained; each read is timestamped once and its
 *      complete frames are decoded (codec_decode_frame) and matched.
 *
 * REQUEST IDS AND SLOTS: id = (thread + 1) << 48 | seq, seq counting this
 * thread's requests.  Slots form a power-of-two ring indexed by seq, sized
 * for every request that can be in flight within the timeout; `tail` is the
 * oldest seq not yet resolved.  Due times grow with seq, so expiring
 * timeouts is a walk from the tail that stops at the first young request.
 *
 *   slots:  [ tail ........ in flight / resolved ........ next_seq ) free
 *
 * A response to a resolved slot (it timed out first) or with a foreign id is
 * counted as late and otherwise ignored.
 *
 * SENDER LAG: each request's lag (actual send - due) goes into a histogram;
 * the report marks the run invalid when the sender fell behind.  At most
 * BURST requests are issued before the loop services sockets again, so a
 * sender that cannot keep up still reads responses (and shows its lag);
 * one still behind GIVE_UP_NS after the end stops and counts the rest as
 * skipped, so a hopeless run ends on time.
 *
 * BACKLOG: a connection holds at most MAX_BACKLOG unsent bytes; a request
 * that would go over it is not sent and counted as backlogged (the server
 * stopped reading; without the bound a stalled server at a high rate would
 * make tlgen buffer gigabytes).
 *
 * THREAD SAFETY: everything here belongs to the calling thread; the run
 * description and the workload are shared read-only.
 */
#define _GNU_SOURCE
#include "tlgen.h"

#include "codec/codec.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "sched.h"

#define BURST 1024                /* requests issued between socket services */
#define READ_CHUNK (64u << 10)    /* free bytes ensured before each read */
#define RECONNECT_NS 100000000ull /* 100 ms between reconnect attempts */
#define MAX_WAIT_NS 10000000ull   /* wake at least every 10 ms (timeouts) */
#define SEQ_BITS 48
#define MAX_BACKLOG (32u << 20)  /* unsent bytes per connection before refusing more */
#define GIVE_UP_NS 1000000000ull /* past end_ns, a sender this far behind stops sending */

typedef struct conn {
    int fd;          /* -1 while down */
    bool connecting; /* non-blocking connect in progress */
    bool want_out;   /* EPOLLOUT registered */
    bool dirty;      /* on the thread's dirty list */
    uint8_t *in;     /* received bytes not yet cut into frames */
    size_t in_len, in_cap;
    uint8_t *out; /* bytes to send: out[out_off..out_len) */
    size_t out_off, out_len, out_cap;
    uint64_t last_rx_ns;  /* when the previous response arrived (closed-loop bound) */
    uint64_t retry_ns;    /* while down: next connect attempt */
    uint32_t outstanding; /* requests in flight on this connection */
} conn_t;

typedef struct slot {
    uint64_t seq;     /* the request's seq (checks a response against the ring) */
    uint64_t due_ns;  /* intended send time */
    uint64_t sent_ns; /* actual send time (handed to the connection) */
    uint32_t conn;    /* connection index */
    bool live;        /* sent, no response yet */
    bool counted;     /* due inside the measured window */
} slot_t;

typedef struct thr {
    const tlgen_run_t *run;
    tlgen_stats_t *st;
    unsigned id; /* thread index */
    int ep;      /* epoll fd */
    conn_t *conns;
    unsigned nconns;
    unsigned rr;     /* next connection to try */
    unsigned *dirty; /* connections with bytes to flush */
    unsigned ndirty;
    slot_t *slots;
    uint64_t mask;     /* slots - 1 */
    uint64_t tail;     /* oldest unresolved seq */
    uint64_t next_seq; /* seq of the next request */
    uint64_t inflight; /* live slots */
    uint64_t timeout_ns;
    codec_arena_t arena; /* for decoding responses */
    sched_t sched;
} thr_t;

/* Per-interval accounting (--interval-ms) of a counted request due at `due`. */
#define IV_SCHED(t, due) \
    ((t)->st->iv ? ivals_scheduled((t)->st->iv, (due) - (t)->run->measure_ns) : (void)0)
#define IV_ERR(t, due) \
    ((t)->st->iv ? ivals_error((t)->st->iv, (due) - (t)->run->measure_ns) : (void)0)

uint64_t tlgen_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n);
    if (!q) {
        fputs("tlgen: out of memory\n", stderr);
        abort();
    }
    return q;
}

/* Room for `need` more bytes at buf[len]. */
static void reserve(uint8_t **buf, size_t *cap, size_t len, size_t need)
{
    if (len + need <= *cap)
        return;
    size_t n = *cap ? *cap : 16384;
    while (n < len + need)
        n *= 2;
    *buf = xrealloc(*buf, n);
    *cap = n;
}

static void set_events(thr_t *t, unsigned i)
{
    conn_t *c = &t->conns[i];
    struct epoll_event ev = {.events = EPOLLIN | (c->want_out || c->connecting ? EPOLLOUT : 0),
                             .data.u32 = i};
    epoll_ctl(t->ep, EPOLL_CTL_MOD, c->fd, &ev);
}

/* Resolves slot sl without a response. */
static void resolve(thr_t *t, slot_t *sl)
{
    sl->live = false;
    t->conns[sl->conn].outstanding--;
    t->inflight--;
}

__attribute__((cold)) static void conn_down(thr_t *t, unsigned i, uint64_t now)
{
    conn_t *c = &t->conns[i];
    if (c->fd < 0)
        return;
    close(c->fd); /* also leaves the epoll set */
    c->fd = -1;
    c->connecting = c->want_out = false;
    c->in_len = c->out_off = c->out_len = 0;
    c->retry_ns = now + RECONNECT_NS;
    t->st->disconnects++;
    for (uint64_t s = t->tail; s < t->next_seq && c->outstanding > 0; s++) {
        slot_t *sl = &t->slots[s & t->mask];
        if (sl->live && sl->conn == i) {
            if (sl->counted) {
                t->st->conn_errors++;
                IV_ERR(t, sl->due_ns);
            }
            resolve(t, sl);
        }
    }
}

__attribute__((cold)) static void conn_try_connect(thr_t *t, unsigned i, uint64_t now)
{
    conn_t *c = &t->conns[i];
    const tlgen_run_t *run = t->run;
    int fd = socket(run->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        c->retry_ns = now + RECONNECT_NS;
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (const struct sockaddr *)&run->addr, run->addrlen) != 0 &&
        errno != EINPROGRESS) {
        close(fd);
        c->retry_ns = now + RECONNECT_NS;
        return;
    }
    c->fd = fd;
    c->connecting = true;
    c->last_rx_ns = 0;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.u32 = i};
    if (epoll_ctl(t->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
        close(fd);
        c->fd = -1;
        c->connecting = false;
        c->retry_ns = now + RECONNECT_NS;
    }
}

/* Writes what connection i has queued.  Returns false when it went down. */
static bool conn_flush(thr_t *t, unsigned i)
{
    conn_t *c = &t->conns[i];
    if (c->fd < 0 || c->connecting)
        return true;
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (n > 0) {
            c->out_off += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!c->want_out) {
                c->want_out = true;
                set_events(t, i);
            }
            return true;
        } else {
            conn_down(t, i, tlgen_now_ns());
            return false;
        }
    }
    c->out_off = c->out_len = 0;
    if (c->want_out) {
        c->want_out = false;
        set_events(t, i);
    }
    return true;
}

/* Issues the request due at `due` (now is the send time). */
static void issue(thr_t *t, uint64_t due, uint64_t now)
{
    tlgen_stats_t *st = t->st;
    bool counted = due >= t->run->measure_ns;
    if (counted) {
        st->scheduled++;
        IV_SCHED(t, due);
    }
    unsigned i = 0, k;
    for (k = 0; k < t->nconns; k++) {
        i = (t->rr + k) % t->nconns;
        if (t->conns[i].fd >= 0 && !t->conns[i].connecting)
            break;
    }
    if (k == t->nconns) { /* nothing to send on */
        if (counted) {
            st->unsent++;
            IV_ERR(t, due);
        }
        return;
    }
    t->rr = i + 1;
    conn_t *c = &t->conns[i];
    const workload_t *wl = t->run->wl;
    uint64_t seq = t->next_seq;
    unsigned p = (unsigned)((seq + t->id) % wl->n);
    size_t len = wl->lens[p];
    if (c->out_len - c->out_off + len > MAX_BACKLOG) { /* the server is not reading */
        if (counted) {
            st->backlogged++;
            IV_ERR(t, due);
        }
        return;
    }
    while (seq - t->tail > t->mask) { /* ring full: the oldest has waited > timeout anyway */
        slot_t *old = &t->slots[t->tail & t->mask];
        if (old->live) {
            if (old->counted) { /* a timeout is in the tail: at least this late */
                st->timeouts++;
                hist_record(&st->corrected, now - old->due_ns);
                IV_ERR(t, old->due_ns);
            }
            resolve(t, old);
        }
        t->tail++;
    }
    t->next_seq++;
    slot_t *sl = &t->slots[seq & t->mask];
    *sl = (slot_t){
        .seq = seq, .due_ns = due, .sent_ns = now, .conn = i, .live = true, .counted = counted};

    if (c->out_off > 0 && c->out_len + len > c->out_cap) { /* reuse the sent front first */
        memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
        c->out_len -= c->out_off;
        c->out_off = 0;
    }
    reserve(&c->out, &c->out_cap, c->out_len, len);
    uint8_t *dst = c->out + c->out_len;
    memcpy(dst, wl->frames[p], len);
    workload_patch_id(dst, ((uint64_t)(t->id + 1) << SEQ_BITS) | seq);
    c->out_len += len;
    c->outstanding++;
    t->inflight++;
    if (!c->dirty) {
        c->dirty = true;
        t->dirty[t->ndirty++] = i;
    }
    if (counted) {
        st->sent++;
        hist_record(&st->lag, now > due ? now - due : 0);
    }
}

/* Accounts one complete response frame (decode result rc) read at rx. */
static void on_frame(thr_t *t, unsigned ci, const codec_header_t *h, int rc, const codec_msg_t *m,
                     uint64_t rx)
{
    tlgen_stats_t *st = t->st;
    conn_t *c = &t->conns[ci];
    uint64_t prev_rx = c->last_rx_ns;
    c->last_rx_ns = rx;
    if (h->request_id == 0 && h->type == CODEC_ERROR) { /* framing error: the server closes */
        st->frame_errors++;
        return;
    }
    uint64_t seq = h->request_id & ((1ull << SEQ_BITS) - 1);
    slot_t *sl = &t->slots[seq & t->mask];
    if ((h->request_id >> SEQ_BITS) != t->id + 1 || seq >= t->next_seq || sl->seq != seq ||
        !sl->live) {
        st->late++;
        return;
    }
    resolve(t, sl);
    if (!sl->counted)
        return;
    if (rc == CODEC_OK && h->type == CODEC_PREDICT_RESULT &&
        m->u.result.items == t->run->wl->items) {
        st->ok++;
        uint64_t start = sl->sent_ns > prev_rx ? sl->sent_ns : prev_rx;
        hist_record(&st->corrected, rx - sl->due_ns);
        hist_record(&st->from_send, rx - sl->sent_ns);
        hist_record(&st->uncorrected, rx - start);
        if (st->iv)
            ivals_ok(st->iv, sl->due_ns - t->run->measure_ns, rx - sl->due_ns, m->u.result.version,
                     rx);
        return;
    }
    IV_ERR(t, sl->due_ns);
    if (rc == CODEC_OK && h->type == CODEC_ERROR) {
        uint16_t code = m->u.error.code;
        if (code < TLGEN_NCODES)
            st->err_code[code]++;
        else
            st->err_other++;
    } else {
        st->bad_responses++;
    }
}

/* Cuts and accounts the complete frames in connection i's input.  Returns
 * false when the stream is broken (the connection was taken down). */
static bool conn_parse(thr_t *t, unsigned i, uint64_t rx)
{
    conn_t *c = &t->conns[i];
    size_t pos = 0;
    bool ok = true;
    while (c->in_len - pos >= CODEC_HEADER_SIZE) {
        codec_header_t h;
        if (codec_parse_header(c->in + pos, c->in_len - pos, &h, NULL) != CODEC_OK) {
            t->st->bad_responses++;
            ok = false;
            break;
        }
        size_t frame = CODEC_HEADER_SIZE + (size_t)h.payload_len;
        if (c->in_len - pos < frame) {
            reserve(&c->in, &c->in_cap, c->in_len, frame - (c->in_len - pos));
            break;
        }
        size_t need = codec_arena_bound(h.payload_len);
        if (need > t->arena.cap) {
            free(t->arena.base);
            t->arena.base = aligned_alloc(8, (need + 7) & ~(size_t)7);
            if (!t->arena.base) {
                fputs("tlgen: out of memory\n", stderr);
                abort();
            }
            t->arena.cap = (need + 7) & ~(size_t)7;
        }
        codec_arena_reset(&t->arena);
        codec_msg_t m;
        int rc = codec_decode_frame(c->in + pos, frame, &t->arena, &m, NULL);
        on_frame(t, i, &h, rc, &m, rx);
        pos += frame;
    }
    if (!ok) {
        conn_down(t, i, rx);
        return false;
    }
    if (pos > 0) {
        memmove(c->in, c->in + pos, c->in_len - pos);
        c->in_len -= pos;
    }
    return true;
}

static void conn_read(thr_t *t, unsigned i)
{
    conn_t *c = &t->conns[i];
    for (;;) {
        reserve(&c->in, &c->in_cap, c->in_len, READ_CHUNK);
        ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
        if (n > 0) {
            c->in_len += (size_t)n;
            if (!conn_parse(t, i, tlgen_now_ns()))
                return;
            if ((size_t)n < READ_CHUNK)
                return; /* likely drained; epoll (level-triggered) says if not */
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;
        } else { /* EOF or error */
            conn_down(t, i, tlgen_now_ns());
            return;
        }
    }
}

static void conn_connected(thr_t *t, unsigned i, uint64_t now)
{
    conn_t *c = &t->conns[i];
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
        c->connecting = false;
        close(c->fd);
        c->fd = -1;
        c->retry_ns = now + RECONNECT_NS;
        return;
    }
    c->connecting = false;
    set_events(t, i);
}

/* Resolves requests that waited more than the timeout since their due time
 * (all of them when force). */
static void expire(thr_t *t, uint64_t now, bool force)
{
    while (t->tail < t->next_seq) {
        slot_t *sl = &t->slots[t->tail & t->mask];
        if (sl->live) {
            if (!force && now - sl->due_ns < t->timeout_ns)
                break;
            if (sl->counted) { /* a timeout is in the tail: at least this late */
                t->st->timeouts++;
                hist_record(&t->st->corrected, now - sl->due_ns);
                IV_ERR(t, sl->due_ns);
            }
            resolve(t, sl);
        }
        t->tail++;
    }
}

int driver_run(tlgen_run_t *run, unsigned thread, const int *fds, unsigned nconns,
               tlgen_stats_t *st)
{
    const tlgen_opts_t *o = run->o;
    thr_t t = {.run = run,
               .st = st,
               .id = thread,
               .nconns = nconns,
               .timeout_ns = (uint64_t)o->timeout_ms * 1000000ull};
    int rc = 0;
    prctl(PR_SET_TIMERSLACK, 1000UL); /* wake within 1 us of a due time, not 50 us */

    /* slots: every request that can be in flight within the timeout, with room */
    double per_thread = o->rate / o->threads;
    double want = per_thread * ((double)o->timeout_ms / 1000.0 + 1.0) * 1.25 + 1024.0;
    uint64_t nslots = 1024;
    while ((double)nslots < want && nslots < (1ull << 23))
        nslots <<= 1;
    t.mask = nslots - 1;
    t.slots = calloc(nslots, sizeof *t.slots);
    t.conns = calloc(nconns, sizeof *t.conns);
    t.dirty = calloc(nconns, sizeof *t.dirty);
    t.ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event evs[256];
    if (!t.slots || !t.conns || !t.dirty || t.ep < 0) {
        rc = t.ep < 0 ? -errno : -ENOMEM;
        for (unsigned i = 0; i < nconns; i++)
            close(fds[i]);
        goto out;
    }
    for (unsigned i = 0; i < nconns; i++) {
        t.conns[i].fd = fds[i];
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = i};
        if (epoll_ctl(t.ep, EPOLL_CTL_ADD, fds[i], &ev) != 0) {
            close(fds[i]);
            t.conns[i].fd = -1;
            t.conns[i].retry_ns = run->start_ns;
        }
    }
    sched_init(&t.sched, o->rate, thread, o->threads, run->start_ns, o->poisson,
               o->wl.seed ^ 0x5c4edull);

    uint64_t drain_end = run->end_ns + t.timeout_ns;
    bool sending = true;
    for (;;) {
        uint64_t now = tlgen_now_ns();
        if (sending && atomic_load_explicit(&tlgen_interrupted, memory_order_relaxed)) {
            uint64_t cut = atomic_load(&run->cut_ns);
            while (cut < now && !atomic_compare_exchange_weak(&run->cut_ns, &cut, now))
                ;
            sending = false; /* what is out drains; nothing due later is counted */
        }
        if (sending && now > run->end_ns + GIVE_UP_NS) { /* hopelessly behind: stop, say so */
            for (uint64_t due; (due = sched_next(&t.sched)) < run->end_ns;)
                if (due >= run->measure_ns) {
                    st->scheduled++;
                    st->skipped++;
                    IV_SCHED(&t, due);
                    IV_ERR(&t, due);
                }
            sending = false;
        }
        if (sending) {
            for (int b = 0; b < BURST && sched_peek(&t.sched) <= now; b++) {
                uint64_t due = sched_next(&t.sched);
                if (due >= run->end_ns) {
                    sending = false;
                    break;
                }
                issue(&t, due, now);
            }
            if (sched_peek(&t.sched) >= run->end_ns)
                sending = false;
        }
        for (unsigned k = 0; k < t.ndirty; k++) {
            t.conns[t.dirty[k]].dirty = false;
            conn_flush(&t, t.dirty[k]);
        }
        t.ndirty = 0;
        expire(&t, now, false);
        if (!sending && (t.inflight == 0 || now >= drain_end))
            break;

        uint64_t wake = now + MAX_WAIT_NS;
        if (sending && sched_peek(&t.sched) < wake)
            wake = sched_peek(&t.sched);
        for (unsigned i = 0; i < nconns; i++) {
            conn_t *c = &t.conns[i];
            if (c->fd < 0) {
                if (c->retry_ns <= now)
                    conn_try_connect(&t, i, now);
                else if (c->retry_ns < wake)
                    wake = c->retry_ns;
            }
        }
        uint64_t wait = wake > now ? wake - now : 0;
        struct timespec ts = {.tv_sec = (time_t)(wait / 1000000000ull),
                              .tv_nsec = (long)(wait % 1000000000ull)};
        int n = epoll_pwait2(t.ep, evs, sizeof evs / sizeof evs[0], &ts, NULL);
        if (n < 0 && errno != EINTR) {
            rc = -errno;
            break;
        }
        for (int e = 0; e < n; e++) {
            unsigned i = evs[e].data.u32;
            conn_t *c = &t.conns[i];
            if (c->fd < 0)
                continue;
            if (c->connecting) {
                if (evs[e].events & (EPOLLOUT | EPOLLERR | EPOLLHUP))
                    conn_connected(&t, i, tlgen_now_ns());
                if (c->fd < 0 || c->connecting || !(c->out_len > c->out_off))
                    continue;
            }
            if (evs[e].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
                conn_read(&t, i);
            if (c->fd >= 0 && (evs[e].events & EPOLLOUT))
                conn_flush(&t, i);
        }
    }
    expire(&t, tlgen_now_ns(), true); /* what is still out has timed out */
out:
    for (unsigned i = 0; t.conns && i < nconns; i++) {
        if (t.conns[i].fd >= 0)
            close(t.conns[i].fd);
        free(t.conns[i].in);
        free(t.conns[i].out);
    }
    if (t.ep >= 0)
        close(t.ep);
    free(t.conns);
    free(t.dirty);
    free(t.slots);
    free(t.arena.base);
    return rc;
}
