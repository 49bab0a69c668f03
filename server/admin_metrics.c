/*
 * admin_metrics.c — the text of GET /metrics (Prometheus text format 0.0.4):
 * the workers' counters summed (server.h SERVER_COUNTERS, each with HELP and
 * TYPE), ERROR frames by wire code, connections reaped by reason, the
 * request latency histogram and its quantiles, the active model, loads, the
 * repository watcher, the validation gate, jemalloc's figures and the
 * process's resident memory.  Counters are read with relaxed loads while
 * workers write: a scrape is not a snapshot, but each family is
 * self-consistent.
 *
 * THREAD SAFETY: runs on the admin thread; reads other threads' figures
 * through atomics and their own getters (loader, repo, gate).
 */
#include "admin_impl.h"
#include "gate.h"
#include "guard.h"
#include "online.h"
#include "repo.h"
#include "server.h"

#include <event2/buffer.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef TL_NO_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

/* ERROR frames by wire code, a family of its own so that sum() over
 * tlserve_errors_total does not count them twice. */
static void metrics_error_codes(struct evbuffer *b, const server_t *srv)
{
    evbuffer_add_printf(b, "# HELP tlserve_errors_by_code_total ERROR frames sent, by wire error code\n"
                           "# TYPE tlserve_errors_by_code_total counter\n");
    for (int c = 1; c < SERVER_MAX_ERROR_CODES; c++) {
        uint64_t v = 0;
        for (int w = 0; w < srv->nworkers; w++)
            v += atomic_load_explicit(&srv->metrics[w].errors_by_code[c], memory_order_relaxed);
        if (v)
            evbuffer_add_printf(b, "tlserve_errors_by_code_total{code=\"%d\"} %" PRIu64 "\n", c, v);
    }
}

static void metrics_counter(struct evbuffer *b, const server_t *srv, const char *name,
                            const char *help, uint64_t v)
{
    evbuffer_add_printf(b,
                        "# HELP tlserve_%s %s\n# TYPE tlserve_%s counter\ntlserve_%s %" PRIu64 "\n",
                        name, help, name, name, v);
    if (strcmp(name, "errors_total") == 0)
        metrics_error_codes(b, srv);
}

/* Connections the server closed on its own, by reason (server_reap_t). */
static void metrics_reaped(struct evbuffer *b, const server_t *srv)
{
    evbuffer_add_printf(b, "# HELP tlserve_connections_reaped_total Connections the server "
                           "closed: idle, slow partial frame, output stuck, over "
                           "--max-output-bytes or --max-input-bytes, evicted for a new one\n"
                           "# TYPE tlserve_connections_reaped_total counter\n");
    for (int r = 0; r < SERVER_REAP_REASONS; r++) {
        uint64_t v = 0;
        for (int w = 0; w < srv->nworkers; w++)
            v += atomic_load_explicit(&srv->metrics[w].reaped[r], memory_order_relaxed);
        evbuffer_add_printf(b, "tlserve_connections_reaped_total{reason=\"%s\"} %" PRIu64 "\n",
                            server_reap_names[r], v);
    }
}

static void metrics_gauge(struct evbuffer *b, const char *name, const char *help, int64_t v)
{
    evbuffer_add_printf(b,
                        "# HELP tlserve_%s %s\n# TYPE tlserve_%s gauge\ntlserve_%s %" PRId64 "\n",
                        name, help, name, name, v);
}

/* The fine log-linear histogram (server.h), exposed two ways: a Prometheus
 * histogram with a fixed, short list of `le` bounds (a fine bucket counts
 * under a bound when it ends at or below it, so counts err low by at most
 * one fine bucket's width, 6%), and quantile gauges computed here from all
 * the fine buckets (each reported at its bucket's midpoint). */
