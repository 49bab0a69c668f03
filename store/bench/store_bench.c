/*
 * store_bench.c — the store benchmark: what an entry costs in resident
 * memory, how fast batched lookups run next to this machine's own limit for
 * random memory reads, and how fast a snapshot loads — all in one run, with
 * std::unordered_map (umap_baseline.cc) as the yardstick.
 *
 * PHASES (in this order, so that no phase's memory or caches disturb the
 * next; single-core phases are pinned to one CPU)
 *   1. baseline  std::unordered_map<uint64_t, float> on M keys: RSS delta,
 *                then L find()s in the random pattern below; freed and
 *                malloc_trim()ed before anything else runs.
 *   2. build     N keys upserted (one writer thread per group of shards)
 *                into a store sized for E keys (--expected-keys, default
 *                N; a smaller E makes it grow, as a trainer's store does);
 *                bytes_per_entry = RSS delta / N.
 *   3. lookups   L present keys, then L absent keys: store_lookup_batch in
 *                batches of 1024 drawn uniformly at random, one core.
 *   4. snapshot  store_snapshot_write into a fresh dir under --tmp; then the
 *                store is destroyed.
 *   5. limit     a plain uint64_t array of table_bytes (2 MiB aligned,
 *                MADV_HUGEPAGE, filled): L random 8-byte reads in the same
 *                batches, __builtin_prefetch D ahead (D = 16, 32, 64, 128;
 *                the best counts: on some machines, VMs especially, deeper
 *                prefetch keeps more misses in flight); unmapped.
 *   6. load      store_snapshot_load from a warm page cache on all cores,
 *                twice (the first load's table memory may be new to a VM's
 *                host, which costs system time; the second reuses what the
 *                first freed); both printed, load_entries_per_s the faster;
 *                peak RSS via clear_refs + VmHWM; user and system CPU time
 *                (getrusage); the loaded store checked.
 *
 * KEYS AND VALUES
 *   key(i) = store_mix64(seed + i), splitmix64's output function, a
 *   bijection of the 64-bit integers: keys 0..N-1 are distinct, absent keys
 *   are key(N + j), and no array of N keys is ever held, so phase 2's RSS
 *   delta sees the table and nothing else.  Float j of a key's value is made
 *   from the key's bits and is exact in the storage dtype (11 significant
 *   bits for f16, 24 for f32), so every answer is checked bit for bit
 *   without storing anything.
 *
 * WHY THE FIGURES ARE HONEST
 *   - Memory is what the kernel says is resident (Rss of
 *     /proc/self/smaps_rollup before and after), not what the store claims;
 *     the store's own accounting (table_bytes) is printed next to it.
 *   - Every timed lookup is checked (found or not, value bit-exact); a wrong
 *     answer exits 1.  Checks run outside the timed spans; key generation
 *     runs inside them, as it would in a server.
 *   - The limit loop makes its indices with the same operations the lookup
 *     loop uses to make keys (one PRNG step, one mix, one range reduction),
 *     in the same batches, so lookups/limit compares memory work with memory
 *     work.  It has huge pages and prefetch and is the best of four
 *     distances: it is the best this core does, not a strawman.
 *
 * THREAD SAFETY: a program.  In phase 2 each writer thread owns whole
 * shards (the store's one-writer-per-shard rule); the loader has its own.
 *
 * PARTS: store_bench.h (shared structs and key/value generators),
 * store_bench_env.c (temp dir, errors, clocks, /proc, pinning, output),
 * store_bench_flags.c (flags); this file holds the phases and main.
 */
#include "store_bench.h"

/* ---- checks (outside the timed spans) -------------------------------------- */

static void check_values(const char *phase, const uint64_t *keys, size_t n, const float *out,
                         uint32_t k, store_dtype_t dt)
{
    for (size_t i = 0; i < n; i++) {
        for (uint32_t j = 0; j < k; j++) {
            float want = value_of(keys[i], j, dt);
            float got = out[i * k + j];
            if (memcmp(&want, &got, sizeof want) != 0)
                fatal("%s: key %#018" PRIx64 " float %u: got %.9g, inserted %.9g", phase, keys[i],
                      j, (double)got, (double)want);
        }
    }
}

