/*
 * worker_epoll.c — the fallback data-plane driver: one epoll instance per
 * worker, non-blocking sockets, level-triggered.  Used when io_uring cannot
 * be set up (EPERM or ENOSYS, as under Docker's default seccomp profile) or
 * when --force-epoll asks for it.
 *
 * Per event: read up to 64 KiB into the worker's buffer and feed it to the
 * connection (conn.c); then write as much of the connection's output as the
 * socket takes, and ask for EPOLLOUT only while output is pending; once the
 * connection is closing (the peer's EOF, or framing lost) stop asking for
 * input, which a half-closed peer would keep signalling, nor while it is
 * paused (--max-inflight unsent: back-pressure, conn.c).  Every 100 ms the
 * connections conn_reap_reason names (slow partial frames, output that does
 * not move, idle ones) are closed and quiet ones trimmed, so a client
 * sending a byte a second holds a file descriptor for a while, never a
 * thread.
 *
 * THREAD SAFETY: everything here belongs to the worker thread.
 */
#define _GNU_SOURCE /* accept4 */
#include "worker.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define READ_CHUNK (64u << 10)
#define MAX_EVENTS 128
#define TICK_MS 100

struct ep_state {
    int ep;
    conn_t **by_fd; /* fd -> conn, grown as needed */
    int by_fd_cap;
};

static int track(struct ep_state *st, conn_t *c)
{
    if (c->fd >= st->by_fd_cap) {
        int n = st->by_fd_cap ? st->by_fd_cap : 1024;
        while (n <= c->fd)
            n *= 2;
        conn_t **p = realloc(st->by_fd, (size_t)n * sizeof *p);
        if (!p)
            return -ENOMEM;
        memset(p + st->by_fd_cap, 0, (size_t)(n - st->by_fd_cap) * sizeof *p);
        st->by_fd = p;
        st->by_fd_cap = n;
    }
    st->by_fd[c->fd] = c;
    return 0;
}

static void drop(worker_t *w, struct ep_state *st, conn_t *c)
{
    epoll_ctl(st->ep, EPOLL_CTL_DEL, c->fd, NULL);
    st->by_fd[c->fd] = NULL;
    conn_free(w, c);
}

/* Level-triggered: a closing connection (EOF seen, or framing lost) is no
 * longer polled for input, or a half-closed peer's EPOLLIN/EPOLLRDHUP, which
 * stays raised, would wake the loop at once for ever while its output waits
 * for the peer to read.  Nor is a paused one (back-pressure, conn.c): its
 * output is pending, so EPOLLOUT wakes it. */
static void want_out(struct ep_state *st, conn_t *c, bool on)
{
    uint32_t in = c->closing || c->paused ? 0 : EPOLLIN | EPOLLRDHUP;
    struct epoll_event ev = {.events = in | (on ? EPOLLOUT : 0), .data.fd = c->fd};
    epoll_ctl(st->ep, EPOLL_CTL_MOD, c->fd, &ev);
}

/* Writes what the socket takes.  Returns 0, or -errno (send's) when the peer
 * is gone. */
