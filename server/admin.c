/*
 * admin.c — the admin plane: one thread running a libevent event_base with an
 * evhttp server on cfg.admin_bind:cfg.admin_port, and the front of the
 * background loads (loader.c), whose thread it starts and stops.
 *
 * ENDPOINTS
 *   GET  /healthz                 200 "ok" while the process runs, 503
 *                                 "draining" once SIGTERM/SIGINT is seen
 *   GET  /readyz                  200 when a model is active and the data plane listens, else 503
 *                                 (also 503 "draining" once draining)
 *   GET  /metrics                 Prometheus text format (below)
 *   GET  /v1/models               {"models":[{"name","version","kind","keys"}]}, and
 *                                 with --model-repo "repository": {"dir","model",
 *                                 "readable","latest","loading","refused":
 *                                 [{"version","error"}]} of its first model (repo.h),
 *                                 and "repositories": [...] that of every model
 *   POST /v1/models/{name}:load   body {"path":"/dir/of/snapshot"}; needs
 *                                 "Authorization: Bearer <admin-token>";
 *                                 202 and queued, or ?wait=1 (admin_load.c)
 *   GET  /v1/models/{name}:load   the latest load of that model (admin_load.c)
 *   POST /v1/models/{name}:rollback  token; the newest standby version
 *                                 becomes active (admin_models.c)
 *   POST /v1/models/{name}:activate  token; body {"version": N|"latest"}:
 *                                 activate and pin, or unpin (admin_models.c)
 *   POST /v1/models/{name}:refuse    token; body {"version": N, "reason": "..."}:
 *                                 never serve N (rolled back first when active,
 *                                 dropped when kept) until activated (admin_models.c)
 *   GET  /v1/models/{name}/versions  every version known and its state
 *                                 (admin_models.c)
 *   GET  /v1/models/{name}/digest    a fingerprint of the active version's
 *                                 weights, bit for bit (admin_digest.c)
 *   /v1/models' "repository" also shows the "pinned" version (0: none) and
 *   the "rolled_back" ones.
 *   POST /v1/sync:turn            token; partitioned replicas publish their
 *                                 accumulated updates now (online_sync_turn):
 *                                 202, or 409 without --bus-mode partitioned
 *   HEAD is accepted wherever GET is.  Other paths 404, other methods 405
 *   (with Allow), bodies over 64 KiB 413 (evhttp refuses them while reading).
 *   No handler waits for a load: health, readiness, metrics and the model
 *   list are computed from memory, and a load request reads only the
 *   snapshot's small manifest before it queues, so the admin plane answers
 *   within milliseconds during a load.
 *
 * WAITING LOADS
 *   A POST ...:load with ?wait=1 is queued by admin_load.c and then kept
 *   here (admin__wait_for_load) until the loader reports the end of its load
 *   through done_ev; it is answered 200 with the new version's JSON, 409
 *   with the load's error, or 503 when the server shuts down first.
 *
 * METRICS (the text is built by admin_metrics.c)
 *   Counters come from SERVER_COUNTERS (X-macro) summed over the workers,
 *   each with HELP/TYPE; tlserve_errors_total is followed by its own family
 *   tlserve_errors_by_code_total{code="N"} (one sample per wire error code
 *   seen), so sum() over either family counts each error once.  Request
 *   latency is kept in the workers' fine log-linear histogram (server.h:
 *   16 buckets per power of two of nanoseconds, each at most 6.25% wide) and
 *   shown two ways: tlserve_request_latency_seconds, a Prometheus histogram
 *   with a fixed list of le= bounds in seconds (a fine bucket counts under a
 *   bound when it ends at or below it; the last fine bucket is open-ended,
 *   so it shows up in +Inf only), and tlserve_request_latency_quantile_seconds,
 *   quantile gauges from all the fine buckets.  Counts are read with relaxed
 *   loads while workers write: a scrape is not a snapshot, but the histogram
 *   is self-consistent (+Inf == _count, from the same loads).  Loads:
 *   tlserve_model_loads_total{result="ok|failed"} (loads accepted with 202 or
 *   wait, by how they ended), tlserve_model_load_seconds (the last ended
 *   load, loading to end) and tlserve_model_loads_in_progress (queued or
 *   running).  The repository: tlserve_model_versions_refused_total,
 *   tlserve_model_repo_errors_total, tlserve_model_repo_scans_total.
 *
 * THREAD SAFETY
 *   admin_start/admin_stop run on the main thread; every handler runs on the
 *   admin thread.  The state is one static struct (one admin plane per
 *   process).  Models are pinned with server_model_acquire like a worker.
 *   Ended loads travel from the loader thread to the admin thread through
 *   A.ended (a list under A.ended_lock) and done_ev; the waiting requests are
 *   touched by the admin thread only.
 *
 * OUT OF DESCRIPTORS
 *   A failed accept pauses the admin listener for ADMIN_ACCEPT_PAUSE_MS
 *   (libevent would retry at once, spinning the thread while the process is
 *   out of descriptors), counted in tlserve_accept_errors_total.
 */
