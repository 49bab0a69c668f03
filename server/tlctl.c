/*
 * tlctl.c — a small command line client of tlserve's admin API: status,
 * versions, activate, rollback, refuse, watch, digest.  It speaks plain HTTP/1.1 over one
 * TCP connection per call ("Connection: close", the body read to EOF), so
 * it needs nothing but libc and jansson, which the server links already.
 *
 *   tlctl [--admin HOST:PORT] [--token-file F] [--json] COMMAND [ARGS]
 *
 * Output: a human table by default, the server's JSON as is with --json.
 * Exit codes (for scripts): 0 done; 1 the server refused (its message on
 * stderr); 2 usage; 3 cannot connect (or no valid HTTP answer).
 * The token (for activate and rollback) comes from --token-file or the
 * TLSERVE_ADMIN_TOKEN environment variable; it is sent only as
 * "Authorization: Bearer".  Replies are untrusted: the status line is
 * parsed with bounds, the body is capped at TLCTL_MAX_REPLY bytes, and a
 * body that is not JSON is reported as such.
 */
#define _GNU_SOURCE
#include "codec/codec.h"

#include <errno.h>
#include <jansson.h>
#include <netdb.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define TLCTL_MAX_REPLY (4 << 20)
#define TLCTL_TIMEOUT_S 10
#define EXIT_REFUSED 1
#define EXIT_USAGE 2
#define EXIT_CONNECT 3

static struct {
    char host[256];
    char port[16];
    char token[512];
    bool json;
} O = {.host = "127.0.0.1", .port = "7071"};

static volatile sig_atomic_t interrupted;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tlctl [--admin HOST:PORT] [--token-file FILE] [--json] COMMAND\n"
            "commands:\n"
            "  status                     the active model, its standby versions, the repository\n"
            "  versions MODEL             every version of MODEL and its state\n"
            "  activate MODEL VERSION [--force]\n"
            "                             make VERSION active and pin it (\"latest\": unpin);\n"
            "                             --force: a load it starts skips the validation gate\n"
            "  rollback MODEL             make the standby version active at once\n"
            "  refuse MODEL VERSION [WHY] never serve VERSION (rolled back first when active);\n"
            "                             \"tlctl activate MODEL VERSION\" lifts it\n"
            "  watch [MODEL]              print a line per version state change (1 s polls)\n"
            "  digest MODEL               a fingerprint of every weight MODEL serves: replicas\n"
            "                             with equal digests hold the same model bit for bit\n"
            "options:\n"
            "  --admin HOST:PORT          the admin plane (default 127.0.0.1:7071)\n"
            "  --token-file FILE          admin token (else $TLSERVE_ADMIN_TOKEN)\n"
            "  --json                     print the server's JSON instead of tables\n"
            "exit codes: 0 ok, 1 the server refused (its message on stderr), 2 usage,\n"
            "            3 cannot connect to the admin plane\n");
}

/* Parses an HTTP/1.x reply read to EOF (buf[len] is NUL): 0 with the
 * status code (100..599) and the body's offset, or -1 when buf is not a
 * whole status line and header block.  The body is what follows the
 * headers: the server closes the connection after it (Connection: close)
 * and does not chunk these replies. */
static int parse_reply(const char *buf, size_t len, int *code, size_t *body_at)
{
    if (len < 12 || strncmp(buf, "HTTP/1.", 7) != 0 || (buf[7] != '0' && buf[7] != '1') ||
        buf[8] != ' ')
        return -1;
    int c = 0;
    for (int i = 9; i < 12; i++) {
        if (buf[i] < '0' || buf[i] > '9')
            return -1;
        c = c * 10 + (buf[i] - '0');
    }
    if (c < 100 || c > 599)
        return -1;
    const char *sep = strstr(buf, "\r\n\r\n"); /* stops at a NUL inside: then -1 */
    if (!sep)
        return -1;
    *code = c;
    *body_at = (size_t)(sep - buf) + 4;
    return 0;
}

