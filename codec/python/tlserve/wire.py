"""tlwire: an independent Python implementation of the tlserve wire format, version 1.

Written from docs/wire.md only (not from the C codec in codec/), so that the integration
tests check the server against a second reading of the spec.  Standard library only.

Contents
  - WireError(code, message) and the spec's error codes (ErrorCode)
  - varint encode/decode (unsigned LEB128, at most 10 bytes, must fit in 64 bits)
  - frame header pack/parse (24 bytes, "TLW1")
  - pure-Python XXH3_64bits_withSeed and feature_id(field, raw)
  - payload encoders/decoders for PREDICT, PREDICT_RESULT, TRAIN, TRAIN_ACK, ERROR, PING, PONG
  - Client: a small blocking client with pipelining (send_* / recv_frame / wait_for)

Decoders follow docs/wire.md "Decoding order": fields are checked in wire order and the first
bad one decides; a count is checked against its limits, then against the least bytes its
elements take (TRUNCATED before any element is read); TRAILING_BYTES is checked last.  Where
the spec is silent the C codec (codec/*.c) is followed; such places are marked "C-CODEC".
"""

from __future__ import annotations

import enum
import math
import socket
import struct
from typing import Iterable, NamedTuple, Optional, Sequence

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

U64_MASK = (1 << 64) - 1
HASH_MASK = (1 << 56) - 1

_NAME_CHARS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")


class MsgType(enum.IntEnum):
    PREDICT = 1
    PREDICT_RESULT = 2
    TRAIN = 3
    TRAIN_ACK = 4
    LOOKUP = 5
    LOOKUP_RESULT = 6
    ERROR = 7
    PING = 8
    PONG = 9


# Flag bits defined per message type (all others must be 0; BAD_HEADER otherwise).
DEFINED_FLAGS = {t: 0 for t in MsgType}
DEFINED_FLAGS[MsgType.LOOKUP] = LOOKUP_FLAG_PARTIAL_SUMS


class ErrorCode(enum.IntEnum):
    BAD_MAGIC = 1
    BAD_VERSION = 2
    FRAME_TOO_LARGE = 3
    BAD_HEADER = 4
    UNKNOWN_TYPE = 5
    TRUNCATED = 6
    TRAILING_BYTES = 7
    BAD_VARINT = 8
    BAD_NAME = 9
    UNKNOWN_MODEL = 10
    UNKNOWN_VERSION = 11
    NO_ITEMS = 12
    TOO_MANY_ITEMS = 13
    TOO_MANY_FEATURES = 14
    UNSORTED_FEATURES = 15
    BAD_VALUE = 16
    OVERLOADED = 17
    SHUTTING_DOWN = 18
    INTERNAL = 19


# Errors after which the server closes the connection (spec: "Framing errors").
FRAMING_ERRORS = frozenset({ErrorCode.BAD_MAGIC, ErrorCode.BAD_VERSION,
                            ErrorCode.FRAME_TOO_LARGE, ErrorCode.BAD_HEADER})

# The codes below were open questions in the draft spec; docs/wire.md now names each of them.
# Conventions: a varint cut off by the end of the payload is TRUNCATED (like every field that
# runs past the payload); only one over 10 bytes or 64 bits is BAD_VARINT.
VARINT_TRUNCATED_ERROR = ErrorCode.TRUNCATED
# Feature block: block_flags with a bit other than bit 0 set.
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
MIN_BYTES_PER_SCORE = 4           # PREDICT_RESULT: f32 score


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return "UNKNOWN_ERROR_%d" % code


class WireError(Exception):
    """Malformed input; `code` is one of ErrorCode (an int, so unknown server codes survive)."""

    def __init__(self, code: int, message: str):
        super().__init__("%s (%d): %s" % (error_name(code), code, message))
        self.code = code
        self.message = message

    @property
    def name(self) -> str:
        return error_name(self.code)


