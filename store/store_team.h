/*
 * store_team.h — one large batched lookup split over several threads.
 *
 * A request of 200 items looks up ~40,000 ids; on one core that takes about a
 * millisecond, nearly all of a request's service time.  A team is a few
 * helper threads that sleep until a caller hands them such a lookup; caller
 * and helpers then take chunks of it until none are left, so one request's
 * lookups finish in about 1/(helpers+1) of the time when cores are free, and
 * in no more than the caller's own time when they are not (a busy helper
 * simply takes no chunk).
 *
 * The team runs one shared lookup at a time: a caller that finds it taken
 * (another thread's lookup) does its own lookup alone, at once — its core is
 * then as busy as splitting would make it.  Lookups smaller than the team's
 * min_keys are never split (waking a helper costs more than they take).
 *
 * THREAD SAFETY: store_team_lookup() may be called from any number of
 * threads at once; store_team_destroy() only when no call is running.  The
 * store looked up must outlive the call, as for store_lookup_batch().
 */
#ifndef TL_STORE_TEAM_H
#define TL_STORE_TEAM_H

#include "store.h"

#include <stddef.h>
#include <stdint.h>

typedef struct store_team store_team_t; /* opaque */

#define STORE_TEAM_MAX_HELPERS 64

/* Starts `helpers` threads (1..STORE_TEAM_MAX_HELPERS).  Lookups of fewer
 * than min_keys keys (0: 8192) are not split.  Returns 0 or -errno. */
int store_team_create(int helpers, size_t min_keys, store_team_t **out);

/* Stops and joins the helpers, frees the team.  NULL is a no-op. */
void store_team_destroy(store_team_t *t);

/* store_lookup_batch() with the same arguments and result, split over the
 * team when it is free and n >= min_keys.  t may be NULL (no split). */
size_t store_team_lookup(store_team_t *t, const store_t *s, const uint64_t *keys, size_t n,
                         float *out, uint8_t *found);

/* Lookups split so far (the rest ran alone); for metrics and tests. */
uint64_t store_team_splits(const store_team_t *t);

#endif
