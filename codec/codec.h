/*
 * codec.h — tlserve's wire codec (libtlcodec): frames, feature blocks and the
 * messages of docs/wire.md, version 1.  Pure C, no I/O, no heap.
 *
 * ENCODING writes one whole frame (24-byte header + payload) into a caller's
 * buffer.  Every encoder validates its input against the same rules as the
 * decoder, so it never produces a frame that codec_decode_* would refuse.
 * Call it with cap = 0 to learn the size: it returns CODEC_NEED_MORE and sets
 * *len to the exact frame size.
 *
 * DECODING works in place on the payload: fixed-size fields are copied into
 * the output struct, byte strings (PING data, ERROR text) point into the
 * payload, and everything sized by the input (ids, values, block arrays,
 * labels, scores) is carved from a caller-supplied bump arena, which the
 * caller resets after the response.  codec_arena_bound(payload_len) bytes are
 * always enough.  Every count, length, varint and value is checked before
 * use; a refusal returns the wire error code and fills a codec_error_t with a
 * sentence naming the field and its payload offset, ready for an ERROR frame.
 *
 * THREAD SAFETY: every function is reentrant; share nothing but read-only
 * inputs between threads (an arena belongs to one request at a time).
 *
 * FLAGS: the encoders derive the header flags from the message (a PREDICT
 * with impression_id != 0 is sent with CODEC_PREDICT_LOG, a TRAIN with
 * weights != NULL with CODEC_TRAIN_WEIGHTS), so flags and payload agree.
 *
 * ERRORS: functions return CODEC_OK (0) or a codec_errc_t, whose values 1..19
 * are the wire's ERROR codes; CODEC_NEED_MORE is local and never on the wire.
 */
#ifndef TL_CODEC_H
#define TL_CODEC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- constants (docs/wire.md) ----------------------------------------- */

#define CODEC_MAGIC "TLW1"
#define CODEC_WIRE_VERSION 1
#define CODEC_HEADER_SIZE 24

#define CODEC_MAX_PAYLOAD (16u << 20)       /* 16 MiB */
#define CODEC_MAX_ITEMS 4096u               /* items per PREDICT, samples per TRAIN */
#define CODEC_MAX_BLOCK_FEATURES 65536u     /* features in one block */
#define CODEC_MAX_REQUEST_FEATURES 1048576u /* features over all blocks of a request */
#define CODEC_MAX_NAME 64u                  /* model name bytes, [A-Za-z0-9_.-] */
#define CODEC_MAX_ERROR_MSG 1024u           /* ERROR message bytes */
#define CODEC_MAX_PING 64u                  /* PING/PONG payload bytes */

/* 1 when c may be in a model name ([A-Za-z0-9_.-]): the wire's names, the
 * repository's model directories, the admin API's and tlctl's arguments. */
static inline int codec_name_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '.' || c == '-';
}
#define CODEC_MAX_VARINT 10u                /* bytes of one varint */

#define CODEC_BLOCK_VALUES 0x01u     /* block_flags bit 0: f32 values follow */
#define CODEC_BLOCK_FIXED 0x02u      /* block_flags bit 1: ids as n u64 LE, not delta varints */
#define CODEC_LOOKUP_PARTIAL 0x0001u /* LOOKUP frame flag: per-item partial sums */
#define CODEC_PREDICT_LOG 0x0001u    /* PREDICT frame flag: log the request, u64 impression_id first */
#define CODEC_TRAIN_WEIGHTS 0x0001u  /* TRAIN frame flag: f32 weight after each label */
#define CODEC_MAX_WEIGHT 1e6f        /* sample and feedback weights are finite, in [0, 1e6] */

typedef enum codec_type {
    CODEC_PREDICT = 1,
    CODEC_PREDICT_RESULT = 2,
    CODEC_TRAIN = 3,
    CODEC_TRAIN_ACK = 4,
    CODEC_LOOKUP = 5,        /* not decoded by this version: UNKNOWN_TYPE */
    CODEC_LOOKUP_RESULT = 6, /* not decoded by this version: UNKNOWN_TYPE */
    CODEC_ERROR = 7,
    CODEC_PING = 8,
    CODEC_PONG = 9,
    CODEC_FEEDBACK = 10,     /* client -> server: labels for logged impressions */
    CODEC_FEEDBACK_ACK = 11, /* server -> client: accepted count and the refusals */
} codec_type_t;

