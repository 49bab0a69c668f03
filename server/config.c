/*
 * config.c — tlserve's settings: one table that the defaults, the config
 * file, the command-line flags and --help all read (Redis's standardConfig).
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
 * ORDER OF SOURCES
 *   defaults -> --config FILE (INI, keys in [server]) -> environment -> flags.
 *   --config is found by a first pass over argv, so "--port 1 --config f"
 *   still lets the flag win over the file.  --help anywhere prints the
 *   table and wins over everything (even a bad flag before it).
 *
 * THE ADMIN TOKEN
 *   Whoever holds it can make the server load any directory it can read, so
 *   it is taken from where other users cannot see it: --admin-token-file
 *   (read once here; one trailing newline stripped; missing, unreadable,
 *   empty or not a regular file is an error; readable by others is a
 *   warning) or TLSERVE_ADMIN_TOKEN.  --admin-token still works, with a
 *   warning.  A token and a token file together are refused: which one is
 *   in force must not depend on a precedence rule the operator forgot.
 *
 * THE MODEL ROOT
 *   --model-root limits what the token can load: admin loads (admin.c) and
 *   --model must resolve (realpath: symlinks and '..' followed) to a path
 *   strictly under the root's real path, with a '/' boundary.  The root
 *   must exist as a directory when the settings are read.  --model-repo
 *   must lie under it too, and is then watched by its real path.
 *
 * FLAGS
 *   "--name value" or "--name=value".  A bool flag takes a value only in the
 *   "=" form: "--force-epoll" alone means true, "--force-epoll=false" false
 *   (so "--force-epoll --port 1" is not ambiguous).
 *
 * ERRORS
 *   The first bad value ends parsing: one line on stderr that names where it
 *   came from (flag, or file:line), the setting, the value and what is
 *   allowed, then server_config_load() returns -1.  Unknown flags, unknown
 *   file keys or sections, positional arguments, numbers with trailing junk
 *   and unparseable addresses are all refused: a typo in a config must not
 *   silently leave a default in force.  For the same reason --config must
 *   name a regular file: a directory reads as an empty file.
 *
 * THREAD SAFETY
 *   Runs on the main thread before any other thread starts; it also sets
 *   server_log_level (log.h), which other threads then only read.
 */
#include "codec/codec.h"
#include "log.h"
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ini.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

int server_log_level = LL_INFO;

typedef enum cfg_type {
    CFG_INT,
    CFG_BOOL,
    CFG_STRING,
    CFG_DOUBLE /* a finite number in [min, max] */
} cfg_type_t;

/* Extra check of a string value; returns 0 or -1 with why filled. */
typedef int (*cfg_check_fn)(const char *value, char *why, size_t why_len);

typedef struct cfg_entry {
    const char *name; /* flag name without "--", '-' between words */
    cfg_type_t type;
    long long min, max;  /* CFG_INT: allowed range */
    const char *def;     /* default, as text */
    const char *help;    /* one line for --help */
    size_t offset;       /* of the field in server_config_t */
    size_t size;         /* CFG_STRING: size of the char array */
    cfg_check_fn check;  /* CFG_STRING: extra validation, or NULL */
    const char *allowed; /* CFG_STRING: allowed values for --help, or NULL */
    const char *env;     /* environment variable that sets it, or NULL */
    bool secret;         /* warn when given as a flag (visible in /proc/PID/cmdline) */
} cfg_entry_t;

static int check_addr(const char *v, char *why, size_t why_len);
static int check_level(const char *v, char *why, size_t why_len);
static int check_token(const char *v, char *why, size_t why_len);
static int check_root(const char *v, char *why, size_t why_len);
static int check_model_name(const char *v, char *why, size_t why_len);
static int check_eval_file(const char *v, char *why, size_t why_len);
static int check_optimizer(const char *v, char *why, size_t why_len);
static int check_bus_mode(const char *v, char *why, size_t why_len);

#define F(field) offsetof(server_config_t, field), sizeof(((server_config_t *)0)->field)