/* One HTTP exchange.  Returns the status code with *body (malloc'd, NUL
 * terminated, the caller frees) or -1 when the server cannot be reached or
 * did not answer HTTP. */
static int http(const char *method, const char *path, const char *payload, char **body)
{
    *body = NULL;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int rc = getaddrinfo(O.host, O.port, &hints, &ai);
    if (rc != 0) {
        fprintf(stderr, "tlctl: cannot resolve %s: %s\n", O.host, gai_strerror(rc));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0)
            continue;
        struct timeval tv = {TLCTL_TIMEOUT_S, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
            break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    if (fd < 0) {
        fprintf(stderr, "tlctl: cannot connect to the admin plane at %s:%s: %s\n", O.host, O.port,
                strerror(errno));
        return -1;
    }
    size_t plen = payload ? strlen(payload) : 0;
    char *req = NULL;
    int n = asprintf(&req,
                     "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n%s%s%s"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     method, path, O.host, O.token[0] ? "Authorization: Bearer " : "", O.token,
                     O.token[0] ? "\r\n" : "", plen, payload ? payload : "");
    int status = -1;
    char *buf = NULL;
    if (n < 0)
        goto out;
    for (int off = 0; off < n;) {
        ssize_t w = write(fd, req + off, (size_t)(n - off));
        if (w <= 0)
            goto out;
        off += (int)w;
    }
    size_t cap = 65536, len = 0;
    buf = malloc(cap + 1);
    if (!buf)
        goto out;
    bool timed_out = false;
    for (;;) {
        if (len == cap) {
            if (cap >= TLCTL_MAX_REPLY)
                break;
            char *nb = realloc(buf, cap * 2 + 1);
            if (!nb)
                break;
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + len, cap - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            timed_out = true; /* SO_RCVTIMEO */
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    buf[len] = '\0';
    int code;
    size_t at;
    if (parse_reply(buf, len, &code, &at) != 0) {
        if (timed_out)
            fprintf(stderr, "tlctl: %s:%s accepted the connection but sent %s in %d s: is it a "
                    "tlserve admin port, and is that server stalled?\n", O.host, O.port,
                    len ? "no complete HTTP answer" : "nothing", TLCTL_TIMEOUT_S);
        else
            fprintf(stderr, "tlctl: %s:%s did not answer HTTP\n", O.host, O.port);
        goto out;
    }
    *body = strdup(buf + at);
    status = *body ? code : -1;
out:
    free(buf);
    free(req);
    close(fd);
    return status;
}

/* GET/POST path; parses the reply into *j.  Returns 0 (2xx), EXIT_REFUSED
 * after printing the server's error, or EXIT_CONNECT. */
static int call(const char *method, const char *path, const char *payload, json_t **j, int *status)
{
    char *body;
    *j = NULL;
    int code = http(method, path, payload, &body);
    if (status)
        *status = code;
    if (code < 0)
        return EXIT_CONNECT;
    json_error_t jerr;
    *j = json_loads(body, 0, &jerr);
    if (code >= 300) {
        json_t *e = json_is_object(*j) ? json_object_get(*j, "error") : NULL;
        fprintf(stderr, "tlctl: the server refused (%d): %s\n", code,
                json_is_string(e) ? json_string_value(e) : body);
        free(body);
        json_decref(*j);
        *j = NULL;
        return EXIT_REFUSED;
    }
    if (!*j) {
        fprintf(stderr, "tlctl: the server's answer is not JSON: %s\n", jerr.text);
        free(body);
        return EXIT_CONNECT;
    }
    free(body);
    return 0;
}

static void print_json(json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT);
    if (s)
        printf("%s\n", s);
    free(s);
}

static long long jint(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? (long long)json_integer_value(v) : 0;
}

static const char *jstr(json_t *o, const char *k, const char *dflt)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : dflt;
}

static int get_versions(const char *model, json_t **j)
{
    char path[256];
    snprintf(path, sizeof path, "/v1/models/%s/versions", model);
    return call("GET", path, NULL, j, NULL);
}

static int cmd_status(void)
{
    json_t *j;
    int rc = call("GET", "/v1/models", NULL, &j, NULL);
    if (rc)
        return rc;
    if (O.json) {
        print_json(j);
        json_decref(j);
        return 0;
    }
    printf("%-20s %-10s %-8s %-12s %s\n", "MODEL", "VERSION", "KIND", "KEYS", "STANDBY");
    json_t *m;
    size_t i;
    json_array_foreach(json_object_get(j, "models"), i, m)
    {
        char sb[128] = "-";
        size_t off = 0, k;
        json_t *vj, *v;
        if (get_versions(jstr(m, "name", "?"), &vj) == 0) {
            json_array_foreach(json_object_get(vj, "versions"), k, v)
            {
                if (strcmp(jstr(v, "state", ""), "standby") == 0 && off < sizeof sb - 24)
                    off += (size_t)snprintf(sb + off, sizeof sb - off, "%s%lld", off ? "," : "",
                                            jint(v, "version"));
            }
            json_decref(vj);
        }
        printf("%-20s %-10lld %-8s %-12lld %s\n", jstr(m, "name", "?"), jint(m, "version"),
               jstr(m, "kind", "?"), jint(m, "keys"), sb);
    }
    /* Each model's repository policy ("repositories"; "repository" is the first's). */
    json_t *rs = json_object_get(j, "repositories");
    size_t nr = json_is_array(rs) ? json_array_size(rs) : 0;
    for (size_t k = 0; k < (nr ? nr : 1); k++) {
        json_t *r = nr ? json_array_get(rs, k) : json_object_get(j, "repository");
        if (!json_is_object(r))
            continue;
        char pin[48] = "latest policy";
        if (jint(r, "pinned"))
            snprintf(pin, sizeof pin, "pinned to version %lld", jint(r, "pinned"));
        json_t *readable = json_object_get(r, "readable");
        printf("repository %s: model %s, latest %lld, %s%s\n", jstr(r, "dir", "?"),
               jstr(r, "model", "?"), jint(r, "latest"), pin,
               json_is_false(readable) ? "; NOT READABLE (the active version keeps serving)" : "");
    }
    json_decref(j);
    return 0;
}

static int cmd_versions(const char *model)
{
    json_t *j;
    int rc = get_versions(model, &j);
    if (rc)
        return rc;
    if (O.json) {
        print_json(j);
        json_decref(j);
        return 0;
    }
    json_t *pv = json_object_get(j, "pinned_version");
    if (json_is_integer(pv))
        printf("model %s: pinned to version %lld\n", model, (long long)json_integer_value(pv));
    else
        printf("model %s: not pinned (latest policy)\n", model);
    printf("%-10s %-12s %s\n", "VERSION", "STATE", "REASON");
    json_t *v;
    size_t i;
    json_array_foreach(json_object_get(j, "versions"), i, v)
    {
        printf("%-10lld %-12s %s\n", jint(v, "version"), jstr(v, "state", "?"),
               jstr(v, "reason", ""));
    }
    json_decref(j);
    return 0;
}

static int cmd_digest(const char *model)
{
    char path[256];
    json_t *j;
    snprintf(path, sizeof path, "/v1/models/%s/digest", model);
    int rc = call("GET", path, NULL, &j, NULL);
    if (rc)
        return rc;
    if (O.json)
        print_json(j);
    else
        printf("model %s version %lld: %lld keys x %lld floats, %lld dense floats, digest %s\n",
               model, jint(j, "version"), jint(j, "keys"), jint(j, "value_floats"),
               jint(j, "dense_floats"), jstr(j, "digest", "?"));
    json_decref(j);
    return 0;
}

static int valid_model(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!codec_name_char((unsigned char)s[i]))
            return 0;
    return 1;
}

