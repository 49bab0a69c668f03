/*
 * tlsynth_model.c — `tlsynth model`: a synthetic model of any kind (lr, fm,
 * ffm, dnn), written as a full snapshot, for benchmarks, tests and the quick
 * start.  It lives in model/ because a model's shape is the model's business
 * (the DNN's dense layers are named by dnn.h); the store only holds what it
 * is given.
 *
 *   tlsynth model --keys N --out DIR [--kind lr|fm|ffm|dnn] [--value-floats K]
 *                 [--dtype f32|f16] [--shards S] [--name NAME] [--version V]
 *                 [--seed X] [--threads T] [--param KEY=VAL]... [--mlp W0,..,1]
 *
 * The model is the same for any thread count:
 *
 *   key(i)   = store_synthetic_key(i, seed)   i = 0..N-1 (store/synthetic.h;
 *                                              a bijection)
 *   value(k) = K draws ~N(0, 0.1) from a PRNG seeded by (k, seed)
 *   mlp      = (--mlp) mlp.L.weight ~ U(+-sqrt(3 / fan_in)), mlp.L.bias = 0
 *
 * mix64 (the splitmix64 finaliser) is a bijection of 64-bit integers, so N
 * distinct indices give N distinct keys without a "seen" set.  A value is
 * the sum of four 16-bit uniforms from one splitmix64 draw (Irwin-Hall),
 * centred and scaled: close enough to a normal for a synthetic model, and
 * one multiply-xorshift per float.  Params (--param) go to the MANIFEST as
 * given; the generator does not check that they fit the rows: the model
 * layer does at load (tests make ill-fitting models on purpose).
 *
 * Filling the store follows its write rule (one writer per shard): thread t
 * owns the shards s with s % T == t.  Every thread walks all N indices and
 * keeps the keys of its own shards (regenerating a key is a few ns, far
 * cheaper than handing keys between threads): a first walk counts its
 * shards' keys per sub-table and reserves each sub-table exactly
 * (store_reserve_shard_exact), so the fill never grows a table and the
 * store has the loader's layout: the snapshot writer writes each shard in
 * its bucket order as it is, with no re-layout, and the files load on the
 * fast path.  A second walk buffers keys per shard and inserts them
 * FILL_BATCH at a time: one store_lookup_batch (which prefetches across the
 * batch) brings their buckets into cache, then store_upsert writes each
 * without waiting on memory, nearly as fast as the loader's bulk insert.
 *
 * Failure leaves nothing behind: options are checked before anything is
 * created, the snapshot writer removes its own files when it fails, and the
 * parent directories this run created are removed again.
 *
 * THREAD SAFETY: part of a command-line program.  The fill threads write
 * disjoint shard sets of one store; nothing else is shared.
 */
#include "model/dnn.h"
#include "model/tlsynth.h"
#include "store/cli.h"
#include "store/store.h"
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

#define MAX_THREADS 1024
#define MAX_MLP_WIDTHS (STORE_MAX_DENSE / 2 + 1) /* two arrays per layer */
#define MAX_PATH STORE_CLI_MAX_PATH
#define FILL_BATCH 256 /* keys of one shard warmed by one batched lookup */

static const char usage_text[] =
    "usage: tlsynth model --keys N --out DIR [options]\n"
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
    "  --version V       model version, 1..2^63-1 (default 1)\n"
    "  --seed X          generator seed (default 42)\n"
    "  --threads T       writer threads (default: min(cores, shards))\n"
    "  --param KEY=VAL   a model hyper-parameter in the MANIFEST (repeatable), e.g.\n"
    "                    ffm: fields=20 k=4 norm=0; dnn: fields=26 dim=16 hidden=256,128 wide=1\n"
    "  --mlp W0,W1,..,1  dense layers of a synthetic MLP (dnn): arrays mlp.L.weight\n"
    "                    (WL x WL+1, uniform +-sqrt(3/WL)) and mlp.L.bias (WL+1, zero)\n"
    "\n"
    "Example, the benchmark's DNN (26 fields x 16 dims, 416 -> 256 -> 128 -> 1):\n"
    "  tlsynth model --keys 20M --out DIR --kind dnn --value-floats 17 --param fields=26 \\\n"
    "                --param dim=16 --param hidden=256,128 --param wide=1 --mlp 416,256,128,1\n"
    "\n"
    "Exit status: 0 ok, 1 failure (nothing is left in DIR), 2 usage error.\n";

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

