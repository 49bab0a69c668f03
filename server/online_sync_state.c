/*
 * online_sync_state.c — SYNC_STATE, the side file of an online export in
 * partitioned bus mode (online_sync.c: EXPORTS has the cut and the restart
 * that reads it): written into the version's temporary directory before its
 * MANIFEST, as TRAIN_STATE_FILE, so version and file appear together.
 *
 * THE FILE (little-endian), read back as untrusted input:
 *
 *   0          8        16      24         32         40   44       48       56
 *   +----------+--------+-------+----------+----------+----+--------+--------+
 *   |"TLSYNCS1"| version| base  | producer | own_last | k  | npeers | nkeys  |
 *   +----------+--------+-------+----------+----------+----+--------+--------+
 *   | npeers x (id u64, last_seq u64) | nkeys x (key u64, k x f32) | XXH3_64 |
 *   +---------------------------------+----------------------------+---------+
 *
 *   version   the export it belongs to (a copied file names another)
 *   base      the lineage's first version: what the messages carry as
 *             base_version (own exports do not change it)
 *   producer  this replica's id; own_last its last published sequence
 *   peers     per peer producer, its last update applied into the values
 *             (a row message or a DENSE one: they share the sequence)
 *   residual  what the accumulators held, learned here and not yet sent (a
 *             key may come twice, once per accumulator: the values add)
 *   XXH3_64   of every byte before it
 *
 * A DNN whose MLP learns under 1-bit Adam (online_sync_dense.c) writes
 * "TLSYNCS2": the same fields, 32 more header bytes, and its MLP section
 * between the residual and the checksum:
 *
 *   56        60       64      72       80       88
 *   +---------+--------+-------+--------+--------+
 *   | dense_n | warmup | steps | b1_pow | b2_pow |   (u32, u32, u64, f64, f64)
 *   +---------+--------+-------+--------+--------+
 *   ... residual | 5 x dense_n f32: x | m | v | pending | error | XXH3_64
 *
 *   x         the trainer's MLP at the cut (its own steps below the log
 *             position, every message applied up to the peers' positions)
 *   m, v      1-bit Adam's moments; warmup, steps, b1_pow, b2_pow its
 *             warm-up length, local steps and bias-correction powers
 *   pending   the local delta not yet published, error the sender's error
 *             vector: together what was learned here and not yet sent
 *
 * One state has one encoding: "TLSYNCS1" without an MLP, "TLSYNCS2" with
 * one (dense_n >= 1; a TLSYNCS2 of none is refused).
 *
 * The parse checks the magic, every count against its bound and the exact
 * size, the checksum, k even in 2..SYNC_STATE_K_MAX, the peers' ids distinct
 * and not the producer's (0 may be one: the consumer follows any id), sequences in order (own_last and a peer's last below
 * UINT64_MAX), every value finite; for the MLP: dense_n in
 * 1..SYNC_STATE_DENSE_MAX, warmup >= 1, the powers in [0, 1] (both 1
 * before the first step), v >= 0; a refusal says which.
 *
 * THREAD SAFETY: none held; the caller owns the struct.
 */
#define _GNU_SOURCE
#include "online_sync_state.h"
#include "file_replace.h"
#include "le_bytes.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define MAGIC "TLSYNCS1"
#define MAGIC_DENSE "TLSYNCS2"
#define HEAD_BYTES 56u
#define HEAD_DENSE_BYTES 88u
#define PEER_BYTES 16u

static size_t head_bytes(const sync_state_t *st)
{
    return st->dense_n ? HEAD_DENSE_BYTES : HEAD_BYTES;
}

size_t sync_state_size(const sync_state_t *st)
{
    return head_bytes(st) + (size_t)st->npeers * PEER_BYTES +
           (size_t)st->nkeys * (8 + 4 * (size_t)st->k) +
           (size_t)st->dense_n * SYNC_DENSE_ARRAYS * 4 + 8;
}

static void put_f32(uint8_t *p, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    put_le32(p, u);
}

