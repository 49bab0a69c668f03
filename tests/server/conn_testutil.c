/*
 * conn_testutil.c — shared fixture and helpers of the tests of the connection
 * state machine (server/conn.c, test_conn_*.c) driven directly: bytes in
 * through conn_feed, response frames out of c->out, no sockets and no threads.
 * The tests play the I/O driver: they feed received bytes, decode what
 * conn.c queued and mark it sent with conn_sent.
 *
 * SET-UP
 *   The worker is built as workers.c builds one (arena sized by
 *   codec_arena_bound(max-frame-bytes), block and score arrays, an LR-sized
 *   scratch), with the settings parsed by the real config table, so a test
 *   that needs --max-frame-bytes or --max-inflight passes the flag.  The model
 *   is a small LR snapshot written under $TL_TEST_TMP and made active with
 *   server_model_load, the registry's own path.
 *
 * What each program checks: the comment atop each test_conn_*.c.
 *
 * conn.c is #included here (STYLE.md: a unit test may reach statics) so that
 * its malloc/realloc can be made to fail on demand (alloc_fail_at); the test
 * programs link this file and reach conn.c through worker.h only.
 *
 * THREAD SAFETY: single-threaded.
 */

#include "conn_testutil.h"

/* ---- conn.c with failing allocations on demand ---------------------------- */

int alloc_fail_at; /* > 0: conn.c's alloc_fail_at-th allocation from now fails */

static int alloc_should_fail(void)
{
    return alloc_fail_at > 0 && --alloc_fail_at == 0;
}

static void *test_malloc_(size_t n)
{
    return alloc_should_fail() ? NULL : malloc(n);
}

static void *test_realloc_(void *p, size_t n)
{
    return alloc_should_fail() ? NULL : realloc(p, n);
}

#define malloc(n) test_malloc_(n)
#define realloc(p, n) test_realloc_(p, n)
#include "server/conn.c"
#undef malloc
#undef realloc

/* ---- fixture -------------------------------------------------------------- */

server_t srv;
worker_t w;
char model_dir[PATH_MAX];
static model_scratch_t *ref_scratch; /* for the expected scores */
static codec_arena_t rd;             /* decodes what conn.c queued */

float weight_of(uint64_t id)
{
    return (float)((int)(id % 7) - 3) / 8.0f;
}

/* Parses flags (NULL-terminated, after "tlserve") into srv.cfg with the real
 * config table. */
void configure(const char *const *flags)
{
    char *argv[32] = {"tlserve", "--log-level", "error"};
    int argc = 3;
    for (; flags && *flags; flags++)
        argv[argc++] = (char *)*flags;
    assert_int_equal(server_config_load(&srv.cfg, argc, argv), 0);
}

/* A small LR model, "ctr" version 7: bias 0.25, ids 1..64 weight_of(id). */
int group_setup(void **state)
{
    (void)state;
    configure(NULL);
    srv.nworkers = 1;
    srv.metrics = calloc(1, sizeof *srv.metrics);
    assert_non_null(srv.metrics);

    store_options_t opt = {.value_floats = 1, .shards = 2, .expected_keys = NKEYS + 1};
    store_t *s;
    assert_int_equal(store_create(&opt, &s), 0);
    float bias = 0.25f;
    assert_int_equal(store_upsert(s, MODEL_BIAS_ID, &bias), 1);
    for (uint64_t id = 1; id <= NKEYS; id++) {
        float v = weight_of(id);
        assert_int_equal(store_upsert(s, id, &v), 1);
    }
    const char *root = getenv("TL_TEST_TMP");
    if (!root || !root[0])
        root = "/tmp/tl_test_tmp";
    test_mkdir_p(root);
    snprintf(model_dir, sizeof model_dir, "%s/connXXXXXX", root);
    assert_non_null(mkdtemp(model_dir));
    store_meta_t meta = {
        .model_name = MODEL_NAME, .model_kind = STORE_MODEL_LR, .version = MODEL_VERSION};
    store_error_t err;
    assert_int_equal(store_snapshot_write(s, model_dir, &meta, &err), 0);
    store_destroy(s);
    assert_int_equal(server_model_load(&srv, model_dir, &err), 0);

    assert_int_equal(model_scratch_create(CODEC_MAX_REQUEST_FEATURES, &ref_scratch), 0);
    rd.cap = codec_arena_bound(CODEC_MAX_PAYLOAD);
    rd.base = malloc(rd.cap);
    assert_non_null(rd.base);
    return 0;
}