class ServerError(WireError):
    """The server answered with an ERROR frame."""

    def __init__(self, code: int, message: str, request_id: int):
        super().__init__(code, message)
        self.request_id = request_id


class ConnectionClosed(Exception):
    """The peer closed the connection (EOF), possibly in the middle of a frame."""


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
    type: int
    flags: int
    request_id: int
    payload_len: int


class Frame(NamedTuple):
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
# XXH3-64 (pure Python), feature ids
# --------------------------------------------------------------------------------------------

_K_SECRET = bytes.fromhex(
    "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
    "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
    "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
    "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
    "eac5ac8334d3ebc3c581a0fffa1363eb170ddd51b7f0da49d316552629d4689e"
    "2b16be587d47a1fc8ff8b8d17ad031ce45cb3a8f95160428afd7fbcabb4b407e")
assert len(_K_SECRET) == 192

_P32_1 = 0x9E3779B1
_P32_2 = 0x85EBCA77
_P32_3 = 0xC2B2AE3D
_P64_1 = 0x9E3779B185EBCA87
_P64_2 = 0xC2B2AE3D27D4EB4F
_P64_3 = 0x165667B19E3779F9
_P64_4 = 0x85EBCA77C2B2AE63
_P64_5 = 0x27D4EB2F165667C5
_PMX1 = 0x165667919E3779F9
_PMX2 = 0x9FB21C651E98DF25
_M32 = 0xFFFFFFFF
_M64 = U64_MASK

_STRIPE_LEN = 64
_SECRET_CONSUME_RATE = 8
_ACC_NB = 8
_MIDSIZE_MAX = 240
_MIDSIZE_STARTOFFSET = 3
_MIDSIZE_LASTOFFSET = 17
_SECRET_SIZE_MIN = 136
_LASTACC_START = 7
_MERGEACC_START = 11

_u64 = struct.Struct("<Q").unpack_from
_u32 = struct.Struct("<I").unpack_from
_8u64 = struct.Struct("<8Q").unpack_from


def _r64(b, off):
    return _u64(b, off)[0]


def _r32(b, off):
    return _u32(b, off)[0]


def _rotl64(x, r):
    return ((x << r) | (x >> (64 - r))) & _M64


def _swap32(x):
    return int.from_bytes(x.to_bytes(4, "little"), "big")


def _swap64(x):
    return int.from_bytes(x.to_bytes(8, "little"), "big")


def _mul128_fold64(a, b):
    p = a * b
    return (p ^ (p >> 64)) & _M64


def _xxh64_avalanche(h):
    h ^= h >> 33
    h = (h * _P64_2) & _M64
    h ^= h >> 29
    h = (h * _P64_3) & _M64
    h ^= h >> 32
    return h


def _xxh3_avalanche(h):
    h ^= h >> 37
    h = (h * _PMX1) & _M64
    h ^= h >> 32
    return h


def _rrmxmx(h, length):
    h ^= _rotl64(h, 49) ^ _rotl64(h, 24)
    h = (h * _PMX2) & _M64
    h ^= (h >> 35) + length
    h = (h * _PMX2) & _M64
    h ^= h >> 28
    return h


def _mix16(data, off, secret, soff, seed):
    lo = _r64(data, off)
    hi = _r64(data, off + 8)
    return _mul128_fold64(lo ^ ((_r64(secret, soff) + seed) & _M64),
                          hi ^ ((_r64(secret, soff + 8) - seed) & _M64))


def _len_1to3(data, n, secret, seed):
    c1 = data[0]
    c2 = data[n >> 1]
    c3 = data[n - 1]
    combined = (c1 << 16) | (c2 << 24) | c3 | (n << 8)
    bitflip = ((_r32(secret, 0) ^ _r32(secret, 4)) + seed) & _M64
    return _xxh64_avalanche(combined ^ bitflip)


def _len_4to8(data, n, secret, seed):
    seed ^= _swap32(seed & _M32) << 32
    in1 = _r32(data, 0)
    in2 = _r32(data, n - 4)
    bitflip = ((_r64(secret, 8) ^ _r64(secret, 16)) - seed) & _M64
    in64 = (in2 + (in1 << 32)) & _M64
    return _rrmxmx(in64 ^ bitflip, n)


