/*
 * test_reader.c — the libsvm / libffm / Criteo readers: ids and values of
 * good lines, the exact message (file:line: what) of each kind of malformed
 * line, skip-and-count, blank lines, CRLF, no final newline, lines longer
 * than the read buffer, over-long lines, and a file streamed across many
 * buffer refills.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "model/reader.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

static reader_t *open_mem(const char *text, const char *name, reader_format_t f, int skip,
                          size_t max_line)
{
    reader_options_t o = {.format = f, .skip_bad = skip, .max_line = max_line};
    reader_t *r;
    char err[256];
    assert_int_equal(reader_open_mem(text, strlen(text), name, &o, &r, err, sizeof err), 0);
    return r;
}

/* Reads until the first error and checks its code and exact message. */
static void expect_error(const char *text, reader_format_t f, int code, const char *msg)
{
    const char *name = f == READER_LIBSVM ? "t.svm" : f == READER_LIBFFM ? "t.ffm" : "t.tsv";
    reader_t *r = open_mem(text, name, f, 0, 0);
    reader_sample_t s;
    int rc;
    while ((rc = reader_next(r, &s)) == 1)
        ;
    if (rc != code || strcmp(reader_error(r), msg) != 0)
        fail_msg("input %s: got %d '%s', want %d '%s'", text, rc, reader_error(r), code, msg);
    assert_int_equal(reader_next(r, &s), code); /* sticky */
    reader_close(r);
}

static void test_libsvm_good(void **state)
{
    (void)state;
    reader_t *r = open_mem("1 3:0.5 7:1\n\n-1 0:2e-1\t12:-3\r\n  \n+1\n0 5:1", "t.svm",
                           READER_LIBSVM, 0, 0);
    reader_sample_t s;
    assert_int_equal(reader_next(r, &s), 1);
    assert_true(s.label == 1.0f && s.n == 2);
    assert_true(s.ids[0] == 4 && s.ids[1] == 8); /* index + 1 */
    assert_true(s.values[0] == 0.5f && s.values[1] == 1.0f);
    assert_int_equal(reader_next(r, &s), 1);
    assert_true(s.label == 0.0f && s.n == 2 && s.ids[0] == 1 && s.ids[1] == 13);
    assert_true(s.values[0] == 0.2f && s.values[1] == -3.0f);
    assert_int_equal(reader_line(r), 3);
    assert_int_equal(reader_next(r, &s), 1); /* label only: bias */
    assert_true(s.label == 1.0f && s.n == 0);
    assert_int_equal(reader_next(r, &s), 1); /* no final newline */
    assert_true(s.label == 0.0f && s.n == 1 && s.ids[0] == 6);
    assert_int_equal(reader_line(r), 6);
    assert_int_equal(reader_next(r, &s), 0);
    assert_int_equal(reader_rewind(r), 0);
    assert_int_equal(reader_next(r, &s), 1);
    assert_true(s.ids[0] == 4);
    reader_close(r);
}

static void test_libffm_good(void **state)
{
    (void)state;
    reader_t *r = open_mem("0 0:0:1 17:8323:0.22361 255:72057594037927934:1\n", "t.ffm",
                           READER_LIBFFM, 0, 0);
    reader_sample_t s;
    assert_int_equal(reader_next(r, &s), 1);
    assert_true(s.n == 3 && s.label == 0.0f);
    assert_true(s.ids[0] == 1); /* field 0, index 0 is NOT the bias id */
    assert_true(s.ids[1] == ((UINT64_C(17) << 56) | 8324));
    assert_true(s.values[1] == 0.22361f);
    assert_true(s.ids[2] == ((UINT64_C(255) << 56) | ((UINT64_C(1) << 56) - 1)));
    assert_int_equal(reader_next(r, &s), 0);
    reader_close(r);
}

