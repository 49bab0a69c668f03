"""FM and FFM models with replicas over a real 3-node NATS JetStream cluster (natscluster.py).

- Replay mode (the default --bus-mode): two replicas serve the same FM (then FFM) model; TRAIN
  frames sent to either are learned by both in the stream's order, and since the trainer is
  deterministic (it starts from the served rows, a new id from a hash of the seed) they then
  hold bit-identical weights (/v1/models/NAME/digest) and score float for float the same, and
  other than the model's original scores.
- Partitioned mode (--bus-mode partitioned, server/online_sync.c: ROWS): two replicas of an FM
  (then FFM, then DNN) model are each sent different TRAIN frames (even / odd) and exchange
  their rows' (dx, dG) every 50 ms (top 25% of the keys in 1 bit, the rest as residuals, quiet
  turns exact).  Once training stops and the exact flushes settled (every message applied, no
  residual, over two intervals), both score the probes alike within 1e-5: the same increments
  added in another order (a replica adds its own steps as it makes them and its peer's per
  message), so float rounding of the sums differs in the last bits.  Their scores differ from a
  replica (no bus) that learned the even half alone: both halves count.
- A partitioned FM replica killed (-9) with frames learned but maybe not yet published, and
  started again on the same sample log and node name while its peer learns on: it learns its
  whole log again (every sample it acknowledged), subtracts its own earlier messages from what
  it will send, applies its peer's from the stream, and once both flushed they score the
  probes alike within 1e-5 again, as the LR replicas do (test_online_sync.py).

Run: TL_BUILD_DIR=build python3 -m unittest tests/integration/test_online_fm_bus.py
"""

import os
import random
import shutil
import signal
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import natscluster  # noqa: E402
import harness  # noqa: E402
from harness import BUILD, TLSERVE, TLSYNTH, Server, require  # noqa: E402
from test_online_fm import KINDS, PROBES, frame, gen, shared_block  # noqa: E402

PROBE = os.path.join(BUILD, "tests", "bus_probe")
FRAMES = 20
SYNC_MS = 50
_cluster = None


def setUpModule():
    global _cluster
    require(TLSERVE, TLSYNTH, PROBE)
    _cluster = natscluster.start("tl_online_fm_bus_")


def tearDownModule():
    _cluster.stop()