static float get_f32(const uint8_t *p)
{
    uint32_t u = get_le32(p);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void put_f64(uint8_t *p, double d)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    put_le64(p, u);
}

static double get_f64(const uint8_t *p)
{
    uint64_t u = get_le64(p);
    double d;
    memcpy(&d, &u, 8);
    return d;
}

void sync_state_encode(const sync_state_t *st, uint8_t *buf)
{
    memcpy(buf, st->dense_n ? MAGIC_DENSE : MAGIC, 8);
    put_le64(buf + 8, st->version);
    put_le64(buf + 16, st->base);
    put_le64(buf + 24, st->producer);
    put_le64(buf + 32, st->own_last);
    put_le32(buf + 40, st->k);
    put_le32(buf + 44, st->npeers);
    put_le64(buf + 48, st->nkeys);
    if (st->dense_n) {
        put_le32(buf + 56, st->dense_n);
        put_le32(buf + 60, st->dense_warmup);
        put_le64(buf + 64, st->dense_steps);
        put_f64(buf + 72, st->dense_b1_pow);
        put_f64(buf + 80, st->dense_b2_pow);
    }
    uint8_t *p = buf + head_bytes(st);
    for (uint32_t i = 0; i < st->npeers; i++, p += PEER_BYTES) {
        put_le64(p, st->peers[i].id);
        put_le64(p + 8, st->peers[i].last_seq);
    }
    for (uint64_t i = 0; i < st->nkeys; i++) {
        put_le64(p, st->keys[i]);
        p += 8;
        for (uint32_t j = 0; j < st->k; j++, p += 4)
            put_f32(p, st->vals[i * st->k + j]);
    }
    for (size_t i = 0; i < (size_t)st->dense_n * SYNC_DENSE_ARRAYS; i++, p += 4)
        put_f32(p, st->dense[i]);
    put_le64(p, XXH3_64bits(buf, (size_t)(p - buf)));
}

void sync_state_free(sync_state_t *st)
{
    if (!st)
        return;
    free(st->keys);
    free(st->vals);
    free(st->dense);
    st->keys = NULL;
    st->vals = NULL;
    st->dense = NULL;
    st->nkeys = 0;
    st->keys_cap = 0;
    st->npeers = 0;
    st->dense_n = 0;
}

static const char *const dense_names[SYNC_DENSE_ARRAYS] = {"x", "m", "v", "pending", "error"};

/* The MLP section's header fields (st->dense_n >= 1): 0, or -EINVAL with why. */
static int dense_head_check(const sync_state_t *st, char *why, size_t why_len)
{
    if (st->dense_n > SYNC_STATE_DENSE_MAX) {
        snprintf(why, why_len, "an MLP of %u parameters at offset 56: at most %u", st->dense_n,
                 SYNC_STATE_DENSE_MAX);
        return -EINVAL;
    }
    bool pows = st->dense_b1_pow >= 0 && st->dense_b1_pow <= 1 && st->dense_b2_pow >= 0 &&
                st->dense_b2_pow <= 1; /* false for a NaN too */
    if (!pows || st->dense_warmup == 0 ||
        (st->dense_steps == 0 && (st->dense_b1_pow != 1 || st->dense_b2_pow != 1))) {
        snprintf(why, why_len, "the MLP's 1-bit Adam at offset 60: warm-up %u, %" PRIu64
                 " steps, powers %g and %g: not a state it reaches", st->dense_warmup,
                 st->dense_steps, st->dense_b1_pow, st->dense_b2_pow);
        return -EINVAL;
    }
    return 0;
}

