/*
 * config_table.c — the settings table: every setting of tlserve, its type,
 * range, default and help line, one row each; the defaults, the config
 * file, the flags and --help all read it (Redis's standardConfig).  Also
 * the checks that the string settings name in their rows.
 *
 * THE TABLE
 *   Each row names one field of server_config_t:
 *
 *     { name, type, min, max, default, help, offset, size, check, allowed,
 *       env, secret }
 *
 *   name     the flag without "--", words joined by '-' ("admin-port"); the
 *            file key is the same name, and '_' is accepted for '-' in both
 *            places ("admin_port", "--admin_port").
 *   type     CFG_INT (long long parsed, range-checked, stored as int),
 *            CFG_BOOL (true/false, yes/no, on/off, 1/0), CFG_STRING (length
 *            < size, checked by `check` when set), CFG_DOUBLE (strtod, finite,
 *            range-checked, stored as double).
 *   min/max  the allowed range of an int or a double.
 *   default  text, applied through the same parser as a flag: a default that
 *            broke its own range would fail at start, not go unnoticed.
 *   env      an environment variable that sets it too, or NULL.
 *   secret   a value that must not be given as a flag: argv is readable by
 *            every local user (/proc/PID/cmdline), so a flag is taken but
 *            warned about.
 *
 *   A new setting is one row here and one field in server_config_t
 *   (server.h); nothing else lists the settings.
 *
 * THREAD SAFETY
 *   The table is constant.  The checks read the filesystem (the model root,
 *   the evaluation file) and are called from server_config_load() only.
 */
#include "codec/codec.h"
#include "config_impl.h"
#include "log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int check_addr(const char *v, char *why, size_t why_len);
static int check_level(const char *v, char *why, size_t why_len);
static int check_root(const char *v, char *why, size_t why_len);
static int check_model_name(const char *v, char *why, size_t why_len);
static int check_eval_file(const char *v, char *why, size_t why_len);
static int check_optimizer(const char *v, char *why, size_t why_len);
static int check_bus_mode(const char *v, char *why, size_t why_len);
static int check_sync_bits(const char *v, char *why, size_t why_len);
static int check_train_files(const char *v, char *why, size_t why_len);
static int check_train_format(const char *v, char *why, size_t why_len);

#define F(field) offsetof(server_config_t, field), sizeof(((server_config_t *)0)->field)

