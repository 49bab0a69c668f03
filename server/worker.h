/*
 * worker.h — the data plane's pieces (internal to server/): a worker thread,
 * its connections, and the protocol engine that turns received bytes into
 * response bytes.  The protocol engine (conn.c) knows nothing of sockets; the
 * two I/O drivers (worker_uring.c, worker_epoll.c) move bytes and call it.
 *
 * A connection keeps two buffers:
 *
 *   in:   [ consumed | unparsed bytes ........ | free ]   frames are decoded
 *                      ^ 0 after each compaction            in place from here
 *   out:  [ sent | queued responses ......... | free ]    the driver sends
 *           ^ out_off                ^ out_len             [out_off, out_len)
 *
 * Both grow (to the largest frame / backlog seen) and are reused: a request
 * allocates nothing.  Requests on a connection are answered in order.
 */
#ifndef TL_SERVER_WORKER_H
#define TL_SERVER_WORKER_H

#include "codec/codec.h"
#include "gate.h"
#include "server.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct conn {
    int fd;
    uint8_t *in;
    size_t in_len, in_cap;
    uint8_t *out;
    size_t out_off, out_len, out_cap;
    uint8_t *out_sending;      /* io_uring: the buffer a send in flight reads, when out
                                  has been reallocated since; freed when the send completes */
    size_t out_sending_cap;
    size_t out_done;           /* end of the last response fully sent: the next frame
                                  boundary in [out_done, out_off] that conn_sent releases */
    uint32_t queued;           /* responses in out not yet fully sent */
    uint64_t partial_since_ms; /* first byte of an incomplete frame, 0 = none */
    uint64_t active_ms;        /* last byte received or sent (idle reaping, eviction) */
    uint64_t send_wait_ms;     /* since when unsent output has made no progress */
    bool closing;              /* framing lost or peer gone: close once flushed */
    bool send_busy;            /* io_uring: a send is in flight */
    bool recv_armed;           /* io_uring: multishot recv armed */
    int ops;                   /* io_uring: operations in flight on this conn */
    bool shut;                 /* io_uring: shutdown() issued to end the recv */
    bool dead;                 /* the peer is gone: drop queued output */
    bool paused;               /* queued reached --max-inflight: frames wait in `in`
                                  unanswered and the driver stops reading until
                                  conn_resume (back-pressure) */
    bool recv_cancel;          /* io_uring: a cancel of the recv is in flight (paused) */
    struct conn *prev, *next;  /* the worker's list of live connections (w->conns) */
} conn_t;

typedef struct worker {
    server_t *srv;
    int id;
    server_metrics_t *m;       /* this worker's metrics (srv->metrics[id]) */
    int listen_fd;
    int spare_fd;              /* held open to accept-and-refuse when out of fds, -1 */
    uint64_t accept_warned_ms; /* last accept-failure log line (one a second) */
    pthread_t thread;
    bool uring;                /* which driver runs */
    /* request work space, allocated once */
    codec_arena_t arena;
    model_scratch_t *scratch;
    uint64_t scratch_gen;      /* server_model_t.gen the scratch is sized for, 0 = none */
    codec_block_t *blocks;     /* CODEC_MAX_ITEMS */
    float *scores;             /* CODEC_MAX_ITEMS */
    gate_ring_t *sample;       /* this worker's sample of PREDICT payloads (gate.h), NULL = off */
    uint64_t now_ms;           /* the driver's clock, read once per loop round */
    int64_t inflight;          /* responses queued on this worker's connections */
    size_t in_bytes;           /* capacity of all its connections' input buffers */
    size_t out_bytes;          /* capacity of all its connections' output buffers */
    conn_t *conns;             /* live connections, newest first */
    int nconns;
} worker_t;

/* conn.c ------------------------------------------------------------------- */

/* Appends len received bytes to c->in and answers every complete frame into
 * c->out.  Returns 0, or -errno when the connection must close once c->out
 * is sent (c->closing is then set):
 *   -EPROTO   framing lost (bad magic, version, header, or a payload over
 *             max-frame-bytes); an ERROR frame with request id 0 is queued
 *   -ENOBUFS  the worker's input budget (max-input-bytes) would be passed
 *             (an OVERLOADED ERROR frame is queued)
 *   -ENOMEM   a buffer could not grow (received bytes may be lost)
 *   -EINVAL   a response did not encode (a bug)
 *   -EPIPE    c was closing already; the bytes are ignored
 * When c's unsent responses reach --max-inflight, the frames after that
 * wait in c->in and c->paused is set: the driver stops reading c until
 * conn_resume.  When the worker's output buffers pass --max-output-bytes,
 * the connections with the most unsent output (c or others) are marked
 * closing and dead (conn_shed).  len may be 0 (just answer what waits).
 * Never blocks; allocates only to grow c's buffers. */
