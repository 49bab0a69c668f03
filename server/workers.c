/*
 * workers.c — starts and stops the data-plane workers.
 *
 * Each worker has its own listening socket on the same address and port
 * (SO_REUSEPORT: the kernel spreads connections over them), its own request
 * work space (decode arena, model scratch, block and score arrays, all
 * allocated here, once) and runs the io_uring driver, or the epoll driver
 * when io_uring cannot be set up (EPERM/ENOSYS, e.g. Docker's default
 * seccomp profile) or --force-epoll says so; the fallback is logged.
 *
 * ONE OWNER PER PORT
 *   SO_REUSEPORT would also let a second tlserve (same user) bind the port
 *   and take a share of the connections.  So before the workers' sockets,
 *   workers_start binds a guard socket on the address: SO_REUSEADDR, no
 *   SO_REUSEPORT, never listening, held until workers_stop.  Linux's bind
 *   rules then give:
 *     guard vs a listening socket of another process   EADDRINUSE (we exit 1)
 *     our workers (REUSEADDR+REUSEPORT) vs our guard   allowed: the guard
 *                                                      has REUSEADDR and
 *                                                      does not listen
 *     another process's guard vs our listening workers EADDRINUSE
 *   Left open: two processes that both bind their guards before either
 *   listens (starts within the same few hundred microseconds) can still
 *   share the port.
 *
 * FILE DESCRIPTORS
 *   Every connection is a descriptor: workers x --max-connections of them,
 *   plus a few per worker.  workers_start raises the soft RLIMIT_NOFILE
 *   toward that (up to the hard limit) and warns when it stays below;
 *   connections past it are refused with a word (sockets.c).
 *
 * THREAD SAFETY: called from the main thread only.
 */
#include "log.h"
#include "worker.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

static worker_t *workers;
static int guard_fd = -1; /* see ONE OWNER PER PORT; main thread only */

static int sockaddr_of(const char *addr, int port, struct sockaddr_storage *ss, socklen_t *len)
{
    struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
    memset(ss, 0, sizeof *ss);
    if (inet_pton(AF_INET, addr, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        *len = sizeof *s4;
    } else if (inet_pton(AF_INET6, addr, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        *len = sizeof *s6;
    } else {
        return -EINVAL;
    }
    return 0;
}

/* The guard (ONE OWNER PER PORT): a bound, never listening socket without
 * SO_REUSEPORT.  Returns the fd or -errno (-EADDRINUSE: another owner). */
static cold int bind_guard(const char *addr, int port)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int rc = sockaddr_of(addr, port, &ss, &len);
    if (rc < 0)
        return rc;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, len) != 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    return fd;
}

/* A listening socket on an IPv4 or IPv6 literal, SO_REUSEPORT so that every
 * worker can have its own.  Returns the fd or -errno. */
static int listen_on(const char *addr, int port)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int rc = sockaddr_of(addr, port, &ss, &len);
    if (rc < 0)
        return rc;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, 1024) != 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    return fd;
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    int rc = -ENOSYS;
    if (!w->srv->cfg.force_epoll) {
        w->uring = true;
        LOG(LL_DEBUG, "worker %d: io_uring driver", w->id);
        rc = worker_run_uring(w);
        if (rc < 0)
            LOG(LL_WARN, "worker %d: io_uring unavailable (%s); using epoll", w->id, strerror(-rc));
    }
    if (rc < 0) {
        w->uring = false;
        LOG(w->srv->cfg.force_epoll ? LL_DEBUG : LL_INFO, "worker %d: epoll driver", w->id);
        rc = worker_run_epoll(w);
        if (rc < 0)
            LOG(LL_ERROR, "worker %d: epoll failed: %s", w->id, strerror(-rc));
    }
    return NULL;
}

/* FILE DESCRIPTORS: raise the soft limit toward what the connections need. */
static cold void fit_fd_limit(const server_t *srv)
{
    rlim_t need = (rlim_t)srv->nworkers * (rlim_t)srv->cfg.max_connections +
                  (rlim_t)srv->nworkers * 4 + 64;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= need)
        return;
    rlim_t was = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
    if (rl.rlim_cur > was && setrlimit(RLIMIT_NOFILE, &rl) == 0)
        LOG(LL_INFO, "file descriptor limit raised from %llu to %llu", (unsigned long long)was,
            (unsigned long long)rl.rlim_cur);
    else
        rl.rlim_cur = was;
    if (rl.rlim_cur < need)
        LOG(LL_WARN,
            "file descriptor limit %llu (hard %llu) is below the %llu that %d workers x "
            "--max-connections %d need: connections past it are refused (raise ulimit -n, or "
            "lower --max-connections)",
            (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max,
            (unsigned long long)need, srv->nworkers, srv->cfg.max_connections);
}