/* FEEDBACK_ACK: why the server refused one event (docs/wire.md).  A decoder
 * refuses any other value with BAD_VALUE. */
typedef enum codec_refusal {
    CODEC_REFUSE_UNKNOWN_IMPRESSION = 1, /* never logged, or expired from the impression log */
    CODEC_REFUSE_ITEM_OUT_OF_RANGE = 2,  /* item >= the logged PREDICT's items */
    CODEC_REFUSE_WRONG_MODEL = 3,        /* the impression was logged for another model */
    CODEC_REFUSE_DUPLICATE = 4,          /* this impression item already has this feedback */
} codec_refusal_t;

typedef enum codec_errc {
    CODEC_OK = 0,
    CODEC_E_BAD_MAGIC = 1,       /* framing: connection closes */
    CODEC_E_BAD_VERSION = 2,     /* framing: connection closes */
    CODEC_E_FRAME_TOO_LARGE = 3, /* framing: connection closes */
    CODEC_E_BAD_HEADER = 4,      /* framing: connection closes */
    CODEC_E_UNKNOWN_TYPE = 5,
    CODEC_E_TRUNCATED = 6,
    CODEC_E_TRAILING_BYTES = 7,
    CODEC_E_BAD_VARINT = 8,
    CODEC_E_BAD_NAME = 9,
    CODEC_E_UNKNOWN_MODEL = 10,   /* server only */
    CODEC_E_UNKNOWN_VERSION = 11, /* server only */
    CODEC_E_NO_ITEMS = 12,
    CODEC_E_TOO_MANY_ITEMS = 13,
    CODEC_E_TOO_MANY_FEATURES = 14,
    CODEC_E_UNSORTED_FEATURES = 15,
    CODEC_E_BAD_VALUE = 16,
    CODEC_E_OVERLOADED = 17,    /* server only */
    CODEC_E_SHUTTING_DOWN = 18, /* server only */
    CODEC_E_INTERNAL = 19,      /* here: the arena was too small, or a bad argument */
    CODEC_NEED_MORE = 0x100,    /* local: read more bytes / pass a larger buffer */
} codec_errc_t;

#define CODEC_NO_OFFSET UINT32_MAX

typedef struct codec_error {
    uint16_t code;   /* a codec_errc_t */
    uint32_t offset; /* payload byte offset (header offset for framing errors), or NO_OFFSET */
    char msg[128];   /* one sentence naming the field and the offset */
} codec_error_t;

/* Per-request bump allocator for decoded arrays.  The caller owns base and
 * resets `used` to 0 after the response (codec_arena_reset). */
typedef struct codec_arena {
    uint8_t *base; /* caller's memory, 8-byte aligned */
    size_t cap;    /* bytes at base */
    size_t used;   /* bytes handed out so far */
} codec_arena_t;

static inline void codec_arena_reset(codec_arena_t *a)
{
    a->used = 0;
}

/* Arena bytes that are always enough to decode any payload of payload_len
 * bytes (about 12 bytes per payload byte, at most ~12.7 MB). */
size_t codec_arena_bound(size_t payload_len);

/* ---- frame header ------------------------------------------------------ */

typedef struct codec_header {
    uint8_t type;         /* codec_type_t, or an unknown value (see parse) */
    uint16_t flags;       /* per type; undefined bits are 0 */
    uint64_t request_id;  /* echoed in the response */
    uint32_t payload_len; /* <= CODEC_MAX_PAYLOAD */
} codec_header_t;

/* Parses the 24-byte header at buf.  Returns CODEC_OK, CODEC_NEED_MORE when
 * len < 24, or a framing error (BAD_MAGIC, BAD_VERSION, FRAME_TOO_LARGE,
 * BAD_HEADER for non-zero reserved bits or flags undefined for a known type);
 * after a framing error the stream cannot be trusted.  An unknown type is not
 * an error here: *hdr is filled so the caller can skip the payload and answer
 * UNKNOWN_TYPE.  err may be NULL. */
