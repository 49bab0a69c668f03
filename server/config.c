/*
 * config.c — server_config_load(): tlserve's settings read from their
 * sources in order, each value through the one parser of its table row
 * (config_table.c), then checked as a whole (config_check.c).
 *
 * ORDER OF SOURCES
 *   defaults -> --config FILE (INI, keys in [server]) -> environment -> flags.
 *   --config is found by a first pass over argv, so "--port 1 --config f"
 *   still lets the flag win over the file.  --help anywhere prints the
 *   table and wins over everything (even a bad flag before it).
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
 *   name a regular file (a directory reads as an empty file), and a file
 *   that sets one setting twice is refused.  inih cuts a line at its
 *   buffer (INI_MAX_LINE) and reads the rest as a line of its own, and
 *   stops a value at a NUL byte; read_line hands it whole lines and
 *   refuses one that would not fit or holds a NUL.
 *
 * THREAD SAFETY
 *   Runs on the main thread before any other thread starts; it also sets
 *   server_log_level (log.h), which other threads then only read.
 */
#include "config_impl.h"
#include "log.h"

#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

int server_log_level = LL_INFO;

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
    for (size_t i = 0; i < server__cfg_ntable; i++)
        if (name_eq(given, n, server__cfg_table[i].name))
            return &server__cfg_table[i];
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
            snprintf(why, why_len, "'%s' is not an integer (allowed %lld..%lld)", v,
                     (long long)e->min, (long long)e->max);
            return -1;
        }
        if ((double)x < e->min || (double)x > e->max) {
            snprintf(why, why_len, "%lld is out of range (allowed %lld..%lld)", x,
                     (long long)e->min, (long long)e->max);
            return -1;
        }
        if (e->check && e->check(v, why, why_len) != 0)
            return -1;
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
            snprintf(why, why_len, "'%s' is not a number (allowed %g..%g)", v, e->min, e->max);
            return -1;
        }
        if (x < e->min || x > e->max) {
            snprintf(why, why_len, "%g is out of range (allowed %g..%g)", x, e->min, e->max);
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
    bool *seen; /* [server__cfg_ntable]: set by an earlier line of the file */
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
    /* A setting given twice is refused: which one a reader of the file meant
     * is not knowable, and "the last wins" hides a forgotten line. */
    if (fc->seen[e - server__cfg_table]) {
        snprintf(fc->msg, sizeof fc->msg,
                 "'%s' is set a second time in this file (name each setting once)", e->name);
        goto bad;
    }
    fc->seen[e - server__cfg_table] = true;
    /* inih ends a value at an inline ';' only: "abc # note" would be the
     * value, a comment silently kept in a token or a path. */
    if (strstr(value, " #") || strstr(value, "\t#")) {
        snprintf(fc->msg, sizeof fc->msg,
                 "%s: the value '%.200s' holds ' #': an inline comment starts with ';' in this "
                 "file ('#' only at the start of a line)", e->name, value);
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

/* The file's lines for ini_parse_stream, whole or not at all. */
typedef struct line_reader {
    FILE *f;
    char *buf;       /* getline's */
    size_t cap;
    int lineno;      /* lines read */
    int bad_line;    /* the first line too long for inih or holding a NUL; 0: none */
    size_t bad_len;  /* its length, the line end included */
    bool bad_nul;    /* it held a NUL byte (else it was too long) */
    int max_len;     /* what inih takes, the line end included */
    int read_errno;  /* a read failed (not the end of the file): the rest is unread */
} line_reader_t;

/* inih's fgets-like reader: the next line into str (num bytes), or NULL at
 * the end.  A line that does not fit or holds a NUL is recorded and read
 * as an empty line, so that inih parses nothing of it. */
static char *read_line(char *str, int num, void *stream)
{
    line_reader_t *r = stream;
    errno = 0;
    ssize_t n = getline(&r->buf, &r->cap, r->f);
    if (n < 0) {
        if (ferror(r->f) || errno == ENOMEM)
            r->read_errno = errno ? errno : EIO;
        return NULL;
    }
    r->lineno++;
    size_t len = (size_t)n;
    bool nul = memchr(r->buf, '\0', len) != NULL;
    if (nul || len + 1 > (size_t)num) {
        if (!r->bad_line) {
            r->bad_line = r->lineno;
            r->bad_len = len;
            r->bad_nul = nul;
            r->max_len = num - 1;
        }
        str[0] = '\n';
        str[1] = '\0';
        return str;
    }
    memcpy(str, r->buf, len + 1);
    return str;
}

static int load_file(server_config_t *cfg, const char *path)
{
    file_ctx_t fc = {.cfg = cfg, .seen = calloc(server__cfg_ntable, sizeof(bool))};
    if (!fc.seen) {
        fprintf(stderr, "tlserve: --config: out of memory reading '%s'\n", path);
        return -1;
    }
    FILE *f = open_config(path);
    if (!f) {
        free(fc.seen);
        return -1;
    }
    line_reader_t lr = {.f = f};
    int line = ini_parse_stream(read_line, &lr, on_key, &fc);
    fclose(f);
    free(lr.buf);
    free(fc.seen);
    if (line == -2) {
        fprintf(stderr, "tlserve: --config: out of memory reading '%s'\n", path);
        return -1;
    }
    if (lr.read_errno) {
        fprintf(stderr, "tlserve: --config: cannot read '%s' after line %d: %s\n", path,
                lr.lineno, strerror(lr.read_errno));
        return -1;
    }
    if (lr.bad_line && (line <= 0 || lr.bad_line < line)) {
        if (lr.bad_nul)
            fprintf(stderr, "tlserve: %s:%d: the line holds a NUL byte (a config is text)\n", path,
                    lr.bad_line);
        else
            fprintf(stderr,
                    "tlserve: %s:%d: the line is %zu bytes, over the %d a config line may have "
                    "(its end included; a long admin token goes in admin_token_file)\n",
                    path, lr.bad_line, lr.bad_len, lr.max_len);
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
    for (size_t i = 0; i < server__cfg_ntable; i++) {
        const cfg_entry_t *e = &server__cfg_table[i];
        if (set_value(cfg, e, e->def, why, sizeof why) != 0) {
            fprintf(stderr, "tlserve: internal: default of %s: %s\n", e->name, why);
            return -1;
        }
    }

    /* Pass 1: --help wins; find --config. */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            server__cfg_print_help(stdout);
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

    for (size_t i = 0; i < server__cfg_ntable; i++) {
        const cfg_entry_t *e = &server__cfg_table[i];
        const char *v = e->env ? getenv(e->env) : NULL;
        if (v && set_value(cfg, e, v, why, sizeof why) != 0) {
            fprintf(stderr, "tlserve: $%s: %s\n", e->env, why);
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
            bool next;
            if (e->type == CFG_BOOL && i + 1 < argc && parse_bool(argv[i + 1], &next) == 0) {
                /* "--gate false": a bare bool is true, so 'false' would be a stray argument */
                fprintf(stderr, "tlserve: --%s %s: a bool takes its value after '=' (--%s=%s); "
                                "--%s alone means true\n",
                        e->name, argv[i + 1], e->name, argv[i + 1], e->name);
                return -1;
            }
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
    return server__cfg_validate(cfg, secret_flag);
}
