/*
 * tlsynth.c — synthetic click data drawn from a planted LR or FM model, so
 * that a trainer's logloss can be compared with the best any trainer can do;
 * and tlsynth's entry point, which hands `tlsynth model` (a synthetic model
 * snapshot of any kind) to tlsynth_model.c.
 *
 *   tlsynth [data] --model lr|fm --samples N --out FILE [--test-samples M --test-out FILE]
 *           [--fields F] [--values V] [--zipf S] [--k K] [--sigma-w X] [--sigma-v X]
 *           [--ctr C] [--seed N] [--format libffm|libsvm] [--json] [--help]
 *   tlsynth model --keys N --out DIR [...]   (tlsynth_model.c)
 *
 * THE PLANTED MODEL
 *   Every sample has exactly one feature per field f (0..F-1): a rank r in
 *   0..V-1 drawn from Zipf(S) (P(r) ~ (r+1)^-S), written as feature index
 *   f*V + r with value 1.  Its margin is
 *
 *     margin = bias + sum_f w[f][r_f] + sum_{f<g} <v[f][r_f], v[g][r_g]>
 *
 *   with w ~ N(0, sigma_w^2) and (fm only) v ~ N(0, sigma_v^2) in R^K, and
 *   the label is Bernoulli(sigmoid(margin)).  sigma_v defaults to the value
 *   at which the pairwise part's expected variance, C(F,2) K sigma_v^4,
 *   equals the linear part's, F sigma_w^2: half of the signal is pairwise and
 *   out of LR's reach (LR still picks up each id's average interaction).
 *   The bias is not drawn but solved for: a pilot of PILOT samples (its own
 *   random stream) fixes it by bisection so that the mean planted
 *   probability is --ctr.
 *
 *   The planted logloss, the mean of -log P(label) under the planted
 *   probabilities, is what the generator reports for each file: a trainer
 *   that learnt the planted model exactly would score it; none can do
 *   better in expectation.
 *
 *   How close a trainer can come depends on how often the tail ids are
 *   seen: with the defaults and 1M samples, tltrain's FM stays ~12% above
 *   the planted logloss whatever its settings (10M samples: ~4%); with
 *   --zipf 1.5 it comes within ~4.5% (tests/model/test_planted.sh).
 *
 * LAYOUT (parameters in memory, one allocation each, sized by the options)
 *
 *   w    [ F*V floats ]          w of feature index f*V + r
 *   v    [ F*V*K floats ]        v of feature index i at v + i*K (fm only)
 *   cdf  [ V doubles ]           cdf[r] = P(rank <= r), cdf[V-1] = 1 exactly
 *
 *   A rank is the first r with cdf[r] > u, u uniform in [0,1): a binary
 *   search.  Files are streamed line by line; any N fits.
 *
 * DETERMINISM
 *   Everything comes from splitmix64 (store/synthetic.h) streams whose start
 *   states are hashes of (seed, stream): parameters, pilot, train and test
 *   each have their own, so the train file does not depend on whether (or
 *   how large) a test file is asked for, and the same options give the same
 *   bytes on every run.  Across hosts the integer streams are identical; the
 *   parameters and the CDF go through libm (log, cos, pow), so a different
 *   libm could in principle move a last bit and, rarely, a rank or a label.
 *
 * OUTPUT
 *   stderr: the planted model (bias, margin variance split) and, per file,
 *   rows, CTR and planted logloss.  stdout: nothing, or with --json one line
 *   {"train_logloss":..,"test_logloss":..,"train_ctr":..,"test_ctr":..}
 *   (test values null without a test file).
 *   Exit codes: 0 ok, 1 I/O error or out of memory, 2 usage error.
 *
 * THREAD SAFETY: a single-threaded program; nothing is shared.
 */
#include "model/tlsynth.h"
#include "store/synthetic.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PILOT (1u << 16)                /* samples that fix the bias */
#define PI 3.14159265358979323846
#define MAX_FIELDS 256                  /* libffm fields are 0..255 */
#define MAX_VALUES (UINT32_C(1) << 24)  /* ranks per field */
#define MAX_K 64
#define MAX_PARAMS (UINT64_C(1) << 28)  /* floats in w + v: 1 GiB */
#define MAX_SAMPLES UINT64_C(1000000000000)
#define LINE_MAX_BYTES (MAX_FIELDS * 32 + 8) /* " 255:4294967295:1" per field + label */

