/* bus_impl.h — the bus's private structs and helpers, shared by bus.c (connection, stream,
 * readers) and bus_publish.c (publishing). Opaque to everyone else: use bus.h.
 */
#ifndef TL_SERVER_BUS_IMPL_H
#define TL_SERVER_BUS_IMPL_H

#include "server/bus.h"

#include <nats/nats.h>
#include <pthread.h>
#include <stdatomic.h>

#define BUS_MAX_BATCH 65536

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

#define INC(b, field, n) atomic_fetch_add_explicit(&(b)->field, (n), memory_order_relaxed)

/* err (may be NULL) = {code, the sentence}. */
void bus__set_err(bus_error_t *err, bus_errcode_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* -errno of a nats.c status (bus.h ERRORS). */
int bus__status_errno(natsStatus s);
/* nats.c's sentence for the calling thread's last error, else the status's text. */
const char *bus__why(natsStatus s);
/* BUS_E_TIMEOUT for a timeout, else dflt. */
bus_errcode_t bus__status_code(natsStatus s, bus_errcode_t dflt);
/* A NATS subject: 1..255 bytes, no spaces, no empty token. */
bool bus__subject_ok(const char *s);
/* last_seq = max(last_seq, seq): any thread. */
void bus__note_last(bus_t *bus, uint64_t seq);
/* The stream was checked or created (bus_ready): publishes and readers may go. */
bool bus__is_ready(const bus_t *bus);
/* nats.c's ack thread: records the fate of one asynchronous publish (bus_publish.c). */
void bus__on_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure);

#endif
