"""The tlserve wire format, version 1: frames, feature blocks and message payloads.

Encoders and decoders for every message the client sends or receives (docs/wire.md), written
from the spec rather than from the C codec in codec/, so that the integration tests check the
server against a second reading of it.  Standard library only.

Contents
  - limits and constants of the spec (MAX_ITEMS, ...), MsgType
  - varint encode/decode (unsigned LEB128, at most 10 bytes, must fit in 64 bits)
  - frame header pack/parse (24 bytes, "TLW1")
  - feature blocks: Block, make_block, encode_block, decode_block
  - payload encoders/decoders for PREDICT, PREDICT_RESULT, TRAIN, TRAIN_ACK, ERROR, PING, PONG,
    and decode_message for a whole frame (FEEDBACK and FEEDBACK_ACK: feedback.py)
  - header flags that change a payload's layout: PREDICT_FLAG_LOG (an impression id first),
    TRAIN_FLAG_WEIGHTS (a weight after each label); the decoders of those types take the
    frame's flags, and predict_flags / train_flags give the flags for what an encoder wrote

Every check raises WireError(code, message) (errors.py), whose class is the code's family.
Decoders follow docs/wire.md "Decoding order": fields are checked in wire order and the first
bad one decides; a count is checked against its limits, then against the least bytes its
elements take (TRUNCATED before any element is read); TRAILING_BYTES is checked last.  Where
the spec is silent the C codec (codec/*.c) is followed; such places are marked "C-CODEC".
Encoders take check=False so tests can forge frames a real client never sends.
"""

from __future__ import annotations

import enum
import math
import struct
from typing import Iterable, NamedTuple, Optional, Sequence

from .errors import ErrorCode, WireError

__all__ = [
    "MAGIC", "WIRE_VERSION", "HEADER_SIZE", "HEADER_STRUCT", "MAX_PAYLOAD", "MAX_ITEMS",
    "MAX_BLOCK_FEATURES", "MAX_REQUEST_FEATURES", "MAX_NAME_LEN", "MAX_ERROR_MSG",
    "MAX_PING_PAYLOAD", "BLOCK_FLAG_VALUES", "BLOCK_FLAG_FIXED", "LOOKUP_FLAG_PARTIAL_SUMS",
    "PREDICT_FLAG_LOG", "TRAIN_FLAG_WEIGHTS", "MAX_WEIGHT", "MIN_BYTES_PER_WEIGHTED_SAMPLE",
    "predict_flags", "train_flags", "check_weight",
    "U64_MASK", "MsgType", "DEFINED_FLAGS", "VARINT_TRUNCATED_ERROR", "BLOCK_FLAGS_ERROR",
    "TRAIN_NO_SAMPLES_ERROR", "TRAIN_TOO_MANY_SAMPLES_ERROR", "OVERSIZE_FIELD_ERROR",
    "ERROR_CODE_ZERO_ERROR", "MIN_BYTES_PER_DELTA", "MIN_BYTES_PER_DELTA_VALUE",
    "MIN_BYTES_PER_ITEM_BLOCK", "MIN_BYTES_PER_SAMPLE", "MIN_BYTES_PER_SCORE",
    "encode_varint", "decode_varint", "FrameHeader", "Frame", "pack_header", "parse_header",
    "encode_frame", "decode_frame", "Block", "make_block", "encode_block", "decode_block",
    "PredictRequest", "PredictResult", "TrainRequest", "ErrorMessage", "encode_predict",
    "decode_predict", "encode_predict_result", "decode_predict_result", "encode_train",
    "decode_train", "encode_train_ack", "decode_train_ack", "encode_error", "decode_error",
    "encode_ping", "decode_ping", "encode_pong", "decode_pong", "decode_message",
]

# --------------------------------------------------------------------------------------------
# Constants
# --------------------------------------------------------------------------------------------

MAGIC = b"TLW1"
WIRE_VERSION = 1
HEADER_SIZE = 24
HEADER_STRUCT = struct.Struct("<4sBBHQII")  # magic, ver, type, flags, request_id, len, reserved
assert HEADER_STRUCT.size == HEADER_SIZE

MAX_PAYLOAD = 16 * 1024 * 1024
MAX_ITEMS = 4096
MAX_BLOCK_FEATURES = 65536
MAX_REQUEST_FEATURES = 1_048_576
MAX_NAME_LEN = 64
MAX_ERROR_MSG = 1024
MAX_PING_PAYLOAD = 64