/* Sum of the sizes of the regular files directly inside dir (0 when dir
 * cannot be read); *files their number. */
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
    *files = n;
    return total;
}

/* ---- flags ------------------------------------------------------------------ */

static const store_cli_usage_t usage = {"tlsynth model", usage_text};

/* ---- the fill ------------------------------------------------------------------ */

struct fill_job {
    store_t *s;    /* shared; this job writes only its own shards */
    uint64_t keys; /* N */
    uint64_t seed;
    uint32_t tid; /* this thread owns shards with shard % nthreads == tid */
    uint32_t nthreads;
    uint64_t inserted; /* out: keys this thread inserted */
    int rc;            /* out: 0, -ENOMEM, or -EEXIST (a duplicate key: a bug) */
    uint64_t bad_key;  /* out: the key that failed */
};

/* Upserts n new keys of one shard.  A batched lookup first (absent keys:
 * it only reads) brings their buckets into cache many misses at a time, so
 * the upserts that follow do not wait on memory one key after another.
 * Returns 0 or -errno (-EEXIST: a key was there already) with j->bad_key. */
static int fill_batch(struct fill_job *j, const uint64_t *keys, size_t n, float *out,
                      uint8_t *found)
{
    const uint32_t k = store_value_floats(j->s);
    float value[STORE_MAX_VALUE_FLOATS];
    store_lookup_batch(j->s, keys, n, out, found);
    for (size_t i = 0; i < n; i++) {
        int rc = -EEXIST;
        if (!found[i]) {
            gen_value(keys[i], j->seed, k, value);
            rc = store_upsert(j->s, keys[i], value);
        }
        if (rc != 1) {
            j->bad_key = keys[i];
            return rc < 0 ? rc : -EEXIST;
        }
        j->inserted++;
    }
    return 0;
}

static void *fill_thread(void *arg)
{
    struct fill_job *j = arg;
    const uint32_t shards = store_shards(j->s), k = store_value_floats(j->s),
                   mine = (shards - j->tid + j->nthreads - 1) / j->nthreads;
    const uint32_t subs = store_subs_per_shard(j->s);
    size_t fill[STORE_MAX_SHARDS] = {0};
    uint64_t *counts = calloc((size_t)mine * subs, sizeof *counts);    /* [my shard][sub] */
    uint64_t *bufs = malloc((size_t)mine * FILL_BATCH * sizeof *bufs); /* [my shard][key] */
    float *out = malloc((size_t)FILL_BATCH * k * sizeof *out);         /* lookup's output */
    uint8_t found[FILL_BATCH];
    if (counts == NULL || bufs == NULL || out == NULL) {
        j->rc = -ENOMEM;
        goto out;
    }

    /* walk 1: keys per sub-table of my shards, so that each is sized once,
     * exactly, as the loader sizes it */
    for (uint64_t i = 0; i < j->keys; i++) {
        uint64_t key = store_synthetic_key(i, j->seed);
        uint32_t sh = store_shard_of(j->s, key);
        if (sh % j->nthreads == j->tid)
            counts[(size_t)(sh / j->nthreads) * subs + store_sub_of(j->s, key)]++;
    }
    for (uint32_t sh = j->tid; sh < shards; sh += j->nthreads) {
        const uint64_t *c = counts + (size_t)(sh / j->nthreads) * subs;
        if ((j->rc = store_reserve_shard_exact(j->s, sh, c, NULL)) < 0)
            goto out;
    }

    /* walk 2: keys buffered per shard, inserted FILL_BATCH at a time */
    for (uint64_t i = 0; i < j->keys; i++) {
        uint64_t key = store_synthetic_key(i, j->seed);
        uint32_t sh = store_shard_of(j->s, key);
        if (sh % j->nthreads != j->tid)
            continue;
        uint64_t *buf = bufs + (size_t)(sh / j->nthreads) * FILL_BATCH;
        buf[fill[sh]] = key;
        if (++fill[sh] == FILL_BATCH) {
            if ((j->rc = fill_batch(j, buf, FILL_BATCH, out, found)) != 0)
                goto out;
            fill[sh] = 0;
        }
    }
    for (uint32_t sh = j->tid; sh < shards; sh += j->nthreads) {
        if (fill[sh] == 0)
            continue;
        uint64_t *buf = bufs + (size_t)(sh / j->nthreads) * FILL_BATCH;
        if ((j->rc = fill_batch(j, buf, fill[sh], out, found)) != 0)
            goto out;
    }
out:
    free(counts);
    free(bufs);
    free(out);
    return NULL;
}

