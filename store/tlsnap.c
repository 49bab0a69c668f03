/*
 * tlsnap.c — the snapshot tool: inspect, check and rewrite store snapshots.
 *
 *   tlsnap info   DIR                        print the manifest
 *   tlsnap verify DIR [--threads T]          full load (checksums, keys) + lookups
 *   tlsnap rewrite SRC DST [--threads T]     load SRC, write it again as DST
 *
 * Synthetic models are the model layer's business: `tlsynth model` (model/)
 * makes them; tlsnap's gen command only says so.
 *
 * info checks the MANIFEST with store_snapshot_read_meta(), then decodes it
 * again with the loader's store__snap_read_manifest() (store/'s internal
 * API: tlsnap lives here) to list K, dtype and the shard files; it reads no
 * shard file.
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
 * THREAD SAFETY: a command-line program; verify's threads only read.
 * Exit status: 0 ok, 1 failure, 2 usage.
 */
#include "store/cli.h"
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
    printf("  data       %s in shard files\n", store_cli_human_bytes(bytes, hb, sizeof hb));
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
    store_meta_t meta;
    store_error_t err = {0};
    char hb[32];
    int ret = 1;

    double t0 = store_cli_now_sec();
    if (store_snapshot_load(dir, (int)threads, &s, &meta, &err) != 0) {
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
    store_cli_usage_error(&usage_main_u, "unknown command '%s'", cmd);
}