/* Present keys: all found, values exact.  On a short count, asks again with
 * found[] to name the key. */
static void check_hits(const char *phase, const store_t *s, const uint64_t *keys, size_t n,
                       size_t found, struct bufs *b, uint32_t k, store_dtype_t dt)
{
    if (found != n) {
        store_lookup_batch(s, keys, n, b->out, b->found);
        for (size_t i = 0; i < n; i++)
            if (!b->found[i])
                fatal("%s: key %#018" PRIx64 " was inserted but is not found", phase, keys[i]);
        fatal("%s: store_lookup_batch returned %zu found for %zu present keys", phase, found, n);
    }
    check_values(phase, keys, n, b->out, k, dt);
}

/* Absent keys: none found, zeros written. */
static void check_misses(const char *phase, const store_t *s, const uint64_t *keys, size_t n,
                         size_t found, struct bufs *b, uint32_t k)
{
    if (found != 0) {
        store_lookup_batch(s, keys, n, b->out, b->found);
        for (size_t i = 0; i < n; i++)
            if (b->found[i])
                fatal("%s: key %#018" PRIx64 " was never inserted but is found", phase, keys[i]);
        fatal("%s: store_lookup_batch returned %zu found for %zu absent keys", phase, found, n);
    }
    for (size_t i = 0; i < n * k; i++)
        if (b->out[i] != 0.0f)
            fatal("%s: absent key %#018" PRIx64 " got value %.9g, not 0", phase, keys[i / k],
                  (double)b->out[i]);
}

/* ---- phase 1: std::unordered_map ------------------------------------------- */

struct baseline {
    double bytes_per_entry;
    double lookups_per_s;
};

static struct baseline run_baseline(const struct config *c, struct bufs *b)
{
    const uint64_t m_keys = c->baseline_keys;
    float vals[BATCH];
    umap_t *m;

    note("baseline: std::unordered_map with %" PRIu64 " keys", m_keys);
    malloc_trim(0);
    struct mem before = mem_now();
    int rc = umap_create(m_keys, &m);
    if (rc != 0)
        fatal("baseline: cannot reserve an unordered_map of %" PRIu64 " keys: %s", m_keys,
              strerror(-rc));
    for (uint64_t i = 0; i < m_keys;) {
        size_t n = m_keys - i < BATCH ? (size_t)(m_keys - i) : BATCH;
        for (size_t j = 0; j < n; j++) {
            b->keys[j] = key_of(c->seed, i + j);
            vals[j] = value_of(b->keys[j], 0, STORE_DTYPE_F32);
        }
        rc = umap_insert_batch(m, b->keys, vals, n);
        if (rc == -EEXIST)
            fatal("baseline: a generated key repeats (the mixer is not a bijection?)");
        if (rc != 0)
            fatal("baseline: out of memory after %" PRIu64 " of %" PRIu64 " keys", i, m_keys);
        i += n;
    }
    malloc_trim(0);
    struct mem after = mem_now();
    if (umap_size(m) != m_keys)
        fatal("baseline: map holds %" PRIu64 " keys, expected %" PRIu64, umap_size(m), m_keys);

    /* the same draw as the store's lookups: uniform index, then key_of */
    uint64_t rng = c->seed ^ 0x5eed0001u;
    double spent = 0;
    for (uint64_t done = 0; done < c->lookups;) {
        size_t n = c->lookups - done < BATCH ? (size_t)(c->lookups - done) : BATCH;
        double t0 = now_s();
        for (size_t j = 0; j < n; j++)
            b->keys[j] = key_of(c->seed, mem_limit_below(mem_limit_rand(&rng), m_keys));
        size_t found = umap_find_batch(m, b->keys, n, b->out);
        spent += now_s() - t0;
        if (found != n)
            fatal("baseline: unordered_map found %zu of %zu present keys", found, n);
        check_values("baseline", b->keys, n, b->out, 1, STORE_DTYPE_F32);
        done += n;
    }
    umap_destroy(m);

