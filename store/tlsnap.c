/*
 * tlsnap.c — the snapshot tool: inspect, check and rewrite store snapshots
 * and delta versions (store/delta.h).
 *
 *   tlsnap info   DIR                        print the manifest (full or delta)
 *   tlsnap verify DIR [--threads T]          full load (checksums, keys) + lookups;
 *                                            a delta: every file and record checked
 *   tlsnap rewrite SRC DST [--threads T]     load SRC, write it again as DST
 *   tlsnap diff OLD NEW OUT                  the delta NEW - OLD, as version NEW of parent OLD
 *   tlsnap compact BASE DELTA... OUT         fold a chain into one full version
 *
 * diff loads both full snapshots, refuses two models whose layout, params or
 * dense arrays differ (a delta carries sparse keys only), and writes
 * store_delta_diff's delta (producer "tlsnap diff").  compact loads BASE,
 * applies each delta in order with store_delta_apply (which refuses a delta
 * whose parent is not the version in hand) and writes the result as a full
 * snapshot with the last delta's version and BASE's params and dense arrays.
 *
 * Synthetic models are the model layer's business: `tlsynth model` (model/)
 * makes them; tlsnap's gen command only says so.
 *
 * info checks the MANIFEST with store_snapshot_read_meta(), then decodes it
 * again with the loader's store__snap_read_manifest() (store/'s internal
 * API: tlsnap lives here) to list K, dtype and the shard files; it reads no
 * shard file.
 *
 * verify loads with store_snapshot_load_ex() (which checks every checksum,
 * count and key), checks that tlserve could serve it (model_from_store_ex:
 * the kind's params against K and the dense arrays, as a load does), then
 * re-reads every entry: it iterates each shard and looks the keys up again
 * in batches, comparing values bit for bit, so that the read path and the
 * iteration path of the table agree.
 *
 * rewrite loads SRC with store_snapshot_load_ex (params and dense arrays
 * included) and writes the same model, meta and extras with
 * store_snapshot_write_ex: the way to bring a snapshot written before the
 * MANIFEST carried a hash seed, or by a store sized for other than its
 * keys, to one that loads in bucket order (the fast path), or to check that
 * a snapshot survives a round trip.
 *
 * THREAD SAFETY: a command-line program; verify's threads only read.
 * Exit status: 0 ok, 1 failure, 2 usage.
 */
#include "model/model.h"
#include "store/cli.h"
#include "store/delta.h"
#include "store/manifest.h"
#include "store/snapshot_internal.h"
#include "store/store.h"
#include "store/store_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 1024
#define LOOKUP_BATCH 256

/* ---- small helpers ------------------------------------------------------ */

static const char *dtype_name(store_dtype_t d)
{
    return d == STORE_DTYPE_F16 ? "f16" : "f32";
}

/* ---- usage and flags ------------------------------------------------------ */

static const char usage_main[] =
    "usage: tlsnap <command> [options]\n"
    "\n"
    "commands:\n"
    "  info    print a snapshot's manifest\n"
    "  verify  load a snapshot fully (checksums, keys) and re-read every entry\n"
    "  rewrite load a snapshot and write it again (hash seed, bucket order)\n"
    "  diff    write the delta between two full snapshots\n"
    "  compact fold a full snapshot and its deltas into one full snapshot\n"
    "\n"
    "'tlsnap <command> --help' describes a command's options.  Synthetic models:\n"
    "'tlsynth model' (tlsynth model --help).\n";

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
    "A delta (tlsnap info says \"delta of\") is opened with every file and\n"
    "record checked (checksums, sorted unique keys, shards, finite values)\n"
    "and its upserts and deletes per shard are printed.\n"
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
    "order, so it loads on the fast path: use it on snapshots written without\n"
    "a hash seed (tlsnap info says so) or by a store that grew.\n"
    "\n"
    "  --threads T       loader threads (default 0 = one per core)\n";