BLOCK_FLAG_VALUES = 0x01
BLOCK_FLAG_FIXED = 0x02   # ids as n little-endian u64s instead of delta varints
LOOKUP_FLAG_PARTIAL_SUMS = 0x01
PREDICT_FLAG_LOG = 0x01       # PREDICT: keep it in the impression log; u64 impression_id first
TRAIN_FLAG_WEIGHTS = 0x01     # TRAIN: f32 weight after each sample's label
MAX_WEIGHT = 1e6              # TRAIN and FEEDBACK weights: finite, in [0, 1e6]

U64_MASK = (1 << 64) - 1
_M64 = U64_MASK
_F32_MAX = 3.4028234663852886e38  # the largest finite float32

_NAME_CHARS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")


class MsgType(enum.IntEnum):
    """The frame header's message type (docs/wire.md "Message types")."""

    PREDICT = 1
    PREDICT_RESULT = 2
    TRAIN = 3
    TRAIN_ACK = 4
    LOOKUP = 5
    LOOKUP_RESULT = 6
    ERROR = 7
    PING = 8
    PONG = 9
    FEEDBACK = 10
    FEEDBACK_ACK = 11


# Flag bits defined per message type (all others must be 0; BAD_HEADER otherwise).
DEFINED_FLAGS = {t: 0 for t in MsgType}
DEFINED_FLAGS[MsgType.LOOKUP] = LOOKUP_FLAG_PARTIAL_SUMS
DEFINED_FLAGS[MsgType.PREDICT] = PREDICT_FLAG_LOG
DEFINED_FLAGS[MsgType.TRAIN] = TRAIN_FLAG_WEIGHTS


# Codes docs/wire.md gives for cases a reader could get wrong, named so tests can say which.
# Conventions: a varint cut off by the end of the payload is TRUNCATED (like every field that
# runs past the payload); only one over 10 bytes or 64 bits is BAD_VARINT.
VARINT_TRUNCATED_ERROR = ErrorCode.TRUNCATED
# Feature block: block_flags with a bit other than bits 0 and 1 (values, fixed ids) set.
BLOCK_FLAGS_ERROR = ErrorCode.BAD_VALUE
# TRAIN: 0 samples / more than MAX_ITEMS samples.
TRAIN_NO_SAMPLES_ERROR = ErrorCode.NO_ITEMS
TRAIN_TOO_MANY_SAMPLES_ERROR = ErrorCode.TOO_MANY_ITEMS
# ERROR code 0, ERROR msg_len over 1024, PING/PONG payload over 64 bytes.
OVERSIZE_FIELD_ERROR = ErrorCode.BAD_VALUE
ERROR_CODE_ZERO_ERROR = ErrorCode.BAD_VALUE

# "Decoding order": the least number of payload bytes one element of a count takes.  A count n
# with n * MIN_BYTES_... over the bytes left is TRUNCATED before any element is read.
MIN_BYTES_PER_DELTA = 1           # feature block without values
MIN_BYTES_PER_DELTA_VALUE = 5     # feature block with values: 1 per delta + 4 per value
MIN_BYTES_PER_ITEM_BLOCK = 2      # PREDICT item block: varint n + u8 block_flags
MIN_BYTES_PER_SAMPLE = 6          # TRAIN sample: f32 label + varint n + u8 block_flags
MIN_BYTES_PER_WEIGHTED_SAMPLE = 10  # TRAIN sample with WEIGHTS: + f32 weight
MIN_BYTES_PER_SCORE = 4           # PREDICT_RESULT: f32 score


# --------------------------------------------------------------------------------------------
# Varint
# --------------------------------------------------------------------------------------------

