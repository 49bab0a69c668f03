/*
 * redis_adapter.c — the peer of the benchmark suite: the prediction service a
 * team would build on Redis.  It speaks tlserve's wire format (docs/wire.md,
 * through libtlcodec) so that tlgen can drive it exactly like tlserve, keeps
 * the LR weights in Redis (loaded by redis_load.c) and scores like
 * model/model.c.
 *
 *   redis_adapter --port P --redis-port R [--redis-host H] [--threads T]
 *                 [--chunk 1000] [--model NAME] [--version 1]
 *
 * ONE PREDICT:
 *   1. codec_decode_predict into the worker's arena;
 *   2. keys = [ 0 (bias) | shared ids | item 0 ids | item 1 ids | ... ], the
 *      order model_score looks them up in;
 *   3. the keys go to Redis as MGET commands of --chunk keys each, ALL of
 *      them appended to the hiredis output buffer before the first reply is
 *      read (one pipelined burst, one round trip), each key the id's 8
 *      little-endian bytes (redis_load.c's encoding);
 *   4. each reply element is a 4-byte binary32 weight, or nil: a missing key
 *      weighs 0, as in tlserve;
 *   5. the weights arrive in model_score's lookup order, so model_lr_scores
 *      (model.h) scores them with tlserve's own code: the same floats for the
 *      same weights;
 *   6. PREDICT_RESULT with version --version (default 1).
 *   PING gets PONG; anything else an ERROR frame (codec_encode_errmsg).
 *
 * THREADS AND CONNECTIONS:
 *
 *   main thread: accept() ---- round robin ----> worker 0 .. T-1
 *   worker: epoll over its client connections + ONE blocking hiredis
 *           connection to Redis; frames are answered in order, one at a time.
 *
 * Requests pipelined on a client connection are cut out of the input buffer
 * and answered in order; the output is written without blocking (EPOLLOUT
 * when the socket is full).  A worker waits for Redis while it scores, as a
 * synchronous hiredis service does; with T workers at most T requests are at
 * Redis at once.  Redis itself executes commands on one thread.
 *
 * FRAMING ERRORS (bad magic, version, reserved bits, payload over 16 MiB)
 * close the connection after one ERROR frame with request id 0, like tlserve.
 * A Redis failure answers INTERNAL and reconnects.
 *
 * THREAD SAFETY: a connection and a Redis context belong to one worker; the
 * acceptor only registers new connections (epoll_ctl is thread-safe).
 */
#define _GNU_SOURCE /* accept4 */
#include "codec/codec.h"
#include "model/model.h"

#include <hiredis/hiredis.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <fcntl.h>

#define MAX_BACKLOG (64u << 20) /* unsent output bytes before a connection is dropped */
#define READ_CHUNK (256u << 10)

typedef struct opts {
    int port;
    const char *redis_host;
    int redis_port;
    int threads;
    unsigned chunk;      /* keys per MGET */
    const char *model;   /* NULL: any model name is accepted */
    uint64_t version;    /* reported in PREDICT_RESULT, accepted as a pin */
} opts_t;

typedef struct conn {
    int fd;
    uint8_t *in;         /* received bytes not yet answered */
    size_t in_len, in_cap;
    uint8_t *out;        /* encoded responses; out[out_off..out_len) unsent */
    size_t out_off, out_len, out_cap;
    bool want_out;       /* registered for EPOLLOUT */
    bool closing;        /* framing lost or peer gone: drop after flushing */
} conn_t;

typedef struct worker {
    const opts_t *o;
    int id;
    int epfd;
    pthread_t tid;
    redisContext *rc;    /* owned; one blocking connection to Redis */
    codec_arena_t arena; /* decoded request; grown to the largest frame */
    uint64_t *keys;      /* [bias | shared | items ...]; keys_cap entries */
    float *w;            /* weights of keys */
    size_t keys_cap;
    float scores[CODEC_MAX_ITEMS];
    codec_block_t blocks[CODEC_MAX_ITEMS]; /* the request's item blocks, for model_lr_scores */
    const char **argv;   /* MGET argv for one chunk: "MGET" + chunk keys */
    size_t *argvlen;
    unsigned long long requests, redis_errors;
} worker_t;

/* ---- small helpers ------------------------------------------------------ */

