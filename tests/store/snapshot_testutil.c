/*
 * snapshot_testutil.c — helpers of the snapshot tests (test_snapshot_*.c,
 * declared in snapshot_testutil.h).
 *
 * Scratch directories go under $TL_TEST_TMP (created when missing).
 *
 * THREAD SAFETY: single-threaded.
 */

#include "snapshot_testutil.h"

/* ---- scratch files ------------------------------------------------------ */

/* A fresh empty directory; out must hold PATH_MAX bytes. */
void scratch_dir(char *out)
{
    const char *root = getenv("TL_TEST_TMP");
    if (!root || !root[0])
        root = "/tmp/tl_test_tmp";
    test_mkdir_p(root);
    snprintf(out, PATH_MAX, "%s/snapXXXXXX", root);
    assert_non_null(mkdtemp(out));
}

void path_of(char *out, const char *dir, const char *file)
{
    int n = snprintf(out, PATH_MAX, "%s/%s", dir, file);
    assert_true(n > 0 && n < PATH_MAX);
}

uint8_t *read_file(const char *dir, const char *file, size_t *len)
{
    char p[PATH_MAX];
    path_of(p, dir, file);
    FILE *f = fopen(p, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

void write_file(const char *dir, const char *file, const void *buf, size_t len)
{
    char p[PATH_MAX];
    path_of(p, dir, file);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

void flip_byte(const char *dir, const char *file, size_t off)
{
    size_t len;
    uint8_t *b = read_file(dir, file, &len);
    assert_true(off < len);
    b[off] ^= 0x20;
    write_file(dir, file, b, len);
    free(b);
}

int file_exists(const char *dir, const char *file)
{
    char p[PATH_MAX];
    path_of(p, dir, file);
    struct stat st;
    return stat(p, &st) == 0;
}

/* Number of directory entries whose name ends in ".tmp". */
int count_tmp(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        if (l >= 4 && strcmp(e->d_name + l - 4, ".tmp") == 0)
            n++;
    }
    closedir(d);
    return n;
}

/* ---- stores --------------------------------------------------------------- */

/* A random finite float: any finite bit pattern for f32 (subnormals and -0
 * included), a value that fits fp16 for f16. */
float random_value(uint64_t *rng, store_dtype_t dt)
{
    uint64_t r = store_splitmix64(rng);
    if (dt == STORE_DTYPE_F32) {
        uint32_t b = (uint32_t)r;
        if ((b & 0x7f800000u) == 0x7f800000u)
            b &= ~0x40000000u; /* clear the top exponent bit: finite */
        float f;
        memcpy(&f, &b, sizeof f);
        return f;
    }
    if ((r & 15) == 0)
        return (float)((int64_t)(r >> 40) - (1 << 23)) * 1e-12f;          /* subnormal halves */
    return (float)((int64_t)(r >> 32) - (1LL << 31)) / (float)(1u << 24); /* +-128 */
}

store_t *make_store(uint32_t K, store_dtype_t dt, uint32_t shards, size_t nkeys,
                    uint64_t seed, uint64_t value_seed)
{
    store_options_t opt = {.value_floats = K, .dtype = dt, .shards = shards};
    store_t *s = NULL;
    assert_int_equal(store_create(&opt, &s), 0);
    uint64_t krng = seed, vrng = value_seed;
    float v[STORE_MAX_VALUE_FLOATS];
    for (size_t i = 0; i < nkeys; i++) {
        uint64_t key = store_splitmix64(&krng);
        if (i % 7 == 0)
            key = i; /* small, sequential ids too */
        for (uint32_t j = 0; j < K; j++)
            v[j] = random_value(&vrng, dt);
        assert_true(store_upsert(s, key, v) >= 0);
    }
    return s;
}

store_meta_t test_meta(const char *name, uint64_t version)
{
    store_meta_t m;
    memset(&m, 0, sizeof m);
    snprintf(m.model_name, sizeof m.model_name, "%s", name);
    m.model_kind = STORE_MODEL_FM;
    m.version = version;
    m.parent_version = 0;
    m.created_unix = 1700000000;
    return m;
}

/* All records of s as packed {key, raw value}, sorted by key. */
struct records {
    uint8_t *buf;
    size_t n, cap, rec;
};

static int collect(void *ctx, uint64_t key, const void *raw)
{
    struct records *r = ctx;
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 1024;
        r->buf = realloc(r->buf, r->cap * r->rec);
        assert_non_null(r->buf);
    }
    memcpy(r->buf + r->n * r->rec, &key, 8);
    memcpy(r->buf + r->n * r->rec + 8, raw, r->rec - 8);
    r->n++;
    return 0;
}

static int by_key(const void *a, const void *b)
{
    uint64_t x, y;
    memcpy(&x, a, 8);
    memcpy(&y, b, 8);
    return x < y ? -1 : x > y;
}

static struct records all_records(const store_t *s)
{
    struct records r = {.rec = 8 + store_value_bytes(s)};
    for (uint32_t i = 0; i < store_shards(s); i++)
        assert_int_equal(store_foreach_raw(s, i, collect, &r), 0);
    if (r.n) /* qsort(NULL, 0, ...) is undefined */
        qsort(r.buf, r.n, r.rec, by_key);
    return r;
}

void assert_same_store(const store_t *a, const store_t *b)
{
    assert_int_equal(store_value_floats(a), store_value_floats(b));
    assert_int_equal(store_dtype(a), store_dtype(b));
    assert_int_equal(store_shards(a), store_shards(b));
    assert_int_equal(store_count(a), store_count(b));
    for (uint32_t i = 0; i < store_shards(a); i++)
        assert_int_equal(store_shard_count(a, i), store_shard_count(b, i));
    struct records ra = all_records(a), rb = all_records(b);
    assert_int_equal(ra.n, rb.n);
    assert_int_equal(ra.n, store_count(a));
    assert_memory_equal(ra.buf, rb.buf, ra.n * ra.rec);
    /* and through the read path: every key found, same floats */
    uint32_t K = store_value_floats(a);
    float va[STORE_MAX_VALUE_FLOATS], vb[STORE_MAX_VALUE_FLOATS];
    for (size_t i = 0; i < ra.n; i += 97) {
        uint64_t key;
        memcpy(&key, ra.buf + i * ra.rec, 8);
        assert_int_equal(store_lookup(a, key, va), 1);
        assert_int_equal(store_lookup(b, key, vb), 1);
        assert_memory_equal(va, vb, K * sizeof(float));
    }
    free(ra.buf);
    free(rb.buf);
}

void assert_same_meta(const store_meta_t *a, const store_meta_t *b)
{
    assert_string_equal(a->model_name, b->model_name);
    assert_int_equal(a->model_kind, b->model_kind);
    assert_int_equal(a->version, b->version);
    assert_int_equal(a->parent_version, b->parent_version);
    assert_int_equal(a->created_unix, b->created_unix);
}

/* Loads dir expecting failure with code, file and offset. */
void expect_load_error(const char *dir, int threads, store_errc_t code, const char *file,
                       int64_t offset)
{
    store_t *s = SENTINEL;
    store_meta_t meta;
    memset(&meta, 0xab, sizeof meta);
    store_error_t err;
    int rc = store_snapshot_load(dir, threads, &s, &meta, &err);
    if (rc == 0 || err.code != code || strcmp(err.file, file) != 0 || err.offset != offset)
        print_error("expected %s in \"%s\" at %lld, got rc %d: %s in \"%s\" at %lld: %s\n",
                    store_errc_name(code), file, (long long)offset, rc, store_errc_name(err.code),
                    err.file, (long long)err.offset, err.msg);
    if (getenv("TL_TEST_VERBOSE"))
        print_message("%s: %s\n", store_errc_name(err.code), err.msg);
    assert_int_equal(rc, store_errc_errno(code));
    assert_int_equal(err.code, code);
    assert_string_equal(err.file, file);
    assert_int_equal(err.offset, offset);
    assert_ptr_equal(s, SENTINEL); /* *out untouched */
    assert_true(strlen(err.msg) > 0);
    if (file[0])
        assert_non_null(strstr(err.msg, file));
    if (offset >= 0) {
        char o[64];
        snprintf(o, sizeof o, "offset %lld", (long long)offset);
        assert_non_null(strstr(err.msg, o));
    }
}