int conn_feed(worker_t *w, conn_t *c, const uint8_t *data, size_t len);

/* conn_feed asks whether the peer has gone (worker_peer_gone) when this
 * many, or a multiple, of c's answers are unsent. */
#define CONN_PEER_CHECK 16

/* When c is paused and its unsent responses are back under --max-inflight,
 * answers the frames that waited in c->in (as conn_feed does) and clears
 * c->paused unless the limit is reached again.  Returns 1 when it resumed
 * (the driver must send and may read again), 0 when there was nothing to
 * do, or conn_feed's -errno (c->closing is then set).  Never blocks. */
int conn_resume(worker_t *w, conn_t *c);

/* The driver sent n more bytes of c->out.  Each response counts against
 * max-inflight until its last byte is sent, one by one: a driver that sends
 * while more responses are being queued (io_uring: a send in flight while
 * the next burst is answered) releases what it sent, not only when c->out
 * empties. */
void conn_sent(worker_t *w, conn_t *c, size_t n);

/* io_uring: the send in flight on c has completed; the buffer it read,
 * when c->out has moved since (out_room), is freed. */
void conn_send_ended(worker_t *w, conn_t *c);

/* Whether the server should close c now, and why: -1 for no, else a
 * server_reap_t (a partial frame past --frame-timeout-ms, output stuck past
 * --send-timeout-ms, nothing sent or awaited past --idle-timeout-ms).
 * Drivers ask on their 100 ms tick; conn_reap counts it. */
int conn_reap_reason(const worker_t *w, const conn_t *c, uint64_t now_ms);

/* Marks c closing and dead (its output is dropped) for reason, counted in
 * tlserve_connections_reaped_total. */
void conn_reap(worker_t *w, conn_t *c, server_reap_t reason);

/* On the tick: gives back the buffers of a connection that has been quiet
 * for a second (empty input, all output sent), so that a burst does not pin
 * its peak for the connection's life.  Never while a send reads c->out. */
void conn_trim(worker_t *w, conn_t *c, uint64_t now_ms);

/* At --max-connections: the connection to close for a new one, the one
 * idle longest if it has been idle (nothing to read, send or answer) for
 * at least CONN_EVICT_IDLE_MS; NULL when none may go. */
#define CONN_EVICT_IDLE_MS 1000
conn_t *conn_evictable(const worker_t *w, uint64_t now_ms);

conn_t *conn_new(worker_t *w, int fd);
void conn_free(worker_t *w, conn_t *c);

uint64_t worker_now_ms(void);

/* Called at the end of a driver's loop round (w->now_ms read at its start):
 * a round over WORKER_SLOW_ROUND_MS counts in tlserve_slow_rounds_total. */
#define WORKER_SLOW_ROUND_MS 50
void worker_round_done(worker_t *w);

/* sockets.c ---------------------------------------------------------------- */

/* A connection the listening socket handed over (fd), or -errno from the
 * accept.  Admits it (a new conn, TCP_NODELAY) or refuses it: at
 * --max-connections the longest idle connection is reaped to make room
 * (*evicted: the driver closes it now) or the new one gets ERROR
 * OVERLOADED; while draining, SHUTTING_DOWN.  On EMFILE/ENFILE it logs (once
 * a second), counts, and accepts-and-refuses what waits with the spare
 * descriptor, so clients learn at once instead of hanging in the accept
 * queue.  Returns the new conn or NULL. */
conn_t *worker_admit(worker_t *w, int fd_or_errno, conn_t **evicted);

/* Tells a connection we will not serve why, with an ERROR frame (request
 * id 0) sent without waiting (a fresh socket's buffer takes it), then
 * closes fd.  Counts tlserve_connections_refused_total. */
void worker_refuse(worker_t *w, int fd, int code, const char *msg);

/* Opens the spare descriptor of the out-of-fds path (0 or -errno); closes it. */
int worker_spare_open(worker_t *w);
void worker_spare_close(worker_t *w);

/* True when the peer of fd has closed its side or reset (the kernel has its
 * FIN or RST, whatever bytes still wait before it): frames it sent that are
 * not answered yet would be answered for nobody.  One getsockopt: call it per
 * batch (a paused connection resuming, every CONN_PEER_CHECK answers queued),
 * not per request.  False for what is not a TCP socket (fd -1 in tests). */
bool worker_peer_gone(int fd);

/* drivers ---------------------------------------------------------------------- */

/* Runs the worker's event loop until srv->stopping and drained.  The io_uring
 * driver returns -ENOSYS/-EPERM (without serving) when io_uring cannot be set
 * up, so that the caller can fall back to epoll. */
int worker_run_uring(worker_t *w);
int worker_run_epoll(worker_t *w);

#endif /* TL_SERVER_WORKER_H */