static int flush_out(worker_t *w, struct ep_state *st, conn_t *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (n > 0) {
            conn_sent(w, c, (size_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            want_out(st, c, true);
            return 0;
        }
        return n < 0 ? -errno : -EPIPE;
    }
    want_out(st, c, false);
    return 0;
}

/* Sends what the socket takes; while that lets a paused connection resume,
 * answers the frames that waited and sends again.  Drops c when the peer is
 * gone or c is closing with nothing left to send. */
static void flush_or_drop(worker_t *w, struct ep_state *st, conn_t *c)
{
    int rc = flush_out(w, st, c);
    while (rc == 0 && c->paused && !c->closing) {
        if (worker_peer_gone(c->fd)) { /* the frames that wait would be scored for nobody */
            c->closing = true;
            break;
        }
        if (conn_resume(w, c) == 0)
            break;
        rc = flush_out(w, st, c);
    }
    if (rc != 0 || (c->closing && c->out_off == c->out_len))
        drop(w, st, c);
}

static void accept_all(worker_t *w, struct ep_state *st)
{
    for (;;) {
        int fd = accept4(w->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        conn_t *evicted;
        conn_t *c = worker_admit(w, fd < 0 ? -errno : fd, &evicted);
        if (evicted)
            drop(w, st, evicted);
        if (fd < 0)
            return; /* EAGAIN, or an error the next round retries */
        if (!c)
            continue;
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.fd = fd};
        if (track(st, c) != 0 || epoll_ctl(st->ep, EPOLL_CTL_ADD, fd, &ev) != 0)
            drop(w, st, c);
    }
}

static void on_readable(worker_t *w, struct ep_state *st, conn_t *c, uint8_t *buf)
{
    for (int rounds = 0; rounds < 16; rounds++) { /* bounded: fairness between connections */
        ssize_t n = recv(c->fd, buf, READ_CHUNK, 0);
        if (n > 0) {
            if (conn_feed(w, c, buf, (size_t)n) < 0)
                break; /* -errno, closing: flush what is queued, then drop */
            if (c->paused)
                break; /* back-pressure: read again once the peer has read */
            if ((size_t)n < READ_CHUNK)
                break;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        c->closing = true; /* EOF or error */
        break;
    }
    flush_or_drop(w, st, c);
}

int worker_run_epoll(worker_t *w)
{
    struct ep_state st = {.ep = epoll_create1(EPOLL_CLOEXEC)};
    uint8_t *buf = malloc(READ_CHUNK);
    if (st.ep < 0 || !buf) {
        free(buf);
        return -errno;
    }
    struct epoll_event lev = {.events = EPOLLIN, .data.fd = w->listen_fd};
    epoll_ctl(st.ep, EPOLL_CTL_ADD, w->listen_fd, &lev);
    bool listening = true;
    w->now_ms = worker_now_ms();
    uint64_t drain_deadline = 0, last_scan = w->now_ms;
    struct epoll_event evs[MAX_EVENTS];

    for (;;) {
        bool stopping = atomic_load_explicit(&w->srv->stopping, memory_order_relaxed);
        if (stopping && listening) { /* stop accepting; let queued responses go out */
            epoll_ctl(st.ep, EPOLL_CTL_DEL, w->listen_fd, NULL);
            listening = false;
            drain_deadline = worker_now_ms() + 5000;
        }
        if (stopping) {
            bool pending = false;
            for (conn_t *c = w->conns; c && !pending; c = c->next)
                pending = c->out_off < c->out_len && !c->dead;
            if (!pending || worker_now_ms() > drain_deadline)
                break;
        }
        int n = epoll_wait(st.ep, evs, MAX_EVENTS, TICK_MS);
        w->now_ms = worker_now_ms();
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == w->listen_fd) {
                accept_all(w, &st);
                continue;
            }
            conn_t *c = fd < st.by_fd_cap ? st.by_fd[fd] : NULL;
            if (!c)
                continue;
            if (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
                on_readable(w, &st, c, buf);
            } else if (evs[i].events & EPOLLOUT) {
                flush_or_drop(w, &st, c);
            }
        }
        uint64_t now = w->now_ms;
        if (now - last_scan >= TICK_MS) {
            last_scan = now;
            for (conn_t *c = w->conns, *next; c; c = next) {
                next = c->next;
                int why = conn_reap_reason(w, c, now);
                if (why >= 0)
                    conn_reap(w, c, (server_reap_t)why);
                if (c->dead) /* reaped now, or shed by conn_feed (--max-output-bytes) */
                    drop(w, &st, c);
                else
                    conn_trim(w, c, now);
            }
        }
        worker_round_done(w);
    }
    while (w->conns)
        drop(w, &st, w->conns);
    free(st.by_fd);
    free(buf);
    close(st.ep);
    return 0;
}