static void test_sparse_errors(void **state)
{
    (void)state;
    expect_error("1 3:0.5\n0 abc:1\n", READER_LIBSVM, -EINVAL,
                 "t.svm:2: feature 1: index 'abc' is not a number below 2^56-1");
    expect_error("2 1:1\n", READER_LIBSVM, -EINVAL, "t.svm:1: bad label '2' (want 0, 1, -1 or +1)");
    expect_error("\n\nyes 1:1\n", READER_LIBSVM, -EINVAL,
                 "t.svm:3: bad label 'yes' (want 0, 1, -1 or +1)");
    expect_error("1 1:x\n", READER_LIBSVM, -EINVAL, "t.svm:1: feature 1: value 'x' is not a finite number");
    expect_error("1 1:inf\n", READER_LIBSVM, -EINVAL,
                 "t.svm:1: feature 1: value 'inf' is not a finite number");
    expect_error("1 1:0x10\n", READER_LIBSVM, -EINVAL,
                 "t.svm:1: feature 1: value '0x10' is not a finite number");
    expect_error("0x1 1:1\n", READER_LIBSVM, -EINVAL,
                 "t.svm:1: bad label '0x1' (want 0, 1, -1 or +1)");
    expect_error("1 1:1e39\n", READER_LIBSVM, -EINVAL,
                 "t.svm:1: feature 1: value '1e39' is not a finite number");
    expect_error("1 1:\n", READER_LIBSVM, -EINVAL, "t.svm:1: feature 1: value '' is not a finite number");
    expect_error("1 1:1 5\n", READER_LIBSVM, -EINVAL, "t.svm:1: feature 2: expected index:value, got '5'");
    expect_error("1 1:1 2:3:4\n", READER_LIBSVM, -EINVAL,
                 "t.svm:1: feature 2: expected index:value, got '2:3:4'");
    expect_error("1 72057594037927935:1\n", READER_LIBSVM, -EINVAL,
                 "t.svm:1: feature 1: index '72057594037927935' is not a number below 2^56-1");
    expect_error("1 -1:1\n", READER_LIBSVM, -EINVAL,
                 "t.svm:1: feature 1: index '-1' is not a number below 2^56-1");
    expect_error("1 1:1\x01\n", READER_LIBSVM, -EINVAL,
                 "t.svm:1: feature 1: value '1?' is not a finite number");
    expect_error("1 0:1:1 300:2:1\n", READER_LIBFFM, -EINVAL,
                 "t.ffm:1: feature 2: field '300' is not a number in 0..255");
    expect_error("0 0:1:1\n1 1:2\n", READER_LIBFFM, -EINVAL,
                 "t.ffm:2: feature 1: expected field:index:value, got '1:2'");
    expect_error("0 1:2:3:4\n", READER_LIBFFM, -EINVAL,
                 "t.ffm:1: feature 1: expected field:index:value, got '1:2:3:4'");
    expect_error("0 1:x:3\n", READER_LIBFFM, -EINVAL,
                 "t.ffm:1: feature 1: index 'x' is not a number below 2^56-1");
}

static void test_skip_bad(void **state)
{
    (void)state;
    reader_t *r = open_mem("1 1:1\nbad\n0 2:1\n1 3:nan\n1 4:1\n", "t.svm", READER_LIBSVM, 1, 0);
    reader_sample_t s;
    int n = 0;
    while (reader_next(r, &s) == 1)
        n++;
    assert_int_equal(n, 3);
    assert_int_equal(reader_skipped(r), 2);
    assert_string_equal(reader_error(r), "");
    reader_close(r);
}

static void test_long_lines(void **state)
{
    (void)state;
    /* One 2 MB line (far beyond the 64 KiB read buffer), then a short one. */
    size_t nf = 200000, cap = nf * 12 + 64, len = 0;
    char *text = malloc(cap);
    len += (size_t)sprintf(text + len, "1");
    for (size_t i = 0; i < nf; i++)
        len += (size_t)sprintf(text + len, " %zu:1", i);
    len += (size_t)sprintf(text + len, "\n0 9:1\n");
    reader_t *r = open_mem(text, "long.svm", READER_LIBSVM, 0, 0);
    reader_sample_t s;
    assert_int_equal(reader_next(r, &s), 1);
    assert_int_equal(s.n, nf);
    assert_true(s.ids[nf - 1] == nf);
    assert_int_equal(reader_next(r, &s), 1);
    assert_true(s.n == 1 && s.ids[0] == 10);
    reader_close(r);

    /* The same line over a 100-byte limit: an error naming the line ... */
    r = open_mem(text, "long.svm", READER_LIBSVM, 0, 100);
    assert_int_equal(reader_next(r, &s), -E2BIG);
    assert_string_equal(reader_error(r), "long.svm:1: line longer than 100 bytes");
    reader_close(r);
    /* ... or, with skip_bad, skipped without being held whole. */
    r = open_mem(text, "long.svm", READER_LIBSVM, 1, 100);
    assert_int_equal(reader_next(r, &s), 1);
    assert_true(s.n == 1 && s.ids[0] == 10 && reader_line(r) == 2);
    assert_int_equal(reader_skipped(r), 1);
    assert_int_equal(reader_next(r, &s), 0);
    reader_close(r);
    /* A line of exactly max_line bytes is fine; one more byte is not. */
    r = open_mem("1 1:1\n0 2:10\n", "edge.svm", READER_LIBSVM, 0, 5);
    assert_int_equal(reader_next(r, &s), 1);
    assert_int_equal(reader_next(r, &s), -E2BIG);
    assert_string_equal(reader_error(r), "edge.svm:2: line longer than 5 bytes");
    reader_close(r);
    free(text);
}

