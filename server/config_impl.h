/*
 * config_impl.h — private to server/config*.c: the row type of the settings
 * table and what its three files share.  Nothing else includes it; the
 * public interface is server_config_load() and server_path_under_root() in
 * server.h.
 *
 *   config_table.c  the table (names, types, ranges, defaults, help) and the
 *                   checks of string values it names
 *   config.c        reading the sources in order: defaults, the INI file,
 *                   the environment, the flags
 *   config_check.c  what is checked once every source is read (the token
 *                   file, the model root), and --help
 *
 * THREAD SAFETY
 *   As server_config_load(): the main thread, before any other starts.
 */
#ifndef TL_SERVER_CONFIG_IMPL_H
#define TL_SERVER_CONFIG_IMPL_H

#include "server.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef enum cfg_type {
    CFG_INT,
    CFG_BOOL,
    CFG_STRING,
    CFG_DOUBLE /* a finite number in [min, max] */
} cfg_type_t;

/* Extra check of a string value; returns 0 or -1 with why filled. */
typedef int (*cfg_check_fn)(const char *value, char *why, size_t why_len);

typedef struct cfg_entry {
    const char *name; /* flag name without "--", '-' between words */
    cfg_type_t type;
    double min, max;     /* CFG_INT, CFG_DOUBLE: allowed range (integers exact to 2^53) */
    const char *def;     /* default, as text */
    const char *help;    /* one line for --help */
    size_t offset;       /* of the field in server_config_t */
    size_t size;         /* CFG_STRING: size of the char array */
    cfg_check_fn check;  /* CFG_STRING: extra validation, or NULL */
    const char *allowed; /* allowed values for --help (CFG_STRING; CFG_INT with a check), or NULL */
    const char *env;     /* environment variable that sets it, or NULL */
    bool secret;         /* warn when given as a flag (visible in /proc/PID/cmdline) */
} cfg_entry_t;

/* The settings, in --help's order (config_table.c); read-only. */
extern const cfg_entry_t server__cfg_table[];
extern const size_t server__cfg_ntable;

/* The LL_* level (log.h) named by name ("error", "warn", "info", "debug"),
 * or -1 when name is none of them. */
int server__cfg_log_level(const char *name);

/* Whether v could ever match a request's Bearer token: 0, or -1 with why
 * naming the control character or the blank at an end. */
int server__cfg_check_token(const char *v, char *why, size_t why_len);

/* Checks and completes cfg once every source is read: sets server_log_level,
 * reads --admin-token-file, checks --model and --model-repo against
 * --model-root (and stores the repository's real path), refuses settings
 * that exclude each other.  secret_flag is the last secret setting given as
 * a flag (warned about here), or NULL.  Returns 0, or -1 with one line on
 * stderr.  Reads the filesystem. */
int server__cfg_validate(server_config_t *cfg, const cfg_entry_t *secret_flag);

/* Prints the usage line and one line per setting to f. */
void server__cfg_print_help(FILE *f);

#endif