static const cfg_entry_t table[] = {
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
     F(admin_token), check_token, "a string", "TLSERVE_ADMIN_TOKEN", true},
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
     "gate: live PREDICT requests kept for shadow scoring (0: none, sanity only)",
     F(gate_sample), NULL, NULL, NULL, false},
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
     "online learning: TRAIN frames train the served model in place (LR, FM, FFM; the DNN's wide part and embeddings)",
     F(online), NULL, NULL, NULL, false},
    {"online-optimizer", CFG_STRING, 0, 0, "ftrl", "online learning: ftrl, adagrad or sgd",
     F(online_optimizer), check_optimizer, "ftrl|adagrad|sgd", NULL, false},
    {"online-alpha", CFG_DOUBLE, -1, 1000000, "-1",
     "online learning: learning rate (< 0: the optimizer's default, as tltrain's)",
     F(online_alpha), NULL, NULL, NULL, false},
    {"online-beta", CFG_DOUBLE, -1, 1000000, "-1",
     "online learning: FTRL beta, Adagrad epsilon (< 0: the optimizer's default)",
     F(online_beta), NULL, NULL, NULL, false},
    {"online-l1", CFG_DOUBLE, -1, 1000000, "-1",
     "online learning: FTRL L1 (< 0: the optimizer's default)", F(online_l1), NULL, NULL,
     NULL, false},
    {"online-l2", CFG_DOUBLE, -1, 1000000, "-1",
     "online learning: L2 (< 0: the optimizer's default)", F(online_l2), NULL, NULL, NULL,
     false},
    {"online-queue-bytes", CFG_INT, 65536, 1 << 30, "67108864",
     "online learning: TRAIN payload bytes queued per model before OVERLOADED",
     F(online_queue_bytes), NULL, NULL, NULL, false},
    {"online-max-samples-per-s", CFG_INT, 0, 1 << 30, "0",
     "online learning: samples per second a model learns before TRAIN gets OVERLOADED "
     "(0: no cap)",
     F(online_max_samples_per_s), NULL, NULL, NULL, false},
    {"online-nice", CFG_INT, 0, 19, "19",
     "online learning: the trainer threads' nice value; above 0 the workers go first when a "
     "core is contended, so training costs serving less (0: equal)",
     F(online_nice), NULL, NULL, NULL, false},
    {"online-export-ms", CFG_INT, 0, 86400000, "10000",
     "online learning with --model-repo: export the online updates as a delta version of the "
     "model this often, and at a clean shutdown (0: never)",
     F(online_export_ms), NULL, NULL, NULL, false},
    {"sample-log-dir", CFG_STRING, 0, 0, "",
     "online learning: directory of the per-model sample logs; a TRAIN or FEEDBACK is appended "
     "there before it is acknowledged, and a restart learns it again (empty: none, acknowledged "
     "means queued)",
     F(sample_log_dir), NULL, "a directory path", NULL, false},
    {"sample-log-sync-ms", CFG_INT, 1, 3600000, "1000",
     "online learning: fdatasync the sample log at most this often (a kill -9 loses nothing "
     "either way; a power cut loses at most this much)",
     F(sample_log_sync_ms), NULL, NULL, NULL, false},
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
     "online learning: the stream's replicas when tlserve creates it", F(bus_replicas), NULL,
     NULL, NULL, false},
    {"bus-node", CFG_STRING, 0, 0, "",
     "online learning: this server's name in the stream's message ids (empty: hostname:port)",
     F(bus_node), NULL, "a name", NULL, false},
    {"bus-mode", CFG_STRING, 0, 0, "replay",
     "online learning over the bus: replay (every replica learns every sample, in the stream's "
     "order) or partitioned (each learns its own samples and the replicas exchange compressed "
     "updates: LR-FTRL statistics, FM/FFM/DNN rows)",
     F(bus_mode), check_bus_mode, "replay|partitioned", NULL, false},
    {"sync-interval-ms", CFG_INT, 10, 3600000, "1000",
     "partitioned replicas: publish the accumulated updates this often", F(sync_interval_ms),
     NULL, NULL, NULL, false},
    {"sync-max-keys", CFG_INT, 1024, 1 << 26, "262144",
     "partitioned replicas: keys an update accumulator holds (two per model, ~70 B a key); "
     "full: a new key's update stays local (tlserve_sync_overflow_total) and the message goes "
     "out at once",
     F(sync_max_keys), NULL, NULL, NULL, false},
    {"sync-topk", CFG_DOUBLE, 0.001, 1, "0.05",
     "partitioned replicas: fraction of the held keys (largest updates first) a message carries; "
     "the rest wait as residuals",
     F(sync_topk), NULL, NULL, NULL, false},
    {"impression-negatives", CFG_BOOL, 0, 1, "true",
     "online learning: items of a logged impression with no FEEDBACK in the window are learned "
     "as negatives (the delayed-feedback window)",
     F(impression_negatives), NULL, NULL, NULL, false},
    {"force-epoll", CFG_BOOL, 0, 1, "false", "use the epoll data plane even where io_uring works",
     F(force_epoll), NULL, NULL, NULL, false},
    {"log-level", CFG_STRING, 0, 0, "info", "log verbosity", F(log_level), check_level,
     "error|warn|info|debug", NULL, false},
};

