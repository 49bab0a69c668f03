/*
 * extras.c — building and reading a store_extras_t (store.h): the named
 * hyper-parameters and dense arrays a snapshot carries beside its sparse
 * table.  Writing and loading them is snapshot_write.c's and
 * snapshot_meta.c's job; this file only keeps the table well formed, with
 * the same rules manifest.cc enforces on disk, so that a writer learns
 * about a bad key when it sets it, not when the snapshot is half written.
 *
 * THREAD SAFETY: plain functions on caller-owned structs.
 */
#include "store.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static bool name_ok(const char *s, size_t max)
{
    size_t n = strnlen(s, max + 1);
    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '.' || c == '-';
        if (!ok)
            return false;
    }
    return true;
}

static bool value_ok(const char *s)
{
    size_t n = strnlen(s, STORE_PARAM_VALUE_MAX);
    if (n >= STORE_PARAM_VALUE_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
            return false;
    return true;
}

int store_extras_set(store_extras_t *x, const char *key, const char *value)
{
    if (!x || !key || !value || !name_ok(key, STORE_PARAM_KEY_MAX - 1) || !value_ok(value))
        return -EINVAL;
    uint32_t i = 0;
    while (i < x->n_params && strcmp(x->params[i].key, key) != 0)
        i++;
    if (i == x->n_params) {
        if (x->n_params == STORE_MAX_PARAMS)
            return -EINVAL;
        x->n_params++;
    }
    memset(&x->params[i], 0, sizeof x->params[i]);
    strcpy(x->params[i].key, key);     /* lengths checked above */
    strcpy(x->params[i].value, value);
    return 0;
}

const char *store_extras_get(const store_extras_t *x, const char *key)
{
    for (uint32_t i = 0; x && key && i < x->n_params && i < STORE_MAX_PARAMS; i++)
        if (strncmp(x->params[i].key, key, STORE_PARAM_KEY_MAX) == 0)
            return x->params[i].value;
    return NULL;
}

int store_extras_add_dense(store_extras_t *x, const char *name, const float *data, uint64_t count)
{
    if (!x || !name || !data || count == 0 || count > STORE_DENSE_MAX_FLOATS ||
        !name_ok(name, STORE_DENSE_NAME_MAX - 1) || x->n_dense == STORE_MAX_DENSE ||
        store_extras_dense(x, name))
        return -EINVAL;
    store_dense_t *d = &x->dense[x->n_dense++];
    memset(d, 0, sizeof *d);
    strcpy(d->name, name);
    d->data = (float *)data; /* borrowed; store_extras_free is only for loaded extras */
    d->count = count;
    return 0;
}

const store_dense_t *store_extras_dense(const store_extras_t *x, const char *name)
{
    for (uint32_t i = 0; x && name && i < x->n_dense && i < STORE_MAX_DENSE; i++)
        if (strncmp(x->dense[i].name, name, STORE_DENSE_NAME_MAX) == 0)
            return &x->dense[i];
    return NULL;
}

void store_extras_free(store_extras_t *x)
{
    if (!x)
        return;
    for (uint32_t i = 0; i < x->n_dense && i < STORE_MAX_DENSE; i++)
        free(x->dense[i].data);
    memset(x, 0, sizeof *x);
}
