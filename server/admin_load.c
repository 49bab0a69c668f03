/*
 * admin_load.c — POST /v1/models/{name}:load and GET /v1/models/{name}:load:
 * the checks a load request gets before it is queued for the loader thread
 * (loader.c), and the status of a model's latest load.  admin.c routes here
 * once the URL's model name is valid, and keeps the ?wait=1 requests until
 * their load ends (admin__wait_for_load).
 *
 * LOAD
 *   The cheap checks run here, synchronously: 403 when no admin token is
 *   configured (state-changing calls are off), 401 without or with a wrong
 *   token (compared in constant time for a given token length), 400 when the
 *   request is malformed (body not JSON, no "path", bad model name in the
 *   URL, a wait= other than 1/true/0/false), 403 when --model-repo (else
 *   --model-root) is set and the path does not resolve (realpath) to a path
 *   strictly under it (the root itself, '..' escapes and symlinks out are refused; the
 *   resolved path is the one loaded), 409 when the manifest cannot be
 *   read or names another model than the URL (snapshots are write-once
 *   directories, so the manifest read here is the one the loader loads),
 *   or when the repository's model is pinned to another version (the pin
 *   is what the watcher and a restart serve: activate moves it).
 *   The body may say "force": true to skip the validation gate (gate.h) for
 *   this load; without it a version the gate refuses ends the load FAILED
 *   (409 for ?wait=1) with the gate's reason and figures.
 *   Then the load is queued for the loader thread:
 *     202 Accepted, Location: /v1/models/{name}:load, body
 *       {"model","load":<id>,"state":"queued","status":"/v1/models/{name}:load"}
 *     409 when a load of the same model is still queued or running (one at a
 *       time per model; the body names it): retry when it has ended
 *     503 when LOADER_QUEUE_MAX loads are already waiting (the body names the
 *       limit), or when the server is shutting down.
 *   GET .../{name}:load answers 200 with {"model","load","state":"queued|
 *   loading|done|failed","path","version" (done),"error" (failed),
 *   "elapsed_ms" (accepted to ended, or to now)}, 404 when that model had no
 *   load since start.  With ?wait=1 (or wait=true) the request is kept open,
 *   not answered and not blocking: the loader reports the end of each load
 *   through done_ev (event_active from its thread), and admin.c answers
 *   the waiting requests of that load: 200 and the new model's JSON, or 409 with the store's error;
 * 503 when the server shut down first.  A client that leaves while waiting costs nothing: evhttp
 * detaches its request, and the late reply frees it.  The old version keeps serving until the swap;
 * DONE is reported after it.
 *
 * THREAD SAFETY
 *   Both handlers run on the admin thread only; they read srv's config and
 *   call the loader's thread-safe submit and status functions.
 */
#include "admin_impl.h"
#include "log.h"
#include "repo.h"
#include "server.h"

#include <errno.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* The JSON of a load's status (GET .../{name}:load). */
static json_t *load_json(const loader_status_t *st)
{
    json_t *j = json_pack("{s:s, s:I, s:s, s:s, s:I}", "model", st->model, "load",
                          (json_int_t)st->id, "state", loader_state_name(st->state), "path",
                          st->path, "elapsed_ms", (json_int_t)loader_elapsed_ms(st));
    if (j && st->state == LOADER_DONE)
        json_object_set_new(j, "version", json_integer((json_int_t)st->version));
    if (j && st->state == LOADER_FAILED)
        json_object_set_new(j, "error", json_string(st->error));
    return j;
}

/* wait= in the query: 1 to wait, 0 not to, -1 for a value we do not know. */
static int want_wait(struct evhttp_request *req)
{
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *q = uri ? evhttp_uri_get_query(uri) : NULL;
    if (!q)
        return 0;
    struct evkeyvalq kv; /* initialised by evhttp_parse_query_str */
    if (evhttp_parse_query_str(q, &kv) != 0)
        return -1;
    const char *v = evhttp_find_header(&kv, "wait");
    int rc = !v                                                 ? 0
             : (strcmp(v, "1") == 0 || strcmp(v, "true") == 0)  ? 1
             : (strcmp(v, "0") == 0 || strcmp(v, "false") == 0) ? 0
                                                                : -1;
    evhttp_clear_headers(&kv);
    return rc;
}

