/*
 * server.h — what tlserve's parts share (internal to server/): the config,
 * the active model, per-worker metrics, and the entry points of the data
 * plane (workers) and the admin plane.
 *
 * THREADS
 *   main      parses the config, loads the first model, starts the admin
 *             thread and the workers, waits for SIGTERM/SIGINT, then drains.
 *   admin     one thread, libevent evhttp: health, readiness, metrics, model
 *             list, and the load API, which only queues: it never blocks on a
 *             load or on the retire wait.
 *   loader    one thread (loader.c), started and stopped with the admin
 *             plane: takes queued loads one at a time, loads the snapshot
 *             (with cfg.load_threads helpers), swaps it in, retires the old
 *             version, and reports each finished load back to the admin
 *             thread.
 *   workers   N data-plane threads, each with its own io_uring (or epoll) and
 *             connections; they read the active model pointer per request.
 *
 * MODEL LIFETIME
 *   server_model_t wraps a model_t with a reference count.  Workers take a
 *   reference per request (server_model_acquire / _release: two atomic ops
 *   on a counter line per model version, no lock); the loader swaps the
 *   active pointer and drops the server's own reference, so the old version
 *   is freed by whoever releases it last.  Each version has a generation
 *   number: a worker that pins a generation it has not seen sizes its
 *   scratch for it once, before it scores with it.
 */
#ifndef TL_SERVER_H
#define TL_SERVER_H

#include "model/model.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Branch hints and the cold attribute, for all of server/: likely/unlikely
 * only on error branches, cold on setup and error paths. */
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define cold __attribute__((cold))

/* ---- config --------------------------------------------------------------- */

