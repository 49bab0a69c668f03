/*
 * file_replace.c — file_replace_at (file_replace.h): a temporary file,
 * fsynced, then renamed over the name.
 */
#define _GNU_SOURCE
#include "file_replace.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <unistd.h>

int file_replace_at(int dirfd, const char *name, const void *buf, size_t len)
{
    char tmp[NAME_MAX + 1];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", name) >= (int)sizeof tmp)
        return -ENAMETOOLONG;
    int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    int rc = 0;
    for (size_t off = 0; off < len;) {
        ssize_t w = write(fd, (const char *)buf + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            rc = -errno;
            break;
        }
        off += (size_t)w;
    }
    if (rc == 0 && fsync(fd) != 0)
        rc = -errno;
    close(fd);
    if (rc == 0 && renameat(dirfd, tmp, dirfd, name) != 0)
        rc = -errno;
    return rc;
}
