/*
 * server_impl.h — model_registry.c's steps that the fold (model_fold.c)
 * needs: private to those two files.
 */
#ifndef TL_SERVER_IMPL_H
#define TL_SERVER_IMPL_H

#include "model/overlay.h"
#include "server.h"

/* Drops the server's reference to old after the hazard scan and the bounded
 * wait for its requests (NULL: no-op).  Blocks up to the retire wait. */
void server__retire_now(server_model_t *old);

/* Every kept version on a's base gets undo appended (a new handle each; the
 * replaced ones retired).  Returns how many now hold it, or -EAGAIN (a is
 * no longer its model's active version), -E2BIG (a kept version already has
 * MODEL_OVERLAYS_MAX overlays), -ENOMEM; what was replaced stays exact. */
int server__give_standbys_undo(server_t *srv, server_model_t *a, model_overlay_t *undo);

/* a's place (active or kept) goes to fresh.  Returns a (the server's
 * reference, for the caller to retire) or NULL when a is in neither any
 * more (fresh is then dropped). */
server_model_t *server__replace_handle(server_t *srv, server_model_t *a, server_model_t *fresh);

#endif /* TL_SERVER_IMPL_H */