static void test_file_stream(void **state)
{
    (void)state;
    const char *dir = getenv("TL_TEST_TMP");
    char path[512];
    snprintf(path, sizeof path, "%s/reader_stream_%d.ffm", dir ? dir : "/tmp", (int)getpid());
    FILE *f = fopen(path, "w");
    if (!f && dir) { /* the tmp dir may not exist yet */
        snprintf(path, sizeof path, "/tmp/reader_stream_%d.ffm", (int)getpid());
        f = fopen(path, "w");
    }
    assert_non_null(f);
    enum { ROWS = 100000 };
    for (int i = 0; i < ROWS; i++)
        fprintf(f, "%d 1:%d:1 2:%d:0.5\n", i % 3 == 0, i, i * 7);
    fclose(f);
    reader_options_t o = {.format = READER_LIBFFM};
    reader_t *r;
    char err[256];
    assert_int_equal(reader_open(path, &o, &r, err, sizeof err), 0);
    reader_sample_t s;
    for (int pass = 0; pass < 2; pass++) {
        int n = 0, rc;
        while ((rc = reader_next(r, &s)) == 1) {
            if (s.n != 2 || s.ids[0] != ((UINT64_C(1) << 56) | (uint64_t)(n + 1)) ||
                s.ids[1] != ((UINT64_C(2) << 56) | (uint64_t)(n * 7 + 1)) ||
                s.label != (n % 3 == 0))
                fail_msg("row %d wrong", n);
            n++;
        }
        assert_int_equal(rc, 0);
        assert_int_equal(n, ROWS);
        assert_int_equal(reader_rewind(r), 0);
    }
    reader_close(r);
    unlink(path);
    assert_int_equal(reader_open(path, &o, &r, err, sizeof err), -ENOENT);
    assert_non_null(strstr(err, path));
}

static void test_criteo_transform(void **state)
{
    (void)state;
    assert_int_equal(reader_criteo_transform(-2), -2);
    assert_int_equal(reader_criteo_transform(0), 0);
    assert_int_equal(reader_criteo_transform(2), 2);
    assert_int_equal(reader_criteo_transform(3), 1);    /* log(3)^2 = 1.207 */
    assert_int_equal(reader_criteo_transform(1382), 52); /* log(1382)^2 = 52.29 */
}

static uint64_t hid(uint64_t field, const char *text)
{
    return field << 56 | (XXH3_64bits_withSeed(text, strlen(text), field) & ((UINT64_C(1) << 56) - 1));
}

