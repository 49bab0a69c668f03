/*
 * tlclient.c — libtlclient over a blocking TCP socket, with poll() for
 * timeouts.
 *
 *   send: encode the frame into `out` (grown to the largest request), write
 *         it all;
 *   recv: read into `in` until one whole frame is there, decode it into the
 *         client's arena (sized for the largest frame the server may send),
 *         and keep any bytes of the next frames for the next call.
 *
 * Request ids count up from 1 per connection.
 *
 * DEADLINES: a blocking call (predict, train, feedback, ping) takes one
 * deadline, now + timeout_ms, for its send and its whole wait: frames for
 * other ids arriving meanwhile do not restart it.  A send cut short by its
 * deadline leaves part of a frame on the wire, so the connection is marked
 * broken and every later call returns -EPIPE (reconnect).  The sends
 * without a timeout (tlclient_send_*) wait at most SEND_WAIT_MS.
 *
 * An ERROR frame with request id 0 is the server's word on the whole
 * connection (a framing error, OVERLOADED at accept, SHUTTING_DOWN) before
 * it closes it: a waiting call returns its code and message.
 *
 * THREAD SAFETY: one thread per client at a time (tlclient.h).
 */
#include "tlclient.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RESPONSE_MAX_PAYLOAD (1u << 20) /* results and errors are small */
#define SEND_WAIT_MS 60000              /* a send without a timeout of its own */

struct tlclient {
    int fd;
    int broken; /* a frame was cut short on the wire: every call is -EPIPE */
    uint64_t next_id;
    uint8_t *out;
    size_t out_cap;
    uint8_t *in;
    size_t in_len, in_cap, in_skip; /* in_skip: bytes of the last frame handed out */
    codec_arena_t arena;
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int wait_fd(int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - now_ms();
        if (left <= 0)
            return -ETIMEDOUT;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, (int)left);
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return -errno;
    }
}

int tlclient_connect(const char *host, int port, int timeout_ms, tlclient_t **out)
{
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
    int gai = getaddrinfo(host, portstr, &hints, &ai);
    if (gai != 0) /* no errno says "no such name": ENXIO, which tlclient.h names */
        return gai == EAI_SYSTEM ? (errno ? -errno : -EIO) : gai == EAI_MEMORY ? -ENOMEM : -ENXIO;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        freeaddrinfo(ai);
        return -errno;
    }
    int rc = connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : -errno;
    freeaddrinfo(ai);
    if (rc == -EINPROGRESS) {
        rc = wait_fd(fd, POLLOUT, now_ms() + timeout_ms);
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (rc == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr)
            rc = -soerr;
    }
    if (rc != 0) {
        close(fd);
        return rc;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    tlclient_t *c = calloc(1, sizeof *c);
    size_t arena = codec_arena_bound(RESPONSE_MAX_PAYLOAD);
    if (c)
        c->arena.base = malloc(arena);
    if (!c || !c->arena.base) {
        if (c)
            free(c);
        close(fd);
        return -ENOMEM;
    }
    c->arena.cap = arena;
    c->fd = fd;
    c->next_id = 1;
    *out = c;
    return 0;
}

void tlclient_close(tlclient_t *c)
{
    if (!c)
        return;
    close(c->fd);
    free(c->out);
    free(c->in);
    free(c->arena.base);
    free(c);
}

static int grow(uint8_t **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 65536;
    while (n < need)
        n *= 2;
    uint8_t *p = realloc(*buf, n);
    if (!p)
        return -ENOMEM;
    *buf = p;
    *cap = n;
    return 0;
}

/* Sets err (may be NULL) to a local error: what the client found wrong. */
static int local_err(codec_error_t *err, int rc, const char *fmt, const char *what)
{
    if (err) {
        err->code = CODEC_E_INTERNAL;
        err->offset = CODEC_NO_OFFSET;
        snprintf(err->msg, sizeof err->msg, fmt, what);
    }
    return rc;
}

static int write_all(tlclient_t *c, const uint8_t *p, size_t len, int64_t deadline)
{
    if (c->broken)
        return -EPIPE;
    size_t sent = 0;
    while (sent < len) {
        ssize_t n = send(c->fd, p + sent, len - sent, MSG_NOSIGNAL);
        int rc = 0;
        if (n > 0)
            sent += (size_t)n;
        else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            rc = wait_fd(c->fd, POLLOUT, deadline);
        else if (n < 0 && errno != EINTR)
            rc = -errno;
        if (rc) {
            if (sent > 0)
                c->broken = 1; /* the server would read the next frame after half of this */
            return rc;
        }
    }
    return 0;
}