#define NTABLE (sizeof table / sizeof table[0])

static const char *const level_names[] = {"error", "warn", "info", "debug"};

/* ---- checks ------------------------------------------------------------- */

static int check_addr(const char *v, char *why, size_t why_len)
{
    unsigned char buf[sizeof(struct in6_addr)];
    if (inet_pton(AF_INET, v, buf) == 1 || inet_pton(AF_INET6, v, buf) == 1)
        return 0;
    snprintf(why, why_len, "'%s' is not an IPv4 or IPv6 address (e.g. 127.0.0.1, 0.0.0.0, ::1)", v);
    return -1;
}

static int check_level(const char *v, char *why, size_t why_len)
{
    for (size_t i = 0; i < sizeof level_names / sizeof level_names[0]; i++)
        if (strcmp(v, level_names[i]) == 0)
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
static int check_token(const char *v, char *why, size_t why_len)
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
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '_' || *c == '.' || *c == '-')) {
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

int server_path_under_root(const char *root, const char *path, char *resolved, size_t len,
                           char *why, size_t why_len)
{
    char rroot[PATH_MAX], rpath[PATH_MAX];
    if (!realpath(root, rroot)) {
        snprintf(why, why_len, "the model root '%s' cannot be resolved: %s", root, strerror(errno));
        return -1;
    }
    if (!realpath(path, rpath)) {
        snprintf(why, why_len, "'%s' cannot be resolved: %s", path, strerror(errno));
        return -1;
    }
    /* realpath never ends in '/' except for "/" itself: under root means
     * root's path, a '/', then at least one byte (so "/models2" is not
     * under "/models" and the root itself is not under itself). */
    size_t n = strlen(rroot);
    bool under = n == 1 ? rpath[1] != '\0'
                        : strncmp(rpath, rroot, n) == 0 && rpath[n] == '/' && rpath[n + 1] != '\0';
    if (!under) {
        snprintf(why, why_len, "'%s' resolves to '%s', which is not under the model root '%s'",
                 path, rpath, rroot);
        return -1;
    }
    if (strlen(rpath) >= len) {
        snprintf(why, why_len, "'%s' resolves to a path of %zu bytes (at most %zu)", path,
                 strlen(rpath), len - 1);
        return -1;
    }
    memcpy(resolved, rpath, strlen(rpath) + 1);
    return 0;
}

/* ---- lookup and set ------------------------------------------------------- */

/* Compares a user-given name (flag or key, '_' or '-') with a table name;
 * n is the length of the given name (it may not be NUL-terminated there). */
static int name_eq(const char *given, size_t n, const char *name)
{
    if (strlen(name) != n)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char g = given[i] == '_' ? '-' : given[i];
        if (g != name[i])
            return 0;
    }
    return 1;
}

static const cfg_entry_t *find(const char *given, size_t n)
{
    for (size_t i = 0; i < NTABLE; i++)
        if (name_eq(given, n, table[i].name))
            return &table[i];
    return NULL;
}

