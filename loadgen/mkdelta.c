/*
 * mkdelta.c — writes a delta version of a synthetic model (tlsynth model)
 * quickly, without loading the parent: the reload benchmark
 * (loadgen/reload_bench.sh) needs ten deltas of 1% of a 100M-key model and
 * must not hold the model twice to make them.
 *
 *   mkdelta --parent DIR --out DIR --keys N [--seed S] --seq D
 *           [--upserts U] [--inserts I] [--deletes X] [--version V] [--value-seed Z]
 *
 * THE KEYS.  tlsynth model made key i = store_synthetic_key(i, S) for
 * i < N.  The deltas of one series are numbered D = 1, 2, ... in the order
 * they are applied (a full version compacted from base + delta 1 counts as
 * having applied delta 1), and delta D
 *   - deletes X keys:  i in [N - D*X, N - (D-1)*X)  (a block no earlier
 *     delta deleted, so every delete names a key the parent holds);
 *   - upserts U keys:  U distinct i spread over [0, N - D*X) (stride
 *     floor(L/U) from a start that depends on D): existing keys, new values;
 *   - inserts I keys:  i in [N + (D-1)*I, N + D*I): keys no version held.
 * Values are K draws ~N(0, 0.1) (four 16-bit uniforms, as tlsynth) from a
 * PRNG seeded by (key, D, Z): a different value for every delta.
 *
 * THE LAYOUT.  A delta must match its parent's name, kind, K, dtype and
 * shard count: they come from the parent, a delta (opened and verified) or
 * a full version (its manifest alone: store_snapshot_read_layout).
 *
 * The version defaults to the parent's + 1 and must be above the parent's
 * (a delta goes forward, as tlsnap diff insists).  The delta is written with
 * store_delta_begin/put/del/commit: to a temporary name, renamed in whole.
 * Exit status: 0 written, 1 failed (message on stderr), 2 usage error.
 * Prints one line: "mkdelta: DIR: version V (parent P): U upserts, I inserts,
 * X deletes in T s".
 */
#define _GNU_SOURCE
#include "store/cli.h"
#include "store/delta.h"
#include "store/store.h"
#include "store/synthetic.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: mkdelta --parent DIR --out DIR --keys N --seq D [options]\n"
    "  --parent DIR      the parent version (full or delta) of a tlsynth model\n"
    "  --out DIR         the delta's directory, e.g. REPO/MODEL/VERSION (must not exist)\n"
    "  --keys N          the tlsynth model's --keys (k/M/G suffixes)\n"
    "  --seed S          the tlsynth model's --seed (default 42)\n"
    "  --seq D           this delta's number in its series, 1.. (chooses disjoint deletes\n"
    "                    and inserts; see loadgen/mkdelta.c)\n"
    "  --upserts U       existing keys given new values (default N/100)\n"
    "  --inserts I       new keys (default U/100)\n"
    "  --deletes X       keys removed (default U/100)\n"
    "  --version V       the delta's version, above the parent's (default: its + 1)\n"

    "  --value-seed Z    seed of the new values (default 7)\n";

static void gen_value(uint64_t key, uint64_t seq, uint64_t zseed, uint32_t k, float *out)
{
    uint64_t st = key ^ store_mix64(seq * STORE_PHI ^ store_mix64(zseed ^ 0xde17a));
    for (uint32_t j = 0; j < k; j++) {
        uint64_t r = store_splitmix64(&st);
        double s = (double)(r & 0xffff) + (double)((r >> 16) & 0xffff) +
                   (double)((r >> 32) & 0xffff) + (double)(r >> 48);
        /* sum of 4 U(0, 65536): mean 131070, sd 65536 * sqrt(4/12) */
        out[j] = (float)((s - 131070.0) / (65536.0 * 0.5773502691896258) * 0.1);
    }
}

