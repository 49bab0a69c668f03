/*
 * delta_write.c — the delta writer (delta.h): store_delta_begin, put, del,
 * commit, abort.
 *
 * RECORDING: each put or del appends one op to its shard's arena:
 *
 *   +---------+-------------------------+------------------------+
 *   | key u64 | seq << 1 | is_delete u64| value: K x f32/f16     |
 *   +---------+-------------------------+------------------------+
 *
 * so memory grows with the delta (16 + value bytes per call), never with
 * the model.  seq orders calls; commit sorts each shard's ops by (key, seq)
 * and keeps the last op of each key: the last call wins, which lets a
 * trainer stream changes as they happen instead of deduplicating itself.
 * Values are converted to the layout's dtype at put and refused when not
 * finite there, so everything recorded is writable.
 *
 * COMMIT (every step below is a kill point for store__delta_kill_at):
 *   1. mkdir "<parent>/.tmp-<name>-<pid>"          (readers skip .tmp-*)
 *   2. per shard: write delta-NNNNN.tld (header, upserts, deletes) through
 *      a buffer, hashing as it drains; fsync; close
 *   3. write MANIFEST (last file), fsync; fsync the temporary directory
 *   4. renameat2(tmp, dir, RENAME_NOREPLACE)       (the version appears whole)
 *   5. fsync the parent directory                  (the rename is durable)
 * A failure before 4 removes the temporary directory; a kill leaves it, and
 * no version.  After 4 the version is whole even if 5 never runs.
 *
 * THREAD SAFETY: one writer per thread (delta.h).  store__delta_kill_at is
 * a test hook read without synchronisation, set before the writer starts.
 */
#define _GNU_SOURCE
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */

#include "delta_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#define WRITE_BUF_BYTES (1u << 20)
#define OP_HEAD 16u /* key + seq/flag */

int store__delta_kill_at;


struct op_arena {
    uint8_t *p;   /* ops, op_bytes apart */
    size_t n;     /* ops recorded */
    size_t cap;   /* ops that fit */
};

struct store_delta_writer {
    char dir[PATH_MAX];       /* final directory */
    char parent[PATH_MAX];    /* its parent directory */
    char name[NAME_MAX + 1];  /* its last component */
    manifest_t m;             /* meta, layout, kind DELTA; shards filled at commit */
    uint32_t vbytes;          /* value bytes */
    size_t op_bytes;          /* OP_HEAD + vbytes */
    uint64_t seq;             /* calls so far */
    struct op_arena *ops;     /* one per shard */
    int kill_step;            /* commit steps so far (test hook) */
    store_delta_side_fn side; /* NULL = none: the producer's own file (store_delta_side_file) */
    void *side_ctx;
    char side_what[64];       /* names it in an error */
};

static void kill_point(store_delta_writer_t *w)
{
    if (store__delta_kill_at > 0 && ++w->kill_step == store__delta_kill_at)
        raise(SIGKILL);
}

/* ---- begin / put / del / abort ------------------------------------------ */

