/* bus.c — the online-learning bus over nats.c: a JetStream stream, publishes that return once
 * stored, and ordered readers that say when the sequence jumps.
 *
 * Why JetStream: it is a replicated (R3), replayable log that ships as a Debian package and
 * runs as a real cluster on loopback, so "logged before acknowledged" and "replicas replay
 * the same order" come from a component built for them, not from a home-made consensus.
 *
 * Publishing. bus_publish is js_Publish with jsPubOptions.MsgId: JetStream's answer carries
 * the stream sequence, and the id makes a retry after a timeout safe (stored once within the
 * stream's dedup window). bus_publish_batch pipelines: every item goes out through
 * js_PublishMsgAsync, then js_PublishAsyncComplete waits for the acknowledgements. The ack
 * handler runs on a nats.c thread and records each item's fate in the batch:
 *
 *     caller thread                          nats.c delivery thread
 *     lock pub_mu; bus->batch = b
 *     for item: natsMsg -> PublishMsgAsync ----> (server) ----> on_ack(msg, pa|pae)
 *     PublishAsyncComplete(timeout)                               find item of msg (cursor)
 *     on timeout: take back pending msgs                          lock b->mu; record; done++
 *     wait until done + taken_back == sent <---------------------- signal
 *     bus->batch = NULL; unlock pub_mu
 *
 * A message is either still pending (js_PublishAsyncGetPendingList hands it back to us: not
 * acked) or already removed by nats.c for its handler, never both, so the wait ends. Acks
 * mostly come in order, so the item of a message is found by a cursor, falling back to a scan.
 *
 * Reading. An ordered push consumer (jsSubOptions.Ordered): ephemeral, AckNone, flow control
 * and heartbeats, re-created by nats.c from the last stream sequence it delivered whenever a
 * delivery is missed or the connection comes back. The stream sequence of a delivery is in
 * its reply subject; bus__parse_reply reads it in place (natsMsg_GetMetaData would allocate a
 * struct per message). The reader keeps the expected next sequence: a smaller one is a copy
 * and is skipped, a larger one is returned as BUS_READ_GAP with the count skipped.
 *
 * Starting without NATS. With connect_in_background, natsOptions_SetRetryOnFailedConnect makes
 * nats.c keep trying a first connection that failed, on its reconnect schedule, and the bus is
 * returned "not ready": the stream's settings are kept (opts_*) so that bus_ready can check or
 * create it once a server answers. Publishing before that is refused rather than buffered:
 * nats.c would send the buffer on connect, before anyone made sure the stream exists.
 *
 * Lag. JetStream tells each delivery how many messages the consumer still has after it (the
 * reply subject's last number), and each publish acknowledgement its sequence: last_seq keeps
 * the highest stream sequence either showed (and the stream's state at ready and at each
 * bus_refresh), so a reader's lag costs no request per message.
 *
 * THREAD SAFETY: pub_mu serializes publishers (the jsCtx's async-pending set is one per
 * context). Counters are relaxed atomics written by callers and nats.c's threads. A reader is
 * its owner thread's alone.
 */
#define _GNU_SOURCE
#include "server/bus.h"

#include <errno.h>
#include <limits.h>
#include <nats/nats.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BUS_MAX_SUBJECTS 16
#define BUS_MAX_BATCH 65536
#define BUS_MAX_DATA (1u << 20)   /* nats-server's default max_payload */
#define READY_WAIT_MS 1000        /* bus_ready's API wait: a few round trips on a loaded host */

struct batch {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bus_item_t *items;
    natsMsg **msgs;         /* msgs[i]: item i's message while in flight, accessed as atomics */
    int n;                  /* items */
    int sent;               /* handed to nats.c (caller thread only) */
    _Atomic int done;       /* handlers finished */
    _Atomic int cursor;     /* where the next ack's item probably is (a hint: the ack thread
                               and, after a timeout, the caller both search) */
    int taken_back;         /* caller only: pending messages taken back after a timeout */
    bus_error_t first;      /* first failure, code BUS_OK when none; protected by mu */
};

struct bus {
    natsConnection *nc;
    jsCtx *js;
    natsOptions *opts;
    char *stream;
    char *servers;
    char *only_subject;          /* the stream's subject when it binds exactly one, else NULL */
    char **opt_subjects;         /* the stream's settings, for bus_ready (owned copies) */
    int opt_n_subjects;
    int opt_replicas;
    int64_t opt_max_bytes, opt_max_age_ms, opt_dedup_window_ms;
    int64_t timeout_ms;
    void (*on_state)(bool up, void *arg); /* bus_options_t's, on nats.c's threads */
    void *on_state_arg;
    pthread_mutex_t ready_mu;    /* one stream setup at a time */
    _Atomic bool ready;          /* the stream was checked or created: publishes may go */
    _Atomic uint64_t last_seq;   /* highest stream sequence seen (bus_last_seq) */
    pthread_mutex_t pub_mu;      /* one publisher at a time */
    pthread_mutex_t close_mu;    /* with close_cv: the closed callback has run (closed) */
    pthread_cond_t close_cv;
    bool closed;                 /* protected by close_mu */
    struct batch *_Atomic batch; /* the batch in flight, read by on_ack */
#define BUS_X_ATOMIC(name, help) _Atomic uint64_t name;
    BUS_COUNTERS(BUS_X_ATOMIC)
#undef BUS_X_ATOMIC
};

