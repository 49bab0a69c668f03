/*
 * worker_uring.c — the io_uring data-plane driver, one ring per worker.
 *
 *   listen socket (SO_REUSEPORT, one per worker) --multishot accept--> conn
 *   conn --multishot recv into a provided buffer ring--> conn_feed (conn.c)
 *   conn->out --send--> peer, one send in flight per connection
 *   a 100 ms timeout op: stop flag, reaping (conn.c), trimming, drain
 *   back-pressure (conn.c paused the conn): cancel its recv, re-arm it once
 *   a send brings its backlog under its share
 *
 * Completions are drained in batches (io_uring_for_each_cqe, then one
 * io_uring_cq_advance) and the SQEs they produce go out with the next
 * io_uring_submit_and_wait: one syscall per loop, not per request.
 *
 * user_data = conn pointer | op (pointers are 8-aligned, the op takes the
 * low 2 bits; accept and the timer carry a NULL pointer, a recv's cancel
 * carries OP_TIMER with its conn).  A connection is
 * freed only when no operation on it is in flight: closing it shuts the
 * socket down, which ends its multishot recv, and waits for its send.  Past
 * the drain deadline (SIGTERM + 5 s) every connection is shut down at once:
 * a send to a peer that does not read then fails instead of waiting for ever.
 *
 * Provided buffers: BUFS buffers of BUF_BYTES in buffer group 0; each recv
 * completion names its buffer, conn_feed copies the bytes out (frames are
 * assembled per connection) and the buffer goes straight back to the ring.
 *
 * THREAD SAFETY: everything here belongs to the worker thread.
 */
#include "worker.h"

#include <errno.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#define RING_ENTRIES 1024
#define BUFS 256          /* power of two */
#define BUF_BYTES (16u << 10)
#define BGID 0
#define TICK_NS (100 * 1000000LL)

enum op { OP_ACCEPT = 0, OP_RECV = 1, OP_SEND = 2, OP_TIMER = 3 };

struct uring_state {
    struct io_uring ring;
    struct io_uring_buf_ring *br;
    uint8_t *bufs;
    bool accepting;
    struct __kernel_timespec tick;
};

static struct io_uring_sqe *sqe_get(struct uring_state *st)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&st->ring);
    if (!sqe) { /* full: push what we have and retry */
        io_uring_submit(&st->ring);
        sqe = io_uring_get_sqe(&st->ring);
    }
    return sqe;
}

static void arm_accept(worker_t *w, struct uring_state *st)
{
    struct io_uring_sqe *sqe = sqe_get(st);
    if (!sqe)
        return;
    io_uring_prep_multishot_accept(sqe, w->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    io_uring_sqe_set_data64(sqe, OP_ACCEPT);
    st->accepting = true;
}

static void arm_timer(struct uring_state *st)
{
    struct io_uring_sqe *sqe = sqe_get(st);
    if (!sqe)
        return;
    io_uring_prep_timeout(sqe, &st->tick, 0, 0);
    io_uring_sqe_set_data64(sqe, OP_TIMER);
}

static void arm_recv(struct uring_state *st, conn_t *c)
{
    struct io_uring_sqe *sqe = sqe_get(st);
    if (!sqe) {
        c->closing = c->dead = true;
        return;
    }
    io_uring_prep_recv_multishot(sqe, c->fd, NULL, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = BGID;
    io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)c | OP_RECV);
    c->recv_armed = true;
    c->ops++;
}

static void try_send(struct uring_state *st, conn_t *c)
{
    if (c->send_busy || c->dead || c->out_off >= c->out_len)
        return;
    struct io_uring_sqe *sqe = sqe_get(st);
    if (!sqe)
        return; /* the next tick retries */
    io_uring_prep_send(sqe, c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
    io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)c | OP_SEND);
    c->send_busy = true;
    c->ops++;
}

/* Back-pressure (conn.c paused c): cancel its multishot recv.  The cancel's
 * own completion carries c with OP_TIMER and is ignored (c may be freed by
 * then: it is not looked at); the recv ends with -ECANCELED. */
static void stop_recv(struct uring_state *st, conn_t *c)
{
    if (!c->paused || !c->recv_armed || c->recv_cancel || c->closing)
        return;
    struct io_uring_sqe *sqe = sqe_get(st);
    if (!sqe)
        return; /* the recv goes on; conn_feed keeps the frames unanswered */
    io_uring_prep_cancel64(sqe, (uint64_t)(uintptr_t)c | OP_RECV, 0);
    io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)c | OP_TIMER);
    c->recv_cancel = true;
}