/* Fills s with keys 0..keys-1 on `threads` threads.  Returns 0, or -1 with a
 * message printed. */
static int fill(store_t *s, uint64_t keys, uint64_t seed, uint32_t threads)
{
    int ret = -1;
    struct fill_job *jobs = calloc(threads, sizeof *jobs);
    pthread_t *tids = calloc(threads, sizeof *tids);
    if (jobs == NULL || tids == NULL) {
        fprintf(stderr, "tlsynth model: out of memory\n");
        goto out;
    }
    uint32_t started = 0;
    for (uint32_t t = 0; t < threads; t++) {
        jobs[t] = (struct fill_job){.s = s, .keys = keys, .seed = seed, .tid = t, .nthreads = threads};
        int rc = pthread_create(&tids[t], NULL, fill_thread, &jobs[t]);
        if (rc != 0) {
            fprintf(stderr, "tlsynth model: pthread_create: %s\n", strerror(rc));
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
                    "tlsynth model: key %#" PRIx64 " inserted twice (generator or store bug)\n",
                    jobs[t].bad_key);
            failed = 1;
        } else if (jobs[t].rc != 0) {
            fprintf(stderr, "tlsynth model: thread %u: %s\n", t, strerror(-jobs[t].rc));
            failed = 1;
        }
    }
    if (failed)
        goto out;
    if (inserted != keys || store_count(s) != keys) {
        fprintf(stderr,
                "tlsynth model: inserted %" PRIu64 " keys, store counts %" PRIu64
                ", expected %" PRIu64 "\n",
                inserted, store_count(s), keys);
        goto out;
    }
    ret = 0;
out:
    free(jobs);
    free(tids);
    return ret;
}

/* Adds a synthetic MLP's layers (widths w[0..n-1]) to x under dnn.h's names:
 * weights uniform in +-sqrt(3 / fan_in) (unit variance through each layer),
 * biases zero.  The arrays are malloc'd: the caller frees x->dense[*].data.
 * 0, or -1 with a message. */
/* Whether a version of this kind, K, dtype, params and dense arrays is one
 * tlserve serves (model_from_store_ex on a one-key store): 0, or -1 with the
 * reason printed as a warning.  Such a snapshot is still written (a store
 * layout for the storage benchmarks), but nobody is left to find out at
 * load time. */
