/*
 * online_sync_state.h — SYNC_STATE, the side file an online export writes in
 * partitioned bus mode (online_sync_state.c has the format and the design):
 * the position of the peers' updates inside the exported values and this
 * replica's own sync bookkeeping, so that a restart from the export resumes
 * the update exchange where the export left it.  Self-contained (no server
 * state): the fuzz target links it alone.
 */
#ifndef TL_SERVER_ONLINE_SYNC_STATE_H
#define TL_SERVER_ONLINE_SYNC_STATE_H

#include <stddef.h>
#include <stdint.h>

#define SYNC_STATE_FILE "SYNC_STATE"
#define SYNC_STATE_PEERS_MAX 256u       /* the consumer's producer table (PRODUCERS_MAX) */
#define SYNC_STATE_K_MAX 2048u          /* values per key (UPDATE_MAX_K) */
#define SYNC_STATE_KEYS_MAX (1u << 27)  /* residual keys: two accumulators of 2^26 */
#define SYNC_STATE_DENSE_MAX (1u << 28) /* a DNN's MLP parameters (UPDATE_MAX_COUNT) */

/* The DNN's MLP section (dense_n > 0): five arrays of dense_n floats end to
 * end in sync_state_t.dense, in this order. */
enum sync_state_dense_array {
    SYNC_DENSE_X,       /* the trainer's MLP at the cut */
    SYNC_DENSE_M,       /* 1-bit Adam's momentum */
    SYNC_DENSE_V,       /* its variance (bias-corrected once frozen) */
    SYNC_DENSE_PENDING, /* the local delta not yet published */
    SYNC_DENSE_ERROR,   /* the sender's error vector: published less than learned */
    SYNC_DENSE_ARRAYS
};

typedef struct sync_state_peer {
    uint64_t id;       /* a peer's producer id (never ours; 0 if the stream had it) */
    uint64_t last_seq; /* its last update applied into the exported values */
} sync_state_peer_t;

typedef struct sync_state {
    uint64_t version;  /* the export this file belongs to */
    uint64_t base;     /* the lineage's first version: the messages' base_version */
    uint64_t producer; /* this replica's producer id */
    uint64_t own_last; /* its last sequence published before the cut (0: none) */
    uint32_t k;        /* values per key of the residual */
    uint32_t npeers;
    sync_state_peer_t peers[SYNC_STATE_PEERS_MAX];
    uint64_t nkeys;    /* residual entries (a key may appear twice: the two accumulators) */
    uint64_t *keys;    /* nkeys (heap: sync_state_free) */
    float *vals;       /* nkeys * k */
    uint64_t keys_cap; /* entries keys and vals have room for (an export's cut reuses them) */
    /* a DNN's MLP under 1-bit Adam (model/train_sync.h: DENSE); dense_n 0: none */
    uint32_t dense_n;       /* parameters (the trainer's padded MLP array) */
    uint32_t dense_warmup;  /* local steps before the variance froze (or freezes) */
    uint64_t dense_steps;   /* local steps taken */
    double dense_b1_pow, dense_b2_pow; /* beta^t of the bias correction, in [0, 1] */
    float *dense;           /* SYNC_DENSE_ARRAYS * dense_n (heap: sync_state_free) */
} sync_state_t;

/* The array a of st's MLP section (dense_n floats). */
static inline float *sync_state_dense(const sync_state_t *st, enum sync_state_dense_array a)
{
    return st->dense + (size_t)a * st->dense_n;
}

/* The file's size for st's counts. */
size_t sync_state_size(const sync_state_t *st);

/* Encodes st into buf (sync_state_size(st) bytes). */
void sync_state_encode(const sync_state_t *st, uint8_t *buf);

/* Parses the untrusted bytes buf[0..len) into *out (keys, vals and dense
 * allocated: sync_state_free).  0, or -EINVAL / -ENOMEM with why naming
 * what was wrong and where; *out then holds nothing to free. */
int sync_state_parse(const uint8_t *buf, size_t len, sync_state_t *out, char *why, size_t why_len);

/* Writes st as SYNC_STATE into the directory dirfd (a temporary file
 * fsynced and renamed).  0 or -errno.  Blocks. */
int sync_state_write_at(int dirfd, const sync_state_t *st);

/* Reads and parses the file path (at most its size bound).  0, or -errno
 * with why.  Blocks. */
int sync_state_read(const char *path, sync_state_t *out, char *why, size_t why_len);

/* Frees what a parse or a read allocated; NULL-safe, the counts zeroed. */
void sync_state_free(sync_state_t *st);

#endif
