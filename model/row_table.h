/*
 * row_table.h — a trainer's parameter rows, updated in place: id -> row of
 * `row_floats` floats.  Internal to model/ (train_ffm.c; train_lr.c and
 * train_fm.c while they train on threads, train_threads.c).
 *
 * Why not the store (store.h): a store copies a row out on lookup and back
 * in on upsert, which is right for a server that reads a model others
 * write, but a trainer that steps every row of every sample paid more for
 * those copies and the second hash probe than for its arithmetic.  Here a
 * row is found once per sample and stepped where it lies.
 *
 * Layout: an open-addressing index (linear probing, at most half full, a
 * 16-byte slot {id, row number}) over rows kept in chunks of ROW_TABLE_CHUNK
 * rows.  Chunks never move, so a row pointer stays valid while other ids
 * are added (the index alone is rebuilt when it grows).  Rows are never
 * removed.
 *
 * THREAD SAFETY
 *   Two ways to use a table, never mixed at the same time:
 *   - one thread: train__row_table_upsert, _find, _foreach, _count;
 *   - many threads (train_threads.c's epochs): any number of threads call
 *     train__row_table_upsert_mt and train__row_table_find at once.  A hit
 *     takes no lock; a miss takes the table's insert lock, makes and
 *     initialises the row, and only then publishes it in the index, so no
 *     thread ever sees a row before its initial values.  An index that grows
 *     meanwhile is retired, not freed (a finder may still be probing it):
 *     train__row_table_quiesce frees the retired ones once the threads are
 *     done.  The ROW CONTENTS are not protected: threads that step the same
 *     row race on its floats (Hogwild, train_threads.c says why that is
 *     accepted); the table itself stays memory-safe.
 */
#ifndef TL_MODEL_ROW_TABLE_H
#define TL_MODEL_ROW_TABLE_H

#include <stdbool.h>
#include <stdint.h>

typedef struct row_table train__row_table_t;

/* Rows per chunk (a power of two). */
#define ROW_TABLE_CHUNK 4096u

/* A table of rows of row_floats (>= 1) floats, its index sized for
 * expected ids (0 = small).  0, -EINVAL or -ENOMEM. */
int train__row_table_create(uint32_t row_floats, uint64_t expected, train__row_table_t **out);
void train__row_table_destroy(train__row_table_t *t);

/* id's row, or NULL when id has none.  Safe beside upsert_mt. */
float *train__row_table_find(const train__row_table_t *t, uint64_t id);

/* id's row, created all 0 when it had none (*created says which).  NULL
 * when memory ran out or the table is full (2^30 rows); the table then
 * holds what it held.  One thread only (no concurrent caller of any
 * function of this table). */
float *train__row_table_upsert(train__row_table_t *t, uint64_t id, bool *created);

/* Makes a new id's row (row_floats floats, all 0 on entry). */
typedef void (*train__row_init_fn)(const void *ctx, uint64_t id, float *row);

/* id's row; when it had none, a new row made by init(ctx, id, row) (NULL:
 * left all 0) under the insert lock before any thread can find it.  Any
 * number of threads may call this and _find at once (THREAD SAFETY).
 * NULL when memory ran out or the table is full. */
float *train__row_table_upsert_mt(train__row_table_t *t, uint64_t id, train__row_init_fn init,
                                  const void *ctx);

/* Frees the indexes upsert_mt retired; no other thread may be using t. */
void train__row_table_quiesce(train__row_table_t *t);

uint64_t train__row_table_count(const train__row_table_t *t);

/* Calls fn(ctx, id, row) for every row (in index order) until fn returns
 * non-zero; returns that value, or 0.  No concurrent upsert. */
typedef int (*train__row_table_visit_fn)(void *ctx, uint64_t id, const float *row);
int train__row_table_foreach(const train__row_table_t *t, train__row_table_visit_fn fn, void *ctx);

#endif /* TL_MODEL_ROW_TABLE_H */