static int check_servable(const store_options_t *opt, const store_meta_t *meta,
                          const store_extras_t *x)
{
    store_options_t o = *opt;
    o.shards = 1;
    o.expected_keys = 1;
    store_t *probe = NULL;
    if (store_create(&o, &probe) != 0)
        return 0; /* no memory for a probe: the write's own checks still run */
    store_extras_t copy = *x; /* the model takes its arrays: give it copies */
    int rc = 0;
    for (uint32_t l = 0; l < copy.n_dense && rc == 0; l++) {
        float *d = malloc(copy.dense[l].count * sizeof *d);
        if (!d) {
            copy.n_dense = l;
            rc = 1;
            break;
        }
        memcpy(d, x->dense[l].data, copy.dense[l].count * sizeof *d);
        copy.dense[l].data = d;
    }
    model_t *m = NULL;
    store_error_t err = {0};
    if (rc == 0 && model_from_store_ex(probe, meta, &copy, &m, &err) == 0) {
        model_destroy(m); /* the probe store and the copies with it */
        return 0;
    }
    if (rc == 0)
        fprintf(stderr, "tlsynth model: warning: tlserve will not serve this snapshot (a store "
                "for the storage benchmarks only): %s\n", err.msg);
    for (uint32_t l = 0; l < copy.n_dense; l++)
        free((void *)copy.dense[l].data);
    store_destroy(probe);
    return rc == 0 ? -1 : 0;
}

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
        model_dnn_layer_names(l, wn, bn);
        int added = 0;
        if (W && b && store_extras_add_dense(x, wn, W, cw) == 0) {
            added = 1;
            if (store_extras_add_dense(x, bn, b, w[l + 1]) == 0)
                continue;
        }
        fprintf(stderr, "tlsynth model: cannot add MLP layer %u (%" PRIu64 " floats)\n", l, cw);
        if (!added)
            free(W); /* once added, the caller frees it with the others */
        free(b);
        return -1;
    }
    return 0;
}

/* 1 when dir holds a MANIFEST (sound or not), 0 when it does not. */
static int holds_snapshot(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return 0;
    store_error_t err = {0};
    if (store_snapshot_read_meta(dir, NULL, NULL, &err) == 0)
        return 1;
    return err.code != STORE_E_NO_MANIFEST && err.code != STORE_E_IO;
}

/* ---- the command ---------------------------------------------------------------- */

