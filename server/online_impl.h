/*
 * online_impl.h — what online.c (the workers' side: queues, the sample log,
 * the impression log, metrics) and online_trainer.c (the trainer threads)
 * share.  Private to those two files.
 */
#ifndef TL_SERVER_ONLINE_IMPL_H
#define TL_SERVER_ONLINE_IMPL_H

#include "impression_log.h"
#include "model/train.h"
#include "online.h"
#include "sample_log.h"
#include "store/delta.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* A queued record: [len u32 | flags u16 | mark u16 | arrival ns u64 |
 * log position u64 | TRAIN payload, then with mark 1 a --train-file mark
 * (SAMPLE_LOG_MARK_BYTES, counted in len), padded to 8]. */
#define ONLINE_REC_HDR 24u
#define ONLINE_WRAP UINT32_MAX
#define ONLINE_WINDOW 8192

struct online_win {
    float p;
    uint8_t y;
    uint32_t fresh_us;
};

/* A --train-file frame's mark in the sample log (SAMPLE_LOG_MARK_BYTES,
 * five u64 little-endian, in this order): how far its file was submitted
 * once the frame was. */
typedef struct online_file_mark {
    uint64_t key;     /* XXH3_64 of the path as listed, seeded with its occurrence in the list */
    uint64_t offset;  /* bytes of the file read through the frame's last sample */
    uint64_t line;    /* lines read through it (the last sample's line number) */
    uint64_t prefix;  /* XXH3_64 of the file's bytes [0, offset) */
    uint64_t samples; /* the file's samples submitted through the frame, from its start */
} online_file_mark_t;

/* A mark with the sample log position of the record it came with (0 without
 * a log): the trainer's table, an export's TRAINFILE_MARKS. */
typedef struct online_file_progress {
    online_file_mark_t m;
    uint64_t pos;
} online_file_progress_t;
#define ONLINE_FILE_MARKS_MAX 256u /* files whose progress a table keeps (the latest ones) */
#define ONLINE_FILE_MARKS_FILE "TRAINFILE_MARKS" /* beside an export's delta */

/* One model's queue and trainer. */
typedef struct online_model {
    char name[64];
    /* the queue (lock: producers, the consumer's give-back, the sample log) */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    uint8_t *ring;
    size_t cap, head, tail, used;
    bool stop;
    double tokens; /* the samples/s cap's bucket */
    uint64_t tokens_ns;
    sample_log_t *slog;  /* NULL without --sample-log-dir */
    bool export_lost;    /* the shutdown's export failed (online_export.c; online_stop reads) */
    char slog_dir[1100];
    _Atomic uint64_t fwd_pos; /* with the bus: the next log position to forward */
    uint64_t bus_from;        /* with the bus: stream sequences below it are not learned */
    uint64_t bus_skip_below;  /* ... nor these: in the active export (the trainer's) */
    pthread_t thread;
    /* the freshness boost (online.c, boost_locked; lock held) */
    _Atomic int trainer_tid;  /* 0 until the trainer thread has started */
    bool boosted;             /* the trainer runs at --online-boost-nice until its queue is empty */
    bool boost_denied;        /* setpriority refused it once (no CAP_SYS_NICE): never again */
    bool boost_said;          /* the first boost logged */
    /* partitioned replicas (online_sync.c): its accumulators; set once, under
     * the model's writer lock, by online__sync_attach; NULL in other modes */
    struct online_sync_model *_Atomic sync;
    uint64_t sync_base; /* writer lock: the lineage's first version, the messages' base_version
                           (the trainer's own exports going live do not change it) */
    struct sync_state *sync_resume; /* a restart from an export: its SYNC_STATE, until resumed */
    /* the trainer's own (its thread only; also the sync applier's, under the
     * model's writer lock) */
    train_t *t;
    const store_t *attached; /* the store t writes, and its version */
    uint64_t att_version, att_created;
    uint64_t next_pos; /* the log position of the next record the trainer takes (written and
                          read under the model's writer lock): what an attach by another
                          thread (the sync applier) names in trainer.state */
    bool replay_pending; /* a restart: the log from replay_from to replay_end first */
    bool replay_any;     /* ... into the version active then (no trainer.state: never learned) */
    bool restore_pending; /* no sample log, no bus: the exports' optimizer state at the first attach */
    uint64_t replay_version, replay_created, replay_from, replay_end;
    codec_arena_t arena;
    float p[CODEC_MAX_ITEMS];
    struct online_win win[ONLINE_WINDOW];
    uint64_t nwin, published_ms;
    double logloss_sum;
    /* published */
    _Atomic uint64_t frames, samples, positives, refused_rate, refused_full, dropped, resets;
    _Atomic uint64_t refused_log;   /* TRAIN or FEEDBACK refused: the sample log's append failed */
    _Atomic uint64_t negatives_lost; /* impressions some of whose negatives found no room (WARNs) */
    _Atomic uint64_t replayed, queue_bytes, last_version, log_failed, log_slow, boosts;
    _Atomic uint64_t bus_skipped; /* stream messages skipped at a start: in the active export */
    _Atomic uint64_t bad_values; /* TRAINs refused, queued frames skipped: online__value_beyond */
    _Atomic uint64_t halted; /* 1: a step would have made a non-finite weight; until a new version */
    _Atomic uint64_t logloss_bits, win_logloss_bits, win_auc_bits, win_calib_bits;
    _Atomic uint64_t fresh_p50_us, fresh_p99_us;
    /* the export (online_export.c): its state, the trainer's and its thread's */
    struct online_export *exp; /* NULL: no export (--online-export-ms 0 or no --model-repo) */
    _Atomic uint64_t exports, full_exports, export_failures, export_keys, export_version, export_pos;
    _Atomic uint64_t export_buf_bytes; /* the export job's buffers (keys, values, state rows) */
    _Atomic(const void *) trained_store; /* the store the trainer writes (online_store_trained) */
    /* --train-file: the latest mark of each file among the records learned
     * (online_file_marks.c); the trainer's, read by its export's hand-over */
    online_file_progress_t *fmarks; /* ONLINE_FILE_MARKS_MAX, NULL: no memory (no marks) */
    uint32_t nfmarks;
    bool fmarks_seeded; /* the active version's TRAINFILE_MARKS read (once, at the first attach) */
} online_model_t;

