/*
 * main.c — tlserve: parse the config, load the first model, start the admin
 * plane and the data plane, wait for SIGTERM/SIGINT, drain, exit.
 *
 *   main ── config ── model (optional) ── lookup team ── admin + loader ── repo ── workers ── sigwait
 *                                                                                        │
 *     exit 0 <── free (team) <── admin_stop (loader first) <── workers_stop <── stopping ┘
 *
 * SIGNALS
 *   SIGTERM and SIGINT (and SIGHUP, SIGUSR1/2, logged and ignored: see
 *   stop_signals) are taken synchronously with sigwait() here: no
 *   handler runs in a random thread.  The kernel gives a process-directed
 *   signal to any thread that does not block it, and only main's sigwait()
 *   unblocks it, so every thread must block them.  Threads inherit the
 *   mask of their creator, and some exist before main(): OpenBLAS starts its
 *   thread pool in its library constructor, which runs before this
 *   program's constructors (a constructor here would leave that thread
 *   unblocked).  So the mask is set from .preinit_array, which runs before
 *   any library's initializer.  A second signal during the drain then stays
 *   pending, ignored; workers_stop() bounds the drain.  A model load running at the
 *   signal is let finish and discarded (loader.c), queued ones are dropped:
 *   the drain then lasts as long as the rest of that load.  SIGPIPE is ignored: a peer
 *   that closes early must not kill the process (evhttp writes with send()).
 *
 * LOAD THREADS
 *   A load through the admin API runs beside serving: one loader thread
 *   per core takes the workers' cores (p99 4 ms -> 118 ms during a
 *   100M-key swap at 100 req/s).  So --load-threads 0 means the
 *   cores the workers and lookup helpers leave, at least 1: with the
 *   default one worker per core, loads are single-threaded and slower, and
 *   requests keep their cores.  The model given with --model is loaded
 *   before that rule applies, with every core: nothing is served yet.
 *
 * MEMORY
 *   jemalloc is the process allocator: it is linked (Debian's libjemalloc is
 *   unprefixed, so it replaces malloc/free) and /metrics reports its
 *   stats.allocated / stats.resident.
 *
 * MODEL REPOSITORY
 *   With --model-repo nothing is loaded here: the watcher (repo.c), started
 *   once the loader runs, queues the latest version of every model of the
 *   repository (or of --model-name's alone), and /readyz says 503 until
 *   one of them is active (a client of a model not yet live gets
 *   UNKNOWN_MODEL).  It is stopped first at the drain, so that it
 *   queues nothing while the loader stops.
 *
 * EXIT STATUS
 *   0 after a clean drain or --help; 1 when the model, the admin plane or
 *   the data plane cannot start (the reason is on stderr); 2 for a bad
 *   setting (config.c names it) or a repository whose models cannot be
 *   served (unreadable, none, or more than SERVER_MODELS_MAX without
 *   --model-name).
 */
#define _GNU_SOURCE
#include "gate_eval.h"
#include "log.h"
#include "online.h"
#include "repo.h"
#include "server.h"
#include "store/delta.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A hint for a --model that did not load because it is not one full
 * snapshot: a model directory of versions or a whole repository (meant for
 * --model-repo), or a delta version (served through its chain).  "" when
 * none fits.  Blocks (lists a directory or two). */
cold static const char *model_dir_hint(const char *dir, const store_error_t *err)
{
    static char hint[1400];
    uint64_t v[1];
    store_meta_t meta;
    store_error_t meta_err;
    hint[0] = '\0';
    if (err->code == STORE_E_NO_MANIFEST) {
        if (store_version_list(dir, v, 1) > 0) {
            snprintf(hint, sizeof hint, " (%s holds version directories: serve the model's "
                     "latest with --model-repo on its parent directory, or one version with "
                     "--model %s/%" PRIu64 ")", dir, dir, v[0]);
            return hint;
        }
        DIR *d = opendir(dir);
        struct dirent *e;
        char sub[1200];
        while (d && (e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.' ||
                (size_t)snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name) >= sizeof sub)
                continue;
            if (store_version_list(sub, v, 1) > 0) {
                snprintf(hint, sizeof hint, " (%s looks like a model repository, %s/<version>/: "
                         "serve it with --model-repo %s)", dir, sub, dir);
                break;
            }
        }
        if (d)
            closedir(d);
    } else if (store_snapshot_read_meta(dir, &meta, NULL, &meta_err) == 0 && meta.parent_version) {
        snprintf(hint, sizeof hint, " (a delta version: serve it from its repository with "
                 "--model-repo, or fold it into a full snapshot with tlsnap compact)");
    }
    return hint;
}

/* The signals main() takes with sigwait(): SIGTERM and SIGINT drain; SIGHUP,
 * SIGUSR1 and SIGUSR2, whose default action would kill the process at once
 * (a closed terminal, a habitual "reload"), are logged and ignored. */
static void stop_signals(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGHUP);
    sigaddset(set, SIGUSR1);
    sigaddset(set, SIGUSR2);
}

/* Blocks the stop signals in the calling (the only) thread; see SIGNALS. */
cold static void block_stop_signals(void)
{
    sigset_t set;
    stop_signals(&set);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
}

/* Run before the initializers of the shared libraries (ld.so) and before
 * this program's constructors; a constructor would be too late. */
__attribute__((section(".preinit_array"),
               used)) static void (*const preinit_block)(void) = block_stop_signals;

