/*
 * tlclient.h — libtlclient: the C client of tlserve's wire format.
 *
 * One tlclient_t is one TCP connection.  Requests may be pipelined: send
 * several with tlclient_send_predict and read the answers with tlclient_recv,
 * matching them by request id (the server answers a connection's requests in
 * order, but callers should not rely on it).  tlclient_predict is the
 * blocking convenience: one request, its answer.
 *
 * RETURNS: 0 on success; a negative -errno for transport problems
 * (-ETIMEDOUT, -ECONNRESET, -EPIPE, -ECONNREFUSED, -EPROTO for a frame that
 * does not decode); a positive codec_errc_t when the server answered with an
 * ERROR frame (its message is in err->msg).
 *
 * THREAD SAFETY: a tlclient_t belongs to one thread at a time.  Blocking:
 * every call that talks to the server blocks up to its timeout.
 */
#ifndef TL_CODEC_TLCLIENT_H
#define TL_CODEC_TLCLIENT_H

#include "codec.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tlclient tlclient_t;

/* Connects to host:port (IPv4 dotted or a name).  timeout_ms bounds the
 * connect.  Returns 0 and sets *out (free with tlclient_close) or -errno. */
int tlclient_connect(const char *host, int port, int timeout_ms, tlclient_t **out);
void tlclient_close(tlclient_t *c);

/* Encodes and sends one PREDICT (ids of every block sorted, unique: see
 * codec_sort_unique).  Sets *request_id.  Returns 0, -errno, or the codec
 * error the request itself has (e.g. CODEC_E_UNSORTED_FEATURES). */
int tlclient_send_predict(tlclient_t *c, const codec_predict_t *req, uint64_t *request_id,
                          codec_error_t *err);

/* Receives the next frame within timeout_ms into *msg.  Arrays in *msg live
 * in the client's own arena until the next tlclient_recv. */
int tlclient_recv(tlclient_t *c, codec_msg_t *msg, int timeout_ms, codec_error_t *err);

/* Sends req and waits for its answer: copies req->items scores to scores
 * and the scoring version to *version (may be NULL).  Frames for other
 * request ids (pipelined earlier) are skipped. */
int tlclient_predict(tlclient_t *c, const codec_predict_t *req, float *scores, uint64_t *version,
                     int timeout_ms, codec_error_t *err);

/* Sends a PING and waits for the PONG. */
int tlclient_ping(tlclient_t *c, int timeout_ms);

#ifdef __cplusplus
}
#endif
#endif /* TL_CODEC_TLCLIENT_H */