struct bus_reader {
    bus_t *bus;
    natsSubscription *sub;
    natsMsg *held;      /* the message *msg points into, freed on the next call */
    uint64_t next_seq;  /* expected stream sequence */
};

#define INC(b, field, n) atomic_fetch_add_explicit(&(b)->field, (n), memory_order_relaxed)

/* last_seq = max(last_seq, seq): any thread. */
static void note_last(bus_t *bus, uint64_t seq)
{
    uint64_t cur = atomic_load_explicit(&bus->last_seq, memory_order_relaxed);
    while (seq > cur && !atomic_compare_exchange_weak_explicit(&bus->last_seq, &cur, seq,
                                                               memory_order_relaxed,
                                                               memory_order_relaxed))
        ;
}

__attribute__((format(printf, 3, 4))) static void set_err(bus_error_t *err, bus_errcode_t code,
                                                          const char *fmt, ...)
{
    if (!err)
        return;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
}

static int status_errno(natsStatus s)
{
    switch (s) {
    case NATS_OK: return 0;
    case NATS_TIMEOUT: return -ETIMEDOUT;
    case NATS_NO_SERVER:
    case NATS_NO_SERVER_SUPPORT: return -ECONNREFUSED;
    case NATS_CONNECTION_CLOSED:
    case NATS_CONNECTION_DISCONNECTED: return -ENOTCONN;
    case NATS_NO_MEMORY: return -ENOMEM;
    case NATS_INVALID_ARG:
    case NATS_INVALID_SUBJECT: return -EINVAL;
    case NATS_NOT_FOUND: return -ENOENT;
    default: return -EIO;
    }
}

/* nats.c's sentence for the calling thread's last error (JetStream's own text included). */
static const char *why(natsStatus s)
{
    const char *t = nats_GetLastError(NULL);
    return t && *t ? t : natsStatus_GetText(s);
}

static bus_errcode_t status_code(natsStatus s, bus_errcode_t dflt)
{
    return s == NATS_TIMEOUT ? BUS_E_TIMEOUT : dflt;
}

/* ---- the reply subject ---- */

static int parse_u64(const char *p, size_t n, uint64_t *out)
{
    if (n == 0 || n > 20)
        return -EINVAL;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -EINVAL;
        unsigned d = (unsigned)(p[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -EINVAL;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

int bus__parse_reply(const char *reply, size_t len, uint64_t *seq)
{
    uint64_t pending;
    return bus__parse_reply_pending(reply, len, seq, &pending);
}

int bus__parse_reply_pending(const char *reply, size_t len, uint64_t *seq, uint64_t *pending)
{
    enum { MAXTOK = 13 };
    const char *tok[MAXTOK];
    size_t tlen[MAXTOK];
    int nt = 0;
    size_t start = 0;
    if (!reply || len < 8 || memcmp(reply, "$JS.ACK.", 8) != 0)
        return -EINVAL;
    for (size_t i = 0; i <= len; i++) {
        if (i == len || reply[i] == '.') {
            if (nt == MAXTOK)
                return -EINVAL;
            tok[nt] = reply + start;
            tlen[nt] = i - start;
            if (tlen[nt] == 0)
                return -EINVAL;
            nt++;
            start = i + 1;
        }
    }
    int at;
    if (nt == 9)
        at = 5;        /* $JS.ACK.stream.consumer.delivered.sseq.cseq.ns.pending */
    else if (nt == 11 || nt == 12)
        at = 7;        /* $JS.ACK.domain.acchash.stream.consumer.delivered.sseq.cseq.ns.pending[.rand] */
    else
        return -EINVAL;
    uint64_t v, tmp = 0;
    if (parse_u64(tok[at], tlen[at], &v) < 0 || v == 0)
        return -EINVAL;
    for (int k = at - 1; k < nt - (nt == 12); k++)   /* delivered..pending are numbers too */
        if (parse_u64(tok[k], tlen[k], &tmp) < 0)
            return -EINVAL;
    *seq = v;
    *pending = tmp;   /* the last number read: <pending> */
    return 0;
}

/* ---- connection callbacks (nats.c threads) ---- */

static void on_disconnected(natsConnection *nc, void *closure)
{
    (void)nc;
    bus_t *bus = closure;
    INC(bus, disconnects, 1);
    if (bus->on_state)
        bus->on_state(false, bus->on_state_arg);
}

/* The first connection made in the background (connect_in_background). */
static void on_connected(natsConnection *nc, void *closure)
{
    (void)nc;
    bus_t *bus = closure;
    if (bus->on_state)
        bus->on_state(true, bus->on_state_arg);
}

static void on_reconnected(natsConnection *nc, void *closure)
{
    (void)nc;
    bus_t *bus = closure;
    INC(bus, reconnects, 1);
    if (bus->on_state)
        bus->on_state(true, bus->on_state_arg);
}

/* The last callback nats.c delivers for a connection: after it, no callback touches the bus,
 * so bus_close waits for it before freeing (a disconnected callback fired by the close itself
 * would otherwise run on freed memory). */
static void on_closed(natsConnection *nc, void *closure)
{
    (void)nc;
    bus_t *bus = closure;
    pthread_mutex_lock(&bus->close_mu);
    bus->closed = true;
    pthread_cond_signal(&bus->close_cv);
    pthread_mutex_unlock(&bus->close_mu);
}

/* ---- open, check, close ---- */

static bool name_ok(const char *s, size_t max)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] == '.' || s[i] == '*' || s[i] == '>' || s[i] == 0x7f)
            return false;
    return true;
}

