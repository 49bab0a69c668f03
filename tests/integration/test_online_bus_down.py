"""Online learning over NATS JetStream when NATS is not there (--bus-servers, replay mode).

One tlserve and a real 3-node cluster (deploy/nats-cluster.sh) on ports chosen before either
starts, the cluster always stopped at the end (tearDown, at exit, on SIGTERM):

- NATS down at start: tlserve starts anyway, /readyz is ready, PREDICT answers, TRAIN is
  acknowledged into the outbox (tlserve_bus_outbox_lag counts it), the log says so at WARN.
  The cluster started: the outbox is forwarded and learned (the served score moves),
  tlserve_bus_connected goes to 1 and both lags to 0.
- The whole cluster stopped while a client sends PREDICT and TRAIN: no PREDICT fails, every
  TRAIN is acknowledged or OVERLOADED (never another error), the outbox lag grows. The
  cluster started again: the lag returns to 0 and every acknowledged sample is learned.
- Partitioned mode (--bus-mode partitioned) with NATS down at start: tlserve starts anyway,
  /readyz is ready, PREDICT answers, TRAIN is acknowledged and learned here (the score moves),
  nothing is published (tlserve_bus_ready 0), the log says so at WARN. The cluster started: the
  bus becomes ready, the accumulated updates are published (tlserve_sync_sent_total grows), and
  a second partitioned replica started afterwards applies them from the stream: it ends with the
  first one's score for the trained item. A bad --bus-servers is refused at start in both modes.

Run: TL_BUILD_DIR=build python3 -m unittest tests/integration/test_online_bus_down.py
"""

import atexit
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import natscluster  # noqa: E402
import harness  # noqa: E402
from harness import (TLSERVE, TLSYNTH, Server, gen_model, replica_frame,  # noqa: E402
                     replica_sample, require)
from tlserve.errors import ErrorCode, UnavailableError  # noqa: E402

SEED = 43


def setUpModule():
    require(TLSERVE, TLSYNTH)
    if not shutil.which("nats-server"):
        harness.missing("nats-server is not installed: run deploy/install-deps.sh")