#include "admin_impl.h"
#include "codec/codec.h"
#include "gate.h"
#include "guard.h"
#include "log.h"
#include "online.h"
#include "repo.h"
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <event2/thread.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define ADMIN_MAX_HEADERS (16 * 1024)
#define ADMIN_TIMEOUT_S 30
#define ADMIN_WAIT_TIMEOUT_S 3600 /* a ?wait=1 connection: as long as a load may take */
#define ADMIN_STOP_CHECK_MS 50    /* stop_ev's period: the bound on a lost wakeup */

typedef struct ended {
    loader_status_t st;
    struct ended *next;
} ended_t;

typedef struct waiter {
    struct evhttp_request *req; /* answered and freed by evhttp on reply */
    uint64_t load;              /* the load it waits for */
    struct waiter *next;
} waiter_t;

static struct admin {
    server_t *srv;
    struct event_base *base;
    struct evhttp *http;
    struct event *done_ev;       /* activated by the loader when a load ends */
    struct event *stop_ev;       /* timer every ADMIN_STOP_CHECK_MS, also activated by admin_stop */
    struct evconnlistener *listener; /* evhttp's, for the accept-error pause */
    struct event *accept_ev;     /* re-enables the listener after an accept error */
    uint64_t accept_warned;      /* accept errors when last logged; admin thread only */
    pthread_mutex_t ended_lock;  /* protects ended and ended_tail */
    ended_t *ended;              /* loads ended, not yet seen by the admin thread, oldest first */
    ended_t **ended_tail;        /* where the next one is linked */
    waiter_t *waiters;           /* ?wait=1 requests; admin thread only */
    _Atomic bool stopping;       /* admin_stop has begun */
    _Atomic bool stop_requested; /* the loader has stopped: leave the loop (admin_stop sets it) */
    bool stop_handled;           /* on_stop_ev has acted on it; admin thread only */
    int stop_ticks;              /* stop_ev runs since then; admin thread only */
    bool answered_stopping;      /* a waiter was answered after that; admin thread only */
    pthread_t thread;
    bool running;                /* main thread only */
} A = {.ended_lock = PTHREAD_MUTEX_INITIALIZER, .ended_tail = &A.ended};

/* ---- GET endpoints ---------------------------------------------------------- */

/* Both say 503 from the moment main sets srv->stopping (SIGTERM/SIGINT),
 * before the drain: a load balancer polling either stops sending new work
 * while the workers finish what they hold. */
static void on_healthz(struct evhttp_request *req)
{
    if (atomic_load(&A.srv->stopping))
        admin__reply_text(req, 503, "draining\n");
    else
        admin__reply_text(req, 200, "ok\n");
}

static void on_readyz(struct evhttp_request *req)
{
    if (atomic_load(&A.srv->stopping))
        admin__reply_text(req, 503, "draining\n");
    else if (!atomic_load(&A.srv->listening))
        admin__reply_text(req, 503, "data plane not listening yet\n");
    else if (server_model_any_active(A.srv))
        admin__reply_text(req, 200, "ready\n");
    else
        admin__reply_text(req, 503, "no model loaded\n");
}

