/*
 * update_codec.h — the compressed updates replicas exchange in partitioned
 * mode (1-bit SGD with error feedback, Seide et al. 2014), with no transport
 * in it: the bus (NATS) carries the bytes this module writes and reads.
 *
 *   SPARSE (LR, FM, FFM, the DNN's embeddings): the trainer adds each key's
 *   additive optimizer statistics (LR: FTRL's dz and dn, K = 2; a row of R
 *   floats: its dx and Adagrad's dG per coordinate, K = 2R, train_sync.h)
 *   into an accumulator.  Every interval the producer encodes one message: the top-k
 *   keys by magnitude, each of their K values sent as one sign bit plus a
 *   per-chunk scale, or (UPDATE_F_LOG4) a sign and a power of two under the
 *   chunk's largest.  What is not sent (unselected keys, the quantization
 *   error of the selected ones) stays in the accumulator as a residual for
 *   later intervals: nothing is dropped, only delayed.  Because the values
 *   are additive, receivers add them in any order.
 *
 *   DENSE (the DNN's MLP under 1-bit Adam): a float vector sent as signs and
 *   per-chunk scales, the sender's quantization error kept in its encoder
 *   state and added to the next vector (error feedback).  Its user is
 *   model/train_dnn_sync.c: exact f32 interval deltas during the warm-up
 *   (UPDATE_F_EXACT), then, with Adam's variance frozen, each interval's
 *   momentum-based delta in 1 bit; receivers add the decoded deltas, in any
 *   order (that file says why no receiver-side error feedback is needed).

 * MESSAGE (little endian; one layout for sparse, dense, 1-bit and exact):
 *
 *    0  u32 magic "TLUP"     4  u16 format version (1, 2)  6  u16 flags
 *    8  u64 producer id     16  u64 sequence (+1 per message of a producer)
 *   24  u64 base version    32  u32 count (keys, or the dense length)
 *   36  u16 K (values/key)  38  u16 chunk C (1-bit: keys per scale)
 *   40  u32 body bytes (from the end of the name to the checksum)
 *   44  u16 model name length (1..UPDATE_NAME_MAX)   46 u16 zero
 *   48  model name bytes (printable ASCII, no NUL)
 *       keys: count LEB128 varints, the first key then the gaps to the
 *             next (strictly ascending: every gap >= 1); with
 *             UPDATE_F_RICE the same gaps in a Rice code; absent if DENSE
 *       part (DENSE with UPDATE_F_PART only): u32 total, u32 offset
 *       1-bit: scales f32[K][ceil(count/C)] (column j, chunk c), each
 *             finite and >= 0; then sign bits, bit (j*count + i) set when
 *             key i's column j is negative, the value being -scale, else
 *             +scale (with NONNEG_LAST, column K-1, with NONNEG_HALF,
 *             columns K/2..K-1: set = +scale, clear = 0); the padding
 *             bits of the last byte are zero
 *       4-bit (UPDATE_F_LOG4): scales as for 1 bit, each the chunk's
 *             largest |value|; then a nibble per value, nibble (j*count +
 *             i) in byte (j*count + i) / 2, the low nibble first: bit 3
 *             set when the value is negative (never in a one-sided
 *             column), bits 0-2 e: the value is +-scale x 2^-e for e in
 *             0..6, and 0 for e = 7; a padding nibble is zero
 *       exact (UPDATE_F_EXACT): values f32[count][K], each finite
 *   end u64 XXH3_64bits of every byte before it
 *
 * Message size: 48 + name + keys + 4*K*ceil(count/C) + ceil(K*count/8) + 8
 * (ceil(K*count/2) for the nibbles of LOG4).
 * Keys are 64-bit hashed ids, so a gap between sent keys is about
 * 2^64/count and its varint takes ~7 bytes at 100k keys (its Rice code
 * ~6.1): keys, not values, dominate.

 * THREAD SAFETY
 *   An update_acc_t / update_dense_t belongs to one thread (the trainer);
 *   no call locks.  Decoding and update_msg_foreach touch only the caller's
 *   buffer and message struct: any number of threads decode at once.
 *
 * ERRORS
 *   System/resource failures are -errno.  update_msg_decode, on untrusted
 *   bytes, returns -EBADMSG and fills update_error_t with a code, the byte
 *   offset and one sentence naming the field that was wrong.
 */