static int grow(void *pbuf, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 4096;
    while (n < need)
        n *= 2;
    void *p = realloc(*(void **)pbuf, n * elem);
    if (!p)
        return -ENOMEM;
    *(void **)pbuf = p;
    *cap = n;
    return 0;
}

static uint8_t *out_room(conn_t *c, size_t bytes)
{
    if (c->out_off == c->out_len)
        c->out_off = c->out_len = 0;
    if (grow(&c->out, &c->out_cap, c->out_len + bytes, 1) != 0)
        return NULL;
    return c->out + c->out_len;
}

__attribute__((format(printf, 4, 5))) static int send_error(conn_t *c, uint64_t id, int code,
                                                            const char *fmt, ...)
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
    uint8_t *dst = out_room(c, need);
    if (!dst)
        return -ENOMEM;
    if (codec_encode_errmsg(dst, need, id, &e, &len, NULL) != CODEC_OK)
        return -EINVAL; /* sized above: a bug */
    c->out_len += len;
    return 0;
}

/* ---- Redis --------------------------------------------------------------- */

__attribute__((cold)) static int redis_connect(worker_t *w)
{
    if (w->rc)
        redisFree(w->rc);
    struct timeval tv = {5, 0};
    w->rc = redisConnectWithTimeout(w->o->redis_host, w->o->redis_port, tv);
    if (!w->rc || w->rc->err) {
        fprintf(stderr, "redis_adapter: worker %d: cannot connect to Redis at %s:%d: %s\n", w->id,
                w->o->redis_host, w->o->redis_port, w->rc ? w->rc->errstr : "out of memory");
        if (w->rc)
            redisFree(w->rc);
        w->rc = NULL;
        return -1;
    }
    return 0;
}

/* Fetches the weights of keys[0..n) into out (0 for a missing key): every
 * MGET chunk is appended first, then the replies are read in order.  Returns
 * 0, or -1 with why filled (the context is then dropped: replies may be
 * pending on it). */
static int fetch(worker_t *w, const uint64_t *keys, size_t n, float *out, char *why, size_t wl)
{
    if (!w->rc && redis_connect(w) != 0) {
        snprintf(why, wl, "Redis at %s:%d is unreachable", w->o->redis_host, w->o->redis_port);
        return -1;
    }
    const unsigned chunk = w->o->chunk;
    size_t chunks = (n + chunk - 1) / chunk;
    for (size_t off = 0; off < n; off += chunk) {
        size_t m = n - off < chunk ? n - off : chunk;
        for (size_t j = 0; j < m; j++)
            w->argv[1 + j] = (const char *)&keys[off + j]; /* little-endian in memory */
        if (redisAppendCommandArgv(w->rc, (int)m + 1, w->argv, w->argvlen) != REDIS_OK)
            goto redis_fail;
    }
    for (size_t k = 0, off = 0; k < chunks; k++, off += chunk) {
        size_t m = n - off < chunk ? n - off : chunk;
        redisReply *r = NULL;
        if (redisGetReply(w->rc, (void **)&r) != REDIS_OK || !r)
            goto redis_fail;
        if (r->type != REDIS_REPLY_ARRAY || r->elements != m) {
            snprintf(why, wl, "Redis answered MGET of %zu keys with %s", m,
                     r->type == REDIS_REPLY_ERROR ? r->str : "something other than an array of that size");
            freeReplyObject(r);
            goto drop;
        }
        for (size_t j = 0; j < m; j++) {
            const redisReply *e = r->element[j];
            if (e->type == REDIS_REPLY_STRING && e->len == 4) {
                memcpy(&out[off + j], e->str, 4);
            } else if (e->type == REDIS_REPLY_NIL) {
                out[off + j] = 0.0f;
            } else {
                snprintf(why, wl, "Redis value of key %zu is not a 4-byte weight", off + j);
                freeReplyObject(r);
                goto drop;
            }
        }
        freeReplyObject(r);
    }
    return 0;
redis_fail:
    snprintf(why, wl, "Redis: %s", w->rc->errstr[0] ? w->rc->errstr : "connection lost");
drop:
    w->redis_errors++;
    redisFree(w->rc);
    w->rc = NULL;
    return -1;
}

/* ---- protocol ------------------------------------------------------------ */