static int parse_bool(const char *v, bool *out)
{
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(v, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(v, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return -1;
}

/* Sets e's field from the text v.  Returns 0, or -1 with why saying what is
 * wrong with v and what is allowed (the caller names the setting). */
static int set_value(server_config_t *cfg, const cfg_entry_t *e, const char *v, char *why,
                     size_t why_len)
{
    char *field = (char *)cfg + e->offset;
    switch (e->type) {
    case CFG_INT: {
        char *end;
        errno = 0;
        long long x = strtoll(v, &end, 10);
        /* strtoll skips leading blanks; we do not accept them either way. */
        if (*v == '\0' || *v == ' ' || *v == '\t' || *end != '\0' || errno == ERANGE) {
            snprintf(why, why_len, "'%s' is not an integer (allowed %lld..%lld)", v, e->min,
                     e->max);
            return -1;
        }
        if (x < e->min || x > e->max) {
            snprintf(why, why_len, "%lld is out of range (allowed %lld..%lld)", x, e->min, e->max);
            return -1;
        }
        *(int *)field = (int)x;
        return 0;
    }
    case CFG_BOOL: {
        bool b;
        if (parse_bool(v, &b) != 0) {
            snprintf(why, why_len,
                     "'%s' is not a boolean (allowed true/false, yes/no, on/off, 1/0)", v);
            return -1;
        }
        *(bool *)field = b;
        return 0;
    }
    case CFG_STRING: {
        size_t n = strlen(v);
        if (n >= e->size) {
            snprintf(why, why_len, "value of %zu bytes is too long (allowed at most %zu)", n,
                     e->size - 1);
            return -1;
        }
        if (e->check && e->check(v, why, why_len) != 0)
            return -1;
        memcpy(field, v, n + 1);
        return 0;
    }
    case CFG_DOUBLE: {
        char *end;
        errno = 0;
        double x = strtod(v, &end);
        if (*v == '\0' || *v == ' ' || *v == '\t' || *end != '\0' || errno == ERANGE ||
            !isfinite(x)) {
            snprintf(why, why_len, "'%s' is not a number (allowed %lld..%lld)", v, e->min,
                     e->max);
            return -1;
        }
        if (x < (double)e->min || x > (double)e->max) {
            snprintf(why, why_len, "%g is out of range (allowed %lld..%lld)", x, e->min, e->max);
            return -1;
        }
        *(double *)field = x;
        return 0;
    }
    }
    snprintf(why, why_len, "internal error: bad type");
    return -1;
}

/* ---- the file --------------------------------------------------------------- */

typedef struct file_ctx {
    server_config_t *cfg;
    char msg[600]; /* first error, without the "file:line: " prefix */
    bool failed;
} file_ctx_t;

/* inih calls this per key; a non-zero return keeps parsing, 0 records the
 * line as the (first) error.  We stop acting after the first error so that
 * the message printed is about the line ini_parse() reports. */
static int on_key(void *user, const char *section, const char *key, const char *value)
{
    file_ctx_t *fc = user;
    if (fc->failed)
        return 1;
    char why[400];
    const cfg_entry_t *e;
    if (strcmp(section, "server") != 0) {
        if (section[0] == '\0')
            snprintf(fc->msg, sizeof fc->msg,
                     "key '%s' is outside a section (put it under [server])", key);
        else
            snprintf(fc->msg, sizeof fc->msg, "unknown section [%s] (only [server] is read)",
                     section);
        goto bad;
    }
    e = find(key, strlen(key));
    if (!e) {
        snprintf(fc->msg, sizeof fc->msg, "unknown setting '%s' (see tlserve --help)", key);
        goto bad;
    }
    if (set_value(fc->cfg, e, value, why, sizeof why) != 0) {
        snprintf(fc->msg, sizeof fc->msg, "%s: %s", e->name, why);
        goto bad;
    }
    return 1;
bad:
    fc->failed = true;
    return 0;
}

/* Opens path and checks, on the open file (no race with a rename), that it
 * is a regular file: reading a directory yields no lines, so a config that
 * is a directory would leave every default in force without a word. */
static FILE *open_config(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "tlserve: --config: cannot open '%s': %s\n", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        fprintf(stderr, "tlserve: --config: cannot stat '%s': %s\n", path, strerror(errno));
        fclose(f);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        fprintf(stderr, "tlserve: --config: '%s' is %s, not a regular file (give the INI file)\n",
                path, S_ISDIR(st.st_mode) ? "a directory" : "a special file");
        fclose(f);
        return NULL;
    }
    return f;
}

static int load_file(server_config_t *cfg, const char *path)
{
    file_ctx_t fc = {.cfg = cfg};
    FILE *f = open_config(path);
    if (!f)
        return -1;
    int line = ini_parse_file(f, on_key, &fc);
    fclose(f);
    if (line == -2) {
        fprintf(stderr, "tlserve: --config: out of memory reading '%s'\n", path);
        return -1;
    }
    if (line > 0) {
        if (fc.failed)
            fprintf(stderr, "tlserve: %s:%d: %s\n", path, line, fc.msg);
        else
            fprintf(stderr,
                    "tlserve: %s:%d: not an INI line (expected 'name = value' or '[server]')\n",
                    path, line);
        return -1;
    }
    return 0;
}

/* ---- the admin token file ------------------------------------------------------ */

/* Reads cfg->admin_token_file into cfg->admin_token.  Returns 0, or -1 with
 * the reason on stderr.  Warns (LL_WARN) when others may read the file. */
static int read_token_file(server_config_t *cfg)
{
    const char *path = cfg->admin_token_file;
    char buf[sizeof cfg->admin_token + 2]; /* the longest token, "\r\n" */
    char why[400];
    int rc = -1;
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "tlserve: --admin-token-file: cannot open '%s': %s\n", path,
                strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "tlserve: --admin-token-file: '%s' is not a regular file\n", path);
        goto out;
    }
    size_t n = fread(buf, 1, sizeof buf, f);
    if (ferror(f)) {
        fprintf(stderr, "tlserve: --admin-token-file: cannot read '%s': %s\n", path,
                strerror(errno));
        goto out;
    }
    if (n == sizeof buf) {
        fprintf(stderr,
                "tlserve: --admin-token-file: '%s' is too long (a token is at most %zu bytes)\n",
                path, sizeof cfg->admin_token - 1);
        goto out;
    }
    if (n > 0 && buf[n - 1] == '\n')
        n--;
    if (n > 0 && buf[n - 1] == '\r')
        n--;
    buf[n] = '\0';
    if (n == 0) {
        fprintf(stderr, "tlserve: --admin-token-file: '%s' is empty (it must hold the token)\n",
                path);
        goto out;
    }
    if (n >= sizeof cfg->admin_token) {
        fprintf(stderr,
                "tlserve: --admin-token-file: '%s' is too long (a token is at most %zu bytes)\n",
                path, sizeof cfg->admin_token - 1);
        goto out;
    }
    if (memchr(buf, '\0', n) || check_token(buf, why, sizeof why) != 0) {
        fprintf(stderr, "tlserve: --admin-token-file: '%s': %s\n", path,
                memchr(buf, '\0', n) ? "the token has a NUL byte" : why);
        goto out;
    }
    memcpy(cfg->admin_token, buf, n + 1);
    if (st.st_mode & S_IROTH)
        LOG(LL_WARN,
            "--admin-token-file: '%s' is readable by every local user (mode %04o): "
            "chmod o-r it",
            path, (unsigned)(st.st_mode & 07777));
    rc = 0;