static void on_models(struct evhttp_request *req)
{
    json_t *list = json_array();
    char names[SERVER_MODELS_MAX][64];
    size_t n = server_model_names(A.srv, names, SERVER_MODELS_MAX);
    for (size_t i = 0; i < n && i < SERVER_MODELS_MAX; i++) {
        server_model_t *sm = server_model_acquire_named(A.srv, names[i]);
        if (sm) {
            json_array_append_new(list, admin__model_json(sm->model));
            server_model_release(sm);
        }
    }
    json_t *body = json_pack("{s:o}", "models", list);
    admin__repo_json(body);
    admin__reply_json(req, 200, body);
}

static void on_metrics(struct evhttp_request *req)
{
    struct evbuffer *b = evbuffer_new();
    if (!b) {
        admin__reply_text(req, 500, "out of memory\n");
        return;
    }
    admin__metrics(A.srv, b);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "text/plain; version=0.0.4; charset=utf-8");
    admin__count_reply(200);
    evhttp_send_reply(req, 200, "OK", b);
    evbuffer_free(b);
}

/* ---- auth, bodies, waiting loads --------------------------------------------------- */

/* 1 when given (glen bytes) equals want; the time taken depends on want's
 * length only, not on where the first difference is. */
static int token_equal(const char *given, size_t glen, const char *want)
{
    size_t wlen = strlen(want);
    volatile unsigned char diff = glen != wlen;
    for (size_t i = 0; i < wlen; i++)
        diff |= (unsigned char)want[i] ^ (unsigned char)(i < glen ? given[i] : 0);
    return diff == 0;
}

int admin__check_auth(struct evhttp_request *req)
{
    const char *want = A.srv->cfg.admin_token;
    if (want[0] == '\0') {
        admin__reply_error(req, 403,
                    "no admin token configured: state-changing calls are disabled "
                    "(start tlserve with --admin-token)");
        return -1;
    }
    const char *h = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    if (h && strncasecmp(h, "Bearer ", 7) == 0) {
        const char *t = h + 7;
        while (*t == ' ')
            t++;
        size_t n = strlen(t);
        while (n > 0 && t[n - 1] == ' ')
            n--;
        if (token_equal(t, n, want))
            return 0;
    }
    evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate", "Bearer");
    admin__reply_error(req, 401,
                h ? "wrong admin token" : "missing 'Authorization: Bearer <token>' header");
    LOG(LL_WARN, "admin: refused %s %s (%s)", "POST", evhttp_request_get_uri(req),
        h ? "wrong token" : "no token");
    return -1;
}

long admin__body(struct evhttp_request *req, char *buf, size_t max)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    if (len > max) {
        admin__reply_error(req, 413, "body of %zu bytes is over the %zu byte limit", len, max);
        return -1;
    }
    evbuffer_copyout(in, buf, len);
    buf[len] = '\0';
    return (long)len;
}

static int valid_name(const char *s, size_t n)
{
    if (n == 0 || n >= sizeof((store_meta_t *)0)->model_name)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (!codec_name_char((unsigned char)s[i]))
            return 0;
    }
    return 1;
}


/* Answers a ?wait=1 request for the ended load st as a synchronous load. */
static void answer_waiter(struct evhttp_request *req, const loader_status_t *st)
{
    admin__unhold(req);
    if (st->state == LOADER_DONE)
        admin__reply_json(req, 200, admin__version_json(st->model, st->version, st->kind, st->keys));
    else
        admin__reply_error(req, st->shutdown ? 503 : 409, "%s", st->error);
}

/* done_ev: answers the waiting requests of every load that ended.  Returns
 * how many requests it answered. */
