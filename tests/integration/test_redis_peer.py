"""Smoke test of the benchmark suite's Redis peer (loadgen/redis_load.c, loadgen/redis_adapter.c).

Starts, on free loopback ports: redis-server (no persistence), redis_load with a 10K-key
`tlsynth model` model, redis_adapter in front of it, and tlserve on the same model.  Sends the
same PREDICTs to both with tlserve.Client and checks that the adapter's scores equal tlserve's
(bit for bit: both sum in double in block order and share the sigmoid), that pipelined
requests are answered in order, and that a bad request gets an ERROR frame without losing the
connection.  Skipped when redis-server or the binaries are missing.

Run: TL_BUILD_DIR=build python3 -m unittest tests/integration/test_redis_peer.py
"""

import os
import shutil
import socket
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402,F401  (puts codec/python on sys.path)
import tlserve  # noqa: E402
from harness import (BUILD, TLSERVE, TLSYNTH, Proc, Server, free_port, mix64,  # noqa: E402
                     model_key, require, temp_model)
from tlserve import ErrorCode, MsgType  # noqa: E402

REDIS_LOAD = os.path.join(BUILD, "loadgen", "redis_load")
REDIS_ADAPTER = os.path.join(BUILD, "loadgen", "redis_adapter")
REDIS_SERVER = shutil.which("redis-server")
MODEL = "ctr_lr"
KEYS = 10000