    struct baseline r = {
        .bytes_per_entry = ((double)after.rss - (double)before.rss) / (double)m_keys,
        .lookups_per_s = (double)c->lookups / spent,
    };
    return r;
}

/* ---- phase 2: build ---------------------------------------------------------- */

struct builder {
    store_t *s;
    const struct config *c;
    uint32_t id, count; /* owns the shards with shard % count == id */
    uint64_t inserted;
    int rc;             /* 0, -EEXIST (a key was not new) or store_upsert's error */
    uint64_t bad_key;
    pthread_t th;
};

static void *build_main(void *arg)
{
    struct builder *w = arg;
    const struct config *c = w->c;
    float v[STORE_MAX_VALUE_FLOATS];

    for (uint64_t i = 0; i < c->keys; i++) {
        uint64_t key = key_of(c->seed, i);
        if (store_shard_of(w->s, key) % w->count != w->id)
            continue;
        for (uint32_t j = 0; j < c->value_floats; j++)
            v[j] = value_of(key, j, c->dtype);
        int r = store_upsert(w->s, key, v);
        if (r != 1) {
            w->rc = r == 0 ? -EEXIST : r;
            w->bad_key = key;
            return NULL;
        }
        w->inserted++;
    }
    return NULL;
}

static store_t *build_store(const struct config *c, double *seconds)
{
    store_options_t opt = {
        .value_floats = c->value_floats,
        .dtype = c->dtype,
        .shards = c->shards,
        .expected_keys = c->expected_keys,
    };
    store_t *s;
    int rc = store_create(&opt, &s);
    if (rc != 0)
        fatal("build: store_create: %s", strerror(-rc));

    uint32_t count = c->threads < store_shards(s) ? c->threads : store_shards(s);
    struct builder *w = calloc(count, sizeof *w);
    if (!w)
        fatal("build: out of memory for %u builder threads", count);
    note("build: %" PRIu64 " keys, %u writer thread(s)", c->keys, count);
    double t0 = now_s();
    for (uint32_t t = 0; t < count; t++) {
        w[t] = (struct builder){.s = s, .c = c, .id = t, .count = count};
        if (count == 1)
            break;
        rc = pthread_create(&w[t].th, NULL, build_main, &w[t]);
        if (rc != 0)
            fatal("build: pthread_create: %s", strerror(rc));
    }
    if (count == 1)
        build_main(&w[0]);
    else
        for (uint32_t t = 0; t < count; t++)
            pthread_join(w[t].th, NULL);
    *seconds = now_s() - t0;

    uint64_t inserted = 0;
    for (uint32_t t = 0; t < count; t++) {
        if (w[t].rc == -EEXIST)
            fatal("build: key %#018" PRIx64 " was already present (generated keys repeat?)",
                  w[t].bad_key);
        if (w[t].rc != 0)
            fatal("build: store_upsert of key %#018" PRIx64 ": %s", w[t].bad_key,
                  strerror(-w[t].rc));
        inserted += w[t].inserted;
    }
    free(w);
    if (inserted != c->keys || store_count(s) != c->keys)
        fatal("build: inserted %" PRIu64 ", store_count %" PRIu64 ", expected %" PRIu64, inserted,
              store_count(s), c->keys);
    return s;
}

/* ---- phase 3: lookups -------------------------------------------------------- */

/* L lookups of present (hits) or absent keys in batches of BATCH, each key
 * index uniform in [0, N) (+N for absent keys).  Returns lookups per second
 * of the timed spans (key generation + store_lookup_batch). */
static double run_lookups(const store_t *s, const struct config *c, struct bufs *b, bool hits,
                          uint64_t lookups, const char *phase)
{
    uint64_t rng = c->seed ^ (hits ? 0x5eed0001u : 0x5eed0002u);
    const uint64_t n_keys = c->keys;
    const uint64_t base = hits ? 0 : n_keys;
    double spent = 0;

    for (uint64_t done = 0; done < lookups;) {
        size_t n = lookups - done < BATCH ? (size_t)(lookups - done) : BATCH;
        double t0 = now_s();
        for (size_t i = 0; i < n; i++)
            b->keys[i] = key_of(c->seed, base + mem_limit_below(mem_limit_rand(&rng), n_keys));
        size_t found = store_lookup_batch(s, b->keys, n, b->out, NULL);
        spent += now_s() - t0;
        if (hits)
            check_hits(phase, s, b->keys, n, found, b, c->value_floats, c->dtype);
        else
            check_misses(phase, s, b->keys, n, found, b, c->value_floats);
        done += n;
    }
    return (double)lookups / spent;
}