class BusDown(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tl_busdown_")
        self.model = os.path.join(self.tmp, "m", "ctr", "1")
        gen_model(self.model, 2000, "ctr", seed=SEED)
        self.stream = "D%d" % random.randrange(1 << 30)
        self.cluster = natscluster.Cluster("tl_busdown_nats_")
        atexit.register(self.cluster.stop)
        signal.signal(signal.SIGTERM, lambda *_: (self.cluster.stop(), os._exit(143)))
        for _ in range(50):  # ports free now; nothing listens on them until start()
            self.cluster.base = random.randrange(21000, 32000)
            if natscluster._ports_free(self.cluster.base):
                break
        b = self.cluster.base
        self.urls = ",".join("nats://127.0.0.1:%d" % (b + i) for i in range(3))
        self.server = None
        self.others = []

    def tearDown(self):
        for s in [self.server] + self.others:
            if s:
                s.stop()
        self.cluster.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start_cluster(self):
        r = self.cluster.run("start", self.cluster.base, check=False)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def wait_metric(self, name, cond, what, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if cond(self.server.metric(name)):
                return self.server.metric(name)
            time.sleep(0.05)
        self.fail("%s never %s: %s\n%s" % (name, what, self.server.metrics()[-2500:],
                                          self.server.output()[-2000:]))

    def score(self, c):
        shared, item = replica_sample(0, SEED)
        return c.predict("ctr", shared, [item]).scores[0]

    def test_nats_down_at_start_then_restarting(self):
        s = self.server = Server(self.model, "--online", "--sample-log-dir",
                                 os.path.join(self.tmp, "log"), "--bus-servers", self.urls,
                                 "--bus-stream", self.stream, "--bus-node", "a",
                                 "--bus-subject-prefix", self.stream.lower(),
                                 "--gate-sample", "0", "--guard-window-ms", "0")
        # (a) NATS down at start: ready (Server waited for /readyz), PREDICT and TRAIN answered
        acked = 0
        with s.client() as c:
            before = self.score(c)
            for k in range(20):
                shared, samples = replica_frame(k, SEED)
                self.assertEqual(c.train("ctr", shared, samples), 2)
                acked += 2
            self.assertEqual(self.score(c), before)  # nothing learned yet: the bus is the way
        self.assertEqual(s.metric("tlserve_bus_connected"), 0)
        self.assertEqual(s.metric("tlserve_bus_ready"), 0)
        self.assertEqual(s.metric('tlserve_bus_outbox_lag{model="ctr"}'), 20)
        self.assertIn("the bus is not reachable yet", s.output())

        self.start_cluster()
        self.wait_metric('tlserve_online_samples_total{model="ctr"}', lambda v: v >= acked,
                         "reached %d" % acked)
        self.assertEqual(s.metric('tlserve_online_samples_total{model="ctr"}'), acked)
        self.assertEqual(s.metric("tlserve_bus_connected"), 1)
        self.assertEqual(s.metric("tlserve_bus_ready"), 1)
        self.assertEqual(s.metric('tlserve_bus_outbox_lag{model="ctr"}'), 0)
        self.wait_metric("tlserve_bus_consumer_lag", lambda v: v == 0, "fell to 0")
        with s.client() as c:
            self.assertNotEqual(self.score(c), before)
        self.assertIn("the bus is connected", s.output())

        # (b) the whole cluster stopped while a client sends PREDICT and TRAIN
        stop = threading.Event()
        tally = {"predict": 0, "predict_failed": [], "acked": 0, "overloaded": 0, "other": []}

        def client():
            k = 20
            with s.client() as c:
                while not stop.is_set():
                    try:
                        self.score(c)
                        tally["predict"] += 1
                    except Exception as e:  # noqa: BLE001 (any failure is the finding)
                        tally["predict_failed"].append(repr(e))
                    shared, samples = replica_frame(k, SEED)
                    k += 1
                    try:
                        self.assertEqual(c.train("ctr", shared, samples), 2)
                        tally["acked"] += 2
                    except UnavailableError as e:
                        if e.code == ErrorCode.OVERLOADED:
                            tally["overloaded"] += 1
                        else:
                            tally["other"].append(repr(e))
                    except Exception as e:  # noqa: BLE001
                        tally["other"].append(repr(e))
                    time.sleep(0.005)

        t = threading.Thread(target=client)
        t.start()
        try:
            time.sleep(0.2)
            kills = [subprocess.Popen(["bash", natscluster.SCRIPT, "kill", self.cluster.dir,
                                       str(n)]) for n in (1, 2, 3)]  # -9, all at once
            for k in kills:
                self.assertEqual(k.wait(timeout=60), 0)
            self.wait_metric("tlserve_bus_connected", lambda v: v == 0, "went to 0")
            self.wait_metric('tlserve_bus_outbox_lag{model="ctr"}', lambda v: v >= 20,
                             "grew to 20")
        finally:
            stop.set()
            t.join()
        self.assertEqual(tally["predict_failed"], [])
        self.assertEqual(tally["other"], [])
        self.assertGreater(tally["predict"], 20)
        self.assertGreaterEqual(tally["acked"], 40)
        acked += tally["acked"]

        self.start_cluster()  # the same directories: the stream is still there
        self.wait_metric('tlserve_bus_outbox_lag{model="ctr"}', lambda v: v == 0, "fell to 0")
        self.wait_metric('tlserve_online_samples_total{model="ctr"}', lambda v: v >= acked,
                         "reached %d" % acked)
        time.sleep(0.2)  # nothing more should come
        self.assertEqual(s.metric('tlserve_online_samples_total{model="ctr"}'), acked)
        self.assertEqual(s.metric("tlserve_bus_gap_total"), 0)
        self.wait_metric("tlserve_bus_consumer_lag", lambda v: v == 0, "fell to 0")
        self.assertEqual(s.metric("tlserve_bus_lag_refused_total"), 0)  # far below the bound
        out = s.output()
        self.assertIn("the bus lost its NATS connection", out)
        self.assertIn("the bus is connected again", out)

    def partitioned(self, node):
        return Server(self.model, "--online", "--sample-log-dir", os.path.join(self.tmp, node),
                      "--bus-servers", self.urls, "--bus-stream", self.stream, "--bus-node", node,
                      "--bus-subject-prefix", self.stream.lower(), "--bus-mode", "partitioned",
                      "--sync-interval-ms", "50", "--gate-sample", "0", "--guard-window-ms", "0")

    def test_partitioned_nats_down_at_start(self):
        a = self.server = self.partitioned("a")
        # NATS down at start: ready (Server waited for /readyz), PREDICT answered, TRAIN learned
        with a.client() as c:
            before = self.score(c)
            for k in range(20):
                shared, samples = replica_frame(k, SEED)
                self.assertEqual(c.train("ctr", shared, samples), 2)
        self.wait_metric('tlserve_online_samples_total{model="ctr"}', lambda v: v >= 40,
                         "reached 40")
        with a.client() as c:
            learned = self.score(c)
        self.assertNotEqual(learned, before)  # learned here: partitioned replicas train locally
        time.sleep(0.2)  # several intervals: still nothing published
        self.assertEqual(a.metric("tlserve_bus_connected"), 0)
        self.assertEqual(a.metric("tlserve_bus_ready"), 0)
        self.assertEqual(a.metric("tlserve_sync_sent_total"), 0)
        self.assertEqual(a.metric("tlserve_sync_publish_failed_total"), 0)
        self.assertIn("the bus is not reachable yet", a.output())

        self.start_cluster()
        self.wait_metric("tlserve_bus_ready", lambda v: v == 1, "went to 1")
        self.wait_metric("tlserve_sync_sent_total", lambda v: v >= 1, "grew")
        self.wait_metric("tlserve_sync_residual_keys", lambda v: v == 0, "fell to 0")
        self.assertEqual(a.metric("tlserve_bus_connected"), 1)
        self.assertIn("the bus is connected", a.output())

        b = self.partitioned("b")  # reads a's updates from the stream
        self.others.append(b)
        sent = a.metric("tlserve_sync_sent_total")
        deadline = time.monotonic() + 30
        while b.metric("tlserve_sync_applied_total") < sent and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(b.metric("tlserve_sync_applied_total"), sent, b.metrics()[-2500:])
        with b.client() as c:
            self.assertAlmostEqual(self.score(c), learned, delta=1e-5)
        self.assertEqual(b.metric("tlserve_sync_gap_total"), 0)
        self.assertEqual(b.metric("tlserve_sync_refused_bad_total"), 0)
        for s in (b, a):  # SIGTERM: the last exact turn, the bus closed, a clean exit
            s.proc.send_signal(signal.SIGTERM)
            rc = s.proc.wait(timeout=20)
            out = s.output()
            self.assertEqual(rc, 0, out[-3000:])
            self.assertNotIn("Sanitizer", out)
            self.assertNotIn("runtime error", out)

    def test_a_bad_server_list_is_refused_at_start(self):
        for bad, mode in [(b, m) for b in ("nats://127.0.0.1:99999", "nats://:4222",
                                            "nats://127.0.0.1:42x")
                          for m in ((), ("--bus-mode", "partitioned"))]:
            s = Server(self.model, "--online", "--sample-log-dir", os.path.join(self.tmp, "log"),
                       "--bus-servers", bad, *mode, wait=None)
            try:
                rc = s.proc.wait(timeout=20)
                out = s.output()
            finally:
                s.stop()
            self.assertNotEqual(rc, 0, out)
            self.assertIn("expected 1..16 NATS URLs", out)


if __name__ == "__main__":
    unittest.main()
