/*
 * repo_marks.c — formatting and parsing of a model's marks file
 * (repo_marks.h has the format).  The parser trusts nothing: every line is
 * bounded, every number range-checked, every list checked ascending and
 * within its cap, and the file must end with an "end" line counting the
 * marks, so a file cut short or edited by hand is refused with the line
 * that is wrong rather than half read.
 */
#include "repo_marks.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define VERSION_MAX ((uint64_t)INT64_MAX) /* a manifest's version: 1 .. 2^63-1 */

size_t repo_marks_format(const repo_marks_t *m, const char *model, char *buf, size_t cap)
{
    size_t off = 0;
    unsigned lines = 0;
#define PUT(...)                                                         \
    do {                                                                 \
        int n_ = snprintf(buf + off, cap - off, __VA_ARGS__);            \
        if (n_ < 0 || (size_t)n_ >= cap - off)                           \
            return 0;                                                    \
        off += (size_t)n_;                                               \
    } while (0)
    if (cap == 0)
        return 0;
    PUT("tlserve-marks 1 %s\n", model);
    if (m->pinned) {
        PUT("pinned %" PRIu64 "\n", m->pinned);
        lines++;
    }
    for (unsigned i = 0; i < m->n_rolled_back && i < REPO_ROLLED_BACK_MAX; i++) {
        PUT("rolled_back %" PRIu64 "\n", m->rolled_back[i]);
        lines++;
    }
    for (unsigned i = 0; i < m->n_refused && i < REPO_REFUSED_MAX; i++) {
        const struct repo_marked_refusal *f = &m->refused[i];
        char reason[REPO_MARKS_REASON_MAX + 1];
        size_t n = strnlen(f->reason, REPO_MARKS_REASON_MAX);
        for (size_t k = 0; k < n; k++) {
            unsigned char c = (unsigned char)f->reason[k];
            reason[k] = c < 0x20 || c == 0x7f ? ' ' : (char)c;
        }
        reason[n] = '\0';
        const char *sep = n ? " " : ""; /* no trailing space after an empty reason */
        if (f->by_admin)
            PUT("refused %" PRIu64 " admin%s%s\n", f->version, sep, reason);
        else
            PUT("refused %" PRIu64 " %s %016" PRIx64 "%s%s\n", f->version,
                f->by_lineage ? "lineage" : "gate", f->sig, sep, reason);
        lines++;
    }
    PUT("end %u\n", lines);
#undef PUT
    return off;
}

static int fail(char *why, size_t why_len, unsigned line, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(why, why_len, "line %u: %s", line, what);
    return -EINVAL;
}

/* Parses a decimal version at *p (1 .. 2^63-1, no sign, no leading zero)
 * followed by a space or the end of the line: 0 with *v, *p past it. */
static int parse_version(const char **p, const char *end, uint64_t *v)
{
    const char *s = *p;
    if (s == end || *s < '1' || *s > '9')
        return -1;
    uint64_t x = 0;
    while (s < end && *s >= '0' && *s <= '9') {
        unsigned d = (unsigned)(*s - '0');
        if (x > (VERSION_MAX - d) / 10)
            return -1;
        x = x * 10 + d;
        s++;
    }
    if (s < end && *s != ' ')
        return -1;
    *v = x;
    *p = s;
    return 0;
}

/* The word at *p up to a space or the line's end is w: 1 and *p past it
 * (and past one space), else 0. */
static int take_word(const char **p, const char *end, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(end - *p) < n || memcmp(*p, w, n) != 0 || (*p + n < end && (*p)[n] != ' '))
        return 0;
    *p += n;
    if (*p < end)
        (*p)++;
    return 1;
}

static int parse_refusal(const char *s, const char *end, struct repo_marked_refusal *f,
                         char *why, size_t why_len, unsigned line)
{
    if (parse_version(&s, end, &f->version) != 0 || s == end)
        return fail(why, why_len, line, "refused: a version (1 .. 2^63-1) and a kind expected");
    s++;
    bool lineage = false;
    if (take_word(&s, end, "admin")) {
        f->by_admin = true;
        f->by_lineage = false;
        f->sig = 0;
    } else if (take_word(&s, end, "gate") || (lineage = take_word(&s, end, "lineage"))) {
        f->by_admin = false;
        f->by_lineage = lineage;
        if (end - s < 16)
            return fail(why, why_len, line, "refused by the %s: 16 hex digits expected",
                        lineage ? "lineage" : "gate");
        uint64_t sig = 0;
        for (int k = 0; k < 16; k++, s++) {
            char c = *s;
            unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0')
                         : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                                                : 16;
            if (d == 16)
                return fail(why, why_len, line, "refused by the %s: 16 hex digits expected",
                            lineage ? "lineage" : "gate");
            sig = sig << 4 | d;
        }
        if (s < end && *s++ != ' ')
            return fail(why, why_len, line, "refused by the %s: a space after the signature "
                        "expected", lineage ? "lineage" : "gate");
        f->sig = sig;
    } else {
        return fail(why, why_len, line, "refused: the kind must be admin, gate or lineage");
    }
    size_t n = (size_t)(end - s);
    if (n == 0 && s[-1] == ' ')
        return fail(why, why_len, line, "a space at the end of the line (a reason follows one)");
    if (n > REPO_MARKS_REASON_MAX)
        return fail(why, why_len, line, "the reason is longer than %d bytes", REPO_MARKS_REASON_MAX);
    for (size_t k = 0; k < n; k++)
        if ((unsigned char)s[k] < 0x20 || s[k] == 0x7f)
            return fail(why, why_len, line, "the reason holds a control byte (0x%02x)",
                        (unsigned char)s[k]);
    memcpy(f->reason, s, n);
    f->reason[n] = '\0';
    return 0;
}