int sync_state_parse(const uint8_t *buf, size_t len, sync_state_t *out, char *why, size_t why_len)
{
    memset(out, 0, sizeof *out);
    bool dense = len >= HEAD_DENSE_BYTES + 8 && memcmp(buf, MAGIC_DENSE, 8) == 0;
    if (!dense && (len < HEAD_BYTES + 8 || memcmp(buf, MAGIC, 8) != 0)) {
        snprintf(why, why_len, "%zu bytes without the " MAGIC " or " MAGIC_DENSE " header", len);
        return -EINVAL;
    }
    uint64_t sum = get_le64(buf + len - 8);
    if (sum != XXH3_64bits(buf, len - 8)) {
        snprintf(why, why_len, "its checksum does not match its %zu bytes (damaged or cut)", len);
        return -EINVAL;
    }
    sync_state_t st = {.version = get_le64(buf + 8), .base = get_le64(buf + 16),
                       .producer = get_le64(buf + 24), .own_last = get_le64(buf + 32),
                       .k = get_le32(buf + 40), .npeers = get_le32(buf + 44), .nkeys = get_le64(buf + 48)};
    if (dense) {
        st.dense_n = get_le32(buf + 56);
        st.dense_warmup = get_le32(buf + 60);
        st.dense_steps = get_le64(buf + 64);
        st.dense_b1_pow = get_f64(buf + 72);
        st.dense_b2_pow = get_f64(buf + 80);
        if (st.dense_n == 0) {
            snprintf(why, why_len, MAGIC_DENSE " with an MLP of 0 parameters at offset 56 (a "
                     "state without one is " MAGIC ")");
            return -EINVAL;
        }
        if (dense_head_check(&st, why, why_len) != 0)
            return -EINVAL;
    }
    if (st.k < 2 || st.k > SYNC_STATE_K_MAX || st.k % 2) {
        snprintf(why, why_len, "k %u at offset 40: not an even count of 2..%u values a key",
                 st.k, SYNC_STATE_K_MAX);
        return -EINVAL;
    }
    if (st.npeers > SYNC_STATE_PEERS_MAX) {
        snprintf(why, why_len, "%u peers at offset 44: at most %u", st.npeers,
                 SYNC_STATE_PEERS_MAX);
        return -EINVAL;
    }
    if (st.nkeys > SYNC_STATE_KEYS_MAX) {
        snprintf(why, why_len, "%" PRIu64 " residual keys at offset 48: at most %u", st.nkeys,
                 SYNC_STATE_KEYS_MAX);
        return -EINVAL;
    }
    size_t want = sync_state_size(&st); /* bounded above: no overflow */
    if (len != want) {
        snprintf(why, why_len, "%zu bytes where its counts (%u peers, %" PRIu64 " keys of %u "
                 "values, an MLP of %u) make %zu", len, st.npeers, st.nkeys, st.k, st.dense_n,
                 want);
        return -EINVAL;
    }
    if (st.version == 0 || st.base == 0 || st.base > st.version || st.producer == 0 ||
        st.own_last == UINT64_MAX) {
        snprintf(why, why_len, "version %" PRIu64 ", base %" PRIu64 ", producer %016" PRIx64
                 ", own sequence %" PRIu64 ": not a replica's state", st.version, st.base,
                 st.producer, st.own_last);
        return -EINVAL;
    }
    const uint8_t *p = buf + head_bytes(&st);
    for (uint32_t i = 0; i < st.npeers; i++, p += PEER_BYTES) {
        st.peers[i] = (sync_state_peer_t){get_le64(p), get_le64(p + 8)};
        bool dup = st.peers[i].id == st.producer || st.peers[i].last_seq == 0 ||
                   st.peers[i].last_seq == UINT64_MAX; /* id 0: a producer the stream had */
        for (uint32_t j = 0; j < i && !dup; j++)
            dup = st.peers[j].id == st.peers[i].id;
        if (dup) {
            snprintf(why, why_len, "peer %u at offset %zu (producer %016" PRIx64 ", sequence %"
                     PRIu64 "): ours, repeated or out of range", i, (size_t)(p - buf),
                     st.peers[i].id, st.peers[i].last_seq);
            return -EINVAL;
        }
    }
    if (st.nkeys) {
        st.keys = malloc((size_t)st.nkeys * sizeof *st.keys);
        st.vals = malloc((size_t)st.nkeys * st.k * sizeof *st.vals);
    }
    if (st.dense_n)
        st.dense = malloc((size_t)st.dense_n * SYNC_DENSE_ARRAYS * sizeof *st.dense);
    if ((st.nkeys && (!st.keys || !st.vals)) || (st.dense_n && !st.dense)) {
        snprintf(why, why_len, "no memory for %" PRIu64 " residual keys and an MLP of %u",
                 st.nkeys, st.dense_n); /* before the free zeroes the counts */
        sync_state_free(&st);
        return -ENOMEM;
    }
    for (uint64_t i = 0; i < st.nkeys; i++) {
        st.keys[i] = get_le64(p);
        p += 8;
        for (uint32_t j = 0; j < st.k; j++, p += 4) {
            float f = get_f32(p);
            if (!isfinite(f)) {
                snprintf(why, why_len, "residual key %" PRIu64 " (offset %zu): value %u is not "
                         "finite", st.keys[i], (size_t)(p - buf), j);
                sync_state_free(&st);
                return -EINVAL;
            }
            st.vals[i * st.k + j] = f;
        }
    }
    for (uint32_t a = 0; a < (st.dense_n ? SYNC_DENSE_ARRAYS : 0); a++) {
        float *arr = sync_state_dense(&st, (enum sync_state_dense_array)a);
        for (uint32_t i = 0; i < st.dense_n; i++, p += 4) {
            float f = get_f32(p);
            if (!isfinite(f) || (a == SYNC_DENSE_V && f < 0)) {
                snprintf(why, why_len, "the MLP's %s[%u] (offset %zu): %g is not %s",
                         dense_names[a], i, (size_t)(p - buf), (double)f,
                         isfinite(f) ? "a variance (below 0)" : "finite");
                sync_state_free(&st);
                return -EINVAL;
            }
            arr[i] = f;
        }
    }
    *out = st;
    return 0;
}