out:
    memset(buf, 0, sizeof buf);
    fclose(f);
    return rc;
}

/* ---- --help -------------------------------------------------------------------- */

static void print_help(FILE *f)
{
    fprintf(f,
            "usage: tlserve [--config FILE] [--name value | --name=value ...]\n"
            "\n"
            "tlserve: CTR prediction server (binary protocol on --port, HTTP admin on "
            "--admin-port).\n"
            "Settings apply in order: defaults, then the INI file given by --config (keys in a\n"
            "[server] section, same names as the flags, '_' or '-'), then flags.\n"
            "\n"
            "  %-18s %-12s %-24s %s\n",
            "setting", "default", "allowed", "meaning");
    fprintf(f, "  %-18s %-12s %-24s %s\n", "--config", "", "a file path",
            "INI file read before the flags");
    fprintf(f, "  %-18s %-12s %-24s %s\n", "--help", "", "", "print this and exit");
    for (size_t i = 0; i < NTABLE; i++) {
        const cfg_entry_t *e = &table[i];
        char flag[64], range[64];
        snprintf(flag, sizeof flag, "--%s", e->name);
        switch (e->type) {
        case CFG_INT:
            snprintf(range, sizeof range, "%lld..%lld", e->min, e->max);
            break;
        case CFG_BOOL:
            snprintf(range, sizeof range, "true|false");
            break;
        case CFG_STRING:
            snprintf(range, sizeof range, "%s", e->allowed ? e->allowed : "a string");
            break;
        case CFG_DOUBLE:
            snprintf(range, sizeof range, "%lld..%lld (real)", e->min, e->max);
            break;
        }
        fprintf(f, "  %-18s %-12s %-24s %s%s%s%s\n", flag, e->def[0] ? e->def : "\"\"", range,
                e->help, e->env ? " (env " : "", e->env ? e->env : "", e->env ? ")" : "");
    }
}

/* ---- entry point --------------------------------------------------------------- */

/* Splits a ("--name" or "--name=value") into the name (not NUL-terminated:
 * name_len bytes) and the value after '=' (NULL when there is none).
 * Returns 0, or -1 (reported here) when a is not a flag. */
static int split_flag(const char *a, const char **name, size_t *name_len, const char **val)
{
    if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
        fprintf(stderr,
                "tlserve: unexpected argument '%s' (settings are --name value; see --help)\n", a);
        return -1;
    }
    *name = a + 2;
    const char *eq = strchr(*name, '=');
    *name_len = eq ? (size_t)(eq - *name) : strlen(*name);
    *val = eq ? eq + 1 : NULL;
    return 0;
}