/* A warning on stderr when the server says it could not keep the model's
 * marks on disk (the answer's "marks_kept": false). */
static void warn_marks(const json_t *j, const char *model)
{
    if (json_is_false(json_object_get(j, "marks_kept")))
        fprintf(stderr, "tlctl: warning: the server could not write the marks of %s (its log "
                        "says why): this holds until it restarts, not after\n", model);
}

static int cmd_activate(const char *model, const char *version, bool force)
{
    char payload[128], path[256];
    if (strcmp(version, "latest") == 0) {
        if (force) {
            fprintf(stderr, "tlctl: --force goes with a VERSION to load, not \"latest\"\n");
            return EXIT_USAGE;
        }
        snprintf(payload, sizeof payload, "{\"version\": \"latest\"}");
    } else {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(version, &end, 10);
        /* a version directory's name: digits, no sign, no leading zero, 1 .. 2^63-1 */
        if (errno || *end || end == version || v == 0 || v > INT64_MAX || version[0] < '1' ||
            version[0] > '9') {
            fprintf(stderr, "tlctl: VERSION must be a version number (1, 2, ...: digits, no "
                    "leading zero, at most 2^63-1) or \"latest\", not '%s'\n", version);
            return EXIT_USAGE;
        }
        snprintf(payload, sizeof payload, "{\"version\": %llu%s}", v,
                 force ? ", \"force\": true" : "");
    }
    snprintf(path, sizeof path, "/v1/models/%s:activate", model);
    json_t *j;
    int status;
    int rc = call("POST", path, payload, &j, &status);
    if (rc)
        return rc;
    if (O.json)
        print_json(j);
    else if (strcmp(version, "latest") == 0)
        printf("model %s: unpinned (latest policy)\n", model);
    else if (status == 202)
        printf("model %s: version %s loading (load %lld), pinned; see tlctl versions %s\n", model,
               version, jint(j, "load"), model);
    else
        printf("model %s: version %s active%s\n", model, version,
               json_is_true(json_object_get(j, "pinned")) ? ", pinned" : "");
    warn_marks(j, model);
    json_decref(j);
    return 0;
}

