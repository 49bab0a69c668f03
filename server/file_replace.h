/*
 * file_replace.h — a small file written whole or not at all: the side
 * files an online export puts into its version directory (SYNC_STATE,
 * TRAINFILE_MARKS) before the version's MANIFEST.
 */
#ifndef TL_SERVER_FILE_REPLACE_H
#define TL_SERVER_FILE_REPLACE_H

#include <stddef.h>

/* Writes buf[0, len) to "<name>.tmp" in dirfd, fsyncs it and renames it to
 * name, so a reader sees the old file (or none) or the new one whole.
 * The directory is not fsynced: the caller's rename of the version does
 * that.  0 or -errno.  Blocks. */
int file_replace_at(int dirfd, const char *name, const void *buf, size_t len);

#endif
