/*
 * tlsnap.c — the snapshot tool: make, inspect and check store snapshots.
 *
 *   tlsnap gen    --keys N --out DIR [...]   synthetic model -> full snapshot
 *   tlsnap info   DIR                        print the manifest
 *   tlsnap verify DIR [--threads T]          full load (checksums, keys) + lookups
 *   tlsnap rewrite SRC DST [--threads T]     load SRC, write it again as DST
 *
 * gen makes a model that is the same for any thread count:
 *
 *   key(i)   = store_synthetic_key(i, seed)   i = 0..N-1 (store.h; a bijection)
 *   value(k) = K draws ~N(0, 0.1) from a PRNG seeded by (k, seed)
 *
 * mix64 (the splitmix64 finaliser: xor-shifts and odd multiplies) is a
 * bijection of 64-bit integers, so N distinct indices give N distinct keys
 * without a "seen" set.  A value is the sum of four 16-bit uniforms from one
 * splitmix64 draw (Irwin-Hall), centred and scaled: close enough to a normal
 * for a synthetic model, and one multiply-xorshift per float.
 *
 * Filling the store follows its write rule (one writer per shard): thread t
 * owns the shards s with s % T == t.  Every thread walks all N indices and
 * keeps the keys of its own shards — regenerating a key is a few ns, far
 * cheaper than handing keys between threads.  The fill then does what the
 * snapshot loader does, so that its figures and its table match a load: a
 * first walk counts keys per sub-table and reserves each exactly (the fill
 * never grows a table), a second buffers records in storage format per
 * shard and hands them to store_insert_entries() in chunks, which prefetches
 * across the chunk (one store_upsert per key would wait on two cache misses
 * per key: about 3x slower at 10M keys).
 *
 * info checks the MANIFEST with store_snapshot_read_meta(), then decodes it
 * again with manifest_decode() (store/'s internal API: tlsnap lives here) to
 * list K, dtype and the shard files; it reads no shard file.
 *
 * verify loads with store_snapshot_load() (which checks every checksum,
 * count and key), then re-reads every entry: it iterates each shard and looks
 * the keys up again in batches, comparing values bit for bit, so that the
 * read path and the iteration path of the table agree.
 *
 * rewrite loads SRC with store_snapshot_load_ex (params and dense arrays
 * included) and writes the same model, meta and extras with
 * store_snapshot_write_ex: the way to bring a snapshot written before the
 * MANIFEST carried a hash seed, or by a store sized for other than its
 * keys, to one that loads in bucket order (the fast path), or to check that
 * a snapshot survives a round trip.
 *
 * THREAD SAFETY: a command-line program.  gen's threads write disjoint shard
 * sets; verify's threads only read.  Exit status: 0 ok, 1 failure, 2 usage.
 */
#include "store/manifest.h"
#include "store/store.h"
#include "store/store_internal.h"
#include "store/synthetic.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef __cold
#define __cold __attribute__((__cold__))
#endif
#ifndef __noreturn
#define __noreturn __attribute__((noreturn))
#endif

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "gen writes records in the store's little-endian raw format with memcpy");

#define MAX_THREADS 1024
#define LOOKUP_BATCH 256
#define GEN_CHUNK 512 /* records buffered per shard before a bulk insert */

/* ---- small helpers ------------------------------------------------------ */

/* K values for key, ~N(0, 0.1): a pure function of (key, seed). */
static void gen_value(uint64_t key, uint64_t seed, uint32_t k, float *out)
{
    /* one 16-bit uniform: mean 32767.5, sd 65536/sqrt(12); the sum of four
     * has mean 131070 and sd 65536/sqrt(3) = 37837.23 */
    uint64_t st = key ^ store_mix64(seed ^ 0x5eedull);
    for (uint32_t j = 0; j < k; j++) {
        uint64_t r = store_splitmix64(&st);
        double s = (double)(r & 0xffff) + (double)((r >> 16) & 0xffff) +
                   (double)((r >> 32) & 0xffff) + (double)(r >> 48);
        out[j] = (float)(0.1 * (s - 131070.0) / 37837.23);
    }
}

static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint32_t cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (uint32_t)n;
}

static const char *dtype_name(store_dtype_t d)
{
    return d == STORE_DTYPE_F16 ? "f16" : "f32";
}

/* "12.3 MB" style, decimal units; buf must hold 32 bytes. */
static const char *human_bytes(uint64_t b, char *buf, size_t len)
{
    static const char *unit[] = {"B", "kB", "MB", "GB", "TB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1000.0 && u < 4) {
        v /= 1000.0;
        u++;
    }
    snprintf(buf, len, u == 0 ? "%.0f %s" : "%.1f %s", v, unit[u]);
    return buf;
}

/* Parses an unsigned count with an optional suffix: k/K, M, G, T (powers of
 * 1000) or Ki, Mi, Gi, Ti (powers of 1024).  "10M" = 10000000.  Returns 0 or
 * -EINVAL (not a number, unknown suffix, overflow). */
static int parse_count(const char *s, uint64_t *out)
{
    if (s == NULL || *s < '0' || *s > '9')
        return -EINVAL; /* also refuses "-1", which strtoull would wrap */
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0)
        return -EINVAL;
    uint64_t mul = 1;
    if (*end != '\0') {
        const char *sfx = "kMGT";
        const char *p = strchr(sfx, *end == 'K' ? 'k' : *end);
        if (p == NULL)
            return -EINVAL;
        int power = (int)(p - sfx) + 1;
        uint64_t base = 1000;
        end++;
        if (*end == 'i') {
            base = 1024;
            end++;
        }
        if (*end != '\0')
            return -EINVAL;
        for (int i = 0; i < power; i++)
            mul *= base;
    }
    if (v != 0 && mul > UINT64_MAX / v)
        return -EINVAL;
    *out = (uint64_t)v * mul;
    return 0;
}