static int cmd_rollback(const char *model)
{
    char path[256];
    snprintf(path, sizeof path, "/v1/models/%s:rollback", model);
    json_t *j;
    int rc = call("POST", path, "", &j, NULL);
    if (rc)
        return rc;
    if (O.json)
        print_json(j);
    else
        printf("model %s: rolled back from version %lld to version %lld (swap %lld us)\n", model,
               jint(j, "rolled_back"), jint(j, "version"), jint(j, "swap_us"));
    warn_marks(j, model);
    json_decref(j);
    return 0;
}

static int cmd_refuse(const char *model, const char *version, const char *why)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(version, &end, 10);
    if (errno || *end || end == version || v == 0 || version[0] == '-') {
        fprintf(stderr, "tlctl: VERSION must be a positive integer, not '%s'\n", version);
        return EXIT_USAGE;
    }
    json_t *body = json_pack("{s:I, s:s}", "version", (json_int_t)v, "reason", why ? why : "");
    char *payload = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!payload) {
        fprintf(stderr, "tlctl: out of memory\n");
        return 1;
    }
    char path[256];
    snprintf(path, sizeof path, "/v1/models/%s:refuse", model);
    json_t *j;
    int rc = call("POST", path, payload, &j, NULL);
    free(payload);
    if (rc)
        return rc;
    if (O.json)
        print_json(j);
    else if (jint(j, "rolled_back_to"))
        printf("model %s: version %llu refused; version %lld active\n", model, v,
               jint(j, "rolled_back_to"));
    else
        printf("model %s: version %llu refused\n", model, v);
    warn_marks(j, model);
    json_decref(j);
    return 0;
}

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

/* Prints a line for every version whose state differs from prev's; takes
 * over cur into *prev. */
