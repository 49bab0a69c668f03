/*
 * epoch.h — epoch-based reclamation for the store's sub-tables (internal).
 *
 * Readers bracket every access to sub-table memory with store__epoch_enter()
 * / store__epoch_exit() (cheap: two stores to a thread-private cache line).
 * A writer that unlinked a sub-table calls store__epoch_synchronize(), which
 * returns once every reader that might still see the old pointer has left;
 * then it frees.  store__ names: store/'s own, not exported to other folders.
 */
#ifndef TL_STORE_EPOCH_H
#define TL_STORE_EPOCH_H

void store__epoch_enter(void);
void store__epoch_exit(void);
/* Blocks (spins, then yields) until all read sections that began before the
 * call have ended.  Must not be called inside a read section. */
void store__epoch_synchronize(void);

#endif