static int drain_ended(void)
{
    pthread_mutex_lock(&A.ended_lock);
    ended_t *e = A.ended;
    A.ended = NULL;
    A.ended_tail = &A.ended;
    pthread_mutex_unlock(&A.ended_lock);

    int answered = 0;
    while (e) { /* in the order the loads ended */
        for (waiter_t **pw = &A.waiters; *pw;) {
            waiter_t *w = *pw;
            if (w->load != e->st.id) {
                pw = &w->next;
                continue;
            }
            answer_waiter(w->req, &e->st);
            answered++;
            *pw = w->next;
            free(w);
        }
        ended_t *next = e->next;
        free(e);
        e = next;
    }
    return answered;
}

static void on_done_ev(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what, (void)arg;
    drain_ended();
}

/* loader_done_fn: on the loader thread (or main, in loader_stop). */
static void on_load_ended(const loader_status_t *st, void *arg)
{
    (void)arg;
    ended_t *e = malloc(sizeof *e);
    if (!e)
        abort(); /* a few KB on the control plane */
    e->st = *st;
    e->next = NULL;
    pthread_mutex_lock(&A.ended_lock);
    *A.ended_tail = e;
    A.ended_tail = &e->next;
    pthread_mutex_unlock(&A.ended_lock);
    event_active(A.done_ev, EV_READ, 0); /* thread-safe: the base is notifiable */
}

struct event_base *admin__base(void) { return A.base; }

void admin__hold(struct evhttp_request *req)
{
    evhttp_connection_set_timeout(evhttp_request_get_connection(req), ADMIN_WAIT_TIMEOUT_S);
}

void admin__unhold(struct evhttp_request *req)
{
    if (atomic_load(&A.stopping))
        A.answered_stopping = true; /* on_stop_ev lets this reply flush */
    struct evhttp_connection *evcon = evhttp_request_get_connection(req); /* NULL: client left */
    if (evcon) /* back to the normal idle timeout for what follows on this connection */
        evhttp_connection_set_timeout(evcon, ADMIN_TIMEOUT_S);
}

bool admin__stop_begun(void) { return A.stop_handled; }

void admin__wait_for_load(struct evhttp_request *req, uint64_t load)
{
    /* Answered by drain_ended: the load cannot have ended before the
     * caller's handler returns, since ended loads are seen on this thread. */
    waiter_t *w = malloc(sizeof *w);
    if (!w)
        abort();
    *w = (waiter_t){req, load, A.waiters};
    A.waiters = w;
    admin__hold(req);
}


/* ---- routing ------------------------------------------------------------------ */

static int is_get(enum evhttp_cmd_type m)
{
    return m == EVHTTP_REQ_GET || m == EVHTTP_REQ_HEAD;
}

static void method_not_allowed(struct evhttp_request *req, const char *allow)
{
    evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", allow);
    admin__reply_error(req, 405, "method not allowed; use %s", allow);
}

/* POST /v1/sync:turn: a turn of the update exchange now (a test or a bench
 * that steps replicas in lockstep; an operator before a planned stop). */
static void on_sync_turn(struct evhttp_request *req)
{
    if (admin__check_auth(req) != 0)
        return;
    if (online_sync_turn() != 0) {
        admin__reply_error(req, 409, "this server exchanges no updates (--online with "
                           "--bus-servers and --bus-mode partitioned)");
        return;
    }
    admin__reply_json(req, 202, json_pack("{s:s}", "turn", "queued"));
}

/* Routes the calls on one model: {name}:load, {name}:rollback,
 * {name}:activate, {name}/versions and {name}/digest (rest is the path after
 * "/v1/models/"); 1 when it answered, 0 when rest is none of them.  A
 * method without a handler gets 405 with the entry's Allow. */
