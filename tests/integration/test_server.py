"""Integration tests of the real tlserve over loopback sockets.

Each test class starts `tlserve` (from TL_BUILD_DIR, default <repo>/build) on free ports with a
small model made by `tlsynth model`, talks to it with tlserve.Client (the independent Python
implementation of docs/wire.md) and reads its admin plane over HTTP.  Nothing is mocked.

Run: TL_BUILD_DIR=build python3 -m unittest tests/integration/test_server.py
"""

import json
import os
import signal
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (puts codec/python on sys.path)
import tlserve  # noqa: E402
from harness import (BUILD, TLSERVE, TLSYNTH, free_port, model_key, require,  # noqa: E402
                     temp_model)
from tlserve import ErrorCode, MsgType  # noqa: E402

SCORE_CHECK = os.path.join(BUILD, "tests", "score_check")
MODEL = "ctr_lr"
KEYS = 20000
TOKEN = "secret"


class Server(harness.Server):
    """harness.Server with this file's admin token; ready once constructed."""

    def __init__(self, model_dir, *extra):
        super().__init__(model_dir, *extra, token=TOKEN)


def request(items=20, shared=30, per_item=10, start=0):
    shared_ids = sorted({model_key(start + j) for j in range(shared)})
    blocks = []
    for i in range(items):
        base = start + shared + i * per_item
        blocks.append(sorted({model_key(base + j) for j in range(per_item)}))
    return shared_ids, blocks


def setUpModule():
    global TMP, MODEL_DIR
    require(TLSERVE, TLSYNTH)
    TMP, MODEL_DIR = temp_model("tlserve-it-", KEYS, MODEL)


def tearDownModule():
    shutil.rmtree(TMP, ignore_errors=True)


