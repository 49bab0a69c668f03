/*
 * admin_models.c — the admin endpoints of a model's version lifecycle:
 * rollback, activate (and pin), and the list of versions with their state.
 *
 *   POST /v1/models/{name}:rollback   token.  The newest standby version of
 *        name (kept loaded by model_registry.c, --keep-versions) becomes
 *        active by a pointer swap, answered when requests already see it:
 *        200 {"model","version" (now active),"rolled_back" (replaced),
 *        "swap_us"}.  With --model-repo the replaced version is refused by
 *        the watcher's policy (state "rolled_back", reason "rollback by
 *        admin") until an activate names it.  404 when name is not the
 *        active model; 409 "nothing to roll back to" when no version of it
 *        is kept (a rollback never starts a load: the caller can activate a
 *        version, which may); 409 while a load of name is queued or
 *        running (its swap would undo the rollback).
 *   POST /v1/models/{name}:activate   token; body {"version": N} or
 *        {"version": "latest"}.  N: 200 when N was active or kept (a
 *        pointer swap; the replaced version becomes standby), 202 and a
 *        background load (as :load answers it) when N is only on disk;
 *        with --model-repo N is pinned either way: the latest policy stops
 *        overriding it.  "latest": unpins, 200.  404 when N is neither kept
 *        nor in the repository (the message names it); 400 on a bad body.
 *   GET  /v1/models/{name}/versions   200 {"model","pinned","pinned_version",
 *        "keep_versions","versions":[{"version","state","reason"?}]}, newest
 *        first.  Versions are the repository's listing plus the loaded
 *        ones; state is active, loading, validating, standby, rolled_back, refused
 *        (reason: the loader's sentence) or retired (on disk, not loaded).
 *        404 when name is neither active nor the repository's model.
 *
 * Every handler runs on the admin thread and answers from memory, except
 * the repository's listing (a readdir, and a stat of each version's files
 * for :activate).  Nothing waits for a load.
 */
#include "admin_impl.h"
#include "guard.h"
#include "log.h"
#include "repo.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ACTIVATE_MAX_BODY 4096

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The active version of model name; 0 when it has none. */
static uint64_t active_of(server_t *srv, const char *name)
{
    uint64_t v = 0;
    server_model_t *sm = server_model_acquire_named(srv, name);
    if (sm) {
        v = model_meta(sm->model)->version;
        server_model_release(sm);
    }
    return v;
}

/* j with "marks_kept" (repo_marks_kept) when the repository serves name:
 * false tells the caller that a restart would not keep what it just did. */
static json_t *with_marks(json_t *j, const char *name)
{
    int kept = repo_marks_kept(name);
    if (j && kept >= 0)
        json_object_set_new(j, "marks_kept", json_boolean(kept));
    return j;
}

/* 1 when a load of name (admin or watcher) is queued or running, with its
 * version in *version (0 when unknown). */
static int load_under_way(const char *name, uint64_t *version)
{
    if (repo_loading(name, version))
        return 1;
    loader_status_t st;
    if (loader_status(name, &st) == 0 && st.finished_ns == 0) {
        *version = st.version;
        return 1;
    }
    return 0;
}

