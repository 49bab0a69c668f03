/*
 * reader.h — streaming readers for training data: libsvm, libffm and raw
 * Criteo (TSV as Criteo ships it, or the CSV-with-header variant of the
 * Kaggle samples).
 *
 * A reader walks a file (or a memory buffer) line by line through a fixed
 * read buffer; nothing loads the whole file, and a line may be as long as
 * opt->max_line bytes (the line buffer grows up to that).  Every sample comes
 * out as a label (0 or 1) and n features: 64-bit ids with the field in the
 * top 8 bits, and float values.
 *
 *   libsvm  "label idx:val ..."        id = (0 << 56)     | (idx + 1)
 *   libffm  "label field:idx:val ..."  id = (field << 56) | (idx + 1)
 *   criteo  label, I1..I13, C1..C26    id = (field << 56) |
 *                                           (XXH3_64bits_withSeed(text, field) & (2^56-1))
 *
 * Why idx + 1: the LR bias lives under MODEL_BIAS_ID (= 0), and both libsvm
 * and libffm files number their features from 0, so "0:1" (libsvm) or
 * "0:0:1" (libffm) would otherwise collide with the bias.  Indices must be
 * below 2^56 - 1.
 *
 * Criteo fields: I1..I13 are fields 0..12, C1..C26 fields 13..38.  An integer
 * v becomes floor(log(v)^2) when v > 2 (the Criteo competition winners'
 * transform), else stays v; its decimal text is what is hashed.  Categorical
 * values are hashed as spelled.  Empty (missing) columns give no feature;
 * every Criteo feature has value 1.  A line has 40 columns (label first) or
 * 41 (an Id column first, as in the Kaggle CSV), as many as the file's first
 * data line (a stray separator is an error, not an Id); the separator is a
 * tab when the first line holds one, else a comma; a first line that does
 * not start with a digit (after an opening quote) and whose I1..I13 are not
 * all integers or empty is a header and is skipped (reader_header_line; a
 * header of another column count leaves the separator to the next line).  A CSV
 * field may be in double quotes as RFC 4180 writes it (commas inside, "" for
 * a quote): the quotes are not part of the value, so a quoted file gives
 * the ids of the same file unquoted.
 *
 * Labels: 0, 1, -1 or +1 (also 0.0 / 1.0); -1 means 0.
 *
 * ERRORS
 *   A malformed line stops the reader with -EINVAL and a message naming the
 *   file, the line number and what was wrong (reader_error()); with
 *   opt->skip_bad it is skipped and counted (reader_skipped()) instead.  I/O
 *   errors are -errno, a line longer than max_line is -E2BIG (or skipped).
 *
 * THREAD SAFETY: a reader is used by one thread at a time; readers share
 * nothing.
 */
#ifndef TL_MODEL_READER_H
#define TL_MODEL_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum reader_format {
    READER_LIBSVM = 0,
    READER_LIBFFM = 1,
    READER_CRITEO = 2,
} reader_format_t;

typedef struct reader reader_t; /* opaque */

typedef struct reader_options {
    reader_format_t format;
    bool skip_bad;   /* skip and count malformed lines instead of failing */
    size_t max_line; /* longest accepted line in bytes; 0 = 16 MiB */
} reader_options_t;

/* One sample; the arrays belong to the reader and stay valid until the next
 * reader_next()/reader_rewind()/reader_close(). */
typedef struct reader_sample {
    float label;           /* 0 or 1 */
    uint32_t n;            /* features */
    const uint64_t *ids;
    const float *values;
} reader_sample_t;

/* Opens path for streaming.  Returns 0 and sets *out (caller frees with
 * reader_close), or -errno with a sentence in err (when err_len > 0). */
int reader_open(const char *path, const reader_options_t *opt, reader_t **out, char *err,
                size_t err_len);

/* Opens path for reading if it is a regular file, without blocking on a
 * FIFO (a server re-reading a path it checked at start must not hang when
 * the path was replaced): the descriptor, or -errno with a sentence in err
 * (-EINVAL: not a regular file). */
int reader_open_regular(const char *path, char *err, size_t err_len);

/* Same over an open descriptor, which the reader then owns (closed by
 * reader_close, or at once on failure); name is used in messages. */
int reader_open_fd(int fd, const char *name, const reader_options_t *opt, reader_t **out,
                   char *err, size_t err_len);

/* Same over a memory buffer the caller keeps alive while the reader lives;
 * name is used in messages. */
int reader_open_mem(const void *data, size_t len, const char *name, const reader_options_t *opt,
                    reader_t **out, char *err, size_t err_len);

/* Reads the next sample.  Returns 1 (sample in *s), 0 at end of input, or a
 * negative errno (-EINVAL malformed line, -E2BIG line too long, -ENOMEM,
 * I/O -errno) with reader_error() set.  After an error the reader stays at
 * the error; call reader_rewind() to start over.  May block (read(2)). */
int reader_next(reader_t *r, reader_sample_t *s);

/* Back to the first line (for another epoch); counters reset.  Returns 0 or
 * -errno. */
int reader_rewind(reader_t *r);

/* The source's bytes consumed by the lines read so far: the offset of the
 * next line's first byte (a last line without a newline counts whole). */
uint64_t reader_offset(const reader_t *r);

/* Resumes at byte offset of the source, a line's first byte the caller
 * knows (a reader_offset of an earlier read of the same bytes), numbering
 * the lines after it from line + 1; a criteo reader reads the source's
 * head again for the separator its first non-blank line set, so that the
 * lines after offset parse as they did in the whole read.  The sticky error
 * is cleared.  0, -EINVAL (offset past a memory source's end or beyond
 * off_t), or -errno of lseek or read. */
int reader_seek(reader_t *r, uint64_t offset, uint64_t line);

const char *reader_error(const reader_t *r); /* "" when none */
const char *reader_name(const reader_t *r);  /* the path (or name) it was opened with */
uint64_t reader_line(const reader_t *r);     /* 1-based number of the last line read */
/* The last line read (or refused) ended at the end of the source without a
 * newline: a writer may still be writing it. */
bool reader_line_unterminated(const reader_t *r);
uint64_t reader_skipped(const reader_t *r);  /* malformed lines skipped (skip_bad) */
uint64_t reader_header_line(const reader_t *r); /* criteo: the line read as a header, 0 if none */
void reader_close(reader_t *r);

/* "libsvm" / "libffm" / "criteo" -> format; returns 0 or -EINVAL. */
int reader_format_parse(const char *name, reader_format_t *out);

/* The format of the text buf[0..len) (a file's head; complete: the whole
 * file is in it, else a last line cut short is looked at only up to its
 * first feature, when that ends inside the head), told from
 * the first line with more than a label: with criteo allowed, a line of 40
 * or more columns (39 tabs, or with no tab 39 commas) is criteo; else its
 * first feature with one colon is libsvm, with two libffm (a line with a
 * stray tab or a decimal comma is not taken for criteo's).  Only labels,
 * or nothing: libsvm (reads them alike).  Returns
 * 0, or -EINVAL when that first feature tells nothing: *bad_line (1-based)
 * and the feature's bytes in *bad, *bad_len (at most 40). */
int reader_sniff_format(const char *buf, size_t len, bool complete, bool criteo,
                        reader_format_t *out, uint64_t *bad_line, const char **bad,
                        int *bad_len);

/* The Criteo integer transform: v > 2 ? floor(log(v)^2) : v. */
int64_t reader_criteo_transform(int64_t v);

#ifdef __cplusplus
}
#endif
#endif /* TL_MODEL_READER_H */
