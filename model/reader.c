/*
 * reader.c — streaming libsvm / libffm / Criteo readers (reader.h).
 *
 * Input comes through one read buffer (64 KiB to start) from a file
 * descriptor or a caller's memory block.  Lines are cut in place:
 *
 *   buf: [ consumed | line\n | next line\n | partial li | free ]
 *                    ^start                  ^            ^end
 *
 * When no newline is left between start and end, the tail is moved to the
 * front and more is read; when the tail already fills the buffer, the buffer
 * doubles, up to max_line + 1 bytes.  A longer line is an error (or, with
 * skip_bad, is dropped up to its newline in "discard" mode without ever
 * being held whole).  So memory is O(longest accepted line), never O(file).
 *
 * Parsing works on [p, end) ranges, not C strings, so a NUL byte inside a
 * line is just an invalid character.  Numbers are parsed by hand (no locale,
 * no strtod on the common "0.3651" / "1" forms); anything unusual (exponents,
 * many digits) falls back to strtod on a bounded copy.
 *
 * THREAD SAFETY: none needed; one reader, one thread.
 */
#include "reader.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define INITIAL_BUF (64u * 1024)
#define DEFAULT_MAX_LINE (16u * 1024 * 1024)
#define ID_MASK ((UINT64_C(1) << 56) - 1)
#define CRITEO_INT 13
#define CRITEO_CAT 26

struct reader {
    reader_options_t opt;
    char name[256];        /* file name for messages */
    int fd;                /* -1 for a memory source */
    const char *mem;       /* memory source (not owned) */
    size_t mem_len, mem_pos;
    char *buf;             /* read buffer, cap + 1 bytes (room for a NUL) */
    size_t cap, start, end;
    uint64_t src_off;      /* bytes of the source read into buf, from its start */
    int eof;               /* the source has nothing more */
    int unterminated;      /* the last line cut ended at EOF without a newline */
    uint64_t line;         /* number of the last line cut */
    uint64_t skipped;
    uint64_t *ids;         /* current sample's features */
    float *values;
    uint32_t feat_cap;
    char sep;              /* criteo: '\t' or ',' (0 = not yet known) */
    int criteo_cols;       /* criteo: 40 or 41, the first data line's (0 = not yet known) */
    int criteo_started;    /* criteo: the first non-blank line was seen */
    uint64_t header_line;  /* criteo: the line taken as a header (0: none) */
    int failed;            /* sticky error */
    char err[512];
};

int64_t reader_criteo_transform(int64_t v)
{
    if (v > 2) {
        double l = log((double)v);
        return (int64_t)floor(l * l);
    }
    return v;
}

int reader_format_parse(const char *name, reader_format_t *out)
{
    if (strcmp(name, "libsvm") == 0 || strcmp(name, "svm") == 0)
        *out = READER_LIBSVM;
    else if (strcmp(name, "libffm") == 0 || strcmp(name, "ffm") == 0)
        *out = READER_LIBFFM;
    else if (strcmp(name, "criteo") == 0)
        *out = READER_CRITEO;
    else
        return -EINVAL;
    return 0;
}

static bool blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

int reader_sniff_format(const char *buf, size_t len, bool complete, bool criteo,
                        reader_format_t *out, uint64_t *bad_line, const char **bad,
                        int *bad_len)
{
    *out = READER_LIBSVM;
    uint64_t line = 1;
    for (size_t i = 0; i < len; line++) {
        size_t eol = i;
        while (eol < len && buf[eol] != '\n')
            eol++;
        bool cut = eol == len && !complete; /* by the head's end: judged on what it holds */
        /* criteo's columns: 40 or 41 split by tabs (or, with no tab, commas); a line with
         * fewer is not criteo's (a libsvm label and a stray tab, a decimal comma) */
        size_t tabs = 0, commas = 0;
        for (size_t k = i; criteo && k < eol; k++) {
            tabs += buf[k] == '\t';
            commas += buf[k] == ',';
        }
        if (criteo && (tabs ? tabs : commas) >= 39) {
            *out = READER_CRITEO;
            return 0;
        }
        size_t p = i;
        while (p < eol && blank(buf[p]))
            p++;
        while (p < eol && !blank(buf[p]))
            p++; /* the label */
        while (p < eol && blank(buf[p]))
            p++;
        if (p < eol) {
            size_t q = p;
            int colons = 0;
            while (q < eol && !blank(buf[q]))
                colons += buf[q++] == ':';
            if (cut && q == eol)
                break; /* the first feature itself runs past the head: cannot tell */
            if (colons == 1 || colons == 2) {
                *out = colons == 1 ? READER_LIBSVM : READER_LIBFFM;
                return 0;
            }
            *bad_line = line;
            *bad = buf + p;
            *bad_len = q - p > 40 ? 40 : (int)(q - p);
            return -EINVAL;
        }
        if (cut)
            break;
        i = eol + 1;
    }
    return 0;
}