/* Sum of the sizes of the regular files directly inside dir (0 when dir
 * cannot be read). */
static uint64_t dir_bytes(const char *dir, unsigned *files)
{
    uint64_t total = 0;
    unsigned n = 0;
    DIR *d = opendir(dir);
    if (d == NULL)
        goto out;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) {
            total += (uint64_t)st.st_size;
            n++;
        }
    }
    closedir(d);
out:
    if (files)
        *files = n;
    return total;
}

/* Creates the missing parent directories of path (mode 0755), like
 * "mkdir -p $(dirname path)"; the last component is left to
 * store_snapshot_write.  Returns 0 or -errno. */
static int mkdir_parents(const char *path)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n >= sizeof buf)
        return -ENAMETOOLONG;
    memcpy(buf, path, n + 1);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0'; /* "a/b/" names b */
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
            int e = errno;
            *p = '/';
            return -e;
        }
        *p = '/';
    }
    return 0;
}

/* "tlsnap verify: DIR: checksum: shard-00002.tls: ..." (the store's message
 * names the file inside dir and the offset). */
static __cold void print_store_error(const char *cmd, const char *dir, const store_error_t *err)
{
    fprintf(stderr, "tlsnap %s: %s: %s: %s\n", cmd, dir, store_errc_name(err->code),
            err->msg[0] ? err->msg : "(no message)");
}

/* ---- usage and flags ------------------------------------------------------ */

static const char usage_main[] =
    "usage: tlsnap <command> [options]\n"
    "\n"
    "commands:\n"
    "  gen     generate a synthetic model and write it as a snapshot\n"
    "  info    print a snapshot's manifest\n"
    "  verify  load a snapshot fully (checksums, keys) and re-read every entry\n"
    "  rewrite load a snapshot and write it again (hash seed, bucket order)\n"
    "\n"
    "'tlsnap <command> --help' describes a command's options.\n";

static const char usage_gen[] =
    "usage: tlsnap gen --keys N --out DIR [options]\n"
    "\n"
    "Generates N distinct pseudo-random keys with values ~N(0, 0.1), fills a\n"
    "store with them (one writer thread per shard group) and writes it as a\n"
    "full snapshot into DIR (created; it must not hold a snapshot yet).\n"
    "The model depends only on the options, not on the thread count.\n"
    "\n"
    "  --keys N          number of keys (suffixes: k M G T, or Ki Mi Gi Ti)\n"
    "  --out DIR         snapshot directory\n"
    "  --value-floats K  floats per key, 1..1024 (default 1 for lr, 8 otherwise)\n"
    "  --dtype f32|f16   storage type of the values (default f32)\n"
    "  --shards S        shard count, a power of two 1..256 (default 16)\n"
    "  --name NAME       model name, [A-Za-z0-9_.-], < 64 chars (default synthetic)\n"
    "  --kind KIND       lr|fm|ffm|dnn (default lr)\n"
    "  --version V       model version, > 0 (default 1)\n"
    "  --seed X          generator seed (default 42)\n"
    "  --threads T       writer threads (default: min(cores, shards))\n"
    "  --param KEY=VAL   a model hyper-parameter in the MANIFEST (repeatable), e.g.\n"
    "                    ffm: fields=20 k=4 norm=0; dnn: fields=26 dim=16 hidden=256,128 wide=1\n"
    "  --mlp W0,W1,..,1  dense layers of a synthetic MLP (dnn): arrays mlp.L.weight\n"
    "                    (WL x WL+1, uniform +-sqrt(3/WL)) and mlp.L.bias (WL+1, zero)\n"
    "\n"
    "Example, the benchmark's DNN (26 fields x 16 dims, 416 -> 256 -> 128 -> 1):\n"
    "  tlsnap gen --keys 20M --out DIR --kind dnn --value-floats 17 --param fields=26 \\\n"
    "             --param dim=16 --param hidden=256,128 --param wide=1 --mlp 416,256,128,1\n";

static const char usage_info[] =
    "usage: tlsnap info DIR [--brief]\n"
    "\n"
    "Reads and verifies only the MANIFEST of the snapshot in DIR and prints it:\n"
    "model, kind, version, parent, creation time, entries, value layout and\n"
    "one line per shard file.\n"
    "\n"
    "  --brief           omit the per-shard lines\n";

static const char usage_verify[] =
    "usage: tlsnap verify DIR [--threads T] [--no-lookup]\n"
    "\n"
    "Loads the snapshot in DIR fully with store_snapshot_load (every checksum,\n"
    "count and key is checked), prints entries, load time and rate, then\n"
    "iterates every shard and looks each key up again, comparing values.\n"
    "Exit status 0 when everything checks out, 1 with the reason otherwise.\n"
    "\n"
    "  --threads T       loader and lookup threads (default 0 = one per core)\n"
    "  --no-lookup       skip the re-read after the load\n";

static const char usage_rewrite[] =
    "usage: tlsnap rewrite SRC DST [--threads T]\n"
    "\n"
    "Loads the snapshot in SRC fully (every checksum, count and key checked)\n"
    "and writes the same model, version, params and dense arrays as a new\n"
    "snapshot in DST (created; it must not hold a snapshot yet).  The new one\n"
    "records its store's hash seed and lists records in the loader's bucket\n"
    "order, so it loads on the fast path: use it on snapshots written before\n"
    "2026-11-25 (no hash seed) or by a store that grew.\n"
    "\n"
    "  --threads T       loader threads (default 0 = one per core)\n";