static int model_call(struct evhttp_request *req, enum evhttp_cmd_type m, const char *rest)
{
    typedef void (*handler_fn)(server_t *, struct evhttp_request *, const char *);
    static const struct {
        const char *suffix;
        const char *allow;
        handler_fn post; /* NULL: POST not allowed */
        handler_fn get;  /* GET and HEAD; NULL: not allowed */
    } calls[] = {{":rollback", "POST", admin__on_rollback, NULL},
                 {":refuse", "POST", admin__on_refuse, NULL},
                 {":activate", "POST", admin__on_activate, NULL},
                 {"/versions", "GET, HEAD", NULL, admin__on_versions},
                 {"/digest", "GET, HEAD", NULL, admin__on_digest},
                 {":load", "GET, HEAD, POST", admin__on_load, admin__on_load_status}};
    size_t len = strlen(rest);
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        size_t sl = strlen(calls[i].suffix);
        if (len <= sl || strcmp(rest + len - sl, calls[i].suffix) != 0)
            continue;
        size_t n = len - sl;
        handler_fn fn = m == EVHTTP_REQ_POST ? calls[i].post : is_get(m) ? calls[i].get : NULL;
        if (!fn) {
            method_not_allowed(req, calls[i].allow);
        } else if (!valid_name(rest, n)) {
            admin__reply_error(req, 400, "bad model name in the URL (1..63 characters of [A-Za-z0-9_.-])");
        } else {
            char nm[64];
            memcpy(nm, rest, n);
            nm[n] = '\0';
            fn(A.srv, req, nm);
        }
        return 1;
    }
    return 0;
}

static void on_request(struct evhttp_request *req, void *arg)
{
    (void)arg;
    enum evhttp_cmd_type m = evhttp_request_get_command(req);
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *raw = uri ? evhttp_uri_get_path(uri) : NULL;
    char *path = raw ? evhttp_uridecode(raw, 0, NULL) : NULL; /* "%3A" -> ':' */
    static const char models_prefix[] = "/v1/models/";

    if (!path) {
        admin__reply_error(req, 400, "cannot parse the request URI");
        return;
    }
    LOG(LL_DEBUG, "admin: %d %s", (int)m, path);

    if (strcmp(path, "/healthz") == 0) {
        is_get(m) ? on_healthz(req) : method_not_allowed(req, "GET, HEAD");
    } else if (strcmp(path, "/readyz") == 0) {
        is_get(m) ? on_readyz(req) : method_not_allowed(req, "GET, HEAD");
    } else if (strcmp(path, "/metrics") == 0) {
        is_get(m) ? on_metrics(req) : method_not_allowed(req, "GET, HEAD");
    } else if (strcmp(path, "/v1/models") == 0 || strcmp(path, "/v1/models/") == 0) {
        is_get(m) ? on_models(req) : method_not_allowed(req, "GET, HEAD");
    } else if (strcmp(path, "/v1/sync:turn") == 0) {
        m == EVHTTP_REQ_POST ? on_sync_turn(req) : method_not_allowed(req, "POST");
    } else if (strncmp(path, models_prefix, sizeof models_prefix - 1) == 0 &&
               model_call(req, m, path + sizeof models_prefix - 1)) {
        /* answered: :load, :rollback, :activate, /versions, /digest */
    } else {
        admin__reply_error(req, 404, "no such endpoint: %s (see /healthz, /readyz, /metrics, /v1/models)",
                    path);
    }
    free(path);
}

/* ---- thread -------------------------------------------------------------------- */

static void *admin_main(void *arg)
{
    (void)arg;
    event_base_dispatch(A.base);
    return NULL;
}

/* Binds and listens on addr:port; returns the fd or -errno (named on stderr). */
static cold int listen_on(const char *addr, int port)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, addr, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        sl = sizeof *s4;
    } else if (inet_pton(AF_INET6, addr, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        sl = sizeof *s6;
    } else {
        LOG(LL_ERROR, "admin: '%s' is not an IP address", addr);
        return -EINVAL;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int e = errno;
        LOG(LL_ERROR, "admin: socket for %s:%d: %s", addr, port, strerror(e));
        return -e;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 64) != 0) {
        int e = errno;
        LOG(LL_ERROR, "admin: cannot listen on %s:%d: %s", addr, port, strerror(e));
        close(fd);
        return -e;
    }
    return fd;
}