static bool subject_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > 255 || s[0] == '.' || s[n - 1] == '.')
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] == 0x7f || (s[i] == '.' && s[i + 1] == '.'))
            return false;
    return true;
}

/* Compares an existing stream with the wanted config: 0, or -EEXIST with the difference. */
__attribute__((cold)) static int check_stream(const bus_t *bus, const jsStreamConfig *have,
                                              const jsStreamConfig *want, bus_error_t *err)
{
    const char *s = bus->stream;
#define DIFF(field, what, unit)                                                                \
    if (have->field != want->field) {                                                          \
        set_err(err, BUS_E_STREAM, "stream %s exists with " what " %lld, this bus wants %lld", \
                s, (long long)(have->field / (unit)), (long long)(want->field / (unit)));      \
        return -EEXIST;                                                                        \
    }
    DIFF(Replicas, "replicas", 1)
    DIFF(MaxBytes, "max bytes", 1)
    DIFF(MaxAge, "max age (ms)", 1000000)
    DIFF(Duplicates, "dedup window (ms)", 1000000)
#undef DIFF
    if (have->Storage != js_FileStorage) {
        set_err(err, BUS_E_STREAM, "stream %s exists in memory storage, this bus wants file storage", s);
        return -EEXIST;
    }
    if (have->Retention != js_LimitsPolicy) {
        set_err(err, BUS_E_STREAM, "stream %s exists with retention %d, this bus wants limits (0)", s,
                (int)have->Retention);
        return -EEXIST;
    }
    bool same = have->SubjectsLen == want->SubjectsLen;
    for (int i = 0; same && i < want->SubjectsLen; i++) {
        bool found = false;
        for (int j = 0; j < have->SubjectsLen && !found; j++)
            found = strcmp(have->Subjects[j], want->Subjects[i]) == 0;
        same = found;
    }
    if (!same) {
        set_err(err, BUS_E_STREAM, "stream %s exists with subjects %s%s (%d), this bus wants %s%s (%d)", s,
                have->SubjectsLen ? have->Subjects[0] : "none", have->SubjectsLen > 1 ? ",..." : "",
                have->SubjectsLen, want->Subjects[0], want->SubjectsLen > 1 ? ",..." : "",
                want->SubjectsLen);
        return -EEXIST;
    }
    return 0;
}

/* Checks or creates the stream from the settings bus_open kept, each API request waiting up
 * to wait_ms. ready_mu held. */
__attribute__((cold)) static int open_stream(bus_t *bus, int64_t wait_ms, bus_error_t *err)
{
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = wait_ms;
    jsStreamConfig cfg;
    jsStreamConfig_Init(&cfg);
    cfg.Name = bus->stream;
    cfg.Subjects = (const char **)bus->opt_subjects;
    cfg.SubjectsLen = bus->opt_n_subjects;
    cfg.Retention = js_LimitsPolicy;
    cfg.Storage = js_FileStorage;
    cfg.Replicas = bus->opt_replicas ? bus->opt_replicas : 3;
    cfg.MaxBytes = bus->opt_max_bytes ? bus->opt_max_bytes : -1;
    cfg.MaxAge = bus->opt_max_age_ms * 1000000;
    cfg.Duplicates = (bus->opt_dedup_window_ms ? bus->opt_dedup_window_ms : 120000) * 1000000;
    cfg.Discard = js_DiscardOld;

    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_GetStreamInfo(&si, bus->js, bus->stream, &jo, &jerr);
    if (s == NATS_OK) {
        int rc = check_stream(bus, si->Config, &cfg, err);
        note_last(bus, si->State.LastSeq);
        jsStreamInfo_Destroy(si);
        return rc;
    }
    if (s != NATS_NOT_FOUND) {
        set_err(err, status_code(s, BUS_E_STREAM), "stream %s on %s: cannot read its info: %s (%d)",
                bus->stream, bus->servers, why(s), (int)jerr);
        return status_errno(s);
    }
    s = js_AddStream(&si, bus->js, &cfg, &jo, &jerr);
    if (s != NATS_OK) {
        set_err(err, status_code(s, BUS_E_STREAM),
                "stream %s on %s: cannot create it (replicas %lld): %s (%d)", bus->stream,
                bus->servers, (long long)cfg.Replicas, why(s), (int)jerr);
        return s == NATS_OK ? 0 : status_errno(s) == -EIO ? -EIO : status_errno(s);
    }
    jsStreamInfo_Destroy(si);
    return 0;
}