static __cold __noreturn void usage_error(const char *cmd, const char *usage, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "tlsnap%s%s: ", cmd ? " " : "", cmd ? cmd : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n\n%s", usage);
    exit(2);
}

static int is_help(const char *a)
{
    return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0;
}

/* Returns 1 when argv[*i] is the flag `name` given as "--name V" or
 * "--name=V" (then *val points at V and *i is past it), 0 when it is not.
 * A matching flag without a value is a usage error. */
static int flag(int argc, char **argv, int *i, const char *name, const char **val, const char *cmd,
                const char *usage)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0)
        return 0;
    if (a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (a[n] != '\0')
        return 0;
    if (*i + 1 >= argc)
        usage_error(cmd, usage, "option %s needs a value", name);
    *val = argv[++*i];
    return 1;
}

static uint64_t count_arg(const char *cmd, const char *usage, const char *name, const char *v,
                          uint64_t min, uint64_t max)
{
    uint64_t x;
    if (parse_count(v, &x) != 0)
        usage_error(cmd, usage, "%s: '%s' is not a count (digits with an optional k/M/G/T suffix)",
                    name, v);
    if (x < min || x > max)
        usage_error(cmd, usage, "%s: %" PRIu64 " is out of range %" PRIu64 "..%" PRIu64, name, x,
                    min, max);
    return x;
}

static int valid_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= sizeof(((store_meta_t *)0)->model_name))
        return 0;
    for (const char *p = s; *p; p++) {
        char c = *p;
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return 0;
    }
    return 1;
}

/* ---- gen ------------------------------------------------------------------ */

struct gen_job {
    store_t *s;    /* shared; this job writes only its own shards */
    uint64_t keys; /* N */
    uint64_t seed;
    uint32_t tid; /* this thread owns shards with shard % nthreads == tid */
    uint32_t nthreads;
    uint64_t inserted; /* out: keys this thread inserted */
    int rc;            /* out: 0, -ENOMEM, or -EEXIST (a duplicate key: a bug) */
    uint64_t bad_key;  /* out: the key that failed */
};

/* Inserts the n records buffered for shard sh.  Returns 0 or -errno with
 * j->bad_key set. */
static int gen_flush(struct gen_job *j, uint32_t sh, const uint8_t *buf, size_t n, size_t rec)
{
    size_t bad = 0;
    int rc = store_insert_entries(j->s, sh, buf, n, &bad);
    if (rc != 0) {
        memcpy(&j->bad_key, buf + bad * rec, 8);
        return rc;
    }
    j->inserted += n;
    return 0;
}

static void *gen_thread(void *arg)
{
    struct gen_job *j = arg;
    const uint32_t shards = store_shards(j->s), subs = store_subs_per_shard(j->s);
    const uint32_t k = store_value_floats(j->s),
                   mine = (shards - j->tid + j->nthreads - 1) / j->nthreads;
    const int f16 = store_dtype(j->s) == STORE_DTYPE_F16;
    const size_t vbytes = store_value_bytes(j->s), rec = 8 + vbytes;
    uint64_t *counts = NULL; /* [my shard slot][sub]: keys per sub-table */
    uint8_t *bufs = NULL;    /* [my shard slot]: GEN_CHUNK records */
    size_t fill[STORE_MAX_SHARDS] = {0};
    float value[STORE_MAX_VALUE_FLOATS];

    counts = calloc((size_t)mine * subs, sizeof *counts);
    bufs = malloc((size_t)mine * GEN_CHUNK * rec);
    if (counts == NULL || bufs == NULL) {
        j->rc = -ENOMEM;
        goto out;
    }

    /* walk 1: keys per sub-table of my shards, so that each is sized once,
     * exactly, as the snapshot loader sizes them */
    for (uint64_t i = 0; i < j->keys; i++) {
        uint64_t key = store_synthetic_key(i, j->seed);
        uint32_t sh = store_shard_of(j->s, key);
        if (sh % j->nthreads == j->tid)
            counts[(size_t)(sh / j->nthreads) * subs + store_sub_of(j->s, key)]++;
    }
    for (uint32_t sh = j->tid; sh < shards; sh += j->nthreads) {
        for (uint32_t u = 0; u < subs; u++) {
            int rc = store_reserve_sub(j->s, sh, u, counts[(size_t)(sh / j->nthreads) * subs + u]);
            if (rc < 0) {
                j->rc = rc;
                goto out;
            }
        }
    }

    /* walk 2: records in storage format, buffered per shard and inserted in
     * chunks through the loader's prefetching bulk path */
    for (uint64_t i = 0; i < j->keys; i++) {
        uint64_t key = store_synthetic_key(i, j->seed);
        uint32_t sh = store_shard_of(j->s, key);
        if (sh % j->nthreads != j->tid)
            continue;
        uint8_t *buf = bufs + (size_t)(sh / j->nthreads) * GEN_CHUNK * rec;
        uint8_t *r = buf + fill[sh] * rec;
        gen_value(key, j->seed, k, value);
        memcpy(r, &key, 8); /* little-endian host, as the store's raw format */
        if (f16) {
            for (uint32_t v = 0; v < k; v++) {
                uint16_t h = store_f32_to_f16(value[v]);
                memcpy(r + 8 + 2 * v, &h, 2);
            }
        } else {
            memcpy(r + 8, value, vbytes);
        }
        if (++fill[sh] == GEN_CHUNK) {
            if ((j->rc = gen_flush(j, sh, buf, fill[sh], rec)) != 0)
                goto out;
            fill[sh] = 0;
        }
    }
    for (uint32_t sh = j->tid; sh < shards; sh += j->nthreads) {
        if (fill[sh] == 0)
            continue;
        uint8_t *buf = bufs + (size_t)(sh / j->nthreads) * GEN_CHUNK * rec;
        if ((j->rc = gen_flush(j, sh, buf, fill[sh], rec)) != 0)
            goto out;
    }
out:
    free(counts);
    free(bufs);
    return NULL;
}

