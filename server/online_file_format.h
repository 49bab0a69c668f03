/*
 * online_file_format.h — --train-file-format auto for the --train-file
 * feeder (online_file.c): a file's format told from its head.
 */
#ifndef TL_SERVER_ONLINE_FILE_FORMAT_H
#define TL_SERVER_ONLINE_FILE_FORMAT_H

#include "model/reader.h"

#include <stddef.h>

/* path's format from its first 64 KiB (model/reader.h's sniff, criteo
 * allowed), the file opened as a regular file only: 0, or -errno with why
 * naming the file (and the line that could not be told). */
int online__file_sniff(const char *path, reader_format_t *out, char *why, size_t why_len);

#endif