class Predict(unittest.TestCase):
    extra = ()

    @classmethod
    def setUpClass(cls):
        cls.srv = Server(MODEL_DIR, "--workers", "2", *cls.extra)

    @classmethod
    def tearDownClass(cls):
        rc = cls.srv.stop()
        if rc != 0:
            raise AssertionError("tlserve exited with %r on SIGTERM" % rc)

    def test_scores(self):
        shared, items = request(items=50)
        with self.srv.client() as c:
            res = c.predict(MODEL, shared, items)
        self.assertEqual(res.version, 1)
        self.assertEqual(len(res.scores), 50)
        for s in res.scores:
            self.assertTrue(0.0 < s < 1.0, s)
        self.assertGreater(len(set(res.scores)), 1)  # real weights, not a constant

    def test_pipelined_any_order(self):
        with self.srv.client() as c:
            ids = [c.send_predict(MODEL, *request(items=5, start=100 * k)) for k in range(10)]
            for rid in reversed(ids):
                f = c.wait_for(rid)
                self.assertEqual(f.type, MsgType.PREDICT_RESULT)
                self.assertEqual(len(tlserve.decode_predict_result(f.payload).scores), 5)

    def test_ping(self):
        with self.srv.client() as c:
            rid = c.send_ping(b"hello")
            f = c.wait_for(rid)
            self.assertEqual((f.type, f.payload), (MsgType.PONG, b"hello"))

    def test_scores_equal_in_process_model(self):
        if not os.path.exists(SCORE_CHECK):
            harness.missing("score_check is not built")
        r = subprocess.run([SCORE_CHECK, "--port", str(self.srv.port), "--model-dir", MODEL_DIR,
                            "--requests", "20"], capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_driver(self):
        log = self.srv.output()
        if "--force-epoll" in self.extra:
            self.assertNotIn("io_uring", log.replace("--force-epoll", ""))
        elif "io_uring unavailable" in log:
            self.skipTest("io_uring is not available here; the epoll fallback served")

    def test_health_and_metrics(self):
        self.assertEqual(self.srv.get("/healthz")[0], 200)
        self.assertEqual(self.srv.get("/readyz")[0], 200)
        before = self.srv.metric("tlserve_predict_total")
        with self.srv.client() as c:
            c.predict(MODEL, *request(items=3))
        self.assertEqual(self.srv.metric("tlserve_predict_total"), before + 1)
        q50 = self.srv.metric('tlserve_request_latency_quantile_seconds{quantile="0.5"}')
        q99 = self.srv.metric('tlserve_request_latency_quantile_seconds{quantile="0.99"}')
        self.assertGreater(q50, 0.0)
        self.assertLessEqual(q50, q99)
        self.assertLess(q99, 1.0)
        buckets = [float(l.rsplit(" ", 1)[1]) for l in self.srv.metrics().splitlines()
                   if l.startswith("tlserve_request_latency_seconds_bucket")]
        self.assertEqual(buckets, sorted(buckets))
        self.assertEqual(buckets[-1], self.srv.metric("tlserve_request_latency_seconds_count"))
        models = json.loads(self.srv.get("/v1/models")[2])["models"]
        self.assertEqual([(m["name"], m["version"], m["keys"]) for m in models],
                         [(MODEL, 1, KEYS)])


class PredictEpoll(Predict):
    """The same tests on the epoll fallback."""
    extra = ("--force-epoll",)


class PredictLookupThreads(Predict):
    """The same tests with a lookup thread sharing each large request's lookups."""
    extra = ("--lookup-threads", "1")

    def test_large_requests_are_split(self):
        if not os.path.exists(SCORE_CHECK):
            harness.missing("score_check is not built")
        before = self.srv.metric("tlserve_lookup_splits_total")
        r = subprocess.run([SCORE_CHECK, "--port", str(self.srv.port), "--model-dir", MODEL_DIR,
                            "--requests", "5"], capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # 9,700 ids per request; two workers may each hold the team only one at a time,
        # but these requests come one by one, so every one of them is split.
        self.assertEqual(self.srv.metric("tlserve_lookup_splits_total"), before + 5)


class BadInput(unittest.TestCase):
    """Every kind of bad input gets the right ERROR code (or, where framing is lost, an ERROR
    and a clean close), the server keeps serving, and /metrics counts it."""

    @classmethod
    def setUpClass(cls):
        cls.srv = Server(MODEL_DIR, "--workers", "1", "--frame-timeout-ms", "1500")

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def assert_still_serves(self):
        with self.srv.client() as c:
            self.assertEqual(len(c.predict(MODEL, *request(items=2)).scores), 2)

    def expect_error(self, frame, code, closes):
        errors_before = self.srv.metric("tlserve_errors_total")
        with self.srv.client() as c:
            c.send_raw(frame)
            f = c.recv_frame()
            self.assertEqual(f.type, MsgType.ERROR)
            err = tlserve.decode_error(f.payload)
            self.assertEqual(err.code, code, err.message)
            self.assertTrue(err.message)
            if closes:
                self.assertEqual(f.request_id, 0)
                c.settimeout(5)
                self.assertEqual(c.sock.recv(1), b"")  # closed, cleanly
            else:
                rid = c.send_ping(b"ok")  # the connection is still usable
                self.assertEqual(c.wait_for(rid).type, MsgType.PONG)
        self.assertGreater(self.srv.metric("tlserve_errors_total"), errors_before)
        self.assert_still_serves()

    def predict_payload(self, items, blocks, name=MODEL):
        out = bytearray([len(name)]) + name.encode() + struct.pack("<Q", 0)
        out += tlserve.encode_varint(items)
        for b in blocks:
            out += b
        return bytes(out)

    def test_random_bytes(self):
        junk = bytes((i * 37 + 11) % 256 for i in range(200))
        self.expect_error(junk, ErrorCode.BAD_MAGIC, closes=True)

    def test_bad_magic(self):
        frame = bytearray(tlserve.encode_frame(MsgType.PING, 5))
        frame[0:4] = b"XXXX"
        self.expect_error(bytes(frame), ErrorCode.BAD_MAGIC, closes=True)

    def test_length_over_limit(self):
        hdr = tlserve.pack_header(MsgType.PREDICT, 9, 0)
        hdr = hdr[:16] + struct.pack("<I", 64 << 20) + hdr[20:]
        self.expect_error(hdr, ErrorCode.FRAME_TOO_LARGE, closes=True)

    def test_counts_overrun_frame(self):
        payload = self.predict_payload(10, [b"\x00\x00", b"\x00\x00"])  # 10 items, 1 block
        self.expect_error(tlserve.encode_frame(MsgType.PREDICT, 3, payload),
                          ErrorCode.TRUNCATED, closes=False)

    def test_malformed_varint(self):
        payload = bytes([len(MODEL)]) + MODEL.encode() + struct.pack("<Q", 0) + b"\xff" * 11
        self.expect_error(tlserve.encode_frame(MsgType.PREDICT, 4, payload),
                          ErrorCode.BAD_VARINT, closes=False)

    def test_unknown_type(self):
        self.expect_error(tlserve.pack_header(42, 6, 0), ErrorCode.UNKNOWN_TYPE, closes=False)

    def test_online_learning_types_not_served_yet(self):
        # TRAIN and FEEDBACK (no trainer yet) and the server-to-client types, flags included
        train = tlserve.encode_train(MODEL, [], [(1.0, [1])], weights=[0.5])
        self.expect_error(tlserve.encode_frame(MsgType.TRAIN, 11, train, tlserve.TRAIN_FLAG_WEIGHTS),
                          ErrorCode.UNKNOWN_TYPE, closes=False)
        fb = tlserve.encode_feedback(MODEL, [(5, 0, 1.0)])
        self.expect_error(tlserve.encode_frame(MsgType.FEEDBACK, 12, fb),
                          ErrorCode.UNKNOWN_TYPE, closes=False)
        for t in (2, 4, 6, 7, 9, 11):
            with self.subTest(type=t):
                self.expect_error(tlserve.pack_header(t, 13, 0), ErrorCode.UNKNOWN_TYPE,
                                  closes=False)

    def test_logged_predict_is_scored(self):
        # a LOG PREDICT scores as the same request without the flag (nothing is logged yet)
        shared, items = request(items=3)
        with self.srv.client() as c:
            plain = c.predict(MODEL, shared, items)
            logged = c.predict(MODEL, shared, items, impression_id=0x1234)
        self.assertEqual(logged, plain)
        payload = struct.pack("<Q", 0) + tlserve.encode_predict(MODEL, shared, items)
        self.expect_error(tlserve.encode_frame(MsgType.PREDICT, 14, payload,
                                               tlserve.PREDICT_FLAG_LOG),
                          ErrorCode.BAD_VALUE, closes=False)

    def test_unknown_model(self):
        payload = tlserve.encode_predict("no_such_model", *request(items=1))
        self.expect_error(tlserve.encode_frame(MsgType.PREDICT, 7, payload),
                          ErrorCode.UNKNOWN_MODEL, closes=False)

    def test_zero_items(self):
        payload = self.predict_payload(0, [b"\x00\x00"])
        self.expect_error(tlserve.encode_frame(MsgType.PREDICT, 8, payload),
                          ErrorCode.NO_ITEMS, closes=False)

    def test_too_many_items(self):
        payload = self.predict_payload(4097, [b"\x00\x00"] * 4098)
        self.expect_error(tlserve.encode_frame(MsgType.PREDICT, 10, payload),
                          ErrorCode.TOO_MANY_ITEMS, closes=False)

    def test_truncated_frame_then_eof(self):
        frame = tlserve.encode_frame(MsgType.PREDICT, 11,
                                    tlserve.encode_predict(MODEL, *request(items=3)))
        with self.srv.client() as c:
            c.send_raw(frame[: len(frame) // 2])
            c.sock.shutdown(socket.SHUT_WR)
            c.settimeout(5)
            self.assertEqual(c.sock.recv(1), b"")  # closed without an answer
        self.assert_still_serves()

    def test_slow_client_does_not_hold_the_worker(self):
        """One worker: a client dribbling a frame a byte at a time must not delay another."""
        frame = tlserve.encode_frame(MsgType.PREDICT, 12,
                                    tlserve.encode_predict(MODEL, *request(items=2)))
        stop = threading.Event()

        def dribble():
            try:
                with self.srv.client() as c:
                    for b in frame:
                        if stop.is_set():
                            return
                        c.send_raw(bytes([b]))
                        time.sleep(0.1)
            except OSError:
                pass  # closed by the server's idle timeout: expected

        t = threading.Thread(target=dribble)
        t.start()
        try:
            time.sleep(0.3)
            with self.srv.client() as c:
                for _ in range(20):
                    t0 = time.time()
                    c.predict(MODEL, *request(items=5))
                    self.assertLess(time.time() - t0, 1.0)
        finally:
            stop.set()
            t.join()

    def test_stalled_partial_frame_is_closed(self):
        with self.srv.client() as c:
            c.send_raw(tlserve.pack_header(MsgType.PING, 1, 10)[:10])
            c.settimeout(10)
            t0 = time.time()
            self.assertEqual(c.sock.recv(1), b"")  # frame timeout 1.5 s
            self.assertLess(time.time() - t0, 8)


class InputBudget(unittest.TestCase):
    """Many clients each sending the start of a large frame cannot make a worker hold more
    than --max-input-bytes: past it, a connection that would hold as much as the others (none
    holds more to be closed for it) gets OVERLOADED and is closed, and the server goes on
    serving."""

    def test_partial_frames_over_the_budget_are_refused(self):
        srv = Server(MODEL_DIR, "--workers", "1", "--max-input-bytes", "65536")
        socks = []
        try:
            partial = tlserve.pack_header(MsgType.PING, 1, 0)
            partial = partial[:16] + struct.pack("<I", 6000) + partial[20:] + b"\0" * 5000
            for _ in range(40):  # 40 x 8 KiB of buffer would be 320 KiB
                s = socket.create_connection(("127.0.0.1", srv.port))
                s.sendall(partial)
                socks.append(s)
            refused = 0
            for s in socks:
                s.settimeout(0.5)
                try:
                    data = s.recv(4096)
                except socket.timeout:
                    continue  # still held: within the budget
                if data:
                    h = tlserve.parse_header(data[:tlserve.HEADER_SIZE])
                    self.assertEqual(h.type, MsgType.ERROR)
                    err = tlserve.decode_error(data[tlserve.HEADER_SIZE:
                                                   tlserve.HEADER_SIZE + h.payload_len])
                    self.assertEqual(err.code, ErrorCode.OVERLOADED, err.message)
                    refused += 1
            self.assertGreater(refused, 0)
            self.assertLess(refused, 40)  # the first ones fit in the budget
            for s in socks:
                s.close()
            socks = []
            time.sleep(0.3)  # the worker sees the closes and frees their buffers
            with srv.client() as c:
                self.assertEqual(len(c.predict(MODEL, *request(items=2)).scores), 2)
        finally:
            for s in socks:
                s.close()
            self.assertEqual(srv.stop(), 0)


class Lifecycle(unittest.TestCase):
    def test_sigterm_exits_zero(self):
        srv = Server(MODEL_DIR)
        with srv.client() as c:
            c.predict(MODEL, *request(items=2))
        self.assertEqual(srv.stop(), 0)

    def test_sighup_and_sigusr_are_ignored(self):
        srv = Server(MODEL_DIR)
        for sig in (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
            srv.proc.send_signal(sig)
        deadline = time.monotonic() + 10
        while srv.output().count("ignored: tlserve has no reload") < 3:
            self.assertLess(time.monotonic(), deadline, srv.output())
            time.sleep(0.05)
        with srv.client() as c:  # still serving
            self.assertEqual(len(c.predict(MODEL, *request(items=2)).scores), 2)
        self.assertIsNone(srv.proc.poll())
        self.assertEqual(srv.stop(), 0)

    def test_bad_config_is_refused(self):
        r = subprocess.run([TLSERVE, "--port", "70000"], capture_output=True, text=True,
                           timeout=10)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("port", r.stderr)

    def test_missing_model_dir_fails_at_start(self):
        r = subprocess.run([TLSERVE, "--model", os.path.join(TMP, "nope"), "--port",
                            str(free_port()), "--admin-port", str(free_port())],
                           capture_output=True, text=True, timeout=20)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("nope", r.stderr)


if __name__ == "__main__":
    unittest.main()