typedef struct server_config {
    char model_dir[1024];      /* snapshot to serve at start ("" = none) */
    char model_root[1024];     /* loads only from under this directory's real path ("" = any) */
    char model_repo[1024];     /* model repository to serve from and watch (repo.h; "" = none) */
    char repo_marks_dir[1024]; /* where the models' marks files go (repo_marks.h; "" = beside) */
    char model_name[64];       /* the repository's model to serve ("" = its only one) */
    int keep_versions;         /* swapped-out versions kept loaded for rollback (0..4) */
    char bind[64];             /* data plane address, default 127.0.0.1 */
    int port;                  /* data plane port */
    char admin_bind[64];       /* admin plane address, default 127.0.0.1 */
    int admin_port;            /* admin plane port */
    char admin_token[256];     /* Bearer token for state-changing admin calls ("" = refuse them) */
    char admin_token_file[1024]; /* file the token was read from at start ("" = none) */
    int workers;               /* data-plane threads, 0 = one per core */
    int lookup_threads;        /* helpers that split a request's lookups, 0 = none */
    int load_threads;          /* snapshot loader threads; 0 = auto, resolved by main (LOAD THREADS) */
    bool load_sched_idle;      /* the loader (and its threads) as SCHED_IDLE (loader.c) */
    int max_inflight;          /* per connection: answers queued and unsent before it is not read */
    int max_unsent_bytes;      /* per connection: unsent answer bytes before it is not read */
    int send_buffer_bytes;     /* per connection SO_SNDBUF, 0 = the kernel's autotuning */
    int max_connections;       /* connections per worker */
    int max_frame_bytes;       /* largest accepted payload */
    int max_input_bytes;       /* per worker: input buffers of all its connections together */
    int max_output_bytes;      /* per worker: output buffers; past it the largest backlog closes */
    int frame_timeout_ms;      /* a connection with a partial frame this long is closed */
    int idle_timeout_ms;       /* a connection that sends and awaits nothing this long is closed */
    int send_timeout_ms;       /* a connection whose output makes no progress this long is closed */
    bool force_epoll;          /* use the epoll data plane even if io_uring works */
    char log_level[16];        /* error, warn, info, debug */
    /* validation gate (gate.h) */
    bool gate;                 /* check candidates before they go live (false: never) */
    double gate_max_abs;       /* sanity: largest |value| in a candidate's store */
    bool gate_allow_kind_change; /* sanity: a candidate may change kind or width */
    int gate_sample;           /* live PREDICT requests kept for shadow scoring, 0 = none */
    int gate_items_per_request; /* items of each sampled request scored, 0 = all */
    int gate_slot_bytes;       /* largest sampled payload; larger requests are not sampled */
    double gate_max_mean_shift; /* shadow: largest relative move of the mean prediction */
    double gate_max_psi;       /* shadow: largest PSI of the score distribution */
    char gate_eval_file[1024]; /* labeled libsvm/libffm file (gate_eval.h; "" = none) */
    int gate_eval_max_rows;    /* rows of it held in memory (the first ones) */
    double gate_max_logloss_increase; /* eval: refuse cand > active + this (absolute) */
    /* post-swap guard (guard.h) */
    int guard_window_ms;       /* how long a loaded version is watched, 0 = never */
    int guard_min_requests;    /* no verdict on fewer requests */
    double guard_max_error_rate; /* failed / scored PREDICTs above it: roll back */
    double guard_max_mean_ratio; /* mean prediction new/old or old/new above it: roll back */
    /* online learning (online.h) */
    bool online;               /* TRAIN frames train the served model */
    char online_optimizer[16]; /* ftrl, adagrad, sgd */
    double online_alpha, online_beta, online_l1, online_l2; /* < 0: the optimizer's default */
    int online_queue_bytes;    /* per model: TRAIN payloads queued before OVERLOADED */
    int online_max_samples_per_s; /* per model, 0 = no cap */
    double online_max_feature_value; /* |a feature value| a sample learns with at most */
    int online_nice;              /* the trainer threads' nice value, 0..19 */
    int online_boost_ms;          /* a sample queued this long: the trainer at online_boost_nice */
    int online_boost_nice;        /* the trainer's nice while boosted (0..19) */
    char sample_log_dir[1024]; /* TRAIN/FEEDBACK samples logged before acknowledged ("" = none) */
    int sample_log_sync_ms;    /* fdatasync of the sample log at most this often */
    int sample_log_segment_kib; /* a segment past this is followed by a new one */
    int online_full_every;     /* every N-th export a full version (online_export.c) */
    int online_export_ms;      /* with --model-repo: online updates exported this often (0 = off) */
    int impression_log_mib;    /* PREDICTs flagged LOG kept for FEEDBACK, in MiB */
    int impression_window_ms;  /* how long an impression waits for its feedback */
    bool impression_negatives; /* items without feedback in the window are learned as negatives */
    char train_file[4096];     /* comma-separated files learned at start (online_file.c; "" = none) */
    char train_file_model[64]; /* the model they train ("" = the only one served) */
    char train_file_format[16]; /* auto, libsvm, libffm, criteo */
    char bus_servers[1024];    /* NATS URLs: replicas learn one JetStream stream ("" = none) */
    char bus_stream[64];       /* the stream's name */
    char bus_subject_prefix[64]; /* subjects "<prefix>.<model>" */
    int bus_replicas;          /* the stream's replicas when the bus creates it */
    char bus_node[128];        /* this server's name in message ids ("" = hostname:port) */
    char bus_mode[16];         /* "replay" (one sample stream) or "partitioned" (online_sync.c) */
    int sync_interval_ms;      /* partitioned: publish accumulated updates this often */
    int sync_max_keys;         /* partitioned: keys an update accumulator holds */
    double sync_topk;          /* partitioned: fraction of held keys sent per message */
    int sync_bits;             /* partitioned: 1 or 4 bits a value (UPDATE_F_LOG4) */
    bool sync_exact;           /* partitioned: every turn exact (f32, every key), no residuals */
    int sync_dnn_warmup;       /* partitioned DNN: local MLP steps before 1-bit Adam freezes v */
    int sync_dnn_chunk;        /* partitioned DNN: MLP values per 1-bit scale */
    double sync_dnn_lr;        /* partitioned DNN: the MLP's Adam step */
} server_config_t;

/* Fills defaults, then the --config file, then the environment (settings
 * that have a variable), then argv flags; then reads --admin-token-file
 * into admin_token.  On a bad value prints a message naming the setting
 * and returns -1; on --help prints the settings table and returns 1; 0
 * when ready to run.  Warnings (a token on the command line, a token file
 * others can read) go to stderr and do not fail. */
int server_config_load(server_config_t *cfg, int argc, char **argv);

/* Whether path, resolved with realpath() (symlinks and '..' followed),
 * lies strictly under root's real path: 0 with the resolved path in
 * resolved (len bytes), else -1 with why naming the path, what it resolved
 * to and the root (outside, the root itself, unresolvable, too long).
 * Reads the filesystem; any thread. */
int server_path_under_root(const char *root, const char *path, char *resolved, size_t len,
                           char *why, size_t why_len);

/* ---- metrics ------------------------------------------------------------------ */