enum { STREAM_PARAMS = 1, STREAM_PILOT, STREAM_TRAIN, STREAM_TEST };

struct planted {
    uint32_t fields;  /* F */
    uint32_t values;  /* V: ranks per field */
    uint32_t k;       /* factors; 0 for lr */
    double bias;      /* solved for --ctr on the pilot */
    float *w;         /* F*V; owned */
    float *v;         /* F*V*K, NULL for lr; owned */
    double *cdf;      /* V: Zipf CDF over ranks; owned */
    double var_lin;   /* variance over the pilot of the linear part */
    double var_pair;  /* ... and of the pairwise part */
};

struct set_stats {
    uint64_t rows;   /* samples written */
    uint64_t clicks; /* label 1 */
    double loss;     /* sum of -log P(label) under the planted model */
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tlsynth [data] --model lr|fm --samples N --out FILE\n"
            "               [--test-samples M --test-out FILE] [--fields F] [--values V]\n"
            "               [--zipf S] [--k K] [--sigma-w X] [--sigma-v X] [--ctr C]\n"
            "               [--seed N] [--format libffm|libsvm] [--json] [--help]\n"
            "       tlsynth model --keys N --out DIR [...]  a synthetic model snapshot of\n"
            "               any kind (lr, fm, ffm, dnn): see 'tlsynth model --help'\n"
            "\n"
            "Writes click samples drawn from a planted model, and that model's own logloss\n"
            "on them (the best any trainer can do):\n"
            "  margin = bias + sum_f w[f][r_f] + sum_{f<g} <v[f][r_f], v[g][r_g]>  (fm)\n"
            "  label  ~ Bernoulli(sigmoid(margin))\n"
            "Each sample has one feature per field f, a rank r_f in 0..V-1 drawn from\n"
            "Zipf(S), written as index f*V + r_f with value 1.\n"
            "\n"
            "  --model M          lr (linear part only) or fm (linear + pairwise)\n"
            "  --samples N        training samples, 1..10^12\n"
            "  --out FILE         training file (overwritten)\n"
            "  --test-samples M   test samples, 1..10^12 (needs --test-out)\n"
            "  --test-out FILE    test file, drawn from the same model (needs --test-samples)\n"
            "  --fields F         fields per sample, 1..256 (default 12)\n"
            "  --values V         ranks per field, 1..16777216 (default 2000)\n"
            "  --zipf S           Zipf exponent, 0..10; 0 is uniform (default 1.1)\n"
            "  --k K              fm: factors per id, 1..64 (default 4)\n"
            "  --sigma-w X        w ~ N(0, X^2), 0..10 (default 0.4)\n"
            "  --sigma-v X        fm: v ~ N(0, X^2), 0..10 (default: the pairwise part's\n"
            "                     expected variance equals the linear part's,\n"
            "                     X = (2 sigma_w^2 / ((F - 1) K))^(1/4); 0.29 for 12 x k=4)\n"
            "  --ctr C            mean planted click probability, 0.001..0.999; the bias\n"
            "                     is solved for it on a pilot sample (default 0.2)\n"
            "  --seed N           seed of everything (default 1); same options, same bytes\n"
            "  --format F         libffm: \"label field:index:1 ...\" (default), or\n"
            "                     libsvm: \"label index:1 ...\" (fields and indices from 0)\n"
            "  --json             last stdout line: {\"train_logloss\":..,\"test_logloss\":..,\n"
            "                     \"train_ctr\":..,\"test_ctr\":..} (test: null without one)\n"
            "  --help             this text\n"
            "\n"
            "The model and the per-file rows, CTR and planted logloss go to stderr.\n"
            "Exit codes: 0 ok, 1 I/O error or out of memory, 2 usage error.\n");
}

/* ---- random numbers --------------------------------------------------------- */

/* Start state of stream `stream` of `seed`: a hash, so that streams of one
 * seed (and seeds) do not overlap (splitmix64 steps by a constant, so start
 * states a few steps apart would replay each other). */
static uint64_t stream_state(uint64_t seed, uint64_t stream)
{
    return store_mix64(seed ^ store_mix64(stream * STORE_PHI));
}