static int check_name(const char *name)
{
    size_t n = strnlen(name, 64);
    if (n == 0 || n == 64 || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return -1;
    for (size_t j = 0; j < n; j++) {
        unsigned char c = (unsigned char)name[j];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return -1;
    }
    return 0;
}

int store_delta_begin(const char *dir, const store_delta_layout_t *parent,
                      uint64_t parent_version, uint64_t version, const char *producer,
                      store_delta_writer_t **out, store_error_t *err)
{
    store_error_t scratch;
    if (!err)
        err = &scratch;
    store__snap_err_clear(err);
    if (!dir || !dir[0] || !parent || !out) {
        store__snap_fail(err, STORE_E_INVALID, "", -1, "store_delta_begin: a NULL argument");
        return store_errc_errno(err->code);
    }
    *out = NULL;
    const char *bad = NULL;
    if (check_name(parent->model_name) != 0)
        bad = "model_name is not 1..63 bytes of [A-Za-z0-9_.-]";
    else if ((unsigned)parent->model_kind > STORE_MODEL_DNN)
        bad = "model_kind is not LR, FM, FFM or DNN";
    else if (parent->value_floats < 1 || parent->value_floats > STORE_MAX_VALUE_FLOATS)
        bad = "value_floats is not 1..STORE_MAX_VALUE_FLOATS";
    else if (parent->dtype != STORE_DTYPE_F32 && parent->dtype != STORE_DTYPE_F16)
        bad = "dtype is not F32 or F16";
    else if (parent->shards < 1 || parent->shards > STORE_MAX_SHARDS ||
             (parent->shards & (parent->shards - 1)) != 0)
        bad = "shards is not a power of two in 1..STORE_MAX_SHARDS";
    else if (version == 0 || parent_version == 0 || version == parent_version)
        bad = "version and parent_version must be > 0 and differ";
    else if (producer && strnlen(producer, STORE_PRODUCER_MAX) == STORE_PRODUCER_MAX)
        bad = "producer is over 63 bytes";
    if (!bad && producer)
        for (const char *c = producer; *c; c++)
            if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
                bad = "producer has a byte outside printable ASCII";
    size_t dlen = strlen(dir);
    while (!bad && dlen > 1 && dir[dlen - 1] == '/')
        dlen--;
    if (!bad && dlen >= PATH_MAX - 32)
        bad = "dir is too long";
    if (bad) {
        store__snap_fail(err, STORE_E_INVALID, "", -1, "store_delta_begin: %s", bad);
        return store_errc_errno(err->code);
    }
    store_delta_writer_t *w = calloc(1, sizeof *w);
    struct op_arena *ops = calloc(parent->shards, sizeof *ops);
    manifest_shard_t *shards = calloc(parent->shards, sizeof *shards);
    if (!w || !ops || !shards) {
        free(w);
        free(ops);
        free(shards);
        store__snap_fail(err, STORE_E_NOMEM, "", -1, "store_delta_begin: out of memory");
        return store_errc_errno(err->code);
    }
    memcpy(w->dir, dir, dlen);
    w->dir[dlen] = '\0';
    const char *slash = strrchr(w->dir, '/');
    const char *base = slash ? slash + 1 : w->dir;
    if (slash == w->dir)
        snprintf(w->parent, sizeof w->parent, "/");
    else if (slash)
        snprintf(w->parent, sizeof w->parent, "%.*s", (int)(slash - w->dir), w->dir);
    else
        snprintf(w->parent, sizeof w->parent, ".");
    size_t blen = strlen(base);
    if (blen == 0 || base[0] == '.' || blen > NAME_MAX - 32) {
        free(w);
        free(ops);
        free(shards);
        store__snap_fail(err, STORE_E_INVALID, "", -1,
                         "store_delta_begin: %s: the last component must be a plain name "
                         "(not starting with '.')",
                         dir);
        return store_errc_errno(err->code);
    }
    memcpy(w->name, base, blen + 1);
    struct stat st;
    if (lstat(w->dir, &st) == 0) {
        free(w);
        free(ops);
        free(shards);
        store__snap_fail(err, STORE_E_EXISTS, "", -1, "%s already exists", dir);
        return store_errc_errno(err->code);
    }
    manifest_t *m = &w->m;
    m->format_version = MANIFEST_FORMAT_VERSION_DELTA;
    m->kind = MANIFEST_KIND_DELTA;
    memcpy(m->meta.model_name, parent->model_name, sizeof m->meta.model_name);
    m->meta.model_kind = parent->model_kind;
    m->meta.version = version;
    m->meta.parent_version = parent_version;
    m->value_floats = parent->value_floats;
    m->dtype = parent->dtype;
    m->shard_count = parent->shards;
    m->shards = shards;
    m->hash_seed = parent->hash_seed;
    if (producer)
        snprintf(m->producer, sizeof m->producer, "%s", producer);
    w->vbytes = parent->value_floats * (parent->dtype == STORE_DTYPE_F16 ? 2u : 4u);
    w->op_bytes = OP_HEAD + w->vbytes;
    w->ops = ops;
    *out = w;
    return 0;
}

/* Appends an op to key's shard; returns the op's value pointer or NULL. */
static uint8_t *append_op(store_delta_writer_t *w, uint64_t key, int is_del)
{
    struct op_arena *a = &w->ops[store__shard_of_key(key, w->m.shard_count)];
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        if (cap > SIZE_MAX / w->op_bytes)
            return NULL;
        uint8_t *p = realloc(a->p, cap * w->op_bytes);
        if (!p)
            return NULL;
        a->p = p;
        a->cap = cap;
    }
    uint8_t *op = a->p + a->n++ * w->op_bytes;
    memcpy(op, &key, 8);
    uint64_t tag = (w->seq++ << 1) | (uint64_t)(is_del != 0);
    memcpy(op + 8, &tag, 8);
    return op + OP_HEAD;
}