/* Counters, defined once: struct fields, reset and Prometheus text come from
 * this list (X-macro).  Per worker, written by that worker only (relaxed),
 * summed by the admin thread. */
#define SERVER_COUNTERS(X)                                                                  \
    X(requests_total, "Requests decoded (all types)")                                       \
    X(predict_total, "PREDICT requests answered with scores")                               \
    X(items_total, "Items scored")                                                          \
    X(errors_total, "ERROR frames sent (all codes; by code: tlserve_errors_by_code_total)") \
    X(overloaded_total, "Requests refused with OVERLOADED")                                 \
    X(connections_accepted_total, "Connections accepted")                                   \
    X(connections_closed_total, "Connections closed")                                       \
    X(bytes_in_total, "Bytes received on the data plane")                                   \
    X(bytes_out_total, "Bytes queued for sending on the data plane")                        \
    X(backpressure_total, "Times a connection reached --max-inflight unsent answers and stopped being read") \
    X(connections_refused_total, "Connections refused at accept (ERROR frame, then closed): at --max-connections with none idle to evict, or draining") \
    X(accept_errors_total, "accept() failures (out of file descriptors: EMFILE/ENFILE, or other)") \
    X(slow_rounds_total, "Worker loop rounds that took over 50 ms: every connection of that worker waited that long")

#define SERVER_MAX_ERROR_CODES 32

/* Why the server closed a connection that had not asked for it
 * (tlserve_connections_reaped_total{reason}). */
typedef enum server_reap {
    SERVER_REAP_IDLE,          /* nothing sent or awaited for --idle-timeout-ms */
    SERVER_REAP_FRAME_TIMEOUT, /* a partial frame older than --frame-timeout-ms */
    SERVER_REAP_SEND_TIMEOUT,  /* output made no progress for --send-timeout-ms */
    SERVER_REAP_OUTPUT_CAP,    /* the largest backlog when --max-output-bytes was passed */
    SERVER_REAP_INPUT_CAP,     /* the most input held when --max-input-bytes would be passed */
    SERVER_REAP_EVICTED,       /* the longest idle, closed for a new connection at the limit */
    SERVER_REAP_REASONS
} server_reap_t;

extern const char *const server_reap_names[SERVER_REAP_REASONS];

/* Request latency histogram, log-linear in nanoseconds: values below 16 ns
 * have a bucket each; above, every power of two is split into 16 buckets
 * (width <= 6.25% of the value).  Up to 2^36 ns (~69 s); the last bucket
 * takes anything larger. */
#define SERVER_LAT_SUB 16
#define SERVER_LAT_BUCKETS ((36 - 3) * SERVER_LAT_SUB)

static inline unsigned server_lat_bucket(uint64_t ns)
{
    if (ns < SERVER_LAT_SUB)
        return (unsigned)ns;
    unsigned msb = 63u - (unsigned)__builtin_clzll(ns);
    unsigned i = (msb - 3) * SERVER_LAT_SUB + (unsigned)((ns >> (msb - 4)) & (SERVER_LAT_SUB - 1));
    return i < SERVER_LAT_BUCKETS ? i : SERVER_LAT_BUCKETS - 1;
}

/* Smallest value (ns) that falls in bucket i; the bucket ends where i + 1
 * begins. */
static inline uint64_t server_lat_bucket_low(unsigned i)
{
    if (i < SERVER_LAT_SUB)
        return i;
    unsigned msb = i / SERVER_LAT_SUB + 3;
    return (uint64_t)(SERVER_LAT_SUB + i % SERVER_LAT_SUB) << (msb - 4);
}

/* Per worker and version generation: what the post-swap guard judges a
 * version by (guard.h: guard_account writes, guard.c sums).  gen 0: unused
 * or being recycled. */
#define SERVER_TALLY_SLOTS 34 /* every model's active version and a new one, + 2 */

typedef struct server_tally {
    _Atomic uint64_t gen;       /* server_model_t.gen counted here */
    _Atomic uint64_t requests;  /* PREDICTs that reached scoring */
    _Atomic uint64_t failed;    /* of them, failed by scoring or with a non-finite score */
    _Atomic uint64_t items;     /* items with a finite score */
    _Atomic uint64_t bad_items; /* items with a non-finite score */
    _Atomic double sum;         /* sum of the finite scores */
} server_tally_t;