static void test_criteo_good(void **state)
{
    (void)state;
    /* The Kaggle CSV: header, Id column, a missing I12 and C22. */
    const char *csv =
        "Id,Label,I1,I2,I3,I4,I5,I6,I7,I8,I9,I10,I11,I12,I13,C1,C2,C3,C4,C5,C6,C7,C8,C9,C10,"
        "C11,C12,C13,C14,C15,C16,C17,C18,C19,C20,C21,C22,C23,C24,C25,C26\n"
        "10000000,0,1,1,5,0,1382,4,15,2,181,1,2,,2,68fd1e64,80e26c9b,fb936136,7b4723c4,"
        "25c83c98,7e0ccccf,de7995b8,1f89b562,a73ee510,a8cd5504,b2cb9c98,37c9c164,2824a5f6,"
        "1adce6ef,8ba8b39a,891b62e7,e5ba7672,f54016b9,21ddcdc9,b1252a9d,07b5194c,,3a171ecb,"
        "c5c50484,e8b83407,9727dd16\n";
    reader_t *r = open_mem(csv, "train.tiny.csv", READER_CRITEO, 0, 0);
    reader_sample_t s;
    assert_int_equal(reader_next(r, &s), 1);
    assert_true(s.label == 0.0f);
    assert_int_equal(s.n, 37);
    assert_true(s.ids[0] == hid(0, "1"));
    assert_true(s.ids[2] == hid(2, "2"));   /* I3 = 5 -> floor(log(5)^2) = 2 */
    assert_true(s.ids[4] == hid(4, "52"));  /* I5 = 1382 -> 52 */
    assert_true(s.ids[11] == hid(12, "2")); /* I12 missing: I13 is next */
    assert_true(s.ids[12] == hid(13, "68fd1e64"));
    assert_true(s.ids[36] == hid(38, "9727dd16"));
    assert_true(s.values[0] == 1.0f && s.values[36] == 1.0f);
    assert_int_equal(reader_line(r), 2);
    assert_int_equal(reader_next(r, &s), 0);
    reader_close(r);

    /* Criteo's own TSV: label first, no header, every column empty but one. */
    char tsv[256] = "1\t-1";
    for (int i = 0; i < 38; i++)
        strcat(tsv, "\t");
    strcat(tsv, "\n");
    r = open_mem(tsv, "day_0", READER_CRITEO, 0, 0);
    assert_int_equal(reader_next(r, &s), 1);
    assert_true(s.label == 1.0f && s.n == 1 && s.ids[0] == hid(0, "-1"));
    reader_close(r);
}

static void test_criteo_errors(void **state)
{
    (void)state;
    char line[512] = "0";
    for (int i = 0; i < 39; i++)
        strcat(line, "\t7");
    char text[1200];
    snprintf(text, sizeof text, "%s\n0\t1\t2\n", line);
    expect_error(text, READER_CRITEO, -EINVAL,
                 "t.tsv:2: expected 40 columns (label, I1-I13, C1-C26) or 41 (Id first), got 3");
    char bad[512] = "0\t1\t2\tx3";
    for (int i = 0; i < 36; i++)
        strcat(bad, "\tab");
    strcat(bad, "\n");
    snprintf(text, sizeof text, "%s\n%s", line, bad);
    expect_error(text, READER_CRITEO, -EINVAL, "t.tsv:2: column I3: 'x3' is not an integer");
    snprintf(text, sizeof text, "%s\n2%s", line, line + 1);
    expect_error(text, READER_CRITEO, -EINVAL, "t.tsv:2: bad label '2' (want 1 for a click, 0 or -1 for none)");
}

/* A UTF-8 byte-order mark opening the source is dropped (Windows editors and
 * spreadsheet exports write one); elsewhere it is still a bad label. */
static void test_utf8_bom(void **state)
{
    (void)state;
    reader_t *r = open_mem("\xEF\xBB\xBF" "1 3:0.5\r\n0 2:1\n", "t.svm", READER_LIBSVM, 0, 0);
    reader_sample_t s;
    assert_int_equal(reader_next(r, &s), 1);
    assert_true(s.label == 1.0f && s.n == 1 && s.ids[0] == 4 && s.values[0] == 0.5f);
    assert_int_equal(reader_next(r, &s), 1);
    assert_true(s.label == 0.0f && s.n == 1 && s.ids[0] == 3);
    assert_int_equal(reader_next(r, &s), 0);
    assert_int_equal(reader_rewind(r), 0); /* again from the start: dropped again */
    assert_int_equal(reader_next(r, &s), 1);
    assert_true(s.label == 1.0f && s.ids[0] == 4);
    reader_close(r);
    r = open_mem("\xEF\xBB\xBF" "0 1:2:1", "t.ffm", READER_LIBFFM, 0, 0); /* no newline */
    assert_int_equal(reader_next(r, &s), 1);
    assert_true(s.label == 0.0f && s.n == 1 && s.ids[0] == ((UINT64_C(1) << 56) | 3));
    reader_close(r);
    expect_error("1 3:1\n\xEF\xBB\xBF" "0 2:1\n", READER_LIBSVM, -EINVAL,
                 "t.svm:2: bad label '???0' (want 0, 1, -1 or +1)");
}

/* A seek resumes with the separator the whole read held there: the file's
 * first non-blank line's, not the next line's.  A CSV whose third line is
 * tab-separated fails there read whole, and must fail there resumed. */
