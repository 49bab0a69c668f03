/*
 * log.h — tlserve's one log macro.
 *
 *   LOG(LL_WARN, "cannot load %s: %s", dir, err.msg);
 *   -> "tlserve: warn: cannot load /m/7: MANIFEST: ...\n" on stderr
 *
 * The level is checked before anything is formatted, so a LOG(LL_DEBUG, ...)
 * on a hot path costs one load and one branch when debug is off.  One
 * fprintf per line: stdio locks stderr for the call, so lines from different
 * threads do not interleave.  The newline is added here.
 *
 * server_log_level is set once by server_config_load() (from --log-level)
 * before any thread starts; afterwards it is only read.
 */
#ifndef TL_SERVER_LOG_H
#define TL_SERVER_LOG_H

#include <stdio.h>

enum {
    LL_ERROR = 0,
    LL_WARN = 1,
    LL_INFO = 2,
    LL_DEBUG = 3
};

extern int server_log_level; /* defined in config.c; default LL_INFO */

#define LL_NAME_(l) \
    ((l) == LL_ERROR ? "error" : (l) == LL_WARN ? "warn" : (l) == LL_INFO ? "info" : "debug")

#define LOG(level, fmt, ...)                                                           \
    do {                                                                               \
        if ((level) <= server_log_level)                                               \
            fprintf(stderr, "tlserve: %s: " fmt "\n", LL_NAME_(level), ##__VA_ARGS__); \
    } while (0)

#endif /* TL_SERVER_LOG_H */