/* Adds a synthetic MLP's layers (widths w[0..n-1]) to x: mlp.L.weight
 * uniform in +-sqrt(3 / fan_in) (unit variance through each layer), biases
 * zero.  The arrays are malloc'd: the caller frees x->dense[*].data.
 * 0, or -1 with a message. */
static int make_mlp(const uint32_t *w, uint32_t n, uint64_t seed, store_extras_t *x)
{
    uint64_t rng = seed ^ UINT64_C(0x6d6c70); /* "mlp" */
    for (uint32_t l = 0; l + 1 < n; l++) {
        uint64_t cw = (uint64_t)w[l] * w[l + 1];
        float *W = malloc(cw * sizeof *W), *b = calloc(w[l + 1], sizeof *b);
        const double scale = sqrt(3.0 / w[l]);
        for (uint64_t j = 0; W && j < cw; j++)
            W[j] = (float)(scale * ((double)(store_splitmix64(&rng) >> 11) * 0x1p-52 - 1.0));
        char wn[STORE_DENSE_NAME_MAX], bn[STORE_DENSE_NAME_MAX];
        snprintf(wn, sizeof wn, "mlp.%u.weight", l);
        snprintf(bn, sizeof bn, "mlp.%u.bias", l);
        int added = 0;
        if (W && b && store_extras_add_dense(x, wn, W, cw) == 0) {
            added = 1;
            if (store_extras_add_dense(x, bn, b, w[l + 1]) == 0)
                continue;
        }
        fprintf(stderr, "tlsnap gen: cannot add MLP layer %u (%" PRIu64 " floats)\n", l, cw);
        if (!added)
            free(W); /* once added, the caller frees it with the others */
        free(b);
        return -1;
    }
    return 0;
}