int codec_parse_header(const uint8_t *buf, size_t len, codec_header_t *hdr, codec_error_t *err);

/* Writes the 24-byte header for hdr into out. */
void codec_write_header(uint8_t out[CODEC_HEADER_SIZE], const codec_header_t *hdr);

/* ---- messages ------------------------------------------------------------ */

/* One feature block: the one block type of the codec, the model's scoring
 * (model.h) and its trainers.  ids are 64-bit (field in the top 8 bits).
 * Decoded: ids and values live in the arena.  Nothing promises that the
 * ids of a request's blocks are contiguous (a block with values puts them
 * between its ids and the next block's): model_score checks, looks the ids
 * up in place when they happen to be, and gathers them otherwise. */
typedef struct codec_block {
    const uint64_t *ids; /* n ids, strictly increasing */
    const float *values; /* n finite values, or NULL = all 1.0 */
    uint32_t n;          /* 0..CODEC_MAX_BLOCK_FEATURES */
} codec_block_t;

/* impression_id != 0 is the LOG flag: the encoder sets CODEC_PREDICT_LOG and
 * sends the id, the decoder fills it from a LOG frame and sets 0 otherwise.
 * The client chooses it (request ids are unique per connection only); a
 * FEEDBACK names the impression by it. */
typedef struct codec_predict {
    uint64_t impression_id;        /* 0 = not logged; else the client's non-zero id */
    char name[CODEC_MAX_NAME + 1]; /* NUL-terminated */
    uint64_t version;              /* 0 = active */
    uint32_t items;                /* 1..CODEC_MAX_ITEMS */
    codec_block_t shared;
    codec_block_t *item; /* items blocks (decoded: in the arena) */
} codec_predict_t;

typedef struct codec_result {
    uint64_t version; /* the version that scored the request */
    uint32_t items;   /* 1..CODEC_MAX_ITEMS */
    float *scores;    /* items scores in [0, 1] (decoded: in the arena) */
} codec_result_t;

typedef struct codec_train {
    char name[CODEC_MAX_NAME + 1]; /* NUL-terminated */
    uint32_t samples;              /* 1..CODEC_MAX_ITEMS */
    codec_block_t shared;
    float *labels;         /* samples labels, 0.0 or 1.0 (decoded: in the arena) */
    float *weights;        /* samples weights in [0, 1e6], or NULL = all 1.0; non-NULL is
                              the WEIGHTS flag (decoded: in the arena) */
    codec_block_t *sample; /* samples blocks (decoded: in the arena) */
} codec_train_t;

typedef struct codec_train_ack {
    uint32_t accepted; /* 0..CODEC_MAX_ITEMS */
} codec_train_ack_t;

/* One FEEDBACK event: a label for one item of a logged PREDICT. */
typedef struct codec_feedback_event {
    uint64_t impression_id; /* non-zero: the id the LOG PREDICT carried */
    uint32_t item;          /* index into that PREDICT's items; < CODEC_MAX_ITEMS here, the
                               server checks it against the logged request */
    float label;            /* 0.0 or 1.0 */
    float weight;           /* finite, in [0, CODEC_MAX_WEIGHT] */
} codec_feedback_event_t;

typedef struct codec_feedback {
    char name[CODEC_MAX_NAME + 1];  /* NUL-terminated */
    uint32_t events;                /* 1..CODEC_MAX_ITEMS */
    codec_feedback_event_t *event;  /* events entries (decoded: in the arena) */
} codec_feedback_t;

typedef struct codec_refused {
    uint32_t event; /* index into the FEEDBACK's events; strictly increasing in an ack */
    uint8_t reason; /* a codec_refusal_t */
} codec_refused_t;

/* "accepted" promises: each accepted event was joined to its impression and
 * its sample appended to the server's sample log before this ack was sent,
 * so it will be trained on even across a crash.  accepted + refused equals
 * the FEEDBACK's events. */