static const double latency_le_seconds[] = {
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025,
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
static const double latency_quantiles[] = {0.5, 0.9, 0.99, 0.999};

static void metrics_latency(struct evbuffer *b, const server_t *srv)
{
    static uint64_t bucket[SERVER_LAT_BUCKETS]; /* admin thread only */
    uint64_t sum_ns = 0, count = 0;
    memset(bucket, 0, sizeof bucket);
    for (int w = 0; w < srv->nworkers; w++) {
        for (unsigned i = 0; i < SERVER_LAT_BUCKETS; i++)
            bucket[i] += atomic_load_explicit(&srv->metrics[w].latency_bucket[i], memory_order_relaxed);
        sum_ns += atomic_load_explicit(&srv->metrics[w].latency_ns_sum, memory_order_relaxed);
    }
    for (unsigned i = 0; i < SERVER_LAT_BUCKETS; i++)
        count += bucket[i];

    evbuffer_add_printf(b, "# HELP tlserve_request_latency_seconds Server-side request time, frame "
                           "complete to response encoded\n"
                           "# TYPE tlserve_request_latency_seconds histogram\n");
    unsigned i = 0;
    uint64_t below = 0;
    for (size_t k = 0; k < sizeof latency_le_seconds / sizeof *latency_le_seconds; k++) {
        double le_ns = latency_le_seconds[k] * 1e9;
        while (i + 1 < SERVER_LAT_BUCKETS && (double)server_lat_bucket_low(i + 1) <= le_ns)
            below += bucket[i++];
        evbuffer_add_printf(b, "tlserve_request_latency_seconds_bucket{le=\"%g\"} %" PRIu64 "\n",
                            latency_le_seconds[k], below);
    }
    evbuffer_add_printf(b,
                        "tlserve_request_latency_seconds_bucket{le=\"+Inf\"} %" PRIu64 "\n"
                        "tlserve_request_latency_seconds_sum %.9f\n"
                        "tlserve_request_latency_seconds_count %" PRIu64 "\n",
                        count, (double)sum_ns * 1e-9, count);

    evbuffer_add_printf(b, "# HELP tlserve_request_latency_quantile_seconds Quantiles of the "
                           "server-side request time since start (6%% resolution)\n"
                           "# TYPE tlserve_request_latency_quantile_seconds gauge\n");
    for (size_t q = 0; q < sizeof latency_quantiles / sizeof *latency_quantiles; q++) {
        double v = 0;
        if (count) {
            uint64_t rank = (uint64_t)(latency_quantiles[q] * (double)count);
            if (rank >= count)
                rank = count - 1;
            uint64_t seen = 0;
            for (unsigned j = 0; j < SERVER_LAT_BUCKETS; j++) {
                seen += bucket[j];
                if (seen > rank) {
                    double lo = (double)server_lat_bucket_low(j);
                    double hi = j + 1 < SERVER_LAT_BUCKETS ? (double)server_lat_bucket_low(j + 1) : lo;
                    v = (lo + hi) / 2 * 1e-9;
                    break;
                }
            }
        }
        evbuffer_add_printf(b, "tlserve_request_latency_quantile_seconds{quantile=\"%g\"} %.9f\n",
                            latency_quantiles[q], v);
    }
}

static void metrics_model(struct evbuffer *b, server_t *srv)
{
    evbuffer_add_printf(b, "# HELP tlserve_model_info The active model version (value is 1)\n"
                           "# TYPE tlserve_model_info gauge\n");
    char names[SERVER_MODELS_MAX][64];
    size_t n = server_model_names(srv, names, SERVER_MODELS_MAX);
    uint64_t keys = 0;
    for (size_t i = 0; i < n && i < SERVER_MODELS_MAX; i++) {
        server_model_t *sm = server_model_acquire_named(srv, names[i]);
        if (!sm)
            continue;
        /* Names are [A-Za-z0-9_.-] (store-checked): no label escaping needed. */
        const store_meta_t *meta = model_meta(sm->model);
        evbuffer_add_printf(
            b, "tlserve_model_info{name=\"%s\",version=\"%" PRIu64 "\",kind=\"%s\"} 1\n",
            meta->model_name, meta->version, store_model_kind_name(meta->model_kind));
        keys += model_key_count(sm->model);
        server_model_release(sm);
    }
    metrics_gauge(b, "model_keys", "Keys in the active versions of all models (0 when none)",
                  (int64_t)keys);
}

static void metrics_loads(struct evbuffer *b)
{
    loader_metrics_t lm;
    loader_get_metrics(&lm);
    evbuffer_add_printf(b,
                        "# HELP tlserve_model_loads_total Model loads (the admin API's and the "
                        "repository watcher's), by how they ended\n"
                        "# TYPE tlserve_model_loads_total counter\n"
                        "tlserve_model_loads_total{result=\"ok\"} %" PRIu64 "\n"
                        "tlserve_model_loads_total{result=\"failed\"} %" PRIu64 "\n"
                        "# HELP tlserve_model_load_seconds Time the last ended load spent "
                        "loading (0 when none)\n"
                        "# TYPE tlserve_model_load_seconds gauge\n"
                        "tlserve_model_load_seconds %.6f\n",
                        lm.ok, lm.failed, lm.last_seconds);
    metrics_gauge(b, "model_loads_in_progress", "Model loads queued or running", lm.in_progress);
    repo_metrics_t rm;
    repo_get_metrics(&rm);
    evbuffer_add_printf(b,
                        "# HELP tlserve_model_versions_refused_total Repository versions refused "
                        "(each once per change of its files)\n"
                        "# TYPE tlserve_model_versions_refused_total counter\n"
                        "tlserve_model_versions_refused_total %" PRIu64 "\n"
                        "# HELP tlserve_model_repo_errors_total Times the model repository became "
                        "unreadable or vanished\n"
                        "# TYPE tlserve_model_repo_errors_total counter\n"
                        "tlserve_model_repo_errors_total %" PRIu64 "\n"
                        "# HELP tlserve_model_repo_scans_total Scans of the model repository\n"
                        "# TYPE tlserve_model_repo_scans_total counter\n"
                        "tlserve_model_repo_scans_total %" PRIu64 "\n"
                        "# HELP tlserve_repo_marks_write_errors_total Writes of a model's marks "
                        "file (pin, rollbacks, refusals kept across restarts) that failed\n"
                        "# TYPE tlserve_repo_marks_write_errors_total counter\n"
                        "tlserve_repo_marks_write_errors_total %" PRIu64 "\n",
                        rm.refused, rm.repo_errors, rm.scans, rm.marks_write_errors);
    server_fold_metrics_t fm;
    server_model_fold_metrics(&fm);
    evbuffer_add_printf(b,
                        "# HELP tlserve_delta_overlays_total Delta versions that went live as an "
                        "overlay over the active version\n"
                        "# TYPE tlserve_delta_overlays_total counter\n"
                        "tlserve_delta_overlays_total %" PRIu64 "\n"
                        "# HELP tlserve_delta_overlay_keys_total Delta keys those overlays took\n"
                        "# TYPE tlserve_delta_overlay_keys_total counter\n"
                        "tlserve_delta_overlay_keys_total %" PRIu64 "\n"
                        "# HELP tlserve_delta_apply_seconds The last overlay's time: delta files "
                        "read and verified, overlay built\n"
                        "# TYPE tlserve_delta_apply_seconds gauge\n"
                        "tlserve_delta_apply_seconds %.6f\n"
                        "# HELP tlserve_delta_folds_total Overlays folded into the base "
                        "(result=done|stopped)\n"
                        "# TYPE tlserve_delta_folds_total counter\n"
                        "tlserve_delta_folds_total{result=\"done\"} %" PRIu64 "\n"
                        "tlserve_delta_folds_total{result=\"stopped\"} %" PRIu64 "\n"
                        "# HELP tlserve_delta_fold_seconds The last fold's time\n"
                        "# TYPE tlserve_delta_fold_seconds gauge\n"
                        "tlserve_delta_fold_seconds %.6f\n",
                        rm.overlay_applies, rm.overlay_keys, rm.last_apply_seconds, fm.folds,
                        fm.aborted, fm.last_seconds);
    char gate[4096];
    evbuffer_add(b, gate, gate_metrics_format(gate, sizeof gate));
    char guard[2048];
    evbuffer_add(b, guard, guard_metrics_format(guard, sizeof guard));
    enum { ONLINE_TEXT = 64 << 10 }; /* 13 families, up to 16 models */
    char *online = malloc(ONLINE_TEXT);
    if (online)
        evbuffer_add(b, online, online_metrics_format(online, ONLINE_TEXT));
    free(online);
}

static void metrics_jemalloc(struct evbuffer *b)
{
#ifndef TL_NO_JEMALLOC
    uint64_t epoch = 1;
    size_t sz = sizeof epoch;
    mallctl("epoch", &epoch, &sz, &epoch, sz); /* refresh the cached stats */
    size_t allocated = 0, resident = 0;
    sz = sizeof allocated;
    if (mallctl("stats.allocated", &allocated, &sz, NULL, 0) != 0)
        allocated = 0;
    sz = sizeof resident;
    if (mallctl("stats.resident", &resident, &sz, NULL, 0) != 0)
        resident = 0;
    metrics_gauge(b, "jemalloc_allocated_bytes", "Bytes allocated by the application (jemalloc)",
                  (int64_t)allocated);
    metrics_gauge(b, "jemalloc_resident_bytes",
                  "Bytes in physically resident data pages (jemalloc)", (int64_t)resident);
#else
    (void)b;
#endif
}

/* The process's resident set, the figure the OOM killer and a container's
 * limit see, next to jemalloc's own (which counts neither the store's mapped
 * tables nor pages jemalloc has given back).  Prometheus's conventional
 * name; read from /proc/self/statm (resident pages), left out when that
 * cannot be read. */
static void metrics_process(struct evbuffer *b)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return;
    unsigned long long size = 0, resident = 0;
    int n = fscanf(f, "%llu %llu", &size, &resident);
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    if (n != 2 || page <= 0)
        return;
    evbuffer_add_printf(b,
                        "# HELP process_resident_memory_bytes Resident memory of the process "
                        "(VmRSS)\n# TYPE process_resident_memory_bytes gauge\n"
                        "process_resident_memory_bytes %llu\n",
                        resident * (unsigned long long)page);
}