static int cmd_gen(int argc, char **argv)
{
    static const char *C = "gen";
    const char *U = usage_gen;
    uint64_t keys = 0, seed = 42, version = 1, k = 0, shards = 16, threads = 0;
    const char *out_dir = NULL, *name = "synthetic";
    store_dtype_t dtype = STORE_DTYPE_F32;
    store_model_kind_t kind = STORE_MODEL_LR;
    int have_keys = 0;
    store_extras_t extras = {0};
    uint32_t mlp[STORE_MAX_DENSE / 2 + 1], mlp_n = 0;

    for (int i = 0; i < argc; i++) {
        const char *v;
        if (is_help(argv[i])) {
            fputs(U, stdout);
            return 0;
        } else if (flag(argc, argv, &i, "--keys", &v, C, U)) {
            keys = count_arg(C, U, "--keys", v, 0, UINT64_MAX / 2);
            have_keys = 1;
        } else if (flag(argc, argv, &i, "--out", &v, C, U)) {
            out_dir = v;
        } else if (flag(argc, argv, &i, "--value-floats", &v, C, U)) {
            k = count_arg(C, U, "--value-floats", v, 1, STORE_MAX_VALUE_FLOATS);
        } else if (flag(argc, argv, &i, "--dtype", &v, C, U)) {
            if (strcmp(v, "f32") == 0)
                dtype = STORE_DTYPE_F32;
            else if (strcmp(v, "f16") == 0)
                dtype = STORE_DTYPE_F16;
            else
                usage_error(C, U, "--dtype: '%s' is neither f32 nor f16", v);
        } else if (flag(argc, argv, &i, "--shards", &v, C, U)) {
            shards = count_arg(C, U, "--shards", v, 1, STORE_MAX_SHARDS);
            if (shards & (shards - 1))
                usage_error(C, U, "--shards: %" PRIu64 " is not a power of two", shards);
        } else if (flag(argc, argv, &i, "--name", &v, C, U)) {
            if (!valid_name(v))
                usage_error(C, U, "--name: '%s' must be 1..63 characters of [A-Za-z0-9_.-]", v);
            name = v;
        } else if (flag(argc, argv, &i, "--kind", &v, C, U)) {
            if (strcmp(v, "lr") == 0)
                kind = STORE_MODEL_LR;
            else if (strcmp(v, "fm") == 0)
                kind = STORE_MODEL_FM;
            else if (strcmp(v, "ffm") == 0)
                kind = STORE_MODEL_FFM;
            else if (strcmp(v, "dnn") == 0)
                kind = STORE_MODEL_DNN;
            else
                usage_error(C, U, "--kind: '%s' is not one of lr, fm, ffm, dnn", v);
        } else if (flag(argc, argv, &i, "--version", &v, C, U)) {
            version = count_arg(C, U, "--version", v, 1, UINT64_MAX);
        } else if (flag(argc, argv, &i, "--seed", &v, C, U)) {
            seed = count_arg(C, U, "--seed", v, 0, UINT64_MAX);
        } else if (flag(argc, argv, &i, "--threads", &v, C, U)) {
            threads = count_arg(C, U, "--threads", v, 1, MAX_THREADS);
        } else if (flag(argc, argv, &i, "--param", &v, C, U)) {
            char key[STORE_PARAM_KEY_MAX];
            const char *eq = strchr(v, '=');
            if (!eq || eq == v || (size_t)(eq - v) >= sizeof key)
                usage_error(C, U, "--param: '%s' is not KEY=VALUE with a 1..31 byte key", v);
            memcpy(key, v, (size_t)(eq - v));
            key[eq - v] = '\0';
            if (store_extras_set(&extras, key, eq + 1) != 0)
                usage_error(C, U,
                            "--param: '%s': keys are [A-Za-z0-9_.-], values < 128 printable "
                            "bytes, at most %d params",
                            v, STORE_MAX_PARAMS);
        } else if (flag(argc, argv, &i, "--mlp", &v, C, U)) {
            mlp_n = 0;
            for (const char *p = v; *p;) {
                char *e;
                errno = 0;
                unsigned long w = strtoul(p, &e, 10);
                if (e == p || errno || w < 1 || w > 65536 ||
                    mlp_n == sizeof mlp / sizeof mlp[0] || (*e && *e != ','))
                    usage_error(C, U, "--mlp: '%s' is not a list of 2..%zu widths 1..65536", v,
                                sizeof mlp / sizeof mlp[0]);
                mlp[mlp_n++] = (uint32_t)w;
                p = *e ? e + 1 : e;
            }
            if (mlp_n < 2)
                usage_error(C, U, "--mlp: '%s' needs at least two widths", v);
        } else if (argv[i][0] == '-') {
            usage_error(C, U, "unknown option '%s'", argv[i]);
        } else {
            usage_error(C, U, "unexpected argument '%s'", argv[i]);
        }
    }
    if (!have_keys)
        usage_error(C, U, "--keys N is required");
    if (out_dir == NULL || out_dir[0] == '\0')
        usage_error(C, U, "--out DIR is required");
    if (k == 0)
        k = kind == STORE_MODEL_LR ? 1 : 8;
    if (threads == 0)
        threads = cpu_count();
    if (threads > shards)
        threads = shards; /* a thread without a shard would only burn CPU */

    store_options_t opt = {
        .value_floats = (uint32_t)k,
        .dtype = dtype,
        .shards = (uint32_t)shards,
        .expected_keys = keys,
    };
    char why[256] = "";
    if (store_options_check(&opt, why, sizeof why) != 0)
        usage_error(C, U, "bad store options: %s", why[0] ? why : "(no reason given)");

    /* fail before a long fill rather than after it */
    char manifest_path[4096];
    snprintf(manifest_path, sizeof manifest_path, "%s/%s", out_dir, MANIFEST_FILE_NAME);
    if (access(manifest_path, F_OK) == 0) {
        fprintf(stderr, "tlsnap gen: %s already holds a snapshot (%s exists)\n", out_dir,
                manifest_path);
        return 1;
    }
    int rc = mkdir_parents(out_dir);
    if (rc != 0) {
        fprintf(stderr, "tlsnap gen: cannot create the parent directories of %s: %s\n", out_dir,
                strerror(-rc));
        return 1;
    }

    int ret = 1;
    store_t *s = NULL;
    struct gen_job *jobs = NULL;
    pthread_t *tids = NULL;
    char hb[32], hb2[32];

    printf("tlsnap gen: model %s v%" PRIu64 " (%s), %" PRIu64 " keys x %" PRIu64 " %s, %" PRIu64
           " shards, %" PRIu64 " threads, seed %" PRIu64 "\n",
           name, version, store_model_kind_name(kind), keys, k, dtype_name(dtype), shards, threads,
           seed);
    fflush(stdout);

    rc = store_create(&opt, &s);
    if (rc != 0) {
        fprintf(stderr, "tlsnap gen: store_create: %s\n", strerror(-rc));
        goto out;
    }
    jobs = calloc(threads, sizeof *jobs);
    tids = calloc(threads, sizeof *tids);
    if (jobs == NULL || tids == NULL) {
        fprintf(stderr, "tlsnap gen: out of memory\n");
        goto out;
    }

    double t0 = now_sec();
    uint32_t started = 0;
    for (uint32_t t = 0; t < threads; t++) {
        jobs[t] = (struct gen_job){
            .s = s, .keys = keys, .seed = seed, .tid = t, .nthreads = (uint32_t)threads};
        rc = pthread_create(&tids[t], NULL, gen_thread, &jobs[t]);
        if (rc != 0) {
            fprintf(stderr, "tlsnap gen: pthread_create: %s\n", strerror(rc));
            break;
        }
        started++;
    }
    uint64_t inserted = 0;
    int failed = started < threads;
    for (uint32_t t = 0; t < started; t++) {
        pthread_join(tids[t], NULL);
        inserted += jobs[t].inserted;
        if (jobs[t].rc == -EEXIST) {
            fprintf(stderr,
                    "tlsnap gen: key %#" PRIx64 " inserted twice (generator or store bug)\n",
                    jobs[t].bad_key);
            failed = 1;
        } else if (jobs[t].rc != 0) {
            fprintf(stderr, "tlsnap gen: thread %u: %s\n", t, strerror(-jobs[t].rc));
            failed = 1;
        }
    }
    if (failed)
        goto out;
    double fill = now_sec() - t0;
    if (inserted != keys || store_count(s) != keys) {
        fprintf(stderr,
                "tlsnap gen: inserted %" PRIu64 " keys, store counts %" PRIu64 ", expected %" PRIu64
                "\n",
                inserted, store_count(s), keys);
        goto out;
    }
    store_stats_t st;
    store_stats(s, &st);
    printf("  fill   %" PRIu64 " keys in %.3f s  (%.2f M keys/s)\n", keys, fill,
           fill > 0 ? (double)keys / fill / 1e6 : 0.0);
    printf("  table  %s  (%.2f B/key, %" PRIu64 " sub-tables, %" PRIu64 " stashed)\n",
           human_bytes(st.table_bytes, hb, sizeof hb),
           keys ? (double)st.table_bytes / (double)keys : 0.0, st.subtables, st.stashed);
    fflush(stdout);

    store_meta_t meta = {.model_kind = kind, .version = version};
    snprintf(meta.model_name, sizeof meta.model_name, "%s", name);
    if (make_mlp(mlp, mlp_n, seed, &extras) != 0)
        goto out;
    store_error_t err = {0};
    t0 = now_sec();
    if (store_snapshot_write_ex(s, out_dir, &meta, &extras, &err) != 0) {
        print_store_error(C, out_dir, &err);
        goto out;
    }
    double wr = now_sec() - t0;
    unsigned files;
    uint64_t bytes = dir_bytes(out_dir, &files);
    printf("  write  %s in %u files in %.3f s  (%s/s)  -> %s\n", human_bytes(bytes, hb, sizeof hb),
           files, wr, human_bytes(wr > 0 ? (uint64_t)((double)bytes / wr) : 0, hb2, sizeof hb2),
           out_dir);
    printf("  total  %" PRIu64 " keys in %.3f s  (%.2f M keys/s)\n", keys, fill + wr,
           fill + wr > 0 ? (double)keys / (fill + wr) / 1e6 : 0.0);
    ret = 0;
out:
    for (uint32_t l = 0; l < extras.n_dense; l++)
        free(extras.dense[l].data); /* make_mlp's arrays */
    free(jobs);
    free(tids);
    if (s)
        store_destroy(s);
    return ret;
}