#define ONLINE_MODELS_MAX SERVER_MODELS_MAX

extern struct online_state {
    pthread_mutex_t lock; /* creating models[], stopping */
    server_t *srv;
    train_options_t opts;
    online_model_t *_Atomic models[ONLINE_MODELS_MAX];
    _Atomic uint32_t nmodels;
    bool started;
    impression_log_t *imp; /* NULL when --online is off */
    pthread_t expiry;
    bool expiry_running, expiry_stop;
    pthread_cond_t expiry_cond;
    _Atomic uint64_t imp_refused;
} online__G;

/* The model's queue and trainer, made on first use: NULL with why. */
online_model_t *online__model_get(const char *name, char *why, size_t why_len);

/* Queues one TRAIN payload with its position (the stream's sequence), without
 * the sample log: 0, -1 when the queue has no room now, or -E2BIG when it
 * never will (over half of --online-queue-bytes). */
int online__enqueue(online_model_t *q, uint16_t flags, const uint8_t *payload, uint32_t len,
                    uint64_t pos);

/* The bus (online_bus.c): started by online_start when --bus-servers is set
 * (0, or -errno with why), stopped first by online_stop; its metrics. */
/* online_dirs.c: --sample-log-dir and, with exports, --model-repo usable by this process;
 * 0, or a negative errno with the flag and the reason in why. */
int online__check_dirs(const server_config_t *c, char *why, size_t why_len);
int online__bus_start(char *why, size_t why_len);
void online__bus_stop(void);
bool online__bus_on(void);
/* Records a model's outbox may hold not yet forwarded to the stream; past them
 * TRAIN and FEEDBACK get OVERLOADED (see online__bus_lagging). */
#define ONLINE_BUS_MAX_LAG 65536
/* With the bus on: true when q's outbox holds more than ONLINE_BUS_MAX_LAG
 * records not yet forwarded (NATS down, restarting, or slower than the
 * clients).  The caller answers OVERLOADED with the sentence written to why
 * (why may be NULL); each true answer is counted in
 * tlserve_bus_lag_refused_total, apart from the queue-full reason.  q->lock
 * held; no syscall, no allocation. */
bool online__bus_lagging(online_model_t *q, char *why, size_t why_len);
size_t online__bus_metrics(char *buf, size_t len);
uint64_t online__outbox_read(const char *dir);

/* The trainer thread of q (online_trainer.c). */
void *online__trainer_main(void *arg);

/* (Re)attaches q's trainer to sm's active version when it changed (a fresh
 * optimizer state), pos the log position of the first record learned into
 * it (trainer.state).  Caller holds the model's writer lock and q->lock.
 * 0, or -1 when the version cannot be learned (logged). */
