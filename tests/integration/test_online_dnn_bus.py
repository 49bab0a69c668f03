"""The DNN's MLP learning online in partitioned replicas (server/online_sync_dense.c), over a
real 3-node NATS JetStream cluster (natscluster.py).

- Two replicas of one DNN, each sent half the TRAIN frames, exchange their rows (as in
  test_online_fm_bus.py) and, per 50 ms turn, one DENSE message with their MLP's delta under
  1-bit Adam (exact for the first --sync-dnn-warmup 10 local steps, then 1 bit a value with
  error feedback), and swap the learned MLP in for their scorers.  While they learn, PREDICTs
  to both go on and none fails.  Once both settled (every message applied, over two
  intervals), the MLP each serves (the digest's "mlp") is no longer the snapshot's, both
  report the warm-up over, and the two score the probes alike within 1e-5 (the same deltas
  added in another order: float rounding).
- A replica killed (-9) with frames learned but maybe not yet published, started again on
  its sample log and node name while its peer learns on: it learns its log again, subtracts
  its earlier run's DENSE messages from what it will send (as the rows do), applies its peer's,
  and the two score the probes alike within 1e-5 again.
- A third replica whose DNN has the same rows but another MLP shape joins the stream: its
  DENSE messages are refused by the others (tlserve_sync_dnn_refused_total, reason logged),
  which keep serving.
- Two replicas of a DNN whose MLP's exact message passes the bus's 1 MB send each turn as
  parts over ranges of it: both MLPs move and the two score the probes alike.

Run: TL_BUILD_DIR=build python3 -m unittest tests/integration/test_online_dnn_bus.py
"""

import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import natscluster  # noqa: E402
import harness  # noqa: E402
from harness import TLSERVE, TLSYNTH, Server, require  # noqa: E402
from test_online_fm import KINDS, PROBES, frame, gen, shared_block  # noqa: E402

FRAMES = 60
SYNC_MS = 50
SYNC = ("--bus-mode", "partitioned", "--sync-interval-ms", str(SYNC_MS), "--sync-topk", "0.25",
        "--sync-dnn-warmup", "10", "--sync-dnn-lr", "0.01")
_cluster = None


def setUpModule():
    global _cluster
    require(TLSERVE, TLSYNTH)
    _cluster = natscluster.start("tl_online_dnn_bus_")


def tearDownModule():
    _cluster.stop()