void admin__on_rollback(server_t *srv, struct evhttp_request *req, const char *name)
{
    if (admin__check_auth(req) != 0)
        return;
    uint64_t av = active_of(srv, name);
    if (av == 0) {
        admin__reply_error(req, 404, "model '%s' has no active version on this server", name);
        return;
    }
    uint64_t busy;
    if (load_under_way(name, &busy)) {
        admin__reply_error(req, 409,
                           "a load of model '%s' (version %" PRIu64 ") is under way: its swap "
                           "would undo the rollback; retry when it has ended",
                           name, busy);
        return;
    }
    uint64_t from = 0, to = 0, t0 = now_ns();
    int rc = server_model_rollback(srv, name, &from, &to);
    uint64_t swap_us = (now_ns() - t0) / 1000u;
    if (rc == -ESRCH) {
        LOG(LL_WARN, "admin: rollback of %s refused: nothing to roll back to", name);
        admin__reply_error(req, 409,
                           "nothing to roll back to: no earlier version of model '%s' is kept "
                           "loaded (--keep-versions %d); activate a version instead",
                           name, srv->cfg.keep_versions);
        return;
    }
    if (rc != 0) {
        admin__reply_error(req, 404, "model '%s' has no active version on this server", name);
        return;
    }
    repo_rolled_back(name, from, to); /* -ENOENT without a repository: nothing to record */
    LOG(LL_INFO, "admin: %s rolled back from version %" PRIu64 " to %" PRIu64 " (%" PRIu64 " us)",
        name, from, to, swap_us);
    admin__reply_json(req, 200,
                      with_marks(json_pack("{s:s, s:I, s:I, s:I}", "model", name, "version",
                                           (json_int_t)to, "rolled_back", (json_int_t)from,
                                           "swap_us", (json_int_t)swap_us),
                                 name));
}

/* {"version": N, "reason": "..."} of :refuse: 0 with *v and why (printable
 * ASCII, at most 200 bytes; "" when absent), -1 after a 400. */
static int parse_refuse(struct evhttp_request *req, uint64_t *v, char why[201])
{
    char body[ACTIVATE_MAX_BODY + 1];
    long len = admin__body(req, body, ACTIVATE_MAX_BODY);
    if (len < 0)
        return -1;
    json_error_t jerr;
    json_t *j = json_loadb(body, (size_t)len, JSON_REJECT_DUPLICATES, &jerr);
    json_t *jv = json_is_object(j) ? json_object_get(j, "version") : NULL;
    json_t *jr = json_is_object(j) ? json_object_get(j, "reason") : NULL;
    const char *r = json_is_string(jr) ? json_string_value(jr) : "";
    bool ok = json_is_integer(jv) && json_integer_value(jv) > 0 && (!jr || json_is_string(jr)) &&
              strlen(r) <= 200;
    for (const char *c = r; ok && *c; c++)
        ok = *c >= 0x20 && *c < 0x7f;
    if (ok) {
        *v = (uint64_t)json_integer_value(jv);
        snprintf(why, 201, "%s", r);
    }
    json_decref(j);
    if (!ok)
        admin__reply_error(req, 400,
                           "body must be {\"version\": N} (N > 0) with an optional \"reason\" "
                           "(at most 200 printable ASCII characters)%s%s",
                           j ? "" : "; it is not JSON: ", j ? "" : jerr.text);
    return ok ? 0 : -1;
}

void admin__on_refuse(server_t *srv, struct evhttp_request *req, const char *name)
{
    if (admin__check_auth(req) != 0)
        return;
    uint64_t version;
    char why[201];
    if (parse_refuse(req, &version, why) != 0)
        return;
    repo_status_t *rs = malloc(sizeof *rs);
    if (!rs) {
        admin__reply_error(req, 503, "no memory");
        return;
    }
    bool in_repo = repo_get_status(name, rs) == 0;
    free(rs);
    if (!in_repo) {
        admin__reply_error(req, 404,
                           "model '%s' is not served from a repository: refusing a version needs "
                           "--model-repo (roll back or load another version instead)",
                           name);
        return;
    }
    uint64_t busy;
    if (load_under_way(name, &busy) && busy == version) {
        admin__reply_error(req, 409,
                           "version %" PRIu64 " of model '%s' is loading: retry when the load has "
                           "ended",
                           version, name);
        return;
    }
    uint64_t to = 0;
    if (active_of(srv, name) == version) {
        uint64_t from;
        int rc = server_model_rollback(srv, name, &from, &to);
        if (rc != 0) {
            admin__reply_error(req, 409,
                               "version %" PRIu64 " of model '%s' is active and no earlier "
                               "version is kept loaded to take its place: activate another "
                               "version first",
                               version, name);
            return;
        }
    } else {
        (void)server_model_drop_kept(srv, name, version); /* -ESRCH: not kept, fine */
    }
    repo_refuse(name, version, why);
    LOG(LL_INFO, "admin: %s version %" PRIu64 " refused%s%s%s", name, version,
        to ? " (rolled back to its kept version)" : "", why[0] ? ": " : "", why);
    admin__reply_json(req, 200,
                      with_marks(json_pack("{s:s, s:I, s:b, s:I}", "model", name, "version",
                                           (json_int_t)version, "refused", 1, "rolled_back_to",
                                           (json_int_t)to),
                                 name));
}