/* ---- setup ---------------------------------------------------------------- */

__attribute__((cold)) static int reader_init(reader_t **out, const char *name,
                                             const reader_options_t *opt, char *err,
                                             size_t err_len)
{
    if (!opt || (unsigned)opt->format > READER_CRITEO) {
        if (err_len)
            snprintf(err, err_len, "%s: bad reader options", name);
        return -EINVAL;
    }
    reader_t *r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    r->opt = *opt;
    if (r->opt.max_line == 0)
        r->opt.max_line = DEFAULT_MAX_LINE;
    snprintf(r->name, sizeof r->name, "%s", name);
    r->fd = -1;
    r->cap = INITIAL_BUF < r->opt.max_line + 1 ? INITIAL_BUF : r->opt.max_line + 1;
    r->buf = malloc(r->cap + 1);
    r->feat_cap = 64;
    r->ids = malloc(r->feat_cap * sizeof *r->ids);
    r->values = malloc(r->feat_cap * sizeof *r->values);
    if (!r->buf || !r->ids || !r->values) {
        reader_close(r);
        if (err_len)
            snprintf(err, err_len, "%s: out of memory", name);
        return -ENOMEM;
    }
    *out = r;
    return 0;
}

int reader_open(const char *path, const reader_options_t *opt, reader_t **out, char *err,
                size_t err_len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (err_len)
            snprintf(err, err_len, "%s: %s", path, strerror(e));
        return -e;
    }
    return reader_open_fd(fd, path, opt, out, err, err_len);
}

int reader_open_regular(const char *path, char *err, size_t err_len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    struct stat st;
    int e = fd < 0 ? errno : fstat(fd, &st) != 0 ? errno : 0;
    if (e == 0 && !S_ISREG(st.st_mode)) {
        if (err_len)
            snprintf(err, err_len, "%s is not a regular file", path);
        close(fd);
        return -EINVAL;
    }
    if (e == 0 && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0)
        e = errno;
    if (e != 0) {
        if (err_len)
            snprintf(err, err_len, "%s: %s", path, strerror(e));
        if (fd >= 0)
            close(fd);
        return -e;
    }
    return fd;
}

int reader_open_fd(int fd, const char *name, const reader_options_t *opt, reader_t **out,
                   char *err, size_t err_len)
{
    reader_t *r;
    int rc = reader_init(&r, name, opt, err, err_len);
    if (rc != 0) {
        close(fd);
        return rc;
    }
    r->fd = fd;
    *out = r;
    return 0;
}

int reader_open_mem(const void *data, size_t len, const char *name, const reader_options_t *opt,
                    reader_t **out, char *err, size_t err_len)
{
    reader_t *r;
    int rc = reader_init(&r, name ? name : "(memory)", opt, err, err_len);
    if (rc != 0)
        return rc;
    r->mem = data;
    r->mem_len = data ? len : 0;
    *out = r;
    return 0;
}

void reader_close(reader_t *r)
{
    if (!r)
        return;
    if (r->fd >= 0)
        close(r->fd);
    free(r->buf);
    free(r->ids);
    free(r->values);
    free(r);
}

int reader_rewind(reader_t *r)
{
    if (r->fd >= 0 && lseek(r->fd, 0, SEEK_SET) < 0)
        return -errno;
    r->mem_pos = 0;
    r->start = r->end = 0;
    r->src_off = 0;
    r->eof = 0;
    r->unterminated = 0;
    r->line = 0;
    r->skipped = 0;
    r->sep = 0;
    r->criteo_cols = 0;
    r->criteo_started = 0;
    r->header_line = 0;
    r->failed = 0;
    r->err[0] = '\0';
    return 0;
}