#ifndef TL_MODEL_UPDATE_CODEC_H
#define TL_MODEL_UPDATE_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define UPDATE_MAGIC 0x50554c54u  /* "TLUP" */
#define UPDATE_FORMAT_VERSION 2u    /* written when a message needs it (below), read with 1 */
#define UPDATE_FORMAT_VERSION_V1 1u /* every other message: what LR replicas wrote and read */
#define UPDATE_HEADER_BYTES 48u
#define UPDATE_NAME_MAX 128u      /* model name bytes */
#define UPDATE_MAX_K 2048u        /* values per key (2 x an FFM row of 1 + F k floats) */
#define UPDATE_V1_MAX_K 256u      /* values per key of a version 1 message */
#define UPDATE_MAX_COUNT (1u << 28) /* keys (or dense length) per message */

/* Header flags. */
#define UPDATE_F_EXACT 0x1u /* values are f32, not 1 bit (tests, full resync, warm-up) */
#define UPDATE_F_DENSE 0x2u /* no keys: key i is the vector's index i, K = 1 */
/* 1-bit, sparse: the last column is a non-negative quantity (FTRL's n): its
 * bit set means +scale, clear means 0, so a receiver only ever adds >= 0.
 * The encoder sets the bit where the residual is >= the chunk's mean (the
 * scale) and subtracts the scale there, so that column's residual never goes
 * below 0 either.  Not with EXACT or DENSE. */
#define UPDATE_F_NONNEG_LAST 0x4u
/* 1-bit, sparse: the last K/2 columns (K even) are non-negative quantities
 * (Adagrad's dG of each coordinate of a row, FTRL's dn), each quantized as
 * NONNEG_LAST quantizes its one column.  Not with EXACT, DENSE or
 * NONNEG_LAST.  A message with it, or with K over UPDATE_V1_MAX_K, is
 * written as format version 2 (a build that reads version 1 only says so
 * instead of misreading the columns); all others as version 1. */
#define UPDATE_F_NONNEG_HALF 0x8u
/* A DENSE message that carries a range of the vector, not all of it: its
 * body opens with u32 total (the vector's length) and u32 offset (where the
 * range starts), and its count values are the vector's [offset, offset +
 * count), offset + count <= total.  One vector too large for one message
 * (the bus's limit) goes out as several, each a whole message with its own
 * sequence number; a receiver adds each into its range as it arrives (the
 * values are additive), with no state between them.  Only with DENSE;
 * format version 2. */
#define UPDATE_F_PART 0x10u
#define UPDATE_PART_BYTES 8u /* total, offset */
/* Not EXACT: 4 bits a value instead of 1 (the layout above), a
 * sign and a power of two under the chunk's largest |value|.  One bit
 * sends every value of a chunk as +-its mean, so a key far above the mean
 * of the keys beside it (by id, not by size) gets a fraction of its update
 * and waits for the rest as a residual, turn after turn: on 4 partitioned
 * LR replicas 1 bit left about 4x the logloss gap to an exact exchange that
 * 4 bits leave (loadgen/sync_bench.py, docs/performance.md).
 * Two-sided columns go to the nearest of scale x 2^-e (e = 0..6) and 0; a
 * one-sided column (NONNEG_LAST, NONNEG_HALF) to the largest of them not
 * above the value, so its residual stays >= 0.  DENSE too (the DNN's MLP
 * after the warm-up): one bit moves a value by at most its chunk's mean a
 * message, so a weight every step pushes the same way winds its residual
 * up.  Format version 2. */
#define UPDATE_F_LOG4 0x20u
#define UPDATE_LOG4_ZERO 7u /* e of a 0 */
/* Sparse: the keys in a Golomb-Rice code, not varints (model/update_keys.c:
 * u8 r, the first key as a u64, then each gap - 1 as (gap - 1) >> r in
 * unary and its low r bits; about log2(mean gap) + 1.5 bits a key, 6.1
 * bytes at 100k keys against 7.0).  The encoder sets it when that is the
 * shorter coding.  Not with DENSE.  Format version 2. */
#define UPDATE_F_RICE 0x40u
#define UPDATE_F_ALL (UPDATE_F_EXACT | UPDATE_F_DENSE | UPDATE_F_NONNEG_LAST | UPDATE_F_NONNEG_HALF | \
                      UPDATE_F_PART | UPDATE_F_LOG4 | UPDATE_F_RICE)

typedef enum update_errc {
    UPDATE_OK = 0,
    UPDATE_E_SIZE,     /* buffer shorter than the header, or than the header says */
    UPDATE_E_MAGIC,    /* not "TLUP" */
    UPDATE_E_VERSION,  /* a format version this build does not read */
    UPDATE_E_FLAGS,    /* unknown flag bits, or a reserved field not zero */
    UPDATE_E_LIMIT,    /* K, chunk, count or name length out of range */
    UPDATE_E_LENGTH,   /* body length disagrees with count, K and chunk */
    UPDATE_E_CHECKSUM, /* XXH3 mismatch */
    UPDATE_E_NAME,     /* model name not printable ASCII */
    UPDATE_E_KEYS,     /* a varint or Rice code runs past its section or past 64 bits */
    UPDATE_E_ORDER,    /* keys not strictly ascending */
    UPDATE_E_SCALE,    /* a scale NaN, infinite or negative */
    UPDATE_E_VALUE,    /* an exact value NaN or infinite */
    UPDATE_E_PADDING,  /* sign padding bits not zero */
} update_errc_t;