int server_config_load(server_config_t *cfg, int argc, char **argv)
{
    char why[400];
    const char *config_path = NULL;

    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < NTABLE; i++) {
        if (set_value(cfg, &table[i], table[i].def, why, sizeof why) != 0) {
            fprintf(stderr, "tlserve: internal: default of %s: %s\n", table[i].name, why);
            return -1;
        }
    }

    /* Pass 1: --help wins; find --config. */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            print_help(stdout);
            return 1;
        }
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "tlserve: --config needs a file path\n");
                return -1;
            }
            config_path = argv[++i];
        } else if (strncmp(argv[i], "--config=", 9) == 0) {
            config_path = argv[i] + 9;
        }
    }
    if (config_path && load_file(cfg, config_path) != 0)
        return -1;

    for (size_t i = 0; i < NTABLE; i++) {
        const char *v = table[i].env ? getenv(table[i].env) : NULL;
        if (v && set_value(cfg, &table[i], v, why, sizeof why) != 0) {
            fprintf(stderr, "tlserve: $%s: %s\n", table[i].env, why);
            return -1;
        }
    }

    /* Pass 2: flags, in order; the last one given for a setting wins. */
    const cfg_entry_t *secret_flag = NULL;
    for (int i = 1; i < argc; i++) {
        const char *name, *val;
        size_t name_len;
        if (split_flag(argv[i], &name, &name_len, &val) != 0)
            return -1;
        if (name_eq(name, name_len, "config")) {
            if (!val)
                i++; /* its value was taken in pass 1 */
            continue;
        }
        const cfg_entry_t *e = find(name, name_len);
        if (!e) {
            fprintf(stderr, "tlserve: unknown flag '--%.*s' (see tlserve --help)\n", (int)name_len,
                    name);
            return -1;
        }
        if (!val) {
            if (e->type == CFG_BOOL) {
                val = "true";
            } else if (i + 1 >= argc) {
                fprintf(stderr, "tlserve: --%s needs a value\n", e->name);
                return -1;
            } else {
                val = argv[++i];
            }
        }
        if (set_value(cfg, e, val, why, sizeof why) != 0) {
            fprintf(stderr, "tlserve: --%s: %s\n", e->name, why);
            return -1;
        }
        if (e->secret)
            secret_flag = e;
    }

    for (int l = 0; l < (int)(sizeof level_names / sizeof level_names[0]); l++)
        if (strcmp(cfg->log_level, level_names[l]) == 0)
            server_log_level = l;

    if (cfg->admin_token_file[0]) {
        if (cfg->admin_token[0]) {
            fprintf(stderr, "tlserve: --admin-token-file: an admin token is given as well "
                            "(--admin-token, TLSERVE_ADMIN_TOKEN or the config file): give one\n");
            return -1;
        }
        if (read_token_file(cfg) != 0)
            return -1;
    }
    if (cfg->model_root[0] && cfg->model_dir[0]) {
        char real[sizeof cfg->model_dir];
        if (server_path_under_root(cfg->model_root, cfg->model_dir, real, sizeof real, why,
                                   sizeof why) != 0) {
            fprintf(stderr, "tlserve: --model '%s' is not under --model-root '%s': %s\n",
                    cfg->model_dir, cfg->model_root, why);
            return -1;
        }
    }
    if (cfg->model_repo[0] && cfg->model_dir[0]) {
        fprintf(stderr, "tlserve: --model and --model-repo together: serve one snapshot "
                        "(--model) or a repository (--model-repo), not both\n");
        return -1;
    }
    if (cfg->model_name[0] && !cfg->model_repo[0]) {
        fprintf(stderr, "tlserve: --model-name '%s' needs --model-repo\n", cfg->model_name);
        return -1;
    }
    if (cfg->model_root[0] && cfg->model_repo[0]) {
        char real[sizeof cfg->model_repo];
        if (server_path_under_root(cfg->model_root, cfg->model_repo, real, sizeof real, why,
                                   sizeof why) != 0) {
            fprintf(stderr, "tlserve: --model-repo '%s' is not under --model-root '%s': %s\n",
                    cfg->model_repo, cfg->model_root, why);
            return -1;
        }
        memcpy(cfg->model_repo, real, sizeof real); /* watched by its real path */
    }
    if (secret_flag)
        LOG(LL_WARN,
            "--%s on the command line is visible to every local user in "
            "/proc/PID/cmdline: use --admin-token-file or $%s",
            secret_flag->name, secret_flag->env ? secret_flag->env : "the config file");
    return 0;
}
