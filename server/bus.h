/* bus.h — the online-learning bus: one NATS JetStream stream, published to and read in order.
 *
 * The trainer logs samples here before it acknowledges them (an acknowledged sample is one
 * JetStream has stored on a quorum of the stream's replicas), replicas read the same stream in
 * order to learn as one, and a restart replays it from the sequence its last delta covers.
 * The stream sequence (1, 2, 3, ... assigned by JetStream) is the log position everywhere.
 *
 * THREAD SAFETY
 *   A bus_t may be shared by threads: publishes are serialized by a mutex inside (one lock per
 *   call, not per message of a batch); bus_stats and bus_connected may be called at any time
 *   from any thread (the admin thread's /metrics). A bus_reader_t belongs to one thread.
 *   Reconnects are nats.c's: it reconnects forever (a wait between attempts), buffers
 *   publishes made while disconnected, and re-creates readers' consumers; the bus counts them.
 *   bus_ready may be called by several threads at once (serialized inside).
 *
 * STARTING WITHOUT NATS
 *   With connect_in_background, bus_open does not need a server: when none answers it
 *   returns a bus that is not ready yet while nats.c keeps trying (reconnect_wait_ms apart).
 *   bus_ready then waits for the connection and checks or creates the stream once; until it
 *   has returned 0, publishes and bus_reader_open fail with -ENOTCONN (nothing is buffered
 *   for a stream that may not exist). Without the flag bus_open returns a ready bus or fails.
 *
 * ERRORS
 *   Functions return 0 (or a count) on success and -errno on failure: -EINVAL for bad
 *   arguments, -ETIMEDOUT when JetStream did not answer in time, -ECONNREFUSED/-ENOTCONN when
 *   no server could be reached, -EEXIST for an existing stream whose settings differ,
 *   -ENOENT for a missing stream, -ENOMEM, -EIO for any other failure. Where an err is
 *   passed, it is filled on failure with a code and a sentence naming the servers, stream or
 *   subject concerned ("stream TLSAMPLES exists with replicas 1, this bus wants 3").
 *
 * WHAT IS ALLOCATED PER MESSAGE
 *   Publishing: nats.c builds one natsMsg (header with the message id, and a copy of the
 *   data) per asynchronous publish, and one jsPubAck per synchronous publish; a batch costs
 *   the bus one array of n pointers. Reading:
 *   nats.c allocates one natsMsg per delivered message (subject, reply and data in one
 *   block); the bus keeps it until the next bus_reader_next and parses the stream sequence
 *   from its reply subject in place, so the bus itself allocates nothing per message.
 */
#ifndef TL_SERVER_BUS_H
#define TL_SERVER_BUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct bus bus_t;
typedef struct bus_reader bus_reader_t;

typedef enum {
    BUS_OK = 0,
    BUS_E_ARG,      /* an argument or option is out of range */
    BUS_E_CONNECT,  /* no server of the list could be reached */
    BUS_E_STREAM,   /* the stream is missing, or exists with other settings */
    BUS_E_TIMEOUT,  /* JetStream did not acknowledge or answer in time */
    BUS_E_PUBLISH,  /* JetStream refused a message (or the connection closed) */
    BUS_E_READ,     /* a consumer could not be created or a delivery was malformed */
    BUS_E_NATS,     /* any other nats.c failure */
} bus_errcode_t;

typedef struct {
    bus_errcode_t code;
    char msg[256];  /* a sentence, NUL-terminated */
} bus_error_t;

typedef struct {
    const char *servers;      /* "nats://127.0.0.1:4222,nats://..." (required) */
    const char *stream;       /* stream name, e.g. "TLSAMPLES" (required; no '.', '*', '>', spaces) */
    const char *const *subjects; /* subjects the stream binds (required, 1..16) */
    int n_subjects;
    int replicas;             /* 1..5; 0 means 3 */
    int64_t max_bytes;        /* stream size limit in bytes, oldest dropped first; 0: unlimited */
    int64_t max_age_ms;       /* messages older than this are dropped; 0: forever */
    int64_t dedup_window_ms;  /* a message id seen within this window is stored once; 0: 2 min */
    int64_t timeout_ms;       /* connect, API and acknowledgement wait; 0: 5000 */
    int64_t reconnect_wait_ms;/* pause between reconnect attempts; 0: 250 */
    int reconnect_buf_bytes;  /* publishes buffered while reconnecting; 0: 8 MiB */
    const char *name;         /* connection name shown by the servers; NULL: "tlserve-bus" */
    bool connect_in_background; /* no server reachable at open: return a bus that is not ready
                                   yet (see STARTING WITHOUT NATS) instead of -ECONNREFUSED */
    void (*on_state)(bool up, void *arg); /* may be NULL: called on a nats.c thread when the
                                   connection comes up (a first connection made in the
                                   background, a reconnect) or goes down (also during
                                   bus_close); it must not block nor call the bus */
    void *on_state_arg;
} bus_options_t;

