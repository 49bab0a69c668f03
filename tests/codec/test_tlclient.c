/*
 * test_tlclient.c — libtlclient's online-learning calls over a real loopback
 * TCP connection: a LOG PREDICT carries its impression id and flag, a
 * weighted TRAIN its weights, tlclient_feedback returns the ack's counts and
 * refusals (and stops at the caller's capacity), an ERROR answer (OVERLOADED)
 * comes back as its code with the message, and an ack that does not cover
 * the events is -EPROTO.  The peer is a thread that decodes each frame with
 * the codec and answers from what it decoded.
 *
 * Deadlines, against peers that misbehave: one that never reads (a send cut
 * short by the call's deadline returns -ETIMEDOUT within it, and the
 * connection, holding half a frame, is -EPIPE from then on); one that sends
 * frames for other ids every 50 ms (they do not restart the deadline); one
 * that answers an ERROR with id 0 and closes (its code and message come
 * back, not -ECONNRESET).
 */
#include "codec_test_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "codec/tlclient.h"

struct peer {
    int lfd, port;
    uint64_t last_impression; /* from the last PREDICT */
    uint16_t last_flags;
    float last_weights[4];
    uint32_t last_samples;
};

static int read_full(int fd, uint8_t *p, size_t n)
{
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static void answer(int fd, uint8_t *out, size_t cap, int rc, size_t len)
{
    if (rc == CODEC_OK)
        (void)!write(fd, out, len);
    (void)cap;
}

static void *peer_main(void *arg)
{
    struct peer *p = arg;
    int fd = accept(p->lfd, NULL, NULL);
    if (fd < 0)
        return NULL;
    static uint8_t in[1 << 16], out[1 << 16];
    codec_arena_t a = arena_for(sizeof in);
    for (;;) {
        codec_header_t h;
        if (read_full(fd, in, CODEC_HEADER_SIZE) || codec_parse_header(in, 24, &h, NULL) ||
            h.payload_len > sizeof in - 24 || read_full(fd, in + 24, h.payload_len))
            break;
        codec_msg_t m;
        codec_error_t e;
        codec_arena_reset(&a);
        size_t len = 0;
        int rc = codec_decode_frame(in, 24 + h.payload_len, &a, &m, &e);
        if (rc != CODEC_OK)
            break;
        p->last_flags = h.flags;
        if (h.type == CODEC_PREDICT) {
            p->last_impression = m.u.predict.impression_id;
            float s[8] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
            codec_result_t r = {.version = 3, .items = m.u.predict.items, .scores = s};
            rc = codec_encode_result(out, sizeof out, h.request_id, &r, &len, NULL);
        } else if (h.type == CODEC_TRAIN) {
            p->last_samples = m.u.train.samples;
            if (m.u.train.weights)
                memcpy(p->last_weights, m.u.train.weights, m.u.train.samples * sizeof(float));
            codec_train_ack_t ack = {.accepted = m.u.train.samples};
            rc = codec_encode_train_ack(out, sizeof out, h.request_id, &ack, &len, NULL);
        } else if (h.type == CODEC_FEEDBACK && strcmp(m.u.feedback.name, "busy") == 0) {
            codec_errmsg_t em = {CODEC_E_OVERLOADED, 18, "trainer queue full"};
            rc = codec_encode_errmsg(out, sizeof out, h.request_id, &em, &len, NULL);
        } else if (h.type == CODEC_FEEDBACK) {
            /* refuse every odd event; "short" acks one event too few */
            codec_refused_t ref[16];
            uint32_t n = 0;
            for (uint32_t i = 1; i < m.u.feedback.events && n < 16; i += 2)
                ref[n++] = (codec_refused_t){i, CODEC_REFUSE_DUPLICATE};
            codec_feedback_ack_t ack = {.accepted = m.u.feedback.events - n,
                                        .refused = n,
                                        .refusal = ref};
            if (strcmp(m.u.feedback.name, "short") == 0)
                ack.accepted--;
            rc = codec_encode_feedback_ack(out, sizeof out, h.request_id, &ack, &len, NULL);
        } else {
            break;
        }
        answer(fd, out, sizeof out, rc, len);
    }
    close(fd);
    free(a.base);
    return NULL;
}

static void test_online_calls(void **state)
{
    (void)state;
    struct peer p = {0};
    p.lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(p.lfd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    assert_int_equal(bind(p.lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(p.lfd, 1), 0);
    assert_int_equal(getsockname(p.lfd, (struct sockaddr *)&sa, &sl), 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, peer_main, &p), 0);

    tlclient_t *c;
    assert_int_equal(tlclient_connect("127.0.0.1", ntohs(sa.sin_port), 5000, &c), 0);
    codec_error_t e;

    /* a LOG PREDICT */
    codec_predict_t req = make_predict(3, 4, 2, false);
    req.impression_id = UINT64_C(0xabcdef0123456789);
    float scores[3];
    uint64_t version;
    assert_int_equal(tlclient_predict(c, &req, scores, &version, 5000, &e), 0);
    assert_true(p.last_impression == req.impression_id);
    assert_int_equal(p.last_flags, CODEC_PREDICT_LOG);
    assert_int_equal(version, 3);
    req.impression_id = 0;
    assert_int_equal(tlclient_predict(c, &req, scores, &version, 5000, &e), 0);
    assert_int_equal(p.last_flags, 0);

    /* a weighted TRAIN */
    float labels[3] = {1, 0, 1}, weights[3] = {0.5f, 2.0f, 0.0f};
    codec_train_t t = {.samples = 3, .shared = req.shared, .labels = labels, .sample = req.item,
                       .weights = weights};
    strcpy(t.name, "ctr");
    uint32_t accepted = 0;
    assert_int_equal(tlclient_train(c, &t, &accepted, 5000, &e), 0);
    assert_int_equal(accepted, 3);
    assert_int_equal(p.last_flags, CODEC_TRAIN_WEIGHTS);
    assert_memory_equal(p.last_weights, weights, sizeof weights);
    weights[0] = -1.0f; /* refused by the encoder: nothing is sent */
    assert_int_equal(tlclient_train(c, &t, &accepted, 5000, &e), CODEC_E_BAD_VALUE);

    /* FEEDBACK: 5 events, the peer refuses 1 and 3 */
    codec_feedback_event_t ev[5];
    for (int i = 0; i < 5; i++)
        ev[i] = (codec_feedback_event_t){UINT64_C(0xabcdef0123456789), (uint32_t)i,
                                         (float)(i % 2), 1.0f};
    codec_feedback_t fb = {.events = 5, .event = ev};
    strcpy(fb.name, "ctr");
    codec_feedback_ack_t ack;
    codec_refused_t refs[5];
    assert_int_equal(tlclient_feedback(c, &fb, &ack, refs, 5, 5000, &e), 0);
    assert_int_equal(ack.accepted, 3);
    assert_int_equal(ack.refused, 2);
    assert_ptr_equal(ack.refusal, refs);
    assert_int_equal(refs[0].event, 1);
    assert_int_equal(refs[1].event, 3);
    assert_int_equal(refs[1].reason, CODEC_REFUSE_DUPLICATE);
    /* room for one refusal: both counted, one listed */
    memset(refs, 0xee, sizeof refs);
    assert_int_equal(tlclient_feedback(c, &fb, &ack, refs, 1, 5000, &e), 0);
    assert_int_equal(ack.refused, 2);
    assert_int_equal(refs[0].event, 1);
    assert_int_equal(refs[1].event, 0xeeeeeeeeu);
    /* the server's ERROR */
    strcpy(fb.name, "busy");
    assert_int_equal(tlclient_feedback(c, &fb, &ack, refs, 5, 5000, &e), CODEC_E_OVERLOADED);
    assert_string_equal(e.msg, "trainer queue full");
    /* an ack that does not cover the events */
    strcpy(fb.name, "short");
    assert_int_equal(tlclient_feedback(c, &fb, &ack, refs, 5, 5000, &e), -EPROTO);
    /* the encoder's refusal: nothing sent */
    strcpy(fb.name, "ctr");
    ev[2].impression_id = 0;
    assert_int_equal(tlclient_feedback(c, &fb, &ack, refs, 5, 5000, &e), CODEC_E_BAD_VALUE);

    tlclient_close(c);
    pthread_join(th, NULL);
    close(p.lfd);
    free_predict(&req);
}

/* ---- deadlines against misbehaving peers ---- */

enum bad_mode { NEVER_READS, OTHER_IDS, ERROR_ID0 };

struct bad_peer {
    int lfd;
    enum bad_mode mode;
};

static void *bad_peer_main(void *arg)
{
    struct bad_peer *p = arg;
    int fd = accept(p->lfd, NULL, NULL);
    if (fd < 0)
        return NULL;
    uint8_t out[256];
    size_t len = 0;
    if (p->mode == NEVER_READS) {
        usleep(1500 * 1000); /* holds the connection, reads nothing */
    } else if (p->mode == OTHER_IDS) {
        codec_ping_t pg = {(const uint8_t *)"x", 1};
        for (int i = 0; i < 30; i++) { /* 1.5 s of PONGs for request 999 */
            if (codec_encode_ping(out, sizeof out, CODEC_PONG, 999, &pg, &len, NULL) == CODEC_OK)
                (void)!write(fd, out, len);
            usleep(50 * 1000);
        }
    } else {
        codec_errmsg_t em = {CODEC_E_OVERLOADED, 7, "no room"};
        if (codec_encode_errmsg(out, sizeof out, 0, &em, &len, NULL) == CODEC_OK)
            (void)!write(fd, out, len);
    }
    close(fd);
    return NULL;
}

static int64_t ms_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A client connected to a bad peer of mode m (joined by the caller). */
static tlclient_t *bad_client(struct bad_peer *p, enum bad_mode m, pthread_t *th)
{
    p->mode = m;
    p->lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(p->lfd >= 0);
    int small = 4096; /* a small receive window: the client's send fills it soon */
    assert_int_equal(setsockopt(p->lfd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small), 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    assert_int_equal(bind(p->lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(p->lfd, 1), 0);
    assert_int_equal(getsockname(p->lfd, (struct sockaddr *)&sa, &sl), 0);
    assert_int_equal(pthread_create(th, NULL, bad_peer_main, p), 0);
    tlclient_t *c;
    assert_int_equal(tlclient_connect("127.0.0.1", ntohs(sa.sin_port), 5000, &c), 0);
    return c;
}

static void test_deadlines(void **state)
{
    (void)state;
    struct bad_peer p;
    pthread_t th;
    codec_error_t e;
    float scores[4096];

    /* a peer that never reads: ~9 MB of spread ids cannot all be sent */
    tlclient_t *c = bad_client(&p, NEVER_READS, &th);
    codec_predict_t big = make_predict(4096, 0, 240, false);
    uint64_t x = 88172645463325252ull;
    for (uint32_t i = 0; i < big.items; i++) { /* ids spread over 64 bits: ~9 bytes each */
        uint64_t *ids = (uint64_t *)big.item[i].ids, id = 0;
        for (uint32_t j = 0; j < big.item[i].n; j++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            id += (x >> 9) + 1;
            ids[j] = id;
        }
    }
    int64_t t0 = ms_now();
    assert_int_equal(tlclient_predict(c, &big, scores, NULL, 300, &e), -ETIMEDOUT);
    assert_true(ms_now() - t0 < 1000);
    assert_non_null(strstr(e.msg, "connection is broken"));
    assert_int_equal(tlclient_ping(c, 300), -EPIPE); /* half a frame went out: never again */
    tlclient_close(c);
    pthread_join(th, NULL);
    close(p.lfd);

    /* frames for other ids every 50 ms do not restart a 300 ms deadline */
    c = bad_client(&p, OTHER_IDS, &th);
    t0 = ms_now();
    assert_int_equal(tlclient_ping(c, 300), -ETIMEDOUT);
    assert_true(ms_now() - t0 < 800);
    codec_predict_t req = make_predict(3, 4, 2, false);
    t0 = ms_now();
    assert_int_equal(tlclient_predict(c, &req, scores, NULL, 300, &e), -ETIMEDOUT);
    assert_true(ms_now() - t0 < 800);
    tlclient_close(c);
    pthread_join(th, NULL);
    close(p.lfd);

    /* the server's word on the connection, then its close */
    c = bad_client(&p, ERROR_ID0, &th);
    assert_int_equal(tlclient_predict(c, &req, scores, NULL, 2000, &e), CODEC_E_OVERLOADED);
    assert_string_equal(e.msg, "no room");
    tlclient_close(c);
    pthread_join(th, NULL);
    close(p.lfd);
    free_predict(&req);
    free_predict(&big);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* the bad peers write on after the client closed */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_online_calls),
        cmocka_unit_test(test_deadlines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