int main(int argc, char **argv)
{
    const store_cli_usage_t U = {"mkdelta", usage_text};
    const char *parent = NULL, *out = NULL, *v;
    uint64_t keys = 0, seed = 42, seq = 0, ups = UINT64_MAX, ins = UINT64_MAX, dels = UINT64_MAX;
    uint64_t version = 0, zseed = 7;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage_text, stdout);
            return 0;
        } else if (store_cli_flag(&U, argc, argv, &i, "--parent", &v)) {
            parent = v;
        } else if (store_cli_flag(&U, argc, argv, &i, "--out", &v)) {
            out = v;
        } else if (store_cli_flag(&U, argc, argv, &i, "--keys", &v)) {
            keys = store_cli_count_arg(&U, "--keys", v, 1, UINT64_C(1) << 40);
        } else if (store_cli_flag(&U, argc, argv, &i, "--seed", &v)) {
            seed = store_cli_count_arg(&U, "--seed", v, 0, UINT64_MAX);
        } else if (store_cli_flag(&U, argc, argv, &i, "--seq", &v)) {
            seq = store_cli_count_arg(&U, "--seq", v, 1, 1000000);
        } else if (store_cli_flag(&U, argc, argv, &i, "--upserts", &v)) {
            ups = store_cli_count_arg(&U, "--upserts", v, 0, UINT64_C(1) << 40);
        } else if (store_cli_flag(&U, argc, argv, &i, "--inserts", &v)) {
            ins = store_cli_count_arg(&U, "--inserts", v, 0, UINT64_C(1) << 40);
        } else if (store_cli_flag(&U, argc, argv, &i, "--deletes", &v)) {
            dels = store_cli_count_arg(&U, "--deletes", v, 0, UINT64_C(1) << 40);
        } else if (store_cli_flag(&U, argc, argv, &i, "--version", &v)) {
            version = store_cli_count_arg(&U, "--version", v, 1, UINT64_MAX);
        } else if (store_cli_flag(&U, argc, argv, &i, "--value-seed", &v)) {
            zseed = store_cli_count_arg(&U, "--value-seed", v, 0, UINT64_MAX);
        } else {
            store_cli_usage_error(&U, "unknown argument '%s'", argv[i]);
        }
    }
    if (!parent || !out || !keys || !seq)
        store_cli_usage_error(&U, "--parent, --out, --keys and --seq are required");
    if (ups == UINT64_MAX)
        ups = keys / 100;
    if (ins == UINT64_MAX)
        ins = ups / 100;
    if (dels == UINT64_MAX)
        dels = ups / 100;
    /* deletes of deltas 1..seq come off the top: they must leave room for the upserts */
    if (dels > 0 && seq > (keys - 1) / dels)
        store_cli_usage_error(&U, "--seq %" PRIu64 " x --deletes %" PRIu64 " reaches past --keys",
                              seq, dels);
    uint64_t live = keys - seq * dels; /* indices [0, live) hold keys no delete removed */
    if (ups > live)
        store_cli_usage_error(
            &U, "--upserts %" PRIu64 " is more than the %" PRIu64 " keys left to upsert", ups,
            live);

    /* the parent's layout and version */
    store_delta_layout_t lay;
    store_meta_t meta;
    store_error_t err = {0};
    memset(&lay, 0, sizeof lay);
    store_delta_t *pd = NULL;
    int e = store_delta_open(parent, &pd, &err);
    if (e == 0) {
        const store_delta_info_t *info = store_delta_info(pd);
        lay = info->layout;
        meta = info->meta;
        store_delta_close(pd);
    } else {
        uint64_t entries = 0;
        store_error_t err2 = {0};
        if (store_snapshot_read_layout(parent, &lay, &meta, &entries, &err2) != 0) {
            /* neither a delta nor a full version: say why each reader refused it */
            store_cli_print_error("mkdelta (as a full version)", parent, &err2);
            store_cli_print_error("mkdelta (as a delta)", parent, &err);
            return 1;
        }
        if (entries < keys - (seq - 1) * dels)
            fprintf(stderr,
                    "mkdelta: warning: %s holds %" PRIu64 " keys, fewer than --keys "
                    "minus earlier deletes: is --keys the tlsynth model's?\n",
                    parent, entries);
    }
    if (version == 0)
        version = meta.version + 1;
    if (version <= meta.version)
        store_cli_usage_error(&U, "--version %" PRIu64 " is not above the parent's %" PRIu64
                              ": a delta goes forward", version, meta.version);

    double t0 = store_cli_now_sec();
    store_delta_writer_t *w = NULL;
    e = store_delta_begin(out, &lay, meta.version, version, "mkdelta", &w, &err);
    if (e != 0) {
        store_cli_print_error("mkdelta", out, &err);
        return 1;
    }
    float *val = malloc(sizeof(float) * lay.value_floats);
    if (!val) {
        store_delta_abort(w);
        fputs("mkdelta: out of memory\n", stderr);
        return 1;
    }
    uint64_t step = ups ? live / ups : 1, start = ups ? store_mix64(seq ^ zseed) % live : 0;
    for (uint64_t t = 0; t < ups && e == 0; t++) {
        uint64_t key = store_synthetic_key((start + t * step) % live, seed);
        gen_value(key, seq, zseed, lay.value_floats, val);
        e = store_delta_put(w, key, val);
    }
    for (uint64_t t = 0; t < ins && e == 0; t++) {
        uint64_t key = store_synthetic_key(keys + (seq - 1) * ins + t, seed);
        gen_value(key, seq, zseed, lay.value_floats, val);
        e = store_delta_put(w, key, val);
    }
    for (uint64_t t = 0; t < dels && e == 0; t++)
        e = store_delta_del(w, store_synthetic_key(live + t, seed));
    free(val);
    if (e != 0) {
        store_delta_abort(w);
        fprintf(stderr, "mkdelta: recording the changes failed: %s\n", strerror(-e));
        return 1;
    }
    if (store_delta_commit(w, &err) != 0) {
        store_cli_print_error("mkdelta", out, &err);
        return 1;
    }
    printf("mkdelta: %s: version %" PRIu64 " (parent %" PRIu64 "): %" PRIu64 " upserts, %" PRIu64
           " inserts, %" PRIu64 " deletes in %.2f s\n",
           out, version, meta.version, ups, ins, dels, store_cli_now_sec() - t0);
    return 0;
}