/* ---- phase 5: the machine's limit -------------------------------------------- */

/* The limit itself is measured by mem_limit.c, shared with score_bench. */

/* ---- phase 6: snapshot load ---------------------------------------------------- */

/* Reads every file of dir once, so the load starts from a warm page cache.
 * Returns the bytes read. */
static uint64_t warm_dir(const char *dir)
{
    static char buf[1 << 20];
    uint64_t total = 0;
    DIR *d = opendir(dir);
    if (!d)
        fatal("load: opendir %s: %s", dir, strerror(errno));
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            fatal("load: open %s/%s: %s", dir, e->d_name, strerror(errno));
        for (;;) {
            ssize_t n = read(fd, buf, sizeof buf);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0)
                fatal("load: read %s/%s: %s", dir, e->d_name, strerror(errno));
            if (n == 0)
                break;
            total += (uint64_t)n;
        }
        close(fd);
    }
    closedir(d);
    return total;
}

/* One store_snapshot_load of g_snap: wall and CPU time, RSS growth and
 * peak RSS over steady (0 when unavailable).  Exits on failure. */
struct load_run {
    double seconds, user_s, sys_s, rss_delta, peak_over_steady;
    store_meta_t meta;
};

static struct load_run timed_load(const struct config *c, store_t **out)
{
    struct load_run r = {0};
    struct mem before = mem_now();
    uint64_t vm_before = status_bytes("VmRSS:");
    bool hwm_ok = reset_hwm();
    store_error_t err;
    struct rusage ru_before, ru_after;
    getrusage(RUSAGE_SELF, &ru_before);
    double t0 = now_s();
    if (store_snapshot_load(g_snap, (int)c->threads, out, &r.meta, &err) != 0)
        fatal("snapshot load of %s failed (%s): %s", g_snap, store_errc_name(err.code), err.msg);
    r.seconds = now_s() - t0;
    getrusage(RUSAGE_SELF, &ru_after);
    uint64_t vm_hwm = status_bytes("VmHWM:");
    uint64_t vm_after = status_bytes("VmRSS:");
    struct mem after = mem_now();
    r.user_s = tv_s(ru_after.ru_utime) - tv_s(ru_before.ru_utime);
    r.sys_s = tv_s(ru_after.ru_stime) - tv_s(ru_before.ru_stime);
    r.rss_delta = (double)after.rss - (double)before.rss;
    if (hwm_ok && vm_after > vm_before)
        r.peak_over_steady = ((double)vm_hwm - (double)vm_before) / (double)(vm_after - vm_before);
    return r;
}

/* Checks a loaded store: the count, the meta, and a random sample of present
 * and absent keys.  Returns the number of lookups checked. */
static uint64_t verify_loaded(const store_t *s, const store_meta_t *meta, const struct config *c,
                          struct bufs *b)
{
    if (store_count(s) != c->keys)
        fatal("load: the loaded store has %" PRIu64 " keys, expected %" PRIu64, store_count(s),
              c->keys);
    if (store_value_floats(s) != c->value_floats || store_dtype(s) != c->dtype)
        fatal("load: the loaded store has K=%u %s, expected K=%u %s", store_value_floats(s),
              dtype_name(store_dtype(s)), c->value_floats, dtype_name(c->dtype));
    if (meta->version != 1 || strcmp(meta->model_name, "store_bench") != 0)
        fatal("load: meta came back as '%s' version %" PRIu64, meta->model_name, meta->version);
    uint64_t sample = c->keys < VERIFY_SAMPLE ? c->keys : VERIFY_SAMPLE;
    run_lookups(s, c, b, true, sample, "load check (present keys)");
    run_lookups(s, c, b, false, sample / 16 + 1, "load check (absent keys)");
    return sample + sample / 16 + 1;
}

