/*
 * admin_impl.h — what admin.c (the admin thread, routing) and admin_reply.c
 * (replies) share with admin_load.c (the :load endpoint), admin_models.c
 * (the version lifecycle endpoints), admin_digest.c and admin_metrics.c.
 * Private to the admin plane: every function here runs on the admin thread
 * only.
 */
#ifndef TL_SERVER_ADMIN_IMPL_H
#define TL_SERVER_ADMIN_IMPL_H

#include "server.h"

#include <event2/http.h>
#include <jansson.h>
#include <stdint.h>

/* The largest request body evhttp reads (413 above it), and the load
 * body's buffer. */
#define ADMIN_MAX_BODY (64 * 1024)

/* Replies (admin_reply.c): body (len bytes, may be NULL) as ctype; text
 * as text/plain; j (consumed) as a JSON body with a trailing newline. */
void admin__reply(struct evhttp_request *req, int code, const char *ctype, const char *body,
                  size_t len);
void admin__reply_text(struct evhttp_request *req, int code, const char *text);
void admin__reply_json(struct evhttp_request *req, int code, json_t *j);

/* Counts an answer of status code (admin__reply* do; a reply sent otherwise
 * calls it), and renders the counts as tlserve_admin_responses_total. */
void admin__count_reply(int code);
void admin__replies_metrics(struct evbuffer *b);

/* {"name","version","kind","keys"}: one version, as GET /v1/models lists it
 * and a ?wait=1 load answers it; a served model's. */
json_t *admin__version_json(const char *name, uint64_t version, const char *kind, uint64_t keys);
json_t *admin__model_json(const model_t *m);

/* Sets "repository" (the first model's state) and "repositories" (every
 * model's) in body; neither without --model-repo. */
void admin__repo_json(json_t *body);

/* {"error": msg} with status code (non-printable bytes become '?'). */
void admin__reply_error(struct evhttp_request *req, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* 0 when the request carries the admin token; else replies 401/403 and
 * returns -1. */
int admin__check_auth(struct evhttp_request *req);

/* The request body (at most max bytes) copied NUL-terminated into buf;
 * its length, or -1 after replying 413. */
long admin__body(struct evhttp_request *req, char *buf, size_t max);

/* Appends the /metrics text to b (admin_metrics.c). */
struct evbuffer;
void admin__metrics(server_t *srv, struct evbuffer *b);

/* POST /v1/models/{name}:rollback, POST .../{name}:activate and
 * GET .../{name}/versions (admin_models.c).  name is validated. */
void admin__on_refuse(server_t *srv, struct evhttp_request *req, const char *name);
void admin__on_rollback(server_t *srv, struct evhttp_request *req, const char *name);
void admin__on_activate(server_t *srv, struct evhttp_request *req, const char *name);
void admin__on_versions(server_t *srv, struct evhttp_request *req, const char *name);

/* GET /v1/models/{name}/digest (admin_digest.c): the active version's
 * weights fingerprinted under the model's writer lock.  name is validated. */
void admin__on_digest(server_t *srv, struct evhttp_request *req, const char *name);
/* At shutdown (admin thread): waits for a digest's walk and answers it 503;
 * 1 when there was one, else 0. */
int admin__digest_stop(void);

/* The admin thread's event base (for events other threads activate), and
 * the long timeout of a request answered later (a waited load, a digest). */
struct event_base *admin__base(void);
void admin__hold(struct evhttp_request *req);
/* Before the later answer of a held request: the normal timeout again
 * (and, during the stop, the answer's flush). */
void admin__unhold(struct evhttp_request *req);
/* The stop has answered what was held: nothing new may be held after it
 * (it would not be answered, nor its thread joined). */
bool admin__stop_begun(void);

/* Keeps req open until the load with that id ends, then answers it (200
 * with the version's JSON, 409 with the load's error, 503 on shutdown).
 * Takes req: the caller must not reply to it.  Call only from the handler
 * that queued the load, before it returns. */
void admin__wait_for_load(struct evhttp_request *req, uint64_t load);

/* POST and GET /v1/models/{name}:load (admin_load.c).  name is validated
 * (1..63 characters of [A-Za-z0-9_.-]); each answers req. */
void admin__on_load(server_t *srv, struct evhttp_request *req, const char *name);
void admin__on_load_status(server_t *srv, struct evhttp_request *req, const char *name);
/* The post-swap guard's state for model name (guard.h) as a new JSON object
 * {"state", "version", ...} for GET /v1/models/NAME/versions; NULL when the
 * guard is off or its last watch was of another model. */
json_t *admin__guard_json(const char *name);

#endif /* TL_SERVER_ADMIN_IMPL_H */