int sync_state_write_at(int dirfd, const sync_state_t *st)
{
    size_t len = sync_state_size(st);
    uint8_t *buf = malloc(len);
    if (!buf)
        return -ENOMEM;
    sync_state_encode(st, buf);
    int rc = file_replace_at(dirfd, SYNC_STATE_FILE, buf, len);
    free(buf);
    return rc;
}

int sync_state_read(const char *path, sync_state_t *out, char *why, size_t why_len)
{
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        snprintf(why, why_len, "%s", e == ENOENT ? "missing" : strerror(e));
        return -e;
    }
    struct stat sb;
    sync_state_t bound = {.k = SYNC_STATE_K_MAX, .npeers = SYNC_STATE_PEERS_MAX,
                          .nkeys = SYNC_STATE_KEYS_MAX, .dense_n = SYNC_STATE_DENSE_MAX};
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        snprintf(why, why_len, "fstat: %s", strerror(e));
        close(fd);
        return -e;
    }
    if (sb.st_size < 0 || (uint64_t)sb.st_size > sync_state_size(&bound)) {
        snprintf(why, why_len, "%lld bytes: not a file of its bound", (long long)sb.st_size);
        close(fd);
        return -EINVAL;
    }
    size_t len = (size_t)sb.st_size;
    uint8_t *buf = malloc(len ? len : 1);
    int rc = buf ? 0 : -ENOMEM;
    for (size_t off = 0; rc == 0 && off < len;) {
        ssize_t r = read(fd, buf + off, len - off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            rc = r < 0 ? -errno : -EINVAL;
            snprintf(why, why_len, "read: %s", r < 0 ? strerror(errno) : "shorter than its size");
            break;
        }
        off += (size_t)r;
    }
    close(fd);
    if (rc == 0)
        rc = sync_state_parse(buf, len, out, why, why_len);
    else if (rc == -ENOMEM)
        snprintf(why, why_len, "no memory for %zu bytes", len);
    free(buf);
    return rc;
}