/* An accept of the admin socket failed (out of file descriptors, most
 * often): libevent would retry at once, for ever, while the error lasts.
 * Pause accepting for ADMIN_ACCEPT_PAUSE_MS instead; count and log (once a
 * second at most) like the data plane (sockets.c). */
#define ADMIN_ACCEPT_PAUSE_MS 100
static void on_accept_error(struct evconnlistener *lev, void *arg)
{
    (void)arg;
    int err = EVUTIL_SOCKET_ERROR();
    atomic_fetch_add_explicit(&A.srv->metrics[0].accept_errors_total, 1, memory_order_relaxed);
    uint64_t n = atomic_load_explicit(&A.srv->metrics[0].accept_errors_total, memory_order_relaxed);
    if (n - A.accept_warned >= 10 || A.accept_warned == 0) {
        A.accept_warned = n;
        LOG(LL_WARN, "admin: accept failed: %s; pausing accepts for %d ms", strerror(err),
            ADMIN_ACCEPT_PAUSE_MS);
    }
    evconnlistener_disable(lev);
    struct timeval pause = {0, ADMIN_ACCEPT_PAUSE_MS * 1000};
    event_add(A.accept_ev, &pause);
}

static void on_accept_resume(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    evconnlistener_enable(A.listener);
}

/* stop_ev, once A.stop_requested is set: answers the requests still
 * waiting (their loads were dropped or discarded: loader_stop has ended them
 * all) and leaves the loop, after a moment to flush when a waiter was
 * answered since admin_stop began (a reply goes out on a later turn of the
 * loop than the one that made it).
 *
 * Why a timer and a flag, not only an activation: the stop must hold
 * whatever point the admin thread has reached when admin_stop runs (not yet
 * in event_base_dispatch, inside it, or between two turns), e.g. when the
 * data port cannot be bound right after admin_start.  The flag is state, not
 * an event: the first turn of the loop that runs stop_ev (admin_stop's
 * event_active, or the timer at most ADMIN_STOP_CHECK_MS later, which is
 * armed before the thread starts) sees it and leaves; later ticks break
 * again should the loop still run past the flush moment.  Nothing can be
 * lost. */
static void on_stop_ev(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what, (void)arg;
    if (!atomic_load(&A.stop_requested))
        return;
    if (A.stop_handled) {
        /* Still looping after the flush moment: break again (idempotent). */
        if (++A.stop_ticks * ADMIN_STOP_CHECK_MS > 200)
            event_base_loopbreak(A.base);
        return;
    }
    A.stop_handled = true;
    int answered = drain_ended() + admin__digest_stop();
    while (A.waiters) {
        waiter_t *w = A.waiters;
        A.waiters = w->next;
        admin__reply_error(w->req, 503, "the server is shutting down");
        free(w);
        answered++;
    }
    if (answered || A.answered_stopping) {
        struct timeval flush = {0, 100000};
        event_base_loopexit(A.base, &flush);
    } else {
        event_base_loopbreak(A.base);
    }
}

/* Locking and cross-thread wakeups in libevent, so that the loader and
 * admin_stop can activate events of the admin base from their threads. */
static int evthread_rc;
static void enable_evthread(void)
{
    evthread_rc = evthread_use_pthreads();
}