def _len_9to16(data, n, secret, seed):
    bitflip1 = ((_r64(secret, 24) ^ _r64(secret, 32)) + seed) & _M64
    bitflip2 = ((_r64(secret, 40) ^ _r64(secret, 48)) - seed) & _M64
    lo = _r64(data, 0) ^ bitflip1
    hi = _r64(data, n - 8) ^ bitflip2
    acc = (n + _swap64(lo) + hi + _mul128_fold64(lo, hi)) & _M64
    return _xxh3_avalanche(acc)


def _len_17to128(data, n, secret, seed):
    acc = (n * _P64_1) & _M64
    if n > 32:
        if n > 64:
            if n > 96:
                acc += _mix16(data, 48, secret, 96, seed)
                acc += _mix16(data, n - 64, secret, 112, seed)
            acc += _mix16(data, 32, secret, 64, seed)
            acc += _mix16(data, n - 48, secret, 80, seed)
        acc += _mix16(data, 16, secret, 32, seed)
        acc += _mix16(data, n - 32, secret, 48, seed)
    acc += _mix16(data, 0, secret, 0, seed)
    acc += _mix16(data, n - 16, secret, 16, seed)
    return _xxh3_avalanche(acc & _M64)


def _len_129to240(data, n, secret, seed):
    acc = (n * _P64_1) & _M64
    rounds = n // 16
    for i in range(8):
        acc += _mix16(data, 16 * i, secret, 16 * i, seed)
    acc = _xxh3_avalanche(acc & _M64)
    for i in range(8, rounds):
        acc += _mix16(data, 16 * i, secret, 16 * (i - 8) + _MIDSIZE_STARTOFFSET, seed)
    acc += _mix16(data, n - 16, secret, _SECRET_SIZE_MIN - _MIDSIZE_LASTOFFSET, seed)
    return _xxh3_avalanche(acc & _M64)


def _accumulate_512(acc, data, off, secret, soff):
    d = _8u64(data, off)
    for i in range(_ACC_NB):
        v = d[i]
        k = v ^ _r64(secret, soff + 8 * i)
        acc[i ^ 1] = (acc[i ^ 1] + v) & _M64
        acc[i] = (acc[i] + (k & _M32) * (k >> 32)) & _M64


def _scramble(acc, secret, soff):
    for i in range(_ACC_NB):
        a = acc[i]
        a ^= a >> 47
        a ^= _r64(secret, soff + 8 * i)
        acc[i] = (a * _P32_1) & _M64


def _hash_long(data, n, secret):
    acc = [_P32_3, _P64_1, _P64_2, _P64_3, _P64_4, _P32_2, _P64_5, _P32_1]
    secret_size = len(secret)
    stripes_per_block = (secret_size - _STRIPE_LEN) // _SECRET_CONSUME_RATE
    block_len = _STRIPE_LEN * stripes_per_block
    nb_blocks = (n - 1) // block_len
    for b in range(nb_blocks):
        base = b * block_len
        for s in range(stripes_per_block):
            _accumulate_512(acc, data, base + s * _STRIPE_LEN, secret, s * _SECRET_CONSUME_RATE)
        _scramble(acc, secret, secret_size - _STRIPE_LEN)
    base = nb_blocks * block_len
    nb_stripes = ((n - 1) - base) // _STRIPE_LEN
    for s in range(nb_stripes):
        _accumulate_512(acc, data, base + s * _STRIPE_LEN, secret, s * _SECRET_CONSUME_RATE)
    _accumulate_512(acc, data, n - _STRIPE_LEN, secret,
                    secret_size - _STRIPE_LEN - _LASTACC_START)
    # merge
    result = (n * _P64_1) & _M64
    for i in range(4):
        soff = _MERGEACC_START + 16 * i
        result += _mul128_fold64(acc[2 * i] ^ _r64(secret, soff),
                                 acc[2 * i + 1] ^ _r64(secret, soff + 8))
    return _xxh3_avalanche(result & _M64)


