/*
 * conn_testutil.h — what the connection state machine tests (test_conn_*.c)
 * share: the fixture (a worker built as workers.c builds one, an LR model
 * "ctr" version 7 loaded through the registry), request builders and
 * response readers.  The code, with server/conn.c #included so that its
 * allocations can be made to fail on demand (alloc_fail_at), is in
 * conn_testutil.c.
 *
 * THREAD SAFETY: single-threaded; one worker (w) and one server (srv) per
 * test program, reset by start()/finish() around each test.
 */
#ifndef TL_TESTS_CONN_TESTUTIL_H
#define TL_TESTS_CONN_TESTUTIL_H

#define _GNU_SOURCE /* memmem */
/* cmocka needs these first, in this order */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "server/server.h"
#include "server/worker.h"
#include "tests/test_fs.h"

#define MODEL_NAME "ctr"
#define MODEL_VERSION 7u
#define NKEYS 64u

typedef struct bytes {
    uint8_t *p;
    size_t len, cap;
} bytes_t;

extern int alloc_fail_at; /* > 0: conn.c's alloc_fail_at-th allocation from now fails */
extern server_t srv;
extern worker_t w;
extern char model_dir[PATH_MAX];
float weight_of(uint64_t id);
void configure(const char *const *flags);
int group_setup(void **state);
int group_teardown(void **state);
void start(const char *const *flags);
void finish(void);
conn_t *open_conn(void);
uint8_t *grow(bytes_t *b, size_t n);
void put(bytes_t *b, const void *data, size_t n);
void put_u8(bytes_t *b, uint8_t v);
void put_u64(bytes_t *b, uint64_t v);
void put_f32(bytes_t *b, float f);
void put_varint(bytes_t *b, uint64_t v);
void put_frame(bytes_t *b, uint8_t type, uint16_t flags, uint64_t id, const bytes_t *p);
void put_predict_head(bytes_t *p, const char *name, uint64_t version, uint64_t items);
void put_block(bytes_t *p, const uint64_t *ids, const float *vals, uint32_t n);
extern const uint64_t sh_ids[];
extern const uint64_t it0_ids[];
extern const uint64_t it1_ids[];
extern const float it1_vals[];
void std_blocks(codec_block_t *shared, codec_block_t items[3]);
void put_predict(bytes_t *b, uint64_t id, const char *name, uint64_t version);
void put_ping(bytes_t *b, uint64_t id, const char *data);
void put_train(bytes_t *b, uint64_t id);
void put_lookup(bytes_t *b, uint64_t id);
void put_widest_predict(bytes_t *p);
void next_frame(conn_t *c, codec_msg_t *m);
void expect_error_naming(conn_t *c, uint64_t id, int code, const char *needle);
void expect_error(conn_t *c, uint64_t id, int code);
void expect_pong(conn_t *c, uint64_t id, const char *data);
void expect_scores(conn_t *c, uint64_t id);
void expect_nothing(const conn_t *c);
int feed(conn_t *c, const bytes_t *b);
void expect_usable(conn_t *c);
void expect_closed(conn_t *c, const bytes_t *later);
uint64_t errors_of(int code);

#endif
