/*
 * sockets.c — what both data-plane drivers do with sockets besides moving
 * bytes: admitting a new connection or refusing it with a word, keeping
 * the accept queue moving when file descriptors run out, and telling
 * whether a peer has gone.
 *
 * ADMISSION: a worker holds at most --max-connections.  At the limit, the
 * connection idle longest (nothing to read, answer or send for at least
 * CONN_EVICT_IDLE_MS) is reaped to make room, as a web server drops idle
 * keep-alive connections under pressure; with none idle the newcomer gets
 * an ERROR frame (OVERLOADED, request id 0) before the close, so it learns
 * why instead of seeing a bare EOF.  While draining: SHUTTING_DOWN.
 *
 * OUT OF DESCRIPTORS: when accept fails with EMFILE/ENFILE the connection
 * stays in the kernel's queue and, unanswered, hangs its client.  Each
 * worker keeps one spare descriptor (/dev/null): it is closed, the waiting
 * connections are accepted and refused one by one, and it is opened again.
 * Failures are counted (tlserve_accept_errors_total) and logged at most
 * once a second per worker.
 *
 * KERNEL BUFFERS: a new connection's send buffer is set to
 * --send-buffer-bytes.  What the kernel holds for a peer that does not read
 * is answers the worker scored for nobody, in memory no cap of ours
 * counts: with autotuning (up to 4 MiB on Debian) that is 256 answers of
 * 4,096 items per such peer, with the default a few dozen; a request and
 * answer server on a LAN needs no more to keep its links busy.
 *
 * THREAD SAFETY: called from the worker's own thread.
 */
#define _GNU_SOURCE /* accept4 */
#include "log.h"
#include "worker.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define REFUSE_BATCH 64 /* connections refused per out-of-fds round */

void worker_refuse(worker_t *w, int fd, int code, const char *msg)
{
    uint8_t frame[CODEC_HEADER_SIZE + 4 + 256];
    size_t n = strlen(msg), len;
    if (n > 255)
        n = 255;
    codec_errmsg_t e = {(uint16_t)code, (uint16_t)n, msg};
    if (codec_encode_errmsg(frame, sizeof frame, 0, &e, &len, NULL) == CODEC_OK)
        (void)!send(fd, frame, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    /* Closing with unread bytes would send a reset, which may destroy the
     * frame before the peer reads it: say we are done, take what the peer
     * already sent, then close. */
    shutdown(fd, SHUT_WR);
    uint8_t sink[4096];
    for (int i = 0; i < 16 && recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0; i++)
        ;
    close(fd);
    atomic_fetch_add_explicit(&w->m->connections_refused_total, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->m->errors_total, 1, memory_order_relaxed);
    if (code > 0 && code < SERVER_MAX_ERROR_CODES)
        atomic_fetch_add_explicit(&w->m->errors_by_code[code], 1, memory_order_relaxed);
    if (code == CODEC_E_OVERLOADED)
        atomic_fetch_add_explicit(&w->m->overloaded_total, 1, memory_order_relaxed);
}

int worker_spare_open(worker_t *w)
{
    w->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return w->spare_fd < 0 ? -errno : 0;
}

void worker_spare_close(worker_t *w)
{
    if (w->spare_fd >= 0)
        close(w->spare_fd);
    w->spare_fd = -1;
}

/* accept failed with err (> 0). */
static cold void accept_failed(worker_t *w, int err)
{
    if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR || err == ECONNABORTED)
        return; /* nothing waits, or the peer left first: not a failure of ours */
    atomic_fetch_add_explicit(&w->m->accept_errors_total, 1, memory_order_relaxed);
    uint64_t now = worker_now_ms();
    if (now - w->accept_warned_ms >= 1000 || w->accept_warned_ms == 0) {
        w->accept_warned_ms = now;
        LOG(LL_WARN, "worker %d: accept failed: %s%s", w->id, strerror(err),
            err == EMFILE || err == ENFILE ? " (out of file descriptors: raise ulimit -n or "
                                             "lower --max-connections); refusing new connections"
                                           : "");
    }
    if ((err != EMFILE && err != ENFILE) || w->spare_fd < 0)
        return;
    worker_spare_close(w); /* one descriptor free: accept and refuse with it */
    for (int i = 0; i < REFUSE_BATCH; i++) {
        int fd = accept4(w->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            break;
        worker_refuse(w, fd, CODEC_E_OVERLOADED,
                      "the server is out of file descriptors; retry later");
    }
    worker_spare_open(w); /* may fail while the process is still full: tried next time */
}

conn_t *worker_admit(worker_t *w, int fd, conn_t **evicted)
{
    *evicted = NULL;
    if (fd < 0) {
        accept_failed(w, -fd);
        return NULL;
    }
    if (w->spare_fd < 0)
        worker_spare_open(w); /* given back on the out-of-fds path */
    if (atomic_load_explicit(&w->srv->stopping, memory_order_relaxed)) {
        worker_refuse(w, fd, CODEC_E_SHUTTING_DOWN, "the server is shutting down");
        return NULL;
    }
    if (w->nconns >= w->srv->cfg.max_connections) {
        conn_t *idle = conn_evictable(w, w->now_ms);
        if (!idle) {
            char msg[160];
            snprintf(msg, sizeof msg,
                     "%d connections on this worker (limit %d), none idle; retry later",
                     w->nconns, w->srv->cfg.max_connections);
            worker_refuse(w, fd, CODEC_E_OVERLOADED, msg);
            return NULL;
        }
        conn_reap(w, idle, SERVER_REAP_EVICTED);
        *evicted = idle;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int sndbuf = w->srv->cfg.send_buffer_bytes;
    if (sndbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    conn_t *c = conn_new(w, fd);
    if (!c)
        worker_refuse(w, fd, CODEC_E_OVERLOADED, "the server is out of memory");
    return c;
}

bool worker_peer_gone(int fd)
{
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0)
        return false; /* not TCP (a test's socketpair): read EOF the usual way */
    return ti.tcpi_state == TCP_CLOSE_WAIT || ti.tcpi_state == TCP_CLOSE ||
           ti.tcpi_state == TCP_LAST_ACK;
}
