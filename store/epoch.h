/*
 * epoch.h — epoch-based reclamation for the store's sub-tables (internal).
 *
 * Readers bracket every access to sub-table memory with epoch_enter() /
 * epoch_exit() (cheap: two stores to a thread-private cache line).  A writer
 * that unlinked a sub-table calls epoch_synchronize(), which returns once
 * every reader that might still see the old pointer has left; then it frees.
 */
#ifndef TL_STORE_EPOCH_H
#define TL_STORE_EPOCH_H

void epoch_enter(void);
void epoch_exit(void);
/* Blocks (spins, then yields) until all read sections that began before the
 * call have ended.  Must not be called inside a read section. */
void epoch_synchronize(void);

#endif
