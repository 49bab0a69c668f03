/*
 * online_export_impl.h — the export's private types, shared by
 * online_export.c (the export thread), online_export_handover.c (the
 * dirty set, the hand-over) and
 * online_export_full.c (FULL EXPORTS: the full version and the chain's
 * length).  See online_export.c's design comment.
 */
#ifndef TL_ONLINE_EXPORT_IMPL_H
#define TL_ONLINE_EXPORT_IMPL_H

#include "online_impl.h"

#include "online_sync_state.h"
#include "store/delta.h"

enum { EXP_IDLE, EXP_PENDING, EXP_BUSY, EXP_FAILED };

#define DIRTY_BITS 21
#define DIRTY_SLOTS (1u << DIRTY_BITS)
#define DIRTY_KEYS (DIRTY_SLOTS / 2) /* keys tracked between two exports */
#define DIRTY_EARLY (DIRTY_KEYS / 2) /* past it an export is due at once */
#define CUT_WAIT_WARN_MS 60000 /* partitioned mode: an export kept waiting this long is said */

struct export_job {
    uint64_t *keys; /* n keys, */
    float *vals;    /* n * K values */
    uint8_t *found; /* lookup scratch */
    size_t n, cap;
    uint32_t K;
    store_delta_layout_t layout;
    uint64_t parent, pos, epoch; /* head, position covered and epoch at the hand-over */
    bool all;                    /* every key of the store (the set had overflowed, or full) */
    bool full;                   /* written as a FULL version (FULL EXPORTS) */
    uint64_t held_ns;            /* the hand-over's time under the writer lock */
    store_meta_t meta;           /* full: the live model's meta at the hand-over */
    store_extras_t x;            /* full: its params and dense arrays (data in dense) */
    float *dense;                /* dense_cap floats: the copies x.dense[] point into */
    size_t dense_cap;
    /* THE OPTIMIZER STATE: the trainer's rows of the keys above that it has */
    uint64_t *skeys;         /* sh.count keys, */
    float *srows;            /* sh.count * sh.width floats */
    size_t scap, sfloats;    /* keys skeys holds, floats srows holds */
    train_state_header_t sh; /* kind, optimizer, width, count; version at the write */
    bool has_state;          /* false: gathering failed (no memory): no state file */
    /* the trainer's --train-file marks at the hand-over (online_file_marks.c) */
    online_file_progress_t fm[ONLINE_FILE_MARKS_MAX];
    uint32_t nfm;
    /* partitioned bus mode: the exchange's position at the hand-over (online_sync_export.c) */
    sync_state_t sync;
    bool has_sync;
    uint64_t cut_ns;       /* of held_ns, the cut's (online__sync_cut and its peers' keys) */
};

struct online_export {
    int repo_lock; /* <repo>/<model> opened and flock'ed: one exporting process per repository */
    /* the trainer thread's */
    uint64_t *slots; /* DIRTY_SLOTS keys, 0 = empty (key 0 is has_zero) */
    size_t count;    /* keys in slots, has_zero included */
    bool has_zero, overflow;
    uint64_t next_pos; /* records below it learned */
    uint64_t due_ms;   /* the timer's next export */
    /* state and job: lock */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int state; /* EXP_* */
    bool stop;
    struct export_job job;
    /* lineage: commit (held by the export thread across a commit) */
    pthread_mutex_t commit;
    uint64_t head, epoch;
    uint32_t links;   /* deltas in head's chain after its full version, */
    bool links_known; /* once an export learned it (reset: unknown) */
    pthread_t thread;
    bool stale_said;   /* the trainer's: "waiting for the reload" logged */
    bool refused;      /* the trainer's: this model cannot be exported (said once) */
    uint64_t cut_wait_ms; /* the trainer's: since when the exchange keeps the cut out (0: not) */
    bool cut_wait_said;   /* the trainer's: that wait logged */
    online_model_t *q; /* counters; outlives e */
    char model_dir[1100];
};

/* The chain length past which an export is FULL (online_export_full.c). */
uint32_t online__export_full_every(void);

/* j->x := x with the dense arrays copied into j->dense.  0 or -ENOMEM. */
int online__export_copy_extras(struct export_job *j, const store_extras_t *x);

/* Writes job j as the full version dir, side(j, dirfd) its side files.
 * 0 or -errno with *err. */
int online__export_write_full(struct export_job *j, const char *dir, uint64_t version,
                              const char *producer, store_snapshot_side_fn side,
                              store_error_t *err);

/* After the export of version went live (e->commit held): the chain's length. */
void online__export_note_links(struct online_export *e, bool full, uint64_t version);

/* online_export_handover.c: empties the dirty set (trainer thread). */
void online__export_dirty_clear(struct online_export *e);
/* online_export_handover.c: builds the job from the dirty set and hands it
 * to the export thread: 1 handed over, 0 not now (the thread busy, a
 * version change pending, nothing dirty).  Trainer thread. */
int online__export_hand_over(online_model_t *q);
/* After a written export (the export thread, the job its own): buffers sized
 * for far more keys than it held, a full export's (the whole model), are
 * freed, not kept for the life of the process; the next hand-over sizes
 * them again. */
void online__export_job_trim(struct export_job *j);
/* Frees the job's key, value and state-row buffers (NULL, sizes 0). */
void online__export_job_free_rows(struct export_job *j);
/* The bytes its buffers hold (tlserve_online_export_buffer_bytes). */
uint64_t online__export_job_bytes(const struct export_job *j);

#endif