static int cpu_count(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int main(int argc, char **argv)
{
    sigset_t stop_set;
    stop_signals(&stop_set);
    pthread_sigmask(SIG_BLOCK, &stop_set, NULL); /* already, from preinit; no harm */
    signal(SIGPIPE, SIG_IGN);

    server_t *srv = calloc(1, sizeof *srv);
    if (!srv)
        abort();
    int rc = server_config_load(&srv->cfg, argc, argv);
    if (rc != 0) {
        free(srv);
        return rc > 0 ? 0 : 2;
    }
    const server_config_t *cfg = &srv->cfg;
    int status = 1;
    char repo_models[SERVER_MODELS_MAX][64];
    int n_repo_models = 0;

    srv->nworkers = cfg->workers > 0 ? cfg->workers : cpu_count();
    size_t mbytes = (size_t)srv->nworkers * sizeof(server_metrics_t);
    mbytes = (mbytes + 63) & ~(size_t)63;
    srv->metrics = aligned_alloc(64, mbytes);
    if (!srv->metrics)
        abort();
    memset(srv->metrics, 0, mbytes);
    atomic_init(&srv->nmodels, 0);
    atomic_init(&srv->stopping, false);

    /* The gate's evaluation file is untrusted input: a bad one stops the start. */
    if (gate_eval_start(cfg) != 0) {
        status = 2;
        goto out;
    }

    if (cfg->model_dir[0]) {
        store_error_t err;
        LOG(LL_INFO, "loading model from %s", cfg->model_dir); /* the swap's line has no path */
        rc = server_model_load(srv, cfg->model_dir, &err);
        if (rc != 0) {
            LOG(LL_ERROR, "cannot load model from %s: %s%s", cfg->model_dir,
                err.msg[0] ? err.msg : strerror(rc < 0 ? -rc : EIO),
                model_dir_hint(cfg->model_dir, &err));
            goto out;
        }
    } else if (cfg->model_repo[0]) {
        char why[2400];
        n_repo_models = repo_list_models(cfg, repo_models, SERVER_MODELS_MAX, why, sizeof why);
        if (n_repo_models < 0) {
            LOG(LL_ERROR, "%s", why);
            status = 2;
            goto out;
        }
        LOG(LL_INFO,
            "--model-repo: %d model(s) from %s (%s%s): not ready until one's latest version "
            "loads",
            n_repo_models, cfg->model_repo, repo_models[0], n_repo_models > 1 ? ", ..." : "");
    } else {
        LOG(LL_INFO, "no --model: not ready until one is loaded through the admin API");
    }

    /* The first model loaded with every core (nothing is served yet); later
     * loads run beside serving, so by default they get only the cores the
     * workers and lookup helpers leave (see LOAD THREADS). */
    if (cfg->load_threads == 0) {
        int cores = cpu_count();
        int left = cores - srv->nworkers - cfg->lookup_threads;
        srv->cfg.load_threads = left > 1 ? left : 1;
        LOG(LL_INFO,
            "model loads use %d threads: %d cores - %d workers - %d lookup threads, at least 1 "
            "(--load-threads overrides)",
            cfg->load_threads, cores, srv->nworkers, cfg->lookup_threads);
    } else {
        LOG(LL_INFO, "model loads use %d threads (--load-threads)", cfg->load_threads);
    }

    if (cfg->lookup_threads > 0) {
        rc = store_team_create(cfg->lookup_threads, 0, &srv->team);
        if (rc != 0) {
            LOG(LL_ERROR, "cannot start %d lookup threads: %s", cfg->lookup_threads, strerror(-rc));
            goto out;
        }
    }
    char why[256];
    rc = online_start(srv, why, sizeof why);
    if (rc != 0) {
        LOG(LL_ERROR, "online learning: %s", why);
        goto out;
    }
    rc = admin_start(srv);
    if (rc != 0) {
        LOG(LL_ERROR, "admin plane did not start: %s", strerror(-rc));
        goto out;
    }
    if (n_repo_models > 0) {
        rc = repo_start(srv, (const char(*)[64])repo_models, (unsigned)n_repo_models);
        if (rc != 0) {
            LOG(LL_ERROR, "the repository watcher did not start: %s", strerror(-rc));
            admin_stop(srv);
            goto out;
        }
    }
    rc = workers_start(srv);
    if (rc != 0) {
        LOG(LL_ERROR, "data plane did not start: %s", strerror(-rc));
        repo_stop();
        admin_stop(srv);
        goto out;
    }
    atomic_store(&srv->listening, true);
    LOG(LL_INFO, "serving on %s:%d with %d workers (admin on %s:%d)", cfg->bind, cfg->port,
        srv->nworkers, cfg->admin_bind, cfg->admin_port);

    int sig = 0;
    for (;;) {
        if (sigwait(&stop_set, &sig) != 0)
            continue;
        if (sig == SIGTERM || sig == SIGINT)
            break;
        LOG(LL_INFO, "%s ignored: tlserve has no reload (new versions come through the "
            "repository or the admin API); SIGTERM drains and stops",
            sig == SIGHUP ? "SIGHUP" : sig == SIGUSR1 ? "SIGUSR1" : "SIGUSR2");
    }
    LOG(LL_INFO, "%s: draining", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    atomic_store(&srv->stopping, true);
    repo_stop(); /* queues nothing more; before the loader stops */
    workers_stop(srv);
    int unexported = online_stop(); /* no worker submits any more; learns what is queued */
    admin_stop(srv);
    status = unexported ? 1 : 0;
    if (unexported)
        LOG(LL_ERROR, "stopped, but the online updates of %d model(s) were not exported "
            "(above): exit status 1", unexported);
out:
    /* No thread is left that could acquire: drop the server's reference. */
    server_model_drop_standby(srv);
    server_model_drop_all(srv);
    online_stop();
    store_team_destroy(srv->team);
    gate_eval_stop();
    free(srv->metrics);
    free(srv);
    if (status == 0)
        LOG(LL_INFO, "stopped");
    return status;
}