static const char usage_diff[] =
    "usage: tlsnap diff OLD NEW OUT [--threads T]\n"
    "\n"
    "Loads the full snapshots OLD and NEW (same model name, kind, K, dtype,\n"
    "shard count, params and dense arrays) and writes into OUT (created\n"
    "atomically; it must not exist) the delta of version NEW against parent\n"
    "OLD: NEW's keys that OLD lacks or holds with other values as upserts,\n"
    "OLD's keys that NEW lacks as deletes.  Producer \"tlsnap diff\".  NEW's\n"
    "version must be above OLD's (swapped arguments would write a delta that\n"
    "undoes NEW).\n"
    "\n"
    "  --threads T       loader threads (default 0 = one per core)\n";

static const char usage_compact[] =
    "usage: tlsnap compact BASE DELTA... OUT [--threads T]\n"
    "\n"
    "Loads the full snapshot BASE, applies each DELTA in order (each must be\n"
    "a delta of the version before it: same model and layout, every deleted\n"
    "key present) and writes the result into OUT as one full snapshot with the\n"
    "last delta's version and BASE's params and dense arrays.\n"
    "\n"
    "  --threads T       loader threads (default 0 = one per core)\n";

static int is_help(const char *a)
{
    return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0;
}

/* ---- info ----------------------------------------------------------------- */

/* Reads and decodes dir/MANIFEST with the loader's own reader.  Returns 0
 * or -1 with a message printed.  On success m->shards is owned by the
 * caller (store__manifest_free). */
static int read_manifest(const char *dir, manifest_t *m)
{
    store_error_t err = {0};
    int dirfd = store__snap_open_dir(dir, &err);
    int rc = dirfd < 0 ? -1 : store__snap_read_manifest(dirfd, dir, m, &err);
    if (dirfd >= 0)
        close(dirfd);
    if (rc != 0)
        store_cli_print_error("tlsnap info", dir, &err);
    return rc;
}