def _custom_secret(seed):
    out = bytearray(len(_K_SECRET))
    for i in range(0, len(_K_SECRET), 16):
        struct.pack_into("<QQ", out, i, (_r64(_K_SECRET, i) + seed) & _M64,
                         (_r64(_K_SECRET, i + 8) - seed) & _M64)
    return bytes(out)


_secret_cache: dict = {}


def xxh3_64(data, seed: int = 0) -> int:
    """XXH3_64bits_withSeed(data, len(data), seed) with the default secret (xxHash 0.8.x)."""
    data = bytes(data)
    seed &= _M64
    n = len(data)
    s = _K_SECRET
    if n <= 16:
        if n > 8:
            return _len_9to16(data, n, s, seed)
        if n >= 4:
            return _len_4to8(data, n, s, seed)
        if n:
            return _len_1to3(data, n, s, seed)
        return _xxh64_avalanche(seed ^ _r64(s, 56) ^ _r64(s, 64))
    if n <= 128:
        return _len_17to128(data, n, s, seed)
    if n <= _MIDSIZE_MAX:
        return _len_129to240(data, n, s, seed)
    if seed == 0:
        return _hash_long(data, n, _K_SECRET)
    secret = _secret_cache.get(seed)
    if secret is None:
        if len(_secret_cache) > 1024:
            _secret_cache.clear()
        secret = _secret_cache[seed] = _custom_secret(seed)
    return _hash_long(data, n, secret)


def feature_id(field: int, raw) -> int:
    """id = (field << 56) | (XXH3_64bits_withSeed(raw, seed=field) & (2^56 - 1)).

    raw is bytes, or str (encoded as UTF-8).
    """
    if not 0 <= field <= 255:
        raise ValueError("field must be 0..255, got %r" % (field,))
    if isinstance(raw, str):
        raw = raw.encode("utf-8")
    return (field << 56) | (xxh3_64(raw, field) & HASH_MASK)


# --------------------------------------------------------------------------------------------
# Feature blocks
# --------------------------------------------------------------------------------------------

class Block(NamedTuple):
    """A feature block: ids strictly increasing; values None means every value is 1.0."""
    ids: list
    values: Optional[list] = None


def make_block(ids: Iterable[int], values: Optional[Iterable[float]] = None) -> Block:
    """Sort (ids, values) by id.  Duplicate ids raise WireError(UNSORTED_FEATURES)."""
    ids = list(ids)
    if values is None:
        ids.sort()
        vals = None
    else:
        pairs = sorted(zip(ids, values, strict=True))
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
            if not 0 <= fid <= _M64:
                raise ValueError("feature id out of range: %r" % (fid,))
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
                if not math.isfinite(v):
                    raise WireError(ErrorCode.BAD_VALUE, "value %r is not finite" % (v,))
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
    model: str
    version: int
    shared: Block
    items: list


class PredictResult(NamedTuple):
    version: int
    scores: list


class TrainRequest(NamedTuple):
    model: str
    shared: Block
    samples: list  # of (label, Block)


class ErrorMessage(NamedTuple):
    code: int
    message: str


def _encode_name(model, out: bytearray, check: bool):
    raw = model.encode("utf-8") if isinstance(model, str) else bytes(model)
    if check:
        if not 1 <= len(raw) <= MAX_NAME_LEN or not _NAME_CHARS.issuperset(raw):
            raise WireError(ErrorCode.BAD_NAME, "bad model name %r" % (raw,))
    out.append(len(raw) & 0xFF)
    out += raw


def encode_predict(model, shared, items: Sequence, version: int = 0, *,
                   check: bool = True) -> bytes:
    """PREDICT payload.  shared and each item: a Block, an id list or an (ids, values) pair.
    check=False skips the limit checks (but see encode_block) so tests can send bad requests."""
    out = bytearray()
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