typedef struct server_metrics {
#define X(name, help) _Atomic uint64_t name;
    SERVER_COUNTERS(X)
#undef X
    _Atomic uint64_t errors_by_code[SERVER_MAX_ERROR_CODES];
    _Atomic uint64_t latency_bucket[SERVER_LAT_BUCKETS]; /* frame complete -> response encoded */
    _Atomic uint64_t latency_ns_sum;
    _Atomic uint64_t reaped[SERVER_REAP_REASONS]; /* connections closed by the server, by reason */
    _Atomic int64_t inflight;
    _Atomic int64_t connections;
    _Atomic int64_t output_bytes; /* output buffer bytes held (max-output-bytes) */
    server_tally_t tally[SERVER_TALLY_SLOTS]; /* written by this worker only (guard.h) */
    char pad[64];
} server_metrics_t;

/* ---- models ------------------------------------------------------------------- */

typedef struct server_model {
    model_t *model;
    _Atomic int64_t refs;
    uint64_t gen; /* unique per version handle, > 0; immutable (workers' scratch key) */
} server_model_t;

/* Models served at once: one slot each, claimed by name at the model's first
 * swap and never given back (names are few and long-lived). */
#define SERVER_MODELS_MAX 16
_Static_assert(SERVER_TALLY_SLOTS >= 2 * SERVER_MODELS_MAX, "a tally slot for each model's "
               "active version and one new version");

typedef struct server_slot {
    _Atomic(server_model_t *) active; /* NULL until a version of this model is live */
    char name[64];                    /* written once, before nmodels counts the slot */
    pthread_mutex_t writer; /* held by whoever writes the active version's base: the fold
                             * of a delta, the online trainer (online.h) */
} server_slot_t;

typedef struct server {
    server_config_t cfg;
    server_slot_t models[SERVER_MODELS_MAX];
    _Atomic uint32_t nmodels;           /* slots claimed (release: their names are set) */
    int nworkers;
    store_team_t *team;                 /* lookup helpers (main: start to exit), NULL: none */
    server_metrics_t *metrics;          /* [nworkers] */
    _Atomic bool listening;             /* the data plane's sockets listen: /readyz waits for it */
    _Atomic bool stopping;              /* SIGTERM seen: drain */
} server_t;

/* The slot of model name (claimed by its first version), NULL when none.
 * Lock-free; slots are never released. */
server_slot_t *server_slot_named(server_t *srv, const char *name);

/* The background pass after a delta went live as an overlay (model/overlay.h):
 * writes the active version's overlays into its base, gives the kept
 * versions on that base the undo, and replaces the active handle by one
 * without overlays.  Loader thread only (it is the base's one writer); never
 * changes a value any version returns.  0 when folded or nothing to fold,
 * -errno when it stopped (logged; the overlay keeps serving). */
int server_model_fold(server_t *srv, const char *name);

typedef struct server_fold_metrics {
    uint64_t folds, aborted, keys; /* folds done and stopped; overlay keys folded */
    uint64_t last_keys;
    double last_seconds;
} server_fold_metrics_t;
void server_model_fold_metrics(server_fold_metrics_t *out);

/* A reference to the active version of model name (server_model_release it);
 * NULL when the server has no live version of that model.  Lock-free: a scan
 * of the claimed slots' names, then the hazard-slot pin of model_registry.c. */
server_model_t *server_model_acquire_named(server_t *srv, const char *name);
/* The same for the first model the server served (one-model servers, tests). */
server_model_t *server_model_acquire(server_t *srv);  /* NULL when none */
/* Names of the models with a slot, in the order they first went live; returns
 * how many (at most max are copied). */
size_t server_model_names(server_t *srv, char (*names)[64], size_t max);
/* 1 when some model has a live version. */
int server_model_any_active(server_t *srv);
/* Claims a slot for model name unless it has one: 0, or -ENOSPC when the
 * server holds SERVER_MODELS_MAX models already.  Call before a swap. */
int server_model_reserve(server_t *srv, const char *name);
/* Drops every slot's active version (shutdown: no thread acquires any more). */
void server_model_drop_all(server_t *srv);
/* A reference to kept (standby) version `version` of model name, for a
 * request that pins it; NULL when it is not kept.  Takes the registry's
 * lock: for the rare pinned request, not the active path. */
server_model_t *server_model_acquire_kept(server_t *srv, const char *name, uint64_t version);
void server_model_release(server_model_t *sm);

/* Loads the snapshot in dir into a new version handle, not yet active
 * (*out holds the one reference; give it to server_model_swap, or drop it
 * with server_model_release).  Blocks for the whole load.  Returns 0;
 * model_load's -errno with *err (not NULL) filled by it when the snapshot
 * cannot be loaded; -ENOMEM with err->msg left empty when the handle cannot
 * be allocated. */