def encode_varint(value: int) -> bytes:
    """Minimal unsigned LEB128 encoding of 0 <= value < 2**64."""
    if value < 0 or value > U64_MASK:
        raise ValueError("varint out of range: %r" % (value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_varint(buf, pos: int = 0, end: Optional[int] = None):
    """Decode one varint from buf[pos:end].  Returns (value, new_pos).

    Strict: at most 10 bytes and the 10th byte must be 0 or 1 (else BAD_VARINT); running into
    `end` first is TRUNCATED (VARINT_TRUNCATED_ERROR).  Non-minimal encodings are accepted.
    """
    if end is None:
        end = len(buf)
    value = 0
    shift = 0
    for i in range(10):
        if pos >= end:
            raise WireError(VARINT_TRUNCATED_ERROR,
                            "varint runs past the end of the payload at offset %d" % pos)
        b = buf[pos]
        pos += 1
        if i == 9:
            if b & 0x80:
                raise WireError(ErrorCode.BAD_VARINT,
                                "varint longer than 10 bytes at offset %d" % (pos - 10))
            if b > 1:
                raise WireError(ErrorCode.BAD_VARINT,
                                "varint overflows 64 bits at offset %d" % (pos - 10))
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
    raise AssertionError("unreachable")


# --------------------------------------------------------------------------------------------
# Frame header
# --------------------------------------------------------------------------------------------

class FrameHeader(NamedTuple):
    """A parsed, checked frame header (magic, version and reserved are implied)."""

    type: int
    flags: int
    request_id: int
    payload_len: int


class Frame(NamedTuple):
    """One whole frame: header fields and the undecoded payload."""

    type: int
    flags: int
    request_id: int
    payload: bytes


def pack_header(msg_type: int, request_id: int, payload_len: int, flags: int = 0, *,
                magic: bytes = MAGIC, version: int = WIRE_VERSION, reserved: int = 0) -> bytes:
    """Pack a 24-byte header.  The keyword-only fields exist so tests can forge bad headers."""
    return HEADER_STRUCT.pack(magic, version, msg_type, flags, request_id, payload_len, reserved)


def parse_header(buf, *, check_flags: bool = True) -> FrameHeader:
    """Parse and validate the first 24 bytes of buf.

    Order of checks (docs/wire.md "Frame"): magic, version, payload_len, reserved, flags; the
    first bad field is reported.  The type is not checked (UNKNOWN_TYPE is a per-request error,
    not a framing one); flags of unknown types are not checked either.
    """
    if len(buf) < HEADER_SIZE:
        raise WireError(ErrorCode.TRUNCATED,
                        "frame header needs %d bytes, got %d" % (HEADER_SIZE, len(buf)))
    magic, ver, mtype, flags, rid, plen, reserved = HEADER_STRUCT.unpack_from(buf, 0)
    if magic != MAGIC:
        raise WireError(ErrorCode.BAD_MAGIC, "frame magic is %r, not b'TLW1'" % (magic,))
    if ver != WIRE_VERSION:
        raise WireError(ErrorCode.BAD_VERSION, "wire version is %d, not 1" % ver)
    if plen > MAX_PAYLOAD:
        raise WireError(ErrorCode.FRAME_TOO_LARGE,
                        "payload_len %d is over MAX_PAYLOAD %d" % (plen, MAX_PAYLOAD))
    if reserved != 0:
        raise WireError(ErrorCode.BAD_HEADER, "reserved header field is 0x%08x, not 0" % reserved)
    if check_flags and mtype in DEFINED_FLAGS and flags & ~DEFINED_FLAGS[mtype] & 0xFFFF:
        raise WireError(ErrorCode.BAD_HEADER,
                        "flags 0x%04x has bits not defined for type %d" % (flags, mtype))
    return FrameHeader(mtype, flags, rid, plen)


def encode_frame(msg_type: int, request_id: int, payload: bytes = b"", flags: int = 0) -> bytes:
    """Header + payload, ready to send."""
    return pack_header(msg_type, request_id, len(payload), flags) + bytes(payload)


def decode_frame(buf) -> Frame:
    """Decode exactly one whole frame (header + payload, nothing after it)."""
    h = parse_header(buf)
    have = len(buf) - HEADER_SIZE
    if have < h.payload_len:
        raise WireError(ErrorCode.TRUNCATED,
                        "payload_len is %d but only %d bytes follow" % (h.payload_len, have))
    if have > h.payload_len:
        raise WireError(ErrorCode.TRAILING_BYTES,
                        "%d bytes after the frame" % (have - h.payload_len))
    return Frame(h.type, h.flags, h.request_id, bytes(buf[HEADER_SIZE:]))


# --------------------------------------------------------------------------------------------
# Feature blocks
# --------------------------------------------------------------------------------------------

class Block(NamedTuple):
    """A feature block: ids strictly increasing; values None means every value is 1.0."""
    ids: list
    values: Optional[list] = None


def check_u64(x, what: str) -> None:
    """An id, version or count of the wire: an int (not a bool) in 0..2^64-1, else TypeError
    or ValueError naming `what` (raised before anything is encoded)."""
    if type(x) is bool or not isinstance(x, int):
        raise TypeError("%s %r is not an int" % (what, x))
    if not 0 <= x <= _M64:
        raise ValueError("%s %d is outside 0..2^64-1" % (what, x))


def _check_value(v) -> None:
    """A feature value: a finite number that a float32 holds (else struct would raise)."""
    if type(v) is bool or not isinstance(v, (int, float)):
        raise TypeError("feature value %r is not a number" % (v,))
    if not math.isfinite(v):
        raise WireError(ErrorCode.BAD_VALUE, "value %r is not finite" % (v,))
    if abs(v) > _F32_MAX:
        raise WireError(ErrorCode.BAD_VALUE, "value %r is outside float32's range" % (v,))


def make_block(ids: Iterable[int], values: Optional[Iterable[float]] = None) -> Block:
    """Sort (ids, values) by id.  Duplicate ids raise WireError(UNSORTED_FEATURES); an id that
    is not an int in 0..2^64-1 raises TypeError or ValueError."""
    ids = list(ids)
    for fid in ids:
        check_u64(fid, "feature id")
    if values is None:
        ids.sort()
        vals = None
    else:
        values = list(values)
        if len(values) != len(ids):
            raise ValueError("%d ids but %d values" % (len(ids), len(values)))
        pairs = sorted(zip(ids, values))
        ids = [p[0] for p in pairs]
        vals = [p[1] for p in pairs]
    for i in range(1, len(ids)):
        if ids[i] == ids[i - 1]:
            raise WireError(ErrorCode.UNSORTED_FEATURES, "duplicate feature id 0x%016x" % ids[i])
    return Block(ids, vals)


def _as_block(b) -> Block:
    if isinstance(b, Block):
        return b
    if isinstance(b, tuple) and len(b) == 2 and not isinstance(b[0], int):
        return make_block(b[0], b[1])
    return make_block(b)


def encode_block(block, out: Optional[bytearray] = None, *, check: bool = True,
                 fixed_ids: Optional[bool] = None) -> bytearray:
    """Append a feature block to `out`.  `block` is a Block, a (ids, values) pair or an id list
    (the last two are sorted first).  A Block is encoded as given; with check=False its ids may
    be unsorted or repeated (deltas are then taken mod 2^64) so tests can forge bad blocks."""
    if out is None:
        out = bytearray()
    block = _as_block(block)
    ids, values = block.ids, block.values
    n = len(ids)
    if check and n > MAX_BLOCK_FEATURES:
        raise WireError(ErrorCode.TOO_MANY_FEATURES,
                        "block has %d features, over %d" % (n, MAX_BLOCK_FEATURES))
    out += encode_varint(n)
    prev = 0
    deltas = []
    for i, fid in enumerate(ids):
        if check:
            check_u64(fid, "feature id")
            if i and fid <= prev:
                raise WireError(ErrorCode.UNSORTED_FEATURES,
                                "feature ids not strictly increasing at index %d" % i)
        deltas.append(encode_varint((fid - prev) & _M64))
        prev = fid
    # the spec's rule: fixed ids when delta varints would average over 7 bytes an id
    fixed = fixed_ids if fixed_ids is not None else sum(map(len, deltas)) > 7 * n
    out.append((BLOCK_FLAG_VALUES if values is not None else 0)
               | (BLOCK_FLAG_FIXED if fixed else 0))
    if fixed:
        out += struct.pack("<%dQ" % n, *[fid & _M64 for fid in ids])
    else:
        for d in deltas:
            out += d
    if values is not None:
        if len(values) != n:
            raise ValueError("%d ids but %d values" % (n, len(values)))
        if check:
            for v in values:
                _check_value(v)
        out += struct.pack("<%df" % n, *values)
    return out


class _Reader:
    """Cursor over one payload; every read past the end is TRUNCATED."""

    __slots__ = ("buf", "pos", "end", "features")

    def __init__(self, buf):
        self.buf = bytes(buf)
        self.pos = 0
        self.end = len(buf)
        self.features = 0

    def need(self, n, what):
        if self.end - self.pos < n:
            raise WireError(ErrorCode.TRUNCATED,
                            "%s needs %d bytes at offset %d, payload has %d left"
                            % (what, n, self.pos, self.end - self.pos))

    def u8(self, what):
        self.need(1, what)
        v = self.buf[self.pos]
        self.pos += 1
        return v

    def unpack(self, st: struct.Struct, what):
        self.need(st.size, what)
        v = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return v

    def raw(self, n, what):
        self.need(n, what)
        v = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return v

    def varint(self):
        v, self.pos = decode_varint(self.buf, self.pos, self.end)
        return v

    def count(self, what, min_bytes_each, *, allow_zero=False):
        """A count of elements (items, samples, scores), per "Decoding order": its limits first
        (0: NO_ITEMS unless allow_zero, over MAX_ITEMS: TOO_MANY_ITEMS), then the least bytes
        its elements take (TRUNCATED), before any element is read."""
        at = self.pos
        n = self.varint()
        if n == 0 and not allow_zero:
            raise WireError(ErrorCode.NO_ITEMS, "%s is 0 at offset %d" % (what, at))
        if n > MAX_ITEMS:
            raise WireError(ErrorCode.TOO_MANY_ITEMS,
                            "%s %d at offset %d is over %d" % (what, n, at, MAX_ITEMS))
        self.need_for_count(n, min_bytes_each, what, at)
        return n

    def need_for_count(self, n, min_bytes_each, what, at):
        least = n * min_bytes_each
        if least > self.end - self.pos:
            raise WireError(ErrorCode.TRUNCATED,
                            "%s %d at offset %d need at least %d bytes, payload has %d left"
                            % (what, n, at, least, self.end - self.pos))

    def done(self):
        if self.pos != self.end:
            raise WireError(ErrorCode.TRAILING_BYTES,
                            "%d bytes left after the last field at offset %d"
                            % (self.end - self.pos, self.pos))

    def block(self, where):
        """One feature block, checked in the order docs/wire.md "Feature block" gives."""
        at = self.pos
        n = self.varint()
        if n > MAX_BLOCK_FEATURES:
            raise WireError(ErrorCode.TOO_MANY_FEATURES,
                            "%s has %d features, over %d" % (where, n, MAX_BLOCK_FEATURES))
        self.features += n
        if self.features > MAX_REQUEST_FEATURES:
            raise WireError(ErrorCode.TOO_MANY_FEATURES,
                            "request has over %d features at %s" % (MAX_REQUEST_FEATURES, where))
        flags = self.u8(where + " block_flags")
        if flags & ~(BLOCK_FLAG_VALUES | BLOCK_FLAG_FIXED):
            raise WireError(BLOCK_FLAGS_ERROR,
                            "%s block_flags 0x%02x has undefined bits" % (where, flags))
        fixed = bool(flags & BLOCK_FLAG_FIXED)
        per = (8 if fixed else MIN_BYTES_PER_DELTA) + (4 if flags & BLOCK_FLAG_VALUES else 0)
        self.need_for_count(n, per, where + " features", at)
        buf, pos, end = self.buf, self.pos, self.end
        ids = [0] * n
        cur = 0
        if fixed:
            ids = list(struct.unpack_from("<%dQ" % n, buf, pos))
            for i in range(1, n):
                if ids[i] <= ids[i - 1]:
                    self.pos = pos + 8 * i
                    raise WireError(ErrorCode.UNSORTED_FEATURES,
                                    "%s fixed id %d is not above id %d" % (where, i, i - 1))
            pos += 8 * n
        for i in range(0 if fixed else n):
            d, pos = decode_varint(buf, pos, end)
            if i and d == 0:
                self.pos = pos
                raise WireError(ErrorCode.UNSORTED_FEATURES,
                                "%s feature %d repeats the previous id" % (where, i))
            cur += d
            if cur > _M64:
                self.pos = pos
                raise WireError(ErrorCode.UNSORTED_FEATURES,
                                "%s feature %d: id sum overflows 64 bits" % (where, i))
            ids[i] = cur
        self.pos = pos
        values = None
        if flags & BLOCK_FLAG_VALUES:
            self.need(4 * n, where + " values")
            values = list(struct.unpack_from("<%df" % n, buf, self.pos))
            self.pos += 4 * n
            for i, v in enumerate(values):
                if not math.isfinite(v):
                    raise WireError(ErrorCode.BAD_VALUE,
                                    "%s value %d is %r" % (where, i, v))
        return Block(ids, values)

    def name(self):
        n = self.u8("name_len")
        if n == 0 or n > MAX_NAME_LEN:
            raise WireError(ErrorCode.BAD_NAME, "model name length %d is not 1..64" % n)
        raw = self.raw(n, "model name")
        if not _NAME_CHARS.issuperset(raw):
            raise WireError(ErrorCode.BAD_NAME, "model name %r has characters outside "
                            "[A-Za-z0-9_.-]" % (raw,))
        return raw.decode("ascii")


def decode_block(buf, pos: int = 0, end: Optional[int] = None):
    """Decode one feature block at buf[pos:end]; returns (Block, new_pos)."""
    r = _Reader(bytes(buf[:end] if end is not None else buf))
    r.pos = pos
    blk = r.block("block")
    return blk, r.pos


# --------------------------------------------------------------------------------------------
# Messages
# --------------------------------------------------------------------------------------------

_U64 = struct.Struct("<Q")
_U16 = struct.Struct("<H")
_U16U16 = struct.Struct("<HH")
_F32 = struct.Struct("<f")


class PredictRequest(NamedTuple):
    """A decoded PREDICT: model name, pinned version (0: active), shared block, item blocks,
    and the impression id of a LOG PREDICT (0: not logged)."""

    model: str
    version: int
    shared: Block
    items: list
    impression_id: int = 0


class PredictResult(NamedTuple):
    """A PREDICT's answer: the model version that scored it, one score in [0, 1] per item."""

    version: int
    scores: list


class TrainRequest(NamedTuple):
    """A decoded TRAIN: model name, shared block, (label, block) samples, and one weight per
    sample when the frame had TRAIN_FLAG_WEIGHTS (None: every weight is 1)."""

    model: str
    shared: Block
    samples: list  # of (label, Block)
    weights: Optional[list] = None


class ErrorMessage(NamedTuple):
    """A decoded ERROR payload: code (an int; ErrorCode when known) and message."""

    code: int
    message: str


def _encode_name(model, out: bytearray, check: bool):
    raw = model.encode("utf-8") if isinstance(model, str) else bytes(model)
    if check:
        if not 1 <= len(raw) <= MAX_NAME_LEN:
            raise WireError(ErrorCode.BAD_NAME, "model name %r...: length %d is not 1..%d"
                            % (raw[:16], len(raw), MAX_NAME_LEN))
        if not _NAME_CHARS.issuperset(raw):
            raise WireError(ErrorCode.BAD_NAME, "model name %r has characters outside "
                            "[A-Za-z0-9_.-]" % (raw,))
    out.append(len(raw) & 0xFF)
    out += raw


def predict_flags(impression_id: int = 0) -> int:
    """The header flags of a PREDICT encoded with this impression_id: LOG when it is not 0."""
    return PREDICT_FLAG_LOG if impression_id else 0


def train_flags(weights=None) -> int:
    """The header flags of a TRAIN encoded with these weights: WEIGHTS when not None."""
    return TRAIN_FLAG_WEIGHTS if weights is not None else 0


def check_weight(w, what: str) -> None:
    """A TRAIN or FEEDBACK weight: finite, in [0, 1e6] (NaN fails both compares)."""
    if not 0.0 <= w <= MAX_WEIGHT:
        raise WireError(ErrorCode.BAD_VALUE, "%s %r is not in [0, 1e6]" % (what, w))


def encode_predict(model, shared, items: Sequence, version: int = 0, *,
                   impression_id: int = 0, check: bool = True) -> bytes:
    """PREDICT payload.  shared and each item: a Block, an id list or an (ids, values) pair.
    impression_id != 0 makes a LOG PREDICT: the id goes first, and the frame must carry
    predict_flags(impression_id).  check=False skips the limit checks (but see encode_block)
    so tests can send bad requests."""
    out = bytearray()
    if check:
        check_u64(version, "version")
        check_u64(impression_id, "impression_id")
    if impression_id:
        out += _U64.pack(impression_id)
    _encode_name(model, out, check)
    out += _U64.pack(version)
    if check:
        if not items:
            raise WireError(ErrorCode.NO_ITEMS, "a request with 0 items")
        if len(items) > MAX_ITEMS:
            raise WireError(ErrorCode.TOO_MANY_ITEMS, "%d items, over %d" % (len(items), MAX_ITEMS))
    out += encode_varint(len(items))
    encode_block(shared, out, check=check)
    for it in items:
        encode_block(it, out, check=check)
    return bytes(out)


def decode_predict(payload, flags: int = 0) -> PredictRequest:
    """PREDICT payload, checked in wire order (with the LOG flag: the impression id, 0 is
    BAD_VALUE; then name, version, items, blocks, trailing bytes)."""
    r = _Reader(payload)
    impression_id = 0
    if flags & PREDICT_FLAG_LOG:
        (impression_id,) = r.unpack(_U64, "impression_id")
        if impression_id == 0:
            raise WireError(ErrorCode.BAD_VALUE, "impression_id 0 at offset 0 (LOG needs one)")
    model = r.name()
    (version,) = r.unpack(_U64, "version")
    n = r.count("items", MIN_BYTES_PER_ITEM_BLOCK)
    shared = r.block("shared block")
    items = [r.block("item %d" % i) for i in range(n)]
    r.done()
    return PredictRequest(model, version, shared, items, impression_id)


def encode_predict_result(version: int, scores: Sequence[float], *, check: bool = True) -> bytes:
    """PREDICT_RESULT payload.  check=False skips the count and score checks (for tests)."""
    if check:
        if not scores:
            raise WireError(ErrorCode.NO_ITEMS, "a PREDICT_RESULT with 0 scores")
        if len(scores) > MAX_ITEMS:
            raise WireError(ErrorCode.TOO_MANY_ITEMS,
                            "%d scores, over %d" % (len(scores), MAX_ITEMS))
        for i, s in enumerate(scores):
            if not 0.0 <= s <= 1.0:
                raise WireError(ErrorCode.BAD_VALUE, "score %d is %r, not in [0, 1]" % (i, s))
    return _U64.pack(version) + encode_varint(len(scores)) + struct.pack(
        "<%df" % len(scores), *scores)


def decode_predict_result(payload, *, check_scores: bool = True) -> PredictResult:
    """PREDICT_RESULT payload, in wire order: version, items (1..MAX_ITEMS: NO_ITEMS,
    TOO_MANY_ITEMS; 4 bytes per score left or TRUNCATED), then each score (NaN or outside
    [0, 1]: BAD_VALUE, unless check_scores=False), and TRAILING_BYTES last."""
    r = _Reader(payload)
    (version,) = r.unpack(_U64, "version")
    n = r.count("items", MIN_BYTES_PER_SCORE)
    scores = list(struct.unpack_from("<%df" % n, r.buf, r.pos))
    if check_scores:
        for i, s in enumerate(scores):
            if not 0.0 <= s <= 1.0:
                raise WireError(ErrorCode.BAD_VALUE, "score %d at offset %d is %r, not in [0, 1]"
                                % (i, r.pos + 4 * i, s))
    r.pos += 4 * n
    r.done()
    return PredictResult(version, scores)


def encode_train(model, shared, samples: Sequence, *, weights: Optional[Sequence[float]] = None,
                 check: bool = True) -> bytes:
    """TRAIN payload.  samples: sequence of (label, block).  weights: one per sample, or None
    (every weight 1); with weights the frame must carry train_flags(weights)."""
    if weights is not None and len(weights) != len(samples):
        raise ValueError("%d weights for %d samples" % (len(weights), len(samples)))
    out = bytearray()
    _encode_name(model, out, check)
    if check:
        if not samples:
            raise WireError(TRAIN_NO_SAMPLES_ERROR, "a TRAIN with 0 samples")
        if len(samples) > MAX_ITEMS:
            raise WireError(TRAIN_TOO_MANY_SAMPLES_ERROR,
                            "%d samples, over %d" % (len(samples), MAX_ITEMS))
    out += encode_varint(len(samples))
    encode_block(shared, out, check=check)
    for i, (label, blk) in enumerate(samples):
        if check and label not in (0.0, 1.0):
            raise WireError(ErrorCode.BAD_VALUE, "label %r is not 0 or 1" % (label,))
        out += _F32.pack(label)
        if weights is not None:
            if check:
                check_weight(weights[i], "sample %d weight" % i)
            out += _F32.pack(weights[i])
        encode_block(blk, out, check=check)
    return bytes(out)


def decode_train(payload, flags: int = 0) -> TrainRequest:
    """TRAIN payload, checked in wire order; a label other than 0 or 1 is BAD_VALUE, and with
    the WEIGHTS flag so is a weight outside [0, 1e6] (read after its label)."""
    weighted = bool(flags & TRAIN_FLAG_WEIGHTS)
    r = _Reader(payload)
    model = r.name()
    n = r.count("samples", MIN_BYTES_PER_WEIGHTED_SAMPLE if weighted else MIN_BYTES_PER_SAMPLE)
    shared = r.block("shared block")
    samples = []
    weights = [] if weighted else None
    for i in range(n):
        (label,) = r.unpack(_F32, "sample %d label" % i)
        if label != 0.0 and label != 1.0:
            raise WireError(ErrorCode.BAD_VALUE, "sample %d label %r is not 0 or 1" % (i, label))
        if weighted:
            (wt,) = r.unpack(_F32, "sample %d weight" % i)
            check_weight(wt, "sample %d weight" % i)
            weights.append(wt)
        samples.append((label, r.block("sample %d" % i)))
    r.done()
    return TrainRequest(model, shared, samples, weights)


def encode_train_ack(accepted: int, *, check: bool = True) -> bytes:
    """TRAIN_ACK payload: the number of samples accepted."""
    if check and accepted > MAX_ITEMS:
        raise WireError(ErrorCode.TOO_MANY_ITEMS, "accepted %d, over %d" % (accepted, MAX_ITEMS))
    return encode_varint(accepted)


def decode_train_ack(payload) -> int:
    """TRAIN_ACK payload: accepted, 0..MAX_ITEMS (over: TOO_MANY_ITEMS), then TRAILING_BYTES."""
    r = _Reader(payload)
    v = r.varint()
    if v > MAX_ITEMS:
        raise WireError(ErrorCode.TOO_MANY_ITEMS, "accepted %d, over %d" % (v, MAX_ITEMS))
    r.done()
    return v


def encode_error(code: int, message, *, check: bool = True) -> bytes:
    """ERROR payload.  check=False lets tests forge code 0 or an oversize message."""
    raw = message.encode("utf-8") if isinstance(message, str) else bytes(message)
    if check:
        if code == 0:
            raise WireError(ERROR_CODE_ZERO_ERROR, "ERROR code 0")
        if len(raw) > MAX_ERROR_MSG:
            raise WireError(OVERSIZE_FIELD_ERROR, "error message of %d bytes, over %d"
                            % (len(raw), MAX_ERROR_MSG))
    return _U16U16.pack(code, len(raw) & 0xFFFF) + raw


def decode_error(payload) -> ErrorMessage:
    """ERROR payload, in wire order: code (0: BAD_VALUE), msg_len (over 1024: BAD_VALUE), msg,
    then TRAILING_BYTES.  Unknown codes are kept as ints; invalid UTF-8 is replaced, not fatal.

    Each field is checked as soon as it is read, so code 0 is BAD_VALUE even when msg_len is
    cut off.  (The C codec reads code and msg_len as one 4-byte unit and reports TRUNCATED for
    a 2- or 3-byte payload with code 0; docs/wire.md's wire order says BAD_VALUE.)"""
    r = _Reader(payload)
    (code,) = r.unpack(_U16, "code")
    if code == 0:
        raise WireError(ERROR_CODE_ZERO_ERROR, "ERROR code 0 at offset 0")
    (n,) = r.unpack(_U16, "msg_len")
    if n > MAX_ERROR_MSG:
        raise WireError(OVERSIZE_FIELD_ERROR,
                        "msg_len %d at offset 2 is over %d" % (n, MAX_ERROR_MSG))
    msg = r.raw(n, "message").decode("utf-8", errors="replace")
    r.done()
    return ErrorMessage(code, msg)


def encode_ping(payload: bytes = b"", *, check: bool = True) -> bytes:
    """PING (or PONG) payload: up to 64 opaque bytes, echoed by the peer."""
    payload = bytes(payload)
    if check and len(payload) > MAX_PING_PAYLOAD:
        raise WireError(OVERSIZE_FIELD_ERROR, "PING payload of %d bytes, over %d"
                        % (len(payload), MAX_PING_PAYLOAD))
    return payload


def decode_pong(payload) -> bytes:
    """PONG (or PING) payload; over 64 bytes is BAD_VALUE."""
    payload = bytes(payload)
    if len(payload) > MAX_PING_PAYLOAD:
        raise WireError(OVERSIZE_FIELD_ERROR, "PING/PONG payload of %d bytes, over %d"
                        % (len(payload), MAX_PING_PAYLOAD))
    return payload


decode_ping = decode_pong
encode_pong = encode_ping


def decode_message(buf):
    """Decode one whole frame and its payload, as codec_decode_frame does: header checks, then
    the payload decoder for its type.  Returns (Frame, decoded payload).  Types without a decoder
    here (LOOKUP, LOOKUP_RESULT, unknown) are UNKNOWN_TYPE, like the C codec (C-CODEC).  A frame
    shorter than its payload_len is TRUNCATED (the C codec says NEED_MORE: it reads a stream).
    PREDICT and TRAIN are decoded with the frame's flags."""
    f = decode_frame(buf)
    dec = _DECODERS.get(f.type)
    if dec is None:
        raise WireError(ErrorCode.UNKNOWN_TYPE, "message type %d not accepted" % f.type)
    if f.type in (MsgType.PREDICT, MsgType.TRAIN):
        return f, dec(f.payload, f.flags)
    return f, dec(f.payload)


_DECODERS = {
    MsgType.PREDICT: decode_predict,
    MsgType.PREDICT_RESULT: decode_predict_result,
    MsgType.TRAIN: decode_train,
    MsgType.TRAIN_ACK: decode_train_ack,
    MsgType.ERROR: decode_error,
    MsgType.PING: decode_ping,
    MsgType.PONG: decode_pong,
}  # feedback.py adds FEEDBACK and FEEDBACK_ACK (it builds on this module's reader)
