"""Online learning replicas over a real 3-node NATS JetStream cluster (--bus-servers).

The cluster is deploy/nats-cluster.sh's, in a temporary directory on free loopback ports, and
stopped at the end (also on SIGTERM). Two tlserve replicas serve the same LR version, each with
its own sample log (the outbox) and the same stream:

- TRAIN frames sent to either replica are learned by both, in the stream's order: once both
  have learned every acknowledged sample, they hold bit-identical weights (the admin plane's
  /v1/models/ctr/digest of every served float) and score, float for float, the same.
- A NATS node killed (-9) while frames stream in, and started again: nothing acknowledged is
  lost (both replicas learn every acknowledged sample) and they still score the same.
- A replica killed (-9) and started again catches up from the stream (and from its outbox,
  for what it acknowledged but had not forwarded): it scores as the other one.
- A stream message that is not a TRAIN frame is counted (tlserve_bus_bad_total) and skipped.

Run: TL_BUILD_DIR=build python3 -m unittest tests/integration/test_online_bus.py
"""

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import tlserve  # noqa: E402
from tlserve.wire import MsgType  # noqa: E402
import natscluster  # noqa: E402
from harness import (BUILD, TLSERVE, TLSYNTH, Server, gen_model, replica_frame,  # noqa: E402
                     replica_sample, require)

PROBE = os.path.join(BUILD, "tests", "bus_probe")

SEED = 41
_cluster = None


def setUpModule():
    global _cluster
    require(TLSERVE, TLSYNTH, PROBE)
    _cluster = natscluster.start("tl_online_bus_")


def tearDownModule():
    _cluster.stop()


def cluster(*args):
    return _cluster.run(*args)


def sample(j):
    return replica_sample(j, SEED)


def frame(k):
    return replica_frame(k, SEED)


