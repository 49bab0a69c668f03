/*
 * snapshot_testutil.h — what the snapshot tests (test_snapshot_*.c) share:
 * scratch directories and files under $TL_TEST_TMP, byte flips, stores filled
 * with known values, and the checks that a loaded store equals the written one
 * and that a load fails with an exact code, file and offset.
 *
 * THREAD SAFETY: single-threaded.
 */
#ifndef TL_TESTS_SNAPSHOT_TESTUTIL_H
#define TL_TESTS_SNAPSHOT_TESTUTIL_H

#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <xxhash.h>

#include "store/manifest.h"
#include "store/store.h"
#include "store/store_internal.h"
#include "store/synthetic.h"
#include "tests/test_fs.h"

#define SENTINEL ((store_t *)(uintptr_t)0x5eed)

void scratch_dir(char *out);
void path_of(char *out, const char *dir, const char *file);
uint8_t *read_file(const char *dir, const char *file, size_t *len);
void write_file(const char *dir, const char *file, const void *buf, size_t len);
void flip_byte(const char *dir, const char *file, size_t off);
int file_exists(const char *dir, const char *file);
int count_tmp(const char *dir);
float random_value(uint64_t *rng, store_dtype_t dt);
store_t *make_store(uint32_t K, store_dtype_t dt, uint32_t shards, size_t nkeys,
                    uint64_t seed, uint64_t value_seed);
store_meta_t test_meta(const char *name, uint64_t version);
void assert_same_store(const store_t *a, const store_t *b);
void assert_same_meta(const store_meta_t *a, const store_meta_t *b);
void expect_load_error(const char *dir, int threads, store_errc_t code, const char *file,
                       int64_t offset);

#endif
