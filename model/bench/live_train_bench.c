/*
 * live_train_bench.c — the server's online trainer without the server: a
 * trainer of one kind (--model lr|fm|ffm|dnn) learning frames of the
 * standard request's shape into a served store, as server/online_trainer.c
 * drives it (train_create, train_attach_live_model, then train_update over
 * a frame's items), on one thread.
 *
 *   live_train_bench [--model lr|fm|ffm|dnn] [--keys 10000000] [--frames 16]
 *                    [--shared 300] [--items 100] [--item-ids 200] [--seconds 5]
 *                    [--optimizer ftrl|adagrad|sgd] [--k N] [--fields 8] [--dim 8]
 *                    [--hidden 64,32] [--no-live]
 *
 * The served store holds --keys synthetic keys (store/synthetic.h, as
 * tlsynth makes them), each with a serving row of the kind's width: LR one
 * float, FM 1 + k (--k, 8), FFM 1 + F k (--fields F, 8; --k, 4), DNN
 * 1 + d (--fields F, 8; --dim d, 8) with a served MLP of --hidden layers
 * (64,32) that the trainer copies and freezes, as it does online.  The
 * optimizer is the kind's tuned one (FTRL for LR, Adagrad for the others)
 * unless --optimizer says; the DNN's sparse part has Adagrad only.
 * --frames distinct frames, each a shared block of --shared ids and --items
 * item blocks of --item-ids ids, all drawn uniformly from the model's keys
 * (ids sorted in a block, as a TRAIN frame holds them), are learned
 * round-robin for --seconds (after one untimed round: the state's inserts).
 *
 * Figures, each in feature updates per second (shared + item ids per item;
 * the bias not counted), each measured for --seconds:
 *   live KIND-OPT  the trainer: the figure loadgen/online_bench.py measures
 *                  through a real server, with no decoding, queueing or
 *                  serving beside it.  --no-live trains the trainer's own
 *                  state only (tltrain's loop) on the same frames.
 *   floor          only the writes into the served store that any trainer
 *                  writing it makes (each item's ids, and the shared block's
 *                  once a frame; rows of the kind's width), in the same
 *                  pipelined batches: random writes into a table larger
 *                  than the caches, the part no trainer design removes.
 *   two tables     (LR) the floor plus, per id, a find-or-insert of its row
 *                  in a private store as wide as the trainer's state (FTRL:
 *                  [z | n | w]), the row read and written, no optimizer
 *                  arithmetic: the memory cost any trainer whose state is
 *                  apart from the served model pays.
 * The trainer over each floor is the ratio to quote.  A benchmark: never
 * fails on timing.
 *
 * THREAD SAFETY: a program; single-threaded.
 */
#include "model/train.h"
#include "store/synthetic.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* What the command line asked for; 0 in k means the kind's default. */
struct cli {
    store_model_kind_t kind;
    train_optimizer_t opt;
    int opt_given, live;
    long keys, frames, shared_n, items, item_n;
    double seconds;
    long k, fields, dim;
    uint32_t n_hidden, hidden[DNN_MAX_LAYERS - 1];
};

/* The frames learned round-robin: frames x (1 + items) blocks, the shared
 * block first in each frame. */
struct frames {
    codec_block_t *blocks;
    uint64_t *ids;
    float *labels, *p;
    long n, items;
    double feats_per_frame; /* items x (shared + item ids) */
};

/* A timed run: frames done in dt seconds. */
struct rate {
    uint64_t done;
    double dt;
};