/* Connects to the servers and creates the stream, or checks that an existing one has the same
 * subjects, replicas, storage (file), retention (limits), max bytes, max age and dedup window;
 * any difference fails with -EEXIST and a sentence naming it (the bus never changes a stream
 * it did not create: another deployment may own it). Later disconnects are retried forever.
 * A server list that is not 1..16 NATS URLs ([nats://][user[:pass]@]host[:port], port
 * 1..65535) fails with -EINVAL in every mode. Without o->connect_in_background the first
 * connection must succeed (-ECONNREFUSED otherwise) and the bus is ready on return. With it,
 * no reachable server is not an error: the bus is returned not ready; when a server answers
 * at once the stream is set up here as above, and only a failure that retrying cannot cure
 * (-EEXIST, -EINVAL) fails the open (a JetStream that does not answer yet is left to
 * bus_ready). Blocks up to a few timeouts. On success *out is owned by the caller:
 * bus_close it. */
int bus_open(const bus_options_t *o, bus_t **out, bus_error_t *err);

/* Waits up to timeout_ms (0: only looks) for the connection, then checks or creates the
 * stream as bus_open does, once per bus: after the first 0 it returns 0 at once, forever
 * (later disconnects do not make a bus unready: nats.c reconnects underneath). Returns
 * -ENOTCONN (err: BUS_E_CONNECT) while no server answers, -ETIMEDOUT/-EIO while JetStream
 * does not (a cluster electing its leader), -EEXIST for a stream with other settings; all
 * may be retried (an operator may fix the stream). Any thread; blocks up to timeout_ms plus
 * two API requests of at most a second each (a JetStream without a leader yet is asked
 * again at the next call rather than waited for). */
int bus_ready(bus_t *bus, int64_t timeout_ms, bus_error_t *err);

/* Closes the connection (pending asynchronous publishes are abandoned: a batch call has
 * already returned their fate) and frees the bus. Readers must be closed first. NULL ok. */
void bus_close(bus_t *bus);

/* ---- publishing: any thread, serialized inside ---- */

typedef struct {
    uint64_t seq;     /* stream sequence of the message (of the first copy for a duplicate) */
    bool duplicate;   /* the message id was already stored within the dedup window */
} bus_ack_t;

/* Publishes one message and waits for JetStream's acknowledgement. msg_id (may be NULL; up
 * to 128 bytes) makes a retry safe: the same id within the dedup window is stored once and
 * acknowledged with the first copy's sequence. On 0 the message is stored on a quorum and
 * *ack tells its sequence: the caller may acknowledge its own client. On failure (-ETIMEDOUT,
 * -EIO, ...) the message may or may not be stored: retry with the same msg_id. Blocks up to
 * the timeout. data may be NULL when len is 0; len at most 1 MiB (the servers' default
 * max_payload: group samples into messages below it). -ENOTCONN before the bus is ready. */
int bus_publish(bus_t *bus, const char *subject, const void *data, size_t len,
                const char *msg_id, bus_ack_t *ack, bus_error_t *err);

typedef struct {
    const char *subject;      /* in */
    const void *data;         /* in */
    size_t len;               /* in */
    const char *msg_id;       /* in: may be NULL, but then a retry may store a copy */
    bus_ack_t ack;            /* out: valid when acked */
    bool acked;               /* out: JetStream stored it (ack.seq is its sequence) */
} bus_item_t;

/* Publishes n items without waiting between them, then waits (up to the timeout) for every
 * acknowledgement. Returns the number of items acked (0..n) or -EINVAL for bad arguments;
 * when fewer than n are acked, err names the first failure and each unacked item has
 * acked == false: those were NOT dropped in silence, the caller must retry them (with the
 * same msg_id) before acknowledging its own clients. Acked items need not be a prefix: after
 * a failover JetStream may store item 7 and lose item 6. Sequences of acked items follow
 * item order when all are acked and no other publisher writes to the stream. n <= 65536.
 * -ENOTCONN (nothing sent) before the bus is ready. */
int bus_publish_batch(bus_t *bus, bus_item_t *items, int n, bus_error_t *err);

/* ---- state and counters: any thread, no lock ---- */

/* The most bytes a message's data may hold: nats-server's default
 * max_payload (1 MiB) counts the headers the bus adds too (Nats-Msg-Id, at
 * most 128 bytes, and Nats-Expected-Stream, at most 64, with their framing:
 * under 256 bytes), so 512 bytes of it are theirs. */
#define BUS_MAX_PAYLOAD (1u << 20)
#define BUS_MAX_DATA (BUS_MAX_PAYLOAD - 512u)