static int answer_predict(worker_t *w, conn_t *c, const codec_header_t *h, const uint8_t *payload)
{
    codec_predict_t req;
    codec_error_t err;
    size_t bound = codec_arena_bound(h->payload_len);
    int rc = grow(&w->arena.base, &w->arena.cap, bound, 1);
    if (rc != 0)
        return rc;
    codec_arena_reset(&w->arena);
    rc = codec_decode_predict(payload, h->payload_len, h->flags, &w->arena, &req, &err);
    if (rc != CODEC_OK)
        return send_error(c, h->request_id, rc, "%s", err.msg);
    if (w->o->model && strcmp(req.name, w->o->model) != 0)
        return send_error(c, h->request_id, CODEC_E_UNKNOWN_MODEL,
                          "unknown model '%s' (this server has '%s')", req.name, w->o->model);
    if (req.version != 0 && req.version != w->o->version)
        return send_error(c, h->request_id, CODEC_E_UNKNOWN_VERSION,
                          "model '%s' version %llu is not loaded (active: %llu)", req.name,
                          (unsigned long long)req.version, (unsigned long long)w->o->version);

    size_t total = 1 + req.shared.n;
    for (uint32_t i = 0; i < req.items; i++)
        total += req.item[i].n;
    size_t cap = w->keys_cap;
    if ((rc = grow(&w->keys, &cap, total, sizeof *w->keys)) != 0 ||
        (rc = grow(&w->w, &w->keys_cap, total, sizeof *w->w)) != 0)
        return rc;
    uint64_t *k = w->keys;
    *k++ = 0; /* MODEL_BIAS_ID */
    memcpy(k, req.shared.ids, (size_t)req.shared.n * sizeof *k);
    k += req.shared.n;
    for (uint32_t i = 0; i < req.items; i++) {
        memcpy(k, req.item[i].ids, (size_t)req.item[i].n * sizeof *k);
        k += req.item[i].n;
    }

    char why[256];
    if (fetch(w, w->keys, total, w->w, why, sizeof why) != 0)
        return send_error(c, h->request_id, CODEC_E_INTERNAL, "%s", why);

    /* the weights are in model_score's lookup order: score with its code */
    codec_block_t shared = {req.shared.ids, req.shared.values, req.shared.n};
    for (uint32_t i = 0; i < req.items; i++)
        w->blocks[i] = (codec_block_t){req.item[i].ids, req.item[i].values, req.item[i].n};
    model_lr_scores(w->w, &shared, w->blocks, req.items, w->scores);

    codec_result_t res = {w->o->version, req.items, w->scores};
    size_t need = CODEC_HEADER_SIZE + 8 + CODEC_MAX_VARINT + 4 * (size_t)req.items, len;
    uint8_t *dst = out_room(c, need);
    if (!dst)
        return -ENOMEM;
    if (codec_encode_result(dst, need, h->request_id, &res, &len, &err) != CODEC_OK)
        return -EINVAL; /* sized above, scores from model_lr_scores: a bug */
    c->out_len += len;
    w->requests++;
    return 0;
}

static int answer_ping(conn_t *c, const codec_header_t *h, const uint8_t *payload)
{
    codec_ping_t p;
    codec_error_t err;
    int rc = codec_decode_ping(payload, h->payload_len, &p, &err);
    if (rc != CODEC_OK)
        return send_error(c, h->request_id, rc, "%s", err.msg);
    size_t need = CODEC_HEADER_SIZE + p.len, len;
    uint8_t *dst = out_room(c, need);
    if (!dst)
        return -ENOMEM;
    if (codec_encode_ping(dst, need, CODEC_PONG, h->request_id, &p, &len, NULL) != CODEC_OK)
        return -EINVAL; /* decoded above: a bug */
    c->out_len += len;
    return 0;
}

/* Writes what it can without blocking.  Returns 0, or send's -errno when
 * the peer is gone (-EPIPE, -ECONNRESET, ...). */
static int flush(conn_t *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (n > 0) {
            c->out_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        return n < 0 ? -errno : -EPIPE;
    }
    c->out_off = c->out_len = 0;
    return 0;
}

/* Answers every complete frame in c->in, in order, flushing after each so
 * that a client that went away stops costing Redis work.  Returns 0, or a
 * -errno to drop the connection: -EPROTO after a framing-error frame was
 * queued, -ENOBUFS when the client leaves over MAX_BACKLOG unread, or the
 * failure of an answer or of the flush. */