class FmReplicas(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tl_ofmbus_")
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            s.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def replica(self, model, stream, name, *extra):
        s = Server(model, "--online", "--sample-log-dir", os.path.join(self.tmp, stream + name),
                   "--bus-servers", _cluster.urls, "--bus-stream", stream, "--bus-node", name,
                   "--bus-subject-prefix", stream.lower(), *extra,
                   "--gate-sample", "0", "--guard-window-ms", "0")
        self.servers.append(s)
        return s

    def wait_learned(self, s, name, want, timeout=60):
        deadline = time.monotonic() + timeout
        metric = 'tlserve_online_samples_total{model="%s"}' % name
        while time.monotonic() < deadline:
            if s.metric(metric) >= want:
                return s.metric(metric)
            time.sleep(0.05)
        self.fail("learned %s of %s samples: %s" % (s.metric(metric), want, s.output()[-1500:]))

    def test_replay_replicas_learn_as_one(self):
        for kind, args in KINDS.items():
            with self.subTest(kind=kind):
                model = os.path.join(self.tmp, kind, "1")
                gen(model, kind, args)
                stream = "F%d" % random.randrange(1 << 30)
                a, b = self.replica(model, stream, "a"), self.replica(model, stream, "b")
                with a.client() as ca, b.client() as cb:
                    before = ca.predict(kind, shared_block(), PROBES).scores
                    for k in range(FRAMES):
                        shared, samples = frame(k)
                        c = ca if k % 2 == 0 else cb
                        self.assertEqual(c.train(kind, shared, samples), len(samples))
                    self.assertEqual(self.wait_learned(a, kind, 3 * FRAMES), 3 * FRAMES)
                    self.assertEqual(self.wait_learned(b, kind, 3 * FRAMES), 3 * FRAMES)
                    sa = ca.predict(kind, shared_block(), PROBES).scores
                    sb = cb.predict(kind, shared_block(), PROBES).scores
                self.assertEqual(sa, sb, "the replicas learned the same stream apart")
                da, db = (harness.digest(s, kind) for s in (a, b))
                self.assertEqual(da["digest"], db["digest"], "weights differ: %s %s" % (da, db))
                self.assertNotEqual(sa, before)
                self.assertGreater(sa[1], before[1], "the clicked item's score did not rise")

    def wait_settled(self, a, b, timeout=30):
        return harness.sync_settled(a, b, SYNC_MS, timeout)

    def test_partitioned_replicas_learn_as_one(self):
        for kind, args in KINDS.items():
            with self.subTest(kind=kind):
                model = os.path.join(self.tmp, "p" + kind, "1")
                gen(model, kind, args)
                stream = "P%d" % random.randrange(1 << 30)
                sync = ("--bus-mode", "partitioned", "--sync-interval-ms", str(SYNC_MS),
                        "--sync-topk", "0.25")
                a = self.replica(model, stream, "a", *sync)
                b = self.replica(model, stream, "b", *sync)
                solo = Server(model, "--online", "--gate-sample", "0", "--guard-window-ms", "0")
                self.servers.append(solo)
                with a.client() as ca, b.client() as cb, solo.client() as cs:
                    before = ca.predict(kind, shared_block(), PROBES).scores
                    for k in range(FRAMES):
                        shared, samples = frame(k)
                        for c in (ca, cs) if k % 2 == 0 else (cb,):
                            self.assertEqual(c.train(kind, shared, samples), len(samples))
                    half = 3 * FRAMES // 2
                    self.assertEqual(self.wait_learned(a, kind, half), half)
                    self.assertEqual(self.wait_learned(b, kind, half), half)
                    self.assertEqual(self.wait_learned(solo, kind, half), half)
                    self.wait_settled(a, b)
                    sa = ca.predict(kind, shared_block(), PROBES).scores
                    sb = cb.predict(kind, shared_block(), PROBES).scores
                    ss = cs.predict(kind, shared_block(), PROBES).scores
                for j, (x, y) in enumerate(zip(sa, sb)):
                    self.assertAlmostEqual(x, y, delta=1e-5, msg="%s probe %d" % (kind, j))
                apart = max(abs(x - y) for x, y in zip(sa, ss))
                print("\n%s partitioned: max |a - b| %.2g, |a - a's half alone| %.4f, bytes "
                      "%d + %d" % (kind, max(abs(x - y) for x, y in zip(sa, sb)), apart,
                                   a.metric("tlserve_sync_bytes_total"),
                                   b.metric("tlserve_sync_bytes_total")), file=sys.stderr)
                self.assertGreater(apart, 1e-4, "b's half did not count at a")
                self.assertNotEqual(sa, before)
                for s in (a, b, solo):  # an ASan/UBSan build reports here
                    self.assertNotIn("Sanitizer", s.output())
                    self.assertNotIn("runtime error", s.output())
                for s in (a, b):
                    self.assertGreater(s.metric("tlserve_sync_applied_keys_total"), 0)
                    for bad in ("tlserve_sync_refused_bad_total", "tlserve_sync_refused_keys_total",
                                "tlserve_sync_gap_total", "tlserve_sync_overflow_total"):
                        self.assertEqual(s.metric(bad), 0, bad)

    def send(self, s, name, frames):
        with s.client() as c:
            for k in frames:
                shared, samples = frame(k)
                self.assertEqual(c.train(name, shared, samples), len(samples))

    def test_a_partitioned_fm_replica_killed_catches_up(self):
        model = os.path.join(self.tmp, "kfm", "1")
        gen(model, "fm", KINDS["fm"])
        stream = "K%d" % random.randrange(1 << 30)
        sync = ("--bus-mode", "partitioned", "--sync-interval-ms", str(SYNC_MS),
                "--sync-topk", "0.25")
        a, b = self.replica(model, stream, "a", *sync), self.replica(model, stream, "b", *sync)
        before = self.probe_scores(a)
        for r in range(3):  # rounds, each exchanged before the next
            self.send(a, "fm", range(10 * r, 10 * r + 10, 2))
            self.send(b, "fm", range(10 * r + 1, 10 * r + 10, 2))
            self.wait_learned(a, "fm", 15 * (r + 1))
            self.wait_learned(b, "fm", 15 * (r + 1))
            self.wait_settled(a, b)
        self.send(b, "fm", range(30, 40))  # learned, maybe not yet published
        os.kill(b.proc.pid, signal.SIGKILL)
        b.proc.wait()
        self.send(a, "fm", range(40, 50))  # while b is down
        b2 = self.replica(model, stream, "b", *sync)  # the same sample log and node name
        acked = 3 * (15 + 10)  # the samples b acknowledged: its whole log
        self.assertEqual(self.wait_learned(b2, "fm", acked), acked)
        self.assertEqual(b2.metric('tlserve_online_replayed_total{model="fm"}'), acked)
        self.send(b2, "fm", range(50, 55))
        sa = harness.sync_agree(a, b2, self.probe_scores, SYNC_MS)
        self.assertGreater(b2.metric("tlserve_sync_own_subtracted_total"), 0)
        for s in (a, b2):
            self.assertEqual(s.metric("tlserve_sync_gap_total"), 0)
            self.assertEqual(s.metric("tlserve_sync_refused_producer_total"), 0)
            self.assertEqual(s.metric("tlserve_sync_refused_bad_total"), 0)
            self.assertNotIn("runtime error", s.output())
        self.assertEqual(a.metric('tlserve_online_samples_total{model="fm"}'), 3 * 25)
        self.assertNotEqual(sa, before)

    @staticmethod
    def probe_scores(s):
        with s.client() as c:
            return c.predict("fm", shared_block(), PROBES).scores


if __name__ == "__main__":
    unittest.main()
