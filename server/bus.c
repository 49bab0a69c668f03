/* bus.c — the online-learning bus over nats.c: a JetStream stream, publishes that return once
 * stored, and ordered readers that say when the sequence jumps.
 *
 * Why JetStream: it is a replicated (R3), replayable log that ships as a Debian package and
 * runs as a real cluster on loopback, so "logged before acknowledged" and "replicas replay
 * the same order" come from a component built for them, not from a home-made consensus.
 *
 * Publishing: bus_publish.c.
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
#include "server/bus_impl.h"

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
#define READY_WAIT_MS 1000        /* bus_ready's API wait: a few round trips on a loaded host */

struct bus_reader {
    bus_t *bus;
    natsSubscription *sub;
    natsMsg *held;      /* the message *msg points into, freed on the next call */
    uint64_t next_seq;  /* expected stream sequence */
};

/* last_seq = max(last_seq, seq): any thread. */
void bus__note_last(bus_t *bus, uint64_t seq)
{
    uint64_t cur = atomic_load_explicit(&bus->last_seq, memory_order_relaxed);
    while (seq > cur && !atomic_compare_exchange_weak_explicit(&bus->last_seq, &cur, seq,
                                                               memory_order_relaxed,
                                                               memory_order_relaxed))
        ;
}

void bus__set_err(bus_error_t *err, bus_errcode_t code, const char *fmt, ...)
{
    if (!err)
        return;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
}

int bus__status_errno(natsStatus s)
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
const char *bus__why(natsStatus s)
{
    const char *t = nats_GetLastError(NULL);
    return t && *t ? t : natsStatus_GetText(s);
}

bus_errcode_t bus__status_code(natsStatus s, bus_errcode_t dflt)
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

bool bus__subject_ok(const char *s)
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
        bus__set_err(err, BUS_E_STREAM, "stream %s exists with " what " %lld, this bus wants %lld", \
                s, (long long)(have->field / (unit)), (long long)(want->field / (unit)));      \
        return -EEXIST;                                                                        \
    }
    DIFF(Replicas, "replicas", 1)
    DIFF(MaxBytes, "max bytes", 1)
    DIFF(MaxAge, "max age (ms)", 1000000)
    DIFF(Duplicates, "dedup window (ms)", 1000000)