/* Encodes one request of any type into c->out (grown to fit) and sends it
 * by deadline. */
static int send_msg(tlclient_t *c, codec_msg_t *m, uint64_t *request_id, int64_t deadline,
                    codec_error_t *err)
{
    m->hdr.request_id = c->next_id++;
    size_t len = 0;
    int rc = codec_encode_msg(c->out, c->out_cap, m, &len, err);
    if (rc == CODEC_NEED_MORE) {
        if (grow(&c->out, &c->out_cap, len) != 0)
            return -ENOMEM;
        rc = codec_encode_msg(c->out, c->out_cap, m, &len, err);
    }
    if (rc != CODEC_OK)
        return rc;
    if (err) { /* the sizing call above left NEED_MORE in it */
        err->code = CODEC_OK;
        err->offset = CODEC_NO_OFFSET;
        err->msg[0] = '\0';
    }
    if (request_id)
        *request_id = m->hdr.request_id;
    rc = write_all(c, c->out, len, deadline);
    if (rc == -ETIMEDOUT)
        local_err(err, rc, "%s", c->broken ? "send timed out part-way through the frame: the "
                  "connection is broken, reconnect" : "send timed out (the server reads nothing)");
    return rc;
}

int tlclient_send_predict(tlclient_t *c, const codec_predict_t *req, uint64_t *request_id,
                          codec_error_t *err)
{
    codec_msg_t m = {.hdr.type = CODEC_PREDICT, .u.predict = *req};
    return send_msg(c, &m, request_id, now_ms() + SEND_WAIT_MS, err);
}

int tlclient_send_train(tlclient_t *c, const codec_train_t *req, uint64_t *request_id,
                        codec_error_t *err)
{
    codec_msg_t m = {.hdr.type = CODEC_TRAIN, .u.train = *req};
    return send_msg(c, &m, request_id, now_ms() + SEND_WAIT_MS, err);
}

int tlclient_send_feedback(tlclient_t *c, const codec_feedback_t *fb, uint64_t *request_id,
                           codec_error_t *err)
{
    codec_msg_t m = {.hdr.type = CODEC_FEEDBACK, .u.feedback = *fb};
    return send_msg(c, &m, request_id, now_ms() + SEND_WAIT_MS, err);
}

/* tlclient_recv by an absolute deadline. */
static int recv_until(tlclient_t *c, codec_msg_t *msg, int64_t deadline, codec_error_t *err)
{
    /* drop the frame handed out last time */
    if (c->in_skip) {
        memmove(c->in, c->in + c->in_skip, c->in_len - c->in_skip);
        c->in_len -= c->in_skip;
        c->in_skip = 0;
    }
    for (;;) {
        codec_arena_reset(&c->arena);
        int rc = codec_decode_frame(c->in, c->in_len, &c->arena, msg, err);
        if (rc == CODEC_OK) {
            c->in_skip = CODEC_HEADER_SIZE + msg->hdr.payload_len;
            return msg->hdr.type == CODEC_ERROR ? msg->u.error.code : 0;
        }
        if (rc != CODEC_NEED_MORE)
            return -EPROTO; /* the server sent something we cannot read */
        if (grow(&c->in, &c->in_cap, c->in_len + 65536) != 0)
            return -ENOMEM;
        ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
        if (n > 0) {
            c->in_len += (size_t)n;
        } else if (n == 0) {
            return -ECONNRESET;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            rc = wait_fd(c->fd, POLLIN, deadline);
            if (rc)
                return rc;
        } else if (errno != EINTR) {
            return -errno;
        }
    }
}

int tlclient_recv(tlclient_t *c, codec_msg_t *msg, int timeout_ms, codec_error_t *err)
{
    return recv_until(c, msg, now_ms() + timeout_ms, err);
}

/* The server's ERROR frame in *msg, code rc, into err. */
static void server_err(codec_error_t *err, const codec_msg_t *msg, int rc)
{
    if (!err)
        return;
    size_t n = msg->u.error.msg_len < sizeof err->msg - 1 ? msg->u.error.msg_len
                                                          : sizeof err->msg - 1;
    err->code = (uint16_t)rc;
    err->offset = CODEC_NO_OFFSET;
    memcpy(err->msg, msg->u.error.msg, n);
    err->msg[n] = '\0';
}

/* Waits for the answer to request id: 0 with *msg of type `want`, the
 * server's ERROR code (its message copied into *err), or -errno / -EPROTO.
 * Frames for other ids (answers to earlier pipelined requests) are skipped. */