static int next_line(reader_t *r, char **lp, size_t *ll);
static int parse_criteo(reader_t *r, char *p, char *e, reader_sample_t *s);

/* What a criteo read from the source's start holds on reaching byte offset
 * (its separator, column count, header line): the lines before offset are
 * parsed again until the first data line, so a resumed read parses the
 * lines after offset as the whole read did.  Reads from the start; leaves
 * the state in r (reader_seek keeps it). */
static int criteo_state_before(reader_t *r, uint64_t offset)
{
    int rc = reader_rewind(r);
    while (rc == 0 && !r->criteo_cols) {
        char *lp;
        size_t ll;
        if (reader_offset(r) >= offset)
            break;
        rc = next_line(r, &lp, &ll);
        if (rc == 1) {
            reader_sample_t s;
            (void)parse_criteo(r, lp, lp + ll, &s); /* a bad line: the read stopped or skipped it */
            rc = 0;
        } else if (rc == -E2BIG) { /* too long to have been read */
            rc = 0;
        } else if (rc == 0) {
            break;
        }
    }
    r->failed = 0;
    r->err[0] = '\0';
    return rc < 0 ? rc : 0;
}

int reader_seek(reader_t *r, uint64_t offset, uint64_t line)
{
    char sep = 0;
    int cols = 0, started = 0;
    uint64_t header = 0;
    if (r->opt.format == READER_CRITEO && offset > 0) {
        uint64_t skipped = r->skipped; /* the rewind zeroes it */
        int rc = criteo_state_before(r, offset);
        r->skipped = skipped;
        if (rc != 0)
            return rc;
        sep = r->sep;
        cols = r->criteo_cols;
        started = r->criteo_started;
        header = r->header_line;
    }
    if (r->fd >= 0) {
        if (offset > (uint64_t)INT64_MAX)
            return -EINVAL;
        if (lseek(r->fd, (off_t)offset, SEEK_SET) < 0)
            return -errno;
    } else {
        if (offset > r->mem_len)
            return -EINVAL;
        r->mem_pos = (size_t)offset;
    }
    r->start = r->end = 0;
    r->src_off = offset;
    r->eof = 0;
    r->unterminated = 0;
    r->line = line;
    r->sep = sep;
    r->criteo_cols = cols;
    r->criteo_started = started;
    r->header_line = header;
    r->failed = 0;
    r->err[0] = '\0';
    return 0;
}

uint64_t reader_offset(const reader_t *r) { return r->src_off - (r->end - r->start); }

const char *reader_error(const reader_t *r) { return r->err; }
const char *reader_name(const reader_t *r) { return r->name; }
bool reader_line_unterminated(const reader_t *r) { return r->unterminated != 0; }

uint64_t reader_line(const reader_t *r) { return r->line; }
uint64_t reader_skipped(const reader_t *r) { return r->skipped; }
uint64_t reader_header_line(const reader_t *r) { return r->header_line; }

/* ---- line cutting --------------------------------------------------------- */

/* Appends up to cap - end bytes from the source.  Returns bytes read, 0 at
 * EOF, or -errno. */
static ssize_t fill(reader_t *r)
{
    size_t room = r->cap - r->end;
    if (r->fd < 0) {
        size_t n = r->mem_len - r->mem_pos;
        if (n > room)
            n = room;
        memcpy(r->buf + r->end, r->mem + r->mem_pos, n);
        r->mem_pos += n;
        r->end += n;
        r->src_off += n;
        return (ssize_t)n;
    }
    for (;;) {
        ssize_t n = read(r->fd, r->buf + r->end, room);
        if (n >= 0) {
            r->end += (size_t)n;
            r->src_off += (uint64_t)n;
            return n;
        }
        if (errno != EINTR)
            return -errno;
    }
}

__attribute__((cold, format(printf, 2, 3))) static void set_err(reader_t *r, const char *fmt, ...)
{
    int n = snprintf(r->err, sizeof r->err, "%s:%llu: ", r->name, (unsigned long long)r->line);
    if (n < 0 || (size_t)n >= sizeof r->err)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err + n, sizeof r->err - (size_t)n, fmt, ap);
    va_end(ap);
}

/* A UTF-8 byte-order mark, which Windows editors and spreadsheet exports put
 * before the first line: dropped when it opens the source (offset 0), so the
 * first label parses. */
