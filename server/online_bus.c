/*
 * online_bus.c — online learning over NATS JetStream (--bus-servers): every
 * replica learns the same samples in the same order, so replicas serving the
 * same version hold the same weights (issue: replicas in step, replay mode).
 *
 *   worker: TRAIN / joined FEEDBACK -> the model's sample log (the outbox;
 *           acknowledged once it is there: a kill -9 loses nothing)
 *   forwarder thread: each model's log from its forwarded position ->
 *           JetStream, in batches, message id "<node>/<model>/<position>"
 *           (a batch sent again after a crash or a failure is stored once:
 *           JetStream's dedup window), the position kept in
 *           <log>/outbox.state
 *   consumer thread: the stream in sequence order -> the model's queue
 *           (the subject names the model), the stream sequence as the
 *           record's position -> the trainer (online_trainer.c), which keeps
 *           trainer.state in stream sequences
 *
 * A message is a whole TRAIN frame (header and payload: its flags travel
 * with it); one that does not parse, or names a model this server does not
 * serve, is counted and skipped.  A gap in the sequence (messages aged out
 * of the stream) is counted and logged: never skipped in silence.  At start
 * the consumer reads from the lowest position any model's trainer.state
 * names (1 when none: everything the stream keeps), and a model skips the
 * records before its own.  With exports (online_export.c: THE POSITION)
 * each export that goes live moves trainer.state to the stream sequence
 * after it, so a restart reads the stream from the last export on, not from
 * where the version began.  A stream that no longer holds that sequence
 * (its retention dropped it) is an ERROR naming both sequences; the replica
 * learns from the first message kept, the missing ones counted in
 * tlserve_bus_gap_total.
 *
 * NATS down, restarting, or slower than the clients.  The bus connects in
 * the background (bus.h: connect_in_background): with no server reachable
 * at start, or after losing them all, PREDICT is served as ever and TRAIN
 * and FEEDBACK are acknowledged into the outbox, which is the point of an
 * outbox; the forwarder sets the stream up once a server answers and
 * forwards the backlog.  Past ONLINE_BUS_MAX_LAG records not yet forwarded
 * for a model, online.c answers OVERLOADED (online__bus_lagging): the bound
 * keeps a long outage from filling the disk and says at once that the bus
 * cannot keep up, instead of acknowledging samples hours from the stream.
 * The metrics show both sides: the outbox's lag per model (what this server
 * has not forwarded) and the consumer's lag (what the stream holds that this
 * replica has not read yet: a replica far behind, catching up).
 *
 * LIMIT: replicas switch to a new version each at the stream position where
 * it went live there; between their switch points they learn different
 * samples into different versions, so after a version change replicas agree
 * again only from the next common version on.
 */
#define _GNU_SOURCE
#include "online_impl.h"

#include "bus.h"
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <time.h>
#include <unistd.h>

#define G online__G
#define FORWARD_BATCH 256
#define REFRESH_NS 1000000000ull /* the stream's state for the consumer lag: once a second */

static struct {
    bus_t *bus;
    pthread_t forwarder, consumer;
    bool running;
    _Atomic bool stop;
    _Atomic bool ready;     /* the forwarder saw bus_ready succeed: the consumer may open */
    _Atomic bool reopen;    /* the connection came back: the consumer re-opens its reader */
    char node[160];
    uint64_t start_seq;
    _Atomic uint64_t read_seq; /* the last stream sequence the consumer handed on (or skipped) */
    _Atomic uint64_t forwarded, consumed, bad, gaps, unknown_model, lag_refused, too_big, unsendable;
} B;

bool online__bus_on(void) { return B.bus != NULL; }

/* Records of q's outbox not yet forwarded.  q->lock held (the log's end). */
static uint64_t outbox_lag_locked(online_model_t *q)
{
    uint64_t end = sample_log_next_pos(q->slog), fwd = atomic_load(&q->fwd_pos);
    return end > fwd ? end - fwd : 0;
}

bool online__bus_lagging(online_model_t *q, char *why, size_t why_len)
{
    uint64_t lag = outbox_lag_locked(q);
    if (lag <= ONLINE_BUS_MAX_LAG)
        return false;
    atomic_fetch_add_explicit(&B.lag_refused, 1, memory_order_relaxed);
    if (why)
        snprintf(why, why_len, "model '%s': %" PRIu64 " records of its sample log wait to be "
                 "forwarded to the bus (NATS %s; at most %d): try again later", q->name, lag,
                 bus_connected(B.bus) ? "slower than the clients" : "not reachable",
                 ONLINE_BUS_MAX_LAG);
    return true;
}

/* ---- the outbox's position ------------------------------------------------------- */