class DnnReplicas(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tl_odnnbus_")
        self.servers = []
        self.stream = "D%d" % random.randrange(1 << 30)

    def tearDown(self):
        for s in self.servers:
            s.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def model(self, name, mlp="16,8,1", hidden="8"):
        path = os.path.join(self.tmp, name, "1")
        args = [a for a in KINDS["dnn"]]
        args[args.index("--mlp") + 1] = mlp
        args[args.index("hidden=8")] = "hidden=" + hidden
        gen(path, "dnn", args)
        return path

    def replica(self, model, name):
        s = Server(model, "--online", "--sample-log-dir", os.path.join(self.tmp, "log" + name),
                   "--bus-servers", _cluster.urls, "--bus-stream", self.stream, "--bus-node", name,
                   "--bus-subject-prefix", self.stream.lower(), *SYNC,
                   "--gate-sample", "0", "--guard-window-ms", "0")
        self.servers.append(s)
        return s

    def wait_learned(self, s, want, timeout=60):
        deadline = time.monotonic() + timeout
        metric = 'tlserve_online_samples_total{model="dnn"}'
        while time.monotonic() < deadline:
            if s.metric(metric) >= want:
                return s.metric(metric)
            time.sleep(0.05)
        self.fail("learned %s of %s samples: %s" % (s.metric(metric), want, s.output()[-1500:]))

    def test_partitioned_replicas_learn_one_mlp(self):
        model = self.model("m")
        a, b = self.replica(model, "a"), self.replica(model, "b")
        start = harness.digest(a, "dnn")
        self.assertEqual(start["mlp_installs"], 0)
        stop, failures, served = threading.Event(), [], [0]

        def predicts(s):  # PREDICT all along: a request must never see a half-swapped MLP
            with s.client() as c:
                while not stop.is_set():
                    try:
                        scores = c.predict("dnn", shared_block(), PROBES).scores
                        if len(scores) != len(PROBES) or any(x != x for x in scores):
                            failures.append(scores)
                        served[0] += 1
                    except Exception as e:  # noqa: BLE001 - any failure is the finding
                        failures.append(repr(e))
                        return

        readers = [threading.Thread(target=predicts, args=(s,)) for s in (a, b)]
        for t in readers:
            t.start()
        try:
            # 2 frames each (6 local steps, under the warm-up of 10): exact messages
            self.send(a, range(0, 4, 2))
            self.send(b, range(1, 4, 2))
            self.wait_learned(a, 6)
            self.wait_learned(b, 6)
            harness.sync_settled(a, b, SYNC_MS, 30)
            for s in (a, b):
                self.assertEqual(s.metric("tlserve_sync_dnn_warmup_over"), 0)
                self.assertGreater(s.metric("tlserve_sync_dnn_applied_total"), 0)
            warm_bytes = a.metric("tlserve_sync_dnn_bytes_total")
            self.send(a, range(4, FRAMES, 2))  # the rest: 1 bit a value
            self.send(b, range(5, FRAMES, 2))
            half = 3 * FRAMES // 2
            self.assertEqual(self.wait_learned(a, half), half)
            self.assertEqual(self.wait_learned(b, half), half)
            harness.sync_settled(a, b, SYNC_MS, 30)
        finally:
            stop.set()
            for t in readers:
                t.join()
        self.assertEqual(failures, [], "PREDICT failed while the MLP learned")
        self.assertGreater(served[0], 10)
        da, db = harness.digest(a, "dnn"), harness.digest(b, "dnn")
        for d in (da, db):
            self.assertNotEqual(d["mlp"], start["mlp"], "the served MLP did not move: %s" % d)
            self.assertGreater(d["mlp_installs"], 0)
        with a.client() as ca, b.client() as cb:
            sa = ca.predict("dnn", shared_block(), PROBES).scores
            sb = cb.predict("dnn", shared_block(), PROBES).scores
        for j, (x, y) in enumerate(zip(sa, sb)):
            self.assertAlmostEqual(x, y, delta=1e-5, msg="probe %d" % j)
        for s in (a, b):
            self.assertEqual(s.metric("tlserve_sync_dnn_warmup_over"), 1)
            self.assertIn('tlserve_sync_dnn_warmup_over{model="dnn"} 1\n', s.metrics())
            self.assertGreater(s.metric("tlserve_sync_dnn_applied_total"), 0)
            self.assertGreater(s.metric("tlserve_sync_dnn_bytes_total"), 0)
            self.assertEqual(s.metric("tlserve_sync_dnn_refused_total"), 0)
            self.assertEqual(s.metric("tlserve_sync_gap_total"), 0)
            self.assertNotIn("runtime error", s.output())
        self.assertGreater(a.metric("tlserve_sync_dnn_bytes_total"), warm_bytes)
        print("\ndnn mlp: max |a - b| %.2g, dense bytes %d + %d (warm-up %d), installs %d + %d" % (
            max(abs(x - y) for x, y in zip(sa, sb)), a.metric("tlserve_sync_dnn_bytes_total"),
            b.metric("tlserve_sync_dnn_bytes_total"), warm_bytes, da["mlp_installs"],
            db["mlp_installs"]),
            file=sys.stderr)

    def send(self, s, frames):
        with s.client() as c:
            for k in frames:
                shared, samples = frame(k)
                self.assertEqual(c.train("dnn", shared, samples), len(samples))

    @staticmethod
    def probe_scores(s):
        with s.client() as c:
            return c.predict("dnn", shared_block(), PROBES).scores

    def test_a_replica_killed_catches_up(self):
        model = self.model("k")
        a, b = self.replica(model, "a"), self.replica(model, "b")
        self.send(a, range(0, 20, 2))
        self.send(b, range(1, 20, 2))
        self.wait_learned(a, 30)
        self.wait_learned(b, 30)
        harness.sync_settled(a, b, SYNC_MS, 30)
        self.send(b, range(20, 30))  # learned, maybe not yet published
        os.kill(b.proc.pid, signal.SIGKILL)
        b.proc.wait()
        self.send(a, range(30, 40))  # while b is down
        b2 = self.replica(model, "b")  # the same sample log and node name
        self.assertEqual(self.wait_learned(b2, 60), 60)  # its whole log again
        self.send(b2, range(40, 46))
        harness.sync_agree(a, b2, self.probe_scores, SYNC_MS)
        # its earlier run's MLP messages were subtracted, not sent twice
        self.assertGreater(b2.metric("tlserve_sync_own_subtracted_total"), 0)
        da, db = harness.digest(a, "dnn"), harness.digest(b2, "dnn")
        self.assertGreater(db["mlp_installs"], 0)
        for s in (a, b2):
            self.assertEqual(s.metric("tlserve_sync_dnn_refused_total"), 0)
            self.assertEqual(s.metric("tlserve_sync_gap_total"), 0)
            self.assertNotIn("runtime error", s.output())
        print("\ndnn restart: mlp %s / %s" % (da["mlp"], db["mlp"]), file=sys.stderr)

    def test_an_mlp_of_another_shape_is_refused(self):
        a = self.replica(self.model("m"), "a")
        other = self.replica(self.model("o", mlp="16,4,1", hidden="4"), "o")
        with other.client() as co:
            for k in range(4):
                shared, samples = frame(k)
                self.assertEqual(co.train("dnn", shared, samples), len(samples))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and a.metric("tlserve_sync_dnn_refused_total") == 0:
            time.sleep(0.05)
        self.assertGreater(a.metric("tlserve_sync_dnn_refused_total"), 0, a.metrics()[-2000:])
        self.assertIn("the MLP has", a.output())
        self.assertEqual(a.metric("tlserve_sync_dnn_applied_total"), 0)
        with a.client() as c:  # serving goes on
            self.assertEqual(len(c.predict("dnn", shared_block(), PROBES).scores), len(PROBES))

    def test_an_mlp_past_the_bus_limit_learns_in_parts(self):
        # 16 -> 512 -> 512 -> 1: 271,873 floats, an exact message of 1.09 MB, over the bus's
        # 1 MB: each warm-up turn goes out as parts (update_codec.h: UPDATE_F_PART)
        model = self.model("big", mlp="16,512,512,1", hidden="512,512")
        a, b = self.replica(model, "a"), self.replica(model, "b")
        start = harness.digest(a, "dnn")
        self.send(a, range(0, 8, 2))  # 12 local steps each: the warm-up of 10, then 1 bit
        self.send(b, range(1, 8, 2))
        self.wait_learned(a, 12)
        self.wait_learned(b, 12)
        harness.sync_settled(a, b, SYNC_MS, 30)
        harness.sync_agree(a, b, self.probe_scores, SYNC_MS)
        for s in (a, b):
            d = harness.digest(s, "dnn")
            self.assertNotEqual(d["mlp"], start["mlp"], "the served MLP did not move: %s" % d)
            self.assertGreater(d["mlp_installs"], 0)
            # a turn of parts counts each message: more messages than exact turns
            self.assertGreater(s.metric("tlserve_sync_dnn_sent_total"), 2)
            self.assertGreater(s.metric("tlserve_sync_dnn_bytes_total"), 1000 * 1000)
            self.assertEqual(s.metric("tlserve_sync_dnn_warmup_over"), 1)
            self.assertEqual(s.metric("tlserve_sync_dnn_refused_total"), 0)
            self.assertEqual(s.metric("tlserve_sync_gap_total"), 0)
            self.assertNotIn("stays frozen", s.output())
            self.assertNotIn("not stored", s.output())


if __name__ == "__main__":
    unittest.main()