int tlsynth_model_main(int argc, char **argv)
{
    uint64_t keys = 0, seed = 42, version = 1, k = 0, shards = 16, threads = 0;
    const char *out_dir = NULL, *name = "synthetic";
    store_dtype_t dtype = STORE_DTYPE_F32;
    store_model_kind_t kind = STORE_MODEL_LR;
    int have_keys = 0;
    store_extras_t extras = {0};
    uint32_t mlp[MAX_MLP_WIDTHS], mlp_n = 0;

    for (int i = 1; i < argc; i++) {
        const char *v;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage_text, stdout);
            return 0;
        } else if (store_cli_flag(&usage, argc, argv, &i, "--keys", &v)) {
            keys = store_cli_count_arg(&usage, "--keys", v, 0, UINT64_MAX / 2);
            have_keys = 1;
        } else if (store_cli_flag(&usage, argc, argv, &i, "--out", &v)) {
            out_dir = v;
        } else if (store_cli_flag(&usage, argc, argv, &i, "--value-floats", &v)) {
            k = store_cli_count_arg(&usage, "--value-floats", v, 1, STORE_MAX_VALUE_FLOATS);
        } else if (store_cli_flag(&usage, argc, argv, &i, "--dtype", &v)) {
            if (strcmp(v, "f32") == 0)
                dtype = STORE_DTYPE_F32;
            else if (strcmp(v, "f16") == 0)
                dtype = STORE_DTYPE_F16;
            else
                store_cli_usage_error(&usage, "--dtype: '%s' is neither f32 nor f16", v);
        } else if (store_cli_flag(&usage, argc, argv, &i, "--shards", &v)) {
            shards = store_cli_count_arg(&usage, "--shards", v, 1, STORE_MAX_SHARDS);
            if (shards & (shards - 1))
                store_cli_usage_error(&usage, "--shards: %" PRIu64 " is not a power of two",
                                      shards);
        } else if (store_cli_flag(&usage, argc, argv, &i, "--name", &v)) {
            char why[128];
            if (store_model_name_check(v, why, sizeof why) != 0)
                store_cli_usage_error(&usage,
                                      "--name: '%s' must be 1..63 characters of [A-Za-z0-9_.-], "
                                      "not '.' or '..'", v);
            name = v;
        } else if (store_cli_flag(&usage, argc, argv, &i, "--kind", &v)) {
            if (strcmp(v, "lr") == 0)
                kind = STORE_MODEL_LR;
            else if (strcmp(v, "fm") == 0)
                kind = STORE_MODEL_FM;
            else if (strcmp(v, "ffm") == 0)
                kind = STORE_MODEL_FFM;
            else if (strcmp(v, "dnn") == 0)
                kind = STORE_MODEL_DNN;
            else
                store_cli_usage_error(&usage, "--kind: '%s' is not one of lr, fm, ffm, dnn", v);
        } else if (store_cli_flag(&usage, argc, argv, &i, "--version", &v)) {
            version = store_cli_count_arg(&usage, "--version", v, 1, INT64_MAX);
        } else if (store_cli_flag(&usage, argc, argv, &i, "--seed", &v)) {
            seed = store_cli_count_arg(&usage, "--seed", v, 0, UINT64_MAX);
        } else if (store_cli_flag(&usage, argc, argv, &i, "--threads", &v)) {
            threads = store_cli_count_arg(&usage, "--threads", v, 1, MAX_THREADS);
        } else if (store_cli_flag(&usage, argc, argv, &i, "--param", &v)) {
            char key[STORE_PARAM_KEY_MAX];
            const char *eq = strchr(v, '=');
            if (!eq || eq == v || (size_t)(eq - v) >= sizeof key)
                store_cli_usage_error(&usage,
                                      "--param: '%s' is not KEY=VALUE with a 1..31 byte key", v);
            memcpy(key, v, (size_t)(eq - v));
            key[eq - v] = '\0';
            if (store_extras_set(&extras, key, eq + 1) != 0)
                store_cli_usage_error(
                    &usage,
                    "--param: '%s': keys are [A-Za-z0-9_.-], values < 128 printable "
                    "bytes, at most %d params",
                    v, STORE_MAX_PARAMS);
        } else if (store_cli_flag(&usage, argc, argv, &i, "--mlp", &v)) {
            mlp_n = 0;
            for (const char *p = v; *p;) {
                char *e;
                errno = 0;
                unsigned long w = strtoul(p, &e, 10);
                if (e == p || errno || w < 1 || w > 65536 || mlp_n == MAX_MLP_WIDTHS ||
                    (*e && *e != ','))
                    store_cli_usage_error(&usage,
                                          "--mlp: '%s' is not a list of 2..%d widths 1..65536", v,
                                          MAX_MLP_WIDTHS);
                mlp[mlp_n++] = (uint32_t)w;
                p = *e ? e + 1 : e;
            }
            if (mlp_n < 2)
                store_cli_usage_error(&usage, "--mlp: '%s' needs at least two widths", v);
        } else if (argv[i][0] == '-') {
            store_cli_usage_error(&usage, "unknown option '%s'", argv[i]);
        } else {
            store_cli_usage_error(&usage, "unexpected argument '%s'", argv[i]);
        }
    }
    if (!have_keys)
        store_cli_usage_error(&usage, "--keys N is required");
    if (out_dir == NULL || out_dir[0] == '\0')
        store_cli_usage_error(&usage, "--out DIR is required");
    if (strlen(out_dir) >= MAX_PATH)
        store_cli_usage_error(&usage, "--out: the path is longer than %d bytes", MAX_PATH - 1);
    if (k == 0)
        k = kind == STORE_MODEL_LR ? 1 : 8;
    if (threads == 0)
        threads = store_cli_cpu_count(MAX_THREADS);
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
        store_cli_usage_error(&usage, "bad store options: %s", why[0] ? why : "(no reason given)");

    /* fail before a long fill rather than after it: a table larger than the
     * machine's memory would grind for hours and end in an OOM kill */
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    double need = (double)keys * (8.0 + (double)k * (dtype == STORE_DTYPE_F16 ? 2 : 4)) * 1.25;
    if (pages > 0 && page > 0 && need > (double)pages * (double)page) {
        fprintf(stderr, "tlsynth model: %" PRIu64 " keys of %" PRIu64 " %s need about %.1f GiB, "
                "more than this machine's %.1f GiB of memory\n", keys, k,
                dtype == STORE_DTYPE_F16 ? "f16" : "f32", need / (1 << 30),
                (double)pages * (double)page / (1 << 30));
        return 2;
    }
    if (holds_snapshot(out_dir)) {
        fprintf(stderr, "tlsynth model: %s already holds a snapshot\n", out_dir);
        return 1;
    }
    struct stat ost;
    if (stat(out_dir, &ost) == 0 && !S_ISDIR(ost.st_mode)) {
        fprintf(stderr, "tlsynth model: %s exists and is not a directory\n", out_dir);
        return 1;
    }

    int ret = 1;
    store_t *s = NULL;
    struct store_cli_made_dirs made = {0};
    char hb[32], hb2[32];
    store_meta_t meta = {.model_kind = kind, .version = version};
    snprintf(meta.model_name, sizeof meta.model_name, "%s", name);
    if (make_mlp(mlp, mlp_n, seed, &extras) != 0)
        goto out;
    (void)check_servable(&opt, &meta, &extras); /* said before the fill, not after */

    printf("tlsynth model: model %s v%" PRIu64 " (%s), %" PRIu64 " keys x %" PRIu64 " %s, %" PRIu64
           " shards, %" PRIu64 " threads, seed %" PRIu64 "\n",
           name, version, store_model_kind_name(kind), keys, k,
           dtype == STORE_DTYPE_F16 ? "f16" : "f32", shards, threads, seed);
    fflush(stdout);

    int rc = store_create(&opt, &s);
    if (rc != 0) {
        fprintf(stderr, "tlsynth model: store_create: %s\n", strerror(-rc));
        goto out;
    }
    double t0 = store_cli_now_sec();
    if (fill(s, keys, seed, (uint32_t)threads) != 0)
        goto out;
    double filled = store_cli_now_sec() - t0;
    store_stats_t st;
    store_stats(s, &st);
    printf("  fill   %" PRIu64 " keys in %.3f s  (%.2f M keys/s)\n", keys, filled,
           filled > 0 ? (double)keys / filled / 1e6 : 0.0);
    printf("  table  %s  (%.2f B/key, %" PRIu64 " sub-tables, %" PRIu64 " stashed)\n",
           store_cli_human_bytes(st.table_bytes, hb, sizeof hb),
           keys ? (double)st.table_bytes / (double)keys : 0.0, st.subtables, st.stashed);
    fflush(stdout);

    rc = store_cli_mkdir_parents(out_dir, &made);
    if (rc != 0) {
        fprintf(stderr, "tlsynth model: cannot create the parent directories of %s: %s\n",
                out_dir, strerror(-rc));
        goto out;
    }
    store_error_t err = {0};
    t0 = store_cli_now_sec();
    if (store_snapshot_write_ex(s, out_dir, &meta, &extras, &err) != 0) {
        store_cli_print_error(usage.prog, out_dir, &err);
        goto out;
    }
    double wr = store_cli_now_sec() - t0;
    unsigned files;
    uint64_t bytes = dir_bytes(out_dir, &files);
    printf("  write  %s in %u files in %.3f s  (%s/s)  -> %s\n", store_cli_human_bytes(bytes, hb, sizeof hb),
           files, wr, store_cli_human_bytes(wr > 0 ? (uint64_t)((double)bytes / wr) : 0, hb2, sizeof hb2),
           out_dir);
    printf("  total  %" PRIu64 " keys in %.3f s  (%.2f M keys/s)\n", keys, filled + wr,
           filled + wr > 0 ? (double)keys / (filled + wr) / 1e6 : 0.0);
    ret = 0;
out:
    if (ret != 0)
        store_cli_undo_parents(out_dir, &made);
    for (uint32_t l = 0; l < extras.n_dense; l++)
        free(extras.dense[l].data); /* make_mlp's arrays */
    if (s)
        store_destroy(s);
    return ret;
}