int store_delta_put(store_delta_writer_t *w, uint64_t key, const float *value)
{
    const uint32_t K = w->m.value_floats;
    if (!value)
        return -EINVAL;
    for (uint32_t j = 0; j < K; j++)
        if (!isfinite(value[j]))
            return -EINVAL;
    if (w->m.dtype == STORE_DTYPE_F16)
        for (uint32_t j = 0; j < K; j++)
            if ((store_f32_to_f16(value[j]) & 0x7c00u) == 0x7c00u)
                return -EINVAL; /* overflows fp16 */
    uint8_t *v = append_op(w, key, 0);
    if (!v)
        return -ENOMEM;
    for (uint32_t j = 0; j < K; j++) {
        if (w->m.dtype == STORE_DTYPE_F16) {
            uint16_t h = htole16(store_f32_to_f16(value[j]));
            memcpy(v + 2 * j, &h, 2);
        } else {
            uint32_t b;
            memcpy(&b, &value[j], 4);
            put_le32(v + 4 * j, b);
        }
    }
    return 0;
}

int store_delta_del(store_delta_writer_t *w, uint64_t key)
{
    uint8_t *v = append_op(w, key, 1);
    if (!v)
        return -ENOMEM;
    memset(v, 0, w->vbytes);
    return 0;
}

void store_delta_abort(store_delta_writer_t *w)
{
    if (!w)
        return;
    for (uint32_t i = 0; i < w->m.shard_count; i++)
        free(w->ops[i].p);
    free(w->ops);
    store__manifest_free(&w->m);
    free(w);
}

/* ---- commit ------------------------------------------------------------- */

static int cmp_op(const void *a, const void *b)
{
    uint64_t ka, kb, sa, sb;
    memcpy(&ka, a, 8);
    memcpy(&kb, b, 8);
    if (ka != kb)
        return ka < kb ? -1 : 1;
    memcpy(&sa, (const uint8_t *)a + 8, 8);
    memcpy(&sb, (const uint8_t *)b + 8, 8);
    return sa < sb ? -1 : sa > sb;
}

/* Sorts shard i's ops and compacts them in place to the last op per key,
 * ascending; sets the counts of upserts and deletes among them (the file
 * writer takes the upserts in one pass, the deletes in a second). */
static void settle_shard(store_delta_writer_t *w, uint32_t i, uint64_t *ups, uint64_t *dels)
{
    struct op_arena *a = &w->ops[i];
    const size_t ob = w->op_bytes;
    if (a->n > 1) /* a shard with no ops has no arena */
        qsort(a->p, a->n, ob, cmp_op);
    size_t keep = 0;
    for (size_t r = 0; r < a->n; r++) {
        uint64_t k, kn;
        memcpy(&k, a->p + r * ob, 8);
        if (r + 1 < a->n) {
            memcpy(&kn, a->p + (r + 1) * ob, 8);
            if (kn == k)
                continue; /* a later op on the same key wins */
        }
        if (keep != r)
            memcpy(a->p + keep * ob, a->p + r * ob, ob);
        keep++;
    }
    a->n = keep;
    uint64_t u = 0, d = 0;
    for (size_t r = 0; r < keep; r++) {
        uint64_t tag;
        memcpy(&tag, a->p + r * ob + 8, 8);
        if (tag & 1)
            d++;
        else
            u++;
    }
    *ups = u;
    *dels = d;
}

struct out_file {
    int fd;
    uint8_t *buf;
    size_t used;
    XXH3_state_t xxh;
    uint64_t bytes;
};

