/*
 * online_sync_impl.h — what online_sync.c (the trainer's side, publishing,
 * start and stop) and online_sync_apply.c (consuming: apply, producers and
 * gaps) share.  Not public: the rest of the server includes online_impl.h.
 * The design is online_sync.c's comment.
 */
#ifndef TL_SERVER_ONLINE_SYNC_IMPL_H
#define TL_SERVER_ONLINE_SYNC_IMPL_H

#include "online_impl.h"

#include "bus.h"
#include "model/update_codec.h"
#include "online_sync_state.h"

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#define G online__G
#define SYNC_K 2                       /* LR: (dz, dn) per key */
#define ROWS_ACC_BYTES (64u << 20)     /* rows: an accumulator's memory at most (keys capped) */
#define SYNC_CHUNK 256                 /* keys per 1-bit scale */
#define MSG_MAX_BYTES (1000u * 1000u)  /* under nats-server's default 1 MiB max_payload */
#define APPLY_BATCH 4096               /* keys applied per hold of the writer lock */
#define PRODUCERS_MAX 256
_Static_assert(PRODUCERS_MAX == SYNC_STATE_PEERS_MAX, "a SYNC_STATE holds the consumer's producers");
#define READ_WAIT_MS 100
#define RESTART_WAIT_MS 60000          /* a restarting model's version: its messages wait for it */

/* The distinct keys the trainer touched since the last turn, for
 * tlserve_sync_fp32_bytes_total (what an uncompressed exchange would send):
 * open addressing over a power of two >= 2 x max_keys slots; a slot whose
 * gen is not the current one is empty, so a turn empties the set by
 * bumping gen.  Only keys the accumulator took are inserted (at most
 * max_keys a turn), so the load stays <= 1/2 and a probe ends. */
struct touched_set {
    uint64_t *key;   /* writer lock (the trainer's hook, the turn's swap) */
    uint32_t *gen;   /* writer lock; 0 never current (calloc: all empty) */
    uint32_t mask;   /* slots - 1 */
    uint32_t cur;    /* writer lock: the current generation, >= 1 */
    uint32_t count;  /* writer lock: keys of generation cur */
};

struct online_sync_model {
    update_acc_t *acc[2]; /* writer lock: acc[cur] is the trainer's, the other the publisher's */
    uint32_t k;           /* values per key: 2 (LR's dz, dn) or 2R (a row's dx, dG) */
    bool rows;            /* FM, FFM, DNN (train_sync.h: ROWS), else LR-FTRL */
    uint32_t max_keys;    /* keys an accumulator holds */
    uint64_t base[2];     /* writer lock: the version acc[i]'s residuals belong to */
    uint64_t adds[2];     /* writer lock: increments into acc[i] while it was the trainer's */
    int cur;              /* writer lock */
    _Atomic bool urgent;  /* the hook found acc[cur] full: publish now */
    uint8_t *buf;         /* publisher: one message, MSG_MAX_BYTES */
    uint32_t per_msg;     /* keys one message carries at most */
    _Atomic uint64_t residual_keys; /* keys the retired accumulator kept after its turn */
    struct touched_set touched;     /* keys stepped since the last turn (fp32 figure) */
    struct online_sync_dense *_Atomic dense; /* the DNN's MLP (online_sync_dense.c), else NULL; the metrics read it */
    /* EXPORTS (online_sync_export.c), all under the writer lock */
    bool applying;        /* the consumer is inside a message (it spans several holds) */
    uint32_t napplied;
    sync_state_peer_t applied[PRODUCERS_MAX]; /* per peer, its last message applied here */
    uint64_t own_skip;    /* a restart: own messages up to it are in the export's residual */
    uint64_t *peer_keys;  /* PEER_KEYS_SLOTS (0 = empty; key 0 is peer_zero), NULL: exports off */
    uint32_t *peer_slots; /* PEER_KEYS_SLOTS / 2: the slots of peer_keys filled, in order (the
                             cut visits and clears those only) */
    uint32_t peer_count;  /* keys in peer_keys: written by peers' messages since the last cut */
    _Atomic bool peer_pending; /* peer_count > 0 or peer_zero or peer_all: read without the lock */
    bool peer_zero, peer_all; /* key 0 written; the set overflowed (the export takes every key) */
    uint32_t cut_peer_keys; /* writer lock: peers' keys the last cut handed to the dirty set */
    /* the cuts' cost (online__sync_cut_note under the writer lock; the metrics read them) */
    _Atomic uint64_t cut_ns, cut_max_ns, cut_sum_ns, cuts; /* last, longest, sum, how many */
    _Atomic uint64_t cut_keys, cut_peers, cut_floats; /* last cut: residual entries, peers'
                                                         keys, MLP floats copied */
    _Atomic uint64_t merge_ns, merge_max_ns; /* a turn's merge of the residual (publish_model),
                                                the last and the longest, under the writer lock */
};

