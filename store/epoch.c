/*
 * epoch.c — process-wide epoch-based reclamation (EBR).
 *
 * One global epoch counter and a table of reader slots, one cache line each,
 * so readers never write a line another thread writes.  A thread claims a
 * slot the first time it enters a read section and gives it back when it
 * exits (pthread key destructor).
 *
 *   slot value 0   thread is outside any read section
 *   slot value e   thread entered while the global epoch was e (e >= 1)
 *
 * Reader:  slot = global (seq_cst store)  ... reads ...  slot = 0 (release)
 * Writer:  unlink (release store of the new pointer); g = ++global (seq_cst);
 *          wait until every slot is 0 or >= g; free the old memory.
 *
 * Why it is safe: the seq_cst store of the slot precedes the reader's load of
 * the sub-table pointer; the writer's seq_cst increment follows its pointer
 * store.  So either the reader saw the new pointer, or the writer sees the
 * reader's slot with an epoch < g and waits for it.
 *
 * Read sections nest (a per-thread depth counter); only the outermost one
 * touches the slot.  THREAD SAFETY: all functions may be called from any
 * thread; store__epoch_synchronize may run concurrently with itself.
 */
#include "epoch.h"
#include "store.h"
#include "store_internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define EPOCH_MAX_THREADS 4096

struct epoch_slot {
    _Atomic uint64_t epoch; /* 0 = idle, else epoch at entry */
    _Atomic int owned;      /* 1 while a live thread holds this slot */
    char pad[64 - sizeof(uint64_t) - sizeof(int)];
};
_Static_assert(sizeof(struct epoch_slot) == 64, "one cache line per slot");

static _Alignas(64) _Atomic uint64_t global_epoch = 1;
static _Atomic uint32_t slots_used; /* high-water mark of slot indices */
static _Alignas(64) struct epoch_slot slots[EPOCH_MAX_THREADS];

static _Thread_local struct epoch_slot *my_slot;
static _Thread_local unsigned my_depth;
static pthread_key_t slot_key;
static pthread_once_t slot_key_once = PTHREAD_ONCE_INIT;

static void release_slot(void *p)
{
    struct epoch_slot *slot = p;
    atomic_store_explicit(&slot->epoch, 0, memory_order_release);
    atomic_store_explicit(&slot->owned, 0, memory_order_release);
}

static void make_key(void)
{
    if (pthread_key_create(&slot_key, release_slot) != 0) {
        fputs("tlserve: epoch: pthread_key_create failed\n", stderr);
        abort();
    }
}

static cold struct epoch_slot *claim_slot(void)
{
    pthread_once(&slot_key_once, make_key);
    for (uint32_t i = 0; i < EPOCH_MAX_THREADS; i++) {
        int expected = 0;
        if (atomic_compare_exchange_strong(&slots[i].owned, &expected, 1)) {
            uint32_t used = atomic_load(&slots_used);
            while (used < i + 1 && !atomic_compare_exchange_weak(&slots_used, &used, i + 1))
                ;
            pthread_setspecific(slot_key, &slots[i]);
            return &slots[i];
        }
    }
    /* More live reader threads than slots is a configuration error no
     * caller can recover from; refuse loudly rather than read unsafely. */
    fprintf(stderr, "tlserve: epoch: more than %d reader threads\n", EPOCH_MAX_THREADS);
    abort();
}

void store__epoch_enter(void)
{
    if (my_depth++ > 0)
        return;
    if (unlikely(my_slot == NULL))
        my_slot = claim_slot();
    /* acquire: seeing epoch g implies seeing the pointer stores made before g */
    uint64_t e = atomic_load_explicit(&global_epoch, memory_order_acquire);
    atomic_store_explicit(&my_slot->epoch, e, memory_order_seq_cst);
}

void store__epoch_exit(void)
{
    if (--my_depth > 0)
        return;
    atomic_store_explicit(&my_slot->epoch, 0, memory_order_release);
}

void store__epoch_synchronize(void)
{
    uint64_t g = atomic_fetch_add_explicit(&global_epoch, 1, memory_order_seq_cst) + 1;
    uint32_t n = atomic_load_explicit(&slots_used, memory_order_acquire);
    for (uint32_t i = 0; i < n; i++) {
        if (&slots[i] == my_slot && my_depth > 0)
            continue; /* never wait for ourselves (misuse, but not a hang) */
        unsigned spins = 0;
        for (;;) {
            uint64_t e = atomic_load_explicit(&slots[i].epoch, memory_order_seq_cst);
            if (e == 0 || e >= g)
                break;
            if (++spins > 64)
                sched_yield();
        }
    }
}

/* store.h's public names for the same sections (the model's served MLP). */
void store_epoch_enter(void) { store__epoch_enter(); }
void store_epoch_exit(void) { store__epoch_exit(); }
void store_epoch_synchronize(void) { store__epoch_synchronize(); }