int online__attach(online_model_t *q, server_model_t *sm, uint64_t pos);

/* ---- partitioned replicas (online_sync.c, --bus-mode partitioned) ----
 * The bus's start, stop and metrics call these in that mode
 * (online__bus_start/stop/metrics); online__bus_on() stays false, so the
 * workers queue samples locally as without a bus. */
bool online__sync_mode(const server_config_t *c); /* --bus-servers set, --bus-mode partitioned */
int online__sync_start(char *why, size_t why_len);
void online__sync_stop(void);
size_t online__sync_metrics(char *buf, size_t len);
/* Called by online__attach after a new trainer attached to version
 * `version`: installs the trainer's (dz, dn) hook and empties the
 * accumulator it feeds (residuals of another version mean nothing here).
 * Allocates q's accumulators the first time; a failure is logged and the
 * model then trains without publishing.  Caller holds the writer lock. */
void online__sync_attach(online_model_t *q, const model_t *m); /* m: the version attached */
/* Called by online__attach before it drops the trainer for version m
 * (writer lock): a DNN's MLP learned so far is installed into m when m
 * shares the old version's base, else its sync state starts afresh
 * (online_sync_dense.c). */
void online__sync_dense_detach(online_model_t *q, model_t *m);
/* ---- exports in partitioned mode (online_sync_export.c) ---- */
struct sync_state;
/* The export's cut, under the writer lock with the values it copies: the
 * peers' positions, this replica's last sequence and its residual into *st
 * (keys and vals allocated, the caller frees them with sync_state_free).  0;
 * -EAGAIN not now (a message half applied or being published, the stream not
 * read to its end yet: the next tick tries again); -ENOTSUP never for this
 * model (no accumulators), why says so; -ENOMEM.  A DNN's MLP and its 1-bit
 * Adam state go into st's MLP section (online_sync_dense.c). */
int online__sync_cut(online_model_t *q, struct sync_state *st, char *why, size_t why_len);
/* A full export (writer lock held, with the cut): the MLP arrays of x (the
 * export's copy of the model's extras) overwritten with the trainer's MLP,
 * the one the cut recorded; nothing when the MLP does not learn here. */
void online__sync_dense_to_extras(online_model_t *q, store_extras_t *x);
/* After a cut that returned 0 (writer lock still held): every key a peer's
 * message wrote since the previous cut, given to mark(ctx, key); returns
 * true instead when there were more than the set holds (the export must
 * take every key). */
/* Whether peers' messages wrote keys since the last cut (any thread: a hint
 * that an export is due, read without the lock). */
bool online__sync_peer_pending(const online_model_t *q);
bool online__sync_cut_keys(online_model_t *q, void (*mark)(void *ctx, uint64_t key), void *ctx);
/* After online__sync_cut_keys (writer lock still held): ns, the time the
 * cut and its keys held the writer lock, and what it copied (st: the cut's
 * SYNC_STATE) into the cut metrics (tlserve_sync_cut_*).  Never blocks. */
void online__sync_cut_note(online_model_t *q, const struct sync_state *st, uint64_t ns);
/* A restart (the trainer, writer lock, after restore_state): when the active
 * version (m) is the export q->sync_resume was read from, puts its residual
 * into the accumulators, the peers' positions into the applier and, for a
 * DNN, its MLP and 1-bit Adam state into the trainer (m then serves that
 * MLP).  Frees it. */
void online__sync_resume(online_model_t *q, model_t *m);
/* At a start, before the repository loads (online.c): when the newest
 * version of q's repository is an online export above version root (the
 * lineage's, trainer.state's), reads its SYNC_STATE into q->sync_resume; a
 * missing or bad file is a WARN naming it, and the online exports above root
 * are set aside (renamed void-<v>-<time>) so that root loads and the sample
 * log is learned again whole, the stream read from its start. */
void online__sync_state_check(online_model_t *q, uint64_t root);
/* Frees q's accumulators (online_stop, after the trainer stopped). */
void online__sync_model_free(online_model_t *q);
/* What the trainer's state file says (a restart's replay), read at creation:
 * 0 with the fields set, -ENOENT when there is none, -EINVAL when bad. */
int online__state_read(const char *dir, uint64_t *version, uint64_t *created, uint64_t *from);

/* Writes it (temporary file, fsync, rename): 0 or -errno. */
int online__state_write(const char *dir, uint64_t version, uint64_t created, uint64_t from);