typedef struct update_error {
    update_errc_t code;
    size_t offset;  /* byte offset of the bad field in the message */
    char msg[256];  /* one sentence: the field, the offset, what was wrong */
} update_error_t;

const char *update_errc_name(update_errc_t code);

/* ---------------------------------------------------------------- sparse */

typedef struct update_acc update_acc_t; /* opaque */

typedef struct update_acc_config {
    uint32_t k;          /* K: additive values per key, 1..UPDATE_MAX_K */
    uint32_t max_keys;   /* keys held at most (memory ~60 + 4K B a key, plus 1 MB) */
    uint64_t producer;   /* this replica's id, in every message */
    uint64_t first_seq;  /* sequence of the first message (a restart resumes here) */
    uint32_t chunk;      /* C: values per scale in 1-bit messages, 1..65535 */
    const char *model;   /* model name, 1..UPDATE_NAME_MAX printable ASCII (copied) */
} update_acc_config_t;

/* Create an accumulator; all memory is allocated here, none by add/encode.
 * Returns 0, -EINVAL (a config field out of range) or -ENOMEM. */
int update_acc_create(update_acc_t **out, const update_acc_config_t *cfg);
void update_acc_destroy(update_acc_t *acc);

/* Add K increments to key's residual (inserting the key).  Returns 0;
 * -EINVAL when an increment, or the new sum, is NaN or infinite (nothing
 * added: one bad sample must not poison every replica); -ENOSPC when the key is new and
 * the accumulator holds max_keys keys: nothing was added, the caller
 * flushes (update_acc_encode with UPDATE_F_EXACT and select_count =
 * UINT32_MAX empties the map) and adds again.  Never allocates. */
int update_acc_add(update_acc_t *acc, uint64_t key, const float *inc);

uint32_t update_acc_count(const update_acc_t *acc);  /* keys held */
uint64_t update_acc_next_seq(const update_acc_t *acc);
/* The sequence the next encode writes (one producer alternating two
 * accumulators keeps one sequence across them). */
void update_acc_set_next_seq(update_acc_t *acc, uint64_t seq);
/* Drops every key and residual (the model's version changed: residuals made
 * on the old one mean nothing on the new).  Never allocates. */
void update_acc_clear(update_acc_t *acc);
/* key's residual (K floats, valid until the next add/encode), NULL when absent. */
const float *update_acc_get(const update_acc_t *acc, uint64_t key);
/* fn(ctx, key, residual) for every key held, in no order; a nonzero return stops. */
int update_acc_foreach(const update_acc_t *acc, int (*fn)(void *ctx, uint64_t key, const float *vals),
                       void *ctx);
/* Every key held into keys[0..n) and its K residuals into vals[0..n*K), in
 * update_acc_foreach's order; returns n (update_acc_count), which the caller
 * sized both for.  Two copies of the dense arrays: a snapshot of a million
 * keys in a few ms.  Never allocates. */
uint32_t update_acc_copy(const update_acc_t *acc, uint64_t *keys, float *vals);

/* Keys leave the map only when their residual is exactly 0: always after an
 * exact message, seldom after a 1-bit one (a sent key keeps its quantization
 * error).  So in 1-bit mode the map fills with keys of small residuals; the
 * caller bounds it, e.g. when update_acc_count passes ~90% of max_keys, by
 * sending that interval's message exact (UPDATE_F_EXACT with the same
 * selection, or UINT32_MAX to empty the map), and on -ENOSPC at once. */
typedef struct update_encode_opts {
    uint32_t flags;          /* 0 (1-bit), UPDATE_F_NONNEG_LAST or _HALF (1-bit), or UPDATE_F_EXACT */
    uint32_t select_count;   /* keys to send at most; UINT32_MAX = all; 0 = use select_fraction */
    float select_fraction;   /* with select_count 0: ceil(fraction * keys held), 0..1 */
    uint64_t base_version;   /* the model version the updates were made on */
} update_encode_opts_t;

/* Bytes update_acc_encode may need for the keys held now (an upper bound). */
size_t update_acc_encode_bound(const update_acc_t *acc, const update_encode_opts_t *opts);