#define PEER_KEYS_BITS 20
#define PEER_KEYS_SLOTS (1u << PEER_KEYS_BITS)

struct producer {
    uint64_t id;
    uint64_t next;      /* its sequence expected next */
    uint64_t last_sseq; /* stream sequence of its last message handled */
    bool refused;       /* unknown (first message not sequence 1) */
};

#define SYNC_COUNTERS(X)                                                                           \
    X(turns, "tlserve_sync_turns_total",                                                         \
      "turns taken: the interval's, a crowded accumulator's, or asked for by POST /v1/sync:turn")   \
    X(sent, "tlserve_sync_sent_total", "update messages published")                                \
    X(sent_keys, "tlserve_sync_sent_keys_total", "keys the published messages carried")            \
    X(bytes, "tlserve_sync_bytes_total", "bytes of the published update messages")                \
    X(exact, "tlserve_sync_exact_total",                                                         \
      "published messages sent exact (quiet or crowded turn, final, or --sync-exact)")            \
    X(fp32_bytes, "tlserve_sync_fp32_bytes_total",                                                \
      "what uncompressed fp32 updates of the same turns would cost: per turn, the distinct keys "  \
      "the trainer stepped since the last turn x (8 B key + 4 B x K values a key); residuals "     \
      "of earlier turns not counted")                                                             \
    X(applied, "tlserve_sync_applied_total", "peers' update messages applied")                     \
    X(own, "tlserve_sync_own_subtracted_total",                                                   \
      "this replica's messages of an earlier run subtracted from its accumulator (a restart)")    \
    X(applied_keys, "tlserve_sync_applied_keys_total", "keys of peers' messages applied")          \
    X(gaps, "tlserve_sync_gap_total", "producer sequence gaps seen (each re-read from the stream)") \
    X(unrepaired, "tlserve_sync_gap_unrepaired_total",                                             \
      "gaps whose messages were not in the stream either (lost)")                                 \
    X(bad, "tlserve_sync_refused_bad_total",                                                      \
      "stream messages that do not parse as an update, or carry another K than their model syncs") \
    X(unknown, "tlserve_sync_refused_producer_total",                                             \
      "messages of unknown producers (first message not sequence 1, or too many producers)")      \
    X(model, "tlserve_sync_refused_model_total",                                                  \
      "messages for a model not served here or not matching their subject")                       \
    X(stale, "tlserve_sync_refused_version_total",                                                \
      "messages made on another version than the active one")                                     \
    X(range, "tlserve_sync_refused_keys_total", "keys whose sum would not be finite")              \
    X(overflow, "tlserve_sync_overflow_total",                                                    \
      "increments not accumulated (accumulator full: they stay local)")                           \
    X(failed, "tlserve_sync_publish_failed_total", "publish attempts JetStream did not acknowledge") \
    X(resumed, "tlserve_sync_resume_skipped_total",                                              \
      "stream messages skipped at a restart: the active export holds them (peers') or its "       \
      "residual accounts for them (own)")                                                         \
    X(dnn_sent, "tlserve_sync_dnn_sent_total", "DENSE messages (the DNN's MLP) published")          \
    X(dnn_bytes, "tlserve_sync_dnn_bytes_total", "bytes of the published DENSE messages")           \
    X(dnn_applied, "tlserve_sync_dnn_applied_total", "peers' DENSE messages added to the MLP")      \
    X(dnn_refused, "tlserve_sync_dnn_refused_total",                                               \
      "peers' DENSE messages refused (another version, length or model, not finite, no DNN)")     \
    X(dnn_installs, "tlserve_sync_dnn_installs_total",                                             \
      "learned MLPs swapped in for the scorers")

struct online__sync_state {
    bus_t *bus;
    pthread_t publisher, consumer;
    bool running;
    _Atomic bool stop;
    _Atomic bool stopped;       /* online__sync_stop ran: attach installs no hook any more */
    pthread_once_t identity;    /* node and producer, from the config, once */
    char node[160];
    char prefix[80];
    uint64_t producer;          /* this replica's id */
    _Atomic uint64_t next_seq;  /* this producer's next sequence */
    pthread_mutex_t pub_lock;   /* held by the publisher from a message's encode to its
                                   acknowledgement (next_seq moved): an export's cut takes it */
    _Atomic bool unsent;        /* a message was encoded and never stored (stopping): no cut
                                   is consistent any more */
    _Atomic bool ready;         /* the consumer saw bus_ready succeed (the stream exists) */
    _Atomic bool caught_up;     /* the consumer has read the stream to its end once (implies
                                   ready): the publisher sends only from then on */
    _Atomic bool turn_asked;    /* POST /v1/sync:turn: the publisher's next round turns */
    uint64_t final_until;       /* stopping: the last turn may send until then (ms) */
    /* the consumer's */
    struct producer prod[PRODUCERS_MAX];
    int nprod;
    uint64_t max_sseq;     /* highest stream sequence handled: below it, a re-read */
    uint64_t repair_until; /* a re-read runs up to this stream sequence (0: none) */
#define SYNC_X_FIELD(f, name, help) _Atomic uint64_t f;
    SYNC_COUNTERS(SYNC_X_FIELD)
#undef SYNC_X_FIELD
};