uint64_t online__now_ns(void);

/* Whether req holds a feature value beyond +-bound (its shared block or a
 * sample's): 1 with the first such id and value, else 0.  A step on a huge
 * value can make a weight infinite, which halts the model's training (the
 * alarm): such a sample is refused at the door or skipped, never learned. */
int online__value_beyond(const codec_train_t *req, double bound, uint64_t *id, float *value);

/* ---- --train-file (online_file.c) ---------------------------------------------
 *
 * The feeder thread: once the model is active it reads each file in order
 * with model/reader.h and submits its samples, frames of up to
 * ONLINE_FILE_FRAME_SAMPLES, through online__submit_file; a full queue or
 * the cap makes it wait and retry, never drop. */
#define ONLINE_FILE_FRAME_SAMPLES 256u

/* online_submit's path exactly (the model and kind checks, the cap, the
 * sample log, the queue; the frames counter), except that ONLINE_FULL,
 * ONLINE_RATE and ONLINE_TOO_BIG are not counted as a client's refusals:
 * the caller waits and retries (or splits the frame), and that the sample
 * log record carries mark (SAMPLE_LOG_MARK_BYTES: the file's progress
 * through this frame; NULL: none).  Same contract otherwise; may block on
 * the queue's lock, never on room. */
int online__submit_file(server_t *srv, const codec_train_t *req, uint16_t flags,
                        const uint8_t *payload, uint32_t len, const uint8_t *mark, char *why,
                        size_t why_len);

void online__file_mark_encode(const online_file_mark_t *m, uint8_t out[SAMPLE_LOG_MARK_BYTES]);
/* Reads a mark read back from the log (input: a log outlives versions of
 * this code): 0, or -EINVAL with why when its figures cannot be. */
int online__file_mark_decode(const uint8_t in[SAMPLE_LOG_MARK_BYTES], online_file_mark_t *m,
                             char *why, size_t why_len);

/* online_file_marks.c: the table and the TRAINFILE_MARKS file. */
/* Puts m (of log position pos) into t[0..*n): replaces its file's entry
 * when pos is not older, else adds it, replacing the oldest when full. */
void online__file_marks_put(online_file_progress_t *t, uint32_t *n, const online_file_mark_t *m,
                            uint64_t pos);
/* The trainer, for each record learned (or replayed) that carries a mark. */
void online__file_marks_note(online_model_t *q, const uint8_t *mark, uint64_t pos);
size_t online__file_marks_size(uint32_t n); /* the file's bytes for n marks */
void online__file_marks_encode(const online_file_progress_t *t, uint32_t n, uint8_t *out);
/* Parses a TRAINFILE_MARKS file's bytes (untrusted) into t (room for
 * ONLINE_FILE_MARKS_MAX): 0 with *n, or -EINVAL with why (a cut file, a
 * bad checksum, a mark that cannot be). */
int online__file_marks_parse(const uint8_t *buf, size_t len, online_file_progress_t *t,
                             uint32_t *n, char *why, size_t why_len);
/* Reads and parses the file at path: 0, -ENOENT, -EINVAL, -errno; why set. */
int online__file_marks_read(const char *path, online_file_progress_t *t, uint32_t *n, char *why,
                            size_t why_len);
/* The latest mark of each of keys[0..n) for model, found[i] false when
 * none: the active version's TRAINFILE_MARKS and the sample log
 * directory's, then every record the model's sample log keeps, a later
 * position winning.  A log that cannot be read to its end (or a mark in it
 * that cannot be) is a WARN and nothing found: the files are read from
 * the start.  The feeder's, once, before it appends: blocks on disk I/O. */
void online__file_marks_find(const char *model, const uint64_t *keys, size_t n,
                             online_file_progress_t *out, bool *found);

/* Writes t[0..n) as ONLINE_FILE_MARKS_FILE in dirfd (a temporary file,
 * fsync, rename): 0 or -errno.  Blocks on the disk. */
int online__file_marks_write_at(int dirfd, const online_file_progress_t *t, uint32_t n);

/* From online_start, after the trainers and the bus: resolves the model
 * (--train-file-model, else the only one served or in the repository) and
 * starts the feeder when --train-file is set.  0 (also when it is not), or
 * -EINVAL / -errno with a sentence in why (an ambiguous or unknown model,
 * no thread). */
int online__file_start(char *why, size_t why_len);

/* From online_stop, first: the feeder stops at its next sample or wait
 * (promptly: a wait is a few ms) and is joined; what it had not submitted is
 * not learned (logged).  Idempotent; safe when it never started. */
