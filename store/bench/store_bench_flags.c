/*
 * store_bench_flags.c — the store benchmark's command line: counts with
 * K/M/G/T suffixes, each flag range-checked, a bad flag exits 2 with usage.
 *
 * THREAD SAFETY: main thread only, before anything runs.
 */
#include "store_bench.h"

/* ---- flags ----------------------------------------------------------------- */

/* A count: digits with an optional K/M/G/T suffix (powers of ten). */
static uint64_t parse_count(const char *flag, const char *s, uint64_t min)
{
    char *end;
    if (!s || !*s || *s == '-' || *s == '+')
        usage_error("%s: expected a count such as 1000, 10M or 1G, got '%s'", flag, s ? s : "");
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        usage_error("%s: expected a count such as 1000, 10M or 1G, got '%s'", flag, s);
    uint64_t mul = 1;
    switch (*end) {
    case 0: break;
    case 'k': case 'K': mul = 1000ull; end++; break;
    case 'm': case 'M': mul = 1000000ull; end++; break;
    case 'g': case 'G': mul = 1000000000ull; end++; break;
    case 't': case 'T': mul = 1000000000000ull; end++; break;
    default: break;
    }
    if (*end)
        usage_error("%s: expected a count such as 1000, 10M or 1G, got '%s'", flag, s);
    if (v > UINT64_MAX / mul)
        usage_error("%s: count '%s' is too large", flag, s);
    v *= mul;
    if (v < min)
        usage_error("%s: must be at least %" PRIu64 ", got '%s'", flag, min, s);
    return v;
}

void parse_flags(int argc, char **argv, struct config *c)
{
    bool have_keys = false, have_baseline = false, have_threads = false;
    *c = (struct config){
        .value_floats = 1,
        .dtype = STORE_DTYPE_F32,
        .lookups = DEFAULT_LOOKUPS,
        .seed = 42,
        .tmp = "/tmp",
    };
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        const char *v = NULL;
        if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) {
            usage(stdout);
            exit(0);
        }
        if (strcmp(f, "--json") == 0) {
            c->json = true;
            continue;
        }
        /* every other flag takes a value: "--flag V" or "--flag=V" */
        char name[64];
        const char *eq = strchr(f, '=');
        if (eq && (size_t)(eq - f) < sizeof name) {
            memcpy(name, f, (size_t)(eq - f));
            name[eq - f] = 0;
            v = eq + 1;
        } else {
            snprintf(name, sizeof name, "%s", f);
        }
        static const char *const valued[] = {"--keys", "--value-floats", "--dtype",
                                             "--baseline-keys", "--expected-keys", "--shards", "--threads",
                                             "--lookups", "--seed", "--tmp"};
        bool known = false;
        for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++)
            known |= strcmp(name, valued[k]) == 0;
        if (!known)
            usage_error("unknown flag '%s'", f);
        if (!v) {
            if (i + 1 >= argc)
                usage_error("%s needs a value", name);
            v = argv[++i];
        }

        if (strcmp(name, "--keys") == 0) {
            c->keys = parse_count(name, v, 1);
            have_keys = true;
        } else if (strcmp(name, "--value-floats") == 0) {
            uint64_t k = parse_count(name, v, 1);
            if (k > STORE_MAX_VALUE_FLOATS)
                usage_error("--value-floats: must be 1..%d, got '%s'", STORE_MAX_VALUE_FLOATS, v);
            c->value_floats = (uint32_t)k;
        } else if (strcmp(name, "--dtype") == 0) {
            if (strcmp(v, "f32") == 0)
                c->dtype = STORE_DTYPE_F32;
            else if (strcmp(v, "f16") == 0)
                c->dtype = STORE_DTYPE_F16;
            else
                usage_error("--dtype: must be f32 or f16, got '%s'", v);
        } else if (strcmp(name, "--baseline-keys") == 0) {
            c->baseline_keys = parse_count(name, v, 0);
            have_baseline = true;
        } else if (strcmp(name, "--expected-keys") == 0) {
            c->expected_keys = parse_count(name, v, 1);
        } else if (strcmp(name, "--shards") == 0) {
            uint64_t s = parse_count(name, v, 1);
            if (s > STORE_MAX_SHARDS || (s & (s - 1)))
                usage_error("--shards: must be a power of two 1..%d, got '%s'", STORE_MAX_SHARDS,
                            v);
            c->shards = (uint32_t)s;
        } else if (strcmp(name, "--threads") == 0) {
            uint64_t t = parse_count(name, v, 1);
            if (t > 4096)
                usage_error("--threads: must be 1..4096, got '%s'", v);
            c->threads = (uint32_t)t;
            have_threads = true;
        } else if (strcmp(name, "--lookups") == 0) {
            c->lookups = parse_count(name, v, 1);
        } else if (strcmp(name, "--seed") == 0) {
            char *end;
            errno = 0;
            if (!*v || *v == '-')
                usage_error("--seed: expected a number, got '%s'", v);
            c->seed = strtoull(v, &end, 0);
            if (errno || *end)
                usage_error("--seed: expected a decimal or 0x-hex number, got '%s'", v);
        } else if (strcmp(name, "--tmp") == 0) {
            if (!*v)
                usage_error("--tmp: empty directory name");
            c->tmp = v;
        }
    }
    if (!have_keys)
        usage_error("--keys is required");
    if (c->keys > (UINT64_MAX >> 2))
        usage_error("--keys: %" PRIu64 " is too large", c->keys);
    if (!have_baseline)
        c->baseline_keys = c->keys < DEFAULT_BASELINE_CAP ? c->keys : DEFAULT_BASELINE_CAP;
    if (c->expected_keys == 0)
        c->expected_keys = c->keys;
    if (!have_threads)
        c->threads = usable_cpus();

    store_options_t opt = {
        .value_floats = c->value_floats,
        .dtype = c->dtype,
        .shards = c->shards,
        .expected_keys = c->keys,
    };
    char why[256];
    if (store_options_check(&opt, why, sizeof why) != 0)
        usage_error("the store refuses these options: %s", why);
}