/* After a send: a paused c whose backlog went under --max-inflight answers
 * the frames that waited and reads again, unless its peer has gone: then
 * they would be scored for nobody. */
static void resume(worker_t *w, struct uring_state *st, conn_t *c)
{
    if (!c->paused || c->closing)
        return;
    if (worker_peer_gone(c->fd)) {
        c->closing = true;
        return;
    }
    if (conn_resume(w, c) <= 0)
        return;
    if (!c->paused && !c->recv_armed && !c->closing)
        arm_recv(st, c);
}

/* Closes c once its output is sent (or the peer is gone) and every
 * operation on it has completed. */
static void maybe_close(worker_t *w, conn_t *c)
{
    if (!c->closing)
        return;
    if (c->out_off < c->out_len && !c->dead)
        return; /* still sending */
    if ((c->recv_armed || c->send_busy) && !c->shut) {
        /* Ends the multishot recv, and fails a send that waits for a peer
         * that does not read (a reaped connection's). */
        shutdown(c->fd, SHUT_RDWR);
        c->shut = true;
    }
    if (c->ops == 0)
        conn_free(w, c);
}

static void recycle(struct uring_state *st, unsigned bid)
{
    io_uring_buf_ring_add(st->br, st->bufs + (size_t)bid * BUF_BYTES, BUF_BYTES, (unsigned short)bid,
                          io_uring_buf_ring_mask(BUFS), 0);
    io_uring_buf_ring_advance(st->br, 1);
}

static void on_accept(worker_t *w, struct uring_state *st, struct io_uring_cqe *cqe)
{
    if (!(cqe->flags & IORING_CQE_F_MORE))
        st->accepting = false; /* re-armed on the next tick unless stopping */
    if (cqe->res < 0 && atomic_load_explicit(&w->srv->stopping, memory_order_relaxed))
        return; /* the drain shut the listening socket down: not an accept failure */
    conn_t *evicted;
    conn_t *c = worker_admit(w, cqe->res, &evicted);
    if (evicted)
        maybe_close(w, evicted); /* reaped: shut down, freed when its recv ends */
    if (c)
        arm_recv(st, c);
}

static void on_recv(worker_t *w, struct uring_state *st, conn_t *c, struct io_uring_cqe *cqe)
{
    bool more = cqe->flags & IORING_CQE_F_MORE;
    if (!more) {
        c->recv_armed = false;
        c->ops--;
        if (cqe->res == -ECANCELED && c->recv_cancel) { /* stop_recv's doing */
            c->recv_cancel = false;
            if (!c->paused && !c->closing)
                arm_recv(st, c); /* resumed meanwhile */
            try_send(st, c);
            maybe_close(w, c);
            return;
        }
        c->recv_cancel = false;
    }
    if (cqe->res > 0 && (cqe->flags & IORING_CQE_F_BUFFER)) {
        unsigned bid = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
        if (!c->closing) /* on -errno conn_feed sets c->closing, read below */
            conn_feed(w, c, st->bufs + (size_t)bid * BUF_BYTES, (size_t)cqe->res);
        recycle(st, bid);
        if (!more && !c->closing && !c->paused)
            arm_recv(st, c); /* the kernel ended the multishot: start another */
        stop_recv(st, c);
    } else if (cqe->res == -ENOBUFS) {
        if (!more && !c->closing && !c->paused)
            arm_recv(st, c); /* all buffers were busy: try again */
    } else if (!more) {
        c->closing = true; /* EOF or error */
        if (cqe->res < 0)
            c->dead = true;
    }
    try_send(st, c);
    maybe_close(w, c);
}

static void on_send(worker_t *w, struct uring_state *st, conn_t *c, struct io_uring_cqe *cqe)
{
    c->send_busy = false;
    c->ops--;
    conn_send_ended(w, c); /* frees the buffer that send read, if out moved meanwhile */
    if (cqe->res > 0) {
        conn_sent(w, c, (size_t)cqe->res);
        resume(w, st, c);
    } else if (cqe->res != -EAGAIN && cqe->res != -EINTR)
        c->closing = c->dead = true;
    try_send(st, c);
    maybe_close(w, c);
}