/* ---- info ----------------------------------------------------------------- */

/* Reads dir/MANIFEST (at most MANIFEST_MAX_BYTES) and decodes it.  Returns 0
 * or -1 with a message printed.  On success m->shards is owned by the caller
 * (manifest_free). */
static int read_manifest(const char *dir, manifest_t *m)
{
    char path[4096];
    int ret = -1, fd = -1;
    uint8_t *buf = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, MANIFEST_FILE_NAME);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        fprintf(stderr, "tlsnap info: %s: %s\n", path, strerror(errno));
        goto out;
    }
    if (st.st_size <= 0 || (uint64_t)st.st_size > MANIFEST_MAX_BYTES) {
        fprintf(stderr, "tlsnap info: %s: size %lld is outside 1..%u\n", path,
                (long long)st.st_size, MANIFEST_MAX_BYTES);
        goto out;
    }
    size_t len = (size_t)st.st_size, got = 0;
    buf = malloc(len);
    if (buf == NULL) {
        fprintf(stderr, "tlsnap info: out of memory\n");
        goto out;
    }
    while (got < len) {
        ssize_t r = read(fd, buf + got, len - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            fprintf(stderr, "tlsnap info: %s: read: %s\n", path, r < 0 ? strerror(errno) : "short");
            goto out;
        }
        got += (size_t)r;
    }
    char why[512] = "";
    if (store__manifest_decode(buf, len, m, why, sizeof why) != 0) {
        fprintf(stderr, "tlsnap info: %s: %s\n", path, why);
        goto out;
    }
    ret = 0;
out:
    free(buf);
    if (fd >= 0)
        close(fd);
    return ret;
}

static int cmd_info(int argc, char **argv)
{
    static const char *C = "info";
    const char *U = usage_info, *dir = NULL;
    int brief = 0;
    for (int i = 0; i < argc; i++) {
        if (is_help(argv[i])) {
            fputs(U, stdout);
            return 0;
        } else if (strcmp(argv[i], "--brief") == 0) {
            brief = 1;
        } else if (argv[i][0] == '-') {
            usage_error(C, U, "unknown option '%s'", argv[i]);
        } else if (dir != NULL) {
            usage_error(C, U, "unexpected argument '%s' (one DIR only)", argv[i]);
        } else {
            dir = argv[i];
        }
    }
    if (dir == NULL)
        usage_error(C, U, "DIR is required");

    store_meta_t meta;
    uint64_t entries = 0;
    store_error_t err = {0};
    if (store_snapshot_read_meta(dir, &meta, &entries, &err) != 0) {
        print_store_error(C, dir, &err);
        return 1;
    }
    manifest_t m = {0};
    if (read_manifest(dir, &m) != 0)
        return 1;

    char created[64] = "?", hb[32];
    time_t ct = (time_t)meta.created_unix;
    struct tm tm;
    if (gmtime_r(&ct, &tm) != NULL)
        strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &tm);
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < m.shard_count; i++)
        bytes += m.shards[i].bytes;

    printf("%s\n", dir);
    printf("  model      %s\n", meta.model_name);
    printf("  kind       %s\n", store_model_kind_name(meta.model_kind));
    if (meta.parent_version)
        printf("  version    %" PRIu64 " (delta of %" PRIu64 ")\n", meta.version,
               meta.parent_version);
    else
        printf("  version    %" PRIu64 " (full)\n", meta.version);
    printf("  created    %s (%" PRIu64 ")\n", created, meta.created_unix);
    printf("  entries    %" PRIu64 "\n", entries);
    printf("  values     %u x %s (%u B/entry with key)\n", m.value_floats, dtype_name(m.dtype),
           8 + m.value_floats * (m.dtype == STORE_DTYPE_F16 ? 2u : 4u));
    printf("  shards     %u\n", m.shard_count);
    printf("  format     %u\n", m.format_version);
    if (m.hash_seed)
        printf("  hash seed  %#" PRIx64 " (loads in bucket order)\n", m.hash_seed);
    else
        printf("  hash seed  none (loads at random, slower; 'tlsnap rewrite' adds one)\n");
    printf("  data       %s in shard files\n", human_bytes(bytes, hb, sizeof hb));
    for (uint32_t i = 0; i < m.n_params; i++)
        printf("  param      %s = %s\n", m.params[i].key, m.params[i].value);
    for (uint32_t i = 0; i < m.n_dense; i++)
        printf("  dense      %-16s %10" PRIu64 " floats  %016" PRIx64 "  %s\n", m.dense[i].name,
               (m.dense[i].bytes - DENSE_HEADER_BYTES) / 4, m.dense[i].xxh3, m.dense[i].file);
    if (!brief && m.shard_count > 0) {
        printf("\n  %5s  %12s  %14s  %-16s  %s\n", "shard", "entries", "bytes", "xxh3", "file");
        for (uint32_t i = 0; i < m.shard_count; i++) {
            const manifest_shard_t *sh = &m.shards[i];
            printf("  %5u  %12" PRIu64 "  %14" PRIu64 "  %016" PRIx64 "  %s\n", sh->index,
                   sh->entries, sh->bytes, sh->xxh3, sh->file);
        }
    }
    store__manifest_free(&m);
    return 0;
}