/* {"version": N} -> 1 with *v, {"version": "latest"} -> 0; -1 after a 400.
 * "force": true (with N) skips the validation gate of a load it starts. */
static int parse_activate(struct evhttp_request *req, uint64_t *v, bool *force)
{
    char body[ACTIVATE_MAX_BODY + 1];
    long len = admin__body(req, body, ACTIVATE_MAX_BODY);
    if (len < 0)
        return -1;
    json_error_t jerr;
    json_t *j = json_loadb(body, (size_t)len, JSON_REJECT_DUPLICATES, &jerr);
    json_t *jv = json_is_object(j) ? json_object_get(j, "version") : NULL;
    json_t *jf = json_is_object(j) ? json_object_get(j, "force") : NULL;
    int rc = -1;
    if (json_is_integer(jv) && json_integer_value(jv) > 0) {
        *v = (uint64_t)json_integer_value(jv);
        rc = 1;
    } else if (json_is_string(jv) && strcmp(json_string_value(jv), "latest") == 0) {
        rc = 0;
    }
    if (jf && !json_is_boolean(jf))
        rc = -1;
    *force = jf && json_is_true(jf);
    json_decref(j);
    if (rc < 0)
        admin__reply_error(req, 400,
                           "body must be {\"version\": N} (N > 0) or {\"version\": \"latest\"}, "
                           "and \"force\", when given, true or false (true skips the validation "
                           "gate of the load it starts)%s%s",
                           j ? "" : "; it is not JSON: ", j ? "" : jerr.text);
    return rc;
}