static int cmd_info(int argc, char **argv)
{
    const store_cli_usage_t U = {"tlsnap info", usage_info};
    const char *dir = NULL;
    int brief = 0;
    for (int i = 0; i < argc; i++) {
        if (is_help(argv[i])) {
            fputs(U.text, stdout);
            return 0;
        } else if (strcmp(argv[i], "--brief") == 0) {
            brief = 1;
        } else if (argv[i][0] == '-') {
            store_cli_usage_error(&U, "unknown option '%s'", argv[i]);
        } else if (dir != NULL) {
            store_cli_usage_error(&U, "unexpected argument '%s' (one DIR only)", argv[i]);
        } else {
            dir = argv[i];
        }
    }
    if (dir == NULL)
        store_cli_usage_error(&U, "DIR is required");

    store_meta_t meta;
    uint64_t entries = 0;
    store_error_t err = {0};
    if (store_snapshot_read_meta(dir, &meta, &entries, &err) != 0) {
        store_cli_print_error(U.prog, dir, &err);
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
    const int delta = m.kind == MANIFEST_KIND_DELTA;
    uint64_t deletes = 0;
    for (uint32_t i = 0; i < m.shard_count; i++)
        deletes += m.shards[i].deletes;
    if (meta.parent_version)
        printf("  version    %" PRIu64 " (%s of %" PRIu64 ")\n", meta.version,
               delta ? "delta" : "full snapshot naming a parent", meta.parent_version);
    else
        printf("  version    %" PRIu64 " (full)\n", meta.version);
    printf("  created    %s (%" PRIu64 ")\n", created, meta.created_unix);
    if (m.producer[0])
        printf("  producer   %s\n", m.producer);
    if (delta)
        printf("  changes    %" PRIu64 " upserts, %" PRIu64 " deletes\n", entries, deletes);
    else
        printf("  entries    %" PRIu64 "\n", entries);
    printf("  values     %u x %s (%u B/entry with key)\n", m.value_floats, dtype_name(m.dtype),
           8 + m.value_floats * (m.dtype == STORE_DTYPE_F16 ? 2u : 4u));
    printf("  shards     %u\n", m.shard_count);
    printf("  format     %u\n", m.format_version);
    if (m.hash_seed)
        printf("  hash seed  %#" PRIx64 " (loads in bucket order)\n", m.hash_seed);
    else
        printf("  hash seed  none (loads at random, slower; 'tlsnap rewrite' adds one)\n");
    printf("  data       %s in shard files\n", store_cli_human_bytes(bytes, hb, sizeof hb));
    for (uint32_t i = 0; i < m.n_params; i++)
        printf("  param      %s = %s\n", m.params[i].key, m.params[i].value);
    for (uint32_t i = 0; i < m.n_dense; i++)
        printf("  dense      %-16s %10" PRIu64 " floats  %016" PRIx64 "  %s\n", m.dense[i].name,
               (m.dense[i].bytes - DENSE_HEADER_BYTES) / 4, m.dense[i].xxh3, m.dense[i].file);
    if (!brief && m.shard_count > 0 && delta) {
        printf("\n  %5s  %12s  %12s  %14s  %-16s  %s\n", "shard", "upserts", "deletes", "bytes",
               "xxh3", "file");
        for (uint32_t i = 0; i < m.shard_count; i++) {
            const manifest_shard_t *sh = &m.shards[i];
            printf("  %5u  %12" PRIu64 "  %12" PRIu64 "  %14" PRIu64 "  %016" PRIx64 "  %s\n",
                   sh->index, sh->entries, sh->deletes, sh->bytes, sh->xxh3, sh->file);
        }
    } else if (!brief && m.shard_count > 0) {
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
    double t0 = store_cli_now_sec();
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
    double dt = store_cli_now_sec() - t0;
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

/* verify on a delta: store_delta_open checks every file and record. */
static int verify_delta(const char *dir)
{
    store_delta_t *d = NULL;
    store_error_t err = {0};
    double t0 = store_cli_now_sec();
    if (store_delta_open(dir, &d, &err) != 0) {
        store_cli_print_error("tlsnap verify", dir, &err);
        return 1;
    }
    const store_delta_info_t *in = store_delta_info(d);
    printf("tlsnap verify: %s: model %s v%" PRIu64 " (%s), delta of v%" PRIu64 " by \"%s\", "
           "%u x %s, %u shards\n",
           dir, in->meta.model_name, in->meta.version, store_model_kind_name(in->meta.model_kind),
           in->meta.parent_version, in->producer, in->layout.value_floats,
           dtype_name(in->layout.dtype), in->layout.shards);
    printf("  check  %" PRIu64 " upserts, %" PRIu64 " deletes in %.3f s: checksums, order, "
           "uniqueness, shards and values ok\n",
           in->upserts, in->deletes, store_cli_now_sec() - t0);
    for (uint32_t i = 0; i < in->layout.shards; i++) {
        uint64_t u = 0, dl = 0;
        store_delta_shard_counts(d, i, &u, &dl);
        printf("  shard %5u  %12" PRIu64 " upserts  %12" PRIu64 " deletes\n", i, u, dl);
    }
    printf("OK\n");
    store_delta_close(d);
    return 0;
}

static int cmd_verify(int argc, char **argv)
{
    const store_cli_usage_t U = {"tlsnap verify", usage_verify};
    const char *dir = NULL;
    uint64_t threads = 0;
    int lookup = 1;
    for (int i = 0; i < argc; i++) {
        const char *v;
        if (is_help(argv[i])) {
            fputs(U.text, stdout);
            return 0;
        } else if (store_cli_flag(&U, argc, argv, &i, "--threads", &v)) {
            threads = store_cli_count_arg(&U, "--threads", v, 0, MAX_THREADS);
        } else if (strcmp(argv[i], "--no-lookup") == 0) {
            lookup = 0;
        } else if (argv[i][0] == '-') {
            store_cli_usage_error(&U, "unknown option '%s'", argv[i]);
        } else if (dir != NULL) {
            store_cli_usage_error(&U, "unexpected argument '%s' (one DIR only)", argv[i]);
        } else {
            dir = argv[i];
        }
    }
    if (dir == NULL)
        store_cli_usage_error(&U, "DIR is required");

    uint32_t nthreads = threads ? (uint32_t)threads : store_cli_cpu_count(MAX_THREADS);
    store_t *s = NULL;
    model_t *m = NULL;
    store_meta_t meta;
    store_error_t err = {0};
    char hb[32];
    int ret = 1;
    if (store_snapshot_read_meta(dir, &meta, NULL, &err) == 0 && meta.parent_version != 0)
        return verify_delta(dir);

    double t0 = store_cli_now_sec();
    store_extras_t x;
    if (store_snapshot_load_ex(dir, (int)threads, &s, &meta, &x, &err) != 0) {
        store_cli_print_error(U.prog, dir, &err);
        goto out;
    }
    double dt = store_cli_now_sec() - t0;
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
           store_cli_human_bytes(st.table_bytes, hb, sizeof hb), n ? (double)st.table_bytes / (double)n : 0.0,
           st.subtables, st.stashed);
    fflush(stdout);
    if (lookup && lookup_check(s, nthreads, n) != 0) {
        store_extras_free(&x);
        goto out;
    }
    /* What a load into tlserve checks beyond the files: the kind's params
     * against K and the dense arrays.  m owns s and x from here. */
    if (model_from_store_ex(s, &meta, &x, &m, &err) != 0) {
        printf("  model  NOT servable by tlserve: %s\n", err.msg);
        store_extras_free(&x);
        goto out;
    }
    printf("  model  servable by tlserve (%s)\n", store_model_kind_name(meta.model_kind));
    printf("OK\n");
    ret = 0;
out:
    if (m)
        model_destroy(m);
    else if (s)
        store_destroy(s);
    return ret;
}

/* ---- rewrite -------------------------------------------------------------- */

/* OUT checked before the loads (seconds to minutes): 0, or -1 (said) when it
 * already holds a snapshot, is not a directory, or its name is a version
 * number other than version (0: not known yet): a repository refuses a
 * directory holding another version than its name. */
static int check_out(const char *prog, const char *out, uint64_t version)
{
    struct stat st;
    char path[4096];
    if (stat(out, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) {
            fprintf(stderr, "%s: %s exists and is not a directory\n", prog, out);
            return -1;
        }
        snprintf(path, sizeof path, "%s/MANIFEST", out);
        if (lstat(path, &st) == 0) {
            fprintf(stderr, "%s: %s already holds a snapshot (a MANIFEST): give a new "
                    "directory\n", prog, out);
            return -1;
        }
    }
    snprintf(path, sizeof path, "%s", out);
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        path[--n] = '\0';
    const char *slash = strrchr(path, '/');
    uint64_t named = 0;
    if (version && store_version_parse(slash ? slash + 1 : path, &named) && named != version) {
        fprintf(stderr, "%s: %s is named version %" PRIu64 " but holds version %" PRIu64 ": a "
                "repository refuses a directory holding another version than its name\n", prog,
                out, named, version);
        return -1;
    }
    return 0;
}

static int cmd_rewrite(int argc, char **argv)
{
    const store_cli_usage_t U = {"tlsnap rewrite", usage_rewrite};
    const char *src = NULL, *dst = NULL;
    uint64_t threads = 0;
    for (int i = 0; i < argc; i++) {
        const char *v;
        if (is_help(argv[i])) {
            fputs(U.text, stdout);
            return 0;
        } else if (store_cli_flag(&U, argc, argv, &i, "--threads", &v)) {
            threads = store_cli_count_arg(&U, "--threads", v, 0, MAX_THREADS);
        } else if (argv[i][0] == '-') {
            store_cli_usage_error(&U, "unknown option '%s'", argv[i]);
        } else if (src == NULL) {
            src = argv[i];
        } else if (dst == NULL) {
            dst = argv[i];
        } else {
            store_cli_usage_error(&U, "unexpected argument '%s' (SRC and DST only)", argv[i]);
        }
    }
    if (src == NULL || dst == NULL)
        store_cli_usage_error(&U, "SRC and DST are required");
    store_meta_t smeta;
    if (check_out(U.prog, dst, store_snapshot_read_meta(src, &smeta, NULL, NULL) == 0
                                   ? smeta.version : 0) != 0)
        return 1;

    store_t *s = NULL;
    store_meta_t meta;
    store_extras_t x;
    memset(&x, 0, sizeof x);
    store_error_t err = {0};
    int ret = 1;

    double t0 = store_cli_now_sec();
    if (store_snapshot_load_ex(src, (int)threads, &s, &meta, &x, &err) != 0) {
        store_cli_print_error(U.prog, src, &err);
        return 1;
    }
    double load_s = store_cli_now_sec() - t0;
    uint64_t n = store_count(s);
    printf("tlsnap rewrite: %s: model %s v%" PRIu64 " (%s), %" PRIu64 " entries, %u x %s, "
           "%u shards, %u params, %u dense arrays; loaded in %.3f s\n",
           src, meta.model_name, meta.version, store_model_kind_name(meta.model_kind), n,
           store_value_floats(s), dtype_name(store_dtype(s)), store_shards(s), x.n_params,
           x.n_dense, load_s);
    fflush(stdout);
    int e = store_cli_mkdir_parents(dst, NULL);
    if (e != 0) {
        fprintf(stderr, "%s: %s: cannot create its parent directories: %s\n", U.prog, dst,
                strerror(-e));
        goto out;
    }
    t0 = store_cli_now_sec();
    if (store_snapshot_write_ex(s, dst, &meta, &x, &err) != 0) {
        store_cli_print_error(U.prog, dst, &err);
        goto out;
    }
    printf("  wrote  %s in %.3f s (hash seed %#" PRIx64 ", bucket order)\n", dst,
           store_cli_now_sec() - t0, store_hash_seed(s));
    printf("OK\n");
    ret = 0;
out:
    store_extras_free(&x);
    store_destroy(s);
    return ret;
}

/* ---- diff and compact ----------------------------------------------------- */

/* Names the first difference between two models' params and dense arrays
 * into why; 0 when they are the same. */
static int extras_differ(const store_extras_t *a, const store_extras_t *b, char *why, size_t len)
{
    if (a->n_params != b->n_params || a->n_dense != b->n_dense) {
        snprintf(why, len, "%u params and %u dense arrays vs %u and %u", a->n_params, a->n_dense,
                 b->n_params, b->n_dense);
        return 1;
    }
    for (uint32_t i = 0; i < a->n_params; i++) {
        const char *v = store_extras_get(b, a->params[i].key);
        if (!v || strcmp(v, a->params[i].value) != 0) {
            snprintf(why, len, "param %s is \"%s\" vs \"%s\"", a->params[i].key,
                     a->params[i].value, v ? v : "(absent)");
            return 1;
        }
    }
    for (uint32_t i = 0; i < a->n_dense; i++) {
        const store_dense_t *d = store_extras_dense(b, a->dense[i].name);
        if (!d || d->count != a->dense[i].count ||
            memcmp(d->data, a->dense[i].data, d->count * sizeof(float)) != 0) {
            snprintf(why, len, "dense array %s differs", a->dense[i].name);
            return 1;
        }
    }
    return 0;
}

/* Parses "PATH... [--threads T]" into paths (at most max).  Returns the
 * number of paths. */
static int parse_paths(const store_cli_usage_t *U, int argc, char **argv, const char **paths,
                       int max, uint64_t *threads)
{
    int n = 0;
    for (int i = 0; i < argc; i++) {
        const char *v;
        if (is_help(argv[i])) {
            fputs(U->text, stdout);
            exit(0);
        } else if (store_cli_flag(U, argc, argv, &i, "--threads", &v)) {
            *threads = store_cli_count_arg(U, "--threads", v, 0, MAX_THREADS);
        } else if (argv[i][0] == '-') {
            store_cli_usage_error(U, "unknown option '%s'", argv[i]);
        } else if (n == max) {
            store_cli_usage_error(U, "too many arguments ('%s')", argv[i]);
        } else {
            paths[n++] = argv[i];
        }
    }
    return n;
}

static int cmd_diff(int argc, char **argv)
{
    const store_cli_usage_t U = {"tlsnap diff", usage_diff};
    const char *p[3];
    uint64_t threads = 0;
    if (parse_paths(&U, argc, argv, p, 3, &threads) != 3)
        store_cli_usage_error(&U, "OLD, NEW and OUT are required");
    store_t *a = NULL, *b = NULL;
    store_meta_t ma, mb;
    store_extras_t xa, xb;
    memset(&xa, 0, sizeof xa);
    memset(&xb, 0, sizeof xb);
    store_error_t err = {0};
    int ret = 1;
    /* Versions first, from the manifests: OLD and NEW swapped (the delta would undo NEW) or
     * equal is refused before two loads. */
    if (store_snapshot_read_meta(p[0], &ma, NULL, &err) == 0 &&
        store_snapshot_read_meta(p[1], &mb, NULL, &err) == 0 && mb.version <= ma.version) {
        fprintf(stderr,
                "%s: NEW %s is version %" PRIu64 ", not newer than OLD %s (version %" PRIu64
                "): a delta leads from a version to a later one (OLD and NEW swapped?)\n",
                U.prog, p[1], mb.version, p[0], ma.version);
        goto out;
    }
    if (check_out(U.prog, p[2], err.code == STORE_OK ? mb.version : 0) != 0)
        goto out;
    if (store_snapshot_load_ex(p[0], (int)threads, &a, &ma, &xa, &err) != 0) {
        store_cli_print_error(U.prog, p[0], &err);
        goto out;
    }
    if (store_snapshot_load_ex(p[1], (int)threads, &b, &mb, &xb, &err) != 0) {
        store_cli_print_error(U.prog, p[1], &err);
        goto out;
    }
    char why[256];
    if (extras_differ(&xa, &xb, why, sizeof why)) {
        fprintf(stderr, "%s: %s and %s: %s; a delta carries sparse keys only\n", U.prog, p[0],
                p[1], why);
        goto out;
    }
    if (store_cli_mkdir_parents(p[2], NULL) != 0) {
        fprintf(stderr, "%s: %s: cannot create its parent directories\n", U.prog, p[2]);
        goto out;
    }
    uint64_t ups = 0, dels = 0;
    double t0 = store_cli_now_sec();
    if (store_delta_diff(a, &ma, b, &mb, p[2], "tlsnap diff", &ups, &dels, &err) != 0) {
        store_cli_print_error(U.prog, p[2], &err);
        goto out;
    }
    printf("tlsnap diff: %s: model %s v%" PRIu64 " -> v%" PRIu64 ": %" PRIu64 " upserts, %" PRIu64
           " deletes, written in %.3f s\nOK\n",
           p[2], ma.model_name, ma.version, mb.version, ups, dels, store_cli_now_sec() - t0);
    ret = 0;
out:
    store_extras_free(&xa);
    store_extras_free(&xb);
    store_destroy(a);
    store_destroy(b);
    return ret;
}

#define COMPACT_MAX_PATHS 1026 /* BASE, up to 1024 deltas, OUT */

static int cmd_compact(int argc, char **argv)
{
    const store_cli_usage_t U = {"tlsnap compact", usage_compact};
    static const char *p[COMPACT_MAX_PATHS];
    uint64_t threads = 0;
    int n = parse_paths(&U, argc, argv, p, COMPACT_MAX_PATHS, &threads);
    if (n < 3)
        store_cli_usage_error(&U, "BASE, at least one DELTA and OUT are required");
    store_t *s = NULL;
    store_meta_t meta;
    store_extras_t x;
    memset(&x, 0, sizeof x);
    store_error_t err = {0};
    int ret = 1;
    if (check_out(U.prog, p[n - 1], 0) != 0)
        goto out;
    if (store_snapshot_load_ex(p[0], (int)threads, &s, &meta, &x, &err) != 0) {
        store_cli_print_error(U.prog, p[0], &err);
        goto out;
    }
    printf("tlsnap compact: %s: model %s v%" PRIu64 ", %" PRIu64 " entries\n", p[0],
           meta.model_name, meta.version, store_count(s));
    for (int i = 1; i < n - 1; i++) {
        store_delta_t *d = NULL;
        if (store_delta_open(p[i], &d, &err) != 0) {
            store_cli_print_error(U.prog, p[i], &err);
            goto out;
        }
        const store_delta_info_t *in = store_delta_info(d);
        uint64_t ups = in->upserts, dels = in->deletes;
        int rc = store_delta_apply(s, &meta, d, &err);
        store_delta_close(d);
        if (rc != 0) {
            store_cli_print_error(U.prog, p[i], &err);
            goto out;
        }
        printf("  apply  %s: v%" PRIu64 ", %" PRIu64 " upserts, %" PRIu64 " deletes -> %" PRIu64
               " entries\n",
               p[i], meta.version, ups, dels, store_count(s));
    }
    if (check_out(U.prog, p[n - 1], meta.version) != 0)
        goto out;
    if (store_cli_mkdir_parents(p[n - 1], NULL) != 0) {
        fprintf(stderr, "%s: %s: cannot create its parent directories\n", U.prog, p[n - 1]);
        goto out;
    }
    if (store_snapshot_write_ex(s, p[n - 1], &meta, &x, &err) != 0) {
        store_cli_print_error(U.prog, p[n - 1], &err);
        goto out;
    }
    printf("  wrote  %s: full version %" PRIu64 "\nOK\n", p[n - 1], meta.version);
    ret = 0;
out:
    store_extras_free(&x);
    store_destroy(s);
    return ret;
}

/* ---- main ----------------------------------------------------------------- */

static const store_cli_usage_t usage_main_u = {"tlsnap", usage_main};

int main(int argc, char **argv)
{
    if (argc < 2)
        store_cli_usage_error(&usage_main_u, "a command is required");
    const char *cmd = argv[1];
    if (is_help(cmd) || strcmp(cmd, "help") == 0) {
        const char *topic = argc > 2 ? argv[2] : "";
        fputs(strcmp(topic, "info") == 0     ? usage_info
              : strcmp(topic, "verify") == 0 ? usage_verify
              : strcmp(topic, "rewrite") == 0 ? usage_rewrite
              : strcmp(topic, "diff") == 0    ? usage_diff
              : strcmp(topic, "compact") == 0 ? usage_compact
                                             : usage_main,
              stdout);
        return 0;
    }
    if (strcmp(cmd, "gen") == 0) {
        fprintf(stderr, "tlsnap: gen moved to 'tlsynth model' (same options)\n");
        return 2;
    }
    if (strcmp(cmd, "info") == 0)
        return cmd_info(argc - 2, argv + 2);
    if (strcmp(cmd, "verify") == 0)
        return cmd_verify(argc - 2, argv + 2);
    if (strcmp(cmd, "rewrite") == 0)
        return cmd_rewrite(argc - 2, argv + 2);
    if (strcmp(cmd, "diff") == 0)
        return cmd_diff(argc - 2, argv + 2);
    if (strcmp(cmd, "compact") == 0)
        return cmd_compact(argc - 2, argv + 2);
    store_cli_usage_error(&usage_main_u, "unknown command '%s'", cmd);
}