static void diff_states(const char *model, json_t **prev, json_t *cur)
{
    json_t *v;
    size_t i;
    json_t *seen = json_object();
    json_array_foreach(json_object_get(cur, "versions"), i, v)
    {
        char key[32];
        snprintf(key, sizeof key, "%lld", jint(v, "version"));
        const char *st = jstr(v, "state", "?");
        json_object_set_new(seen, key, json_string(st));
        const char *old = *prev ? json_string_value(json_object_get(*prev, key)) : NULL;
        if (!old || strcmp(old, st) != 0) {
            char ts[32];
            time_t t = time(NULL);
            strftime(ts, sizeof ts, "%H:%M:%S", localtime(&t));
            if (O.json) {
                json_t *o =
                    json_pack("{s:s, s:s, s:I, s:s?, s:s}", "time", ts, "model", model, "version",
                              (json_int_t)jint(v, "version"), "from", old, "state", st);
                print_json(o);
                json_decref(o);
            } else {
                printf("%s %s version %s: %s -> %s\n", ts, model, key, old ? old : "(new)", st);
            }
        }
    }
    json_decref(*prev);
    *prev = seen;
    fflush(stdout);
}

static int cmd_watch(const char *model)
{
    char name[64] = "";
    if (model) {
        snprintf(name, sizeof name, "%s", model);
    } else {
        json_t *j;
        int rc = call("GET", "/v1/models", NULL, &j, NULL);
        if (rc)
            return rc;
        json_t *r = json_object_get(j, "repository");
        json_t *m = json_array_get(json_object_get(j, "models"), 0);
        snprintf(name, sizeof name, "%s",
                 json_is_object(r) ? jstr(r, "model", "") : jstr(m, "name", ""));
        json_decref(j);
        if (!name[0]) {
            fprintf(stderr, "tlctl: no model is served yet: name one (tlctl watch MODEL)\n");
            return EXIT_REFUSED;
        }
    }
    struct sigaction sa = {.sa_handler = on_sigint};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    json_t *prev = NULL;
    int rc = 0;
    while (!interrupted) {
        json_t *j;
        rc = get_versions(name, &j);
        if (rc)
            break;
        diff_states(name, &prev, j);
        json_decref(j);
        for (int i = 0; i < 10 && !interrupted; i++)
            usleep(100000);
    }
    json_decref(prev);
    return interrupted ? 0 : rc;
}

static int read_token_file(const char *f)
{
    FILE *fp = fopen(f, "r");
    if (!fp) {
        fprintf(stderr, "tlctl: cannot read the token file %s: %s\n", f, strerror(errno));
        return -1;
    }
    struct stat st;
    int sr = fstat(fileno(fp), &st);
    if (sr != 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "tlctl: the token file %s is %s\n", f,
                sr == 0 && S_ISDIR(st.st_mode) ? "a directory, not a file"
                                               : "not a regular file");
        fclose(fp);
        return -1;
    }
    size_t n = fread(O.token, 1, sizeof O.token - 1, fp);
    fclose(fp);
    O.token[n] = '\0';
    while (n > 0 && (O.token[n - 1] == '\n' || O.token[n - 1] == '\r' || O.token[n - 1] == ' '))
        O.token[--n] = '\0';
    if (n == 0) { /* else the call goes out without a token and the server's 401 says less */
        fprintf(stderr, "tlctl: the token file %s is empty: put the server's admin token in it\n",
                f);
        return -1;
    }
    return 0;
}

/* A token with a byte that would break the header (CR, LF...) is refused. */
static int token_ok(void)
{
    for (const char *p = O.token; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e)
            return 0;
    return 1;
}

