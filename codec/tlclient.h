/*
 * tlclient.h — libtlclient: the C client of tlserve's wire format.
 *
 * One tlclient_t is one TCP connection.  Requests may be pipelined: send
 * several with tlclient_send_predict and read the answers with tlclient_recv,
 * matching them by request id (the server answers a connection's requests in
 * order, but callers should not rely on it).  tlclient_predict is the
 * blocking convenience: one request, its answer.  TRAIN and FEEDBACK go the
 * same way: tlclient_send_train / tlclient_send_feedback, or the blocking
 * tlclient_train / tlclient_feedback.
 *
 * ONLINE LEARNING: a PREDICT whose req->impression_id is not 0 goes out with
 * the LOG flag, and the server keeps its features under that id; the caller
 * chooses it, unique over the server's impression window (request ids are
 * per connection, so they cannot serve).  A later FEEDBACK names items of
 * such impressions; its FEEDBACK_ACK tells which events were accepted
 * (joined and in the server's sample log) and why the others were refused.
 * A TRAIN whose weights is not NULL goes out with the WEIGHTS flag.
 *
 * RETURNS: 0 on success; a negative -errno for transport problems
 * (-ETIMEDOUT, -ECONNRESET, -EPIPE, -ECONNREFUSED, -EPROTO for a frame that
 * does not decode or an answer that does not fit its request; err->msg says
 * which); a positive codec_errc_t when the server answered with an ERROR
 * frame (its message is in err->msg), also one with request id 0, the
 * server's word on the whole connection before it closes it (OVERLOADED at
 * accept, a framing error).  A send cut short by its deadline leaves half a
 * frame on the wire: the connection is broken and every later call is -EPIPE
 * (close it and connect again).
 *
 * THREAD SAFETY: a tlclient_t belongs to one thread at a time.  Blocking:
 * every call that talks to the server blocks up to its timeout, one deadline
 * for the send and the whole wait (frames for other requests do not extend
 * it); tlclient_send_* wait at most 60 s for the socket to take the frame.
 */
#ifndef TL_CODEC_TLCLIENT_H
#define TL_CODEC_TLCLIENT_H

#include "codec.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tlclient tlclient_t;

/* Connects to host:port (IPv4 dotted or a name).  timeout_ms bounds the
 * connect.  Returns 0 and sets *out (free with tlclient_close) or -errno;
 * -ENXIO when host does not resolve to an IPv4 address. */
int tlclient_connect(const char *host, int port, int timeout_ms, tlclient_t **out);
void tlclient_close(tlclient_t *c);

/* Encodes and sends one PREDICT (ids of every block sorted, unique: see
 * codec_sort_unique).  Sets *request_id.  Returns 0, -errno, or the codec
 * error the request itself has (e.g. CODEC_E_UNSORTED_FEATURES). */
int tlclient_send_predict(tlclient_t *c, const codec_predict_t *req, uint64_t *request_id,
                          codec_error_t *err);

/* Receives the next frame within timeout_ms into *msg.  Arrays in *msg live
 * in the client's own arena until the next tlclient_recv.  Returns 0, the
 * server's ERROR code, -EPROTO when the bytes received are not a frame
 * (*err then says what was wrong in them: magic, type, length), or -errno. */
int tlclient_recv(tlclient_t *c, codec_msg_t *msg, int timeout_ms, codec_error_t *err);

/* Sends req and waits for its answer: copies req->items scores to scores
 * and the scoring version to *version (may be NULL).  Frames for other
 * request ids (pipelined earlier) are skipped. */
int tlclient_predict(tlclient_t *c, const codec_predict_t *req, float *scores, uint64_t *version,
                     int timeout_ms, codec_error_t *err);

/* Encodes and sends one TRAIN (labels 0 or 1; weights NULL = 1 each, or in
 * [0, 1e6]).  Sets *request_id.  Returns as tlclient_send_predict. */
int tlclient_send_train(tlclient_t *c, const codec_train_t *req, uint64_t *request_id,
                        codec_error_t *err);

/* Sends req and waits for its TRAIN_ACK: *accepted = samples the server
 * queued.  A positive return is the server's ERROR code (OVERLOADED: the
 * trainer's queue is full, nothing was queued). */
int tlclient_train(tlclient_t *c, const codec_train_t *req, uint32_t *accepted, int timeout_ms,
                   codec_error_t *err);

/* Encodes and sends one FEEDBACK (events: non-zero impression ids of LOG
 * PREDICTs, item < CODEC_MAX_ITEMS, label 0 or 1, weight in [0, 1e6]).  Sets
 * *request_id.  Returns as tlclient_send_predict. */
int tlclient_send_feedback(tlclient_t *c, const codec_feedback_t *fb, uint64_t *request_id,
                           codec_error_t *err);

/* Sends fb and waits for its FEEDBACK_ACK.  ack->accepted and ack->refused
 * are copied; the refusals (ascending event index and a codec_refusal_t)
 * are copied into refusals[0..cap) and ack->refusal points at it, so size
 * refusals for fb->events to see them all (ack->refused may exceed cap: the
 * rest are counted, not listed).  -EPROTO when accepted + refused is not
 * fb->events.  A positive return is the server's ERROR code (OVERLOADED:
 * nothing was accepted, send it again later). */
int tlclient_feedback(tlclient_t *c, const codec_feedback_t *fb, codec_feedback_ack_t *ack,
                      codec_refused_t *refusals, uint32_t cap, int timeout_ms, codec_error_t *err);

/* Sends a PING and waits for the PONG. */
int tlclient_ping(tlclient_t *c, int timeout_ms);

#ifdef __cplusplus
}
#endif
#endif /* TL_CODEC_TLCLIENT_H */