static int await_answer(tlclient_t *c, uint64_t id, uint8_t want, codec_msg_t *msg,
                        int64_t deadline, codec_error_t *err)
{
    for (;;) {
        int rc = recv_until(c, msg, deadline, err);
        if (rc == -ETIMEDOUT)
            return local_err(err, rc, "%s", "no answer by the deadline");
        if (rc < 0)
            return rc;
        if (rc > 0 && msg->hdr.request_id == 0) { /* about the connection, before a close */
            server_err(err, msg, rc);
            return rc;
        }
        if (msg->hdr.request_id != id)
            continue;
        if (rc > 0) {
            server_err(err, msg, rc);
            return rc;
        }
        if (msg->hdr.type != want)
            return local_err(err, -EPROTO, "%s", "the answer is of another type than the request's");
        return 0;
    }
}

int tlclient_predict(tlclient_t *c, const codec_predict_t *req, float *scores, uint64_t *version,
                     int timeout_ms, codec_error_t *err)
{
    uint64_t id;
    int64_t deadline = now_ms() + timeout_ms;
    codec_msg_t m = {.hdr.type = CODEC_PREDICT, .u.predict = *req};
    int rc = send_msg(c, &m, &id, deadline, err);
    if (rc != 0)
        return rc;
    codec_msg_t msg;
    if ((rc = await_answer(c, id, CODEC_PREDICT_RESULT, &msg, deadline, err)) != 0)
        return rc;
    if (msg.u.result.items != req->items)
        return local_err(err, -EPROTO, "%s", "the answer has another item count than the request");
    memcpy(scores, msg.u.result.scores, (size_t)req->items * sizeof *scores);
    if (version)
        *version = msg.u.result.version;
    return 0;
}

int tlclient_train(tlclient_t *c, const codec_train_t *req, uint32_t *accepted, int timeout_ms,
                   codec_error_t *err)
{
    uint64_t id;
    int64_t deadline = now_ms() + timeout_ms;
    codec_msg_t m = {.hdr.type = CODEC_TRAIN, .u.train = *req};
    int rc = send_msg(c, &m, &id, deadline, err);
    if (rc != 0)
        return rc;
    codec_msg_t msg;
    if ((rc = await_answer(c, id, CODEC_TRAIN_ACK, &msg, deadline, err)) != 0)
        return rc;
    if (msg.u.ack.accepted > req->samples)
        return local_err(err, -EPROTO, "%s", "the answer accepts more samples than were sent");
    if (accepted)
        *accepted = msg.u.ack.accepted;
    return 0;
}

int tlclient_feedback(tlclient_t *c, const codec_feedback_t *fb, codec_feedback_ack_t *ack,
                      codec_refused_t *refusals, uint32_t cap, int timeout_ms, codec_error_t *err)
{
    uint64_t id;
    int64_t deadline = now_ms() + timeout_ms;
    codec_msg_t m = {.hdr.type = CODEC_FEEDBACK, .u.feedback = *fb};
    int rc = send_msg(c, &m, &id, deadline, err);
    if (rc != 0)
        return rc;
    codec_msg_t msg;
    if ((rc = await_answer(c, id, CODEC_FEEDBACK_ACK, &msg, deadline, err)) != 0)
        return rc;
    const codec_feedback_ack_t *got = &msg.u.feedback_ack;
    if (got->accepted + got->refused != fb->events)
        return local_err(err, -EPROTO, "%s", "the answer counts other events than were sent");
    uint32_t n = got->refused < cap ? got->refused : cap;
    if (n)
        memcpy(refusals, got->refusal, n * sizeof *refusals);
    *ack = (codec_feedback_ack_t){
        .accepted = got->accepted, .refused = got->refused, .refusal = n ? refusals : NULL};
    return 0;
}

int tlclient_ping(tlclient_t *c, int timeout_ms)
{
    uint8_t frame[CODEC_HEADER_SIZE + 8];
    codec_ping_t p = {(const uint8_t *)"tlclient", 8};
    uint64_t id = c->next_id++;
    size_t len;
    if (codec_encode_ping(frame, sizeof frame, CODEC_PING, id, &p, &len, NULL) != CODEC_OK)
        return -EINVAL;
    int64_t deadline = now_ms() + timeout_ms;
    int rc = write_all(c, frame, len, deadline);
    codec_msg_t msg;
    while (rc == 0) {
        rc = recv_until(c, &msg, deadline, NULL);
        if (rc > 0 && msg.hdr.request_id == 0)
            return rc; /* the server's word on the connection */
        if (rc == 0 && msg.hdr.request_id == id)
            return msg.hdr.type == CODEC_PONG ? 0 : -EPROTO;
    }
    return rc;
}