const cfg_entry_t server__cfg_table[] = {
    {"model", CFG_STRING, 0, 0, "",
     "snapshot directory to serve at start (empty: none until loaded)", F(model_dir), NULL,
     "a directory path", NULL, false},
    {"model-root", CFG_STRING, 0, 0, "",
     "load only snapshots whose real path lies under this directory (--model and admin loads; "
     "empty: any)",
     F(model_root), check_root, "a directory path", NULL, false},
    {"model-repo", CFG_STRING, 0, 0, "",
     "model repository <dir>/<model>/<version>/ to serve the latest version of and watch "
     "(not with --model; under --model-root when set)",
     F(model_repo), check_root, "a directory path", NULL, false},
    {"model-name", CFG_STRING, 0, 0, "",
     "the one model of --model-repo to serve (empty: every one it holds)", F(model_name),
     check_model_name, "[A-Za-z0-9_.-]+", NULL, false},
    {"repo-marks-dir", CFG_STRING, 0, 0, "",
     "where each model's pin, rolled-back versions and refusals are kept across restarts "
     "(<dir>/<model>.marks; empty: <model-repo>/<model>/.tlserve-marks); set it when the "
     "repository is read-only, shared by several servers (one writer a directory: it is "
     "locked) or synchronized with deletion",
     F(repo_marks_dir), NULL, "a directory path", NULL, false},
    {"keep-versions", CFG_INT, 0, SERVER_KEEP_VERSIONS_MAX, "1",
     "swapped-out versions kept loaded for an instant rollback (each costs its memory)",
     F(keep_versions), NULL, NULL, NULL, false},
    {"bind", CFG_STRING, 0, 0, "127.0.0.1", "data plane address (IPv4 or IPv6 literal)", F(bind),
     check_addr, "an IP address", NULL, false},
    {"port", CFG_INT, 1, 65535, "7070", "data plane TCP port", F(port), NULL, NULL, NULL, false},
    {"admin-bind", CFG_STRING, 0, 0, "127.0.0.1", "admin plane (HTTP) address", F(admin_bind),
     check_addr, "an IP address", NULL, false},
    {"admin-port", CFG_INT, 1, 65535, "7071", "admin plane TCP port", F(admin_port), NULL, NULL,
     NULL, false},
    {"admin-token", CFG_STRING, 0, 0, "",
     "Bearer token for state-changing admin calls (empty: refuse them); prefer the file or "
     "the environment",
     F(admin_token), server__cfg_check_token, "a string", "TLSERVE_ADMIN_TOKEN", true},
    {"admin-token-file", CFG_STRING, 0, 0, "",
     "file holding the admin token (read at start, trailing newline stripped; mode 0600)",
     F(admin_token_file), NULL, "a file path", NULL, false},
    {"workers", CFG_INT, 0, 1024, "0", "data plane threads (0: one per core)", F(workers), NULL,
     NULL, NULL, false},
    {"lookup-threads", CFG_INT, 0, 64, "0",
     "helper threads that split one request's lookups with its worker (0: none)", F(lookup_threads),
     NULL, NULL, NULL, false},
    {"load-threads", CFG_INT, 0, 1024, "0",
     "snapshot loader threads (0: one per core for --model at start, then the cores "
     "left by the workers and lookup threads, at least 1)",
     F(load_threads), NULL, NULL, NULL, false},
    {"load-sched-idle", CFG_BOOL, 0, 1, "true",
     "run loads, the gate's checks and folds as SCHED_IDLE: only on CPU the workers leave "
     "(false: nice +10, a share even when the workers are busy)",
     F(load_sched_idle), NULL, NULL, NULL, false},
    {"max-inflight", CFG_INT, 1, 1 << 20, "128",
     "answers one connection may have queued and unsent; at it the worker stops reading that "
     "connection until they drain (back-pressure)",
     F(max_inflight), NULL, NULL, NULL, false},
    {"max-unsent-bytes", CFG_INT, 4096, 1 << 30, "262144",
     "answer bytes one connection may have queued and unsent; at it the worker stops reading "
     "that connection until they drain, as at --max-inflight",
     F(max_unsent_bytes), NULL, NULL, NULL, false},
    {"send-buffer-bytes", CFG_INT, 0, 1 << 30, "262144",
     "each connection's kernel send buffer (SO_SNDBUF; the kernel doubles it); 0: the kernel's "
     "autotuning, up to net.ipv4.tcp_wmem's maximum",
     F(send_buffer_bytes), NULL, NULL, NULL, false},
    {"max-connections", CFG_INT, 1, 1 << 20, "1024", "connections per worker", F(max_connections),
     NULL, NULL, NULL, false},
    {"max-frame-bytes", CFG_INT, 1024, CODEC_MAX_PAYLOAD, "16777216",
     "largest accepted frame payload in bytes", F(max_frame_bytes), NULL, NULL, NULL, false},
    {"max-input-bytes", CFG_INT, 65536, 1 << 30, "268435456",
     "received bytes a worker may hold for unanswered frames, all connections together",
     F(max_input_bytes), NULL, NULL, NULL, false},
    {"max-output-bytes", CFG_INT, 65536, 1 << 30, "134217728",
     "answer bytes a worker may hold for its connections together; past it the connection "
     "with the most unsent is closed",
     F(max_output_bytes), NULL, NULL, NULL, false},
    {"frame-timeout-ms", CFG_INT, 1, 3600000, "10000",
     "close a connection whose partial frame is older than this (slow senders)",
     F(frame_timeout_ms), NULL, NULL, NULL, false},
    {"idle-timeout-ms", CFG_INT, 1, 3600000, "20000",
     "close a connection that has sent nothing and awaited no answer for this long",
     F(idle_timeout_ms), NULL, NULL, NULL, false},
    {"send-timeout-ms", CFG_INT, 1, 3600000, "10000",
     "close a connection whose unsent answers make no progress for this long (a peer that "
     "does not read)",
     F(send_timeout_ms), NULL, NULL, NULL, false},
    {"gate", CFG_BOOL, 0, 1, "true",
     "check each candidate version (sanity, shadow scoring) before it goes live", F(gate), NULL,
     NULL, NULL, false},
    {"gate-max-abs", CFG_DOUBLE, 0, 1000000000000LL, "1e4",
     "gate: refuse a version with a value that is NaN, infinite or larger than this in magnitude",
     F(gate_max_abs), NULL, NULL, NULL, false},
    {"gate-allow-kind-change", CFG_BOOL, 0, 1, "false",
     "gate: let a version change the active one's kind or floats per key",
     F(gate_allow_kind_change), NULL, NULL, NULL, false},
    {"gate-sample", CFG_INT, 0, 65536, "1000",
     "gate: live PREDICT requests kept for shadow scoring (0: none, sanity only)", F(gate_sample),
     NULL, NULL, NULL, false},
    {"gate-items-per-request", CFG_INT, 0, 4096, "0",
     "gate: items of each sampled request scored by both versions, spread over its list "
     "(0: all; fewer cost less and make the PSI noisier)",
     F(gate_items_per_request), NULL, NULL, NULL, false},
    {"gate-slot-bytes", CFG_INT, 64, 16777216, "65536",
     "gate: largest PREDICT payload kept in the sample (a larger one keeps its shared block "
     "and first items)",
     F(gate_slot_bytes), NULL, NULL, NULL, false},
    {"gate-max-mean-shift", CFG_DOUBLE, 0, 1000000, "0.5",
     "gate: refuse a version whose mean prediction on the sample moves by more than this "
     "fraction of the active's",
     F(gate_max_mean_shift), NULL, NULL, NULL, false},
    {"gate-max-psi", CFG_DOUBLE, 0, 1000000, "0.25",
     "gate: refuse a version whose score distribution on the sample has a PSI over this",
     F(gate_max_psi), NULL, NULL, NULL, false},
    {"gate-eval-file", CFG_STRING, 0, 0, "",
     "gate: labeled libsvm or libffm file; refuse a version whose logloss on it is worse than "
     "the active's by more than --gate-max-logloss-increase (read at start: a bad file stops "
     "the server)",
     F(gate_eval_file), check_eval_file, "a file path", NULL, false},
    {"gate-eval-max-rows", CFG_INT, 1, 10000000, "100000",
     "gate: rows of --gate-eval-file held in memory and scored (the first ones)",
     F(gate_eval_max_rows), NULL, NULL, NULL, false},
    {"gate-max-logloss-increase", CFG_DOUBLE, 0, 1000000, "0.01",
     "gate: refuse a version whose logloss on --gate-eval-file exceeds the active's by more "
     "than this (absolute)",
     F(gate_max_logloss_increase), NULL, NULL, NULL, false},
    {"guard-window-ms", CFG_INT, 0, 86400000, "30000",
     "guard: how long a version made live by a load is watched, rolled back by itself when out "
     "of bounds (0: no guard)",
     F(guard_window_ms), NULL, NULL, NULL, false},
    {"guard-min-requests", CFG_INT, 1, 1000000000, "100",
     "guard: scored requests needed before a verdict (and for the previous version's baseline)",
     F(guard_min_requests), NULL, NULL, NULL, false},
    {"guard-max-error-rate", CFG_DOUBLE, 0, 1, "0.01",
     "guard: roll back when this fraction of the new version's requests fail (internal error "
     "or non-finite score)",
     F(guard_max_error_rate), NULL, NULL, NULL, false},
    {"guard-max-mean-ratio", CFG_DOUBLE, 1, 1000000, "1.5",
     "guard: roll back when the mean prediction new/old or old/new exceeds this",
     F(guard_max_mean_ratio), NULL, NULL, NULL, false},
    {"online", CFG_BOOL, 0, 1, "false",
     "online learning: TRAIN frames train the served model in place (LR, FM, FFM; the DNN's wide "
     "part and embeddings)",
     F(online), NULL, NULL, NULL, false},
    {"online-optimizer", CFG_STRING, 0, 0, "ftrl", "online learning: ftrl, adagrad or sgd",
     F(online_optimizer), check_optimizer, "ftrl|adagrad|sgd", NULL, false},
    {"online-alpha", CFG_DOUBLE, -1, 1000000, "-1",
     "online learning: learning rate (< 0: the optimizer's default, as tltrain's)", F(online_alpha),
     NULL, NULL, NULL, false},
    {"online-beta", CFG_DOUBLE, -1, 1000000, "-1",
     "online learning: FTRL beta, Adagrad epsilon (< 0: the optimizer's default)", F(online_beta),
     NULL, NULL, NULL, false},
    {"online-l1", CFG_DOUBLE, -1, 1000000, "-1",
     "online learning: FTRL L1 (< 0: the optimizer's default)", F(online_l1), NULL, NULL, NULL,
     false},
    {"online-l2", CFG_DOUBLE, -1, 1000000, "-1",
     "online learning: L2 (< 0: the optimizer's default)", F(online_l2), NULL, NULL, NULL, false},
    {"online-queue-bytes", CFG_INT, 65536, 1 << 30, "67108864",
     "online learning: TRAIN payload bytes queued per model before OVERLOADED",
     F(online_queue_bytes), NULL, NULL, NULL, false},
    {"online-max-samples-per-s", CFG_INT, 0, 1 << 30, "0",
     "online learning: samples per second a model learns before TRAIN gets OVERLOADED "
     "(0: no cap)",
     F(online_max_samples_per_s), NULL, NULL, NULL, false},
    {"online-max-feature-value", CFG_DOUBLE, 1, 1e30, "1e6",
     "online learning: the largest |feature value| a sample is learned with; a TRAIN holding "
     "one beyond it is refused (BAD_VALUE), a joined or replayed sample skipped and counted "
     "(a step on a huge value can make a weight infinite, which stops training)",
     F(online_max_feature_value), NULL, NULL, NULL, false},
    {"online-nice", CFG_INT, 0, 19, "19",
     "online learning: the trainer threads' nice value; above 0 the workers go first when a "
     "core is contended, so training costs serving less (0: equal)",
     F(online_nice), NULL, NULL, NULL, false},
    {"online-boost-ms", CFG_INT, 0, 60000, "30",
     "online learning: when a queued sample has waited this long (the trainer starved at "
     "--online-nice), the trainer runs at --online-boost-nice until its queue is empty (needs "
     "CAP_SYS_NICE; 0: never)",
     F(online_boost_ms), NULL, NULL, NULL, false},
    {"online-boost-nice", CFG_INT, 0, 19, "0",
     "online learning: the trainer's nice while boosted (--online-boost-ms); between 0 (level "
     "with the workers: the freshest) and --online-nice (no boost)",
     F(online_boost_nice), NULL, NULL, NULL, false},
    {"online-export-ms", CFG_INT, 0, 86400000, "10000",
     "online learning with --model-repo: export the online updates as a delta version of the "
     "model this often, and at a clean shutdown (0: never)",
     F(online_export_ms), NULL, NULL, NULL, false},
    {"online-full-every", CFG_INT, 1, 2048, "360",
     "online learning with --online-export-ms: every N-th export writes a FULL version (every "
     "key and its optimizer state) instead of a delta, so the chain a restart loads stays at "
     "most N links long (1: every export is full)",
     F(online_full_every), NULL, NULL, NULL, false},
    {"sample-log-dir", CFG_STRING, 0, 0, "",
     "online learning: directory of the per-model sample logs; a TRAIN or FEEDBACK is appended "
     "there before it is acknowledged, and a restart learns it again (empty: none, acknowledged "
     "means queued)",
     F(sample_log_dir), NULL, "a directory path", NULL, false},
    {"sample-log-sync-ms", CFG_INT, 1, 3600000, "1000",
     "online learning: fdatasync the sample log at most this often (a kill -9 loses nothing "
     "either way; a power cut loses at most this much)",
     F(sample_log_sync_ms), NULL, NULL, NULL, false},
    {"sample-log-segment-kib", CFG_INT, 4, 4194304, "65536",
     "online learning: size at which a sample log segment is followed by a new one (trims "
     "delete whole segments)",
     F(sample_log_segment_kib), NULL, NULL, NULL, false},
    {"impression-log-mib", CFG_INT, 1, 1 << 20, "1024",
     "online learning: memory for PREDICTs flagged LOG awaiting FEEDBACK (full: the oldest are "
     "evicted early, their items learned as negatives)",
     F(impression_log_mib), NULL, NULL, NULL, false},
    {"impression-window-ms", CFG_INT, 1, 86400000, "300000",
     "online learning: how long a logged impression waits for its FEEDBACK",
     F(impression_window_ms), NULL, NULL, NULL, false},
    {"bus-servers", CFG_STRING, 0, 0, "",
     "online learning over NATS JetStream: comma-separated server URLs; every replica learns "
     "the same stream in order (needs --sample-log-dir, the outbox; empty: no bus)",
     F(bus_servers), NULL, "nats://host:port,...", NULL, false},
    {"bus-stream", CFG_STRING, 0, 0, "TLSAMPLES",
     "online learning: the JetStream stream's name (created when missing)", F(bus_stream), NULL,
     "a stream name", NULL, false},
    {"bus-subject-prefix", CFG_STRING, 0, 0, "tlserve.samples",
     "online learning: a model's samples go to subject <prefix>.<model>", F(bus_subject_prefix),
     NULL, "a subject", NULL, false},
    {"bus-replicas", CFG_INT, 1, 5, "3",
     "online learning: the stream's replicas when tlserve creates it", F(bus_replicas), NULL, NULL,
     NULL, false},
    {"bus-node", CFG_STRING, 0, 0, "",
     "online learning: this server's name in the stream's message ids (empty: hostname:port)",
     F(bus_node), NULL, "a name", NULL, false},
    {"bus-mode", CFG_STRING, 0, 0, "replay",
     "online learning over the bus: replay (every replica learns every sample, in the stream's "
     "order) or partitioned (each learns its own samples and the replicas exchange compressed "
     "updates: LR-FTRL statistics, FM/FFM/DNN rows)",
     F(bus_mode), check_bus_mode, "replay|partitioned", NULL, false},
    {"sync-interval-ms", CFG_INT, 10, 3600000, "1000",
     "partitioned replicas: publish the accumulated updates this often", F(sync_interval_ms), NULL,
     NULL, NULL, false},
    {"sync-max-keys", CFG_INT, 1024, 1 << 26, "262144",
     "partitioned replicas: keys an update accumulator holds (two per model, ~70 B a key); "
     "full: a new key's update stays local (tlserve_sync_overflow_total) and the message goes "
     "out at once",
     F(sync_max_keys), NULL, NULL, NULL, false},
    {"sync-topk", CFG_DOUBLE, 0.001, 1, "0.02",
     "partitioned replicas: fraction of the held keys (largest updates first) a message carries; "
     "the rest wait as residuals",
     F(sync_topk), NULL, NULL, NULL, false},
    {"sync-bits", CFG_INT, 1, 4, "4",
     "partitioned replicas: bits a value of a compressed update takes: 4 (a sign and a power of "
     "two under its chunk's largest value) or 1 (a sign and the chunk's mean: 4x fewer value "
     "bytes, a larger error carried to later turns); rows and, after its warm-up, a DNN's MLP",
     F(sync_bits), check_sync_bits, "1 or 4", NULL, false},
    {"sync-exact", CFG_BOOL, 0, 1, "false",
     "partitioned replicas: send every turn exact (f32 values, every held key), nothing kept as "
     "a residual: the uncompressed exchange the compressed top-k is measured against "
     "(tlserve_sync_bytes_total beside tlserve_sync_fp32_bytes_total)",
     F(sync_exact), NULL, NULL, NULL, false},
    {"sync-dnn-warmup", CFG_INT, 1, 1 << 30, "1000",
     "partitioned replicas, DNN: local steps of the MLP under plain Adam (sent exact, f32) "
     "before its variance freezes and its deltas go out as 1 bit a value with error feedback",
     F(sync_dnn_warmup), NULL, NULL, NULL, false},
    {"sync-dnn-chunk", CFG_INT, 1, 65535, "256",
     "partitioned replicas, DNN: MLP values sharing one scale in a 1-bit message",
     F(sync_dnn_chunk), NULL, NULL, NULL, false},
    {"sync-dnn-lr", CFG_DOUBLE, 1e-7, 1, "0.0003",
     "partitioned replicas, DNN: the MLP's Adam step (the MLP learns online only in this mode)",
     F(sync_dnn_lr), NULL, NULL, NULL, false},
    {"impression-negatives", CFG_BOOL, 0, 1, "true",
     "online learning: items of a logged impression with no FEEDBACK in the window are learned "
     "as negatives (the delayed-feedback window)",
     F(impression_negatives), NULL, NULL, NULL, false},
    {"train-file", CFG_STRING, 0, 0, "",
     "online learning: files learned at start, in order (comma-separated), through the TRAIN "
     "path (the checks, the sample log, the queue, the cap); a bad line stops its file (empty: "
     "none)",
     F(train_file), check_train_files, "PATH[,PATH...]", NULL, false},
    {"train-file-model", CFG_STRING, 0, 0, "",
     "online learning: the model --train-file trains (empty: the only model served)",
     F(train_file_model), check_model_name, "[A-Za-z0-9_.-]+", NULL, false},
    {"train-file-format", CFG_STRING, 0, 0, "auto",
     "online learning: --train-file's format, as tltrain's --format; auto: told from each "
     "file's first line with a feature",
     F(train_file_format), check_train_format, "auto|libsvm|libffm|criteo", NULL, false},
    {"force-epoll", CFG_BOOL, 0, 1, "false", "use the epoll data plane even where io_uring works",
     F(force_epoll), NULL, NULL, NULL, false},
    {"log-level", CFG_STRING, 0, 0, "info", "log verbosity", F(log_level), check_level,
     "error|warn|info|debug", NULL, false},
};

