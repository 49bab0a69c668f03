/*
 * online.h — online learning inside the server (--online): TRAIN frames
 * queued by the workers, one trainer thread per model that learns them into
 * the model being served, and the figures of that learning.
 *
 * THE PATH OF A SAMPLE
 *   worker: TRAIN decoded (the wire's checks) -> online_submit appends it to
 *   the model's sample log (--sample-log-dir) and copies the payload into
 *   the model's bounded queue (one lock per frame), and the worker answers
 *   TRAIN_ACK; a full queue or the samples/s cap answers OVERLOADED, so a
 *   client that sends faster than the trainer learns is told so rather than
 *   queued without bound.
 *   A PREDICT flagged LOG is kept in the impression log (online_log_impression,
 *   impression_log.h); a FEEDBACK (online_feedback) joins each event to its
 *   impression and queues the sample the same way; an impression's items
 *   that got no feedback within --impression-window-ms are queued as
 *   negatives (the expiry thread, every 100 ms).
 *   trainer thread (one per model, started by the model's first TRAIN):
 *   takes the queued frames in arrival order, decodes each again (its own
 *   arena), and steps the trainer (model/train.h, attached with
 *   train_attach_live to the store of the active version): every sample is
 *   scored before it is learned (progressive validation), and each new
 *   weight is written into the served store as it is computed, so the next
 *   PREDICT that reads it scores with it.  Readers never wait for the
 *   trainer (store.h: one writer per shard, lock-free readers).
 *
 * VERSIONS
 *   The trainer writes the base of the active version.  It holds its
 *   model's writer lock (server_slot_writer_lock) for a bounded batch, and
 *   the fold of a delta holds the same lock for its undo and writes: the
 *   base has one writer at a time.  While the active version has overlays
 *   (a delta not yet folded) the trainer waits: the overlay would hide its
 *   writes.  When the active version changes (a new version, a rollback, a
 *   fold), the trainer starts over from the new one's weights (a fresh
 *   optimizer state; train.h: LIVE), so it never writes stale state over a
 *   version's values.  Versions kept for rollback on the same base see the
 *   online writes; with --model-repo a rollback or an activation onto such
 *   a version reloads it from its files (repo_admin.c), and the trainer
 *   waits for the reload.  Its own exports (EXPORTS below) are the one
 *   version change that keeps the trainer's state.
 *
 * NOTHING LOST: with --sample-log-dir a frame is in the sample log before
 * it is acknowledged, and the trainer records (trainer.state beside the log)
 * the version it learns into and the log position it started at.  A
 * restart on the same version learns the log again from there before
 * anything new, in the same order, so the model it serves equals the one
 * before the crash (online_trainer.c).
 *
 * KINDS: LR (FTRL, Adagrad, SGD), FM and FFM (the same three; FTRL for
 * their w, Adagrad for v) and the DNN (Adagrad on its sparse rows, its
 * served MLP frozen), each trainer made from its served model's kind, shape
 * and params (online_trainer.c), in every bus mode.  A TRAIN for a model it
 * cannot learn (another kind, fp16 rows) is refused with a sentence.
 *
 * THREAD SAFETY: online_submit from any worker; online_metrics_format from
 * the admin thread; online_start/online_stop from main.
 */
#ifndef TL_SERVER_ONLINE_H
#define TL_SERVER_ONLINE_H

#include "codec/codec.h"
#include "server.h"

#include <stddef.h>
#include <stdint.h>

/* Checks the --online-* settings (optimizer name, its parameters) and
 * remembers srv.  0, or -EINVAL with a sentence in why.  Trainer threads
 * start with their model's first TRAIN. */
int online_start(server_t *srv, char *why, size_t why_len);

/* Lets each trainer learn what is queued (up to a second), then joins the
 * threads and frees everything.  Idempotent.  Returns how many models' online
 * updates the shutdown's export could not write (each an ERROR line). */
int online_stop(void);

/* Outcomes of online_submit. */
enum {
    ONLINE_QUEUED = 0,
    ONLINE_OFF = 1,       /* --online is false */
    ONLINE_NO_MODEL = 2,  /* no active version of that name */
    ONLINE_KIND = 3,      /* the model does not learn online (its kind, fp16 rows) */
    ONLINE_FULL = 4,      /* the queue has no room (OVERLOADED) */
    ONLINE_RATE = 5,      /* over --online-max-samples-per-s (OVERLOADED) */
    ONLINE_TOO_BIG = 6,   /* the frame is larger than the queue could ever hold, or has more
                             samples than a second of --online-max-samples-per-s */
    ONLINE_NOMEM = 7,     /* the model's trainer could not start */
    ONLINE_LOG = 8,       /* the sample log refused the append (why says so) */
    ONLINE_BAD_VALUE = 9, /* a feature value outside +-(--online-max-feature-value) */
};