#undef DIFF
    if (have->Storage != js_FileStorage) {
        bus__set_err(err, BUS_E_STREAM, "stream %s exists in memory storage, this bus wants file storage", s);
        return -EEXIST;
    }
    if (have->Retention != js_LimitsPolicy) {
        bus__set_err(err, BUS_E_STREAM, "stream %s exists with retention %d, this bus wants limits (0)", s,
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
        bus__set_err(err, BUS_E_STREAM, "stream %s exists with subjects %s%s (%d), this bus wants %s%s (%d)", s,
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
        bus__note_last(bus, si->State.LastSeq);
        jsStreamInfo_Destroy(si);
        return rc;
    }
    if (s != NATS_NOT_FOUND) {
        bus__set_err(err, bus__status_code(s, BUS_E_STREAM), "stream %s on %s: cannot read its info: %s (%d)",
                bus->stream, bus->servers, bus__why(s), (int)jerr);
        return bus__status_errno(s);
    }
    s = js_AddStream(&si, bus->js, &cfg, &jo, &jerr);
    if (s != NATS_OK) {
        bus__set_err(err, bus__status_code(s, BUS_E_STREAM),
                "stream %s on %s: cannot create it (replicas %lld): %s (%d)", bus->stream,
                bus->servers, (long long)cfg.Replicas, bus__why(s), (int)jerr);
        return s == NATS_OK ? 0 : bus__status_errno(s) == -EIO ? -EIO : bus__status_errno(s);
    }
    jsStreamInfo_Destroy(si);
    return 0;
}


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
        bus__set_err(err, BUS_E_ARG, "bus options: servers, a stream name (no '.', '*', '>', spaces, at "
                                "most 64 bytes), 1..%d subjects, replicas 0..5 and limits >= 0 are required",
                BUS_MAX_SUBJECTS);
        return -EINVAL;
    }
    for (int i = 0; i < o->n_subjects; i++)
        if (!bus__subject_ok(o->subjects[i])) {
            bus__set_err(err, BUS_E_ARG, "bus options: subject %d ('%.64s') is not a NATS subject", i,
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
        bus__set_err(err, BUS_E_ARG, "bus servers '%.160s': expected 1..16 NATS URLs "
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
        rc = bus__status_errno(s);
        bus__set_err(err, BUS_E_NATS, "bus: nats options for %.160s: %s", o->servers, natsStatus_GetText(s));
        goto out;
    }
    s = natsConnection_Connect(&bus->nc, bus->opts);
    bool later = s == NATS_NOT_YET_CONNECTED && o->connect_in_background;
    if (s != NATS_OK && !later) {
        rc = s == NATS_NO_SERVER ? -ECONNREFUSED : bus__status_errno(s);
        bus__set_err(err, BUS_E_CONNECT, "bus: cannot connect to %.160s: %s", o->servers, bus__why(s));
        goto out;
    }
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = bus->timeout_ms;
    jo.PublishAsync.AckHandler = bus__on_ack;
    jo.PublishAsync.AckHandlerClosure = bus;
    jo.PublishAsync.MaxPending = 4096;   /* a batch beyond this stalls until acks free room */
    jo.PublishAsync.StallWait = bus->timeout_ms;
    s = natsConnection_JetStream(&bus->js, bus->nc, &jo);
    if (s != NATS_OK) {
        rc = bus__status_errno(s);
        bus__set_err(err, BUS_E_NATS, "bus: no JetStream context on %.160s: %s", o->servers, natsStatus_GetText(s));
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

bool bus__is_ready(const bus_t *bus)
{
    return atomic_load_explicit(&bus->ready, memory_order_acquire);
}

int bus_ready(bus_t *bus, int64_t timeout_ms, bus_error_t *err)
{
    if (!bus) {
        bus__set_err(err, BUS_E_ARG, "bus_ready: no bus");
        return -EINVAL;
    }
    if (bus__is_ready(bus))
        return 0;
    /* cold: a 10 ms poll of nats.c's state, no callback plumbing */
    for (int64_t waited = 0; !bus_connected(bus); waited += 10) {
        if (waited >= timeout_ms) {
            bus__set_err(err, BUS_E_CONNECT, "bus: no server of %.160s reachable yet (nats.c keeps "
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
    int rc = bus__is_ready(bus) ? 0 : open_stream(bus, wait, err);
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
    if (!bus__is_ready(bus) || !bus_connected(bus)) {
        bus__set_err(err, BUS_E_CONNECT, "bus: stream %s: not connected to %.160s", bus->stream,
                bus->servers);
        return -ENOTCONN;
    }
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_GetStreamInfo(&si, bus->js, bus->stream, NULL, &jerr);
    if (s != NATS_OK) {
        bus__set_err(err, bus__status_code(s, BUS_E_STREAM), "stream %s on %.160s: cannot read its state: %s (%d)",
                bus->stream, bus->servers, bus__why(s), (int)jerr);
        return bus__status_errno(s);
    }
    bus__note_last(bus, si->State.LastSeq);
    jsStreamInfo_Destroy(si);
    return 0;
}

void bus_stats(const bus_t *bus, bus_stats_t *out)
{
#define BUS_X_LOAD(name, help) out->name = atomic_load_explicit(&bus->name, memory_order_relaxed);
    BUS_COUNTERS(BUS_X_LOAD)
#undef BUS_X_LOAD
}

/* ---- reading ---- */

int bus_reader_open(bus_t *bus, const char *subject, uint64_t start_seq, bus_reader_t **out,
                    bus_error_t *err)
{
    *out = NULL;
    if (bus && !subject)
        subject = bus->only_subject;
    if (!bus || start_seq == 0 || !bus__subject_ok(subject)) {
        bus__set_err(err, BUS_E_ARG, "bus reader of stream %s: a start sequence >= 1 and a valid subject "
                "(NULL only when the stream binds one subject) are required", bus ? bus->stream : "?");
        return -EINVAL;
    }
    if (!bus__is_ready(bus)) {
        bus__set_err(err, BUS_E_CONNECT, "bus reader of stream %s: the stream is not set up yet (no "
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
        bus__set_err(err, bus__status_code(s, BUS_E_READ), "bus reader of stream %s, subject %s, from %llu: %s (%d)",
                bus->stream, subject ? subject : "(all)", (unsigned long long)start_seq,
                bus__why(s), (int)jerr);
        free(r);
        return bus__status_errno(s);
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
            bus__set_err(err, BUS_E_READ, "bus reader of stream %s at %llu: %s", r->bus->stream,
                    (unsigned long long)r->next_seq, natsStatus_GetText(s));
            return bus__status_errno(s);
        }
        const char *reply = natsMsg_GetReply(m);
        uint64_t seq = 0, pending = 0;
        if (!reply || bus__parse_reply_pending(reply, strlen(reply), &seq, &pending) < 0) {
            bus__set_err(err, BUS_E_READ, "bus reader of stream %s at %llu: a delivery on %.64s without a "
                    "JetStream reply subject ('%.64s')", r->bus->stream, (unsigned long long)r->next_seq,
                    natsMsg_GetSubject(m), reply ? reply : "");
            natsMsg_Destroy(m);
            return -EIO;
        }
        if (pending <= UINT64_MAX - seq)
            bus__note_last(r->bus, seq + pending);
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