int repo_marks_parse(const char *buf, size_t len, const char *model, repo_marks_t *m, char *why,
                     size_t why_len)
{
    memset(m, 0, sizeof *m);
    const char *p = buf, *stop = buf + len;
    unsigned line = 0, marks = 0;
    int stage = 0; /* 1 pinned, 2 rolled_back, 3 refused: the marks come in this order */
    bool ended = false;
    while (p < stop) {
        const char *end = memchr(p, '\n', (size_t)(stop - p));
        line++;
        if (!end)
            return fail(why, why_len, line, "not ended by a newline (the file is cut short)");
        if (ended)
            return fail(why, why_len, line, "text after the end line");
        const char *s = p;
        p = end + 1;
        if (line == 1) {
            if (!take_word(&s, end, "tlserve-marks") || !take_word(&s, end, "1"))
                return fail(why, why_len, line, "not a marks file of this format "
                            "(\"tlserve-marks 1 <model>\" expected)");
            size_t n = strlen(model);
            if ((size_t)(end - s) != n || memcmp(s, model, n) != 0)
                return fail(why, why_len, line, "the marks of another model (%.*s), not of %s",
                            (int)(end - s > 64 ? 64 : end - s), s, model);
            continue;
        }
        uint64_t v;
        if (take_word(&s, end, "end")) {
            if (s + 1 == end && *s == '0') {
                v = 0;
                s = end;
            } else if (parse_version(&s, end, &v) != 0 || s != end) {
                return fail(why, why_len, line, "end: a count expected");
            }
            if (v != marks)
                return fail(why, why_len, line, "end: %u marks read, the line says otherwise "
                            "(the file is damaged)", marks);
            ended = true;
            continue;
        }
        int kind = take_word(&s, end, "pinned")        ? 1
                   : take_word(&s, end, "rolled_back") ? 2
                   : take_word(&s, end, "refused")     ? 3
                                                       : 0;
        if (kind && kind < stage)
            return fail(why, why_len, line, "marks out of order (pinned, rolled_back, refused, "
                        "end)");
        stage = kind;
        if (kind == 1) {
            if (m->pinned)
                return fail(why, why_len, line, "a second pinned version");
            if (parse_version(&s, end, &v) != 0 || s != end)
                return fail(why, why_len, line, "pinned: one version (1 .. 2^63-1) expected");
            m->pinned = v;
        } else if (kind == 2) {
            if (parse_version(&s, end, &v) != 0 || s != end)
                return fail(why, why_len, line, "rolled_back: one version (1 .. 2^63-1) expected");
            if (m->n_rolled_back == REPO_ROLLED_BACK_MAX)
                return fail(why, why_len, line, "more than %d rolled-back versions",
                            REPO_ROLLED_BACK_MAX);
            if (m->n_rolled_back && m->rolled_back[m->n_rolled_back - 1] >= v)
                return fail(why, why_len, line, "rolled-back versions not ascending");
            m->rolled_back[m->n_rolled_back++] = v;
        } else if (kind == 3) {
            if (m->n_refused == REPO_REFUSED_MAX)
                return fail(why, why_len, line, "more than %d refused versions", REPO_REFUSED_MAX);
            struct repo_marked_refusal *f = &m->refused[m->n_refused];
            int rc = parse_refusal(s, end, f, why, why_len, line);
            if (rc != 0)
                return rc;
            if (m->n_refused && m->refused[m->n_refused - 1].version >= f->version)
                return fail(why, why_len, line, "refused versions not ascending");
            m->n_refused++;
        } else {
            return fail(why, why_len, line, "unknown mark (pinned, rolled_back, refused or end "
                        "expected)");
        }
        marks++;
    }
    if (line == 0)
        return fail(why, why_len, 1, "the file is empty");
    if (!ended)
        return fail(why, why_len, line + 1, "no end line (the file is cut short)");
    return 0;
}