int admin_start(server_t *srv)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    int rc, fd = -1;
    bool loader = false;

    pthread_once(&once, enable_evthread);
    if (evthread_rc != 0) {
        LOG(LL_ERROR, "admin: libevent has no pthreads support");
        return -ENOSYS;
    }
    A.srv = srv;
    fd = listen_on(srv->cfg.admin_bind, srv->cfg.admin_port);
    if (fd < 0)
        return fd;
    rc = -ENOMEM;
    A.base = event_base_new();
    if (!A.base)
        goto fail;
    A.done_ev = event_new(A.base, -1, 0, on_done_ev, NULL);
    A.stop_ev = event_new(A.base, -1, EV_PERSIST, on_stop_ev, NULL);
    if (!A.done_ev || !A.stop_ev)
        goto fail;
    struct timeval check = {0, ADMIN_STOP_CHECK_MS * 1000};
    if (event_add(A.stop_ev, &check) != 0)
        goto fail;
    A.http = evhttp_new(A.base);
    if (!A.http)
        goto fail;
    evhttp_set_gencb(A.http, on_request, NULL);
    evhttp_set_max_body_size(A.http, ADMIN_MAX_BODY);
    evhttp_set_max_headers_size(A.http, ADMIN_MAX_HEADERS);
    evhttp_set_timeout(A.http, ADMIN_TIMEOUT_S);
    /* Let every method reach on_request so that wrong ones get 405, not 501. */
    evhttp_set_allowed_methods(A.http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                           EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS |
                                           EVHTTP_REQ_PATCH);
    struct evhttp_bound_socket *bound = evhttp_accept_socket_with_handle(A.http, fd);
    if (!bound) {
        rc = -EINVAL;
        LOG(LL_ERROR, "admin: evhttp cannot accept on %s:%d", srv->cfg.admin_bind,
            srv->cfg.admin_port);
        goto fail;
    }
    fd = -1; /* evhttp owns it now */
    A.listener = evhttp_bound_socket_get_listener(bound);
    A.accept_ev = event_new(A.base, -1, 0, on_accept_resume, NULL);
    if (!A.accept_ev)
        goto fail;
    evconnlistener_set_error_cb(A.listener, on_accept_error);
    rc = loader_start(srv, on_load_ended, NULL);
    if (rc != 0)
        goto fail;
    loader = true;
    rc = guard_start(srv); /* after the loader: its swaps arm the guard */
    if (rc != 0)
        goto fail;
    rc = pthread_create(&A.thread, NULL, admin_main, NULL);
    if (rc != 0) {
        rc = -rc;
        goto fail;
    }
    A.running = true;
    LOG(LL_INFO, "admin plane on http://%s:%d", srv->cfg.admin_bind, srv->cfg.admin_port);
    return 0;
fail:
    guard_stop();
    if (loader)
        loader_stop();
    if (A.http)
        evhttp_free(A.http);
    if (A.done_ev)
        event_free(A.done_ev);
    if (A.stop_ev)
        event_free(A.stop_ev);
    if (A.accept_ev)
        event_free(A.accept_ev);
    if (A.base)
        event_base_free(A.base);
    if (fd >= 0)
        close(fd);
    A.http = NULL;
    A.done_ev = A.stop_ev = A.accept_ev = NULL;
    A.base = NULL;
    return rc;
}

/* Stops the loader first (it may still report ended loads to the running
 * admin loop, and blocks for the rest of a running load, during which the
 * admin plane keeps answering), then the admin loop. */
void admin_stop(server_t *srv)
{
    (void)srv;
    if (!A.running)
        return;
    atomic_store(&A.stopping, true);
    guard_stop(); /* no rollback of its own during the drain */
    loader_stop();
    atomic_store(&A.stop_requested, true);
    event_active(A.stop_ev, EV_READ, 0); /* from main: the base is notifiable (evthread) */
    pthread_join(A.thread, NULL);
    evhttp_free(A.http);
    event_free(A.done_ev);
    event_free(A.stop_ev);
    event_free(A.accept_ev);
    event_base_free(A.base);
    pthread_mutex_lock(&A.ended_lock); /* nothing can add to it now */
    while (A.ended) {
        ended_t *e = A.ended;
        A.ended = e->next;
        free(e);
    }
    A.ended_tail = &A.ended;
    pthread_mutex_unlock(&A.ended_lock);
    A.http = NULL;
    A.done_ev = A.stop_ev = A.accept_ev = NULL;
    A.base = NULL;
    A.running = false;
    atomic_store(&A.stopping, false);
    atomic_store(&A.stop_requested, false);
    A.stop_handled = false;
    A.stop_ticks = 0;
    A.answered_stopping = false;
}