typedef struct codec_feedback_ack {
    uint32_t accepted;        /* events accepted */
    uint32_t refused;         /* events refused; accepted + refused = 1..CODEC_MAX_ITEMS */
    codec_refused_t *refusal; /* refused entries, ascending event (decoded: in the arena) */
} codec_feedback_ack_t;

typedef struct codec_errmsg {
    uint16_t code;    /* 1..65535 (unknown codes are passed through) */
    uint16_t msg_len; /* 0..CODEC_MAX_ERROR_MSG */
    const char *msg;  /* msg_len bytes, not NUL-terminated (decoded: in the payload) */
} codec_errmsg_t;

typedef struct codec_ping {
    const uint8_t *data; /* len bytes (decoded: in the payload) */
    uint32_t len;        /* 0..CODEC_MAX_PING */
} codec_ping_t;

typedef struct codec_msg {
    codec_header_t hdr;
    union {
        codec_predict_t predict; /* CODEC_PREDICT */
        codec_result_t result;   /* CODEC_PREDICT_RESULT */
        codec_train_t train;     /* CODEC_TRAIN */
        codec_train_ack_t ack;   /* CODEC_TRAIN_ACK */
        codec_feedback_t feedback;         /* CODEC_FEEDBACK */
        codec_feedback_ack_t feedback_ack; /* CODEC_FEEDBACK_ACK */
        codec_errmsg_t error;    /* CODEC_ERROR */
        codec_ping_t ping;       /* CODEC_PING, CODEC_PONG */
    } u;
} codec_msg_t;

/* ---- decoders -------------------------------------------------------------
 * Each takes the payload (len bytes), allocates from arena, and returns
 * CODEC_OK or the wire error code with *err filled (err may be NULL).  The
 * output points into payload and arena: both must outlive it.  On error the
 * arena may hold partial data (reset it) and *out is unspecified.  Never
 * blocks, never touches the heap.
 *
 * PREDICT and TRAIN take the frame header's flags, because their layout
 * depends on them (PREDICT_LOG: an impression id first; TRAIN_WEIGHTS: a
 * weight per sample); flags undefined for the type are BAD_HEADER. */
int codec_decode_predict(const uint8_t *payload, size_t len, uint16_t flags, codec_arena_t *arena,
                         codec_predict_t *out, codec_error_t *err);
int codec_decode_result(const uint8_t *payload, size_t len, codec_arena_t *arena,
                        codec_result_t *out, codec_error_t *err);
int codec_decode_train(const uint8_t *payload, size_t len, uint16_t flags, codec_arena_t *arena,
                       codec_train_t *out, codec_error_t *err);
int codec_decode_train_ack(const uint8_t *payload, size_t len, codec_train_ack_t *out,
                           codec_error_t *err);
/* FEEDBACK: per event the impression id must be non-zero, item < MAX_ITEMS,
 * label 0 or 1 and weight in [0, 1e6] (else BAD_VALUE); whether the
 * impression and item exist is the server's to check (FEEDBACK_ACK). */
int codec_decode_feedback(const uint8_t *payload, size_t len, codec_arena_t *arena,
                          codec_feedback_t *out, codec_error_t *err);
/* FEEDBACK_ACK: accepted + refused in 1..MAX_ITEMS, refused event indices
 * ascending and below accepted + refused, reasons 1..4 (else BAD_VALUE). */
int codec_decode_feedback_ack(const uint8_t *payload, size_t len, codec_arena_t *arena,
                              codec_feedback_ack_t *out, codec_error_t *err);
int codec_decode_errmsg(const uint8_t *payload, size_t len, codec_errmsg_t *out,
                        codec_error_t *err);
int codec_decode_ping(const uint8_t *payload, size_t len, codec_ping_t *out, codec_error_t *err);

/* Decodes one whole frame at buf (header + payload; bytes after it are left
 * alone).  Returns CODEC_NEED_MORE until len covers the frame, then as
 * codec_parse_header and the decoder of its type; UNKNOWN_TYPE for a type
 * this codec does not decode (out->hdr is valid then, as after any
 * non-framing error).  Frame size = CODEC_HEADER_SIZE + out->hdr.payload_len. */