static void skip_bom(uint64_t line_off, char **lp, size_t *ll)
{
    if (line_off == 0 && *ll >= 3 && memcmp(*lp, "\xEF\xBB\xBF", 3) == 0) {
        *lp += 3;
        *ll -= 3;
    }
}

/* Cuts the next line into [*lp, *lp + *ll) (newline and trailing CR
 * removed; a UTF-8 byte-order mark at the source's start too).  Returns 1,
 * 0 at EOF, -E2BIG for an over-long line (consumed when skip_bad), or
 * another -errno. */
static int next_line(reader_t *r, char **lp, size_t *ll)
{
    int discarding = 0; /* dropping an over-long line up to its newline */
    for (;;) {
        char *s = r->buf + r->start;
        size_t avail = r->end - r->start;
        char *nl = avail ? memchr(s, '\n', avail) : NULL;
        r->unterminated = 0;
        if (nl) {
            r->start += (size_t)(nl - s) + 1;
            if (discarding)
                return -E2BIG;
            size_t len = (size_t)(nl - s);
            if (len > r->opt.max_line) {
                r->line++;
                return -E2BIG;
            }
            if (len && s[len - 1] == '\r')
                len--;
            r->line++;
            *lp = s;
            *ll = len;
            skip_bom(r->src_off - avail, lp, ll);
            return 1;
        }
        if (r->eof) {
            if (discarding) {
                r->start = r->end;
                return -E2BIG;
            }
            if (avail == 0)
                return 0;
            r->start = r->end;
            r->line++;
            r->unterminated = 1;
            if (avail > r->opt.max_line)
                return -E2BIG;
            uint64_t line_off = r->src_off - avail;
            if (s[avail - 1] == '\r')
                avail--;
            *lp = s;
            *ll = avail;
            skip_bom(line_off, lp, ll);
            return 1;
        }
        /* No newline yet: make room and read more. */
        if (discarding) {
            r->start = r->end = 0;
        } else if (r->start > 0) {
            memmove(r->buf, s, avail);
            r->start = 0;
            r->end = avail;
        }
        if (r->end == r->cap) {
            if (r->cap > r->opt.max_line) {
                /* The line already exceeds max_line: drop it. */
                r->line++;
                if (!r->opt.skip_bad) {
                    r->start = r->end;
                    return -E2BIG;
                }
                discarding = 1;
                r->start = r->end = 0;
            } else {
                size_t ncap = r->cap * 2;
                if (ncap > r->opt.max_line + 1)
                    ncap = r->opt.max_line + 1;
                char *nb = realloc(r->buf, ncap + 1);
                if (!nb)
                    return -ENOMEM;
                r->buf = nb;
                r->cap = ncap;
            }
        }
        ssize_t n = fill(r);
        if (n < 0)
            return (int)n;
        if (n == 0)
            r->eof = 1;
    }
}

/* ---- field parsing -------------------------------------------------------- */

/* Copies a token into out for messages: at most 40 bytes, non-printables as '?'. */
static const char *show(const char *p, const char *e, char out[48])
{
    size_t n = (size_t)(e - p), i;
    for (i = 0; i < n && i < 40; i++)
        out[i] = (p[i] >= 0x20 && p[i] < 0x7f) ? p[i] : '?';
    if (n > 40) {
        memcpy(out + 40, "...", 3);
        i = 43;
    }
    out[i] = '\0';
    return out;
}