static int write_all(int fd, const uint8_t *p, size_t len)
{
    while (len > 0) {
        ssize_t r = write(fd, p, len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

static int out_flush(store_delta_writer_t *w, struct out_file *o)
{
    kill_point(w);
    XXH3_64bits_update(&o->xxh, o->buf, o->used);
    int rc = write_all(o->fd, o->buf, o->used);
    o->bytes += o->used;
    o->used = 0;
    return rc;
}

static int out_put(store_delta_writer_t *w, struct out_file *o, const void *p, size_t n)
{
    if (o->used + n > WRITE_BUF_BYTES) {
        int rc = out_flush(w, o);
        if (rc != 0)
            return rc;
    }
    memcpy(o->buf + o->used, p, n);
    o->used += n;
    return 0;
}

static int fsync_close(int fd)
{
    int rc = fsync(fd) == 0 ? 0 : -errno;
    if (close(fd) != 0 && rc == 0)
        rc = -errno;
    return rc;
}

/* Writes shard i's file into tmpfd.  0 or -errno. */
static int write_shard(store_delta_writer_t *w, int tmpfd, uint32_t i, uint8_t *buf)
{
    uint64_t ups, dels;
    settle_shard(w, i, &ups, &dels);
    manifest_shard_t *ms = &w->m.shards[i];
    ms->index = i;
    snprintf(ms->file, sizeof ms->file, DELTA_SHARD_NAME_FMT, i);
    ms->entries = ups;
    ms->deletes = dels;
    struct out_file o = {.buf = buf};
    o.fd = openat(tmpfd, ms->file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (o.fd < 0)
        return -errno;
    XXH3_INITSTATE(&o.xxh);
    XXH3_64bits_reset(&o.xxh);
    uint8_t head[SHARD_HEADER_BYTES];
    store__delta_header_encode(&w->m, i, ups, dels, head);
    int rc = out_put(w, &o, head, sizeof head);
    const struct op_arena *a = &w->ops[i];
    for (int pass = 0; pass < 2 && rc == 0; pass++) {
        for (size_t r = 0; r < a->n && rc == 0; r++) {
            const uint8_t *op = a->p + r * w->op_bytes;
            uint64_t key, tag;
            memcpy(&key, op, 8);
            memcpy(&tag, op + 8, 8);
            if ((int)(tag & 1) != pass)
                continue;
            uint8_t k8[8];
            put_le64(k8, key);
            rc = out_put(w, &o, k8, 8);
            if (rc == 0 && pass == 0)
                rc = out_put(w, &o, op + OP_HEAD, w->vbytes);
        }
    }
    if (rc == 0)
        rc = out_flush(w, &o);
    ms->bytes = o.bytes;
    ms->xxh3 = XXH3_64bits_digest(&o.xxh);
    if (rc == 0) {
        kill_point(w);
        return fsync_close(o.fd);
    }
    close(o.fd);
    return rc;
}

void store_delta_side_file(store_delta_writer_t *w, const char *what, store_delta_side_fn fn,
                           void *ctx)
{
    if (!w)
        return;
    w->side = fn;
    w->side_ctx = fn ? ctx : NULL;
    snprintf(w->side_what, sizeof w->side_what, "%s", fn && what ? what : "");
}

static int write_manifest(store_delta_writer_t *w, int tmpfd, store_error_t *err)
{
    uint8_t *mb = NULL;
    size_t mlen = 0;
    char why[400];
    int rc = store__manifest_encode(&w->m, &mb, &mlen, why, sizeof why);
    if (rc != 0) {
        store__snap_fail(err, rc == -ENOMEM ? STORE_E_NOMEM : STORE_E_INVALID,
                         MANIFEST_FILE_NAME, -1, "%s", unprefixed(why));
        return -1;
    }
    kill_point(w);
    int fd = openat(tmpfd, MANIFEST_FILE_NAME, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    rc = fd < 0 ? -errno : write_all(fd, mb, mlen);
    free(mb);
    if (rc == 0) {
        kill_point(w);
        rc = fsync_close(fd);
    } else if (fd >= 0) {
        close(fd);
    }
    if (rc != 0) {
        store__snap_fail(err, STORE_E_IO, MANIFEST_FILE_NAME, -1, "cannot write: %s",
                         ERRTEXT(-rc));
        return -1;
    }
    return 0;
}

int store_delta_commit(store_delta_writer_t *w, store_error_t *err)
{
    store_error_t scratch;
    if (!err)
        err = &scratch;
    store__snap_err_clear(err);
    if (!w) {
        store__snap_fail(err, STORE_E_INVALID, "", -1, "store_delta_commit: writer is NULL");
        return store_errc_errno(err->code);
    }
    char tmp[PATH_MAX];
    int tn = snprintf(tmp, sizeof tmp, "%.3800s/" DELTA_TMP_PREFIX "%.200s-%ld", w->parent,
                      w->name, (long)getpid());
    int tmpfd = -1, pfd = -1, made = 0;
    uint8_t *buf = tn > 0 && (size_t)tn < sizeof tmp ? malloc(WRITE_BUF_BYTES) : NULL;
    if (tn <= 0 || (size_t)tn >= sizeof tmp) {
        store__snap_fail(err, STORE_E_INVALID, "", -1, "%s: the temporary path is too long",
                         w->dir);
        goto fail;
    }
    if (!buf) {
        store__snap_fail(err, STORE_E_NOMEM, "", -1, "out of memory for the write buffer");
        goto fail;
    }
    w->m.meta.created_unix = (uint64_t)time(NULL);
    kill_point(w);
    if (mkdir(tmp, 0755) != 0) {
        int e = errno;
        if (e == EEXIST) {
            store__remove_tmp_dir(tmp); /* left by a killed writer that had our pid */
            e = mkdir(tmp, 0755) == 0 ? 0 : errno;
        }
        if (e != 0) {
            store__snap_fail(err, STORE_E_IO, "", -1, "%s: cannot create: %s", tmp, ERRTEXT(e));
            goto fail;
        }
    }
    made = 1;
    tmpfd = store__snap_open_dir(tmp, err);
    if (tmpfd < 0)
        goto fail;
    for (uint32_t i = 0; i < w->m.shard_count; i++) {
        int rc = write_shard(w, tmpfd, i, buf);
        if (rc != 0) {
            store__snap_fail(err, STORE_E_IO, w->m.shards[i].file, -1, "cannot write: %s",
                             ERRTEXT(-rc));
            goto fail;
        }
        free(w->ops[i].p); /* written: give the memory back as we go */
        w->ops[i].p = NULL;
        w->ops[i].n = w->ops[i].cap = 0;
    }
    if (w->side) {
        int rc = w->side(w->side_ctx, tmpfd);
        if (rc != 0) {
            store__snap_fail(err, STORE_E_IO, w->side_what, -1, "cannot write: %s", ERRTEXT(-rc));
            goto fail;
        }
    }
    if (write_manifest(w, tmpfd, err) != 0)
        goto fail;
    kill_point(w);
    if (fsync(tmpfd) != 0) {
        store__snap_fail(err, STORE_E_IO, "", -1, "%s: cannot fsync: %s", tmp, ERRTEXT(errno));
        goto fail;
    }
    kill_point(w);
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, w->dir, RENAME_NOREPLACE) != 0) {
        int e = errno;
        if (e == EEXIST || e == ENOTEMPTY)
            store__snap_fail(err, STORE_E_EXISTS, "", -1, "%s already exists", w->dir);
        else
            store__snap_fail(err, STORE_E_IO, "", -1, "cannot rename %s to %s: %s", tmp, w->dir,
                             ERRTEXT(e));
        goto fail;
    }
    made = 0;
    kill_point(w);
    pfd = open(w->parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (pfd < 0 || fsync(pfd) != 0) {
        /* the version is whole and visible; only its durability is in doubt */
        store__snap_fail(err, STORE_E_IO, "", -1, "%s: cannot fsync the parent directory: %s",
                         w->parent, ERRTEXT(errno));
        goto fail;
    }
    close(pfd);
    close(tmpfd);
    free(buf);
    store_delta_abort(w);
    return 0;
fail:
    if (pfd >= 0)
        close(pfd);
    if (tmpfd >= 0)
        close(tmpfd);
    if (made)
        store__remove_tmp_dir(tmp);
    free(buf);
    store_delta_abort(w);
    return store_errc_errno(err->code);
}