int codec_decode_frame(const uint8_t *buf, size_t len, codec_arena_t *arena, codec_msg_t *out,
                       codec_error_t *err);

/* ---- encoders -------------------------------------------------------------
 * Each writes one frame (header with request_id, then payload) into
 * buf[0..cap) and sets *len to its size.  Returns CODEC_OK; CODEC_NEED_MORE
 * when cap is too small (*len = the size needed, nothing useful written);
 * or the error the decoder would give the input (e.g. UNSORTED_FEATURES:
 * ids must be strictly increasing, see codec_sort_unique; BAD_NAME;
 * FRAME_TOO_LARGE), with *err filled.  Never blocks, never allocates. */
int codec_encode_predict(uint8_t *buf, size_t cap, uint64_t request_id, const codec_predict_t *req,
                         size_t *len, codec_error_t *err);
int codec_encode_result(uint8_t *buf, size_t cap, uint64_t request_id, const codec_result_t *res,
                        size_t *len, codec_error_t *err);
int codec_encode_train(uint8_t *buf, size_t cap, uint64_t request_id, const codec_train_t *req,
                       size_t *len, codec_error_t *err);
int codec_encode_train_ack(uint8_t *buf, size_t cap, uint64_t request_id,
                           const codec_train_ack_t *ack, size_t *len, codec_error_t *err);
int codec_encode_feedback(uint8_t *buf, size_t cap, uint64_t request_id,
                          const codec_feedback_t *fb, size_t *len, codec_error_t *err);
int codec_encode_feedback_ack(uint8_t *buf, size_t cap, uint64_t request_id,
                              const codec_feedback_ack_t *ack, size_t *len, codec_error_t *err);
int codec_encode_errmsg(uint8_t *buf, size_t cap, uint64_t request_id, const codec_errmsg_t *e,
                        size_t *len, codec_error_t *err);
/* type is CODEC_PING or CODEC_PONG. */
int codec_encode_ping(uint8_t *buf, size_t cap, uint8_t type, uint64_t request_id,
                      const codec_ping_t *p, size_t *len, codec_error_t *err);
/* Re-encodes a decoded message (any type codec_decode_frame accepts) with its
 * header's request id. */
int codec_encode_msg(uint8_t *buf, size_t cap, const codec_msg_t *m, size_t *len,
                     codec_error_t *err);

/* ---- feature ids ----------------------------------------------------------- */

/* The canonical feature id: field in the top 8 bits, the low 56 bits of
 * XXH3_64bits_withSeed(raw, len, seed = field) below.  Pure. */
uint64_t codec_feature_id(uint8_t field, const void *raw, size_t len);

/* Sorts ids ascending in place (values, when not NULL, move with them) and
 * removes duplicate ids, keeping the largest value of each run of duplicates
 * (so a binary block and a block of 1.0s dedup alike; +0.0 beats -0.0).
 * Returns the new count.  O(n log n), no allocation. */
uint32_t codec_sort_unique(uint64_t *ids, float *values, uint32_t n);

/* ---- building blocks -------------------------------------------------------- */

/* Writes v as an unsigned LEB128 varint (1..10 bytes); returns its length. */
unsigned codec_varint_encode(uint8_t out[CODEC_MAX_VARINT], uint64_t v);

/* Bytes codec_varint_encode uses for v. */
unsigned codec_varint_size(uint64_t v);

/* Reads a varint from p[0..len).  Returns its length (1..10) and sets *v;
 * 0 when p ends inside it (truncated); -1 when it is longer than 10 bytes or
 * its value does not fit in 64 bits (the 10th byte is over 1). */
int codec_varint_decode(const uint8_t *p, size_t len, uint64_t *v);

/* "TRUNCATED", ... for a codec_errc_t; "?" for other values. */
const char *codec_errc_name(int code);

#ifdef __cplusplus
}
#endif
#endif /* TL_CODEC_H */