static int worker_init(server_t *srv, worker_t *w, int id)
{
    w->srv = srv;
    w->id = id;
    w->m = &srv->metrics[id];
    int rc = worker_spare_open(w);
    if (rc < 0)
        return rc;
    size_t arena = codec_arena_bound((size_t)srv->cfg.max_frame_bytes);
    w->arena.base = mmap(NULL, arena, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (w->arena.base == MAP_FAILED) {
        w->arena.base = NULL;
        return -ENOMEM;
    }
    w->arena.cap = arena;
    w->blocks = calloc(CODEC_MAX_ITEMS, sizeof *w->blocks);
    w->scores = calloc(CODEC_MAX_ITEMS, sizeof *w->scores);
    if (!w->blocks || !w->scores || model_scratch_create(CODEC_MAX_REQUEST_FEATURES, &w->scratch))
        return -ENOMEM;
    model_scratch_set_team(w->scratch, srv->team);
    w->listen_fd = listen_on(srv->cfg.bind, srv->cfg.port);
    return w->listen_fd < 0 ? w->listen_fd : 0;
}

static void worker_fini(worker_t *w)
{
    worker_spare_close(w);
    if (w->listen_fd >= 0)
        close(w->listen_fd);
    if (w->arena.base)
        munmap(w->arena.base, w->arena.cap);
    free(w->blocks);
    free(w->scores);
    model_scratch_destroy(w->scratch);
}

int workers_start(server_t *srv)
{
    workers = calloc((size_t)srv->nworkers, sizeof *workers);
    if (!workers)
        return -ENOMEM;
    for (int i = 0; i < srv->nworkers; i++)
        workers[i].listen_fd = workers[i].spare_fd = -1;
    fit_fd_limit(srv);
    guard_fd = bind_guard(srv->cfg.bind, srv->cfg.port);
    if (guard_fd < 0) {
        int rc = guard_fd;
        guard_fd = -1;
        if (rc == -EADDRINUSE)
            LOG(LL_ERROR, "data plane: cannot listen on %s:%d: address in use (another process "
                          "holds it)", srv->cfg.bind, srv->cfg.port);
        else
            LOG(LL_ERROR, "data plane: cannot listen on %s:%d: %s", srv->cfg.bind,
                srv->cfg.port, strerror(-rc));
        free(workers);
        workers = NULL;
        return rc;
    }
    for (int i = 0; i < srv->nworkers; i++) {
        int rc = worker_init(srv, &workers[i], i);
        if (rc < 0) {
            LOG(LL_ERROR, "data plane: cannot listen on %s:%d: %s", srv->cfg.bind, srv->cfg.port,
                strerror(-rc));
            for (int j = 0; j <= i; j++)
                worker_fini(&workers[j]);
            close(guard_fd);
            guard_fd = -1;
            free(workers);
            workers = NULL;
            return rc;
        }
    }
    /* The gate's sample of live requests (gate.h): without it only sanity runs. */
    int rc = gate_sample_start(srv->nworkers, srv->cfg.gate ? srv->cfg.gate_sample : 0,
                               (size_t)srv->cfg.gate_slot_bytes);
    if (rc < 0)
        LOG(LL_WARN, "gate: no sample of live requests (%s): candidates get sanity checks only",
            strerror(-rc));
    for (int i = 0; i < srv->nworkers; i++)
        workers[i].sample = gate_sample_ring(i);
    for (int i = 0; i < srv->nworkers; i++)
        pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]);
    LOG(LL_INFO, "data plane: %d workers and %d lookup threads on %s:%d", srv->nworkers,
        srv->cfg.lookup_threads, srv->cfg.bind, srv->cfg.port);
    return 0;
}

void workers_stop(server_t *srv)
{
    if (!workers)
        return;
    atomic_store(&srv->stopping, true);
    for (int i = 0; i < srv->nworkers; i++)
        pthread_join(workers[i].thread, NULL);
    for (int i = 0; i < srv->nworkers; i++)
        worker_fini(&workers[i]);
    gate_sample_stop();
    close(guard_fd);
    guard_fd = -1;
    free(workers);
    workers = NULL;
}