int main(int argc, char **argv)
{
    const char *env = getenv("TLSERVE_ADMIN_TOKEN");
    if (env)
        snprintf(O.token, sizeof O.token, "%s", env);
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--json") == 0) {
            O.json = true;
        } else if (strcmp(argv[i], "--admin") == 0 && i + 1 < argc) {
            const char *a = argv[++i], *colon = strrchr(a, ':');
            if (!colon || colon == a || strlen(colon + 1) == 0 ||
                strlen(colon + 1) >= sizeof O.port || (size_t)(colon - a) >= sizeof O.host) {
                fprintf(stderr, "tlctl: --admin wants HOST:PORT, not '%s'\n", a);
                return EXIT_USAGE;
            }
            char *end;
            long port = strtol(colon + 1, &end, 10); /* digits only: no service names */
            if (*end || port < 1 || port > 65535 || colon[1] < '0' || colon[1] > '9') {
                fprintf(stderr, "tlctl: --admin '%s': the port is not a number in 1..65535\n", a);
                return EXIT_USAGE;
            }
            const char *h = a;
            size_t hl = (size_t)(colon - a);
            if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') /* [::1]:7071 */
                h++, hl -= 2;
            memcpy(O.host, h, hl);
            O.host[hl] = '\0';
            snprintf(O.port, sizeof O.port, "%s", colon + 1);
        } else if (strcmp(argv[i], "--token-file") == 0 && i + 1 < argc) {
            if (read_token_file(argv[++i]) != 0)
                return EXIT_USAGE;
        } else {
            fprintf(stderr, "tlctl: unknown option or missing value: %s\n", argv[i]);
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (!token_ok()) {
        fprintf(stderr, "tlctl: the admin token holds a control or non-ASCII byte\n");
        return EXIT_USAGE;
    }
    int left = argc - i;
    const char *cmd = left > 0 ? argv[i] : "";
    char **a = argv + i + 1;
    int na = left - 1;
    if (na >= 1 && !valid_model(a[0])) { /* every command's first argument is a model */
        fprintf(stderr, "tlctl: bad model name '%s' (1..63 characters of [A-Za-z0-9_.-])\n", a[0]);
        return EXIT_USAGE;
    }
    if (strcmp(cmd, "status") == 0 && na == 0)
        return cmd_status();
    if (strcmp(cmd, "versions") == 0 && na == 1)
        return cmd_versions(a[0]);
    if (strcmp(cmd, "digest") == 0 && na == 1)
        return cmd_digest(a[0]);
    if (strcmp(cmd, "activate") == 0 && na == 2)
        return cmd_activate(a[0], a[1], false);
    if (strcmp(cmd, "activate") == 0 && na == 3 && strcmp(a[2], "--force") == 0)
        return cmd_activate(a[0], a[1], true);
    if (strcmp(cmd, "rollback") == 0 && na == 1)
        return cmd_rollback(a[0]);
    if (strcmp(cmd, "refuse") == 0 && (na == 2 || na == 3))
        return cmd_refuse(a[0], a[1], na == 3 ? a[2] : NULL);
    if (strcmp(cmd, "watch") == 0 && na <= 1)
        return cmd_watch(na ? a[0] : NULL);
    for (int k = 0; k < na; k++)
        if (a[k][0] == '-' && !(strcmp(cmd, "activate") == 0 && k == 2)) {
            fprintf(stderr, "tlctl: '%s' after the command: options go before it "
                    "(tlctl [--json] ... %s ...)\n", a[k], cmd);
            return EXIT_USAGE;
        }
    static const char *const known[] = {"status", "versions", "digest", "activate",
                                        "rollback", "refuse", "watch"};
    bool is_known = false;
    for (size_t k = 0; k < sizeof known / sizeof *known; k++)
        is_known |= strcmp(cmd, known[k]) == 0;
    if (!cmd[0])
        fprintf(stderr, "tlctl: no command\n");
    else if (!is_known)
        fprintf(stderr, "tlctl: unknown command '%s'\n", cmd);
    else
        fprintf(stderr, "tlctl: %s does not take %d argument%s\n", cmd, na, na == 1 ? "" : "s");
    usage(stderr);
    return EXIT_USAGE;
}