void admin__metrics(server_t *srv, struct evbuffer *b)
{
#define X(name, help)                                                               \
    {                                                                               \
        uint64_t v = 0;                                                             \
        for (int w = 0; w < srv->nworkers; w++)                                     \
            v += atomic_load_explicit(&srv->metrics[w].name, memory_order_relaxed); \
        metrics_counter(b, srv, #name, help, v);                                    \
    }
    SERVER_COUNTERS(X)
#undef X
    metrics_latency(b, srv);
    metrics_reaped(b, srv);
    int64_t inflight = 0, conns = 0, out_bytes = 0;
    for (int w = 0; w < srv->nworkers; w++) {
        inflight += atomic_load_explicit(&srv->metrics[w].inflight, memory_order_relaxed);
        conns += atomic_load_explicit(&srv->metrics[w].connections, memory_order_relaxed);
        out_bytes += atomic_load_explicit(&srv->metrics[w].output_bytes, memory_order_relaxed);
    }
    metrics_gauge(b, "inflight", "Answers queued and not yet sent, all workers", inflight);
    metrics_gauge(b, "connections", "Open data plane connections", conns);
    metrics_gauge(b, "output_buffer_bytes",
                  "Output buffer bytes held for data plane connections (--max-output-bytes per "
                  "worker)",
                  out_bytes);
    metrics_counter(b, srv, "lookup_splits_total",
                    "Requests whose lookups the lookup threads shared (--lookup-threads)",
                    store_team_splits(srv->team));
    metrics_counter(b, srv, "lookup_split_sleeps_total",
                    "Shared lookups whose worker slept for a lookup thread's last part (a lookup "
                    "thread preempted: more runnable threads than cores)",
                    store_team_sleeps(srv->team));
    metrics_model(b, srv);
    metrics_loads(b);
    admin__replies_metrics(b);
    metrics_jemalloc(b);
    metrics_process(b);
}