int group_teardown(void **state)
{
    (void)state;
    server_model_release(atomic_exchange(&srv.models[0].active, NULL));
    model_scratch_destroy(ref_scratch);
    free(rd.base);
    free(srv.metrics);
    test_rm_rf(model_dir);
    return 0;
}

/* A fresh worker (as workers.c's worker_init builds it, minus the socket)
 * under the given flags, with zeroed metrics. */
void start(const char *const *flags)
{
    configure(flags);
    memset(srv.metrics, 0, sizeof *srv.metrics);
    atomic_store(&srv.stopping, false);
    memset(&w, 0, sizeof w);
    w.srv = &srv;
    w.m = &srv.metrics[0];
    w.listen_fd = -1;
    w.arena.cap = codec_arena_bound((size_t)srv.cfg.max_frame_bytes);
    w.arena.base = malloc(w.arena.cap);
    w.blocks = calloc(CODEC_MAX_ITEMS, sizeof *w.blocks);
    w.scores = calloc(CODEC_MAX_ITEMS, sizeof *w.scores);
    assert_non_null(w.arena.base);
    assert_non_null(w.blocks);
    assert_non_null(w.scores);
    assert_int_equal(model_scratch_create(CODEC_MAX_REQUEST_FEATURES, &w.scratch), 0);
}

/* Frees the worker; every connection must be gone, and with them every
 * byte of input budget and every in-flight count. */
void finish(void)
{
    assert_int_equal(w.nconns, 0);
    assert_int_equal(w.inflight, 0);
    assert_int_equal(w.in_bytes, 0);
    assert_int_equal(w.out_bytes, 0);
    assert_int_equal(atomic_load(&w.m->output_bytes), 0);
    assert_null(w.conns);
    assert_int_equal(atomic_load(&w.m->inflight), 0);
    assert_int_equal(atomic_load(&w.m->connections), 0);
    free(w.arena.base);
    free(w.blocks);
    free(w.scores);
    model_scratch_destroy(w.scratch);
    alloc_fail_at = 0;
}

conn_t *open_conn(void)
{
    conn_t *c = conn_new(&w, -1);
    assert_non_null(c);
    return c;
}

/* ---- building requests ------------------------------------------------------ */

uint8_t *grow(bytes_t *b, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        b->p = realloc(b->p, cap);
        assert_non_null(b->p);
        b->cap = cap;
    }
    uint8_t *at = b->p + b->len;
    b->len += n;
    return at;
}

void put(bytes_t *b, const void *data, size_t n)
{
    memcpy(grow(b, n), data, n);
}

void put_u8(bytes_t *b, uint8_t v)
{
    put(b, &v, 1);
}

void put_u64(bytes_t *b, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        put_u8(b, (uint8_t)(v >> (8 * i)));
}

void put_f32(bytes_t *b, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    for (int i = 0; i < 4; i++)
        put_u8(b, (uint8_t)(u >> (8 * i)));
}

void put_varint(bytes_t *b, uint64_t v)
{
    uint8_t tmp[CODEC_MAX_VARINT];
    put(b, tmp, codec_varint_encode(tmp, v));
}

/* A frame of any type around payload p (header written by the codec). */
void put_frame(bytes_t *b, uint8_t type, uint16_t flags, uint64_t id, const bytes_t *p)
{
    codec_header_t h = {
        .type = type, .flags = flags, .request_id = id, .payload_len = (uint32_t)p->len};
    codec_write_header(grow(b, CODEC_HEADER_SIZE), &h);
    if (p->len)
        put(b, p->p, p->len);
}

/* The head of a PREDICT payload: name, version, item count (not checked). */
void put_predict_head(bytes_t *p, const char *name, uint64_t version, uint64_t items)
{
    put_u8(p, (uint8_t)strlen(name));
    put(p, name, strlen(name));
    put_u64(p, version);
    put_varint(p, items);
}