int server_model_open(server_t *srv, const char *dir, server_model_t **out, store_error_t *err);

/* Wraps m (the handle takes it over) into a new version handle, not yet
 * active, holding the caller's one reference, as server_model_open does
 * for a snapshot: for versions built otherwise (a chain, repo.c).  Returns
 * 0, or -ENOMEM with m still the caller's.  Never blocks. */
int server_model_wrap(model_t *m, server_model_t **out);

/* Makes sm (from server_model_open or _wrap; its reference becomes the server's)
 * the active version, keeps the previous one as a standby (or queues it to
 * be retired) in the same step, and returns it (NULL when none) with a
 * reference the caller must pass to server_model_retire.  Never blocks.  One
 * caller at a time: main before the admin plane starts, then the loader
 * thread. */
server_model_t *server_model_swap(server_t *srv, server_model_t *sm);

/* Drops the reference server_model_swap returned with old (NULL: no
 * handle) and retires the versions the swaps dropped; a version nothing
 * else holds (one taken out of srv->active by hand) is retired too.  A
 * retire blocks until no thread is pinning the version half-way
 * (nanoseconds), then up to a bounded wait (RETIRE_WAIT_MS) for in-flight
 * requests to let go, so that the free usually happens here and not on a
 * worker. */
void server_model_retire(server_model_t *old);

/* open + swap + retire, for main's first model.  Returns as
 * server_model_open. */
int server_model_load(server_t *srv, const char *dir, store_error_t *err);

/* ---- standby versions and rollback (model_registry.c) --------------------------
 *
 * server_model_swap keeps the swapped-out version loaded as a STANDBY
 * instead of dropping it, up to cfg.keep_versions of them (newest first);
 * the oldest past that limit, and a standby of the same name and version as
 * the one made active, are retired as before.  A standby holds the server's
 * reference, so making it active again is one pointer swap.  The functions
 * below may be called from any thread (a registry lock orders them with
 * the loader's swap); none blocks on a load, and none waits for requests:
 * a version they drop is retired on a short-lived thread of its own. */
#define SERVER_KEEP_VERSIONS_MAX 4
#define SERVER_KEPT_MAX (SERVER_KEEP_VERSIONS_MAX * SERVER_MODELS_MAX) /* all models' */

typedef struct server_kept {
    char name[64];     /* manifest model name */
    uint64_t version;  /* manifest version */
    char kind[16];     /* store_model_kind_name */
    uint64_t keys;
} server_kept_t;

/* Copies the standby versions, newest first, into out[0..max); returns how
 * many there are (may exceed max). */
size_t server_model_standby(server_t *srv, server_kept_t *out, size_t max);

/* Takes kept version `version` of model name off the standby list and
 * retires it (on a thread of its own): 0, or -ESRCH when it is not kept. */
int server_model_drop_kept(server_t *srv, const char *name, uint64_t version);

/* Rollback of model name: makes its newest standby the active version and
 * drops the version it replaced (not kept: it was rolled back).  Returns 0
 * with *from (the replaced version) and *to; -ENOENT when the active model
 * is not name; -ESRCH when no standby of name is kept. */
int server_model_rollback(server_t *srv, const char *name, uint64_t *from, uint64_t *to);

/* Makes the kept standby (name, version) active; the replaced version
 * becomes the newest standby.  0 with *from the replaced version (0: none);
 * -ESRCH when that version is not kept; 0 and nothing done when it is
 * already active (*from = version). */
int server_model_activate_kept(server_t *srv, const char *name, uint64_t version,
                               uint64_t *from);

/* Retires every standby (main, at exit, after the loader stopped). */
void server_model_drop_standby(server_t *srv);

/* ---- background loads (loader.c) --------------------------------------------- */

#define LOADER_QUEUE_MAX 4   /* loads waiting behind the running one */
#define LOADER_MODELS_MAX 64 /* model names whose latest load is remembered */

typedef enum loader_state {
    LOADER_QUEUED,
    LOADER_LOADING,
    LOADER_VALIDATING, /* loaded, in the validation gate (gate.h) */
    LOADER_DONE,
    LOADER_FAILED,
} loader_state_t;

/* One load, as the admin API reports it.  A copy: the loader owns the
 * record. */
