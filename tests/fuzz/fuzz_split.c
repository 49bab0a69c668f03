/*
 * fuzz_split.c — libFuzzer target for tltrain's hold-out split
 * (model/tltrain_fit.c, split_stream): the input is a training file of any
 * bytes, split twice (as libsvm/libffm, and as Criteo, whose first
 * non-blank line may be a header that both parts get).
 *
 * Checks, else abort(): every input line (its '\n' included; a last line
 * may lack one) is the next line of exactly one part, in input order, so
 * the parts are a partition of the lines and nothing is lost, added or
 * reordered; a Criteo header is the next line of both; no line could have
 * gone to either part (the side is a function of the line's bytes); the
 * parts hold nothing after the last line; the counted rows never exceed
 * the lines.
 *
 *   ./fuzz_split -max_len=20000 ../tests/fuzz/corpus/split
 */
#include "model/tltrain_fit.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_split: %s\n", what);
        abort();
    }
}

static int starts(const char *part, size_t len, size_t pos, const uint8_t *line, size_t n)
{
    return pos + n <= len && memcmp(part + pos, line, n) == 0;
}

static void run(const uint8_t *data, size_t size, int criteo)
{
    char *buf[2] = {NULL, NULL};
    size_t len[2] = {0, 0};
    FILE *out[2] = {open_memstream(&buf[0], &len[0]), open_memstream(&buf[1], &len[1])};
    FILE *in = fmemopen((void *)data, size, "r");
    check(out[0] && out[1] && in, "stream setup");
    uint64_t rows[2] = {0, 0};
    check(split_stream(in, criteo, out, rows) == 0, "split_stream failed on memory");
    fclose(in);
    fclose(out[0]);
    fclose(out[1]);
    size_t pos[2] = {0, 0}, lines = 0;
    int first = 1;
    for (size_t i = 0; i < size;) {
        const uint8_t *nl = memchr(data + i, '\n', size - i);
        size_t n = nl ? (size_t)(nl - (data + i)) + 1 : size - i;
        const uint8_t *line = data + i;
        int blank = (n == 1 && line[0] == '\n') || (n == 2 && line[0] == '\r' && line[1] == '\n');
        int in0 = starts(buf[0], len[0], pos[0], line, n);
        int in1 = starts(buf[1], len[1], pos[1], line, n);
        if (!blank && first && criteo && (unsigned)(line[0] - '0') > 9 && line[0] != '-' &&
            line[0] != '+') {
            check(in0 && in1, "a Criteo header missing from a part");
            pos[0] += n;
            pos[1] += n;
        } else {
            check(in0 || in1, "a line in neither part, or out of order");
            check(!(in0 && in1) || n == 0, "a line that could be in either part");
            pos[in0 ? 0 : 1] += n;
        }
        if (!blank) {
            first = 0;
            lines++;
        }
        i += n;
    }
    check(pos[0] == len[0] && pos[1] == len[1], "bytes in a part after the last line");
    check(rows[0] + rows[1] <= lines, "more rows counted than lines");
    free(buf[0]);
    free(buf[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0; /* fmemopen refuses an empty buffer on some libcs */
    run(data, size, 0);
    run(data, size, 1);
    return 0;
}