static void test_criteo_seek_keeps_separator(void **state)
{
    (void)state;
    char csv[512] = "0", tsv[512] = "1";
    for (int i = 0; i < 39; i++) {
        strcat(csv, ",7");
        strcat(tsv, "\t7");
    }
    char text[1400];
    snprintf(text, sizeof text, "\n%s\n%s\n%s\n", csv, csv, tsv);
    reader_t *r = open_mem(text, "t.csv", READER_CRITEO, 0, 0);
    reader_sample_t s;
    assert_int_equal(reader_next(r, &s), 1);
    assert_int_equal(reader_next(r, &s), 1);
    uint64_t off = reader_offset(r), line = reader_line(r);
    assert_int_equal(reader_next(r, &s), -EINVAL); /* read whole: the TSV line is refused */
    reader_close(r);
    r = open_mem(text, "t.csv", READER_CRITEO, 0, 0);
    assert_int_equal(reader_seek(r, off, line), 0);
    assert_int_equal(reader_next(r, &s), -EINVAL);
    assert_string_equal(reader_error(r),
                        "t.csv:4: expected 40 columns (label, I1-I13, C1-C26) or 41 (Id first), got 1");
    reader_close(r);
    /* A seek to the first non-blank line itself still takes the separator,
     * and a header, from it. */
    snprintf(text, sizeof text, "\nLabel\tI1\n%s\n", tsv);
    r = open_mem(text, "t.tsv", READER_CRITEO, 0, 0);
    assert_int_equal(reader_seek(r, 1, 1), 0);
    assert_int_equal(reader_next(r, &s), 1);
    assert_true(s.label == 1.0f && s.n == 39);
    assert_int_equal(reader_line(r), 3);
    reader_close(r);
}

/* RFC 4180 quoting in a criteo CSV: every field quoted (a spreadsheet's or
 * pandas' QUOTE_ALL export) reads as the same file unquoted; a quoted
 * field may hold the separator and "" for a quote; a field left open is an
 * error naming its column. */
static void test_criteo_csv_quoted(void **state)
{
    (void)state;
    char plain[1024] = "Label", quoted[1024] = "\"Label\"";
    for (int i = 0; i < 39; i++) {
        char h[16];
        snprintf(h, sizeof h, i < 13 ? ",I%d" : ",C%d", i < 13 ? i + 1 : i - 12);
        strcat(plain, h);
        snprintf(h, sizeof h, i < 13 ? ",\"I%d\"" : ",\"C%d\"", i < 13 ? i + 1 : i - 12);
        strcat(quoted, h);
    }
    strcat(plain, "\n1");
    strcat(quoted, "\n\"1\"");
    for (int i = 0; i < 39; i++) {
        char v[32];
        snprintf(v, sizeof v, ",%d", 7 * i);
        strcat(plain, i == 20 ? "," : v); /* C8 missing */
        snprintf(v, sizeof v, ",\"%d\"", 7 * i);
        strcat(quoted, i == 20 ? ",\"\"" : v);
    }
    strcat(plain, "\n");
    strcat(quoted, "\n");
    reader_t *a = open_mem(plain, "p.csv", READER_CRITEO, 0, 0);
    reader_t *b = open_mem(quoted, "q.csv", READER_CRITEO, 0, 0);
    reader_sample_t sa, sb;
    assert_int_equal(reader_next(a, &sa), 1);
    uint64_t ids[64];
    uint32_t n = sa.n;
    memcpy(ids, sa.ids, n * sizeof *ids);
    assert_int_equal(reader_next(b, &sb), 1);
    assert_true(sb.label == 1.0f && sa.label == 1.0f);
    assert_int_equal(sb.n, n);
    assert_int_equal(n, 38);
    assert_memory_equal(sb.ids, ids, n * sizeof *ids);
    assert_int_equal(reader_next(b, &sb), 0);
    reader_close(a);
    reader_close(b);

    /* A comma and an escaped quote inside a quoted value: one column, hashed as read. */
    char line[1024] = "0";
    for (int i = 0; i < 38; i++)
        strcat(line, ",1");
    strcat(line, ",\"a,\"\"b\"\"\"\n");
    reader_t *r = open_mem(line, "t.csv", READER_CRITEO, 0, 0);
    reader_sample_t s;
    assert_int_equal(reader_next(r, &s), 1);
    assert_int_equal(s.n, 39);
    assert_true(s.ids[38] == hid(38, "a,\"b\""));
    reader_close(r);

    line[strlen(line) - 2] = '\0'; /* drop the closing quote */
    strcat(line, "\n");
    expect_error(line, READER_CRITEO, -EINVAL,
                 "t.tsv:1: column 40: a quoted field without its closing quote, or with text "
                 "after it");
}

