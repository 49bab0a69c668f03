"""Unit tests of the Python client package tlserve (codec/python), whose codec is an
independent implementation of docs/wire.md, against the C side: the decoding order of bad
payloads (each code checked against codec/*.c), codec/test_vectors.txt and the corpus verdicts.

Run from the repo root (nothing needs installing; tlwire_testutil.py puts codec/python on
sys.path):
    python3 -m unittest discover -s tests/integration -p test_tlwire_crosscheck.py

These tests need no server.
"""

import math
import os
import struct
import unittest

from tlwire_testutil import w, E, WireErrorMixin


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_P_HEAD = b"\x01m" + struct.pack("<Q", 0)        # PREDICT name "m", version 0
_T_HEAD = b"\x01m"                               # TRAIN name "m"
_R_HEAD = struct.pack("<Q", 0)                   # PREDICT_RESULT version 0

# (what, message type, payload, code) for decode_message: bad payloads where the
# "Decoding order" rules decide the code.  Each code here was checked against the C decoder
# (codec_decode_frame, codec/*.c) on the same frame, so the two implementations agree on them.
DECODING_ORDER_CASES = [
    ("items varint cut off", 1, _P_HEAD + b"\x80", E.TRUNCATED),
    ("items varint over 10 bytes", 1, _P_HEAD + b"\x80" * 10 + b"\x00", E.BAD_VARINT),
    ("items 0", 1, _P_HEAD + b"\x00", E.NO_ITEMS),
    ("items over MAX_ITEMS, nothing after", 1, _P_HEAD + w.encode_varint(4097), E.TOO_MANY_ITEMS),
    ("items 4096, 8191 bytes", 1, _P_HEAD + w.encode_varint(4096) + b"\x00" * 8191,
     E.TRUNCATED),
    ("items 4 < 8 bytes, bad shared flags", 1, _P_HEAD + b"\x04\x00\x04" + b"\x00" * 4,
     E.TRUNCATED),
    ("items 4 = 8 bytes, bad shared flags", 1, _P_HEAD + b"\x04\x00\x04" + b"\x00" * 6,
     E.BAD_VALUE),
    ("block count over limit, flags bad", 1, _P_HEAD + b"\x01" + w.encode_varint(65537) + b"\x02",
     E.TOO_MANY_FEATURES),
    ("block flags bad, too few bytes", 1, _P_HEAD + b"\x01\x05\x04\x00\x00", E.BAD_VALUE),
    ("block flags missing", 1, _P_HEAD + b"\x01\x00\x00\x05", E.TRUNCATED),
    ("block n=3 in 2 bytes, duplicate", 1, _P_HEAD + b"\x01\x03\x00\x05\x00", E.TRUNCATED),
    ("block n=2 in 2 bytes, duplicate", 1, _P_HEAD + b"\x01\x00\x00\x02\x00\x05\x00",
     E.UNSORTED_FEATURES),
    ("block values: 9 < 10 bytes, NaN", 1, _P_HEAD + b"\x01\x00\x00\x02\x01\x01\x01"
     + struct.pack("<f", math.nan) + b"\x00\x00\x00", E.TRUNCATED),
    ("block values run past after long deltas", 1, _P_HEAD + b"\x01\x00\x00\x02\x01"
     + w.encode_varint(2**40) + b"\x01" + b"\x00" * 3, E.TRUNCATED),
    ("NaN value, then trailing", 1, _P_HEAD + b"\x01\x00\x00\x01\x01\x01"
     + struct.pack("<f", math.nan) + b"!", E.BAD_VALUE),
    ("trailing bytes", 1, _P_HEAD + b"\x01\x00\x00\x00\x00!", E.TRAILING_BYTES),
    ("result 0 items", 2, _R_HEAD + b"\x00" + struct.pack("<f", 0.5), E.NO_ITEMS),
    ("result over MAX_ITEMS", 2, _R_HEAD + w.encode_varint(4097), E.TOO_MANY_ITEMS),
    ("result 3 scores in 8 bytes, NaN", 2, _R_HEAD + b"\x03" + struct.pack("<2f", 0.5, math.nan),
     E.TRUNCATED),
    ("result bad score, then trailing", 2, _R_HEAD + b"\x01" + struct.pack("<f", 1.5) + b"!",
     E.BAD_VALUE),
    ("result trailing", 2, _R_HEAD + b"\x01" + struct.pack("<f", 1.0) + b"!", E.TRAILING_BYTES),
    ("train 0 samples", 3, _T_HEAD + b"\x00\x00\x00", E.NO_ITEMS),
    ("train over MAX_ITEMS", 3, _T_HEAD + w.encode_varint(4097), E.TOO_MANY_ITEMS),
    ("train 2 samples < 12 bytes, bad shared", 3, _T_HEAD + b"\x02\x00\x04" + b"\x00" * 9,
     E.TRUNCATED),
    ("train 2 samples = 12 bytes, bad shared", 3, _T_HEAD + b"\x02\x00\x04" + b"\x00" * 10,
     E.BAD_VALUE),
    ("train bad label before its block", 3, _T_HEAD + b"\x01\x00\x00" + struct.pack("<f", 0.5)
     + b"\x05\x00", E.BAD_VALUE),
    ("train_ack cut off", 4, b"\x80", E.TRUNCATED),
    ("train_ack over MAX_ITEMS", 4, w.encode_varint(4097), E.TOO_MANY_ITEMS),
    ("train_ack over MAX_ITEMS, then trailing", 4, w.encode_varint(4097) + b"!",
     E.TOO_MANY_ITEMS),
    ("train_ack trailing", 4, b"\x01!", E.TRAILING_BYTES),
    ("error code 0", 7, b"\x00\x00\x01\x00x", E.BAD_VALUE),
    ("error code 0, msg_len over", 7, struct.pack("<HH", 0, 2000), E.BAD_VALUE),
    ("error msg_len over, msg missing", 7, struct.pack("<HH", 5, 1025), E.BAD_VALUE),
    ("error msg cut off", 7, struct.pack("<HH", 5, 10) + b"x", E.TRUNCATED),
    ("error trailing", 7, struct.pack("<HH", 5, 1) + b"xy", E.TRAILING_BYTES),
    ("ping over 64", 8, b"x" * 65, E.BAD_VALUE),
    ("pong over 64", 9, b"x" * 65, E.BAD_VALUE),
    ("lookup is not accepted", 5, b"", E.UNKNOWN_TYPE),
    ("unknown type", 42, b"abc", E.UNKNOWN_TYPE),
]