def decode_predict(payload) -> PredictRequest:
    r = _Reader(payload)
    model = r.name()
    (version,) = r.unpack(_U64, "version")
    n = r.count("items", MIN_BYTES_PER_ITEM_BLOCK)
    shared = r.block("shared block")
    items = [r.block("item %d" % i) for i in range(n)]
    r.done()
    return PredictRequest(model, version, shared, items)


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


def encode_train(model, shared, samples: Sequence, *, check: bool = True) -> bytes:
    """TRAIN payload.  samples: sequence of (label, block)."""
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
    for label, blk in samples:
        if check and label not in (0.0, 1.0):
            raise WireError(ErrorCode.BAD_VALUE, "label %r is not 0 or 1" % (label,))
        out += _F32.pack(label)
        encode_block(blk, out, check=check)
    return bytes(out)


def decode_train(payload) -> TrainRequest:
    r = _Reader(payload)
    model = r.name()
    n = r.count("samples", MIN_BYTES_PER_SAMPLE)
    shared = r.block("shared block")
    samples = []
    for i in range(n):
        (label,) = r.unpack(_F32, "sample %d label" % i)
        if label != 0.0 and label != 1.0:
            raise WireError(ErrorCode.BAD_VALUE, "sample %d label %r is not 0 or 1" % (i, label))
        samples.append((label, r.block("sample %d" % i)))
    r.done()
    return TrainRequest(model, shared, samples)


def encode_train_ack(accepted: int, *, check: bool = True) -> bytes:
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
    payload = bytes(payload)
    if check and len(payload) > MAX_PING_PAYLOAD:
        raise WireError(OVERSIZE_FIELD_ERROR, "PING payload of %d bytes, over %d"
                        % (len(payload), MAX_PING_PAYLOAD))
    return payload