typedef struct loader_status {
    uint64_t id;           /* > 0, one sequence for all models */
    loader_state_t state;
    char model[64];        /* the model name in the URL (= the manifest's) */
    char path[1024];       /* the snapshot directory */
    uint64_t version;      /* DONE: the version now active (from the manifest otherwise) */
    char kind[16];         /* DONE: store_model_kind_name */
    uint64_t keys;         /* DONE: keys in the new version */
    bool shutdown;         /* FAILED because the server stopped, not by the snapshot */
    bool gate_refused;     /* FAILED because the validation gate refused the version */
    char error[2048];      /* FAILED: one sentence naming the snapshot and the store's error */
    uint64_t queued_ns;    /* CLOCK_MONOTONIC when accepted */
    uint64_t finished_ns;  /* when DONE/FAILED, else 0 */
} loader_status_t;

/* Called on the loader thread (or on the thread calling loader_stop, for
 * loads dropped from the queue) each time a load ends, with no loader lock
 * held.  Must not block. */
typedef void loader_done_fn(const loader_status_t *st, void *arg);

/* Starts the loader thread; returns 0 or -errno. */
int loader_start(server_t *srv, loader_done_fn *done, void *arg);

/* Stops accepting loads, fails the queued ones (shutdown, reported through
 * done), waits for the running load to end (a snapshot load cannot be
 * interrupted), discards its version instead of swapping it in, and joins.
 * Blocks for the rest of the running load. */
void loader_stop(void);

/* How a load builds its version, on the loader thread, in place of
 * server_model_open(srv, st->path): for versions that are not one snapshot
 * directory (a chain of a repository, repo.c).  Same contract as
 * server_model_open: 0 with *out holding one reference, or -errno with
 * *err naming what was wrong (err->msg empty for a bare resource failure).
 * May block for as long as the load takes. */
typedef int loader_open_fn(server_t *srv, const loader_status_t *st, void *arg,
                           server_model_t **out, store_error_t *err);

/* One load to queue (loader_submit_job).  Strings are copied. */
typedef struct loader_job {
    const char *name;       /* model name (the caller checked it against the manifest) */
    const char *dir;        /* directory shown as the load's path (and opened when open is NULL) */
    uint64_t version;       /* the version expected, for the status until DONE */
    loader_open_fn *open;   /* NULL: server_model_open(dir) */
    void *open_arg;
    loader_done_fn *done;   /* NULL, or also told when THIS load ends, before the global done */
    void *done_arg;
    bool force;             /* skip the validation gate (gate.h): ops' override */
} loader_job_t;

/* Queues job: loader_submit with a custom open and an own done hook (both
 * run on the loader thread, or done on loader_stop's thread for a dropped
 * load).  Returns as loader_submit. */
int loader_submit_job(const loader_job_t *job, loader_status_t *out);

/* Queues a load of the snapshot in dir as model name (the caller has checked
 * the name against the manifest).  Never blocks on a load.  Returns 0 with
 * *out the new load (QUEUED); -EBUSY with *out the load of the same model
 * that is still queued or running (one at a time per model); -EAGAIN when
 * LOADER_QUEUE_MAX loads are waiting; -ECANCELED when the loader is not
 * running (stopping). */
int loader_submit(const char *name, const char *dir, uint64_t version, loader_status_t *out);

/* The latest load of model name into *out: 0, or -ENOENT when there was
 * none (since start, among the last LOADER_MODELS_MAX names).  Never waits
 * for a load. */
int loader_status(const char *name, loader_status_t *out);

/* Milliseconds from st's acceptance to its end, or to now while it is
 * queued or running. */
uint64_t loader_elapsed_ms(const loader_status_t *st);

typedef struct loader_metrics {
    uint64_t ok, failed;    /* loads ended DONE / FAILED */
    double last_seconds;    /* the last ended load, loading to end (0: none yet) */
    int64_t in_progress;    /* loads queued or running */
} loader_metrics_t;

/* Copies the load counters into *out.  Takes the loader's lock for the
 * copy only (it is never held across a load): never waits for a load. */
void loader_get_metrics(loader_metrics_t *out);

/* "queued", "loading", "done" or "failed": a static string. */
const char *loader_state_name(loader_state_t st);

/* ---- planes ------------------------------------------------------------------- */

/* Starts the admin thread; returns 0 or -errno (bind failure named on stderr). */
int admin_start(server_t *srv);
void admin_stop(server_t *srv);

/* Starts the workers; returns 0 or -errno.  workers_stop() drains in-flight
 * requests (bounded by a deadline) and joins. */
int workers_start(server_t *srv);
void workers_stop(server_t *srv);

#endif /* TL_SERVER_H */