/* A block with fixed (u64) ids, values when vals != NULL (not checked). */
void put_block(bytes_t *p, const uint64_t *ids, const float *vals, uint32_t n)
{
    put_varint(p, n);
    put_u8(p, (uint8_t)(CODEC_BLOCK_FIXED | (vals ? CODEC_BLOCK_VALUES : 0)));
    for (uint32_t i = 0; i < n; i++)
        put_u64(p, ids[i]);
    for (uint32_t i = 0; vals && i < n; i++)
        put_f32(p, vals[i]);
}

/* The standard test request: 3 items over a shared block, one item with
 * values, one empty, one id (1000) the model has not seen. */
const uint64_t sh_ids[] = {1, 2, 3};
const uint64_t it0_ids[] = {10, 11, 1000};
const uint64_t it1_ids[] = {12, 40};
const float it1_vals[] = {0.5f, 2.0f};

void std_blocks(codec_block_t *shared, codec_block_t items[3])
{
    *shared = (codec_block_t){sh_ids, NULL, 3};
    items[0] = (codec_block_t){it0_ids, NULL, 3};
    items[1] = (codec_block_t){it1_ids, it1_vals, 2};
    items[2] = (codec_block_t){NULL, NULL, 0};
}

void put_predict(bytes_t *b, uint64_t id, const char *name, uint64_t version)
{
    codec_predict_t req = {.version = version, .items = 3};
    codec_block_t items[3];
    snprintf(req.name, sizeof req.name, "%s", name);
    std_blocks(&req.shared, items);
    req.item = items;
    size_t len;
    assert_int_equal(codec_encode_predict(NULL, 0, id, &req, &len, NULL), CODEC_NEED_MORE);
    uint8_t *at = grow(b, len);
    assert_int_equal(codec_encode_predict(at, len, id, &req, &len, NULL), CODEC_OK);
}

void put_ping(bytes_t *b, uint64_t id, const char *data)
{
    codec_ping_t p = {(const uint8_t *)data, (uint32_t)strlen(data)};
    size_t len = CODEC_HEADER_SIZE + p.len;
    assert_int_equal(codec_encode_ping(grow(b, len), len, CODEC_PING, id, &p, &len, NULL),
                     CODEC_OK);
}

void put_train(bytes_t *b, uint64_t id)
{
    codec_block_t shared, items[3];
    std_blocks(&shared, items);
    float labels[3] = {1.0f, 0.0f, 0.0f};
    codec_train_t t = {
        .name = MODEL_NAME, .samples = 3, .shared = shared, .labels = labels, .sample = items};
    size_t len;
    assert_int_equal(codec_encode_train(NULL, 0, id, &t, &len, NULL), CODEC_NEED_MORE);
    uint8_t *at = grow(b, len);
    assert_int_equal(codec_encode_train(at, len, id, &t, &len, NULL), CODEC_OK);
}

/* LOOKUP as docs/wire.md lays it out: name, version, n, delta varints. */
void put_lookup(bytes_t *b, uint64_t id)
{
    bytes_t p = {0};
    put_u8(&p, 3);
    put(&p, MODEL_NAME, 3);
    put_u64(&p, 0);
    put_varint(&p, 3);
    put_varint(&p, 1);
    put_varint(&p, 1);
    put_varint(&p, 38);
    put_frame(b, CODEC_LOOKUP, 0, id, &p);
    free(p.p);
}

/* The payload of a PREDICT with CODEC_MAX_ITEMS empty items (and an empty
 * shared block): small to send, the largest answer to queue (~16 KB). */
void put_widest_predict(bytes_t *p)
{
    put_predict_head(p, MODEL_NAME, 0, CODEC_MAX_ITEMS);
    for (uint32_t i = 0; i <= CODEC_MAX_ITEMS; i++)
        put_block(p, NULL, NULL, 0);
}

/* ---- reading responses ---------------------------------------------------------- */

/* Decodes the next frame conn.c queued on c into *m and marks it sent, as a
 * driver would; m's byte strings point into c->out (valid until the next
 * conn_feed).  Fails the test when no whole frame is queued. */