/* Uniform in [0, 1), 53 bits. */
static double uniform(uint64_t *s)
{
    return (double)(store_splitmix64(s) >> 11) * 0x1.0p-53;
}

/* N(0, 1) by Box-Muller (one of the pair; simple, and plenty for setup). */
static double gauss(uint64_t *s)
{
    double u1 = 1.0 - uniform(s); /* (0, 1]: log is finite */
    double u2 = uniform(s);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * PI * u2);
}

static double sigmoid(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

/* ---- the planted model ------------------------------------------------------ */

/* First rank whose CDF exceeds u (u < 1 = cdf[V-1], so one exists). */
static uint32_t zipf_rank(const double *cdf, uint32_t n, double u)
{
    uint32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (cdf[mid] > u)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* Draws one sample's ranks into r[0..F-1] and returns its margin without the
 * bias, split into *lin and *pair.  Never allocates. */
static double draw(const struct planted *m, uint64_t *s, uint32_t *r, double *lin, double *pair)
{
    double sum_w = 0, sq[MAX_K] = {0}, sum[MAX_K] = {0};
    for (uint32_t f = 0; f < m->fields; f++) {
        r[f] = zipf_rank(m->cdf, m->values, uniform(s));
        size_t i = (size_t)f * m->values + r[f];
        sum_w += m->w[i];
        for (uint32_t j = 0; j < m->k; j++) {
            double x = m->v[i * m->k + j];
            sum[j] += x;
            sq[j] += x * x;
        }
    }
    double p = 0; /* sum_{f<g} <v_f, v_g> = 1/2 sum_j (S_j^2 - Q_j) */
    for (uint32_t j = 0; j < m->k; j++)
        p += sum[j] * sum[j] - sq[j];
    *lin = sum_w;
    *pair = 0.5 * p;
    return *lin + *pair;
}

#define BIAS_BOUND 1e4 /* the bias's bisection bracket */

/* Fills m's parameters from seed and solves the bias for ctr.  Returns 0,
 * -ENOMEM (m then partly filled; planted_free() frees it), or -ERANGE when
 * no bias in +-BIAS_BOUND gives ctr (weights so wide that the pilot's mean
 * click rate stays off it: *reached says what the nearest bias gives).
 * Blocks only on the CPU (a pilot of PILOT samples). */
__attribute__((cold)) static int planted_init(struct planted *m, double zipf, double sigma_w,
                                              double sigma_v, double ctr, uint64_t seed,
                                              double *reached)
{
    size_t nids = (size_t)m->fields * m->values;
    double *pilot = NULL;
    uint32_t r[MAX_FIELDS];
    int rc = -ENOMEM;
    m->cdf = malloc(m->values * sizeof *m->cdf);
    m->w = malloc(nids * sizeof *m->w);
    m->v = m->k ? malloc(nids * m->k * sizeof *m->v) : NULL;
    pilot = malloc(PILOT * sizeof *pilot);
    if (!m->cdf || !m->w || (m->k && !m->v) || !pilot)
        goto out;

    double total = 0;
    for (uint32_t i = 0; i < m->values; i++)
        total += pow(i + 1.0, -zipf);
    double acc = 0;
    for (uint32_t i = 0; i < m->values; i++) {
        acc += pow(i + 1.0, -zipf);
        m->cdf[i] = acc / total;
    }
    m->cdf[m->values - 1] = 1.0; /* rounding must not leave u in [cdf[V-1], 1) */

    uint64_t s = stream_state(seed, STREAM_PARAMS);
    for (size_t i = 0; i < nids; i++)
        m->w[i] = (float)(sigma_w * gauss(&s));
    for (size_t i = 0; i < nids * m->k; i++)
        m->v[i] = (float)(sigma_v * gauss(&s));

    /* The pilot: margins without bias, and the variance of each part. */
    double ml = 0, mp = 0, ql = 0, qp = 0;
    s = stream_state(seed, STREAM_PILOT);
    for (uint32_t i = 0; i < PILOT; i++) {
        double lin, pair;
        pilot[i] = draw(m, &s, r, &lin, &pair);
        ml += lin;
        mp += pair;
        ql += lin * lin;
        qp += pair * pair;
    }
    ml /= PILOT;
    mp /= PILOT;
    m->var_lin = fmax(0.0, ql / PILOT - ml * ml); /* no -0.000 from rounding */
    m->var_pair = fmax(0.0, qp / PILOT - mp * mp);

    /* mean sigmoid(b + pilot) rises with b: bisect. */
    double lo = -BIAS_BOUND, hi = BIAS_BOUND; /* wide: --sigma-w 10 over 40 fields needs -200 */
    for (int it = 0; it < 200; it++) {
        double b = 0.5 * (lo + hi), mean = 0;
        for (uint32_t i = 0; i < PILOT; i++)
            mean += sigmoid(b + pilot[i]);
        if (mean / PILOT < ctr)
            lo = b;
        else
            hi = b;
    }
    m->bias = 0.5 * (lo + hi);
    double mean = 0;
    for (uint32_t i = 0; i < PILOT; i++)
        mean += sigmoid(m->bias + pilot[i]);
    *reached = mean / PILOT;
    /* at a bound of the bracket and off by more than a tenth: not reachable */
    rc = fabs(*reached - ctr) > 0.1 * ctr && fabs(fabs(m->bias) - BIAS_BOUND) < 1e-3 ? -ERANGE : 0;
out:
    free(pilot);
    return rc;
}

static void planted_free(struct planted *m)
{
    free(m->w);
    free(m->v);
    free(m->cdf);
}

/* ---- output ----------------------------------------------------------------- */

/* Appends the decimal digits of v at p; returns the new end. */
static char *put_u64(char *p, uint64_t v)
{
    char tmp[20];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *p++ = tmp[--n];
    return p;
}

/* Streams n samples of stream `stream` into path and adds them to *st.
 * Returns 0, or 1 with the error printed (the file is then incomplete).
 * Blocks on the file. */
static int write_set(const struct planted *m, const char *opt, const char *path, uint64_t n,
                     uint64_t seed, uint64_t stream, int ffm, struct set_stats *st)
{
    static char line[LINE_MAX_BYTES];
    uint32_t r[MAX_FIELDS];
    uint64_t s = stream_state(seed, stream);
    int status = 1, e = 0;
    FILE *f = fopen(path, "w");
    if (!f) {
        e = errno;
        goto out;
    }
    setvbuf(f, NULL, _IOFBF, 1 << 20);
    for (uint64_t i = 0; i < n; i++) {
        double lin, pair;
        double p = sigmoid(m->bias + draw(m, &s, r, &lin, &pair));
        int y = uniform(&s) < p;
        double q = y ? p : 1.0 - p;
        st->loss -= log(q < 1e-15 ? 1e-15 : q);
        st->clicks += (uint64_t)y;
        st->rows++;

        char *o = line;
        *o++ = (char)('0' + y);
        for (uint32_t fi = 0; fi < m->fields; fi++) {
            *o++ = ' ';
            if (ffm) {
                o = put_u64(o, fi);
                *o++ = ':';
            }
            o = put_u64(o, (uint64_t)fi * m->values + r[fi]);
            *o++ = ':';
            *o++ = '1';
        }
        *o++ = '\n';
        if (fwrite(line, 1, (size_t)(o - line), f) != (size_t)(o - line)) {
            e = errno;
            goto out;
        }
    }
    if (fflush(f) != 0) {
        e = errno;
        goto out;
    }
    status = 0;
out:
    if (f && fclose(f) != 0 && status == 0) {
        e = errno;
        status = 1;
    }
    if (status)
        fprintf(stderr, "tlsynth: %s %s: %s\n", opt, path, strerror(e ? e : EIO));
    return status;
}

/* ---- arguments -------------------------------------------------------------- */

static int parse_u64(const char *opt, const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    char *e;
    errno = 0;
    unsigned long long v = strtoull(s, &e, 10);
    if (*s < '0' || *s > '9' || errno || *e || v < min || v > max) {
        fprintf(stderr, "tlsynth: %s: '%s' is not a whole number in %llu..%llu\n", opt, s,
                (unsigned long long)min, (unsigned long long)max);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_double(const char *opt, const char *s, double min, double max, double *out)
{
    char *e;
    errno = 0;
    double v = strtod(s, &e);
    if (errno || e == s || *e || !isfinite(v) || v < min || v > max) {
        fprintf(stderr, "tlsynth: %s: '%s' is not a number in %g..%g\n", opt, s, min, max);
        return -1;
    }
    *out = v;
    return 0;
}

static void json_num(FILE *f, const char *key, double v, int last)
{
    if (isfinite(v))
        fprintf(f, "\"%s\":%.6f%s", key, v, last ? "" : ",");
    else
        fprintf(f, "\"%s\":null%s", key, last ? "" : ",");
}

/* `tlsynth [data] ...`: argv[0] is the program or "data". */
static int data_main(int argc, char **argv)
{
    enum { O_MODEL = 256, O_SAMPLES, O_OUT, O_TSAMPLES, O_TOUT, O_FIELDS, O_VALUES, O_ZIPF,
           O_K, O_SW, O_SV, O_CTR, O_SEED, O_FORMAT, O_JSON };
    static const struct option longopts[] = {
        {"model", required_argument, 0, O_MODEL},   {"samples", required_argument, 0, O_SAMPLES},
        {"out", required_argument, 0, O_OUT},       {"test-samples", required_argument, 0, O_TSAMPLES},
        {"test-out", required_argument, 0, O_TOUT}, {"fields", required_argument, 0, O_FIELDS},
        {"values", required_argument, 0, O_VALUES}, {"zipf", required_argument, 0, O_ZIPF},
        {"k", required_argument, 0, O_K},           {"sigma-w", required_argument, 0, O_SW},
        {"sigma-v", required_argument, 0, O_SV},    {"ctr", required_argument, 0, O_CTR},
        {"seed", required_argument, 0, O_SEED},     {"format", required_argument, 0, O_FORMAT},
        {"json", no_argument, 0, O_JSON},           {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    const char *model = NULL, *out = NULL, *test_out = NULL, *format = "libffm";
    uint64_t samples = 0, test_samples = 0, fields = 12, values = 2000, k = 4, seed = 1;
    double zipf = 1.1, sigma_w = 0.4, sigma_v = -1, ctr = 0.2;
    int json = 0, k_set = 0, c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case O_MODEL: model = optarg; break;
        case O_SAMPLES: bad = parse_u64("--samples", optarg, 1, MAX_SAMPLES, &samples); break;
        case O_OUT: out = optarg; break;
        case O_TSAMPLES:
            bad = parse_u64("--test-samples", optarg, 1, MAX_SAMPLES, &test_samples);
            break;
        case O_TOUT: test_out = optarg; break;
        case O_FIELDS: bad = parse_u64("--fields", optarg, 1, MAX_FIELDS, &fields); break;
        case O_VALUES: bad = parse_u64("--values", optarg, 1, MAX_VALUES, &values); break;
        case O_ZIPF: bad = parse_double("--zipf", optarg, 0, 10, &zipf); break;
        case O_K:
            bad = parse_u64("--k", optarg, 1, MAX_K, &k);
            k_set = 1;
            break;
        case O_SW: bad = parse_double("--sigma-w", optarg, 0, 10, &sigma_w); break;
        case O_SV: bad = parse_double("--sigma-v", optarg, 0, 10, &sigma_v); break;
        case O_CTR: bad = parse_double("--ctr", optarg, 0.001, 0.999, &ctr); break;
        case O_SEED: bad = parse_u64("--seed", optarg, 0, UINT64_MAX, &seed); break;
        case O_FORMAT: format = optarg; break;
        case O_JSON: json = 1; break;
        case 'h': usage(stdout); return 0;
        default:
            fprintf(stderr, "tlsynth: unknown or incomplete option '%s' (see --help)\n",
                    argv[optind - 1]);
            return 2;
        }
        if (bad)
            return 2;
    }
    if (optind < argc) {
        fprintf(stderr, "tlsynth: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }
    if (!model || !samples || !out) {
        fprintf(stderr, "tlsynth: --model, --samples and --out are required (see --help)\n");
        return 2;
    }
    int fm = strcmp(model, "fm") == 0;
    if (!fm && strcmp(model, "lr") != 0) {
        fprintf(stderr, "tlsynth: --model: '%s' is not lr or fm\n", model);
        return 2;
    }
    if (!fm && (k_set || sigma_v >= 0)) {
        fprintf(stderr, "tlsynth: %s: only with --model fm\n", k_set ? "--k" : "--sigma-v");
        return 2;
    }
    int ffm = strcmp(format, "libffm") == 0;
    if (!ffm && strcmp(format, "libsvm") != 0) {
        fprintf(stderr, "tlsynth: --format: '%s' is not libffm or libsvm\n", format);
        return 2;
    }
    if (!test_samples != !test_out) {
        fprintf(stderr, "tlsynth: %s needs %s\n", test_out ? "--test-out" : "--test-samples",
                test_out ? "--test-samples" : "--test-out");
        return 2;
    }
    if (test_out && strcmp(test_out, out) == 0) {
        fprintf(stderr, "tlsynth: --test-out: '%s' is also --out\n", test_out);
        return 2;
    }
    if (!fm)
        k = 0;
    if (fields * values * (1 + k) > MAX_PARAMS) {
        fprintf(stderr,
                "tlsynth: --fields x --values x (1 + --k) = %llu parameters, more than 2^28\n",
                (unsigned long long)(fields * values * (1 + k)));
        return 2;
    }
    if (fm && sigma_v < 0)
        sigma_v = fields > 1 ? pow(2.0 * sigma_w * sigma_w / ((double)(fields - 1) * k), 0.25)
                             : 0.0;

    struct planted m = {.fields = (uint32_t)fields, .values = (uint32_t)values, .k = (uint32_t)k};
    struct set_stats train = {0}, test = {0};
    int status = 1;
    double reached = 0;
    int prc = planted_init(&m, zipf, sigma_w, sigma_v, ctr, seed, &reached);
    if (prc == -ERANGE) {
        fprintf(stderr, "tlsynth: --ctr %g cannot be planted with these weights: the nearest "
                        "bias (%.0f) gives a click rate of %.4g (--sigma-w or --sigma-v too "
                        "wide for it: narrow them, or ask for a ctr nearer %.4g)\n",
                ctr, m.bias, reached, reached);
        status = 2;
        goto out;
    }
    if (prc != 0) {
        fprintf(stderr, "tlsynth: out of memory for %llu parameters\n",
                (unsigned long long)(fields * values * (1 + k)));
        goto out;
    }
    double var = m.var_lin + m.var_pair;
    fprintf(stderr, "tlsynth: planted %s: %u fields x %u values, zipf %g, sigma_w %g", model,
            m.fields, m.values, zipf, sigma_w);
    if (fm)
        fprintf(stderr, ", k %u, sigma_v %.4g", m.k, sigma_v);
    fprintf(stderr, ", seed %llu; bias %.4f for ctr %g; margin variance %.3f (linear %.3f, "
                    "pairwise %.3f = %.0f%%)\n",
            (unsigned long long)seed, m.bias, ctr, var, m.var_lin, m.var_pair,
            var > 0 ? 100 * m.var_pair / var : 0.0);

    if (write_set(&m, "--out", out, samples, seed, STREAM_TRAIN, ffm, &train) != 0)
        goto out;
    fprintf(stderr, "tlsynth: train %s: %llu rows, ctr %.4f, planted logloss %.6f\n", out,
            (unsigned long long)train.rows, (double)train.clicks / train.rows,
            train.loss / train.rows);
    if (test_out) {
        if (write_set(&m, "--test-out", test_out, test_samples, seed, STREAM_TEST, ffm, &test))
            goto out;
        fprintf(stderr, "tlsynth: test %s: %llu rows, ctr %.4f, planted logloss %.6f\n",
                test_out, (unsigned long long)test.rows, (double)test.clicks / test.rows,
                test.loss / test.rows);
    }
    if (json) {
        printf("{");
        json_num(stdout, "train_logloss", train.loss / train.rows, 0);
        json_num(stdout, "test_logloss", test.rows ? test.loss / test.rows : NAN, 0);
        json_num(stdout, "train_ctr", (double)train.clicks / train.rows, 0);
        json_num(stdout, "test_ctr", test.rows ? (double)test.clicks / test.rows : NAN, 1);
        printf("}\n");
        if (fflush(stdout) != 0) {
            fprintf(stderr, "tlsynth: stdout: %s\n", strerror(errno));
            goto out;
        }
    }
    status = 0;
out:
    planted_free(&m);
    return status;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "model") == 0)
        return tlsynth_model_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "data") == 0)
        return data_main(argc - 1, argv + 1);
    return data_main(argc, argv);
}