/* ---- verify --------------------------------------------------------------- */

struct check_job {
    const store_t *s;
    uint32_t tid, nthreads;
    uint32_t k;
    size_t n; /* keys buffered in this batch */
    uint64_t keys[LOOKUP_BATCH];
    float want[LOOKUP_BATCH * STORE_MAX_VALUE_FLOATS]; /* values from iteration */
    float got[LOOKUP_BATCH * STORE_MAX_VALUE_FLOATS];  /* values from lookup */
    uint8_t found[LOOKUP_BATCH];
    uint64_t visited;       /* out: entries iterated */
    uint64_t bad;           /* out: missing or different */
    uint64_t first_bad_key; /* out: for the message */
};

static void check_flush(struct check_job *j)
{
    store_lookup_batch(j->s, j->keys, j->n, j->got, j->found);
    for (size_t i = 0; i < j->n; i++) {
        const float *w = &j->want[i * j->k], *g = &j->got[i * j->k];
        if (!j->found[i] || memcmp(w, g, j->k * sizeof(float)) != 0) {
            if (j->bad++ == 0)
                j->first_bad_key = j->keys[i];
        }
    }
    j->n = 0;
}

static int check_visit(void *ctx, uint64_t key, const float *value)
{
    struct check_job *j = ctx;
    j->keys[j->n] = key;
    memcpy(&j->want[j->n * j->k], value, j->k * sizeof(float));
    j->visited++;
    if (++j->n == LOOKUP_BATCH)
        check_flush(j);
    return 0;
}

static void *check_thread(void *arg)
{
    struct check_job *j = arg;
    uint32_t shards = store_shards(j->s);
    for (uint32_t sh = j->tid; sh < shards; sh += j->nthreads)
        store_foreach(j->s, sh, check_visit, j);
    if (j->n)
        check_flush(j);
    return NULL;
}

/* Iterates every shard and looks each key up again.  Returns 0 when every
 * key is found with the same value and the count matches, -1 otherwise. */
static int lookup_check(const store_t *s, uint32_t threads, uint64_t entries)
{
    int ret = -1;
    uint32_t shards = store_shards(s);
    if (threads > shards)
        threads = shards;
    struct check_job *jobs = calloc(threads, sizeof *jobs);
    pthread_t *tids = calloc(threads, sizeof *tids);
    if (jobs == NULL || tids == NULL) {
        fprintf(stderr, "tlsnap verify: out of memory\n");
        goto out;
    }
    double t0 = now_sec();
    uint32_t started = 0;
    for (uint32_t t = 0; t < threads; t++) {
        jobs[t].s = s;
        jobs[t].tid = t;
        jobs[t].nthreads = threads;
        jobs[t].k = store_value_floats(s);
        int rc = pthread_create(&tids[t], NULL, check_thread, &jobs[t]);
        if (rc != 0) {
            fprintf(stderr, "tlsnap verify: pthread_create: %s\n", strerror(rc));
            break;
        }
        started++;
    }
    uint64_t visited = 0, bad = 0, bad_key = 0;
    for (uint32_t t = 0; t < started; t++) {
        pthread_join(tids[t], NULL);
        visited += jobs[t].visited;
        if (jobs[t].bad && bad == 0)
            bad_key = jobs[t].first_bad_key;
        bad += jobs[t].bad;
    }
    if (started < threads)
        goto out;
    double dt = now_sec() - t0;
    if (bad) {
        fprintf(stderr,
                "tlsnap verify: lookup: %" PRIu64 " of %" PRIu64
                " iterated keys are missing or differ (first: %#" PRIx64 ")\n",
                bad, visited, bad_key);
        goto out;
    }
    if (visited != entries) {
        fprintf(stderr,
                "tlsnap verify: lookup: iteration visited %" PRIu64
                " entries, the store counts %" PRIu64 "\n",
                visited, entries);
        goto out;
    }
    printf("  lookup %" PRIu64 " keys re-read, all found and equal, in %.3f s  (%.2f M keys/s)\n",
           visited, dt, dt > 0 ? (double)visited / dt / 1e6 : 0.0);
    ret = 0;
out:
    free(jobs);
    free(tids);
    return ret;
}