/* ---- main ----------------------------------------------------------------- */

static void make_tmp(const struct config *c)
{
    struct stat st;
    if (stat(c->tmp, &st) != 0 || !S_ISDIR(st.st_mode))
        usage_error("--tmp: '%s' is not a directory", c->tmp);
    if ((size_t)snprintf(g_root, sizeof g_root, "%s/store_bench.XXXXXX", c->tmp) >= sizeof g_root)
        usage_error("--tmp: path too long");
    if (!mkdtemp(g_root))
        fatal("cannot create a temp dir under %s: %s", c->tmp, strerror(errno));
    snprintf(g_snap, sizeof g_snap, "%s/snapshot", g_root);
    g_root_made = 1;

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);

    /* fail now, not after the build, when the snapshot cannot fit */
    uint64_t value_bytes = (uint64_t)c->value_floats * (c->dtype == STORE_DTYPE_F16 ? 2 : 4);
    uint64_t need = c->keys * (8 + value_bytes) + ((uint64_t)1 << 20);
    struct statvfs vfs;
    if (statvfs(g_root, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < need)
        fatal("--tmp %s: the snapshot needs %.2f GiB, only %.2f GiB free", c->tmp,
              (double)need / (1 << 30), (double)vfs.f_bavail * vfs.f_frsize / (1 << 30));
}

static void print_json_number(const char *name, double v, bool valid, const char *fmt, bool last)
{
    printf("\"%s\":", name);
    if (valid)
        printf(fmt, v);
    else
        fputs("null", stdout);
    fputs(last ? "}\n" : ",", stdout);
}