static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double per_sec(const struct frames *fr, struct rate r)
{
    return (double)r.done * fr->feats_per_frame / r.dt;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* A uniform double in [-0.5, 0.5). */
static double centred(uint64_t *rng)
{
    return (double)(store_splitmix64(rng) >> 11) / 9007199254740992.0 - 0.5;
}

/* n distinct keys of the model drawn uniformly, sorted. */
static void draw_block(uint64_t *out, uint32_t n, uint64_t keys, uint64_t *rng)
{
    for (uint32_t i = 0; i < n;) {
        uint64_t k = store_synthetic_key(store_splitmix64(rng) % keys, 42);
        uint32_t j = 0;
        while (j < i && out[j] != k)
            j++;
        if (j == i)
            out[i++] = k;
    }
    qsort(out, n, sizeof *out, cmp_u64);
}

static long arg_long(const char *opt, const char *s, long lo, long hi)
{
    char *e;
    long v = strtol(s, &e, 10);
    if (*e || e == s || v < lo || v > hi) {
        fprintf(stderr, "live_train_bench: --%s: '%s' is not a number in %ld..%ld\n", opt, s,
                lo, hi);
        exit(2);
    }
    return v;
}

static double arg_double(const char *opt, const char *s, double lo, double hi)
{
    char *e;
    double v = strtod(s, &e);
    if (*e || e == s || !(v >= lo && v <= hi)) {
        fprintf(stderr, "live_train_bench: --%s: '%s' is not a number in %g..%g\n", opt, s, lo,
                hi);
        exit(2);
    }
    return v;
}

/* "64,32" -> the DNN's hidden widths ("" = none). */
static void arg_hidden(const char *s, struct cli *c)
{
    c->n_hidden = 0;
    while (*s) {
        if (c->n_hidden == DNN_MAX_LAYERS - 1) {
            fprintf(stderr, "live_train_bench: --hidden: more than %d layers\n",
                    DNN_MAX_LAYERS - 1);
            exit(2);
        }
        char *e;
        long v = strtol(s, &e, 10);
        if (e == s || v < 1 || v > DNN_MAX_WIDTH || (*e && *e != ',')) {
            fprintf(stderr, "live_train_bench: --hidden: '%s' is not widths in 1..%d, "
                            "comma-separated\n", s, DNN_MAX_WIDTH);
            exit(2);
        }
        c->hidden[c->n_hidden++] = (uint32_t)v;
        s = *e ? e + 1 : e;
    }
}

static const char *kind_upper(store_model_kind_t kind)
{
    switch (kind) {
    case STORE_MODEL_LR: return "LR";
    case STORE_MODEL_FM: return "FM";
    case STORE_MODEL_FFM: return "FFM";
    case STORE_MODEL_DNN: return "DNN";
    default: return "?";
    }
}

/* The trainer's options for c, as the server's options_for makes them from
 * a served model of that shape.  0, or -1 with a sentence on stderr. */
static int options_for(const struct cli *c, train_options_t *o)
{
    if (train_defaults(c->kind, c->opt, o) != 0)
        return -1;
    switch (c->kind) {
    case STORE_MODEL_LR:
        return 0;
    case STORE_MODEL_FM:
        o->fm.k = (uint32_t)(c->k ? c->k : 8);
        return 0;
    case STORE_MODEL_FFM:
        o->ffm.optimizer = c->opt;
        o->ffm.fields = (uint32_t)c->fields;
        o->ffm.k = (uint32_t)(c->k ? c->k : 4);
        return 0;
    case STORE_MODEL_DNN:
        if (c->opt != TRAIN_ADAGRAD) {
            fprintf(stderr, "live_train_bench: the DNN's sparse part learns with adagrad only\n");
            return -1;
        }
        o->dnn.fields = (uint32_t)c->fields;
        o->dnn.dim = (uint32_t)c->dim;
        o->dnn.n_hidden = c->n_hidden;
        memcpy(o->dnn.hidden, c->hidden, sizeof o->dnn.hidden);
        return 0;
    default:
        return -1;
    }
}

/* Floats of the kind's serving row (train.h: train_attach_live). */
static uint32_t served_width(const train_options_t *o)
{
    switch (o->kind) {
    case STORE_MODEL_FM: return 1 + o->fm.k;
    case STORE_MODEL_FFM: return 1 + o->ffm.fields * o->ffm.k;
    case STORE_MODEL_DNN: return 1 + o->dnn.dim;
    default: return 1;
    }
}

/* The served store: keys synthetic keys, rows of K floats; LR's weight
 * uniform in [-0.5, 0.5), the wider kinds' floats in [-0.01, 0.01) (sane
 * margins over hundreds of factors).  NULL on failure. */
static store_t *make_served(uint64_t keys, uint32_t K, uint64_t *rng)
{
    store_t *s = NULL;
    store_options_t so = {.value_floats = K, .expected_keys = keys};
    if (store_create(&so, &s) != 0)
        return NULL;
    float row[STORE_MAX_VALUE_FLOATS];
    double scale = K == 1 ? 1.0 : 0.02;
    for (uint64_t i = 0; i < keys; i++) {
        for (uint32_t f = 0; f < K; f++)
            row[f] = (float)(centred(rng) * scale);
        if (store_upsert(s, store_synthetic_key(i, 42), row) < 0) {
            store_destroy(s);
            return NULL;
        }
    }
    return s;
}

/* A served DNN's MLP of the trainer's shape (uniform weights of scale
 * 1/sqrt(fan-in)), in extras x that borrow *mem (free it after the
 * attach, which copies).  0, or -1. */
static int make_mlp(const train_dnn_options_t *d, uint64_t *rng, store_extras_t *x, float **mem)
{
    dnn_net_t net = {.fields = d->fields, .dim = d->dim, .wide = d->wide,
                     .n_layers = d->n_hidden + 1};
    net.width[0] = d->fields * d->dim;
    for (uint32_t l = 0; l < d->n_hidden; l++)
        net.width[l + 1] = d->hidden[l];
    net.width[net.n_layers] = 1;
    size_t total = 0;
    for (uint32_t l = 0; l < net.n_layers; l++)
        total += (size_t)net.width[l] * net.width[l + 1] + net.width[l + 1];
    float *a = malloc(total * sizeof *a);
    if (!a)
        return -1;
    float *at = a;
    for (uint32_t l = 0; l < net.n_layers; l++) {
        size_t nw = (size_t)net.width[l] * net.width[l + 1];
        double scale = 2.0 / sqrt((double)net.width[l]);
        for (size_t i = 0; i < nw + net.width[l + 1]; i++)
            at[i] = i < nw ? (float)(centred(rng) * scale) : 0.0f;
        net.W[l] = at;
        net.b[l] = at + nw;
        at += nw + net.width[l + 1];
    }
    *x = (store_extras_t){0};
    if (model_dnn_net_to_extras(&net, x) != 0) {
        free(a);
        return -1;
    }
    *mem = a;
    return 0;
}

/* fr->n frames of the standard shape, drawn from the model's keys. */
static int make_frames(const struct cli *c, uint64_t *rng, struct frames *fr)
{
    *fr = (struct frames){.n = c->frames, .items = c->items};
    fr->ids = malloc(sizeof *fr->ids * (size_t)c->frames *
                     (size_t)(c->shared_n + c->items * c->item_n));
    fr->blocks = malloc(sizeof *fr->blocks * (size_t)c->frames * (size_t)(c->items + 1));
    fr->labels = malloc(sizeof *fr->labels * (size_t)c->items);
    fr->p = malloc(sizeof *fr->p * (size_t)c->items);
    if (!fr->ids || !fr->blocks || !fr->labels || !fr->p)
        return -1;
    uint64_t *at = fr->ids;
    for (long f = 0; f < c->frames; f++) {
        codec_block_t *b = fr->blocks + f * (c->items + 1);
        for (long i = 0; i <= c->items; i++) {
            uint32_t n = (uint32_t)(i == 0 ? c->shared_n : c->item_n);
            draw_block(at, n, (uint64_t)c->keys, rng);
            b[i] = (codec_block_t){.ids = at, .values = NULL, .n = n};
            at += n;
        }
    }
    for (long i = 0; i < c->items; i++)
        fr->labels[i] = (store_splitmix64(rng) % 10) == 0;
    fr->feats_per_frame = (double)c->items * (double)(c->shared_n + c->item_n);
    return 0;
}

static void free_frames(struct frames *fr)
{
    free(fr->ids);
    free(fr->blocks);
    free(fr->labels);
    free(fr->p);
}

/* The trainer's loop: one untimed round (the state's inserts), then frames
 * round-robin for seconds.  0, or -1 with the update's failure on stderr. */
static int run_trainer(train_t *t, struct frames *fr, double seconds, struct rate *r)
{
    double sink = 0, a = now_sec();
    long f = 0;
    for (int round = 0; round < 2; round++) {
        r->done = 0;
        a = now_sec();
        double end = a + seconds;
        for (long n = 0; round == 0 ? n < fr->n : now_sec() < end; n++, f = (f + 1) % fr->n) {
            const codec_block_t *b = fr->blocks + f * (fr->items + 1);
            int rc = train_update(t, &b[0], &b[1], (uint32_t)fr->items, fr->labels, NULL, fr->p);
            if (rc != 0) {
                fprintf(stderr, "live_train_bench: update failed: %d\n", rc);
                return -1;
            }
            sink += fr->p[0];
            r->done++;
        }
        if (round == 0)
            fprintf(stderr, "live_train_bench: first round (the state's inserts) %.2f s\n",
                    now_sec() - a);
    }
    r->dt = now_sec() - a;
    if (sink == -1) /* keeps the predictions alive */
        fprintf(stderr, "!\n");
    return 0;
}

/* The floor: the served store's writes alone (each item's ids per item, the
 * shared block's once a frame; rows of K zeros), in the same pipelined
 * batches, for seconds.  0, or -1. */
static int run_floor(store_t *served, const struct frames *fr, uint32_t max_n, double seconds,
                     struct rate *r)
{
    float *w = calloc((size_t)max_n * store_value_floats(served), sizeof *w);
    if (!w)
        return -1;
    long f = 0;
    r->done = 0;
    double a = now_sec();
    for (double end = a + seconds; now_sec() < end; r->done++, f = (f + 1) % fr->n) {
        const codec_block_t *b = fr->blocks + f * (fr->items + 1);
        for (long i = 1; i <= fr->items; i++)
            store_upsert_batch(served, b[i].ids, w, b[i].n);
        store_upsert_batch(served, b[0].ids, w, b[0].n);
    }
    r->dt = now_sec() - a;
    free(w);
    return 0;
}

/* Work space of the two-tables floor, for blocks of up to max_n ids. */
struct two {
    store_t *state, *served;
    float **slot;   /* max_n: each id's row in state */
    uint64_t *miss; /* max_n: ids state lacks */
    float *zeros;   /* max_n x W: their first rows */
    float *out;     /* max_n: the served weights written */
};

/* One block as a trainer with its own state table touches it, without
 * arithmetic: the served rows' buckets prefetched, the state's rows found
 * (the missing ones inserted, then found again: inserts move rows), each
 * row's last float read as the served weight and its first written, the
 * weights written into the served store.  0, or -1. */
static int two_block(struct two *w, const codec_block_t *b)
{
    const uint32_t W = store_value_floats(w->state);
    store_prefetch_write(w->served, b->ids, b->n);
    int found = store_locate_batch(w->state, b->ids, b->n, w->slot);
    if (found >= 0 && (uint32_t)found < b->n) {
        uint32_t q = 0;
        for (uint32_t j = 0; j < b->n; j++)
            if (!w->slot[j])
                w->miss[q++] = b->ids[j];
        if (store_upsert_batch(w->state, w->miss, w->zeros, q) < 0)
            return -1;
        found = store_locate_batch(w->state, b->ids, b->n, w->slot);
    }
    if (found < 0 || (uint32_t)found != b->n)
        return -1;
    for (uint32_t j = 0; j < b->n; j++) {
        w->out[j] = w->slot[j][W - 1];
        w->slot[j][0] += 1.0f;
    }
    return store_upsert_batch(w->served, b->ids, w->out, b->n) < 0 ? -1 : 0;
}

/* The two-tables floor: two_block over each item, then the shared block,
 * per frame; a private state of W floats a row; one untimed round (its
 * inserts), then for seconds.  0, or -1. */
static int run_two_tables(store_t *served, uint32_t W, const struct frames *fr, uint32_t max_n,
                          double seconds, struct rate *r)
{
    struct two w = {.served = served};
    store_options_t so = {.value_floats = W,
                          .expected_keys = (uint64_t)fr->n * (uint64_t)(fr->items + 1) * max_n};
    int rc = -1;
    if (store_create(&so, &w.state) != 0)
        return -1;
    w.slot = malloc(sizeof *w.slot * max_n);
    w.miss = malloc(sizeof *w.miss * max_n);
    w.zeros = calloc((size_t)max_n * W, sizeof *w.zeros);
    w.out = malloc(sizeof *w.out * max_n);
    if (!w.slot || !w.miss || !w.zeros || !w.out)
        goto out;
    long f = 0;
    double a = now_sec();
    for (int round = 0; round < 2; round++) {
        r->done = 0;
        a = now_sec();
        double end = a + seconds;
        for (long n = 0; round == 0 ? n < fr->n : now_sec() < end; n++, f = (f + 1) % fr->n) {
            const codec_block_t *b = fr->blocks + f * (fr->items + 1);
            for (long i = 1; i <= fr->items; i++)
                if (two_block(&w, &b[i]) != 0)
                    goto out;
            if (two_block(&w, &b[0]) != 0)
                goto out;
            r->done++;
        }
    }
    r->dt = now_sec() - a;
    rc = 0;
out:
    store_destroy(w.state);
    free(w.slot);
    free(w.miss);
    free(w.zeros);
    free(w.out);
    return rc;
}

static const char usage[] =
    "usage: live_train_bench [--model lr|fm|ffm|dnn] [--keys N] [--frames N] [--shared N]\n"
    "                        [--items N] [--item-ids N] [--seconds S] [--optimizer O]\n"
    "                        [--k N] [--fields N] [--dim N] [--hidden W,W..] [--no-live]\n";

static void parse_cli(int argc, char **argv, struct cli *c)
{
    static const struct option opts[] = {
        {"keys", required_argument, 0, 'K'},     {"frames", required_argument, 0, 'F'},
        {"shared", required_argument, 0, 'S'},   {"items", required_argument, 0, 'I'},
        {"item-ids", required_argument, 0, 'N'}, {"seconds", required_argument, 0, 'T'},
        {"optimizer", required_argument, 0, 'O'}, {"no-live", no_argument, 0, 'L'},
        {"model", required_argument, 0, 'M'},    {"k", required_argument, 0, 'k'},
        {"fields", required_argument, 0, 'f'},   {"dim", required_argument, 0, 'd'},
        {"hidden", required_argument, 0, 'H'},   {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    *c = (struct cli){.kind = STORE_MODEL_LR, .live = 1, .keys = 10000000, .frames = 16,
                      .shared_n = 300, .items = 100, .item_n = 200, .seconds = 5,
                      .fields = 8, .dim = 8, .n_hidden = 2, .hidden = {64, 32}};
    const train_ops_t *ops;
    int ch;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 'K': c->keys = arg_long("keys", optarg, 1000, 2000000000L); break;
        case 'F': c->frames = arg_long("frames", optarg, 1, 100000); break;
        case 'S': c->shared_n = arg_long("shared", optarg, 0, 10000); break;
        case 'I': c->items = arg_long("items", optarg, 1, 10000); break;
        case 'N': c->item_n = arg_long("item-ids", optarg, 1, 10000); break;
        case 'T': c->seconds = arg_double("seconds", optarg, 0.01, 3600); break;
        case 'k': c->k = arg_long("k", optarg, 1, 1024); break;
        case 'f': c->fields = arg_long("fields", optarg, 1, 256); break;
        case 'd': c->dim = arg_long("dim", optarg, 1, TRAIN_DNN_MAX_DIM); break;
        case 'H': arg_hidden(optarg, c); break;
        case 'M':
            if (!(ops = train_ops_named(optarg))) {
                fprintf(stderr, "live_train_bench: --model: '%s' is not lr, fm, ffm or dnn\n",
                        optarg);
                exit(2);
            }
            c->kind = ops->kind;
            break;
        case 'O':
            if (train_optimizer_parse(optarg, &c->opt) != 0) {
                fprintf(stderr, "live_train_bench: --optimizer: '%s' is not ftrl, adagrad or "
                                "sgd\n", optarg);
                exit(2);
            }
            c->opt_given = 1;
            break;
        case 'L': c->live = 0; break;
        case 'h': fputs(usage, stdout); exit(0);
        default: fputs(usage, stderr); exit(2);
        }
    }
    if (optind < argc) {
        fprintf(stderr, "live_train_bench: unexpected argument '%s'\n%s", argv[optind], usage);
        exit(2);
    }
    if (!c->opt_given)
        c->opt = train_default_optimizer(c->kind);
    if (c->shared_n + c->item_n > c->keys) {
        fprintf(stderr, "live_train_bench: a sample's ids exceed the model's keys\n");
        exit(2);
    }
}

int main(int argc, char **argv)
{
    struct cli c;
    parse_cli(argc, argv, &c);
    const char *kind = kind_upper(c.kind), *opt = train_optimizer_name(c.opt);
    const uint32_t max_n = (uint32_t)(c.shared_n > c.item_n ? c.shared_n : c.item_n);

    train_options_t o;
    train_t *t = NULL;
    char why[256] = "";
    if (options_for(&c, &o) != 0)
        return 2;
    if (train_create(&o, &t, why, sizeof why) != 0) {
        fprintf(stderr, "live_train_bench: %s\n", why);
        return 2;
    }
    train_describe(t, why, sizeof why);
    fprintf(stderr, "live_train_bench: %s\n", why);

    double t0 = now_sec();
    uint64_t rng = 7;
    const uint32_t K = served_width(&o);
    store_t *served = make_served((uint64_t)c.keys, K, &rng);
    struct frames fr;
    if (!served || make_frames(&c, &rng, &fr) != 0) {
        fprintf(stderr, "live_train_bench: no memory for the served store or the frames\n");
        return 1;
    }
    fprintf(stderr, "live_train_bench: %ld keys of %u floats served, %ld frames made in %.1f s\n",
            c.keys, K, c.frames, now_sec() - t0);

    if (c.live) {
        store_extras_t x = {0};
        float *mlp = NULL;
        if (c.kind == STORE_MODEL_DNN && make_mlp(&o.dnn, &rng, &x, &mlp) != 0) {
            fprintf(stderr, "live_train_bench: cannot make the served MLP\n");
            return 1;
        }
        int rc = train_attach_live_model(t, served, c.kind == STORE_MODEL_DNN ? &x : NULL, why,
                                         sizeof why);
        free(mlp);
        if (rc != 0) {
            fprintf(stderr, "live_train_bench: %s\n", why);
            return 1;
        }
    }
    struct rate tr, fl, two;
    if (run_trainer(t, &fr, c.seconds, &tr) != 0)
        return 1;
    const double trainer = per_sec(&fr, tr);
    printf("%s %s-%s: %.2f M feature updates/s, %.0f samples/s (%llu frames in %.2f s)\n",
           c.live ? "live" : "state only", kind, opt, trainer / 1e6,
           (double)tr.done * (double)c.items / tr.dt, (unsigned long long)tr.done, tr.dt);
    /* the floors write the served store: no trainer writes it any more */
    if (c.live && train_attach_live(t, NULL, why, sizeof why) != 0)
        return 1;

    if (run_floor(served, &fr, max_n, c.seconds, &fl) != 0)
        return 1;
    printf("floor (the served store's writes alone, %u float%s a row): %.2f M feature "
           "updates/s; the trainer at %.2fx the floor\n", K, K == 1 ? "" : "s",
           per_sec(&fr, fl) / 1e6, trainer / per_sec(&fr, fl));

    if (c.kind == STORE_MODEL_LR) {
        const store_t *st = train_store(t);
        const uint32_t W = st ? store_value_floats(st) : 3;
        if (run_two_tables(served, W, &fr, max_n, c.seconds, &two) != 0) {
            fprintf(stderr, "live_train_bench: the two-tables floor failed (no memory)\n");
            return 1;
        }
        printf("two tables (the floor plus a find-or-insert in a private state of %u float%s "
               "a row): %.2f M feature updates/s; the trainer at %.2fx the two tables\n", W,
               W == 1 ? "" : "s", per_sec(&fr, two) / 1e6, trainer / per_sec(&fr, two));
    }
    train_destroy(t);
    store_destroy(served);
    free_frames(&fr);
    return 0;
}