void online__file_stop(void);

/* The tlserve_online_file_* families (Prometheus text) into buf, nothing
 * without --train-file; the length written (cut at a line). */
size_t online__file_metrics(char *buf, size_t len);

/* ---- the export of the online updates (online_export.c) -----------------------
 *
 * The trainer thread calls these, and only these, at the points named; the
 * export thread and the delta writing stay inside online_export.c.  Every
 * call is a no-op when q->exp is NULL.  None allocates per sample. */

/* At the trainer thread's start: makes q->exp when exports are on (the
 * dirty set and the export thread).  0, or -ENOMEM (logged; the trainer
 * runs without exports). */
int online__export_init(online_model_t *q);

/* After a step of req (whatever its outcome): its keys are dirty.  Bounded:
 * past the set's room the next export carries every key of the store. */
void online__export_mark(online_model_t *q, const codec_train_t *req);

/* The trainer has learned (or dropped) every record below log position
 * next_pos: what an export taken now covers. */
void online__export_learned(online_model_t *q, uint64_t next_pos);

/* From attach, q->lock held, when the active version changed but its store
 * is the one the trainer writes: true when meta names a version this
 * process exported above the one attached (the watcher made it active with
 * model_derive, no copy): q's version, trainer.state and the log's trim
 * move to it and the trainer keeps its optimizer state. */
bool online__export_adopt(online_model_t *q, const store_meta_t *meta);

/* From attach when the trainer starts over on meta's version: the dirty
 * set and a failed export are dropped (they were of the version replaced),
 * and an export under way is not committed. */
void online__export_reset(online_model_t *q, const store_meta_t *meta);

/* From the restart's replay decision: when the active version m is an
 * online export (its producer names the log position it covers), the
 * replay is set to start there on it, whatever trainer.state says. */
void online__export_restart(online_model_t *q, const model_t *m);

/* The same with the bus in replay mode, from the trainer's first batch
 * after a start: when the active version m is an online export of this
 * model ("stream=S", any process's), returns S + 1, the first stream
 * sequence it does not hold (the trainer skips those below, whatever
 * trainer.state said); else 0.  Reads the version's manifest: may block. */
uint64_t online__export_bus_restart(online_model_t *q, const model_t *m);

/* True when an export is due (the timer with keys dirty, a filling set):
 * the trainer's idle wait ends for online__export_tick. */
bool online__export_due(const online_model_t *q);

/* From learn_batch, writer lock held, m the active version: true when m is
 * a version on the very store the trainer has written that it neither
 * attached to nor exported (a rollback or an activation swapped a kept
 * version back in, and that version sees the trainer's writes): the
 * trainer waits, its records queued, until the repository's reload of
 * that version (repo_admin.c) replaces it.  Logged once per wait. */
bool online__export_stale(online_model_t *q, const model_t *m);

/* From the trainer's loop, without the writer lock: hands the dirty keys
 * and their values over to the export thread when an export is due (the
 * timer, a filling set) and the thread is free.  Takes the writer lock for
 * the hand-over (the keys' lookups), never for the write. */
void online__export_tick(online_model_t *q);

/* At the trainer thread's end (a clean shutdown): hands over what is left,
 * waits for its write, stops the export thread and frees q->exp. */
void online__export_stop(online_model_t *q); /* sets q->export_lost when it failed */

/* The registry of this process's own exports (online_export_own.c; any
 * thread, its own leaf lock). */
uint64_t online__export_own_id(void); /* this process's random export id, drawn once */
/* "tlserve-online log=<pos> id=<own id>" (with the bus: "stream=<pos - 1>"): an
 * export's producer field. */
void online__export_producer(uint64_t pos, char out[STORE_PRODUCER_MAX]);
/* Records model's export version covering log records below pos (a retry of
 * the same version replaces it); the last ONLINE_EXPORT_OWN_MAX are kept. */
void online__export_own_add(const char *model, uint64_t version, uint64_t pos);
/* 1 with *pos when version is one of model's own exports (voided ones too
 * when with_void), else 0. */
int online__export_own_pos(const char *model, uint64_t version, uint64_t *pos, bool with_void);
/* Voids model's own exports above version to (a rollback): their versions
 * into out (up to cap); returns how many were voided. */
size_t online__export_own_void_above(const char *model, uint64_t to, uint64_t *out, size_t cap);

#endif /* TL_SERVER_ONLINE_IMPL_H */