const size_t server__cfg_ntable = sizeof server__cfg_table / sizeof server__cfg_table[0];

/* Indexed by the LL_* level (log.h). */
static const char *const level_names[] = {"error", "warn", "info", "debug"};
_Static_assert(LL_ERROR == 0 && LL_WARN == 1 && LL_INFO == 2 && LL_DEBUG == 3,
               "level_names is indexed by LL_*");

/* ---- checks ------------------------------------------------------------- */

static int check_addr(const char *v, char *why, size_t why_len)
{
    unsigned char buf[sizeof(struct in6_addr)];
    if (inet_pton(AF_INET, v, buf) == 1 || inet_pton(AF_INET6, v, buf) == 1)
        return 0;
    snprintf(why, why_len, "'%s' is not an IPv4 or IPv6 address (e.g. 127.0.0.1, 0.0.0.0, ::1)", v);
    return -1;
}

int server__cfg_log_level(const char *name)
{
    for (int i = 0; i < (int)(sizeof level_names / sizeof level_names[0]); i++)
        if (strcmp(name, level_names[i]) == 0)
            return i;
    return -1;
}

static int check_level(const char *v, char *why, size_t why_len)
{
    if (server__cfg_log_level(v) >= 0)
        return 0;
    snprintf(why, why_len, "'%s' is not a log level (allowed: error, warn, info, debug)", v);
    return -1;
}

