/*
 * store_bench_env.c — the store benchmark's environment: its temp dir (removed
 * on exit, on error and on a fatal signal), errors and usage, clocks, memory
 * readings from /proc, CPU pinning for the single-core phases, and the
 * `name: value` output lines.
 *
 * THREAD SAFETY: a program; remove_tmp() is async-signal-safe (system calls
 * only), the rest runs on the main thread.
 */
#include "store_bench.h"

/* ---- temp dir: removed on exit, on error and on a fatal signal ---------- */

char g_root[4096];         /* <tmp>/store_bench.XXXXXX */
char g_snap[4096 + 16];    /* <root>/snapshot */
volatile sig_atomic_t g_root_made;

/* Removes the files of one directory level and then the directory.  Uses
 * system calls only (no malloc, no stdio), so a signal handler may call it. */
static void remove_flat_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return;
    char buf[8192] __attribute__((aligned(8)));
    for (;;) {
        ssize_t n = getdents64(fd, buf, sizeof buf);
        if (n <= 0)
            break;
        for (ssize_t off = 0; off < n;) {
            struct dirent64 *d = (struct dirent64 *)(buf + off);
            off += d->d_reclen;
            if (d->d_name[0] == '.' &&
                (d->d_name[1] == 0 || (d->d_name[1] == '.' && d->d_name[2] == 0)))
                continue;
            if (unlinkat(fd, d->d_name, 0) != 0 && errno == EISDIR)
                unlinkat(fd, d->d_name, AT_REMOVEDIR);
        }
    }
    close(fd);
    rmdir(path);
}

void remove_tmp(void)
{
    if (!g_root_made)
        return;
    remove_flat_dir(g_snap);
    remove_flat_dir(g_root);
    g_root_made = 0;
}