/* A criteo file's column count is its first data line's: a later line with
 * a stray separator (41 columns in a 40-column file) is refused, not read
 * with an Id column; a first line that splits as data (integer I1-I13) with
 * a bad label is refused, not dropped as a header; a header whose separator
 * is not the data's leaves the data's to its next line; an unterminated
 * last line is flagged. */
static void test_criteo_columns_and_header(void **state)
{
    (void)state;
    char row[512] = "1", row41[600];
    for (int i = 0; i < 39; i++)
        strcat(row, "\t7");
    snprintf(row41, sizeof row41, "%s\t", row); /* a trailing tab: 41 columns */
    char text[2048];
    snprintf(text, sizeof text, "%s\n%s\n", row, row41);
    expect_error(text, READER_CRITEO, -EINVAL,
                 "t.tsv:2: 41 columns, where the file's first data line has 40 (label, I1-I13, "
                 "C1-C26): a stray or missing separator");
    snprintf(text, sizeof text, "%s\n%s\n", row + 1, row); /* "\t7\t7...": an empty label */
    expect_error(text, READER_CRITEO, -EINVAL, "t.tsv:1: bad label '' (want 1 for a click, 0 or -1 for none)");
    snprintf(text, sizeof text, "abc\n%s\n%s", row, row);
    reader_t *r = open_mem(text, "t", READER_CRITEO, 0, 0);
    reader_sample_t s;
    assert_int_equal(reader_next(r, &s), 1);
    assert_true(s.label == 1.0f && s.n == 39);
    assert_int_equal(reader_header_line(r), 1);
    assert_false(reader_line_unterminated(r));
    assert_int_equal(reader_next(r, &s), 1);
    assert_true(reader_line_unterminated(r)); /* the last line has no newline */
    assert_int_equal(reader_next(r, &s), 0);
    reader_close(r);
}

/* Telling a head's format: criteo only for a line of 40+ columns, so a
 * libsvm file whose first line is a label and a stray tab, or whose value
 * has a decimal comma, is not taken for criteo. */
static reader_format_t sniffed(const char *text, int want_rc)
{
    reader_format_t f = READER_LIBFFM;
    uint64_t line = 0;
    const char *bad = NULL;
    int shown = 0;
    assert_int_equal(reader_sniff_format(text, strlen(text), true, true, &f, &line, &bad, &shown),
                     want_rc);
    return f;
}

static void test_sniff_format(void **state)
{
    (void)state;
    char row[512] = "1", csv[512] = "0";
    for (int i = 0; i < 39; i++) {
        strcat(row, "\t7");
        strcat(csv, ",a");
    }
    assert_int_equal(sniffed(row, 0), READER_CRITEO);
    assert_int_equal(sniffed(csv, 0), READER_CRITEO);
    assert_int_equal(sniffed("1\t\n1 3:1 5:2\n", 0), READER_LIBSVM);
    assert_int_equal(sniffed("1 5:0,5 7:1\n", 0), READER_LIBSVM); /* the reader names the value */
    assert_int_equal(sniffed("0 1:2:1\n", 0), READER_LIBFFM);
    sniffed("1 a,b,c\n", -EINVAL); /* three columns: neither criteo's nor a feature */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_libsvm_good),     cmocka_unit_test(test_libffm_good),
        cmocka_unit_test(test_sparse_errors),   cmocka_unit_test(test_skip_bad),
        cmocka_unit_test(test_long_lines),      cmocka_unit_test(test_file_stream),
        cmocka_unit_test(test_criteo_transform), cmocka_unit_test(test_criteo_good),
        cmocka_unit_test(test_criteo_errors),   cmocka_unit_test(test_utf8_bom),
        cmocka_unit_test(test_criteo_seek_keeps_separator),
        cmocka_unit_test(test_criteo_csv_quoted),
        cmocka_unit_test(test_criteo_columns_and_header),
        cmocka_unit_test(test_sniff_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