int main(int argc, char **argv)
{
    struct config c;
    pin_init();
    parse_flags(argc, argv, &c);

    const uint32_t k = c.value_floats;
    const double raw = 8.0 + (double)k * (c.dtype == STORE_DTYPE_F16 ? 2 : 4);
    struct bufs b = {
        .keys = aligned_alloc(64, BATCH * sizeof(uint64_t)),
        .out = aligned_alloc(64, (size_t)BATCH * k * sizeof(float)),
        .found = malloc(BATCH),
    };
    if (!b.keys || !b.out || !b.found)
        fatal("out of memory for batch buffers");
    make_tmp(&c);
    atexit(remove_tmp);

    uint64_t avail = mem_available();
    double guess = (double)c.keys * raw * 1.6 + (double)c.baseline_keys * 48.0;
    if (avail && guess > (double)avail)
        note("warning: this run may need ~%.1f GiB; MemAvailable is %.1f GiB", guess / (1 << 30),
             (double)avail / (1 << 30));

    line("keys", "%" PRIu64, c.keys);
    if (c.expected_keys != c.keys)
        line("expected_keys", "%" PRIu64 " (the store grows to keys)", c.expected_keys);
    line("value_floats", "%u", k);
    line("dtype", "%s", dtype_name(c.dtype));
    line("lookups", "%" PRIu64 " per phase, batches of %d, uniform random", c.lookups, BATCH);
    line("seed", "%" PRIu64, c.seed);
    line("method", "rss (Rss of /proc/self/smaps_rollup before and after; glibc malloc)");
    if (g_pinnable)
        line("single_core_phases", "pinned to cpu %d", g_cpu);
    else
        line("single_core_phases", "not pinned (affinity unavailable)");

    /* 1: the unordered_map, alone in the process and freed before the rest */
    struct baseline base = {0, 0};
    line("baseline_keys", "%" PRIu64, c.baseline_keys);
    if (c.baseline_keys > 0) {
        line("baseline_map", "std::unordered_map<uint64_t, float>, reserve(M), one float per key");
        pin_one();
        base = run_baseline(&c, &b);
        line("unordered_map_bytes_per_entry", "%.2f", base.bytes_per_entry);
        line("unordered_map_lookups_per_s", "%.0f", base.lookups_per_s);
    } else {
        line("unordered_map_bytes_per_entry", "skipped (--baseline-keys 0)");
        line("unordered_map_lookups_per_s", "skipped (--baseline-keys 0)");
    }

    /* 2: build; the RSS delta is the table (no key array exists) */
    pin_all();
    malloc_trim(0);
    struct mem before = mem_now();
    double build_s;
    store_t *s = build_store(&c, &build_s);
    struct mem after = mem_now();
    store_stats_t st;
    store_stats(s, &st);
    line("shards", "%u", store_shards(s));
    line("build_threads", "%u", c.threads < store_shards(s) ? c.threads : store_shards(s));
    line("build_entries_per_s", "%.0f", (double)c.keys / build_s);
    const double bytes_per_entry = ((double)after.rss - (double)before.rss) / (double)c.keys;
    line("bytes_per_entry", "%.2f", bytes_per_entry);
    line("raw_bytes_per_entry", "%.0f", raw);
    line("bytes_over_raw", "%.3f", bytes_per_entry / raw);
    line("store_table_bytes_per_entry", "%.2f (store_stats table_bytes / N)",
         (double)st.table_bytes / (double)c.keys);
    line("table_bytes", "%" PRIu64, st.table_bytes);
    line("table_hugepage_fraction", "%.3f",
         after.rss > before.rss
             ? ((double)after.anon_huge - (double)before.anon_huge) / (double)(after.rss - before.rss)
             : 0.0);
    line("slot_load", "%.4f (entries / slots)", st.slots ? (double)st.entries / st.slots : 0.0);
    line("subtables", "%" PRIu64, st.subtables);
    line("stashed", "%" PRIu64, st.stashed);
    store_layout_t lay;
    store_layout(s, &lay);
    line("alternate_fraction", "%.4f (entries in their alternate bucket: a hit reads 1 + this lines)",
         st.entries ? (double)lay.alternate_entries / st.entries : 0.0);
    line("overflowed_fraction", "%.4f (buckets with the overflow flag: a miss reads 1 + this lines)",
         lay.buckets ? (double)lay.overflowed_buckets / lay.buckets : 0.0);
    line("rebuilds", "%" PRIu64, st.rebuilds);

    /* 3: lookups on one core */
    pin_one();
    note("lookups: %" PRIu64 " present, %" PRIu64 " absent", c.lookups, c.lookups);
    const double lookups_per_s = run_lookups(s, &c, &b, true, c.lookups, "lookups");
    line("lookups_per_s", "%.0f", lookups_per_s);
    const double miss_per_s = run_lookups(s, &c, &b, false, c.lookups, "miss lookups");
    line("miss_lookups_per_s", "%.0f", miss_per_s);
    if (base.lookups_per_s > 0)
        line("lookups_over_unordered_map", "%.2f", lookups_per_s / base.lookups_per_s);

    /* 4: snapshot, then the store goes */
    pin_all();
    store_meta_t meta = {
        .model_kind = k == 1 ? STORE_MODEL_LR : STORE_MODEL_FM,
        .version = 1,
    };
    snprintf(meta.model_name, sizeof meta.model_name, "store_bench");
    store_error_t err;
    note("snapshot: writing %s", g_snap);
    double t0 = now_s();
    if (store_snapshot_write(s, g_snap, &meta, &err) != 0)
        fatal("snapshot write into %s failed (%s): %s", g_snap, store_errc_name(err.code), err.msg);
    line("snapshot_write_s", "%.3f (fsync included)", now_s() - t0);
    const uint64_t table_bytes = st.table_bytes;
    store_destroy(s);
    s = NULL;
    malloc_trim(0);

    /* 5: the limit, on an array as large as the table, freed before the load */
    pin_one();
    size_t lim_len;
    struct mem lim_before = mem_now();
    int huge_ok;
    uint64_t *arr = mem_limit_map(table_bytes, &lim_len, &huge_ok);
    if (!arr)
        fatal("limit: mmap of %" PRIu64 " bytes failed: %s", table_bytes, strerror(errno));
    if (!huge_ok)
        note("limit: madvise(MADV_HUGEPAGE) failed; reading through 4 KiB pages");
    struct mem lim_after = mem_now();
    const uint64_t words = table_bytes / 8 ? table_bytes / 8 : 1;
    line("limit_array_bytes", "%" PRIu64, words * 8);
    line("limit_hugepage_fraction", "%.3f",
         lim_after.rss > lim_before.rss
             ? ((double)lim_after.anon_huge - (double)lim_before.anon_huge) /
                   (double)(lim_after.rss - lim_before.rss)
             : 0.0);
    double per_dist[4];
    double limit = mem_limit_best(arr, words, c.lookups, c.seed, b.keys, BATCH, per_dist);
    for (size_t i = 0; i < 4; i++) {
        char name[48];
        snprintf(name, sizeof name, "limit_reads_per_s_prefetch%zu", mem_limit_dists[i]);
        line(name, "%.0f", per_dist[i]);
    }
    munmap(arr, lim_len);
    line("limit_reads_per_s", "%.0f", limit);
    line("lookup_over_limit", "%.3f", lookups_per_s / limit);
    line("miss_over_limit", "%.3f", miss_per_s / limit);

    /* 6: load from a warm page cache on all cores, twice: the first load's
     * table memory may be new to this VM's host (a balloon hands freed
     * memory back), the second reuses what the first freed */
    pin_all();
    line("snapshot_bytes", "%" PRIu64, warm_dir(g_snap));
    note("load: %u thread(s)", c.threads);
    line("load_threads", "%u", c.threads);
    malloc_trim(0);
    struct load_run first = timed_load(&c, &s);
    store_destroy(s);
    s = NULL;
    malloc_trim(0);
    struct load_run second = timed_load(&c, &s);
    const struct load_run *best = second.seconds < first.seconds ? &second : &first;
    const double load_per_s = (double)c.keys / best->seconds;
    line("load_first_s", "%.3f (user %.3f s, sys %.3f s)", first.seconds, first.user_s,
         first.sys_s);
    line("load_second_s", "%.3f (user %.3f s, sys %.3f s)", second.seconds, second.user_s,
         second.sys_s);
    line("load_s", "%.3f (the faster of the two)", best->seconds);
    line("load_entries_per_s", "%.0f", load_per_s);
    line("load_first_entries_per_s", "%.0f", (double)c.keys / first.seconds);
    /* CPU seconds of all threads; sys is mostly the table's page faults and
     * zeroing (on a VM whose balloon returned freed memory to the host, the
     * host's faults stall inside them too) */
    line("load_user_cpu_s", "%.3f", best->user_s);
    line("load_sys_cpu_s", "%.3f", best->sys_s);
    line("loaded_bytes_per_entry", "%.2f", second.rss_delta / (double)c.keys);
    double peak = first.peak_over_steady > second.peak_over_steady ? first.peak_over_steady
                                                                    : second.peak_over_steady;
    if (peak > 0)
        line("load_peak_over_steady", "%.3f (the larger of the two)", peak);
    else
        line("load_peak_over_steady", "unavailable (RSS did not grow, or /proc/self/clear_refs "
                                      "refused)");
    pin_one();
    store_meta_t got_meta = second.meta;
    uint64_t checked = verify_loaded(s, &got_meta, &c, &b);
    line("load_verified", "count %" PRIu64 ", %" PRIu64 " sampled lookups exact", c.keys, checked);
    store_destroy(s);
    remove_tmp();

    if (c.json) {
        bool have_base = c.baseline_keys > 0;
        putchar('{');
        print_json_number("bytes_per_entry", bytes_per_entry, true, "%.3f", false);
        print_json_number("raw_bytes_per_entry", raw, true, "%.0f", false);
        print_json_number("lookups_per_s", lookups_per_s, true, "%.0f", false);
        print_json_number("limit_reads_per_s", limit, true, "%.0f", false);
        print_json_number("unordered_map_bytes_per_entry", base.bytes_per_entry, have_base, "%.3f",
                          false);
        print_json_number("unordered_map_lookups_per_s", base.lookups_per_s, have_base, "%.0f",
                          false);
        print_json_number("miss_lookups_per_s", miss_per_s, true, "%.0f", false);
        print_json_number("load_entries_per_s", load_per_s, true, "%.0f", true);
        fflush(stdout);
    }
    free(b.keys);
    free(b.out);
    free(b.found);
    return 0;
}