/* The one state of partitioned replicas (online_sync.c defines it). */
extern struct online__sync_state online__sync_S;
#define S online__sync_S

#define COUNT(f) atomic_fetch_add_explicit(&S.f, 1, memory_order_relaxed)

static inline uint64_t sync__now_ms(void) { return online__now_ns() / 1000000; }

static inline void sync__nap_ms(long ms)
{
    nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000}, NULL);
}

/* Logs the first 10 of a kind, then every 1000th: a flood of bad messages
 * must not flood the log. */
static inline bool sync__log_due(uint64_t count) { return count <= 10 || count % 1000 == 0; }

/* Publishes one message until JetStream stores it (its id <node>/sync/<seq>
 * makes a retry safe) or the server stops: 0 or -ECANCELED. */
int online__sync_publish(const uint8_t *buf, size_t len, const char *model, uint64_t seq);

/* ---- the DNN's MLP (online_sync_dense.c) ---- */
struct online_sync_dense;
/* After online__sync_attach installed the rows' hook on a DNN trainer
 * (writer lock): its MLP's 1-bit Adam (made the first time), started from
 * the MLP m serves.  A failure is logged; the MLP then stays frozen. */
void online__sync_dense_attach(online_model_t *q, struct online_sync_model *s, const model_t *m);
/* The publisher's turn for q's MLP: publish its delta (owed exact when
 * quiet or final), install it for the scorers.  Takes the writer lock; blocks on the bus. */
void online__sync_dense_turn(online_model_t *q, struct online_sync_model *s, server_slot_t *ms,
                             bool final);
/* The consumer: a peer's verified DENSE message m (bytes buf[0..len)) for
 * model; applied or counted as refused with its reason logged. */
void online__sync_dense_apply(const update_msg_t *m, const uint8_t *buf, size_t len,
                              const char *model);
/* The consumer, before it caught up: this replica's own DENSE message of
 * an earlier run, subtracted from the pending delta (a restart). */
void online__sync_dense_own(const update_msg_t *m, const uint8_t *buf, size_t len,
                            const char *model);
void online__sync_dense_free(struct online_sync_dense *d);
/* An export's cut (writer lock held): the trainer's MLP and its 1-bit Adam
 * state into st's MLP section (allocated: sync_state_free); nothing when
 * the MLP does not learn here.  0, -ENOMEM with why. */
int online__sync_dense_cut(online_model_t *q, struct online_sync_model *s, sync_state_t *st,
                           char *why, size_t why_len);
/* A restart from an export (writer lock held, the trainer attached to m):
 * st's MLP and 1-bit Adam state back into the trainer, its MLP installed
 * for m's scorers.  0 (also: no MLP on either side), or -EINVAL with why
 * (another MLP size, a state that does not fit: the 1-bit Adam afresh). */
int online__sync_dense_resume(online_model_t *q, struct online_sync_model *s, model_t *m,
                              const sync_state_t *st, char *why, size_t why_len);
/* 1 once d's 1-bit Adam froze its variance (as of its last turn), else 0. */
int online__sync_dense_warm(const struct online_sync_dense *d);

/* The consumer, writer lock held: key was written by a peer's message (the
 * next export must carry it; online_sync_export.c). */
void online__sync_peer_mark(struct online_sync_model *s, uint64_t key);
/* online__sync_attach: the peer-key set, when exports are on (once). */
void online__sync_peer_keys_init(struct online_sync_model *s);

/* This replica's producer id (from the config, once). */
uint64_t online__sync_producer(void);

/* The consumer (online_sync_apply.c), writer lock held: records that the
 * peer message (producer, seq) was applied to s's model. */
void online__sync_applied_note(struct online_sync_model *s, uint64_t producer, uint64_t seq);
/* ... and the last sequence of producer applied (0: none). */
uint64_t online__sync_applied_seq(const struct online_sync_model *s, uint64_t producer);

/* The consumer thread (online_sync_apply.c): reads the stream from 1. */
void *online__sync_consumer_main(void *arg);

#endif
