"""Feature ids: the wire's 64-bit ids from raw feature values, as the server's readers make them.

A feature id puts the field (0..255) in the top 8 bits and a 56-bit hash of the raw value's
bytes in the low 56 (docs/wire.md "Feature ids and hashing"; codec/hash.c):

     63      56 55                                                  0
    +---------+-----------------------------------------------------+
    |  field  |  XXH3_64bits_withSeed(raw, len, seed = field) & M56 |
    +---------+-----------------------------------------------------+

XXH3 is implemented here in pure Python (xxHash 0.8.x, default secret) so the package needs
nothing outside the standard library; codec/test_vectors.txt pins the values it must give.
It costs a few microseconds an id; a service hashing millions of ids a second should cache
ids of repeated values or use the C client (codec/tlclient.h).

Besides hashed ids, the training-file readers of model/reader.c make ids without hashing, and
a client scoring the same features must make the same ids:

    libsvm `idx:val`            id = idx + 1                   (libsvm_id)
    libffm `field:idx:val`      id = (field << 56) | (idx + 1) (libffm_id)
    Criteo I1..I13 (fields 0..12)  feature_id(field, str(criteo_int(v)))
    Criteo C1..C26 (fields 13..38) feature_id(field, raw text)  (criteo_ids does both)

Id 0 is the model's bias: the server adds it to every item once by itself, so a request must
not send it.  An id in both the shared block and an item block counts twice for that item.
"""

from __future__ import annotations

import math
import struct
from typing import Iterable, List, Optional

__all__ = ["HASH_MASK", "xxh3_64", "feature_id", "libsvm_id", "libffm_id", "criteo_int",
           "criteo_ids", "libffm_rows"]

HASH_MASK = (1 << 56) - 1
_M64 = (1 << 64) - 1

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
    elif not isinstance(raw, (bytes, bytearray, memoryview)):
        # bytes(42) would be 42 zero bytes: an int is not a raw value, hash its text
        raise TypeError("raw must be bytes or str, not %s (for a number, feature_id(field, "
                        "str(n)))" % type(raw).__name__)
    return (field << 56) | (xxh3_64(raw, field) & HASH_MASK)


def libsvm_id(idx: int) -> int:
    """The id model/reader.c gives a libsvm feature `idx:val`: idx + 1 (field 0, unhashed;
    the + 1 keeps index 0 off id 0, the bias).  idx is 0..2^56 - 2."""
    return libffm_id(0, idx)


def libffm_id(field: int, idx: int) -> int:
    """The id model/reader.c gives a libffm feature `field:idx:val`: (field << 56) | (idx + 1),
    unhashed.  field is 0..255, idx 0..2^56 - 2."""
    if not 0 <= field <= 255:
        raise ValueError("field must be 0..255, got %r" % (field,))
    if not 0 <= idx < HASH_MASK:
        raise ValueError("index must be 0..2^56-2, got %r" % (idx,))
    return (field << 56) | (idx + 1)


def libffm_rows(path) -> list:
    """A libffm file's rows as (label, ids): each line's ids as model/reader.c gives them
    (libffm_id), sorted and unique, as a request block wants them.  Values are dropped: for
    one-hot data (every value 1), such as the criteo sets."""
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if parts:
                ids = sorted({libffm_id(int(fl), int(i))
                              for fl, i, _ in (t.split(":") for t in parts[1:])})
                rows.append((float(parts[0]), ids))
    return rows


def criteo_int(v: int) -> int:
    """The Criteo integer-column transform of model/reader.c: floor(ln(v)^2) for v > 2, v
    itself otherwise (negative values included).  The id is feature_id(field, str(result))."""
    if v > 2:
        lg = math.log(v)
        return int(math.floor(lg * lg))
    return int(v)


def criteo_ids(columns: Iterable[Optional[str]]) -> List[int]:
    """The ids of one Criteo row as model/reader.c makes them, from its 39 feature columns
    (I1..I13 then C1..C26, the label not included).  An empty string or None is a missing
    value and gives no id; an integer column that is not an integer raises ValueError.
    The ids come in column order; make_block sorts them."""
    cols = list(columns)
    if len(cols) != 39:
        raise ValueError("a Criteo row has 39 feature columns, got %d" % len(cols))
    ids = []
    for field, raw in enumerate(cols):
        if raw is None or raw == "":
            continue
        if field < 13:
            raw = str(criteo_int(int(raw)))
        ids.append(feature_id(field, raw))
    return ids