def decode_pong(payload) -> bytes:
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
    shorter than its payload_len is TRUNCATED (the C codec says NEED_MORE: it reads a stream)."""
    f = decode_frame(buf)
    dec = _DECODERS.get(f.type)
    if dec is None:
        raise WireError(ErrorCode.UNKNOWN_TYPE, "message type %d not accepted" % f.type)
    return f, dec(f.payload)


_DECODERS = {
    MsgType.PREDICT: decode_predict,
    MsgType.PREDICT_RESULT: decode_predict_result,
    MsgType.TRAIN: decode_train,
    MsgType.TRAIN_ACK: decode_train_ack,
    MsgType.ERROR: decode_error,
    MsgType.PING: decode_ping,
    MsgType.PONG: decode_pong,
}


# --------------------------------------------------------------------------------------------
# Client
# --------------------------------------------------------------------------------------------

class Client:
    """Blocking client on one TCP connection, with pipelining.

        with Client("127.0.0.1", 7070) as c:
            res = c.predict("ctr", shared_ids, [item_ids, ...])     # PredictResult
            a = c.send_predict(...); b = c.send_predict(...)         # pipelined
            fb = c.wait_for(b); fa = c.wait_for(a)                   # any order

    Request ids are allocated from 1 upwards unless given.  Frames for other ids that arrive
    while waiting are kept and returned by a later wait_for.  An ERROR frame with request id 0
    and a framing code (the server is about to close) raises ServerError at once.
    """

    def __init__(self, host: str, port: int, timeout: Optional[float] = 10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._next_id = 1
        self._pending: dict = {}

    # -- lifecycle --
    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def settimeout(self, timeout: Optional[float]):
        self.sock.settimeout(timeout)

    # -- sending --
    def next_id(self) -> int:
        rid = self._next_id
        self._next_id = (self._next_id + 1) & _M64 or 1
        return rid

    def send_raw(self, data: bytes):
        self.sock.sendall(data)

    def send_frame(self, msg_type: int, payload: bytes = b"", request_id: Optional[int] = None,
                   flags: int = 0) -> int:
        if request_id is None:
            request_id = self.next_id()
        self.sock.sendall(encode_frame(msg_type, request_id, payload, flags))
        return request_id

    def send_predict(self, model, shared, items, version: int = 0,
                     request_id: Optional[int] = None) -> int:
        return self.send_frame(MsgType.PREDICT, encode_predict(model, shared, items, version),
                               request_id)

    def send_train(self, model, shared, samples, request_id: Optional[int] = None) -> int:
        return self.send_frame(MsgType.TRAIN, encode_train(model, shared, samples), request_id)

    def send_ping(self, payload: bytes = b"", request_id: Optional[int] = None) -> int:
        return self.send_frame(MsgType.PING, encode_ping(payload), request_id)

    # -- receiving --
    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(min(n - len(buf), 1 << 20))
            except ConnectionResetError as e:
                raise ConnectionClosed("connection reset after %d of %d bytes: %s"
                                       % (len(buf), n, e)) from e
            if not chunk:
                raise ConnectionClosed("connection closed after %d of %d bytes" % (len(buf), n))
            buf += chunk
        return bytes(buf)

    def recv_frame(self) -> Frame:
        """Read the next frame off the socket (ignores frames kept by wait_for).
        Raises ConnectionClosed on EOF, WireError if the server sends a bad header."""
        hdr = self._recv_exact(HEADER_SIZE)
        h = parse_header(hdr)
        payload = self._recv_exact(h.payload_len) if h.payload_len else b""
        return Frame(h.type, h.flags, h.request_id, payload)

    def wait_for(self, request_id: int) -> Frame:
        """Return the first frame with this request id (kept or read).  PINGs from the server
        with other ids are answered with a PONG."""
        kept = self._pending.get(request_id)
        if kept:
            f = kept.pop(0)
            if not kept:
                del self._pending[request_id]
            return f
        while True:
            f = self.recv_frame()
            if f.request_id == request_id:
                return f
            if f.type == MsgType.PING:
                self.send_frame(MsgType.PONG, f.payload, f.request_id)
                continue
            if f.type == MsgType.ERROR and f.request_id == 0:
                e = decode_error(f.payload)
                if e.code in FRAMING_ERRORS:
                    raise ServerError(e.code, e.message, 0)
            self._pending.setdefault(f.request_id, []).append(f)

    @staticmethod
    def _raise_if_error(f: Frame):
        if f.type == MsgType.ERROR:
            e = decode_error(f.payload)
            raise ServerError(e.code, e.message, f.request_id)

    def _expect(self, f: Frame, msg_type: int):
        self._raise_if_error(f)
        if f.type != msg_type:
            raise WireError(ErrorCode.UNKNOWN_TYPE, "expected a %s frame for request %d, got type %d"
                            % (MsgType(msg_type).name, f.request_id, f.type))

    def recv_predict_result(self, request_id: int) -> PredictResult:
        f = self.wait_for(request_id)
        self._expect(f, MsgType.PREDICT_RESULT)
        return decode_predict_result(f.payload)

    # -- round trips --
    def predict(self, model, shared, items, version: int = 0,
                request_id: Optional[int] = None) -> PredictResult:
        rid = self.send_predict(model, shared, items, version, request_id)
        res = self.recv_predict_result(rid)
        if len(res.scores) != len(items):
            raise WireError(ErrorCode.INTERNAL, "%d scores for %d items"
                            % (len(res.scores), len(items)))
        return res

    def train(self, model, shared, samples, request_id: Optional[int] = None) -> int:
        rid = self.send_train(model, shared, samples, request_id)
        f = self.wait_for(rid)
        self._expect(f, MsgType.TRAIN_ACK)
        return decode_train_ack(f.payload)

    def ping(self, payload: bytes = b"", request_id: Optional[int] = None) -> bytes:
        rid = self.send_ping(payload, request_id)
        f = self.wait_for(rid)
        self._expect(f, MsgType.PONG)
        return decode_pong(f.payload)
