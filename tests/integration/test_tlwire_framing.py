"""Unit tests of the Python client package tlserve (codec/python), whose codec is an
independent implementation of docs/wire.md: varints, frame headers and feature blocks.

Run from the repo root (nothing needs installing; tlwire_testutil.py puts codec/python on
sys.path):
    python3 -m unittest discover -s tests/integration -p test_tlwire_framing.py

These tests need no server.
"""

import math
import random
import struct
import unittest

from tlwire_testutil import w, E, WireErrorMixin


class TestVarint(WireErrorMixin, unittest.TestCase):
    CASES = [
        (0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"), (300, b"\xac\x02"),
        (16383, b"\xff\x7f"), (16384, b"\x80\x80\x01"),
        (2**32 - 1, b"\xff\xff\xff\xff\x0f"),
        (2**56 - 1, b"\xff" * 7 + b"\x7f"), (2**56, b"\x80" * 8 + b"\x01"),
        (2**63 - 1, b"\xff" * 8 + b"\x7f"), (2**63, b"\x80" * 9 + b"\x01"),
        (2**64 - 1, b"\xff" * 9 + b"\x01"),
    ]

    def test_known_encodings(self):
        for v, enc in self.CASES:
            with self.subTest(v=v):
                self.assertEqual(w.encode_varint(v), enc)
                self.assertEqual(w.decode_varint(enc), (v, len(enc)))

    def test_lengths(self):
        for k in range(1, 11):
            self.assertEqual(len(w.encode_varint(2 ** (7 * (k - 1)))), k)
            self.assertEqual(len(w.encode_varint(2 ** (7 * k) - 1 if k < 10 else 2**64 - 1)), k)

    def test_random_round_trip(self):
        rng = random.Random(7)
        for _ in range(2000):
            v = rng.getrandbits(rng.randrange(1, 65))
            enc = w.encode_varint(v)
            self.assertEqual(w.decode_varint(b"\x55" + enc + b"\x99", 1), (v, 1 + len(enc)))

    def test_encode_range(self):
        self.assertRaises(ValueError, w.encode_varint, -1)
        self.assertRaises(ValueError, w.encode_varint, 2**64)

    def test_non_minimal_accepted(self):
        self.assertEqual(w.decode_varint(b"\x80\x00"), (0, 2))
        self.assertEqual(w.decode_varint(b"\x81\x80\x00"), (1, 3))
        self.assertEqual(w.decode_varint(b"\x80" * 9 + b"\x00"), (0, 10))
        self.assertEqual(w.decode_varint(b"\xff" * 9 + b"\x00"), (2**63 - 1, 10))

    def test_tenth_byte_overflow(self):
        for last in (0x02, 0x03, 0x40, 0x7F):
            with self.subTest(last=last):
                self.assertWireError(E.BAD_VARINT, w.decode_varint, b"\xff" * 9 + bytes([last]))
                self.assertWireError(E.BAD_VARINT, w.decode_varint, b"\x80" * 9 + bytes([last]))

    def test_longer_than_ten_bytes(self):
        self.assertWireError(E.BAD_VARINT, w.decode_varint, b"\x80" * 10 + b"\x00")
        self.assertWireError(E.BAD_VARINT, w.decode_varint, b"\xff" * 9 + b"\x81\x00")
        self.assertWireError(E.BAD_VARINT, w.decode_varint, b"\x80" * 20)

    def test_runs_past_end(self):
        # docs/wire.md Conventions: a varint cut off by the end of the payload is TRUNCATED
        self.assertEqual(w.VARINT_TRUNCATED_ERROR, E.TRUNCATED)
        code = E.TRUNCATED
        self.assertWireError(code, w.decode_varint, b"")
        self.assertWireError(code, w.decode_varint, b"\x80")
        self.assertWireError(code, w.decode_varint, b"\xff" * 9)
        # the end bound is honoured even if the buffer goes on
        self.assertWireError(code, w.decode_varint, b"\x80\x80\x01", 0, 2)
        self.assertEqual(w.decode_varint(b"\x80\x80\x01", 0, 3), (16384, 3))
        self.assertWireError(code, w.decode_varint, b"\x01", 1)
        # ... but ten bytes are enough to tell an over-long or overflowing varint, whatever
        # follows: BAD_VARINT, not TRUNCATED
        self.assertWireError(E.BAD_VARINT, w.decode_varint, b"\x80" * 10)
        self.assertWireError(E.BAD_VARINT, w.decode_varint, b"\xff" * 9 + b"\x02")


# ---------------------------------------------------------------------------------------------
class TestFrameHeader(WireErrorMixin, unittest.TestCase):
    def test_layout(self):
        h = w.pack_header(w.MsgType.PREDICT, 0x0102030405060708, 0x11)
        self.assertEqual(h, b"TLW1" + b"\x01\x01" + b"\x00\x00"
                         + bytes.fromhex("0807060504030201") + b"\x11\x00\x00\x00"
                         + b"\x00\x00\x00\x00")
        h = w.pack_header(w.MsgType.LOOKUP, 0, 0, flags=1)
        self.assertEqual(h[4:8], b"\x01\x05\x01\x00")
        self.assertEqual(len(h), w.HEADER_SIZE)

    def test_round_trip(self):
        for t in w.MsgType:
            for rid in (0, 1, 2**32, 2**64 - 1):
                for plen in (0, 1, 65535, w.MAX_PAYLOAD):
                    flags = w.DEFINED_FLAGS[t]
                    h = w.parse_header(w.pack_header(t, rid, plen, flags) + b"extra")
                    self.assertEqual(h, w.FrameHeader(t, flags, rid, plen))

    def test_unknown_type_is_not_a_header_error(self):
        for t in (0, 12, 255):
            self.assertEqual(w.parse_header(w.pack_header(t, 5, 3, flags=0xFFFF)).type, t)

    def test_short(self):
        self.assertWireError(E.TRUNCATED, w.parse_header, w.pack_header(1, 1, 0)[:23])
        self.assertWireError(E.TRUNCATED, w.parse_header, b"")

    def test_bad_magic(self):
        for m in (b"TLW0", b"TLW2", b"tlw1", b"\x00\x00\x00\x00", b"1WLT"):
            self.assertWireError(E.BAD_MAGIC, w.parse_header, w.pack_header(1, 1, 0, magic=m))

    def test_bad_version(self):
        for v in (0, 2, 255):
            self.assertWireError(E.BAD_VERSION, w.parse_header,
                                 w.pack_header(1, 1, 0, version=v))

    def test_too_large(self):
        self.assertWireError(E.FRAME_TOO_LARGE, w.parse_header,
                             w.pack_header(1, 1, w.MAX_PAYLOAD + 1))
        self.assertWireError(E.FRAME_TOO_LARGE, w.parse_header, w.pack_header(1, 1, 2**32 - 1))

    def test_reserved(self):
        for r in (1, 0x100, 0x10000, 0x80000000):
            self.assertWireError(E.BAD_HEADER, w.parse_header, w.pack_header(1, 1, 0, reserved=r))

    def test_undefined_flags(self):
        for t in (w.MsgType.PREDICT_RESULT, w.MsgType.TRAIN_ACK, w.MsgType.ERROR,
                  w.MsgType.PING, w.MsgType.PONG, w.MsgType.LOOKUP_RESULT, w.MsgType.FEEDBACK,
                  w.MsgType.FEEDBACK_ACK):
            for f in (1, 2, 0x8000):
                self.assertWireError(E.BAD_HEADER, w.parse_header, w.pack_header(t, 1, 0, f))
        # bit 0 is PREDICT's LOG and TRAIN's WEIGHTS; the other bits are undefined
        for t in (w.MsgType.PREDICT, w.MsgType.TRAIN):
            for f in (2, 0x8000, 3):
                self.assertWireError(E.BAD_HEADER, w.parse_header, w.pack_header(t, 1, 0, f))
            self.assertEqual(w.parse_header(w.pack_header(t, 1, 0, 1)).flags, 1)
        # types above 11 are unknown: their flags are not checked
        self.assertEqual(w.parse_header(w.pack_header(12, 1, 0, 0xffff)).flags, 0xffff)
        self.assertWireError(E.BAD_HEADER, w.parse_header, w.pack_header(w.MsgType.LOOKUP, 1, 0, 2))
        w.parse_header(w.pack_header(w.MsgType.LOOKUP, 1, 0, 1))

    def test_check_order(self):
        # docs/wire.md "Frame": magic, version, payload_len, reserved, flags; first bad one wins
        kw = dict(magic=b"XXXX", version=9, reserved=1)
        bad = w.pack_header(1, 1, w.MAX_PAYLOAD + 1, 2, **kw)
        self.assertWireError(E.BAD_MAGIC, w.parse_header, bad)
        kw.pop("magic")
        self.assertWireError(E.BAD_VERSION, w.parse_header,
                             w.pack_header(1, 1, w.MAX_PAYLOAD + 1, 2, **kw))
        kw.pop("version")
        self.assertWireError(E.FRAME_TOO_LARGE, w.parse_header,
                             w.pack_header(1, 1, w.MAX_PAYLOAD + 1, 2, **kw))
        self.assertWireError(E.BAD_HEADER, w.parse_header, w.pack_header(1, 1, 0, 2, **kw))
        self.assertWireError(E.BAD_HEADER, w.parse_header, w.pack_header(1, 1, 0, 2))

    def test_frame(self):
        f = w.encode_frame(w.MsgType.PING, 42, b"abc")
        self.assertEqual(w.decode_frame(f), w.Frame(w.MsgType.PING, 0, 42, b"abc"))
        self.assertWireError(E.TRUNCATED, w.decode_frame, f[:-1])
        self.assertWireError(E.TRAILING_BYTES, w.decode_frame, f + b"\x00")


class TestBlock(WireErrorMixin, unittest.TestCase):
    def dec(self, payload):
        blk, pos = w.decode_block(payload)
        self.assertEqual(pos, len(payload))
        return blk

    def test_golden(self):
        self.assertEqual(bytes(w.encode_block([300, 1])), b"\x02\x00\x01\xab\x02")
        self.assertEqual(bytes(w.encode_block(([5], [0.5]))), b"\x01\x01\x05\x00\x00\x00\x3f")
        self.assertEqual(bytes(w.encode_block([])), b"\x00\x00")
        self.assertEqual(self.dec(b"\x02\x00\x01\xab\x02"), w.Block([1, 300], None))
        self.assertEqual(self.dec(b"\x00\x00"), w.Block([], None))

    def test_first_id_zero_and_max(self):
        blk = w.Block([0, 1, 2**64 - 1], [1.0, -2.5, 0.0])
        self.assertEqual(self.dec(bytes(w.encode_block(blk))), blk)

    def test_make_block_sorts_with_values(self):
        blk = w.make_block([30, 10, 20], [3.0, 1.0, 2.0])
        self.assertEqual(blk, w.Block([10, 20, 30], [1.0, 2.0, 3.0]))
        self.assertWireError(E.UNSORTED_FEATURES, w.make_block, [1, 2, 1])

    def test_encoder_rejects_bad_blocks(self):
        self.assertWireError(E.UNSORTED_FEATURES, w.encode_block, w.Block([2, 1]))
        self.assertWireError(E.UNSORTED_FEATURES, w.encode_block, w.Block([2, 2]))
        self.assertWireError(E.BAD_VALUE, w.encode_block, w.Block([1], [math.nan]))
        self.assertWireError(E.TOO_MANY_FEATURES, w.encode_block,
                             w.Block(list(range(w.MAX_BLOCK_FEATURES + 1))))

    def test_zero_delta(self):
        self.assertWireError(E.UNSORTED_FEATURES, self.dec, b"\x02\x00\x05\x00")
        self.assertWireError(E.UNSORTED_FEATURES, self.dec,
                             bytes(w.encode_block(w.Block([7, 7]), check=False)))

    def test_sum_overflow(self):
        p = b"\x02\x00" + w.encode_varint(2**64 - 1) + b"\x01"
        self.assertWireError(E.UNSORTED_FEATURES, self.dec, p)
        p = b"\x02\x00" + w.encode_varint(2**63) + w.encode_varint(2**63)
        self.assertWireError(E.UNSORTED_FEATURES, self.dec, p)

    def test_bad_values(self):
        for v in (math.nan, math.inf, -math.inf):
            p = b"\x01\x01\x01" + struct.pack("<f", v)
            self.assertWireError(E.BAD_VALUE, self.dec, p)
        # a signalling NaN bit pattern
        self.assertWireError(E.BAD_VALUE, self.dec, b"\x01\x01\x01" + b"\x01\x00\x80\x7f")

    def test_block_limit(self):
        n = w.MAX_BLOCK_FEATURES
        ok = w.encode_varint(n) + b"\x00\x00" + b"\x01" * (n - 1)
        self.assertEqual(len(self.dec(ok).ids), n)
        self.assertWireError(E.TOO_MANY_FEATURES, self.dec,
                             w.encode_varint(n + 1) + b"\x00\x00" + b"\x01" * n)
        # the count alone is enough: reject before reading the deltas
        self.assertWireError(E.TOO_MANY_FEATURES, self.dec, w.encode_varint(2**40))

    def test_undefined_block_flags(self):
        self.assertEqual(w.BLOCK_FLAGS_ERROR, E.BAD_VALUE)
        for f in (0x04, 0x80, 0xFF):
            self.assertWireError(E.BAD_VALUE, self.dec, b"\x01" + bytes([f]) + b"\x01")
            # block_flags is checked before the size check and before the deltas
            self.assertWireError(E.BAD_VALUE, self.dec, b"\x05" + bytes([f]))
            self.assertWireError(E.BAD_VALUE, self.dec, b"\x02" + bytes([f]) + b"\x05\x00")

    def test_fixed_ids(self):
        """Block flag bit 1: ids as little-endian u64s, chosen by the encoder for ids spread
        over the 64-bit space; order checked, size checked first (8 bytes an id)."""
        ids = sorted({(i * 0x9E3779B97F4A7C15) & w.U64_MASK for i in range(1, 200)})
        enc = bytes(w.encode_block(ids))
        self.assertEqual(enc[2], w.BLOCK_FLAG_FIXED)          # n=199 takes 2 varint bytes
        self.assertEqual(len(enc), 3 + 8 * len(ids))
        self.assertEqual(w.decode_block(enc)[0].ids, ids)
        small = list(range(10, 500, 7))                       # dense ids stay delta varints
        self.assertEqual(w.encode_block(small)[1], 0)
        self.assertEqual(w.decode_block(bytes(w.encode_block(small, fixed_ids=True)))[0].ids,
                         small)
        dup = bytearray(enc)
        dup[3 + 8 * 5:3 + 8 * 6] = dup[3 + 8 * 4:3 + 8 * 5]   # id 5 repeats id 4
        self.assertWireError(E.UNSORTED_FEATURES, w.decode_block, bytes(dup))
        self.assertWireError(E.TRUNCATED, w.decode_block, enc[:-1])
        # the size check counts 8 bytes an id before reading any
        self.assertWireError(E.TRUNCATED, w.decode_block, b"\x03\x02" + b"\x00" * 23)

    def test_truncation(self):
        full = bytes(w.encode_block(([1, 2**40], [0.25, 4.0])))
        for cut in range(len(full)):
            with self.subTest(cut=cut):
                self.assertWireError(E.TRUNCATED, w.decode_block, full[:cut])
        self.assertWireError(E.TRUNCATED, w.decode_block, full[:-1])   # in the values
        self.assertWireError(E.TRUNCATED, w.decode_block, full[:1])    # block_flags
        self.assertWireError(E.TRUNCATED, w.decode_block, full[:0])    # the count varint
        self.assertWireError(E.TRUNCATED, w.decode_block, b"\x80")     # inside the count

    def test_values_run_past_end_after_long_deltas(self):
        # n * 5 bytes are left, so the size check passes, but the deltas take more than one
        # byte each and the values run past the payload: TRUNCATED when they are read
        p = b"\x02\x01" + w.encode_varint(2**40) + b"\x01" + b"\x00" * 3
        self.assertEqual(len(p) - 2, 2 * 5)
        self.assertWireError(E.TRUNCATED, self.dec, p)

    def test_size_checked_before_deltas(self):
        # docs/wire.md "Decoding order": fewer than n bytes left (n * 5 with values) is
        # TRUNCATED before any delta is read, even when the deltas that are there are bad
        self.assertWireError(E.UNSORTED_FEATURES, self.dec, b"\x02\x00\x05\x00")
        self.assertWireError(E.TRUNCATED, self.dec, b"\x03\x00\x05\x00")
        dup_with_values = b"\x02\x01\x05\x00" + struct.pack("<2f", 1.0, 2.0)
        self.assertWireError(E.UNSORTED_FEATURES, self.dec, dup_with_values)   # 10 = 2 * 5
        self.assertWireError(E.TRUNCATED, self.dec, dup_with_values[:-1])      # 9 < 10
        # a bad varint among too few bytes: TRUNCATED, the deltas are never read
        self.assertWireError(E.BAD_VARINT, w.decode_block,
                             b"\x0b\x00" + b"\xff" * 9 + b"\x02\x01")
        self.assertWireError(E.TRUNCATED, w.decode_block, b"\x0c\x00" + b"\xff" * 9 + b"\x02\x01")
        # the largest count the limits allow, with nothing after it
        self.assertWireError(E.TRUNCATED, self.dec, w.encode_varint(w.MAX_BLOCK_FEATURES) + b"\x00")
        self.assertWireError(E.TRUNCATED, self.dec, w.encode_varint(w.MAX_BLOCK_FEATURES) + b"\x01"
                             + b"\x01" * w.MAX_BLOCK_FEATURES)
        # n = 0 needs nothing more, with or without values
        self.assertEqual(self.dec(b"\x00\x01"), w.Block([], []))

    def test_limits_checked_before_size(self):
        # the count's limits come before its size check: TOO_MANY_FEATURES, not TRUNCATED
        self.assertWireError(E.TOO_MANY_FEATURES, self.dec,
                             w.encode_varint(w.MAX_BLOCK_FEATURES + 1) + b"\x00")
        # and before block_flags is read (or found missing)
        self.assertWireError(E.TOO_MANY_FEATURES, self.dec,
                             w.encode_varint(w.MAX_BLOCK_FEATURES + 1) + b"\x02")
        self.assertWireError(E.TOO_MANY_FEATURES, self.dec,
                             w.encode_varint(w.MAX_BLOCK_FEATURES + 1))


if __name__ == "__main__":
    unittest.main()
