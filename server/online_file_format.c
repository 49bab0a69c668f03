/*
 * online_file_format.c — --train-file-format auto: a training file's format
 * told from its head (the lines within its first SNIFF_BYTES), by
 * model/reader.h's sniff with criteo allowed, for the feeder
 * (online_file.c).  The file is opened as a regular file only
 * (reader_open_regular): a path replaced by a FIFO since the start must not
 * block the feeder.
 */
#include "online_impl.h"
#include "online_file_format.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define SNIFF_BYTES 65536u /* the format is told from the lines within these bytes */

/* The format of the file's head buf[0..len) (model/reader.h's sniff, criteo
 * allowed): 0, or -EINVAL with the line in why. */
static int sniff(const char *buf, size_t len, bool complete, const char *name, reader_format_t *out,
                 char *why, size_t why_len)
{
    uint64_t line;
    const char *bad;
    int shown;
    if (reader_sniff_format(buf, len, complete, true, out, &line, &bad, &shown) == 0)
        return 0;
    snprintf(why, why_len,
             "%s:%" PRIu64 ": cannot tell the format: the first feature "
             "'%.*s' is neither idx:val (libsvm) nor field:idx:val (libffm), and the "
             "line is not criteo's tab or comma columns (--train-file-format)",
             name, line, shown, bad);
    return -EINVAL;
}

int online__file_sniff(const char *path, reader_format_t *out, char *why, size_t why_len)
{
    static char head[SNIFF_BYTES]; /* the feeder's only */
    int fd = reader_open_regular(path, why, why_len); /* no FIFO swapped in since the start */
    if (fd < 0)
        return fd;
    size_t got = 0;
    while (got < sizeof head) {
        ssize_t r = read(fd, head + got, sizeof head - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            snprintf(why, why_len, "%s: %s", path, strerror(e));
            return -e;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    return sniff(head, got, got < sizeof head, path, out, why, why_len);
}