#define BUS_COUNTERS(X)                                                                        \
    X(published, "messages handed to JetStream (sync and batched)")                          \
    X(acked, "messages JetStream acknowledged as stored")                                     \
    X(duplicates, "acknowledged messages that were duplicates of a stored message id")         \
    X(failed, "messages not acknowledged (refused, timed out, connection lost)")              \
    X(reconnects, "reconnections to a server after a disconnect")                             \
    X(disconnects, "connections lost")                                                        \
    X(delivered, "messages delivered to readers")                                             \
    X(gaps, "sequence jumps readers reported")

typedef struct {
#define BUS_X_FIELD(name, help) uint64_t name;
    BUS_COUNTERS(BUS_X_FIELD)
#undef BUS_X_FIELD
} bus_stats_t;

/* A snapshot of the counters (each read atomically; the set is not one instant). */
void bus_stats(const bus_t *bus, bus_stats_t *out);

/* true while the connection is up (false while nats.c reconnects or after close). */
bool bus_connected(const bus_t *bus);

/* The highest stream sequence this bus has seen stored: the stream's state when it became
 * ready or at the last bus_refresh, every publish acknowledgement, and every delivery's
 * sequence plus the pending count JetStream sends with it (messages after it that match the
 * reader's subject). A lower bound of the stream's last sequence, fresh within a delivery,
 * an acknowledgement or a refresh: a reader's lag is this minus the last sequence it read.
 * 0 before anything was seen. Any thread, no lock. */
uint64_t bus_last_seq(const bus_t *bus);

/* Reads the stream's state (one JetStream API request) into bus_last_seq. 0, -ENOTCONN when
 * the bus is not connected or not ready (no request made), or -ETIMEDOUT/-EIO. Blocks up to
 * the timeout: call it off the hot path, e.g. once a second from a background thread. */
int bus_refresh(bus_t *bus, bus_error_t *err);

/* ---- reading in stream order: one reader per thread ---- */

typedef struct {
    uint64_t seq;         /* stream sequence */
    const void *data;     /* valid until the next bus_reader_next or bus_reader_close */
    size_t len;
    const char *subject;  /* NUL-terminated, same lifetime as data */
    uint64_t skipped;     /* on BUS_READ_GAP: sequences missing before this one */
} bus_msg_t;

enum {
    BUS_READ_TIMEOUT = 0, /* nothing arrived within timeout_ms; *msg untouched */
    BUS_READ_MSG = 1,     /* *msg holds the next message: seq is the previous one + 1 */
    BUS_READ_GAP = 2,     /* *msg holds a message, but msg->skipped sequences before it are
                             not in the stream (aged out, deleted, or filtered by subject):
                             the caller decides whether it may continue */
};

/* Opens an ordered reader of the stream from start_seq (>= 1) on subject (NULL: the stream's
 * subject when it binds exactly one, -EINVAL otherwise; a wildcard such as "tl.>" may cover
 * several). A filter that leaves out some of the stream's subjects makes their sequences show
 * as gaps. The consumer
 * is ephemeral, in server memory, without acknowledgements; nats.c re-creates it after a
 * reconnect or a missed delivery, from the last sequence seen, so the order holds. *out is
 * owned by the caller: bus_reader_close it before bus_close. Blocks up to the timeout.
 * -ENOTCONN before the bus is ready. */
int bus_reader_open(bus_t *bus, const char *subject, uint64_t start_seq, bus_reader_t **out,
                    bus_error_t *err);

/* Waits up to timeout_ms (0: do not wait) for the next message in stream order. Returns
 * BUS_READ_MSG, BUS_READ_GAP, BUS_READ_TIMEOUT, or -errno (-EIO with err filled for a
 * delivery without a parseable JetStream reply, -ENOTCONN when the connection closed).
 * A message already seen (a sequence not above the last) is skipped, never returned twice. */
int bus_reader_next(bus_reader_t *r, int64_t timeout_ms, bus_msg_t *msg, bus_error_t *err);

/* The sequence the next message should have (start_seq, then last returned + 1). */
uint64_t bus_reader_position(const bus_reader_t *r);

void bus_reader_close(bus_reader_t *r);

/* ---- library-private, exposed for the fuzz target ---- */

/* Parses the stream sequence out of a JetStream delivery's reply subject
 * ("$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ns>.<pending>" or the 12-token
 * form with domain and account hash, optionally followed by a token). Returns 0 and *seq,
 * or -EINVAL for anything else (never reads past len). */
int bus__parse_reply(const char *reply, size_t len, uint64_t *seq);

/* The same, also returning the <pending> token (the consumer's messages after this one). */
int bus__parse_reply_pending(const char *reply, size_t len, uint64_t *seq, uint64_t *pending);

/* true when url is one server of --bus-servers that nats.c can dial:
 * [scheme://][user[:pass]@]host[:port], host a name, an IPv4 or a bracketed IPv6 address, port
 * 1..65535. url is NUL-terminated; nothing past its NUL is read. */
bool bus__url_ok(const char *url);

#endif
