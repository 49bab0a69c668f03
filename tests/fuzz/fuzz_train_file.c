/*
 * fuzz_train_file.c — libFuzzer target for a --train-file's way from bytes
 * to TRAIN frames (server/online_file.c, #included): the format's sniff,
 * tltrain's reader, the per-line sort and dedup, the frames' split under a
 * small queue, the encoding.  Input: byte 0 picks the format (0 auto, as
 * --train-file-format's default, 1 libsvm, 2 libffm, 3 criteo), the rest is
 * the file (a memfd).  Every frame the feeder submits must decode as a TRAIN
 * (codec_decode_train, the trainer's decode) with the samples it says and
 * fit the queue's half, and carry a mark (the file's progress) whose
 * offset is within the file, after the last one's, and whose prefix hash
 * is the hash of the file's bytes up to it; the file read again, resumed
 * from the last mark, submits no sample more; anything else abort()s.  The
 * server around it is what online_file.c calls and nothing more: the
 * submit is the check.
 *
 *   ./fuzz_train_file ../tests/fuzz/corpus/train_file
 *
 * Without TL_FUZZ the same target replays the seed corpus under ctest.
 */
#define _GNU_SOURCE
#include "server/online_file.c"

#include <sys/mman.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- what online_file.c takes from the server --------------------------------- */

struct online_state online__G;
int server_log_level = -1; /* quiet: the feeder logs every refused file */
static server_t fuzz_srv;
static codec_arena_t arena;
static size_t max_payload;

uint64_t online__now_ns(void)
{
    return 0;
}

online_model_t *online__model_get(const char *name, char *why, size_t why_len)
{
    (void)name;
    (void)why;
    (void)why_len;
    return NULL; /* no sample log: a file's progress is what the target hands feed_file */
}

server_model_t *server_model_acquire_named(server_t *srv, const char *name)
{
    (void)srv;
    (void)name;
    return NULL;
}

void server_model_release(server_model_t *sm)
{
    (void)sm;
}

static const uint8_t *file_data; /* the file's bytes */
static size_t file_size;
static online_file_mark_t last_mark;
static bool any_mark;

int online__submit_file(server_t *srv, const codec_train_t *req, uint16_t flags,
                        const uint8_t *payload, uint32_t len, const uint8_t *mark, char *why,
                        size_t why_len)
{
    online_file_mark_t m;
    char mwhy[256];
    if (!mark || online__file_mark_decode(mark, &m, mwhy, sizeof mwhy) != 0)
        abort();
    if (m.offset > file_size || m.prefix != XXH3_64bits(file_data, (size_t)m.offset))
        abort();
    if (any_mark && (m.offset <= last_mark.offset || m.samples != last_mark.samples + req->samples))
        abort();
    last_mark = m;
    any_mark = true;
    (void)srv;
    (void)why;
    (void)why_len;
    if (len > max_payload)
        abort(); /* online_submit would refuse it as TOO_BIG */
    size_t need = codec_arena_bound(len);
    if (need > arena.cap) {
        free(arena.base);
        arena.base = malloc(need);
        arena.cap = arena.base ? need : 0;
        if (!arena.base)
            abort();
    }
    codec_arena_reset(&arena);
    codec_train_t got;
    codec_error_t err;
    if (codec_decode_train(payload, len, flags, &arena, &got, &err) != CODEC_OK)
        abort();
    if (got.samples != req->samples || strcmp(got.name, req->name) != 0)
        abort();
    for (uint32_t i = 0; i < got.samples; i++)
        if (got.sample[i].n != req->sample[i].n || got.labels[i] != req->labels[i])
            abort();
    return ONLINE_QUEUED;
}

/* ---- the target ---------------------------------------------------------------- */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct frame *fr;
    if (size < 1)
        return 0;
    if (!fr) {
        fuzz_srv.cfg.online_queue_bytes = 65536; /* the smallest queue: frames split */
        fuzz_srv.cfg.online_max_samples_per_s = 0;
        G.srv = &fuzz_srv;
        snprintf(F.model, sizeof F.model, "m");
        fr = frame_new(&fuzz_srv.cfg);
        if (!fr)
            abort();
        max_payload = fr->max_payload;
    }
    static const reader_format_t fmts[] = {READER_LIBSVM, READER_LIBSVM, READER_LIBFFM,
                                           READER_CRITEO};
    F.sniff = data[0] % 4 == 0;
    F.format = fmts[data[0] % 4];
    int fd = memfd_create("train_file", MFD_CLOEXEC);
    if (fd < 0)
        return 0;
    size_t off = 1;
    while (off < size) {
        ssize_t w = write(fd, data + off, size - off);
        if (w <= 0)
            abort();
        off += (size_t)w;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    static XXH3_state_t *xx;
    if (!xx && !(xx = XXH3_createState()))
        abort();
    file_data = data + 1;
    file_size = size - 1;
    any_mark = false;
    struct progress pg = {.key = path_key(path, 0), .fd = -1, .xx = xx};
    uint64_t failed = atomic_load(&F.failed), done = atomic_load(&F.done);
    feed_file(fr, &pg, path);
    if (atomic_load(&F.failed) + atomic_load(&F.done) != failed + done + 1)
        abort(); /* a file ends done or failed */
    if (atomic_load(&F.reading) != 0 || pg.fd != -1)
        abort();
    if (any_mark) { /* a restart: resumes after the last mark, submits nothing more */
        online_file_mark_t m = last_mark;
        pg = (struct progress){.key = m.key,
                               .fd = -1,
                               .xx = xx,
                               .found = true,
                               .m_offset = m.offset,
                               .m_line = m.line,
                               .m_prefix = m.prefix,
                               .m_samples = m.samples};
        uint64_t before = atomic_load(&F.samples);
        feed_file(fr, &pg, path);
        if (atomic_load(&F.samples) != before || pg.samples != m.samples)
            abort();
    }
    close(fd);
    return 0;
}
