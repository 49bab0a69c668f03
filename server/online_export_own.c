/*
 * online_export_own.c — the registry of this process's own exports
 * (online_export.c: THE POSITION): for each model the last
 * ONLINE_EXPORT_OWN_MAX delta versions this process wrote, the sample-log
 * position each covers, and whether a rollback voided it; and the random id
 * that tells this process's producer strings from a restarted server's.
 * The chain loader's thread asks it (online_export_is_own) while the export
 * thread adds to it, so it has its own leaf lock.
 */
#include "online_impl.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

static struct {
    pthread_mutex_t lock;
    uint64_t id; /* this process's export id (0: not drawn yet) */
    struct own_model {
        char model[64];
        unsigned next;                          /* ring index */
        uint64_t version[ONLINE_EXPORT_OWN_MAX]; /* 0: empty */
        uint64_t pos[ONLINE_EXPORT_OWN_MAX];
        bool void_[ONLINE_EXPORT_OWN_MAX]; /* dropped by a rollback: written by us, not served */
    } m[ONLINE_MODELS_MAX];
} OWN = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* OWN.lock held. */
static struct own_model *own_find(const char *model, bool add)
{
    for (unsigned i = 0; i < ONLINE_MODELS_MAX; i++) {
        if (strcmp(OWN.m[i].model, model) == 0)
            return &OWN.m[i];
        if (!OWN.m[i].model[0]) {
            if (!add)
                return NULL;
            snprintf(OWN.m[i].model, sizeof OWN.m[i].model, "%s", model);
            return &OWN.m[i];
        }
    }
    return NULL;
}

uint64_t online__export_own_id(void)
{
    pthread_mutex_lock(&OWN.lock);
    while (OWN.id == 0) {
        uint64_t r = 0;
        if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
            r = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull ^ online__now_ns();
        OWN.id = r;
    }
    uint64_t id = OWN.id;
    pthread_mutex_unlock(&OWN.lock);
    return id;
}

void online__export_producer(uint64_t pos, char out[STORE_PRODUCER_MAX])
{
    if (online__bus_on()) /* replay mode: pos is the stream's next sequence */
        snprintf(out, STORE_PRODUCER_MAX,
                 ONLINE_EXPORT_PRODUCER " stream=%" PRIu64 " id=%016" PRIx64, pos ? pos - 1 : 0,
                 online__export_own_id());
    else
        snprintf(out, STORE_PRODUCER_MAX, ONLINE_EXPORT_PRODUCER " log=%" PRIu64 " id=%016" PRIx64,
                 pos, online__export_own_id());
}

void online__export_own_add(const char *model, uint64_t version, uint64_t pos)
{
    pthread_mutex_lock(&OWN.lock);
    struct own_model *o = own_find(model, true);
    if (o) {
        unsigned at = o->next;
        for (unsigned i = 0; i < ONLINE_EXPORT_OWN_MAX; i++)
            if (o->version[i] == version)
                at = i; /* a retry of the same number */
        o->version[at] = version;
        o->pos[at] = pos;
        o->void_[at] = false;
        if (at == o->next)
            o->next = (o->next + 1) % ONLINE_EXPORT_OWN_MAX;
    }
    pthread_mutex_unlock(&OWN.lock);
}

int online__export_own_pos(const char *model, uint64_t version, uint64_t *pos, bool with_void)
{
    int found = 0;
    pthread_mutex_lock(&OWN.lock);
    struct own_model *o = own_find(model, false);
    for (unsigned i = 0; o && i < ONLINE_EXPORT_OWN_MAX && !found; i++)
        if (o->version[i] == version && (with_void || !o->void_[i])) {
            *pos = o->pos[i];
            found = 1;
        }
    pthread_mutex_unlock(&OWN.lock);
    return found;
}

int online_export_is_own(const char *model, uint64_t version, const char *producer)
{
    uint64_t pos;
    char mine[STORE_PRODUCER_MAX];
    if (!online__export_own_pos(model, version, &pos, false))
        return 0;
    online__export_producer(pos, mine);
    return strcmp(mine, producer) == 0;
}

size_t online__export_own_void_above(const char *model, uint64_t to, uint64_t *out, size_t cap)
{
    size_t n = 0;
    pthread_mutex_lock(&OWN.lock);
    struct own_model *o = own_find(model, false);
    for (unsigned i = 0; o && i < ONLINE_EXPORT_OWN_MAX; i++)
        if (o->version[i] > to && !o->void_[i]) {
            if (n < cap)
                out[n++] = o->version[i];
            o->void_[i] = true;
        }
    pthread_mutex_unlock(&OWN.lock);
    return n;
}