static int check_bus_mode(const char *v, char *why, size_t why_len)
{
    if (strcmp(v, "replay") == 0 || strcmp(v, "partitioned") == 0)
        return 0;
    snprintf(why, why_len, "'%s' is not a bus mode (allowed: replay, partitioned)", v);
    return -1;
}

static int check_sync_bits(const char *v, char *why, size_t why_len)
{
    if (strcmp(v, "1") == 0 || strcmp(v, "4") == 0)
        return 0;
    snprintf(why, why_len, "'%s' is not a value width (allowed: 1, 4)", v);
    return -1;
}

static int check_optimizer(const char *v, char *why, size_t why_len)
{
    if (strcmp(v, "ftrl") == 0 || strcmp(v, "adagrad") == 0 || strcmp(v, "sgd") == 0)
        return 0;
    snprintf(why, why_len, "'%s' is not an optimizer (allowed: ftrl, adagrad, sgd)", v);
    return -1;
}

/* A token is compared with what follows "Bearer " less its surrounding
 * blanks (admin.c): one with blanks at its ends or control characters in it
 * could never match, so it is refused rather than silently useless. */
int server__cfg_check_token(const char *v, char *why, size_t why_len)
{
    size_t n = strlen(v);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)v[i];
        if (ch < 0x20 || ch == 0x7f) {
            snprintf(why, why_len, "the token has a control character (byte 0x%02x at %zu)", ch, i);
            return -1;
        }
    }
    if (n > 0 && (v[0] == ' ' || v[n - 1] == ' ')) {
        snprintf(why, why_len, "the token starts or ends with a blank");
        return -1;
    }
    return 0;
}