void admin__on_load(server_t *srv, struct evhttp_request *req, const char *name)
{
    if (admin__check_auth(req) != 0)
        return;
    int wait = want_wait(req);
    if (wait < 0) {
        admin__reply_error(req, 400,
                           "bad query: use ?wait=1 (or true) to wait for the load, or nothing");
        return;
    }

    char body[ADMIN_MAX_BODY + 1];
    long len = admin__body(req, body, ADMIN_MAX_BODY);
    if (len < 0)
        return;
    json_error_t jerr;
    json_t *j = json_loadb(body, (size_t)len, JSON_REJECT_DUPLICATES, &jerr);
    if (!j) {
        admin__reply_error(req, 400,
                           "body is not JSON (line %d, column %d: %s); expected "
                           "{\"path\": \"/dir/of/snapshot\"}",
                           jerr.line, jerr.column, jerr.text);
        return;
    }
    json_t *jp = json_is_object(j) ? json_object_get(j, "path") : NULL;
    const char *path = json_string_value(jp);
    /* "force": true skips the validation gate (gate.h): ops' override. */
    json_t *jf = json_is_object(j) ? json_object_get(j, "force") : NULL;
    if (jf && !json_is_boolean(jf)) {
        json_decref(j);
        admin__reply_error(req, 400,
                           "\"force\" must be true or false (true skips the validation gate)");
        return;
    }
    bool force = jf && json_is_true(jf);
    char dir[sizeof srv->cfg.model_dir];
    if (!path || path[0] == '\0' || strlen(path) >= sizeof dir) {
        json_decref(j);
        admin__reply_error(req, 400,
                           "body needs \"path\": a non-empty string shorter than %zu bytes "
                           "(the snapshot directory)",
                           sizeof dir);
        return;
    }
    /* With a repository, loads stay inside it (it lies under --model-root
     * when both are set: main checks that). */
    const char *root = srv->cfg.model_repo[0] ? srv->cfg.model_repo : srv->cfg.model_root;
    if (root[0]) {
        /* Loaded from the resolved path, so that a symlink swapped after
         * this check cannot lead the loader elsewhere. */
        char why[2 * PATH_MAX + 256];
        if (server_path_under_root(root, path, dir, sizeof dir, why, sizeof why) != 0) {
            LOG(LL_WARN, "admin: load %s refused: %s", name, why);
            admin__reply_error(req, 403, "loads are restricted to %s '%s': %s",
                               srv->cfg.model_repo[0] ? "the model repository (--model-repo)"
                                                      : "--model-root",
                               root, why);
            json_decref(j);
            return;
        }
    } else {
        snprintf(dir, sizeof dir, "%s", path);
    }
    json_decref(j);

    store_meta_t meta;
    uint64_t entries;
    store_error_t err;
    if (store_snapshot_read_meta(dir, &meta, &entries, &err) != 0) {
        LOG(LL_WARN, "admin: load %s from %s refused: %s", name, dir, err.msg);
        admin__reply_error(req, 409, "cannot read snapshot %s (%s): %s", dir,
                           store_errc_name(err.code), err.msg);
        return;
    }
    if (strcmp(meta.model_name, name) != 0) {
        admin__reply_error(req, 409, "snapshot %s holds model '%s', not '%s' named in the URL", dir,
                           meta.model_name, name);
        return;
    }

    /* A pinned model serves its pin (repo.h): a load of another version would
     * serve something the pin, the watcher and a restart all disagree with. */
    uint64_t pinned = srv->cfg.model_repo[0] ? repo_pinned(name) : 0;
    if (pinned && pinned != meta.version) {
        LOG(LL_WARN, "admin: load %s version %" PRIu64 " from %s refused: pinned to version %" PRIu64,
            name, meta.version, dir, pinned);
        admin__reply_error(req, 409,
                           "model '%s' is pinned to version %" PRIu64 ": a load of version %" PRIu64
                           " would not match the pin; activate it instead (tlctl activate %s %" PRIu64
                           " moves the pin; tlctl activate %s latest unpins)",
                           name, pinned, meta.version, name, meta.version, name);
        return;
    }

    loader_status_t st;
    loader_job_t job = {.name = name, .dir = dir, .version = meta.version, .force = force};
    int rc = loader_submit_job(&job, &st);
    if (rc == -EBUSY) {
        admin__reply_error(req, 409,
                           "load %" PRIu64
                           " of model '%s' (from %s) is still %s; one load per model at "
                           "a time: poll GET /v1/models/%s:load and retry when it has ended",
                           st.id, name, st.path, loader_state_name(st.state), name);
        return;
    }
    if (rc == -EAGAIN) {
        admin__reply_error(req, 503, "the load queue is full (limit %d loads waiting); retry later",
                           LOADER_QUEUE_MAX);
        return;
    }
    if (rc != 0) {
        admin__reply_error(req, 503, "the server is shutting down: no new loads");
        return;
    }
    LOG(LL_INFO, "admin: load %" PRIu64 " of %s version %" PRIu64 " from %s queued%s%s", st.id,
        name, meta.version, dir, force ? " (forced: no validation gate)" : "",
        wait ? " (the caller waits)" : "");
    if (wait) {
        admin__wait_for_load(req, st.id);
        return;
    }
    char status[128];
    snprintf(status, sizeof status, "/v1/models/%s:load", name);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Location", status);
    admin__reply_json(req, 202,
                      json_pack("{s:s, s:I, s:s, s:s}", "model", name, "load", (json_int_t)st.id,
                                "state", loader_state_name(st.state), "status", status));
}

void admin__on_load_status(server_t *srv, struct evhttp_request *req, const char *name)
{
    (void)srv;
    loader_status_t st;
    if (loader_status(name, &st) != 0) {
        admin__reply_error(req, 404, "model '%s' had no load since this server started", name);
        return;
    }
    admin__reply_json(req, 200, load_json(&st));
}