static void on_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure);

/* A bad URL would otherwise only show as a server that never answers, which
 * connect_in_background waits for forever. */
bool bus__url_ok(const char *u)
{
    const char *p = strstr(u, "://");
    if (p) {
        for (const char *c = u; c < p; c++)
            if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z')))
                return false;
        if (p == u)
            return false;
        u = p + 3;
    }
    const char *at = strrchr(u, '@');
    if (at)
        u = at + 1;
    const char *host = u, *end;
    if (*u == '[') {
        end = strchr(u, ']');
        if (!end || end == u + 1)
            return false;
        end++;
    } else {
        end = u;
        while (*end && *end != ':')
            end++;
        if (end == host)
            return false;
    }
    for (const char *c = host; c < end; c++)
        if (*c <= ' ' || *c == '/' || *c == '?' || *c == '#' || *c == 0x7f)
            return false;
    if (*end == 0)
        return true;
    if (*end != ':' || !end[1] || strlen(end + 1) > 5)
        return false;
    long port = 0;
    for (const char *c = end + 1; *c; c++) {
        if (*c < '0' || *c > '9')
            return false;
        port = port * 10 + (*c - '0');
    }
    return port >= 1 && port <= 65535;
}

static int split_servers(const char *list, char **copy, const char **urls, int max)
{
    *copy = strdup(list);
    if (!*copy)
        return -ENOMEM;
    int n = 0;
    char *save = NULL;
    for (char *t = strtok_r(*copy, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
        if (n == max || !bus__url_ok(t))
            return -EINVAL;
        urls[n++] = t;
    }
    return n ? n : -EINVAL;
}

int bus_open(const bus_options_t *o, bus_t **out, bus_error_t *err)
{
    if (err)
        err->code = BUS_OK, err->msg[0] = 0;
    *out = NULL;
    if (!o || !o->servers || !name_ok(o->stream, 64) || !o->subjects || o->n_subjects < 1 ||
        o->n_subjects > BUS_MAX_SUBJECTS || o->replicas < 0 || o->replicas > 5 || o->max_bytes < 0 ||
        o->max_age_ms < 0 || o->max_age_ms > INT64_MAX / 1000000 || o->dedup_window_ms < 0 ||
        o->dedup_window_ms > INT64_MAX / 1000000 || o->timeout_ms < 0 || o->reconnect_wait_ms < 0 ||
        o->reconnect_buf_bytes < 0) {
        set_err(err, BUS_E_ARG, "bus options: servers, a stream name (no '.', '*', '>', spaces, at "
                                "most 64 bytes), 1..%d subjects, replicas 0..5 and limits >= 0 are required",
                BUS_MAX_SUBJECTS);
        return -EINVAL;
    }
    for (int i = 0; i < o->n_subjects; i++)
        if (!subject_ok(o->subjects[i])) {
            set_err(err, BUS_E_ARG, "bus options: subject %d ('%.64s') is not a NATS subject", i,
                    o->subjects[i] ? o->subjects[i] : "(null)");
            return -EINVAL;
        }

    bus_t *bus = calloc(1, sizeof *bus);
    if (!bus)
        return -ENOMEM;
    pthread_mutex_init(&bus->ready_mu, NULL);
    pthread_mutex_init(&bus->pub_mu, NULL);
    pthread_mutex_init(&bus->close_mu, NULL);
    pthread_cond_init(&bus->close_cv, NULL);
    int rc = -ENOMEM;
    char *copy = NULL;
    const char *urls[16];
    bus->timeout_ms = o->timeout_ms ? o->timeout_ms : 5000;
    bus->stream = strdup(o->stream);
    bus->servers = strdup(o->servers);
    if (o->n_subjects == 1 && !(bus->only_subject = strdup(o->subjects[0])))
        goto out;
    if (!bus->stream || !bus->servers || !(bus->opt_subjects = calloc((size_t)o->n_subjects, sizeof(char *))))
        goto out;
    for (int i = 0; i < o->n_subjects; i++)
        if (!(bus->opt_subjects[i] = strdup(o->subjects[i])))
            goto out;
    bus->opt_n_subjects = o->n_subjects;
    bus->opt_replicas = o->replicas;
    bus->opt_max_bytes = o->max_bytes;
    bus->opt_max_age_ms = o->max_age_ms;
    bus->opt_dedup_window_ms = o->dedup_window_ms;
    bus->on_state = o->on_state;
    bus->on_state_arg = o->on_state_arg;
    int n = split_servers(o->servers, &copy, urls, 16);
    if (n < 0) {
        rc = n;
        set_err(err, BUS_E_ARG, "bus servers '%.160s': expected 1..16 NATS URLs "
                "([nats://][user[:pass]@]host[:port], port 1..65535), comma separated", o->servers);
        goto out;
    }
    natsStatus s = natsOptions_Create(&bus->opts);
    if (s == NATS_OK) s = natsOptions_SetServers(bus->opts, urls, n);
    if (s == NATS_OK) s = natsOptions_SetName(bus->opts, o->name ? o->name : "tlserve-bus");
    if (s == NATS_OK) s = natsOptions_SetTimeout(bus->opts, bus->timeout_ms);
    if (s == NATS_OK) s = natsOptions_SetMaxReconnect(bus->opts, -1);  /* forever */
    if (s == NATS_OK) s = natsOptions_SetReconnectWait(bus->opts, o->reconnect_wait_ms ? o->reconnect_wait_ms : 250);
    if (s == NATS_OK) s = natsOptions_SetReconnectJitter(bus->opts, 100, 1000);
    if (s == NATS_OK) s = natsOptions_SetReconnectBufSize(bus->opts, o->reconnect_buf_bytes ? o->reconnect_buf_bytes : 8 << 20);
    if (s == NATS_OK) s = natsOptions_SetPingInterval(bus->opts, 2000);
    if (s == NATS_OK) s = natsOptions_SetMaxPingsOut(bus->opts, 3);
    if (s == NATS_OK) s = natsOptions_SetDisconnectedCB(bus->opts, on_disconnected, bus);
    if (s == NATS_OK) s = natsOptions_SetReconnectedCB(bus->opts, on_reconnected, bus);
    if (s == NATS_OK) s = natsOptions_SetClosedCB(bus->opts, on_closed, bus);
    if (s == NATS_OK && o->connect_in_background)
        s = natsOptions_SetRetryOnFailedConnect(bus->opts, true, on_connected, bus);
    if (s != NATS_OK) {
        rc = status_errno(s);
        set_err(err, BUS_E_NATS, "bus: nats options for %.160s: %s", o->servers, natsStatus_GetText(s));
        goto out;
    }
    s = natsConnection_Connect(&bus->nc, bus->opts);
    bool later = s == NATS_NOT_YET_CONNECTED && o->connect_in_background;
    if (s != NATS_OK && !later) {
        rc = s == NATS_NO_SERVER ? -ECONNREFUSED : status_errno(s);
        set_err(err, BUS_E_CONNECT, "bus: cannot connect to %.160s: %s", o->servers, why(s));
        goto out;
    }
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = bus->timeout_ms;
    jo.PublishAsync.AckHandler = on_ack;
    jo.PublishAsync.AckHandlerClosure = bus;
    jo.PublishAsync.MaxPending = 4096;   /* a batch beyond this stalls until acks free room */
    jo.PublishAsync.StallWait = bus->timeout_ms;
    s = natsConnection_JetStream(&bus->js, bus->nc, &jo);
    if (s != NATS_OK) {
        rc = status_errno(s);
        set_err(err, BUS_E_NATS, "bus: no JetStream context on %.160s: %s", o->servers, natsStatus_GetText(s));
        goto out;
    }
    if (later) {   /* nats.c keeps trying; bus_ready sets the stream up */
        rc = 0;
        goto out;
    }
    pthread_mutex_lock(&bus->ready_mu);
    rc = open_stream(bus, bus->timeout_ms, err);
    pthread_mutex_unlock(&bus->ready_mu);
    if (rc == 0)
        atomic_store_explicit(&bus->ready, true, memory_order_release);
    else if (o->connect_in_background && rc != -EEXIST && rc != -EINVAL)
        rc = 0;    /* JetStream not answering yet: bus_ready retries */
out:
    free(copy);
    if (rc < 0) {
        bus_close(bus);
        return rc;
    }
    *out = bus;
    return 0;
}

void bus_close(bus_t *bus)
{
    if (!bus)
        return;
    if (bus->js)
        jsCtx_Destroy(bus->js);
    if (bus->nc) {
        natsConnection_Close(bus->nc);
        pthread_mutex_lock(&bus->close_mu);
        while (!bus->closed)
            pthread_cond_wait(&bus->close_cv, &bus->close_mu);
        pthread_mutex_unlock(&bus->close_mu);
        natsConnection_Destroy(bus->nc);
    }
    natsOptions_Destroy(bus->opts);
    for (int i = 0; bus->opt_subjects && i < bus->opt_n_subjects; i++)
        free(bus->opt_subjects[i]);
    free(bus->opt_subjects);
    pthread_mutex_destroy(&bus->ready_mu);
    pthread_mutex_destroy(&bus->pub_mu);
    pthread_mutex_destroy(&bus->close_mu);
    pthread_cond_destroy(&bus->close_cv);
    free(bus->stream);
    free(bus->servers);
    free(bus->only_subject);
    free(bus);
}

bool bus_connected(const bus_t *bus)
{
    return bus && bus->nc && natsConnection_Status(bus->nc) == NATS_CONN_STATUS_CONNECTED;
}

static bool is_ready(const bus_t *bus)
{
    return atomic_load_explicit(&bus->ready, memory_order_acquire);
}

int bus_ready(bus_t *bus, int64_t timeout_ms, bus_error_t *err)
{
    if (!bus) {
        set_err(err, BUS_E_ARG, "bus_ready: no bus");
        return -EINVAL;
    }
    if (is_ready(bus))
        return 0;
    /* cold: a 10 ms poll of nats.c's state, no callback plumbing */
    for (int64_t waited = 0; !bus_connected(bus); waited += 10) {
        if (waited >= timeout_ms) {
            set_err(err, BUS_E_CONNECT, "bus: no server of %.160s reachable yet (nats.c keeps "
                    "trying)", bus->servers);
            return -ENOTCONN;
        }
        struct timespec nap = {0, 10 * 1000000};
        nanosleep(&nap, NULL);
    }
    pthread_mutex_lock(&bus->ready_mu);
    /* a cluster that accepts clients before it has a JetStream leader does not answer: ask
     * again soon rather than wait the whole timeout */
    int64_t wait = bus->timeout_ms < READY_WAIT_MS ? bus->timeout_ms : READY_WAIT_MS;
    int rc = is_ready(bus) ? 0 : open_stream(bus, wait, err);
    if (rc == 0)
        atomic_store_explicit(&bus->ready, true, memory_order_release);
    pthread_mutex_unlock(&bus->ready_mu);
    return rc;
}

uint64_t bus_last_seq(const bus_t *bus)
{
    return atomic_load_explicit(&bus->last_seq, memory_order_relaxed);
}

int bus_refresh(bus_t *bus, bus_error_t *err)
{
    if (!is_ready(bus) || !bus_connected(bus)) {
        set_err(err, BUS_E_CONNECT, "bus: stream %s: not connected to %.160s", bus->stream,
                bus->servers);
        return -ENOTCONN;
    }
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_GetStreamInfo(&si, bus->js, bus->stream, NULL, &jerr);
    if (s != NATS_OK) {
        set_err(err, status_code(s, BUS_E_STREAM), "stream %s on %.160s: cannot read its state: %s (%d)",
                bus->stream, bus->servers, why(s), (int)jerr);
        return status_errno(s);
    }
    note_last(bus, si->State.LastSeq);
    jsStreamInfo_Destroy(si);
    return 0;
}

void bus_stats(const bus_t *bus, bus_stats_t *out)
{
#define BUS_X_LOAD(name, help) out->name = atomic_load_explicit(&bus->name, memory_order_relaxed);
    BUS_COUNTERS(BUS_X_LOAD)
#undef BUS_X_LOAD
}

/* ---- publishing ---- */

int bus_publish(bus_t *bus, const char *subject, const void *data, size_t len,
                const char *msg_id, bus_ack_t *ack, bus_error_t *err)
{
    if (!bus || !subject_ok(subject) || (len && !data) || len > BUS_MAX_DATA ||
        (msg_id && (!*msg_id || strlen(msg_id) > 128)) || !ack) {
        set_err(err, BUS_E_ARG, "bus publish to stream %s: a subject, data of at most %u bytes, an "
                "ack and a message id of 1..128 bytes (or none) are required", bus ? bus->stream : "?",
                BUS_MAX_DATA);
        return -EINVAL;
    }
    if (!is_ready(bus)) {
        set_err(err, BUS_E_CONNECT, "publish to %s: the stream %s is not set up yet (no server of "
                "%.120s has answered)", subject, bus->stream, bus->servers);
        return -ENOTCONN;
    }
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MsgId = msg_id;
    po.MaxWait = bus->timeout_ms;
    po.ExpectStream = bus->stream;
    jsPubAck *pa = NULL;
    jsErrCode jerr = 0;
    pthread_mutex_lock(&bus->pub_mu);
    INC(bus, published, 1);
    natsStatus s = js_Publish(&pa, bus->js, subject, data, (int)len, &po, &jerr);
    pthread_mutex_unlock(&bus->pub_mu);
    if (s != NATS_OK) {
        INC(bus, failed, 1);
        set_err(err, status_code(s, BUS_E_PUBLISH),
                "publish to %s (stream %s, message id %.64s) not acknowledged: %s (%d)%s", subject,
                bus->stream, msg_id ? msg_id : "none", why(s), (int)jerr,
                s == NATS_TIMEOUT ? ": it may be stored, retry with the same message id" : "");
        return status_errno(s);
    }
    ack->seq = pa->Sequence;
    ack->duplicate = pa->Duplicate;
    note_last(bus, pa->Sequence);
    INC(bus, acked, 1);
    if (pa->Duplicate)
        INC(bus, duplicates, 1);
    jsPubAck_Destroy(pa);
    return 0;
}

/* Item index of a message of batch b, or -1: acks come mostly in order, so start at the
 * cursor. msgs[] slots are atomics: the caller fills later ones while this runs. */
static int find_item(struct batch *b, natsMsg *m, natsMsg *_Atomic *msgs)
{
    int c = atomic_load_explicit(&b->cursor, memory_order_relaxed);
    for (int k = 0; k < b->n; k++) {
        int i = c + k < b->n ? c + k : c + k - b->n;
        if (atomic_load_explicit(&msgs[i], memory_order_acquire) == m) {
            atomic_store_explicit(&msgs[i], NULL, memory_order_relaxed);
            atomic_store_explicit(&b->cursor, i + 1 < b->n ? i + 1 : 0, memory_order_relaxed);
            return i;
        }
    }
    return -1;
}

static void batch_fail(struct batch *b, bus_errcode_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void batch_fail(struct batch *b, bus_errcode_t code, const char *fmt, ...)
{
    pthread_mutex_lock(&b->mu);
    if (b->first.code == BUS_OK) {
        b->first.code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(b->first.msg, sizeof b->first.msg, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&b->mu);
}

/* nats.c's ack thread: record the fate of one asynchronous publish. */
static void on_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure)
{
    (void)js;
    bus_t *bus = closure;
    struct batch *b = atomic_load_explicit(&bus->batch, memory_order_acquire);
    if (b) {
        int i = find_item(b, msg, (natsMsg *_Atomic *)b->msgs);
        if (i >= 0 && pa) {
            b->items[i].ack.seq = pa->Sequence;
            b->items[i].ack.duplicate = pa->Duplicate;
            b->items[i].acked = true;
            note_last(bus, pa->Sequence);
            INC(bus, acked, 1);
            if (pa->Duplicate)
                INC(bus, duplicates, 1);
        } else {
            INC(bus, failed, 1);
            natsStatus s = pae ? pae->Err : NATS_ERR;
            batch_fail(b, status_code(s, BUS_E_PUBLISH),
                       "batch publish to %s (stream %s), item %d: not acknowledged: %s%s%s", natsMsg_GetSubject(msg),
                       bus->stream, i, natsStatus_GetText(s), pae && pae->ErrText ? ": " : "",
                       pae && pae->ErrText ? pae->ErrText : "");
        }
        atomic_fetch_add_explicit(&b->done, 1, memory_order_release);
    }
    natsMsg_Destroy(msg);
}

int bus_publish_batch(bus_t *bus, bus_item_t *items, int n, bus_error_t *err)
{
    if (err)
        err->code = BUS_OK, err->msg[0] = 0;
    if (!bus || !items || n < 0 || n > BUS_MAX_BATCH) {
        set_err(err, BUS_E_ARG, "bus batch publish: 0..%d items are required", BUS_MAX_BATCH);
        return -EINVAL;
    }
    for (int i = 0; i < n; i++) {
        bus_item_t *it = &items[i];
        it->acked = false;
        it->ack.seq = 0, it->ack.duplicate = false;
        if (!subject_ok(it->subject) || (it->len && !it->data) || it->len > BUS_MAX_DATA ||
            (it->msg_id && (!*it->msg_id || strlen(it->msg_id) > 128))) {
            set_err(err, BUS_E_ARG, "bus batch publish to stream %s: item %d needs a subject, data of at "
                    "most %u bytes and a message id of 1..128 bytes (or none)", bus->stream, i, BUS_MAX_DATA);
            return -EINVAL;
        }
    }
    if (n == 0)
        return 0;
    if (!is_ready(bus)) {
        set_err(err, BUS_E_CONNECT, "bus batch publish: the stream %s is not set up yet (no server "
                "of %.120s has answered)", bus->stream, bus->servers);
        return -ENOTCONN;
    }
    struct batch b = {.items = items, .n = n};
    b.msgs = calloc((size_t)n, sizeof *b.msgs);
    if (!b.msgs) {
        set_err(err, BUS_E_NATS, "bus batch publish to stream %s: no memory for %d items", bus->stream, n);
        return -ENOMEM;
    }
    pthread_mutex_init(&b.mu, NULL);
    natsMsg *_Atomic *msgs = (natsMsg *_Atomic *)b.msgs;

    pthread_mutex_lock(&bus->pub_mu);
    atomic_store_explicit(&bus->batch, &b, memory_order_release);
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = bus->timeout_ms;
    po.ExpectStream = bus->stream;
    for (int i = 0; i < n; i++) {
        natsMsg *m = NULL;
        natsStatus s = natsMsg_Create(&m, items[i].subject, NULL, items[i].data, (int)items[i].len);
        if (s == NATS_OK) {
            atomic_store_explicit(&msgs[i], m, memory_order_release);
            po.MsgId = items[i].msg_id;
            s = js_PublishMsgAsync(bus->js, &m, &po);
        }
        if (s != NATS_OK) {
            /* not handed over: m is still ours (NULL if the library took it) */
            atomic_store_explicit(&msgs[i], NULL, memory_order_relaxed);
            natsMsg_Destroy(m);
            INC(bus, failed, n - i);
            batch_fail(&b, status_code(s, BUS_E_PUBLISH),
                       "batch publish to %s (stream %s): item %d of %d not sent: %s", items[i].subject,
                       bus->stream, i, n, why(s));
            break;
        }
        INC(bus, published, 1);
        b.sent++;
    }
    jsPubOptions co;
    jsPubOptions_Init(&co);
    co.MaxWait = bus->timeout_ms;
    natsStatus s = js_PublishAsyncComplete(bus->js, &co);
    if (s != NATS_OK) {
        /* take back what is still pending: those are not acked, and no handler will run */
        natsMsgList pending = {0};
        if (js_PublishAsyncGetPendingList(&pending, bus->js) == NATS_OK) {
            for (int k = 0; k < pending.Count; k++) {
                natsMsg *m = pending.Msgs[k];
                if (find_item(&b, m, msgs) >= 0)
                    b.taken_back++;
                INC(bus, failed, 1);
            }
            natsMsgList_Destroy(&pending);
        }
        batch_fail(&b, status_code(s, BUS_E_PUBLISH),
                   "batch publish to stream %s: %d of %d items not acknowledged within %lld ms: %s",
                   bus->stream, b.taken_back, n, (long long)bus->timeout_ms, natsStatus_GetText(s));
    }
    /* handlers already running finish their bookkeeping */
    while (atomic_load_explicit(&b.done, memory_order_acquire) + b.taken_back < b.sent) {
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    atomic_store_explicit(&bus->batch, NULL, memory_order_release);
    pthread_mutex_unlock(&bus->pub_mu);

    int acked = 0;
    for (int i = 0; i < n; i++)
        acked += items[i].acked;
    if (acked < n && err) {
        *err = b.first;
        if (err->code == BUS_OK)
            set_err(err, BUS_E_PUBLISH, "batch publish to stream %s: %d of %d items not acknowledged",
                    bus->stream, n - acked, n);
    }
    pthread_mutex_destroy(&b.mu);
    free(b.msgs);
    return acked;
}

/* ---- reading ---- */

int bus_reader_open(bus_t *bus, const char *subject, uint64_t start_seq, bus_reader_t **out,
                    bus_error_t *err)
{
    *out = NULL;
    if (bus && !subject)
        subject = bus->only_subject;
    if (!bus || start_seq == 0 || !subject_ok(subject)) {
        set_err(err, BUS_E_ARG, "bus reader of stream %s: a start sequence >= 1 and a valid subject "
                "(NULL only when the stream binds one subject) are required", bus ? bus->stream : "?");
        return -EINVAL;
    }
    if (!is_ready(bus)) {
        set_err(err, BUS_E_CONNECT, "bus reader of stream %s: the stream is not set up yet (no "
                "server of %.120s has answered)", bus->stream, bus->servers);
        return -ENOTCONN;
    }
    bus_reader_t *r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    r->bus = bus;
    r->next_seq = start_seq;
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = bus->stream;
    so.Ordered = true;
    so.Config.DeliverPolicy = js_DeliverByStartSequence;
    so.Config.OptStartSeq = start_seq;
    jsErrCode jerr = 0;
    natsStatus s = js_SubscribeSync(&r->sub, bus->js, subject, NULL, &so, &jerr);
    if (s != NATS_OK) {
        set_err(err, status_code(s, BUS_E_READ), "bus reader of stream %s, subject %s, from %llu: %s (%d)",
                bus->stream, subject ? subject : "(all)", (unsigned long long)start_seq,
                why(s), (int)jerr);
        free(r);
        return status_errno(s);
    }
    *out = r;
    return 0;
}

int bus_reader_next(bus_reader_t *r, int64_t timeout_ms, bus_msg_t *msg, bus_error_t *err)
{
    if (r->held) {
        natsMsg_Destroy(r->held);
        r->held = NULL;
    }
    for (;;) {
        natsMsg *m = NULL;
        natsStatus s = natsSubscription_NextMsg(&m, r->sub, timeout_ms > 0 ? timeout_ms : 1);
        if (s == NATS_TIMEOUT)
            return BUS_READ_TIMEOUT;
        if (s != NATS_OK) {
            set_err(err, BUS_E_READ, "bus reader of stream %s at %llu: %s", r->bus->stream,
                    (unsigned long long)r->next_seq, natsStatus_GetText(s));
            return status_errno(s);
        }
        const char *reply = natsMsg_GetReply(m);
        uint64_t seq = 0, pending = 0;
        if (!reply || bus__parse_reply_pending(reply, strlen(reply), &seq, &pending) < 0) {
            set_err(err, BUS_E_READ, "bus reader of stream %s at %llu: a delivery on %.64s without a "
                    "JetStream reply subject ('%.64s')", r->bus->stream, (unsigned long long)r->next_seq,
                    natsMsg_GetSubject(m), reply ? reply : "");
            natsMsg_Destroy(m);
            return -EIO;
        }
        if (pending <= UINT64_MAX - seq)
            note_last(r->bus, seq + pending);
        if (seq < r->next_seq) {   /* a copy of one already returned */
            natsMsg_Destroy(m);
            continue;
        }
        r->held = m;
        msg->seq = seq;
        msg->data = natsMsg_GetData(m);
        msg->len = (size_t)natsMsg_GetDataLength(m);
        msg->subject = natsMsg_GetSubject(m);
        msg->skipped = seq - r->next_seq;
        r->next_seq = seq + 1;
        INC(r->bus, delivered, 1);
        if (msg->skipped) {
            INC(r->bus, gaps, 1);
            return BUS_READ_GAP;
        }
        return BUS_READ_MSG;
    }
}

uint64_t bus_reader_position(const bus_reader_t *r)
{
    return r->next_seq;
}

void bus_reader_close(bus_reader_t *r)
{
    if (!r)
        return;
    natsMsg_Destroy(r->held);
    natsSubscription_Unsubscribe(r->sub);
    natsSubscription_Destroy(r->sub);
    free(r);
}