def wait_port(port, proc, name, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("%s exited with %s" % (name, proc.returncode))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("%s did not listen on %d" % (name, port))


PROCS = []


def start(argv, name):
    p = Proc(argv, name)
    PROCS.append(p)
    return p


def setUpModule():
    global TMP, TL_PORT, AD_PORT, LOAD_OUT
    if not REDIS_SERVER:
        harness.missing("redis-server is not installed")
    require(TLSERVE, TLSYNTH, REDIS_LOAD, REDIS_ADAPTER)
    TMP, model_dir = temp_model("tl-redis-peer-", KEYS, MODEL)
    try:
        r_port = free_port()
        redis = start([REDIS_SERVER, "--bind", "127.0.0.1", "--port", str(r_port), "--save", "",
                       "--appendonly", "no", "--dir", TMP, "--daemonize", "no"], "redis-server")
        wait_port(r_port, redis.proc, "redis-server")
        load = subprocess.run([REDIS_LOAD, "--snapshot", model_dir, "--redis-port", str(r_port),
                               "--pipeline", "1000"],
                              check=True, capture_output=True, text=True, timeout=120)
        LOAD_OUT = load.stdout
        AD_PORT = free_port()
        adapter = start([REDIS_ADAPTER, "--port", str(AD_PORT), "--redis-port", str(r_port),
                         "--threads", "2", "--model", MODEL], "redis_adapter")
        wait_port(AD_PORT, adapter.proc, "redis_adapter")
        tl = Server(model_dir, "--workers", "1")
        PROCS.append(tl)
        TL_PORT = tl.port
    except BaseException:
        tearDownModule()
        raise


def tearDownModule():
    for p in reversed(PROCS):
        p.stop()
    PROCS.clear()
    shutil.rmtree(TMP, ignore_errors=True)


def request(items, shared, per_item, start, unknown_every=0, values=False):
    """Blocks of tlsnap keys (known to the model); every unknown_every-th id is a fresh one the
    model has never seen (weight 0)."""
    n = [0]

    def ids(count, base):
        out = []
        for j in range(count):
            n[0] += 1
            if unknown_every and n[0] % unknown_every == 0:
                out.append(mix64(0xDEAD0000 + base + j))  # not a tlsnap key
            else:
                out.append(model_key((base + j) % KEYS))
        return out

    def block(count, base):
        i = ids(count, base)
        if not values:
            return tlserve.make_block(i)
        return tlserve.make_block(i, [((k * 37) % 11 - 5) / 4.0 for k in range(len(i))])

    shared_b = block(shared, start)
    blocks = [block(per_item, start + shared + k * per_item) for k in range(items)]
    return shared_b, blocks


class RedisPeerTest(unittest.TestCase):
    def predict_both(self, shared, items):
        with tlserve.Client("127.0.0.1", TL_PORT) as t, tlserve.Client("127.0.0.1", AD_PORT) as a:
            rt = t.predict(MODEL, shared, items)
            ra = a.predict(MODEL, shared, items)
        return rt, ra

    def assert_same(self, rt, ra):
        self.assertEqual(ra.version, 1)
        self.assertEqual(len(ra.scores), len(rt.scores))
        diff = max(abs(x - y) for x, y in zip(rt.scores, ra.scores))
        self.assertLessEqual(diff, 1e-6)
        self.assertEqual(list(ra.scores), list(rt.scores), "scores differ in the last bits")

    def test_load_report(self):
        self.assertIn("%d keys" % KEYS, LOAD_OUT)
        self.assertIn("redis_bytes_per_key", LOAD_OUT.strip().splitlines()[-1])

    def test_binary_request_matches_tlserve(self):
        self.assert_same(*self.predict_both(*request(20, 30, 10, start=0)))

    def test_unknown_ids_weigh_zero(self):
        self.assert_same(*self.predict_both(*request(10, 25, 15, start=500, unknown_every=3)))

    def test_valued_request_matches_tlserve(self):
        self.assert_same(*self.predict_both(*request(8, 12, 9, start=900, values=True,
                                                     unknown_every=5)))

    def test_standard_size_request_many_mget_chunks(self):
        # 40,300 ids: 41 MGET chunks pipelined in one burst
        self.assert_same(*self.predict_both(*request(200, 300, 200, start=7)))

    def test_pipelined_requests_in_order(self):
        reqs = [request(5, 10, 10, start=100 * k) for k in range(8)]
        with tlserve.Client("127.0.0.1", TL_PORT) as t:
            want = [t.predict(MODEL, s, b).scores for s, b in reqs]
        with tlserve.Client("127.0.0.1", AD_PORT) as a:
            ids = [a.send_predict(MODEL, s, b) for s, b in reqs]
            ping = a.send_ping(b"hi")
            got = []
            for rid in ids:
                f = a.recv_frame()
                self.assertEqual(f.request_id, rid)
                self.assertEqual(f.type, MsgType.PREDICT_RESULT)
                got.append(tlserve.decode_predict_result(f.payload).scores)
            f = a.recv_frame()
            self.assertEqual((f.type, f.request_id), (MsgType.PONG, ping))
        self.assertEqual(got, want)

    def test_errors_keep_the_connection(self):
        shared, items = request(2, 3, 3, start=0)
        with tlserve.Client("127.0.0.1", AD_PORT) as a:
            with self.assertRaises(tlserve.ServerError) as e:
                a.predict(MODEL, shared, items, version=7)
            self.assertEqual(e.exception.code, ErrorCode.UNKNOWN_VERSION)
            with self.assertRaises(tlserve.ServerError) as e:
                a.predict("other_model", shared, items)
            self.assertEqual(e.exception.code, ErrorCode.UNKNOWN_MODEL)
            self.assertEqual(len(a.predict(MODEL, shared, items).scores), 2)

    def test_framing_error_closes(self):
        with tlserve.Client("127.0.0.1", AD_PORT) as a:
            a.send_raw(b"XXXX" + bytes(20))
            f = a.recv_frame()
            self.assertEqual((f.type, f.request_id), (MsgType.ERROR, 0))
            self.assertEqual(tlserve.decode_error(f.payload).code, ErrorCode.BAD_MAGIC)
            with self.assertRaises((tlserve.ConnectionClosed, ConnectionResetError)):
                a.recv_frame()


if __name__ == "__main__":
    unittest.main()