static int process(worker_t *w, conn_t *c)
{
    size_t pos = 0;
    int rc = 0;
    while (c->in_len - pos >= CODEC_HEADER_SIZE) {
        codec_header_t h;
        codec_error_t err;
        int e = codec_parse_header(c->in + pos, c->in_len - pos, &h, &err);
        if (e != CODEC_OK) {
            send_error(c, 0, e, "%s; closing the connection", err.msg);
            c->closing = true;
            rc = -EPROTO;
            break;
        }
        size_t frame = CODEC_HEADER_SIZE + (size_t)h.payload_len;
        if (c->in_len - pos < frame)
            break;
        const uint8_t *payload = c->in + pos + CODEC_HEADER_SIZE;
        int a;
        if (h.type == CODEC_PREDICT)
            a = answer_predict(w, c, &h, payload);
        else if (h.type == CODEC_PING)
            a = answer_ping(c, &h, payload);
        else
            a = send_error(c, h.request_id, CODEC_E_UNKNOWN_TYPE,
                           "message type %u is not a request this server accepts", h.type);
        pos += frame;
        if ((rc = a) != 0 || (rc = flush(c)) != 0) {
            c->closing = true;
            break;
        }
    }
    if (pos > 0) {
        memmove(c->in, c->in + pos, c->in_len - pos);
        c->in_len -= pos;
    }
    if (c->out_len - c->out_off > MAX_BACKLOG) {
        c->closing = true;
        rc = -ENOBUFS;
    }
    return rc;
}

static void conn_close(worker_t *w, conn_t *c)
{
    epoll_ctl(w->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c->in);
    free(c->out);
    free(c);
}

static void set_out_interest(worker_t *w, conn_t *c)
{
    bool want = c->out_off < c->out_len;
    if (want == c->want_out)
        return;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | (want ? EPOLLOUT : 0), .data.ptr = c};
    epoll_ctl(w->epfd, EPOLL_CTL_MOD, c->fd, &ev);
    c->want_out = want;
}

static void on_event(worker_t *w, conn_t *c, uint32_t events)
{
    if (events & EPOLLOUT) {
        if (flush(c) != 0)
            goto drop;
    }
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
        /* One read per event: epoll is level-triggered, so a connection with
         * more input comes back, after the worker's other connections. */
        if (grow(&c->in, &c->in_cap, c->in_len + READ_CHUNK, 1) != 0)
            goto drop;
        ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
        if (n > 0) {
            c->in_len += (size_t)n;
            if (process(w, c) != 0) {
                flush(c); /* the framing-error frame, best effort */
                goto drop;
            }
        } else if (n == 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) {
            goto drop; /* EOF or error */
        }
    }
    set_out_interest(w, c);
    return;
drop:
    conn_close(w, c);
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    struct epoll_event evs[64];
    for (;;) {
        int n = epoll_wait(w->epfd, evs, 64, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            perror("redis_adapter: epoll_wait");
            return NULL;
        }
        for (int i = 0; i < n; i++)
            on_event(w, evs[i].data.ptr, evs[i].events);
    }
    return NULL;
}

/* ---- setup ---------------------------------------------------------------- */

static volatile sig_atomic_t stop;
static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

__attribute__((cold)) static void usage(FILE *f)
{
    fputs("usage: redis_adapter --port P --redis-port R [options]\n"
          "A tlserve-wire prediction server whose LR weights live in Redis (redis_load):\n"
          "each PREDICT fetches its ids with pipelined MGETs and scores like tlserve.\n\n"
          "  --port P          data plane port on 127.0.0.1 (required)\n"
          "  --bind ADDR       IPv4 address to listen on (default 127.0.0.1)\n"
          "  --redis-host H    Redis address (default 127.0.0.1)\n"
          "  --redis-port R    Redis port (required)\n"
          "  --threads T       worker threads, one Redis connection each (default 2)\n"
          "  --chunk N         keys per MGET (default 1000)\n"
          "  --model NAME      accept only this model name (default: any)\n"
          "  --version V       version reported in PREDICT_RESULT (default 1)\n"
          "  --help            print this\n",
          f);
}

