/*
 * online_metrics.c — online learning's lines of /metrics (online.h,
 * online_metrics_format): every model's counters and trainer figures, the
 * impression log's, then the bus's and the training files' (their own
 * files format them).  Reads atomics only: never waits for a trainer.
 */
#include "online_impl.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define G online__G

static double bitsd(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

size_t online_metrics_format(char *buf, size_t len)
{
    size_t off = 0;
#define PUT(...)                                                                     \
    do {                                                                             \
        int n_ = snprintf(buf + off, len - off, __VA_ARGS__);                        \
        if (n_ < 0 || (size_t)n_ >= len - off) {                                     \
            buf[off] = '\0';                                                         \
            return off;                                                              \
        }                                                                            \
        off += (size_t)n_;                                                           \
    } while (0)
    if (len == 0)
        return 0;
    buf[0] = '\0';
    enum { U64, F64, SPECIAL };
    static const struct {
        const char *name, *type, *help;
        size_t field; /* offsetof into online_model_t */
        int how;
    } fam[] = {
#define FAM(n, t, h, f, how) {n, t, h, offsetof(online_model_t, f), how}
        FAM("tlserve_online_frames_total", "counter", "TRAIN frames queued", frames, U64),
        FAM("tlserve_online_samples_total", "counter", "samples learned", samples, U64),
        FAM("tlserve_online_replayed_total", "counter",
            "samples learned again from the sample log at start", replayed, U64),
        FAM("tlserve_online_bus_export_skipped_total", "counter",
            "stream messages read at a start and not learned: the active online export holds "
            "them (replay mode)", bus_skipped, U64),
        FAM("tlserve_online_positives_total", "counter", "samples learned with label 1",
            positives, U64),
        FAM("tlserve_online_refused_total", "counter",
            "TRAIN or FEEDBACK answered OVERLOADED (reason: queue_full, rate, log_failed: the "
            "sample log's append failed, e.g. a full disk)", refused_full,
            SPECIAL),
        FAM("tlserve_online_bad_values_total", "counter",
            "TRAIN frames refused (BAD_VALUE) and queued frames not learned (a FEEDBACK's "
            "joined sample, a replayed record) for a feature value beyond "
            "--online-max-feature-value", bad_values, U64),
        FAM("tlserve_online_log_failed_total", "counter",
            "appends to the sample log that failed (the frame was refused)", log_failed, U64),
        FAM("tlserve_online_log_slow_total", "counter",
            "sample log appends that held the worker over 20 ms (the disk; each logged)", log_slow,
            U64),
        FAM("tlserve_online_boosts_total", "counter",
            "times the trainer ran at nice 0 because a queued sample had waited "
            "--online-boost-ms (it was starved at --online-nice)", boosts, U64),
        FAM("tlserve_online_dropped_total", "counter",
            "queued frames not learned (the model's kind changed, or no memory)", dropped, U64),
        FAM("tlserve_online_halted", "gauge",
            "1: training stopped, a step would have made a weight infinite or NaN (the alarm; "
            "a new version clears it)", halted, U64),
        FAM("tlserve_online_resets_total", "counter",
            "times the trainer started over from a new active version", resets, U64),
        FAM("tlserve_online_queue_bytes", "gauge", "bytes queued", queue_bytes, U64),
        FAM("tlserve_online_exports_total", "counter",
            "online updates exported as versions, delta or full (online_export.c)", exports, U64),
        FAM("tlserve_online_full_exports_total", "counter",
            "exports written as a FULL version (--online-full-every)", full_exports, U64),
        FAM("tlserve_online_export_failures_total", "counter",
            "exports that failed (retried at the next tick)", export_failures, U64),
        FAM("tlserve_online_export_keys_total", "counter", "keys written by the exports",
            export_keys, U64),
        FAM("tlserve_online_export_version", "gauge", "the version the last export wrote",
            export_version, U64),
        FAM("tlserve_online_export_buffer_bytes", "gauge",
            "memory the export holds between exports (a full export's copy of every row is "
            "given back after its write)", export_buf_bytes, U64),
        FAM("tlserve_online_export_position", "gauge",
            "the position the last export covers (sample-log records below it; with the bus, "
            "stream sequences below it)", export_pos,
            U64),
        FAM("tlserve_online_version", "gauge", "the version the trainer writes", last_version,
            U64),
        FAM("tlserve_online_logloss", "gauge",
            "progressive logloss since start (each sample scored before it is learned)",
            logloss_bits, F64),
        FAM("tlserve_online_window_logloss", "gauge", "progressive logloss, last 8192 samples",
            win_logloss_bits, F64),
        FAM("tlserve_online_window_auc", "gauge",
            "progressive AUC, last 8192 samples (NaN until they hold both labels)",
            win_auc_bits, F64),
        FAM("tlserve_online_window_calibration", "gauge",
            "mean prediction over mean label, last 8192 samples (NaN while they hold no "
            "positive)", win_calib_bits, F64),
        FAM("tlserve_online_freshness_seconds", "gauge",
            "arrival at the worker to weights written (the next PREDICT reads them), last 8192 "
            "samples", fresh_p50_us, SPECIAL),
#undef FAM
    };
    uint32_t n = atomic_load_explicit(&G.nmodels, memory_order_acquire);
    for (size_t fi = 0; fi < sizeof fam / sizeof *fam; fi++) {
        PUT("# HELP %s %s\n# TYPE %s %s\n", fam[fi].name, fam[fi].help, fam[fi].name, fam[fi].type);
        for (uint32_t i = 0; i < n; i++) {
            online_model_t *q = atomic_load_explicit(&G.models[i], memory_order_acquire);
            if (!q)
                continue;
            const _Atomic uint64_t *f = (const _Atomic uint64_t *)((const char *)q + fam[fi].field);
            uint64_t v = atomic_load_explicit(f, memory_order_relaxed);
            if (fam[fi].how == U64) {
                PUT("%s{model=\"%s\"} %" PRIu64 "\n", fam[fi].name, q->name, v);
            } else if (fam[fi].how == F64) {
                double d = bitsd(v); /* NaN (Prometheus's spelling) until it is defined */
                if (isnan(d))
                    PUT("%s{model=\"%s\"} NaN\n", fam[fi].name, q->name);
                else
                    PUT("%s{model=\"%s\"} %.9g\n", fam[fi].name, q->name, d);
            } else if (f == &q->refused_full) {
                PUT("%s{model=\"%s\",reason=\"queue_full\"} %" PRIu64 "\n"
                    "%s{model=\"%s\",reason=\"rate\"} %" PRIu64 "\n"
                    "%s{model=\"%s\",reason=\"log_failed\"} %" PRIu64 "\n",
                    fam[fi].name, q->name, v, fam[fi].name, q->name,
                    atomic_load_explicit(&q->refused_rate, memory_order_relaxed), fam[fi].name,
                    q->name, atomic_load_explicit(&q->refused_log, memory_order_relaxed));
            } else {
                PUT("%s{model=\"%s\",quantile=\"0.5\"} %.6f\n%s{model=\"%s\",quantile=\"0.99\"} "
                    "%.6f\n",
                    fam[fi].name, q->name, (double)v * 1e-6, fam[fi].name, q->name,
                    (double)atomic_load_explicit(&q->fresh_p99_us, memory_order_relaxed) * 1e-6);
            }
        }
    }
    if (G.imp) {
        impression_log_stats_t st;
        impression_log_stats(G.imp, &st);
#define IMP_(name, help)                                                                       \
    PUT("# HELP tlserve_impression_log_" #name "_total %s\n# TYPE tlserve_impression_log_" #name \
        "_total counter\ntlserve_impression_log_" #name "_total %" PRIu64 "\n",                \
        help, st.name);
        IMPRESSION_LOG_COUNTERS(IMP_)
#undef IMP_
        PUT("# HELP tlserve_impression_log_entries Impressions held\n"
            "# TYPE tlserve_impression_log_entries gauge\ntlserve_impression_log_entries %" PRIu64
            "\n# HELP tlserve_impression_log_bytes Bytes they use, of tlserve_impression_log_max_bytes\n"
            "# TYPE tlserve_impression_log_bytes gauge\ntlserve_impression_log_bytes %" PRIu64
            "\ntlserve_impression_log_max_bytes %" PRIu64 "\n",
            st.entries, st.bytes, st.max_bytes);
    }
#undef PUT
    off += online__bus_metrics(buf + off, len - off);
    return off + online__file_metrics(buf + off, len - off); /* online_file.c */
}