uint64_t online__outbox_read(const char *dir)
{
    char p[1200];
    snprintf(p, sizeof p, "%s/outbox.state", dir);
    FILE *f = fopen(p, "r");
    unsigned long long v = 0;
    if (f) {
        if (fscanf(f, "%llu", &v) != 1)
            v = 0;
        fclose(f);
    }
    return v;
}

/* Without fsync: a crash may forward a batch again, which the stream stores once. */
static void outbox_write(const char *dir, uint64_t pos)
{
    char p[1200], tmp[1220];
    snprintf(p, sizeof p, "%s/outbox.state", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return;
    fprintf(f, "%" PRIu64 "\n", pos);
    if (fclose(f) == 0)
        (void)rename(tmp, p);
}

/* ---- forwarding ------------------------------------------------------------------- */

struct fwd {
    bus_item_t items[FORWARD_BATCH];
    char ids[FORWARD_BATCH][256];
    char subject[200];
    uint8_t *buf; /* the batch's frames */
    size_t cap;
    codec_arena_t arena;
};

/* The message id of q's record at pos (part >= 0: its part-th part):
 * "<node>/<model>/<pos>[.<part>]", or, when that passes the 128 bytes an id
 * may take (a long --bus-node and model name), "h<XXH3 of node/model>/<pos>
 * [.<part>]": the same for every retry and restart, so the stream's dedup
 * still stores a record once. */
static void msg_id(char *out, size_t cap, const online_model_t *q, uint64_t pos, int part)
{
    char tail[32] = "";
    if (part >= 0)
        snprintf(tail, sizeof tail, ".%d", part);
    int n = snprintf(out, cap, "%s/%s/%" PRIu64 "%s", B.node, q->name, pos, tail);
    if (n > 0 && n <= 128)
        return;
    char who[400];
    snprintf(who, sizeof who, "%s/%s", B.node, q->name);
    snprintf(out, cap, "h%016" PRIx64 "/%" PRIu64 "%s", (uint64_t)XXH3_64bits(who, strlen(who)),
             pos, tail);
}

/* n more of q's records reached the stream: the position moves past them. */
static void forwarded(online_model_t *q, uint64_t n)
{
    uint64_t fwd = atomic_load(&q->fwd_pos) + n;
    atomic_store(&q->fwd_pos, fwd);
    outbox_write(q->slog_dir, fwd);
    if (fwd / 16384 != (fwd - n) / 16384) { /* now and then: forwarded segments go */
        pthread_mutex_lock(&q->lock);
        (void)sample_log_trim(q->slog, fwd);
        pthread_mutex_unlock(&q->lock);
    }
    atomic_fetch_add_explicit(&B.forwarded, n, memory_order_relaxed);
}

static void forward_failed(online_model_t *q, int acked, int n, const char *msg)
{
    /* a cluster coming back answers "no responders" at once, again and again: one line
     * per 5 s, with the count */
    static uint64_t logged_ns, quiet;
    uint64_t now = online__now_ns();
    if (now - logged_ns >= 5000000000ull) {
        LOG(LL_WARN, "online: forwarding model '%s': %d of %d records acknowledged (%s); "
            "the batch is sent again (%" PRIu64 " more failed batches not logged)", q->name,
            acked < 0 ? 0 : acked, n, msg, quiet);
        logged_ns = now;
        quiet = 0;
    } else {
        quiet++;
    }
}

/* Publishes the parts gathered in f (parts of them): 0, or -1 (logged). */
static int publish_parts(online_model_t *q, struct fwd *f, int parts, const size_t *offs)
{
    for (int i = 0; i < parts; i++)
        f->items[i].data = f->buf + offs[i];
    bus_error_t berr;
    int acked = parts ? bus_publish_batch(B.bus, f->items, parts, &berr) : 0;
    if (acked != parts) {
        forward_failed(q, acked, parts, berr.msg);
        return -1;
    }
    return 0;
}

/* The record at pos, t, is larger than a bus message (the outbox of a build
 * that did not refuse such a TRAIN at submit): it goes as parts of its
 * samples, each a TRAIN under the limit, in batches of FORWARD_BATCH, with
 * message ids of their own (msg_id: a retry of the record stores each part
 * once).  A single sample over the limit cannot go: an ERROR, counted, and
 * the rest goes on.  1 (the record forwarded), or -1 (a retry waits). */
static int forward_parts(online_model_t *q, struct fwd *f, const codec_train_t *t, uint64_t pos)
{
    uint32_t stack_from[64], stack_count[64]; /* sample ranges still to place */
    int parts = 0, top = 0, total = 0;
    uint64_t lost = 0;
    stack_from[top] = 0, stack_count[top++] = t->samples;
    size_t used = 0, offs[FORWARD_BATCH];
    while (top > 0) {
        top--;
        uint32_t a = stack_from[top], c = stack_count[top];
        codec_train_t part = *t;
        part.samples = c;
        part.labels = t->labels + a;
        part.weights = t->weights ? t->weights + a : NULL;
        part.sample = t->sample + a;
        size_t len = 0;
        if (codec_encode_train(NULL, 0, 0, &part, &len, NULL) != CODEC_NEED_MORE)
            len = SIZE_MAX;
        if (len > BUS_MAX_DATA && c > 1 && top + 2 <= 64) {
            stack_from[top] = a + c / 2, stack_count[top++] = c - c / 2; /* the second half after */
            stack_from[top] = a, stack_count[top++] = c / 2;
            continue;
        }
        if (len > BUS_MAX_DATA) {
            lost += c;
            continue;
        }
        if (parts == FORWARD_BATCH) { /* a batch full of parts: it goes, then the rest */
            if (publish_parts(q, f, parts, offs) != 0)
                return -1;
            parts = 0;
            used = 0;
        }
        if (used + len > f->cap) {
            size_t want = (used + len) * 2;
            uint8_t *b = realloc(f->buf, want);
            if (!b)
                return -1;
            f->buf = b;
            f->cap = want;
        }
        if (codec_encode_train(f->buf + used, f->cap - used, pos, &part, &len, NULL) != CODEC_OK) {
            lost += c;
            continue;
        }
        msg_id(f->ids[parts], sizeof f->ids[parts], q, pos, total++);
        f->items[parts] = (bus_item_t){.subject = f->subject, .len = len, .msg_id = f->ids[parts]};
        offs[parts++] = used;
        used += len;
    }
    if (publish_parts(q, f, parts, offs) != 0)
        return -1;
    if (lost) {
        atomic_fetch_add_explicit(&B.unsendable, lost, memory_order_relaxed);
        LOG(LL_ERROR, "online: forwarding model '%s': record %" PRIu64 " of the outbox holds "
            "%" PRIu64 " samples that do not fit a bus message (%u bytes) even alone: not "
            "forwarded, so not learned by any replica (tlserve_bus_outbox_unsendable_total)",
            q->name, pos, lost, BUS_MAX_DATA);
    }
    LOG(LL_WARN, "online: forwarding model '%s': record %" PRIu64 " of the outbox (%u samples) "
        "was larger than a bus message: forwarded as %d parts", q->name, pos, t->samples, total);
    forwarded(q, 1);
    return 1;
}

/* Forwards what q's log holds past its forwarded position: the records
 * forwarded (0 when none), or -1 when the batch failed and waits for a retry. */
static int forward_model(online_model_t *q, struct fwd *f)
{
    sample_log_reader_t *r = NULL;
    sample_log_error_t lerr;
    uint64_t from = atomic_load(&q->fwd_pos);
    pthread_mutex_lock(&q->lock);
    uint64_t end = sample_log_next_pos(q->slog);
    pthread_mutex_unlock(&q->lock);
    if (from >= end)
        return 0;
    if (sample_log_reader_open(q->slog_dir, from, &r, &lerr) != 0) {
        LOG(LL_WARN, "online: forwarding model '%s' from %" PRIu64 ": %s", q->name, from,
            lerr.msg);
        return 0;
    }
    snprintf(f->subject, sizeof f->subject, "%s.%s", G.srv->cfg.bus_subject_prefix, q->name);
    size_t used = 0, offs[FORWARD_BATCH];
    int n = 0;
    while (n < FORWARD_BATCH && from + (uint64_t)n < end) {
        sample_log_rec_t rec;
        uint64_t pos;
        codec_arena_reset(&f->arena);
        if (sample_log_next(r, &f->arena, &rec, &pos, &lerr) != 0)
            break;
        rec.train.weights = rec.weights;
        size_t len = 0;
        if (codec_encode_train(NULL, 0, 0, &rec.train, &len, NULL) != CODEC_NEED_MORE)
            break;
        if (len > BUS_MAX_DATA) { /* a record from before the limit was checked at submit */
            if (n == 0) {
                sample_log_reader_close(r);
                return forward_parts(q, f, &rec.train, pos);
            }
            break; /* the batch before it first */
        }
        if (used + len > f->cap) {
            size_t want = (used + len) * 2;
            uint8_t *b = realloc(f->buf, want);
            if (!b)
                break;
            f->buf = b;
            f->cap = want;
        }
        if (codec_encode_train(f->buf + used, f->cap - used, pos, &rec.train, &len, NULL) !=
            CODEC_OK)
            break;
        offs[n] = used;
        msg_id(f->ids[n], sizeof f->ids[n], q, pos, -1);
        f->items[n] = (bus_item_t){.subject = f->subject, .len = len, .msg_id = f->ids[n]};
        used += len;
        n++;
    }
    sample_log_reader_close(r);
    if (n == 0)
        return 0;
    for (int i = 0; i < n; i++)
        f->items[i].data = f->buf + offs[i];
    bus_error_t berr;
    int acked = bus_publish_batch(B.bus, f->items, n, &berr);
    if (acked != n) {
        forward_failed(q, acked, n, berr.msg);
        return -1;
    }
    forwarded(q, (uint64_t)n);
    return n;
}

static void *forwarder_main(void *arg)
{
    (void)arg;
    struct fwd *f = calloc(1, sizeof *f);
    if (f) {
        f->arena.cap = sample_log_arena_bound();
        f->arena.base = malloc(f->arena.cap);
    }
    if (!f || !f->arena.base) {
        LOG(LL_ERROR, "online: no memory for the bus forwarder: nothing reaches the stream");
        return NULL;
    }
    char last_err[256] = ""; /* bus_ready's last failure, logged once */
    uint64_t refreshed = 0;
    while (!atomic_load(&B.stop)) {
        if (!atomic_load(&B.ready)) {
            bus_error_t err;
            int rc = bus_ready(B.bus, 200, &err);
            if (rc != 0) {
                if (rc != -ENOTCONN && strcmp(err.msg, last_err) != 0)
                    LOG(LL_WARN, "online: the bus is reachable but not ready: %s; trying again",
                        err.msg);
                snprintf(last_err, sizeof last_err, "%s", err.msg);
                if (rc != -ENOTCONN) {
                    struct timespec nap = {0, 200 * 1000000};
                    nanosleep(&nap, NULL);
                }
                continue;
            }
            LOG(LL_INFO, "online: the bus is connected: stream %s on %s ready; forwarding the "
                "outbox and learning from sequence %" PRIu64, G.srv->cfg.bus_stream,
                G.srv->cfg.bus_servers, B.start_seq);
            atomic_store(&B.ready, true);
        }
        if (!bus_connected(B.bus)) { /* publishing now would only fill nats.c's reconnect buffer */
            struct timespec nap = {0, 20 * 1000000};
            nanosleep(&nap, NULL);
            continue;
        }
        uint64_t t = online__now_ns();
        if (t - refreshed >= REFRESH_NS) { /* the consumer lag's other side */
            (void)bus_refresh(B.bus, NULL);
            refreshed = t;
        }
        int moved = 0, failed = 0;
        uint32_t n = atomic_load_explicit(&G.nmodels, memory_order_acquire);
        for (uint32_t i = 0; i < n; i++) {
            online_model_t *q = atomic_load_explicit(&G.models[i], memory_order_acquire);
            int k = q && q->slog ? forward_model(q, f) : 0;
            if (k < 0)
                failed++;
            else
                moved += k;
        }
        if (failed) { /* the stream is electing a leader, or gone: retry in a while */
            struct timespec nap = {0, 100 * 1000000};
            nanosleep(&nap, NULL);
        } else if (!moved) {
            struct timespec nap = {0, 1000000}; /* 1 ms: the freshness budget is 100 */
            nanosleep(&nap, NULL);
        }
    }
    free(f->buf);
    free(f->arena.base);
    free(f);
    return NULL;
}

/* nats.c's thread: the connection went down or came back (logged; not at stop). */
static void on_state(bool up, void *arg)
{
    (void)arg;
    if (atomic_load(&B.stop))
        return;
    if (!up)
        LOG(LL_WARN, "online: the bus lost its NATS connection (%s): until a server answers, "
            "TRAIN and FEEDBACK wait in the outbox, at most %d per model, then OVERLOADED; "
            "PREDICT is not affected",
            G.srv->cfg.bus_servers, ONLINE_BUS_MAX_LAG);
    else if (atomic_load(&B.ready)) {
        LOG(LL_INFO, "online: the bus is connected again: forwarding the outbox");
        atomic_store(&B.reopen, true);
    }
}

/* ---- consuming ------------------------------------------------------------------ */

/* Sleeps up to ms, waking early when the bus stops. */
static void nap_unless_stopped(int ms)
{
    for (int i = 0; i < ms / 10 && !atomic_load(&B.stop); i++) {
        struct timespec nap = {0, 10 * 1000000};
        nanosleep(&nap, NULL);
    }
}

/* Opens the reader from seq once the forwarder found the bus ready: NULL when stopping. */
static bus_reader_t *reader_open(uint64_t seq)
{
    bus_reader_t *r = NULL;
    bus_error_t err;
    while (!atomic_load(&B.stop)) {
        if (!atomic_load(&B.ready)) {
            nap_unless_stopped(20);
            continue;
        }
        if (bus_reader_open(B.bus, NULL, seq, &r, &err) == 0)
            return r;
        LOG(LL_WARN, "online: the bus reader did not open (%s); trying again", err.msg);
        nap_unless_stopped(250);
    }
    return NULL;
}

/* With --model-repo the versions load in the background after the start: a
 * message read before its model's slot exists would be skipped as naming a
 * model not served here.  A first version of the repository (what /readyz
 * waits for) and the models this server learned before (their trainers
 * exist from their sample logs, online_start) are waited for, up to
 * SLOTS_WAIT_MS, then the consumer reads anyway (a WARN names the one
 * missing).  LIMIT: a second model of a repository, never learned here,
 * that loads after the first may miss the stream's first messages. */
#define SLOTS_WAIT_MS 60000
static void wait_for_slots(void)
{
    for (int waited = 0; !atomic_load(&B.stop); waited += 20) {
        const char *missing = G.srv->cfg.model_repo[0] && !server_model_any_active(G.srv)
                                  ? "(the repository's first)"
                                  : NULL;
        uint32_t n = atomic_load_explicit(&G.nmodels, memory_order_acquire);
        for (uint32_t i = 0; i < n && !missing; i++) {
            online_model_t *q = atomic_load_explicit(&G.models[i], memory_order_acquire);
            if (q && !server_slot_named(G.srv, q->name))
                missing = q->name;
        }
        if (!missing)
            return;
        if (waited >= SLOTS_WAIT_MS) {
            LOG(LL_WARN,
                "online: model '%s' learned here before is not served after %d s: "
                "the stream's messages for it are skipped (tlserve_bus_unknown_model_total)",
                missing, SLOTS_WAIT_MS / 1000);
            return;
        }
        nap_unless_stopped(20);
    }
}

/* A stream message the consumer skips: an ERROR, the first ten each, then at
 * most one line in 5 s (a flood of them says so with its count). */
static void consumer_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void consumer_warn(const char *fmt, ...)
{
    static uint64_t logged_ns, quiet, lines;
    uint64_t now = online__now_ns();
    if (++lines > 10 && now - logged_ns < 5000000000ull) {
        quiet++;
        return;
    }
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    LOG(LL_ERROR, "online: %s (%" PRIu64 " more not logged)", msg, quiet);
    logged_ns = now;
    quiet = 0;
}

/* Why a stream message's TRAIN payload cannot be learned as model's (it does
 * not decode: the checks a client's frame passes; or it names another model
 * than its subject), or NULL. */
static const char *check_train(codec_arena_t *arena, const uint8_t *payload, uint32_t len,
                               uint16_t flags, const char *model)
{
    static char why[300];
    size_t need = codec_arena_bound(len);
    if (need > arena->cap) {
        void *b = realloc(arena->base, need);
        if (!b)
            return "no memory to check it";
        arena->base = b;
        arena->cap = need;
    }
    codec_arena_reset(arena);
    codec_train_t t;
    codec_error_t err;
    if (codec_decode_train(payload, len, flags, arena, &t, &err) != CODEC_OK) {
        snprintf(why, sizeof why, "its TRAIN does not decode: %s", err.msg);
        return why;
    }
    if (strcmp(t.name, model) != 0) {
        snprintf(why, sizeof why, "its TRAIN names model '%.128s', its subject '%.64s'", t.name,
                 model);
        return why;
    }
    return NULL;
}

static void *consumer_main(void *arg)
{
    (void)arg;
    bus_error_t err;
    codec_arena_t arena = {0};
    wait_for_slots();
    bus_reader_t *r = reader_open(B.start_seq);
    size_t plen = strlen(G.srv->cfg.bus_subject_prefix);
    while (r && !atomic_load(&B.stop)) {
        if (atomic_exchange(&B.reopen, false)) {
            /* nats.c re-creates the consumer too, but only after missing its heartbeats (5 s)
             * when the whole cluster restarted and forgot it: a new one now, from where we
             * are (a message both deliver is skipped by its sequence) */
            uint64_t at = bus_reader_position(r);
            bus_reader_close(r);
            r = reader_open(at);
            continue;
        }
        bus_msg_t m;
        int rc = bus_reader_next(r, 100, &m, &err);
        if (rc == BUS_READ_TIMEOUT)
            continue;
        if (rc < 0) { /* a consumer nats.c could not re-create: a new one from where we are */
            uint64_t at = bus_reader_position(r);
            LOG(LL_WARN, "online: the bus reader: %s; reading again from %" PRIu64, err.msg, at);
            bus_reader_close(r);
            nap_unless_stopped(1000);
            r = reader_open(at);
            continue;
        }
        if (rc == BUS_READ_GAP) {
            atomic_fetch_add_explicit(&B.gaps, m.skipped, memory_order_relaxed);
            if (m.seq - m.skipped == B.start_seq && atomic_load(&B.consumed) == 0)
                LOG(LL_ERROR,
                    "online: the stream no longer holds sequence %" PRIu64 ", where "
                    "this replica's learning resumes (trainer.state or its export): its first "
                    "message kept is %" PRIu64 "; learning from there, the %" PRIu64 " messages "
                    "between are lost to this replica's model (tlserve_bus_gap_total)",
                    B.start_seq, m.seq, m.skipped);
            else
                LOG(LL_WARN,
                    "online: the stream has no messages %" PRIu64 "..%" PRIu64
                    " (aged out or deleted): not learned",
                    m.seq - m.skipped, m.seq - 1);
        }
        atomic_fetch_add_explicit(&B.consumed, 1, memory_order_relaxed);
        const char *model = strncmp(m.subject, G.srv->cfg.bus_subject_prefix, plen) == 0 &&
                                    m.subject[plen] == '.'
                                ? m.subject + plen + 1
                                : NULL;
        codec_header_t h;
        codec_error_t cerr;
        const char *bad = NULL;
        if (!model || m.len < CODEC_HEADER_SIZE ||
            codec_parse_header(m.data, m.len, &h, &cerr) != CODEC_OK || h.type != CODEC_TRAIN ||
            h.payload_len != m.len - CODEC_HEADER_SIZE)
            bad = "not a TRAIN frame (header)";
        else
            bad = check_train(&arena, (const uint8_t *)m.data + CODEC_HEADER_SIZE, h.payload_len,
                              h.flags, model);
        if (bad) {
            atomic_fetch_add_explicit(&B.bad, 1, memory_order_relaxed);
            atomic_store_explicit(&B.read_seq, m.seq, memory_order_relaxed);
            consumer_warn("stream message %" PRIu64 " on %.200s is not learned: %s "
                          "(tlserve_bus_bad_total)", m.seq, m.subject, bad);
            continue;
        }
        char why[200];
        online_model_t *q = server_slot_named(G.srv, model) ? online__model_get(model, why, sizeof why)
                                                            : NULL;
        if (!q) {
            atomic_fetch_add_explicit(&B.unknown_model, 1, memory_order_relaxed);
            atomic_store_explicit(&B.read_seq, m.seq, memory_order_relaxed);
            continue;
        }
        if (m.seq < q->bus_from) { /* learned into this version before the restart */
            atomic_store_explicit(&B.read_seq, m.seq, memory_order_relaxed);
            continue;
        }
        while (!atomic_load(&B.stop) &&
               (rc = online__enqueue(q, h.flags, (const uint8_t *)m.data + CODEC_HEADER_SIZE,
                                     h.payload_len, m.seq)) == -1) {
            struct timespec nap = {0, 1000000}; /* the queue is full: wait for the trainer */
            nanosleep(&nap, NULL);
        }
        if (rc == -E2BIG) { /* a peer with a larger queue took it: this one never can */
            atomic_fetch_add_explicit(&B.too_big, 1, memory_order_relaxed);
            consumer_warn("stream message %" PRIu64 " (a TRAIN of %u bytes for model '%s') "
                          "is larger than half of this replica's --online-queue-bytes %zu, so "
                          "it is not learned here (tlserve_bus_too_big_total): give every "
                          "replica the same --online-queue-bytes",
                          m.seq, h.payload_len, q->name, q->cap);
        }
        atomic_store_explicit(&B.read_seq, m.seq, memory_order_relaxed);
    }
    bus_reader_close(r);
    free(arena.base);
    return NULL;
}

/* ---- start, stop, metrics ------------------------------------------------------- */

int online__bus_start(char *why, size_t why_len)
{
    const server_config_t *c = &G.srv->cfg;
    if (!c->bus_servers[0])
        return 0;
    if (online__sync_mode(c)) /* partitioned replicas: online_sync.c */
        return online__sync_start(why, why_len);
    if (!c->sample_log_dir[0]) {
        snprintf(why, why_len, "--bus-servers needs --sample-log-dir (the outbox a sample is "
                 "acknowledged in before it is forwarded to the stream)");
        return -EINVAL;
    }
    if (c->bus_node[0]) {
        snprintf(B.node, sizeof B.node, "%s", c->bus_node);
    } else {
        char host[128] = "tlserve";
        (void)gethostname(host, sizeof host - 1);
        snprintf(B.node, sizeof B.node, "%s:%d", host, c->port);
    }
    char subject[200];
    snprintf(subject, sizeof subject, "%s.>", c->bus_subject_prefix);
    const char *subjects[1] = {subject};
    bus_options_t o = {.servers = c->bus_servers, .stream = c->bus_stream, .subjects = subjects,
                       .n_subjects = 1, .replicas = c->bus_replicas, .name = B.node,
                       .connect_in_background = true, .on_state = on_state,
                       /* an ack on a healthy cluster takes milliseconds; a stream electing
                        * its leader after a restart answers nothing, and the outbox's batch
                        * waits this long before it is sent again */
                       .timeout_ms = 2000};
    bus_error_t err;
    atomic_store(&B.stop, true); /* no state logs from a bus that fails to open */
    int rc = bus_open(&o, &B.bus, &err);
    if (rc != 0) { /* a bad URL or a stream with other settings: retrying cannot cure it */
        snprintf(why, why_len, "the bus: %s", err.msg);
        return rc;
    }
    if (!bus_connected(B.bus))
        LOG(LL_WARN, "online: the bus is not reachable yet (%s): PREDICT is served; TRAIN and "
            "FEEDBACK are acknowledged into the outbox, at most %d per model, then OVERLOADED; "
            "forwarding and learning start when a server answers", c->bus_servers,
            ONLINE_BUS_MAX_LAG);
    /* where the consumer starts: the lowest position a model's trainer.state names */
    atomic_store(&B.ready, false);
    uint64_t start = UINT64_MAX;
    uint32_t n = atomic_load(&G.nmodels);
    for (uint32_t i = 0; i < n; i++) { /* model_create_locked set their positions */
        online_model_t *q = atomic_load(&G.models[i]);
        start = q->bus_from < start ? q->bus_from : start;
    }
    B.start_seq = start == UINT64_MAX ? 1 : start;
    atomic_store(&B.read_seq, B.start_seq - 1);
    atomic_store(&B.stop, false);
    if (pthread_create(&B.forwarder, NULL, forwarder_main, NULL) != 0) {
        atomic_store(&B.stop, true);
        bus_close(B.bus);
        B.bus = NULL;
        snprintf(why, why_len, "cannot start the bus forwarder thread");
        return -EAGAIN;
    }
    if (pthread_create(&B.consumer, NULL, consumer_main, NULL) != 0) {
        atomic_store(&B.stop, true);
        pthread_join(B.forwarder, NULL);
        bus_close(B.bus);
        B.bus = NULL;
        snprintf(why, why_len, "cannot start the bus consumer thread");
        return -EAGAIN;
    }
    B.running = true;
    LOG(LL_INFO, "online: replicas over the bus: stream %s on %s, subject %s, node %s; learning "
        "from sequence %" PRIu64 " once connected", c->bus_stream, c->bus_servers, subject, B.node,
        B.start_seq);
    return 0;
}

void online__bus_stop(void)
{
    online__sync_stop();
    if (!B.running)
        return;
    atomic_store(&B.stop, true);
    pthread_join(B.forwarder, NULL);
    pthread_join(B.consumer, NULL);
    bus_close(B.bus);
    B.bus = NULL;
    B.running = false;
}

size_t online__bus_metrics(char *buf, size_t len)
{
    if (!B.bus || len == 0)
        return online__sync_metrics(buf, len);
    bus_stats_t st;
    bus_stats(B.bus, &st);
    int n = snprintf(
        buf, len,
        "# HELP tlserve_bus_connected 1 while the NATS connection is up\n"
        "# TYPE tlserve_bus_connected gauge\ntlserve_bus_connected %d\n"
        "# HELP tlserve_bus_forwarded_total Sample-log records forwarded to the stream\n"
        "# TYPE tlserve_bus_forwarded_total counter\ntlserve_bus_forwarded_total %" PRIu64 "\n"
        "# HELP tlserve_bus_consumed_total Stream messages read\n"
        "# TYPE tlserve_bus_consumed_total counter\ntlserve_bus_consumed_total %" PRIu64 "\n"
        "# HELP tlserve_bus_bad_total Stream messages not learned: not a TRAIN frame that "
        "decodes, or one naming another model than its subject\n"
        "# TYPE tlserve_bus_bad_total counter\ntlserve_bus_bad_total %" PRIu64 "\n"
        "# HELP tlserve_bus_too_big_total Stream messages not learned: larger than half of "
        "this replica's --online-queue-bytes\n"
        "# TYPE tlserve_bus_too_big_total counter\ntlserve_bus_too_big_total %" PRIu64 "\n"
        "# HELP tlserve_bus_outbox_unsendable_total Outbox samples that could not be forwarded: "
        "one sample larger than a bus message (ERROR logged)\n"
        "# TYPE tlserve_bus_outbox_unsendable_total counter\n"
        "tlserve_bus_outbox_unsendable_total %" PRIu64 "\n"
        "# HELP tlserve_bus_unknown_model_total Stream messages for a model not served here\n"
        "# TYPE tlserve_bus_unknown_model_total counter\ntlserve_bus_unknown_model_total %" PRIu64
        "\n# HELP tlserve_bus_gap_total Stream sequences missing when read (not learned)\n"
        "# TYPE tlserve_bus_gap_total counter\ntlserve_bus_gap_total %" PRIu64 "\n"
        "# HELP tlserve_bus_reconnects_total Reconnections to a NATS server\n"
        "# TYPE tlserve_bus_reconnects_total counter\ntlserve_bus_reconnects_total %" PRIu64 "\n"
        "# HELP tlserve_bus_publish_failed_total Messages the stream did not acknowledge (sent "
        "again)\n# TYPE tlserve_bus_publish_failed_total counter\n"
        "tlserve_bus_publish_failed_total %" PRIu64 "\n",
        bus_connected(B.bus) ? 1 : 0, atomic_load(&B.forwarded), atomic_load(&B.consumed),
        atomic_load(&B.bad), atomic_load(&B.too_big), atomic_load(&B.unsendable),
        atomic_load(&B.unknown_model), atomic_load(&B.gaps), st.reconnects,
        st.failed);
    if (n < 0 || (size_t)n >= len)
        return n < 0 ? 0 : len - 1;
    size_t off = (size_t)n;
    uint64_t last = bus_last_seq(B.bus), read = atomic_load(&B.read_seq);
    n = snprintf(buf + off, len - off,
                 "# HELP tlserve_bus_start_seq The stream sequence the consumer started from "
                 "(the lowest a model's trainer.state names; 1: the whole stream)\n"
                 "# TYPE tlserve_bus_start_seq gauge\ntlserve_bus_start_seq %" PRIu64 "\n"
                 "# HELP tlserve_bus_ready 1 once the stream was checked or created (forwarding "
                 "and learning run)\n# TYPE tlserve_bus_ready gauge\ntlserve_bus_ready %d\n"
                 "# HELP tlserve_bus_consumer_lag Stream messages this replica has not read yet "
                 "(the highest sequence seen minus the last read)\n"
                 "# TYPE tlserve_bus_consumer_lag gauge\ntlserve_bus_consumer_lag %" PRIu64 "\n"
                 "# HELP tlserve_bus_lag_refused_total TRAIN or FEEDBACK answered OVERLOADED "
                 "because the outbox held tlserve_bus_outbox_max_lag records not forwarded\n"
                 "# TYPE tlserve_bus_lag_refused_total counter\n"
                 "tlserve_bus_lag_refused_total %" PRIu64 "\n"
                 "# HELP tlserve_bus_outbox_max_lag Records a model's outbox may hold not "
                 "forwarded before OVERLOADED\n# TYPE tlserve_bus_outbox_max_lag gauge\n"
                 "tlserve_bus_outbox_max_lag %d\n"
                 "# HELP tlserve_bus_outbox_lag Records in the model's outbox (sample log) not "
                 "yet forwarded to the stream\n# TYPE tlserve_bus_outbox_lag gauge\n",
                 B.start_seq, atomic_load(&B.ready) ? 1 : 0, last > read ? last - read : 0,
                 atomic_load(&B.lag_refused), ONLINE_BUS_MAX_LAG);
    if (n < 0 || (size_t)n >= len - off) {
        buf[off] = 0;
        return off;
    }
    off += (size_t)n;
    uint32_t nm = atomic_load_explicit(&G.nmodels, memory_order_acquire);
    for (uint32_t i = 0; i < nm; i++) {
        online_model_t *q = atomic_load_explicit(&G.models[i], memory_order_acquire);
        if (!q || !q->slog)
            continue;
        pthread_mutex_lock(&q->lock); /* a scrape, not a request: the lock is cheap here */
        uint64_t lag = outbox_lag_locked(q);
        pthread_mutex_unlock(&q->lock);
        n = snprintf(buf + off, len - off, "tlserve_bus_outbox_lag{model=\"%s\"} %" PRIu64 "\n",
                     q->name, lag);
        if (n < 0 || (size_t)n >= len - off) {
            buf[off] = 0;
            return off;
        }
        off += (size_t)n;
    }
    return off;
}