int main(int argc, char **argv)
{
    opts_t o = {.redis_host = "127.0.0.1", .threads = 2, .chunk = 1000, .version = 1};
    const char *bind_addr = "127.0.0.1";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "redis_adapter: %s needs a value\n", argv[i]);
            return 2;
        }
        const char *f = argv[i], *v = argv[++i];
        if (!strcmp(f, "--redis-host")) {
            o.redis_host = v;
            continue;
        }
        if (!strcmp(f, "--bind")) {
            bind_addr = v;
            continue;
        }
        if (!strcmp(f, "--model")) {
            o.model = v;
            continue;
        }
        char *end;
        errno = 0;
        unsigned long long x = strtoull(v, &end, 10);
        if (errno || *end || end == v || v[0] == '-') {
            fprintf(stderr, "redis_adapter: %s '%s' is not a number\n", f, v);
            return 2;
        }
        if (!strcmp(f, "--port") && x >= 1 && x <= 65535)
            o.port = (int)x;
        else if (!strcmp(f, "--redis-port") && x >= 1 && x <= 65535)
            o.redis_port = (int)x;
        else if (!strcmp(f, "--threads") && x >= 1 && x <= 256)
            o.threads = (int)x;
        else if (!strcmp(f, "--chunk") && x >= 1 && x <= 1000000)
            o.chunk = (unsigned)x;
        else if (!strcmp(f, "--version") && x >= 1)
            o.version = x;
        else {
            fprintf(stderr, "redis_adapter: unknown option or value out of range: %s %s\n", f, v);
            return 2;
        }
    }
    if (!o.port || !o.redis_port) {
        usage(stderr);
        return 2;
    }

    struct sigaction sa = {.sa_handler = on_signal}; /* no SA_RESTART: accept() returns */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    worker_t *ws = calloc((size_t)o.threads, sizeof *ws);
    if (!ws)
        return 1;
    for (int i = 0; i < o.threads; i++) {
        worker_t *w = &ws[i];
        w->o = &o;
        w->id = i;
        w->epfd = epoll_create1(EPOLL_CLOEXEC);
        w->argv = malloc((1 + (size_t)o.chunk) * sizeof *w->argv);
        w->argvlen = malloc((1 + (size_t)o.chunk) * sizeof *w->argvlen);
        if (w->epfd < 0 || !w->argv || !w->argvlen) {
            fprintf(stderr, "redis_adapter: worker setup failed\n");
            return 1;
        }
        w->argv[0] = "MGET";
        w->argvlen[0] = 4;
        for (unsigned j = 1; j <= o.chunk; j++)
            w->argvlen[j] = 8;
        if (redis_connect(w) != 0) /* fail fast: the bench wants a working peer */
            return 1;
    }

    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o.port)};
    if (inet_pton(AF_INET, bind_addr, &sin.sin_addr) != 1) {
        fprintf(stderr, "redis_adapter: --bind '%s' is not an IPv4 address\n", bind_addr);
        return 2;
    }
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sin, sizeof sin) != 0 || listen(lfd, 512) != 0) {
        fprintf(stderr, "redis_adapter: cannot listen on %s:%d: %s\n", bind_addr, o.port,
                strerror(errno));
        return 1;
    }
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &old); /* workers never take them: accept() does */
    for (int i = 0; i < o.threads; i++)
        if (pthread_create(&ws[i].tid, NULL, worker_main, &ws[i]) != 0) {
            fprintf(stderr, "redis_adapter: pthread_create failed\n");
            return 1;
        }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    fprintf(stderr, "redis_adapter: listening on %s:%d, %d workers, Redis %s:%d, MGET x %u\n",
            bind_addr, o.port, o.threads, o.redis_host, o.redis_port, o.chunk);

    unsigned next = 0;
    while (!stop) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE)
                continue;
            perror("redis_adapter: accept");
            break;
        }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        conn_t *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->fd = fd;
        worker_t *w = &ws[next++ % (unsigned)o.threads];
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
        if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            close(fd);
            free(c);
        }
    }
    unsigned long long reqs = 0, rerr = 0;
    for (int i = 0; i < o.threads; i++) {
        reqs += ws[i].requests; /* racy read at exit: a figure for the log only */
        rerr += ws[i].redis_errors;
    }
    fprintf(stderr, "redis_adapter: stopping after %llu predictions, %llu Redis errors\n", reqs,
            rerr);
    return 0;
}