void admin__on_activate(server_t *srv, struct evhttp_request *req, const char *name)
{
    if (admin__check_auth(req) != 0)
        return;
    uint64_t version = 0;
    bool force = false;
    int which = parse_activate(req, &version, &force);
    if (which < 0)
        return;
    uint64_t av = active_of(srv, name);
    repo_status_t *rs = malloc(sizeof *rs);
    if (!rs) {
        admin__reply_error(req, 503, "no memory");
        return;
    }
    bool in_repo = repo_get_status(name, rs) == 0 && strcmp(rs->model, name) == 0;
    char dir[sizeof rs->dir];
    snprintf(dir, sizeof dir, "%s", rs->dir);
    free(rs);
    if (!in_repo && av == 0) {
        admin__reply_error(req, 404, "model '%s' is neither active nor served from a repository",
                           name);
        return;
    }
    if (which == 0) {
        if (in_repo)
            repo_unpin(name);
        admin__reply_json(req, 200,
                          with_marks(json_pack("{s:s, s:b}", "model", name, "pinned", 0), name));
        return;
    }
    if (!in_repo) {
        uint64_t from;
        if (server_model_activate_kept(srv, name, version, &from) != 0) {
            admin__reply_error(req, 404,
                               "version %" PRIu64 " of model '%s' is not kept loaded (and there "
                               "is no --model-repo to load it from)",
                               version, name);
            return;
        }
        admin__reply_json(req, 200,
                          json_pack("{s:s, s:I, s:b}", "model", name, "version",
                                    (json_int_t)version, "pinned", 0));
        return;
    }
    loader_status_t st;
    int rc = repo_activate(name, version, force, &st);
    if (rc == 0) {
        LOG(LL_INFO, "admin: %s version %" PRIu64 " active and pinned", name, version);
        admin__reply_json(req, 200,
                          with_marks(json_pack("{s:s, s:I, s:b}", "model", name, "version",
                                               (json_int_t)version, "pinned", 1),
                                     name));
    } else if (rc == 1) {
        char status[128];
        snprintf(status, sizeof status, "/v1/models/%s:load", name);
        evhttp_add_header(evhttp_request_get_output_headers(req), "Location", status);
        admin__reply_json(req, 202,
                          with_marks(json_pack("{s:s, s:I, s:I, s:s, s:s, s:b}", "model", name,
                                               "version", (json_int_t)version, "load",
                                               (json_int_t)st.id, "state",
                                               loader_state_name(st.state), "status", status,
                                               "pinned", 1),
                                     name));
    } else if (rc == -ENOENT) {
        admin__reply_error(req, 404,
                           "version %" PRIu64 " of model '%s' is not in the repository %s", version,
                           name, dir);
    } else if (rc == -EBUSY) {
        admin__reply_error(req, 409,
                           "a load of another version of model '%s' is under way; "
                           "retry when it has ended",
                           name);
    } else if (rc == -EAGAIN) {
        admin__reply_error(req, 503, "the load queue is full (limit %d loads waiting); retry later",
                           LOADER_QUEUE_MAX);
    } else {
        admin__reply_error(req, 503, "cannot activate version %" PRIu64 " of model '%s': %s",
                           version, name, strerror(-rc));
    }
}

/* One row of the versions list. */
typedef struct row {
    uint64_t version;
    const char *state;
    const char *reason; /* NULL: none */
} row_t;

static row_t *row_of(row_t *rows, size_t *n, uint64_t version)
{
    for (size_t i = 0; i < *n; i++)
        if (rows[i].version == version)
            return &rows[i];
    rows[*n] = (row_t){version, "retired", NULL};
    return &rows[(*n)++];
}

static int by_version_desc(const void *a, const void *b)
{
    uint64_t x = ((const row_t *)a)->version, y = ((const row_t *)b)->version;
    return x < y ? 1 : x > y ? -1 : 0;
}