class Replicas(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tl_obus_")
        self.model = os.path.join(self.tmp, "m", "ctr", "1")
        gen_model(self.model, 20000, "ctr", seed=SEED)
        self.stream = "T%d" % random.randrange(1 << 30)
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            s.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def replica(self, name, *extra):
        s = Server(self.model, "--online", "--sample-log-dir", os.path.join(self.tmp, name),
                   "--bus-servers", _cluster.urls, "--bus-stream", self.stream, "--bus-node", name,
                   "--bus-subject-prefix", self.stream.lower(),
                   "--gate-sample", "0", "--guard-window-ms", "0", *extra)
        self.servers.append(s)
        return s

    def learned(self, s):
        return s.metric('tlserve_online_samples_total{model="ctr"}')

    def wait_learned(self, s, want, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.learned(s) >= want:
                time.sleep(0.2)  # nothing more should come
                return self.learned(s)
            time.sleep(0.05)
        self.fail("learned %s of %s samples: %s" % (self.learned(s), want, s.metrics()[-1500:]))

    def assert_same(self, a, b):
        """Bit-identical weights (the digest of every served float), and probes scored alike."""
        da, db = harness.digest(a, "ctr"), harness.digest(b, "ctr")
        self.assertEqual((da["keys"], da["digest"]), (db["keys"], db["digest"]))
        with a.client() as ca, b.client() as cb:
            for j in range(30):
                shared, item = sample(j)
                self.assertEqual(ca.predict("ctr", shared, [item]).scores,
                                 cb.predict("ctr", shared, [item]).scores, "probe %d" % j)

    def send(self, s, frames):
        with s.client() as c:
            for shared, samples in frames:
                self.assertEqual(c.train("ctr", shared, samples), len(samples))

    def test_two_replicas_learn_as_one(self):
        a, b = self.replica("a"), self.replica("b")
        self.send(a, [frame(k) for k in range(0, 60)])
        self.send(b, [frame(k) for k in range(60, 120)])
        self.send(a, [frame(k) for k in range(120, 150)])
        self.assertEqual(self.wait_learned(a, 300), 300)
        self.assertEqual(self.wait_learned(b, 300), 300)
        self.assert_same(a, b)
        plain = Server(self.model)
        self.servers.append(plain)
        self.assertNotEqual(harness.digest(plain, "ctr")["digest"], harness.digest(a, "ctr")["digest"])
        with a.client() as ca, plain.client() as cp:
            shared, item = sample(1)
            self.assertNotEqual(ca.predict("ctr", shared, [item]).scores,
                                cp.predict("ctr", shared, [item]).scores)
        self.assertGreaterEqual(a.metric("tlserve_bus_forwarded_total"), 90)
        self.assertEqual(a.metric("tlserve_bus_gap_total"), 0)

    def test_a_nats_node_killed_loses_nothing(self):
        a, b = self.replica("a"), self.replica("b")
        self.send(a, [frame(k) for k in range(40)])
        cluster("kill", 1)
        try:
            self.send(a, [frame(k) for k in range(40, 80)])
            self.send(b, [frame(k) for k in range(80, 100)])
        finally:
            cluster("restart", 1)
        self.send(a, [frame(k) for k in range(100, 120)])
        self.assertEqual(self.wait_learned(a, 240, timeout=90), 240)
        self.assertEqual(self.wait_learned(b, 240, timeout=90), 240)
        self.assert_same(a, b)

    def test_a_replica_killed_catches_up(self):
        a, b = self.replica("a"), self.replica("b")
        self.send(a, [frame(k) for k in range(50)])
        self.wait_learned(b, 100)
        os.kill(b.proc.pid, signal.SIGKILL)
        b.proc.wait()
        self.send(a, [frame(k) for k in range(50, 100)])
        b2 = self.replica("b")  # the same outbox and trainer.state
        self.send(b2, [frame(k) for k in range(100, 110)])
        self.assertEqual(self.wait_learned(a, 220), 220)
        self.wait_learned(b2, 220)
        self.assert_same(a, b2)

    def test_a_bad_stream_message_is_skipped(self):
        a = self.replica("a")
        self.send(a, [frame(0)])
        self.wait_learned(a, 2)
        prefix = self.stream.lower()
        for subject, text in ((prefix + ".ctr", "not a frame"), (prefix + ".nope", "x" * 40)):
            r = subprocess.run([PROBE, "raw", _cluster.urls, self.stream, prefix + ".>", subject, text],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
        # whole TRAIN frames that do not decode (a label of 0.5) or name another model than
        # their subject: not learned either, counted and logged
        shared, items = frame(2)
        for name, label in (("ctr", 0.5), ("other", 1.0)):
            payload = tlserve.wire.encode_train(name, shared, [(label, items[0][1])], check=False)
            data = tlserve.wire.encode_frame(MsgType.TRAIN, 0, payload)
            r = subprocess.run([PROBE, "rawhex", _cluster.urls, self.stream, prefix + ".>",
                                prefix + ".ctr", data.hex()],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
        self.send(a, [frame(1)])
        self.assertEqual(self.wait_learned(a, 4), 4)
        self.assertEqual(a.metric("tlserve_bus_bad_total"), 4)
        self.assertIn("its TRAIN does not decode", a.output())
        with a.client() as c:  # PREDICT never noticed
            c.predict("ctr", *sample(0)[:1], [sample(0)[1]])

    def test_a_long_node_name_still_forwards(self):
        """A --bus-node of 127 bytes makes "<node>/<model>/<position>" longer than the 128
        bytes a message id may take: the id is hashed, the outbox still goes out."""
        a = self.replica("n" * 127)
        self.send(a, [frame(k) for k in range(5)])
        self.assertEqual(self.wait_learned(a, 10), 10)
        self.assertEqual(a.metric('tlserve_bus_outbox_lag{model="ctr"}'), 0)

    def test_a_train_larger_than_a_bus_message_is_refused(self):
        """A TRAIN that could never be forwarded (over nats-server's 1 MiB max_payload) is
        refused at once, not acknowledged into an outbox it would wedge."""
        a = self.replica("a")
        shared, _ = sample(0)
        rnd = random.Random(3)
        big = [(float(k % 2), (sorted(rnd.sample(range(1, 1 << 62), 200)), None))
               for k in range(700)]  # 700 x 200 random ids, 8-9 varint bytes each: 1.2 MB
        with a.client() as c:
            with self.assertRaises(tlserve.ServerError) as e:
                c.train("ctr", shared, big)
            self.assertEqual(e.exception.name, "TOO_MANY_ITEMS")
            self.assertIn("larger than a bus message may be", e.exception.message)
        # just under 1 MiB: nats-server counts the message headers in its max_payload too, so
        # this one would never be published either
        first = [(1.0, (sorted(rnd.sample(range(1 << 61, 1 << 62), 60000)), None))
                 for _ in range(2)]
        ids = sorted(rnd.sample(range(1 << 61, 1 << 62), 60000))
        while True:
            near = first + [(0.0, (ids, None))]
            payload = tlserve.wire.encode_train("ctr", shared, near)
            size = len(tlserve.wire.encode_frame(MsgType.TRAIN, 1, payload))
            if size <= (1 << 20) - 100:
                break
            ids = ids[:-max(1, (size - ((1 << 20) - 200)) // 9)]
        self.assertGreater(size, (1 << 20) - 400)
        with a.client() as c:
            with self.assertRaises(tlserve.ServerError) as e:
                c.train("ctr", shared, near)
            self.assertEqual(e.exception.name, "TOO_MANY_ITEMS")
        self.send(a, [frame(k) for k in range(5)])
        self.assertEqual(self.wait_learned(a, 10), 10)
        self.assertEqual(a.metric('tlserve_bus_outbox_lag{model="ctr"}'), 0)

    def test_a_message_too_big_for_a_smaller_queue_is_skipped(self):
        """A replica whose queue is too small for a peer's TRAIN skips that one message, says
        so and counts it, and goes on learning: it never stalls on it."""
        a, b = self.replica("a"), self.replica("b", "--online-queue-bytes", "65536")
        shared, _ = sample(0)
        rnd = random.Random(4)
        big = [(0.0, (sorted(rnd.sample(range(1, 1 << 62), 50)), None))
               for k in range(100)]  # 100 x 50 random ids: 44 kB, over half of b's queue
        with a.client() as c:
            self.assertEqual(c.train("ctr", shared, big), 100)
        self.send(a, [frame(k) for k in range(10)])
        self.assertEqual(self.wait_learned(a, 120), 120)
        self.assertEqual(self.wait_learned(b, 20), 20)
        self.assertEqual(b.metric("tlserve_bus_too_big_total"), 1)
        self.assertIn("larger than half of this replica's --online-queue-bytes 65536",
                      b.output())


if __name__ == "__main__":
    unittest.main()
