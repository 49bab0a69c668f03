/*
 * model_impl.h — the model's struct, shared by model.c (loading, scoring) and
 * model_version.c (versions made of a base and overlays: overlay.h).
 *
 * Several versions may share one base (store and extras); the base is freed
 * with the last of them.  The kind fields (FFM's F and k, the DNN's net,
 * which points into the base's extras) are the same for every version of a
 * base and are copied with the struct.
 */
#ifndef TL_MODEL_IMPL_H
#define TL_MODEL_IMPL_H

#include "dnn.h"
#include "model.h"
#include "overlay.h"

#include <stdatomic.h>
#include <stdbool.h>

struct model_base {
    store_t *store;           /* owned by the base */
    store_extras_t extras;    /* owned (dense arrays): params and layers */
    _Atomic uint32_t sharers; /* versions alive on this base */
    /* DNN, learned online (model_mlp.c): the MLP scorers read when not NULL
     * (else the version's dnn), under store_epoch_enter; mlp_spare is the
     * installer's alone (its callers serialise installs). */
    _Atomic(struct model_mlp *) mlp_live;
    struct model_mlp *mlp_spare;
    _Atomic uint64_t mlp_installs; /* installs so far */
};

struct model {
    struct model_base *base;  /* shared, refcounted by sharers */
    store_t *store;           /* base->store, read on every request */
    store_meta_t meta;
    model_overlay_t *overlays[MODEL_OVERLAYS_MAX]; /* first match wins; a reference each */
    uint32_t n_overlays;
    uint64_t keys;           /* keys of this version when it has overlays */
    uint32_t ffm_fields;     /* FFM: F, k, instance normalisation */
    uint32_t ffm_k;
    bool ffm_norm;
    bool fm_norm;            /* FM: instance normalisation (param norm) */
    dnn_net_t dnn;           /* DNN: points into base->extras */
    size_t work_bytes;       /* per-request work space beyond the rows */
};

/* ---- the served MLP (model_mlp.c) ----------------------------------------------------
 * A scorer reads the MLP between model__mlp_enter (a store epoch section;
 * returns the live MLP or m->dnn) and model__mlp_exit; model_destroy of a
 * base's last version calls model__mlp_free. */
const dnn_net_t *model__mlp_enter(const model_t *m);
void model__mlp_exit(void);
void model__mlp_free(struct model_base *b);

/* ---- the overlay's partitioned build (overlay.c; used by model_version.c) -----------
 *
 * A record has the layout of a table slot (key u64 | deleted u32 | K floats,
 * model__overlay_record_bytes each).  The builder sorts an overlay's records
 * by model__overlay_part_of (0 .. model__overlay_parts - 1, slot ranges that
 * fit in L2) and puts them in that order with model__overlay_put_records,
 * which behaves as model_overlay_put key by key in the order given (later
 * records of a key overwrite earlier ones; 0 or -ENOSPC).  Builder only,
 * before the overlay is shared.  model__overlay_populate faults the table's
 * memory in, from its end; it may run on another thread beside the puts
 * (both only write zeroed pages in or fill slots), and the overlay must
 * not be freed before it returns. */
uint32_t model__overlay_parts(const model_overlay_t *o);
uint32_t model__overlay_part_of(const model_overlay_t *o, uint64_t key);
size_t model__overlay_record_bytes(const model_overlay_t *o);
void model__overlay_record(const model_overlay_t *o, uint8_t *rec, uint64_t key,
                           const float *value);
int model__overlay_put_records(model_overlay_t *o, const uint8_t *recs, size_t n);
void model__overlay_populate(model_overlay_t *o);

#endif /* TL_MODEL_IMPL_H */