void admin__on_versions(server_t *srv, struct evhttp_request *req, const char *name)
{
    uint64_t av = active_of(srv, name);
    bool is_active = av != 0;
    repo_status_t *rs = malloc(sizeof *rs);
    uint64_t *listing = NULL;
    row_t *rows = NULL;
    if (!rs)
        goto nomem;
    bool in_repo = repo_get_status(name, rs) == 0 && strcmp(rs->model, name) == 0;
    if (!in_repo && !is_active) {
        admin__reply_error(req, 404, "model '%s' is neither active nor served from a repository",
                           name);
        goto out;
    }
    long nl = 0;
    if (in_repo) {
        size_t cap = REPO_VERSIONS_START;
        for (;;) {
            free(listing);
            listing = malloc(cap * sizeof *listing);
            if (!listing)
                goto nomem;
            nl = repo_list_versions(name, listing, cap);
            if (nl < 0 || (size_t)nl <= cap)
                break;
            cap = (size_t)nl + 256;
        }
        if (nl < 0)
            nl = 0; /* unreadable: the loaded versions are still listed */
    }
    server_kept_t kept[SERVER_KEPT_MAX];
    size_t nk = server_model_standby(srv, kept, SERVER_KEPT_MAX);
    if (nk > SERVER_KEPT_MAX)
        nk = SERVER_KEPT_MAX;
    size_t max = (size_t)nl + nk + 2 + REPO_REFUSED_MAX + REPO_ROLLED_BACK_MAX, n = 0;
    rows = calloc(max, sizeof *rows);
    if (!rows)
        goto nomem;
    for (long i = 0; i < nl; i++)
        row_of(rows, &n, listing[i]);
    /* Lowest precedence first: each later line overrides the state. */
    if (in_repo) {
        for (unsigned i = 0; i < rs->n_refused; i++) {
            row_t *r = row_of(rows, &n, rs->refused[i].version);
            r->state = "refused";
            r->reason = rs->refused[i].error;
        }
        for (unsigned i = 0; i < rs->n_rolled_back; i++) {
            row_t *r = row_of(rows, &n, rs->rolled_back[i]);
            r->state = "rolled_back";
            r->reason = "rolled back by the admin API or the guard (the log says which)";
        }
    }
    for (size_t i = 0; i < nk; i++)
        if (strcmp(kept[i].name, name) == 0)
            row_of(rows, &n, kept[i].version)->state = "standby";
    uint64_t lv;
    loader_status_t ls;
    if (load_under_way(name, &lv) && lv)
        row_of(rows, &n, lv)->state =
            loader_status(name, &ls) == 0 && ls.finished_ns == 0 && ls.version == lv &&
                    ls.state == LOADER_VALIDATING
                ? "validating" /* loaded, in the gate */
                : "loading";
    if (is_active) {
        row_t *r = row_of(rows, &n, av);
        r->state = "active";
        r->reason = NULL;
    }
    qsort(rows, n, sizeof *rows, by_version_desc);
    json_t *list = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *o =
            json_pack("{s:I, s:s}", "version", (json_int_t)rows[i].version, "state", rows[i].state);
        if (rows[i].reason)
            json_object_set_new(o, "reason", json_string(rows[i].reason));
        json_array_append_new(list, o);
    }
    json_t *guard = admin__guard_json(name);
    uint64_t pinned = in_repo ? rs->pinned : 0;
    json_t *body =
        json_pack("{s:s, s:b, s:i, s:b, s:o}", "model", name, "pinned", pinned != 0,
                  "keep_versions", srv->cfg.keep_versions, "repository", in_repo, "versions", list);
    if (pinned)
        json_object_set_new(body, "pinned_version", json_integer((json_int_t)pinned));
    body = with_marks(body, name);
    if (guard)
        json_object_set_new(body, "guard", guard);
    admin__reply_json(req, 200, body);
    goto out;
nomem:
    admin__reply_error(req, 503, "no memory to list the versions");
out:
    free(rows);
    free(listing);
    free(rs);
}

/* A double as JSON: null when not finite (NaN: unknown; Inf: a zero mean). */
static json_t *num(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

json_t *admin__guard_json(const char *name)
{
    guard_status_t st;
    guard_get_status(name, &st);
    if (!st.enabled)
        return NULL;
    json_t *g = json_pack("{s:s}", "state", guard_state_name(st.state));
    if (st.state == GUARD_IDLE)
        return g;
    json_object_set_new(g, "version", json_integer((json_int_t)st.version));
    if (st.state == GUARD_WATCHING)
        json_object_set_new(g, "remaining_ms", json_integer((json_int_t)st.remaining_ms));
    if (st.state == GUARD_ROLLED_BACK)
        json_object_set_new(g, "rolled_back_to", json_integer((json_int_t)st.rolled_back_to));
    json_object_set_new(g, "requests", json_integer((json_int_t)st.counts.requests));
    json_object_set_new(g, "failed", json_integer((json_int_t)st.counts.failed));
    json_object_set_new(g, "error_rate", num(st.last.error_rate));
    json_object_set_new(g, "mean", num(st.last.mean));
    json_object_set_new(g, "baseline_mean", num(st.last.base_mean));
    json_object_set_new(g, "mean_ratio", num(st.last.ratio));
    if (st.last.why[0])
        json_object_set_new(g, "reason", json_string(st.last.why));
    json_object_set_new(g, "rollbacks", json_integer((json_int_t)st.rollbacks));
    return g;
}