# (what, type, flags, payload, code): the same for FEEDBACK, FEEDBACK_ACK and the flagged
# layouts of PREDICT (LOG: impression id first) and TRAIN (WEIGHTS: a weight after each label);
# the same cases are in tests/codec/test_feedback.c against the C decoder.
_EV = struct.Struct("<QBff")                     # an event with a 1-byte item varint
_FB_HEAD = b"\x03ctr"                           # FEEDBACK name "ctr"
FLAGGED_DECODING_ORDER_CASES = [
    ("log id cut off", 1, 1, b"\x05\x00\x00\x00", E.TRUNCATED),
    ("log id 0 before a bad name", 1, 1, struct.pack("<Q", 0) + b"\x00", E.BAD_VALUE),
    ("log id, then bad name", 1, 1, struct.pack("<Q", 9) + b"\x00", E.BAD_NAME),
    ("log id, then items 0", 1, 1, struct.pack("<Q", 9) + _P_HEAD + b"\x00", E.NO_ITEMS),
    ("weights: 1 sample < 10 bytes", 3, 1, _T_HEAD + b"\x01\x00\x00" + struct.pack("<f", 1.0)
     + b"\x00\x00", E.TRUNCATED),
    ("weight negative before a bad block", 3, 1, _T_HEAD + b"\x01\x00\x00"
     + struct.pack("<ff", 1.0, -1.0) + b"\x07\x09", E.BAD_VALUE),
    ("weight over 1e6", 3, 1, _T_HEAD + b"\x01\x00\x00" + struct.pack("<ff", 1.0, 1.5e6)
     + b"\x00\x00", E.BAD_VALUE),
    ("weight NaN", 3, 1, _T_HEAD + b"\x01\x00\x00" + struct.pack("<ff", 1.0, math.nan)
     + b"\x00\x00", E.BAD_VALUE),
    ("bad label before its weight", 3, 1, _T_HEAD + b"\x01\x00\x00"
     + struct.pack("<ff", 0.5, -1.0) + b"\x00\x00", E.BAD_VALUE),
    ("feedback bad name", 10, 0, b"\x00", E.BAD_NAME),
    ("feedback events cut off", 10, 0, _FB_HEAD, E.TRUNCATED),
    ("feedback 0 events", 10, 0, _FB_HEAD + b"\x00" + _EV.pack(0, 0, 2.0, -1.0), E.NO_ITEMS),
    ("feedback over MAX_ITEMS", 10, 0, _FB_HEAD + w.encode_varint(4097), E.TOO_MANY_ITEMS),
    ("feedback 2 events < 34 bytes, bad id", 10, 0, _FB_HEAD + b"\x02" + _EV.pack(0, 0, 0.0, 1.0)
     + b"\x00", E.TRUNCATED),
    ("feedback id 0 before bad item", 10, 0, _FB_HEAD + b"\x01" + struct.pack("<Q", 0)
     + w.encode_varint(9999) + struct.pack("<ff", 0.5, -1.0), E.BAD_VALUE),
    ("feedback item 4096", 10, 0, _FB_HEAD + b"\x01" + struct.pack("<Q", 3)
     + w.encode_varint(4096) + struct.pack("<ff", 1.0, 1.0), E.BAD_VALUE),
    ("feedback item over 10 bytes", 10, 0, _FB_HEAD + b"\x01" + struct.pack("<Q", 3)
     + b"\xff" * 10 + b"\x01" + struct.pack("<ff", 1.0, 1.0), E.BAD_VARINT),
    ("feedback label before weight", 10, 0, _FB_HEAD + b"\x01" + _EV.pack(3, 1, 0.5, -1.0),
     E.BAD_VALUE),
    ("feedback weight inf", 10, 0, _FB_HEAD + b"\x01" + _EV.pack(3, 1, 1.0, math.inf),
     E.BAD_VALUE),
    ("feedback weight short after a long item", 10, 0, _FB_HEAD + b"\x01" + struct.pack("<Q", 3)
     + w.encode_varint(300) + struct.pack("<f", 1.0) + b"\x00\x00\x00", E.TRUNCATED),
    ("feedback trailing", 10, 0, _FB_HEAD + b"\x01" + _EV.pack(3, 1, -0.0, 0.0) + b"!",
     E.TRAILING_BYTES),
    ("ack empty", 11, 0, b"", E.TRUNCATED),
    ("ack accepted over, nothing after", 11, 0, w.encode_varint(4097), E.TOO_MANY_ITEMS),
    ("ack refused cut off", 11, 0, b"\x01", E.TRUNCATED),
    ("ack refused over", 11, 0, b"\x01" + w.encode_varint(4097), E.TOO_MANY_ITEMS),
    ("ack 0 events", 11, 0, b"\x00\x00", E.NO_ITEMS),
    ("ack sum over MAX_ITEMS", 11, 0, w.encode_varint(4000) + w.encode_varint(97),
     E.TOO_MANY_ITEMS),
    ("ack 2 refusals < 4 bytes", 11, 0, b"\x01\x02\x00\x09\x01", E.TRUNCATED),
    ("ack not ascending before a bad reason", 11, 0, b"\x01\x02\x01\x01\x01\x09",
     E.BAD_VALUE),
    ("ack index = events", 11, 0, b"\x01\x01\x02\x01", E.BAD_VALUE),
    ("ack reason 0", 11, 0, b"\x01\x01\x01\x00", E.BAD_VALUE),
    ("ack reason 5", 11, 0, b"\x01\x01\x01\x05", E.BAD_VALUE),
    ("ack trailing", 11, 0, b"\x01\x01\x00\x03\x00", E.TRAILING_BYTES),
]