/* Encode one message of the top keys by magnitude into buf[0..cap) and
 * subtract what it carries from the residuals (keys left at exactly 0 leave
 * the map).  Magnitude of a key: sum over columns of |v_j| / mean_j, mean_j
 * the mean |v_j| over the keys held, so that a column of large values (FTRL's
 * n) does not decide alone.  The message's sequence is next_seq, which then
 * grows by one.  Returns the message length; -ENOBUFS when cap is under
 * update_acc_encode_bound (nothing changed), -EINVAL for bad opts.  Time
 * O(keys held + k); never allocates. */
long update_acc_encode(update_acc_t *acc, const update_encode_opts_t *opts, uint8_t *buf, size_t cap);

/* ----------------------------------------------------------------- dense */

typedef struct update_dense update_dense_t; /* opaque */

/* An encoder of n-float vectors, chunk C, with its error vector (zero).
 * producer, first_seq and model as for the accumulator. */
int update_dense_create(update_dense_t **out, uint32_t n, uint32_t chunk, uint64_t producer,
                        uint64_t first_seq, const char *model);
void update_dense_destroy(update_dense_t *d);
size_t update_dense_bound(const update_dense_t *d, uint32_t flags);  /* exact message size */
/* The size of a message carrying count of the n values (a part when count < n). */
size_t update_dense_part_bound(const update_dense_t *d, uint32_t count, uint32_t flags);
/* Encode v (n floats).  1 bit (flags 0) or 4 bits (UPDATE_F_LOG4): q =
 * quantize(v + error), error = (v + error) - q, q sent.  UPDATE_F_EXACT: v
 * sent as is, the error vector untouched.  Returns the length, -ENOBUFS,
 * or -EINVAL (non-finite v, other flags). */
long update_dense_encode(update_dense_t *d, const float *v, uint32_t flags, uint64_t base_version,
                         uint8_t *buf, size_t cap);
/* Encode v[offset, offset + count) of the n floats as one message, a part
 * (UPDATE_F_PART) unless it is the whole vector; the error feedback as
 * update_dense_encode's, on that range only.  -EINVAL also for a range
 * outside 0..n or empty. */
long update_dense_encode_part(update_dense_t *d, const float *v, uint32_t offset, uint32_t count,
                              uint32_t flags, uint64_t base_version, uint8_t *buf, size_t cap);
const float *update_dense_error(const update_dense_t *d);  /* n floats */
uint32_t update_dense_chunk(const update_dense_t *d);      /* values per scale */
void update_dense_set_next_seq(update_dense_t *d, uint64_t seq); /* the next message's */
void update_dense_clear_error(update_dense_t *d); /* the error vector back to 0 */
void update_dense_set_error(update_dense_t *d, const float *err); /* n floats (a restart's) */

/* ---------------------------------------------------------------- decode */

/* A verified message: header fields, and pointers into the caller's buffer
 * (which must outlive it).  Nothing is allocated. */
typedef struct update_msg {
    uint32_t flags, count, k, chunk;
    uint64_t producer, seq, base_version;
    const char *model;       /* not NUL-terminated: model_len bytes */
    uint32_t model_len;
    const uint8_t *keys;     /* varint section (NULL if DENSE) */
    uint32_t dense_total;    /* DENSE: the vector's length (count unless a PART) */
    uint32_t dense_offset;   /* DENSE: where the message's values start (0 unless a PART) */
    const uint8_t *payload;  /* scales then signs, or exact values */
    const uint8_t *end;      /* the checksum */
} update_msg_t;

/* Verify every field of buf[0..len) (header, limits, lengths, checksum,
 * keys, scales or values, padding) without reading past len.  Returns 0, or
 * -EBADMSG with *err filled (err may be NULL). */
int update_msg_decode(const uint8_t *buf, size_t len, update_msg_t *msg, update_error_t *err);

/* Call fn(ctx, key, vals) for each key of a decoded message in ascending
 * order, vals its K decoded floats (valid during the call).  A nonzero return
 * stops and is returned; 0 after the last key.  No allocation (vals on the
 * stack). */
int update_msg_foreach(const update_msg_t *msg, int (*fn)(void *ctx, uint64_t key, const float *vals),
                       void *ctx);

/* Decode a DENSE message of a vector of n floats into out[dense_offset,
 * dense_offset + count) (out holds n; the rest untouched): -EINVAL unless
 * it is dense with dense_total == n. */
int update_msg_dense(const update_msg_t *msg, float *out, uint32_t n);

/* The length of the message at buf[0..len) as its header says (48 + name +
 * body + checksum), for walking messages laid end to end; 0 when len does
 * not hold a header or the length passes len.  Decode it to trust it. */
size_t update_msg_span(const uint8_t *buf, size_t len);

#endif