/* Queues a decoded TRAIN (req, for its name and counts; payload and flags
 * are what is queued) for its model's trainer.  Returns an ONLINE_* code;
 * when not ONLINE_QUEUED, why holds the sentence for the ERROR frame.
 * No allocation after the model's first TRAIN; one lock. */
int online_submit(server_t *srv, const codec_train_t *req, uint16_t flags, const uint8_t *payload,
                  uint32_t len, char *why, size_t why_len);

/* Keeps a scored PREDICT flagged LOG (req->impression_id != 0) of a model
 * that learns online (KINDS) in the impression log; a refusal (a duplicate id, an entry larger
 * than a stripe) is counted, the PREDICT is answered all the same.  items:
 * the request's item blocks.  One lock. */
void online_log_impression(server_t *srv, const codec_predict_t *req, const codec_block_t *items,
                           const store_meta_t *meta);

/* Joins a FEEDBACK's events to their impressions and queues the samples:
 * ONLINE_QUEUED with *ack filled (refusals into refusals[], room for
 * req->events), or another ONLINE_* code with why.  ONLINE_FULL after some
 * events were accepted: those stay accepted, and a retry of the frame gets
 * DUPLICATE for them. */
int online_feedback(server_t *srv, const codec_feedback_t *req, codec_feedback_ack_t *ack,
                    codec_refused_t *refusals, char *why, size_t why_len);

/* EXPORTS (--online-export-ms, with --model-repo; online_export.c): the
 * keys the trainer changed since the last export are written, on a timer
 * and at a clean shutdown, as a delta version <repo>/<model>/<v+1>/ of
 * the version the trainer writes, producer ONLINE_EXPORT_PRODUCER with the
 * sample-log position it covers.  The watcher finds it; the chain loader
 * asks online_export_is_own and, for this process's own export of the
 * active version, serves the active store relabelled (the values are the
 * live ones already) and the trainer keeps its optimizer state.
 *
 * 1 when the delta `version` of model, whose manifest's producer is
 * `producer`, is one of the last ONLINE_EXPORT_OWN_MAX exports this
 * process wrote (the producer carries a per-process id, so a restarted
 * server's or another replica's export is not its own); else 0.  Any
 * thread; one lock. */
#define ONLINE_EXPORT_PRODUCER "tlserve-online"
#define ONLINE_EXPORT_OWN_MAX 16
int online_export_is_own(const char *model, uint64_t version, const char *producer);

/* A rollback or an activation replaced model's active version by version
 * `to`: the export lineage past it is void.  An export not yet committed
 * never will be (waits for a commit under way), and this process's exports
 * above `to` are no longer its own: they go into out[0..cap) and their
 * count is returned, for the caller to refuse them as rolled back (else the
 * watcher would pick them again).  Any thread but the trainer's. */
size_t online_export_drop(const char *model, uint64_t to, uint64_t *out, size_t cap);

/* The repository's word on whether its policy refuses model's version (a
 * corrupt one, one the gate refused, one rolled back): the exporter does
 * not wait for such a version of another producer to go live.  The
 * repository sets it when it starts (repo_refuses); NULL: none refused. */
typedef bool online_refused_fn(const char *model, uint64_t version);
void online_export_set_refused(online_refused_fn *fn);

/* Parses an export's producer "tlserve-online log=P id=X": 1 with *pos = P,
 * else 0 (another producer).  Pure. */
int online_export_producer_pos(const char *producer, uint64_t *pos);

/* Parses a bus export's producer "tlserve-online stream=S id=X" (replay
 * mode: every stream message up to sequence S is in the version): 1 with
 * *seq = S, else 0 (another producer, or a "log=" one).  Pure. */
int online_export_producer_stream(const char *producer, uint64_t *seq);

/* 1 when the online trainer of model has written into store (the base of
 * the versions sharing it, kept ones included: a version swapped back in
 * on it does not hold its files' values); else 0.  Any thread. */
int online_store_trained(const char *model, const void *store);

/* Partitioned replicas (--bus-mode partitioned): the publisher's next round
 * (within 10 ms, once the consumer has caught up) publishes the accumulated
 * updates now instead of at the interval's end; the interval restarts there.
 * tlserve_sync_turns_total counts the turns.  0, or -ENOTSUP when this
 * server exchanges no updates.  Any thread. */
int online_sync_turn(void);

/* The tlserve_online_* families (Prometheus text) into buf; the length
 * written (truncated output is cut at a line). */
size_t online_metrics_format(char *buf, size_t len);

#endif /* TL_SERVER_ONLINE_H */
