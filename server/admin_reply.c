/*
 * admin_reply.c — the admin plane's replies (admin_impl.h): status lines,
 * text and JSON bodies, {"error": ...}, and the JSON of a served version
 * and of the repository's state that GET /v1/models and a waiting load
 * answer with.  Apart from admin.c so that the thread and the routing stay
 * one file's job.
 *
 * THREAD SAFETY: the admin thread only.
 */
#include "admin_impl.h"
#include "repo.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The codes the admin plane answers, each counted (the last: any other). */
static const int counted_codes[] = {200, 202, 400, 401, 403, 404, 405, 409, 413, 500, 503, 0};
#define NCOUNTED (sizeof counted_codes / sizeof counted_codes[0])
static uint64_t answered[NCOUNTED]; /* the admin thread's only: it also renders /metrics */

void admin__count_reply(int code)
{
    size_t i = 0;
    while (counted_codes[i] && counted_codes[i] != code)
        i++;
    answered[i]++;
}

void admin__replies_metrics(struct evbuffer *b)
{
    evbuffer_add_printf(b, "# HELP tlserve_admin_responses_total Admin plane answers by HTTP "
                           "status (401: no or a wrong token; 409: a refused state change, "
                           "such as a rollback with nothing to roll back to)\n"
                           "# TYPE tlserve_admin_responses_total counter\n");
    for (size_t i = 0; i < NCOUNTED; i++) {
        char code[8];
        snprintf(code, sizeof code, counted_codes[i] ? "%d" : "other", counted_codes[i]);
        evbuffer_add_printf(b, "tlserve_admin_responses_total{code=\"%s\"} %llu\n", code,
                            (unsigned long long)answered[i]);
    }
}

static const char *reason(int code)
{
    switch (code) {
    case 200:
        return "OK";
    case 202:
        return "Accepted";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 409:
        return "Conflict";
    case 413:
        return "Payload Too Large";
    case 500:
        return "Internal Server Error";
    case 503:
        return "Service Unavailable";
    default:
        return "Error";
    }
}

void admin__reply(struct evhttp_request *req, int code, const char *ctype, const char *body,
                  size_t len)
{
    struct evbuffer *b = evbuffer_new();
    if (b && body)
        evbuffer_add(b, body, len);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", ctype);
    admin__count_reply(code);
    evhttp_send_reply(req, code, reason(code), b);
    if (b)
        evbuffer_free(b);
}

void admin__reply_text(struct evhttp_request *req, int code, const char *text)
{
    admin__reply(req, code, "text/plain; charset=utf-8", text, strlen(text));
}

void admin__reply_json(struct evhttp_request *req, int code, json_t *j)
{
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s) {
        admin__reply_text(req, 500, "cannot encode JSON\n");
        return;
    }
    struct evbuffer *b = evbuffer_new();
    if (b) {
        evbuffer_add(b, s, strlen(s));
        evbuffer_add(b, "\n", 1);
    }
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
    admin__count_reply(code);
    evhttp_send_reply(req, code, reason(code), b);
    if (b)
        evbuffer_free(b);
    free(s);
}

/* Bytes outside printable ASCII become '?' so that a path with arbitrary
 * bytes cannot make the JSON invalid. */
void admin__reply_error(struct evhttp_request *req, int code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    for (char *p = msg; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e)
            *p = '?';
    admin__reply_json(req, code, json_pack("{s:s}", "error", msg));
}

/* {"name","version","kind","keys"}: one version, as GET /v1/models lists it
 * and a ?wait=1 load answers it. */
json_t *admin__version_json(const char *name, uint64_t version, const char *kind, uint64_t keys)
{
    return json_pack("{s:s, s:I, s:s, s:I}", "name", name, "version", (json_int_t)version, "kind",
                     kind, "keys", (json_int_t)keys);
}

json_t *admin__model_json(const model_t *m)
{
    const store_meta_t *meta = model_meta(m);
    return admin__version_json(meta->model_name, meta->version,
                               store_model_kind_name(meta->model_kind), model_key_count(m));
}

/* {"dir","model","readable","latest","loading","refused":[{"version","error"}],
 * "pinned","rolled_back":[...]}: the repository's state of model (repo.h),
 * or NULL when it does not serve it. */
static json_t *repo_model_json(const char *model)
{
    repo_status_t *rs = malloc(sizeof *rs);
    if (!rs)
        return NULL;
    json_t *j = NULL;
    if (repo_get_status(model, rs) == 0) {
        json_t *refused = json_array();
        for (unsigned i = 0; i < rs->n_refused; i++)
            json_array_append_new(refused, json_pack("{s:I, s:s}", "version",
                                                     (json_int_t)rs->refused[i].version, "error",
                                                     rs->refused[i].error));
        json_t *rb = json_array();
        for (unsigned i = 0; i < rs->n_rolled_back; i++)
            json_array_append_new(rb, json_integer((json_int_t)rs->rolled_back[i]));
        j = json_pack("{s:s, s:s, s:b, s:I, s:I, s:o, s:I, s:o}", "dir", rs->dir, "model",
                      rs->model, "readable", rs->readable, "latest", (json_int_t)rs->latest,
                      "loading", (json_int_t)rs->loading, "refused", refused, "pinned",
                      (json_int_t)rs->pinned, "rolled_back", rb);
    }
    free(rs);
    return j;
}

/* Sets "repository" (the first model's state: what a client of a
 * one-model repository reads) and "repositories" (every model's, in the
 * order served) in body; neither without --model-repo. */
void admin__repo_json(json_t *body)
{
    char names[SERVER_MODELS_MAX][64];
    unsigned n = repo_models(names, SERVER_MODELS_MAX);
    if (n == 0)
        return;
    json_t *all = json_array();
    for (unsigned i = 0; i < n && i < SERVER_MODELS_MAX; i++) {
        json_t *j = repo_model_json(names[i]);
        if (j)
            json_array_append_new(all, j);
    }
    json_t *first = json_array_size(all) ? json_incref(json_array_get(all, 0)) : NULL;
    if (first)
        json_object_set_new(body, "repository", first);
    json_object_set_new(body, "repositories", all);
}