/* The model root must name an existing directory: a typo must not leave
 * every load refused (or, resolved later, a different tree allowed). */
static int check_root(const char *v, char *why, size_t why_len)
{
    if (!*v)
        return 0;
    char real[PATH_MAX];
    struct stat st;
    if (!realpath(v, real) || stat(real, &st) != 0) {
        snprintf(why, why_len, "cannot resolve '%s': %s", v, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(why, why_len, "'%s' is not a directory", v);
        return -1;
    }
    return 0;
}

static int check_model_name(const char *v, char *why, size_t why_len)
{
    if (!*v)
        return 0;
    if (v[0] == '.') {
        snprintf(why, why_len, "'%s' starts with '.' (a model directory name may not)", v);
        return -1;
    }
    for (const char *c = v; *c; c++)
        if (!codec_name_char((unsigned char)*c)) {
            snprintf(why, why_len, "'%s' has a character outside [A-Za-z0-9_.-] at byte %zu", v,
                     (size_t)(c - v));
            return -1;
        }
    return 0;
}

/* The evaluation file must be a readable regular file; its rows are read
 * (and checked line by line) when the server starts (gate_eval.h). */
static int check_eval_file(const char *v, char *why, size_t why_len)
{
    struct stat st;
    if (!*v)
        return 0;
    if (stat(v, &st) != 0) {
        snprintf(why, why_len, "cannot open '%s': %s", v, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(why, why_len, "'%s' is not a regular file", v);
        return -1;
    }
    return 0;
}

/* Each of the comma-separated training files must be a readable regular
 * file now: a typo must stop the start, not be found when the feeder gets
 * to it (online_file.c reads them once the model is active). */
static int check_train_files(const char *v, char *why, size_t why_len)
{
    const char *p = v;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char path[PATH_MAX];
        struct stat st;
        if (n == 0 || n >= sizeof path) {
            snprintf(why, why_len, "%s path at byte %zu of the list",
                     n ? "a too long" : "an empty", (size_t)(p - v));
            return -1;
        }
        memcpy(path, p, n);
        path[n] = '\0';
        if (stat(path, &st) != 0 || access(path, R_OK) != 0) {
            snprintf(why, why_len, "cannot read training file '%s': %s", path, strerror(errno));
            return -1;
        }
        if (!S_ISREG(st.st_mode)) {
            snprintf(why, why_len, "training file '%s' is not a regular file", path);
            return -1;
        }
        p += n + (end != NULL);
        if (end && !*p) {
            snprintf(why, why_len, "the list ends with a comma");
            return -1;
        }
    }
    return 0;
}

static int check_train_format(const char *v, char *why, size_t why_len)
{
    if (strcmp(v, "auto") == 0 || strcmp(v, "libsvm") == 0 || strcmp(v, "libffm") == 0 ||
        strcmp(v, "criteo") == 0)
        return 0;
    snprintf(why, why_len, "'%s' is not auto, libsvm, libffm or criteo", v);
    return -1;
}