void next_frame(conn_t *c, codec_msg_t *m)
{
    size_t avail = c->out_len - c->out_off;
    assert_true(avail >= CODEC_HEADER_SIZE);
    codec_error_t err;
    codec_arena_reset(&rd);
    int rc = codec_decode_frame(c->out + c->out_off, avail, &rd, m, &err);
    if (rc != CODEC_OK)
        fail_msg("queued frame does not decode: %s", err.msg);
    conn_sent(&w, c, CODEC_HEADER_SIZE + m->hdr.payload_len);
}

/* The next frame is an ERROR with this id and code, whose sentence
 * contains needle (any sentence when needle is NULL). */
void expect_error_naming(conn_t *c, uint64_t id, int code, const char *needle)
{
    codec_msg_t m;
    next_frame(c, &m);
    assert_int_equal(m.hdr.type, CODEC_ERROR);
    assert_int_equal(m.hdr.request_id, id);
    if (m.u.error.code != code)
        fail_msg("ERROR code %u (%s), expected %d (%s): %.*s", m.u.error.code,
                 codec_errc_name(m.u.error.code), code, codec_errc_name(code),
                 (int)m.u.error.msg_len, m.u.error.msg);
    assert_true(m.u.error.msg_len > 0);
    if (needle && !memmem(m.u.error.msg, m.u.error.msg_len, needle, strlen(needle)))
        fail_msg("ERROR %s does not name '%s': %.*s", codec_errc_name(code), needle,
                 (int)m.u.error.msg_len, m.u.error.msg);
}

void expect_error(conn_t *c, uint64_t id, int code)
{
    expect_error_naming(c, id, code, NULL);
}

void expect_pong(conn_t *c, uint64_t id, const char *data)
{
    codec_msg_t m;
    next_frame(c, &m);
    assert_int_equal(m.hdr.type, CODEC_PONG);
    assert_int_equal(m.hdr.request_id, id);
    assert_int_equal(m.u.ping.len, strlen(data));
    if (m.u.ping.len)
        assert_memory_equal(m.u.ping.data, data, m.u.ping.len);
}

/* A PREDICT_RESULT for the standard request: the active version and, bit
 * for bit, the scores model_score gives the same blocks. */
void expect_scores(conn_t *c, uint64_t id)
{
    codec_block_t shared, items[3];
    std_blocks(&shared, items);
    float want[3];
    server_model_t *sm = server_model_acquire(&srv);
    assert_non_null(sm);
    assert_int_equal(model_score(sm->model, &shared, items, 3, want, ref_scratch), 0);
    server_model_release(sm);
    /* and by hand: sigmoid(bias + shared + item) */
    double base = 0.25 + weight_of(1) + weight_of(2) + weight_of(3);
    double z[3] = {base + weight_of(10) + weight_of(11),
                   base + 0.5 * weight_of(12) + 2.0 * weight_of(40), base};
    for (int i = 0; i < 3; i++)
        assert_true(fabs(want[i] - 1.0 / (1.0 + exp(-z[i]))) < 1e-6);

    codec_msg_t m;
    next_frame(c, &m);
    assert_int_equal(m.hdr.type, CODEC_PREDICT_RESULT);
    assert_int_equal(m.hdr.request_id, id);
    assert_int_equal(m.u.result.version, MODEL_VERSION);
    assert_int_equal(m.u.result.items, 3);
    assert_memory_equal(m.u.result.scores, want, sizeof want);
}

void expect_nothing(const conn_t *c)
{
    assert_int_equal(c->out_len - c->out_off, 0);
}

int feed(conn_t *c, const bytes_t *b)
{
    return conn_feed(&w, c, b->p, b->len);
}

/* The connection still answers: a PING gets its PONG. */
void expect_usable(conn_t *c)
{
    bytes_t b = {0};
    put_ping(&b, 4242, "still here");
    assert_int_equal(feed(c, &b), 0);
    expect_pong(c, 4242, "still here");
    expect_nothing(c);
    assert_false(c->closing);
    free(b.p);
}

/* c is closing with nothing left to send, and ignores what comes later:
 * feeding it later (any bytes) returns -EPIPE and queues nothing. */
void expect_closed(conn_t *c, const bytes_t *later)
{
    assert_true(c->closing);
    expect_nothing(c);
    assert_int_equal(feed(c, later), -EPIPE);
    expect_nothing(c);
}

uint64_t errors_of(int code)
{
    return atomic_load(&w.m->errors_by_code[code]);
}