/* Unsigned decimal in [p, e); 0 on success. */
static int parse_u64(const char *p, const char *e, uint64_t max, uint64_t *out)
{
    if (p == e)
        return -1;
    uint64_t v = 0;
    for (; p < e; p++) {
        unsigned d = (unsigned char)*p - '0';
        if (d > 9 || v > (max - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

static int parse_i64(const char *p, const char *e, int64_t *out)
{
    int neg = 0;
    if (p < e && (*p == '-' || *p == '+')) {
        neg = *p == '-';
        p++;
    }
    uint64_t v;
    if (parse_u64(p, e, (uint64_t)INT64_MAX, &v) != 0)
        return -1;
    *out = neg ? -(int64_t)v : (int64_t)v;
    return 0;
}

static const double pow10_tab[] = {1e0, 1e1, 1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                   1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};

/* A finite float in [p, e); 0 on success. */
static int parse_float(const char *p, const char *e, float *out)
{
    const char *s = p;
    int neg = 0;
    if (s < e && (*s == '-' || *s == '+')) {
        neg = *s == '-';
        s++;
    }
    uint64_t mant = 0;
    int digits = 0, frac = 0, seen = 0;
    for (; s < e && (unsigned)(*s - '0') <= 9; s++, seen++)
        if (mant || *s != '0') {
            mant = mant * 10 + (uint64_t)(*s - '0');
            digits++;
        } else if (mant == 0)
            continue;
    if (s < e && *s == '.') {
        s++;
        for (; s < e && (unsigned)(*s - '0') <= 9; s++, seen++, frac++) {
            mant = mant * 10 + (uint64_t)(*s - '0');
            if (mant)
                digits++;
        }
    }
    if (s == e && seen > 0 && digits <= 15 && frac <= 15) {
        double v = (double)mant / pow10_tab[frac];
        *out = (float)(neg ? -v : v);
        return 0;
    }
    /* Slow path: exponents, long mantissas, junk. */
    char tmp[64];
    size_t n = (size_t)(e - p);
    if (n == 0 || n >= sizeof tmp)
        return -1;
    memcpy(tmp, p, n);
    tmp[n] = '\0';
    if (memchr(tmp, '\0', n) || !((unsigned)(tmp[0] - '0') <= 9 || tmp[0] == '-' ||
                                    tmp[0] == '+' || tmp[0] == '.') ||
        strpbrk(tmp, "xXpP")) /* decimal only: strtod would take 0x10 as 16 */
        return -1;
    char *q;
    double v = strtod(tmp, &q);
    if (q != tmp + n || !isfinite(v) || !isfinite((float)v))
        return -1;
    *out = (float)v;
    return 0;
}

static int parse_label(const char *p, const char *e, float *out)
{
    float v;
    if (parse_float(p, e, &v) != 0)
        return -1;
    if (v == 1.0f)
        *out = 1.0f;
    else if (v == 0.0f || v == -1.0f)
        *out = 0.0f;
    else
        return -1;
    return 0;
}

static int push_feature(reader_t *r, uint32_t n, uint64_t id, float v)
{
    if (n == r->feat_cap) {
        uint32_t ncap = r->feat_cap * 2;
        uint64_t *ni = realloc(r->ids, ncap * sizeof *ni);
        if (!ni)
            return -ENOMEM;
        r->ids = ni;
        float *nv = realloc(r->values, ncap * sizeof *nv);
        if (!nv)
            return -ENOMEM;
        r->values = nv;
        r->feat_cap = ncap;
    }
    r->ids[n] = id;
    r->values[n] = v;
    return 0;
}

static inline int is_space(char c) { return c == ' ' || c == '\t'; }

/* libsvm / libffm.  Returns 1 sample, 0 blank line, or -errno. */
static int parse_sparse(reader_t *r, const char *p, const char *e, reader_sample_t *s)
{
    char b[48];
    int ffm = r->opt.format == READER_LIBFFM;
    while (p < e && is_space(*p))
        p++;
    if (p == e)
        return 0;
    const char *t = p;
    while (p < e && !is_space(*p))
        p++;
    if (parse_label(t, p, &s->label) != 0) {
        set_err(r, "bad label '%s' (want 0, 1, -1 or +1)", show(t, p, b));
        return -EINVAL;
    }
    uint32_t n = 0;
    for (;;) {
        while (p < e && is_space(*p))
            p++;
        if (p == e)
            break;
        t = p;
        while (p < e && !is_space(*p))
            p++;
        const char *c1 = memchr(t, ':', (size_t)(p - t));
        const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(p - c1 - 1)) : NULL;
        uint64_t field = 0, idx;
        const char *ib, *ie, *vb;
        if (ffm) {
            if (!c2 || memchr(c2 + 1, ':', (size_t)(p - c2 - 1))) {
                set_err(r, "feature %u: expected field:index:value, got '%s'", n + 1,
                        show(t, p, b));
                return -EINVAL;
            }
            if (parse_u64(t, c1, 255, &field) != 0) {
                set_err(r, "feature %u: field '%s' is not a number in 0..255", n + 1,
                        show(t, c1, b));
                return -EINVAL;
            }
            ib = c1 + 1;
            ie = c2;
            vb = c2 + 1;
        } else {
            if (!c1 || c2) {
                set_err(r, "feature %u: expected index:value, got '%s'", n + 1, show(t, p, b));
                return -EINVAL;
            }
            ib = t;
            ie = c1;
            vb = c1 + 1;
        }
        if (parse_u64(ib, ie, ID_MASK - 1, &idx) != 0) {
            set_err(r, "feature %u: index '%s' is not a number below 2^56-1", n + 1,
                    show(ib, ie, b));
            return -EINVAL;
        }
        float v;
        if (parse_float(vb, p, &v) != 0) {
            set_err(r, "feature %u: value '%s' is not a finite number", n + 1, show(vb, p, b));
            return -EINVAL;
        }
        if (n == UINT32_MAX)
            return -E2BIG;
        if (push_feature(r, n, field << 56 | (idx + 1), v) != 0)
            return -ENOMEM;
        n++;
    }
    s->n = n;
    return 1;
}

static const char *criteo_col_name(int col, char out[16])
{
    if (col < CRITEO_INT)
        snprintf(out, 16, "I%d", col + 1);
    else
        snprintf(out, 16, "C%d", col - CRITEO_INT + 1);
    return out;
}

static inline uint64_t hash_id(uint64_t field, const char *p, size_t len)
{
    return field << 56 | (XXH3_64bits_withSeed(p, len, field) & ID_MASK);
}

/* A criteo file's separator, told by its first non-blank line p..e. */
static char criteo_sep(const char *p, const char *e)
{
    return memchr(p, '\t', (size_t)(e - p)) ? '\t' : ',';
}

/* Splits a CSV line that holds a double quote into columns as RFC 4180
 * reads it (a field in quotes may hold commas, and "" for a quote), taking
 * the quotes off in place: a field only shrinks, so the write never passes
 * the read.  A quote inside an unquoted field is kept as a character.
 * Returns the column count (the first 42 in col/cend), or -1 for a quoted
 * field left open or followed by text before its comma (*bad_col: which). */
static int split_csv_quoted(char *p, char *e, const char **col, const char **cend, int *bad_col)
{
    int ncol = 0;
    char *q = p;
    for (;;) {
        char *start = q, *w;
        if (q < e && *q == '"') {
            w = start;
            for (q++;; q++) {
                if (q == e) {
                    *bad_col = ncol;
                    return -1; /* no closing quote */
                }
                if (*q == '"') {
                    if (q + 1 < e && q[1] == '"') {
                        *w++ = '"';
                        q++;
                        continue;
                    }
                    q++;
                    break;
                }
                *w++ = *q;
            }
            if (q < e && *q != ',') {
                *bad_col = ncol;
                return -1; /* text after the closing quote */
            }
        } else {
            char *x = memchr(q, ',', (size_t)(e - q));
            q = x ? x : e;
            w = q;
        }
        if (ncol < 42) {
            col[ncol] = start;
            cend[ncol] = w;
        }
        ncol++;
        if (q == e)
            return ncol;
        q++; /* the comma */
    }
}

/* Whether columns c0+1..c0+13 (I1-I13) of a 40- or 41-column line are
 * integers or empty: a data line's are, a header's names are not. */
static int criteo_ints(const char *const *col, const char *const *cend, int ncol)
{
    if (ncol != 40 && ncol != 41)
        return 0;
    for (int f = 0; f < CRITEO_INT; f++) {
        int64_t v;
        const char *vb = col[ncol - 40 + 1 + f], *ve = cend[ncol - 40 + 1 + f];
        if (vb != ve && parse_i64(vb, ve, &v) != 0)
            return 0;
    }
    return 1;
}

/* Criteo TSV/CSV.  Returns 1 sample, 0 blank or header line, or -errno.
 * The first non-blank line is a header when it does not start with a
 * number and its I1-I13 columns are not all integers or empty (so a data
 * line with a bad label is refused, not dropped as a header); the first
 * data line fixes the separator (a header's, when it has 40 or 41 columns)
 * and the column count (40, or 41 with an Id first) for the file. */
static int parse_criteo(reader_t *r, char *p, char *e, reader_sample_t *s)
{
    char b[48], cn[16];
    if (p == e)
        return 0;
    if (!r->sep)
        r->sep = criteo_sep(p, e);
    const char *col[42];
    const char *cend[42];
    int ncol = 0;
    if (r->sep == ',' && memchr(p, '"', (size_t)(e - p))) {
        int bad_col = 0;
        if ((ncol = split_csv_quoted(p, e, col, cend, &bad_col)) < 0) {
            set_err(r, "column %d: a quoted field %s", bad_col + 1,
                    "without its closing quote, or with text after it");
            return -EINVAL;
        }
    } else {
        const char *q = p;
        for (;;) {
            const char *x = memchr(q, r->sep, (size_t)(e - q));
            if (ncol < 42) {
                col[ncol] = q;
                cend[ncol] = x ? x : e;
            }
            ncol++;
            if (!x)
                break;
            q = x + 1;
        }
    }
    if (!r->criteo_started) {
        r->criteo_started = 1;
        const char *h = *p == '"' ? p + 1 : p; /* a quoted CSV's first field */
        bool numeric = h < e && ((unsigned)(*h - '0') <= 9 || *h == '-' || *h == '+');
        if (!numeric && !criteo_ints(col, cend, ncol)) {
            r->header_line = r->line;
            if (ncol != 40 && ncol != 41)
                r->sep = 0; /* its separator says nothing: the next line's decides */
            return 0;
        }
    }
    if (ncol != 40 && ncol != 41) {
        set_err(r, "expected 40 columns (label, I1-I13, C1-C26) or 41 (Id first), got %d", ncol);
        return -EINVAL;
    }
    if (!r->criteo_cols) {
        r->criteo_cols = ncol;
    } else if (ncol != r->criteo_cols) {
        set_err(r, "%d columns, where the file's first data line has %d (%s): a stray or "
                "missing separator", ncol, r->criteo_cols,
                r->criteo_cols == 41 ? "Id, label, I1-I13, C1-C26" : "label, I1-I13, C1-C26");
        return -EINVAL;
    }
    int c0 = ncol - 40; /* label column */
    if (parse_label(col[c0], cend[c0], &s->label) != 0) {
        set_err(r, "bad label '%s' (want 1 for a click, 0 or -1 for none)",
                show(col[c0], cend[c0], b));
        return -EINVAL;
    }
    uint32_t n = 0;
    for (int f = 0; f < CRITEO_INT + CRITEO_CAT; f++) {
        const char *vb = col[c0 + 1 + f], *ve = cend[c0 + 1 + f];
        if (vb == ve)
            continue; /* missing */
        uint64_t id;
        if (f < CRITEO_INT) {
            int64_t v;
            if (parse_i64(vb, ve, &v) != 0) {
                set_err(r, "column %s: '%s' is not an integer", criteo_col_name(f, cn),
                        show(vb, ve, b));
                return -EINVAL;
            }
            char txt[24];
            int len = snprintf(txt, sizeof txt, "%lld", (long long)reader_criteo_transform(v));
            id = hash_id((uint64_t)f, txt, (size_t)len);
        } else {
            id = hash_id((uint64_t)f, vb, (size_t)(ve - vb));
        }
        if (push_feature(r, n, id, 1.0f) != 0)
            return -ENOMEM;
        n++;
    }
    s->n = n;
    return 1;
}

int reader_next(reader_t *r, reader_sample_t *s)
{
    if (r->failed)
        return r->failed;
    for (;;) {
        char *lp = NULL;
        size_t ll = 0;
        int rc = next_line(r, &lp, &ll);
        if (rc == 0)
            return 0;
        if (rc == -E2BIG) {
            if (r->opt.skip_bad) {
                r->skipped++;
                continue;
            }
            set_err(r, "line longer than %zu bytes", r->opt.max_line);
            return r->failed = rc;
        }
        if (rc < 0) {
            if (rc == -ENOMEM)
                set_err(r, "out of memory");
            else
                set_err(r, "read failed: %s", strerror(-rc));
            return r->failed = rc;
        }
        rc = r->opt.format == READER_CRITEO ? parse_criteo(r, lp, lp + ll, s)
                                            : parse_sparse(r, lp, lp + ll, s);
        if (rc == 1) {
            s->ids = r->ids;
            s->values = r->values;
            return 1;
        }
        if (rc == 0)
            continue;
        if (rc == -EINVAL && r->opt.skip_bad) {
            r->skipped++;
            r->err[0] = '\0';
            continue;
        }
        if (rc == -ENOMEM)
            set_err(r, "out of memory");
        else if (rc == -E2BIG)
            set_err(r, "too many features");
        return r->failed = rc;
    }
}