# tests/fuzz/corpus/codec/<name>: the C decoder's verdict on each seed frame (codec_decode_frame,
# checked by running it).  None: decodes.  bad-truncated is shorter than its payload_len: the C
# stream decoder says NEED_MORE, the package's whole-frame decoder TRUNCATED.
CORPUS_VERDICTS = {
    "bad-duplicate-id": E.UNSORTED_FEATURES, "bad-flags": E.BAD_HEADER,
    "bad-magic": E.BAD_MAGIC, "bad-name": E.BAD_NAME, "bad-nan-value": E.BAD_VALUE,
    "bad-no-items": E.NO_ITEMS, "bad-reserved": E.BAD_HEADER,
    "bad-trailing": E.TRAILING_BYTES, "bad-truncated": E.TRUNCATED,
    "bad-truncated-payload": E.TRUNCATED, "bad-type": E.UNKNOWN_TYPE,
    "bad-varint": E.BAD_VARINT, "bad-version": E.BAD_VERSION,
    "bad-feedback-item": E.BAD_VALUE, "bad-feedback-ack-order": E.BAD_VALUE,
    "bad-feedback-weight-nan": E.BAD_VALUE,
}


class TestCrossCheck(WireErrorMixin, unittest.TestCase):
    """The package's codec against the C side's data: codec/test_vectors.txt, the codec fuzz
    seed corpus and decoding-order cases whose codes the C decoder gives."""

    def test_codec_test_vectors_file(self):
        path = os.path.join(REPO, "codec", "test_vectors.txt")
        self.assertTrue(os.path.exists(path), "%s is part of the repository" % path)
        rows = []
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                if line.startswith("frame "):
                    continue              # frame vectors: test_codec_frame_vectors
                field, raw, fid = line.split()
                rows.append((int(field), b"" if raw == "-" else bytes.fromhex(raw), int(fid, 16)))
        self.assertGreaterEqual(len(rows), 11)
        for field, raw, fid in rows:
            with self.subTest(field=field, raw=raw):
                self.assertEqual(w.feature_id(field, raw), fid)
        # the table in docs/wire.md is in the file too (the file "carries the same vectors")
        doc = {(0, b""), (0, b"a"), (1, b"a"), (2, b"68fd1e64"), (5, b"1"), (13, b"0"),
               (13, b"-1"), (38, b"e5ba7672"), (200, b"tlserve"), (255, b"hello, world"),
               (7, "\u00dcnic\u00f6de".encode())}
        self.assertLessEqual(doc, {(f, r) for f, r, _ in rows})

    def test_codec_frame_vectors(self):
        # "frame <name> <verdict> <hex>" lines of codec/test_vectors.txt, which the C codec
        # replays too (tests/codec/test_feedback.c): same verdicts, and a valid frame's payload
        # re-encodes to the same bytes with this package's encoders.
        path = os.path.join(REPO, "codec", "test_vectors.txt")
        rows = []
        with open(path) as f:
            for line in f:
                if line.startswith("frame "):
                    _, name, verdict, hx = line.split()
                    rows.append((name, verdict, bytes.fromhex(hx)))
        self.assertGreaterEqual(len(rows), 20)
        seen = set()
        for name, verdict, frame in rows:
            with self.subTest(name=name):
                if verdict != "OK":
                    self.assertWireError(E[verdict], w.decode_message, frame)
                    continue
                f, msg = w.decode_message(frame)
                seen.add(f.type)
                self.assertEqual(self.reencode(f, msg), f.payload)
        self.assertLessEqual({w.MsgType.PREDICT, w.MsgType.TRAIN, w.MsgType.FEEDBACK,
                              w.MsgType.FEEDBACK_ACK}, seen)

    @staticmethod
    def reencode(f, msg):
        if f.type == w.MsgType.PREDICT:
            self_flags = w.predict_flags(msg.impression_id)
            assert self_flags == f.flags
            return w.encode_predict(msg.model, msg.shared, msg.items, msg.version,
                                    impression_id=msg.impression_id)
        if f.type == w.MsgType.TRAIN:
            assert w.train_flags(msg.weights) == f.flags
            return w.encode_train(msg.model, msg.shared, msg.samples, weights=msg.weights)
        if f.type == w.MsgType.FEEDBACK:
            return w.encode_feedback(msg.model, msg.events)
        if f.type == w.MsgType.FEEDBACK_ACK:
            return w.encode_feedback_ack(msg.accepted, msg.refused)
        raise AssertionError("no re-encoder for type %d" % f.type)

    def test_flagged_decoding_order_cases(self):
        for what, mtype, flags, payload, code in FLAGGED_DECODING_ORDER_CASES:
            with self.subTest(what=what):
                self.assertWireError(code, w.decode_message,
                                     w.encode_frame(mtype, 1, payload, flags))

    def test_fuzz_corpus(self):
        d = os.path.join(REPO, "tests", "fuzz", "corpus", "codec")
        self.assertTrue(os.path.isdir(d), "%s is part of the repository" % d)
        names = sorted(os.listdir(d))
        self.assertTrue(names)
        for name in names:
            with open(os.path.join(d, name), "rb") as f:
                frame = f.read()
            with self.subTest(name=name):
                if name.startswith("valid-"):
                    fr, msg = w.decode_message(frame)
                    self.assertIsNotNone(msg)
                else:
                    self.assertTrue(name.startswith("bad-"), name)
                    self.assertIn(name, CORPUS_VERDICTS, "add the C verdict for this seed")
                    self.assertWireError(CORPUS_VERDICTS[name], w.decode_message, frame)

    def test_decoding_order_cases(self):
        for what, mtype, payload, code in DECODING_ORDER_CASES:
            with self.subTest(what=what):
                self.assertWireError(code, w.decode_message, w.encode_frame(mtype, 1, payload))

    def test_decode_message_valid(self):
        p = w.encode_predict("m", [1], [[2], ([3], [0.5])], version=4)
        f, msg = w.decode_message(w.encode_frame(w.MsgType.PREDICT, 9, p))
        self.assertEqual((f.type, f.request_id), (w.MsgType.PREDICT, 9))
        self.assertEqual(msg, w.decode_predict(p))
        f, msg = w.decode_message(w.encode_frame(w.MsgType.TRAIN_ACK, 3, w.encode_train_ack(7)))
        self.assertEqual(msg, 7)
        self.assertWireError(E.TRUNCATED, w.decode_message,
                             w.encode_frame(w.MsgType.TRAIN_ACK, 3, b"\x07")[:-1])


if __name__ == "__main__":
    unittest.main()