void on_fatal_signal(int sig)
{
    remove_tmp();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* ---- errors -------------------------------------------------------------- */

void fatal(const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fputs("store_bench: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    remove_tmp();
    exit(1);
}

void usage(FILE *f)
{
    fputs("usage: store_bench --keys N [--value-floats K] [--dtype f32|f16]\n"
          "                   [--baseline-keys M] [--expected-keys E] [--shards S]\n"
          "                   [--threads T]\n"
          "                   [--lookups L] [--seed X] [--tmp DIR] [--json] [--help]\n"
          "\n"
          "  --keys N           keys in the store (required); counts take a\n"
          "                     suffix: 10K, 10M, 1G, 1T (powers of ten)\n"
          "  --value-floats K   floats per value, 1..64 (default 1: an LR weight)\n"
          "  --dtype f32|f16    value storage type (default f32)\n"
          "  --baseline-keys M  keys in the std::unordered_map baseline\n"
          "                     (default min(N, 20M); 0 skips it)\n"
          "  --expected-keys E  the store is created sized for E keys and grows\n"
          "                     to N (default N: sized exactly), as a trainer's or\n"
          "                     a live server's store does\n"
          "  --shards S         store shards, a power of two 1..256 (default: the\n"
          "                     store's)\n"
          "  --threads T        builder and snapshot-loader threads (default: all\n"
          "                     cores this process may use)\n"
          "  --lookups L        lookups per timed phase (default 20M)\n"
          "  --seed X           key seed, decimal or 0x-hex (default 42)\n"
          "  --tmp DIR          where the snapshot temp dir goes (default /tmp)\n"
          "  --json             make the last line one JSON object of the headline\n"
          "                     figures\n"
          "\n"
          "Prints `name: value` lines as it goes; exits 1 when a lookup returns a\n"
          "wrong answer or a step fails, 2 on a bad flag.\n",
          f);
}

void usage_error(const char *fmt, ...)
{
    va_list ap;
    fputs("store_bench: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\n\n", stderr);
    usage(stderr);
    exit(2);
}


/* ---- clocks ------------------------------------------------------------- */

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* getrusage's CPU times in seconds */
double tv_s(struct timeval tv)
{
    return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

/* ---- /proc readings -------------------------------------------------------- */

/* Reads a small /proc file into buf (NUL-terminated); returns 0 or -errno. */
static int read_small_file(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t got = 0;
    while (got + 1 < len) {
        ssize_t n = read(fd, buf + got, len - 1 - got);
        if (n < 0) {
            int e = errno;
            if (e == EINTR)
                continue;
            close(fd);
            return -e;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    buf[got] = 0;
    close(fd);
    return 0;
}

/* Value in kB of the line starting with `name` (e.g. "Rss:"), or -1. */
static int64_t kb_field(const char *text, const char *name)
{
    size_t nl = strlen(name);
    for (const char *p = text; *p;) {
        if (strncmp(p, name, nl) == 0)
            return strtoll(p + nl, NULL, 10);
        const char *nlp = strchr(p, '\n');
        if (!nlp)
            break;
        p = nlp + 1;
    }
    return -1;
}

/* Resident bytes now: exact from smaps_rollup (it walks the page tables),
 * else statm's counters. */
struct mem mem_now(void)
{
    static char buf[8192];
    struct mem m = {0, 0};
    if (read_small_file("/proc/self/smaps_rollup", buf, sizeof buf) == 0) {
        int64_t rss = kb_field(buf, "Rss:");
        int64_t huge = kb_field(buf, "AnonHugePages:");
        if (rss >= 0) {
            m.rss = (uint64_t)rss << 10;
            m.anon_huge = huge > 0 ? (uint64_t)huge << 10 : 0;
            return m;
        }
    }
    if (read_small_file("/proc/self/statm", buf, sizeof buf) != 0)
        fatal("cannot read /proc/self/statm or /proc/self/smaps_rollup: no RSS to measure");
    unsigned long long size, resident;
    if (sscanf(buf, "%llu %llu", &size, &resident) != 2)
        fatal("cannot parse /proc/self/statm: '%.40s'", buf);
    m.rss = (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
    return m;
}

/* A "VmRSS:"/"VmHWM:" figure of /proc/self/status in bytes. */
uint64_t status_bytes(const char *name)
{
    static char buf[8192];
    if (read_small_file("/proc/self/status", buf, sizeof buf) != 0)
        fatal("cannot read /proc/self/status");
    int64_t kb = kb_field(buf, name);
    if (kb < 0)
        fatal("/proc/self/status has no %s line", name);
    return (uint64_t)kb << 10;
}

/* Resets VmHWM to the current RSS (Linux >= 4.0).  Returns false when the
 * kernel refuses. */
bool reset_hwm(void)
{
    int fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    bool ok = write(fd, "5", 1) == 1;
    close(fd);
    return ok;
}

uint64_t mem_available(void)
{
    static char buf[8192];
    if (read_small_file("/proc/meminfo", buf, sizeof buf) != 0)
        return 0;
    int64_t kb = kb_field(buf, "MemAvailable:");
    return kb > 0 ? (uint64_t)kb << 10 : 0;
}

/* ---- CPU pinning ----------------------------------------------------------- */

static cpu_set_t g_all_cpus; /* the mask we started with */
int g_cpu = -1;       /* the CPU of the single-core phases */
bool g_pinnable;

void pin_init(void)
{
    if (sched_getaffinity(0, sizeof g_all_cpus, &g_all_cpus) != 0) {
        fprintf(stderr, "store_bench: sched_getaffinity: %s; not pinning\n", strerror(errno));
        return;
    }
    g_cpu = sched_getcpu();
    g_pinnable = g_cpu >= 0 && g_cpu < CPU_SETSIZE && CPU_ISSET(g_cpu, &g_all_cpus);
}

void pin_one(void)
{
    if (!g_pinnable)
        return;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(g_cpu, &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0) {
        fprintf(stderr, "store_bench: sched_setaffinity(cpu %d): %s; not pinning\n", g_cpu,
                strerror(errno));
        g_pinnable = false;
    }
}

void pin_all(void)
{
    if (g_pinnable)
        sched_setaffinity(0, sizeof g_all_cpus, &g_all_cpus);
}

uint32_t usable_cpus(void)
{
    int n = CPU_COUNT(&g_all_cpus);
    if (n <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)c : 1;
    }
    return (uint32_t)n;
}

/* ---- output ---------------------------------------------------------------- */

void line(const char *name, const char *fmt, ...)
{
    va_list ap;
    printf("%s: ", name);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

void note(const char *fmt, ...)
{
    va_list ap;
    fputs("store_bench: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

const char *dtype_name(store_dtype_t dt)
{
    return dt == STORE_DTYPE_F16 ? "f16" : "f32";
}