static int cmd_verify(int argc, char **argv)
{
    static const char *C = "verify";
    const char *U = usage_verify, *dir = NULL;
    uint64_t threads = 0;
    int lookup = 1;
    for (int i = 0; i < argc; i++) {
        const char *v;
        if (is_help(argv[i])) {
            fputs(U, stdout);
            return 0;
        } else if (flag(argc, argv, &i, "--threads", &v, C, U)) {
            threads = count_arg(C, U, "--threads", v, 0, MAX_THREADS);
        } else if (strcmp(argv[i], "--no-lookup") == 0) {
            lookup = 0;
        } else if (argv[i][0] == '-') {
            usage_error(C, U, "unknown option '%s'", argv[i]);
        } else if (dir != NULL) {
            usage_error(C, U, "unexpected argument '%s' (one DIR only)", argv[i]);
        } else {
            dir = argv[i];
        }
    }
    if (dir == NULL)
        usage_error(C, U, "DIR is required");

    uint32_t nthreads = threads ? (uint32_t)threads : cpu_count();
    store_t *s = NULL;
    store_meta_t meta;
    store_error_t err = {0};
    char hb[32];
    int ret = 1;

    double t0 = now_sec();
    if (store_snapshot_load(dir, (int)threads, &s, &meta, &err) != 0) {
        print_store_error(C, dir, &err);
        goto out;
    }
    double dt = now_sec() - t0;
    uint64_t n = store_count(s);
    store_stats_t st;
    store_stats(s, &st);
    printf("tlsnap verify: %s: model %s v%" PRIu64 " (%s), %u x %s, %u shards\n", dir,
           meta.model_name, meta.version, store_model_kind_name(meta.model_kind),
           store_value_floats(s), dtype_name(store_dtype(s)), store_shards(s));
    printf("  load   %" PRIu64 " entries in %.3f s  (%.2f M entries/s, %u threads), "
           "checksums ok\n",
           n, dt, dt > 0 ? (double)n / dt / 1e6 : 0.0, nthreads);
    printf("  table  %s  (%.2f B/key, %" PRIu64 " sub-tables, %" PRIu64 " stashed)\n",
           human_bytes(st.table_bytes, hb, sizeof hb), n ? (double)st.table_bytes / (double)n : 0.0,
           st.subtables, st.stashed);
    fflush(stdout);
    if (lookup && lookup_check(s, nthreads, n) != 0)
        goto out;
    printf("OK\n");
    ret = 0;
out:
    if (s)
        store_destroy(s);
    return ret;
}

/* ---- rewrite -------------------------------------------------------------- */

static int cmd_rewrite(int argc, char **argv)
{
    static const char *C = "rewrite";
    const char *U = usage_rewrite, *src = NULL, *dst = NULL;
    uint64_t threads = 0;
    for (int i = 0; i < argc; i++) {
        const char *v;
        if (is_help(argv[i])) {
            fputs(U, stdout);
            return 0;
        } else if (flag(argc, argv, &i, "--threads", &v, C, U)) {
            threads = count_arg(C, U, "--threads", v, 0, MAX_THREADS);
        } else if (argv[i][0] == '-') {
            usage_error(C, U, "unknown option '%s'", argv[i]);
        } else if (src == NULL) {
            src = argv[i];
        } else if (dst == NULL) {
            dst = argv[i];
        } else {
            usage_error(C, U, "unexpected argument '%s' (SRC and DST only)", argv[i]);
        }
    }
    if (src == NULL || dst == NULL)
        usage_error(C, U, "SRC and DST are required");

    store_t *s = NULL;
    store_meta_t meta;
    store_extras_t x;
    memset(&x, 0, sizeof x);
    store_error_t err = {0};
    int ret = 1;

    double t0 = now_sec();
    if (store_snapshot_load_ex(src, (int)threads, &s, &meta, &x, &err) != 0) {
        print_store_error(C, src, &err);
        return 1;
    }
    double load_s = now_sec() - t0;
    uint64_t n = store_count(s);
    printf("tlsnap rewrite: %s: model %s v%" PRIu64 " (%s), %" PRIu64 " entries, %u x %s, "
           "%u shards, %u params, %u dense arrays; loaded in %.3f s\n",
           src, meta.model_name, meta.version, store_model_kind_name(meta.model_kind), n,
           store_value_floats(s), dtype_name(store_dtype(s)), store_shards(s), x.n_params,
           x.n_dense, load_s);
    fflush(stdout);
    int e = mkdir_parents(dst);
    if (e != 0) {
        fprintf(stderr, "tlsnap %s: %s: cannot create its parent directories: %s\n", C, dst,
                strerror(-e));
        goto out;
    }
    t0 = now_sec();
    if (store_snapshot_write_ex(s, dst, &meta, &x, &err) != 0) {
        print_store_error(C, dst, &err);
        goto out;
    }
    printf("  wrote  %s in %.3f s (hash seed %#" PRIx64 ", bucket order)\n", dst,
           now_sec() - t0, store_hash_seed(s));
    printf("OK\n");
    ret = 0;
out:
    store_extras_free(&x);
    store_destroy(s);
    return ret;
}

/* ---- main ----------------------------------------------------------------- */

int main(int argc, char **argv)
{
    if (argc < 2)
        usage_error(NULL, usage_main, "a command is required");
    const char *cmd = argv[1];
    if (is_help(cmd) || strcmp(cmd, "help") == 0) {
        const char *topic = argc > 2 ? argv[2] : "";
        fputs(strcmp(topic, "gen") == 0      ? usage_gen
              : strcmp(topic, "info") == 0   ? usage_info
              : strcmp(topic, "verify") == 0 ? usage_verify
              : strcmp(topic, "rewrite") == 0 ? usage_rewrite
                                             : usage_main,
              stdout);
        return 0;
    }
    if (strcmp(cmd, "gen") == 0)
        return cmd_gen(argc - 2, argv + 2);
    if (strcmp(cmd, "info") == 0)
        return cmd_info(argc - 2, argv + 2);
    if (strcmp(cmd, "verify") == 0)
        return cmd_verify(argc - 2, argv + 2);
    if (strcmp(cmd, "rewrite") == 0)
        return cmd_rewrite(argc - 2, argv + 2);
    usage_error(NULL, usage_main, "unknown command '%s'", cmd);
}