/* Every 100 ms: reaping, trimming, re-arming accept, draining. */
static bool on_tick(worker_t *w, struct uring_state *st, uint64_t *drain_deadline)
{
    uint64_t now = w->now_ms;
    bool stopping = atomic_load_explicit(&w->srv->stopping, memory_order_relaxed);
    for (conn_t *c = w->conns, *next; c; c = next) {
        next = c->next;
        int why = conn_reap_reason(w, c, now);
        if (why >= 0)
            conn_reap(w, c, (server_reap_t)why);
        else
            conn_trim(w, c, now);
        if (stopping && c->out_off >= c->out_len)
            c->closing = true; /* nothing left to send: done */
        try_send(st, c);
        maybe_close(w, c);
    }
    if (!stopping) {
        if (!st->accepting)
            arm_accept(w, st);
        return true;
    }
    if (*drain_deadline == 0) {
        *drain_deadline = now + 5000;
        shutdown(w->listen_fd, SHUT_RDWR); /* ends the multishot accept */
    }
    if (w->conns == NULL)
        return false;
    if (now > *drain_deadline) { /* peers that never read: give up on them */
        /* A send to a peer that does not read never completes by itself, and
         * maybe_close waits for it: shutting the socket down makes the kernel
         * fail it (EPIPE) and ends the recv, so every op completes and the
         * connection is freed on its completions. */
        for (conn_t *c = w->conns, *next; c; c = next) {
            next = c->next;
            c->closing = c->dead = true;
            if (!c->shut) {
                shutdown(c->fd, SHUT_RDWR);
                c->shut = true;
            }
            maybe_close(w, c);
        }
        if (now > *drain_deadline + 2000)
            return false; /* still not done: the ring's teardown cancels the rest */
    }
    return true;
}

static int setup(struct uring_state *st)
{
    int rc = io_uring_queue_init(RING_ENTRIES, &st->ring, 0);
    if (rc < 0)
        return rc;
    size_t ring_bytes = BUFS * sizeof(struct io_uring_buf);
    st->br = mmap(NULL, ring_bytes, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
    st->bufs = malloc((size_t)BUFS * BUF_BYTES);
    if (st->br == MAP_FAILED || !st->bufs) {
        rc = -ENOMEM;
        goto fail;
    }
    struct io_uring_buf_reg reg = {.ring_addr = (uint64_t)(uintptr_t)st->br,
                                   .ring_entries = BUFS,
                                   .bgid = BGID};
    rc = io_uring_register_buf_ring(&st->ring, &reg, 0);
    if (rc < 0)
        goto fail;
    io_uring_buf_ring_init(st->br);
    for (unsigned i = 0; i < BUFS; i++)
        io_uring_buf_ring_add(st->br, st->bufs + (size_t)i * BUF_BYTES, BUF_BYTES,
                              (unsigned short)i, io_uring_buf_ring_mask(BUFS), (int)i);
    io_uring_buf_ring_advance(st->br, BUFS);
    st->tick = (struct __kernel_timespec){.tv_sec = 0, .tv_nsec = TICK_NS};
    return 0;
fail:
    if (st->br != MAP_FAILED && st->br)
        munmap(st->br, ring_bytes);
    free(st->bufs);
    io_uring_queue_exit(&st->ring);
    return rc;
}

int worker_run_uring(worker_t *w)
{
    struct uring_state st = {0};
    int rc = setup(&st);
    if (rc < 0)
        return rc; /* the caller falls back to epoll */
    w->now_ms = worker_now_ms();
    arm_accept(w, &st);
    arm_timer(&st);
    uint64_t drain_deadline = 0;
    bool running = true;
    while (running) {
        rc = io_uring_submit_and_wait(&st.ring, 1);
        if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY)
            break;
        w->now_ms = worker_now_ms();
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&st.ring, head, cqe)
        {
            seen++;
            uint64_t ud = io_uring_cqe_get_data64(cqe);
            conn_t *c = (conn_t *)(uintptr_t)(ud & ~(uint64_t)3);
            switch ((enum op)(ud & 3)) {
            case OP_ACCEPT:
                on_accept(w, &st, cqe);
                break;
            case OP_RECV:
                on_recv(w, &st, c, cqe);
                break;
            case OP_SEND:
                on_send(w, &st, c, cqe);
                break;
            case OP_TIMER:
                if (c)
                    break; /* a stop_recv cancel's completion */
                running = on_tick(w, &st, &drain_deadline);
                if (running)
                    arm_timer(&st);
                break;
            }
        }
        io_uring_cq_advance(&st.ring, seen);
        worker_round_done(w);
    }
    /* Tear the ring down first (it cancels what is in flight), then free
     * whatever connections are left. */
    io_uring_queue_exit(&st.ring);
    while (w->conns)
        conn_free(w, w->conns);
    munmap(st.br, BUFS * sizeof(struct io_uring_buf));
    free(st.bufs);
    return 0;
}
