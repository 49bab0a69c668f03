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
#include "server.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CONN_MAX_BACKLOG (64u << 20) /* queued response bytes before we close */

typedef struct conn {
    int fd;
    uint8_t *in;
    size_t in_len, in_cap;
    uint8_t *out;
    size_t out_off, out_len, out_cap;
    uint8_t *out_sending;      /* io_uring: the buffer a send in flight reads, when out
                                  has been reallocated since; freed when the send completes */
    size_t out_done;           /* end of the last response fully sent: the next frame
                                  boundary in [out_done, out_off] that conn_sent releases */
    uint32_t queued;           /* responses in out not yet fully sent */
    uint64_t partial_since_ms; /* first byte of an incomplete frame, 0 = none */
    bool closing;              /* framing lost or peer gone: close once flushed */
    bool send_busy;            /* io_uring: a send is in flight */
    bool recv_armed;           /* io_uring: multishot recv armed */
    int ops;                   /* io_uring: operations in flight on this conn */
    bool shut;                 /* io_uring: shutdown() issued to end the recv */
    bool dead;                 /* the peer is gone: drop queued output */
    bool paused;               /* queued reached the connection's share of max-inflight:
                                  frames wait in `in` unanswered and the driver stops
                                  reading until conn_resume (back-pressure) */
    bool recv_cancel;          /* io_uring: a cancel of the recv is in flight (paused) */
    struct conn *prev, *next;  /* the driver's list of live connections */
} conn_t;

typedef struct worker {
    server_t *srv;
    int id;
    server_metrics_t *m;       /* this worker's metrics (srv->metrics[id]) */
    int listen_fd;
    pthread_t thread;
    bool uring;                /* which driver runs */
    /* request work space, allocated once */
    codec_arena_t arena;
    model_scratch_t *scratch;
    uint64_t scratch_gen;      /* server_model_t.gen the scratch is sized for, 0 = none */
    codec_block_t *blocks;     /* CODEC_MAX_ITEMS */
    float *scores;             /* CODEC_MAX_ITEMS */
    int64_t inflight;          /* responses queued on this worker's connections */
    size_t in_bytes;           /* capacity of all its connections' input buffers */
    int nconns;
} worker_t;

/* conn.c ------------------------------------------------------------------- */

/* Appends len received bytes to c->in and answers every complete frame into
 * c->out.  Returns 0, or -errno when the connection must close once c->out
 * is sent (c->closing is then set):
 *   -EPROTO   framing lost (bad magic, version, header, or a payload over
 *             max-frame-bytes); an ERROR frame with request id 0 is queued
 *   -ENOBUFS  the worker's input budget (max-input-bytes) would be passed
 *             (an OVERLOADED ERROR frame is queued), or more than
 *             CONN_MAX_BACKLOG response bytes wait for the peer to read
 *   -ENOMEM   a buffer could not grow (received bytes may be lost)
 *   -EINVAL   a response did not encode (a bug)
 *   -EPIPE    c was closing already; the bytes are ignored
 * When c's unsent responses reach its share (conn_inflight_share), the
 * frames after that wait in c->in and c->paused is set: the driver stops
 * reading c until conn_resume.  len may be 0 (just answer what waits).
 * Never blocks; allocates only to grow c's buffers. */
int conn_feed(worker_t *w, conn_t *c, const uint8_t *data, size_t len);

/* A connection may hold at most this share of the worker's --max-inflight
 * (1/CONN_INFLIGHT_SHARE of it; no share under a limit of
 * CONN_INFLIGHT_SHARE, where only the worker's limit holds) in unsent
 * responses; past it
 * conn_feed stops answering and sets c->paused, so that one peer that
 * pipelines and never reads cannot make its worker refuse everyone else. */
#define CONN_INFLIGHT_SHARE 4
uint32_t conn_inflight_share(const worker_t *w);

/* When c is paused and its unsent responses are back under its share,
 * answers the frames that waited in c->in (as conn_feed does) and clears
 * c->paused unless the share is reached again.  Returns 1 when it resumed
 * (the driver must send and may read again), 0 when there was nothing to
 * do, or conn_feed's -errno (c->closing is then set).  Never blocks. */
int conn_resume(worker_t *w, conn_t *c);

/* The driver sent n more bytes of c->out.  Each response counts against
 * max-inflight until its last byte is sent, one by one: a driver that sends
 * while more responses are being queued (io_uring: a send in flight while
 * the next burst is answered) releases what it sent, not only when c->out
 * empties. */
void conn_sent(worker_t *w, conn_t *c, size_t n);

/* True when c holds a partial frame older than the idle timeout. */
bool conn_stalled(const worker_t *w, const conn_t *c, uint64_t now_ms);

conn_t *conn_new(worker_t *w, int fd);
void conn_free(worker_t *w, conn_t *c);

uint64_t worker_now_ms(void);

/* drivers ---------------------------------------------------------------------- */

/* Runs the worker's event loop until srv->stopping and drained.  The io_uring
 * driver returns -ENOSYS/-EPERM (without serving) when io_uring cannot be set
 * up, so that the caller can fall back to epoll. */
int worker_run_uring(worker_t *w);
int worker_run_epoll(worker_t *w);

#endif /* TL_SERVER_WORKER_H */
