/*
 * model_mlp.c — the DNN's served MLP, replaceable while requests score
 * (model.h: model_dnn_install_mlp).  Partitioned replicas learn the MLP
 * online (server/online_sync_dense.c); scorers must never read a matrix
 * half written, and a request may be scoring while the trainer installs.
 *
 * LAYOUT.  A snapshot's MLP stays where model_setup put it (m->dnn, into
 * the base's extras, never written).  An installed MLP is one allocation:
 *
 *   struct model_mlp: [ dnn_net_t net | W_0 | b_0 | W_1 | b_1 | ... ]
 *                        net.W[l], net.b[l] point into the same block
 *
 * The base holds two of them at most: `live` (what scorers read; NULL:
 * the snapshot's) and `spare` (the previous live one, no reader left).
 * An install writes the spare, publishes it, and waits out the readers of
 * the one it replaced, which becomes the spare:
 *
 *   installer                                 scorer
 *   ---------                                 ------
 *   fill spare (nobody reads it)              store_epoch_enter()
 *   old = exchange(&live, spare)  (seq_cst)   net = load(&live) or snapshot's
 *   store_epoch_synchronize()                 ... score with net ...
 *   spare = old                               store_epoch_exit()
 *
 * Why it holds: store_epoch_synchronize returns only after every read
 * section begun before it has ended (store/epoch.c); a section begun after
 * the exchange loads the new pointer.  So once it returns, no scorer can
 * hold `old`, and the next install may overwrite it.  Memory: two copies
 * of the MLP per base, allocated at the first install, never per request
 * or per install after that.  The base (shared by every version derived
 * from it) holds them, so a fold's new version serves the learned MLP too;
 * model_destroy of the last sharer frees them (no reader is left then).
 *
 * THREAD SAFETY: scorers any thread, lock-free.  Installs and
 * model_dnn_served_mlp must be serialised by the caller (the server: the
 * model's writer lock); an install blocks until the scorers of the
 * replaced copy are done (microseconds: one request's forward pass).
 */
#include "model_impl.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct model_mlp {
    dnn_net_t net;  /* W, b point into params */
    size_t floats;  /* of params */
    float params[]; /* W_0 | b_0 | W_1 | b_1 ... */
};

size_t model_dnn_mlp_floats(const model_t *m)
{
    if (m->meta.model_kind != STORE_MODEL_DNN)
        return 0;
    const dnn_net_t *n = &m->dnn;
    size_t f = 0;
    for (uint32_t l = 0; l < n->n_layers; l++)
        f += (size_t)n->width[l] * n->width[l + 1] + n->width[l + 1];
    return f;
}

static bool same_shape(const dnn_net_t *a, const dnn_net_t *b)
{
    if (a->n_layers != b->n_layers || a->fields != b->fields || a->dim != b->dim ||
        a->wide != b->wide)
        return false;
    for (uint32_t l = 0; l <= a->n_layers; l++)
        if (a->width[l] != b->width[l])
            return false;
    return true;
}

int model_dnn_install_mlp(model_t *m, const dnn_net_t *net)
{
    size_t floats = model_dnn_mlp_floats(m);
    if (!floats || !same_shape(net, &m->dnn))
        return -EINVAL;
    struct model_base *b = m->base;
    struct model_mlp *next = b->mlp_spare;
    if (!next) {
        next = malloc(sizeof *next + floats * sizeof(float));
        if (!next)
            return -ENOMEM;
        next->floats = floats;
        next->net = m->dnn;
        float *p = next->params;
        for (uint32_t l = 0; l < m->dnn.n_layers; l++) {
            next->net.W[l] = p;
            p += (size_t)m->dnn.width[l] * m->dnn.width[l + 1];
            next->net.b[l] = p;
            p += m->dnn.width[l + 1];
        }
    }
    for (uint32_t l = 0; l < net->n_layers; l++) { /* nobody reads next: it is the spare */
        size_t nw = (size_t)net->width[l] * net->width[l + 1], nb = net->width[l + 1];
        for (size_t i = 0; i < nw; i++)
            if (!isfinite(net->W[l][i]))
                goto refuse;
        for (size_t i = 0; i < nb; i++)
            if (!isfinite(net->b[l][i]))
                goto refuse;
        memcpy((float *)next->net.W[l], net->W[l], nw * sizeof(float));
        memcpy((float *)next->net.b[l], net->b[l], nb * sizeof(float));
    }
    b->mlp_spare = NULL;
    struct model_mlp *old = atomic_exchange_explicit(&b->mlp_live, next, memory_order_seq_cst);
    store_epoch_synchronize(); /* no scorer holds old from here on */
    b->mlp_spare = old;
    atomic_fetch_add_explicit(&b->mlp_installs, 1, memory_order_relaxed);
    return 0;
refuse:
    b->mlp_spare = next; /* kept for the next install */
    return -ERANGE;
}

const dnn_net_t *model_dnn_served_mlp(const model_t *m)
{
    if (m->meta.model_kind != STORE_MODEL_DNN)
        return NULL;
    struct model_mlp *live = atomic_load_explicit(&m->base->mlp_live, memory_order_acquire);
    return live ? &live->net : &m->dnn;
}

uint64_t model_dnn_mlp_installs(const model_t *m)
{
    return atomic_load_explicit(&m->base->mlp_installs, memory_order_relaxed);
}

const dnn_net_t *model__mlp_enter(const model_t *m)
{
    store_epoch_enter();
    struct model_mlp *live = atomic_load_explicit(&m->base->mlp_live, memory_order_seq_cst);
    return live ? &live->net : &m->dnn;
}

void model__mlp_exit(void) { store_epoch_exit(); }

void model__mlp_free(struct model_base *b)
{
    free(atomic_load_explicit(&b->mlp_live, memory_order_relaxed));
    free(b->mlp_spare);
}
