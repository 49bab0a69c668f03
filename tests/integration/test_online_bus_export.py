"""Online exports with the bus in replay mode (--bus-servers with --model-repo, --online-export-ms).

A real 3-node NATS JetStream cluster (natscluster.py). Replica "a" learns the stream and never
crashes; replica "b" learns the same stream and exports its updates into its own repository on
a short timer (the producer "tlserve-online stream=S id=X": every stream message up to S is in
the version). b is killed (-9) mid-stream and started again on the same repository and outbox:

- it restarts from its last export (optimizer state restored) and its consumer starts past
  sequence 1 (tlserve_bus_start_seq), and it learns fewer samples than the whole stream;
- once caught up, its weights equal a's, digest for digest (a start position ignored learns
  the export's messages twice: the digests then differ);
- killed after an export went live but before trainer.state moved past it, the restart reads
  the stream from trainer.state's sequence and skips the messages the export holds.

Run: TL_BUILD_DIR=build python3 -m unittest tests/integration/test_online_bus_export.py
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
import harness  # noqa: E402
import natscluster  # noqa: E402
from harness import (TLSERVE, TLSYNTH, Server, gen_model, replica_frame,  # noqa: E402
                     replica_sample, require)

SEED = 43
M = "ctr"
_cluster = None


def setUpModule():
    global _cluster
    require(TLSERVE, TLSYNTH)
    _cluster = natscluster.start("tl_obus_export_")


def tearDownModule():
    _cluster.stop()


class BusExports(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tl_obexp_")
        self.model = os.path.join(self.tmp, "m", M, "1")
        gen_model(self.model, 20000, M, seed=SEED)
        self.repo = os.path.join(self.tmp, "repo_b")
        shutil.copytree(self.model, os.path.join(self.repo, M, "1"))
        self.stream = "E%d" % random.randrange(1 << 30)
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            s.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def bus_args(self, name):
        return ("--online", "--sample-log-dir", os.path.join(self.tmp, "log_" + name),
                "--bus-servers", _cluster.urls, "--bus-stream", self.stream, "--bus-node", name,
                "--bus-subject-prefix", self.stream.lower(),
                "--gate-sample", "0", "--guard-window-ms", "0")

    def reference(self):
        s = Server(self.model, *self.bus_args("a"))
        self.servers.append(s)
        return s

    def exporter(self, name="b"):
        s = Server(None, "--model-repo", self.repo, "--load-sched-idle=false",
                   "--online-export-ms", "150", *self.bus_args(name))
        self.servers.append(s)
        return s

    def wait(self, what, cond, s, timeout=60):
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                self.fail("%s never happened: %s\n%s" % (what, s.metrics()[-2500:],
                                                         s.output()[-3000:]))
            time.sleep(0.05)

    def learned(self, s):
        return s.metric('tlserve_online_samples_total{model="%s"}' % M)

    def served_version(self, s):
        shared, item = replica_sample(0, SEED)
        with s.client() as c:
            return c.predict(M, shared, [item]).version

    def send(self, s, ks):
        with s.client() as c:
            for k in ks:
                shared, samples = replica_frame(k, SEED)
                self.assertEqual(c.train(M, shared, samples), len(samples))

    def assert_same_digest(self, a, b, timeout=30):
        deadline = time.monotonic() + timeout
        while True:  # the last messages may still be on their way to b's trainer
            da, db = harness.digest(a, M), harness.digest(b, M)
            if (da["keys"], da["digest"]) == (db["keys"], db["digest"]):
                return
            self.assertLess(time.monotonic(), deadline,
                            "the exporting replica differs from the other: %s vs %s\n%s"
                            % (da, db, b.output()[-3000:]))
            time.sleep(0.2)

    def test_exports_change_no_weight(self):
        a, b = self.reference(), self.exporter()
        self.send(a, range(0, 80))
        self.wait("an export of everything", lambda: b.metric(
            'tlserve_online_export_position{model="%s"}' % M) >= 81, b)
        self.send(b, range(80, 120))
        self.wait("an export of everything", lambda: b.metric(
            'tlserve_online_export_position{model="%s"}' % M) >= 121, b)
        self.wait("a learning everything", lambda: self.learned(a) >= 240, a)
        self.assert_same_digest(a, b)

    def test_two_replicas_on_one_repository_refused(self):
        b = self.exporter()
        self.send(b, range(0, 5))
        self.wait("b's export", lambda: b.metric(
            'tlserve_online_exports_total{model="%s"}' % M) >= 1, b)
        c = self.exporter("c")  # its own outbox, b's repository
        self.send(c, range(5, 10))
        self.wait("c learning", lambda: self.learned(c) >= 20, c)
        self.assertIn("another tlserve process exports into it", c.output())
        time.sleep(0.5)  # several of c's export ticks
        self.assertEqual(c.metric('tlserve_online_exports_total{model="%s"}' % M), 0)

    def test_killed_before_trainer_state_moved(self):
        """The export went live, no message learned since: trainer.state still names version 1
        from sequence 1; the restart reads from 1 and skips what the export holds."""
        a, b = self.reference(), self.exporter()
        self.send(a, range(0, 80))
        self.wait("an export of everything", lambda: b.metric(
            'tlserve_online_export_position{model="%s"}' % M) >= 81, b)
        self.wait("the export live", lambda: self.served_version(b) >= 2, b)
        os.kill(b.proc.pid, signal.SIGKILL)
        b.proc.wait()
        self.send(a, range(80, 100))
        b2 = self.exporter()
        self.wait("a learning everything", lambda: self.learned(a) >= 200, a)
        self.wait("b2 learning the rest", lambda: self.learned(b2) >= 40, b2)
        self.assert_same_digest(a, b2)
        self.assertEqual(b2.metric("tlserve_bus_start_seq"), 1)
        self.assertEqual(b2.metric('tlserve_online_bus_export_skipped_total{model="%s"}' % M), 80)
        self.assertEqual(self.learned(b2), 40)

    def test_a_killed_replica_restarts_from_its_export(self):
        a, b = self.reference(), self.exporter()
        self.send(a, range(0, 80))
        self.wait("b learning 160 samples", lambda: self.learned(b) >= 160, b)
        self.wait("an export of everything", lambda: b.metric(
            'tlserve_online_export_position{model="%s"}' % M) >= 81, b)
        self.wait("the export live", lambda: self.served_version(b) >= 2, b)
        self.send(a, range(80, 120))  # learned into the export: trainer.state moves past it
        self.wait("b learning 240 samples", lambda: self.learned(b) >= 240, b)
        exports = b.metric('tlserve_online_exports_total{model="%s"}' % M)
        self.assertGreaterEqual(exports, 1)
        # mid-stream: frames flow to a while b is killed
        sender = threading.Thread(target=self.send, args=(a, range(120, 220)))
        sender.start()
        time.sleep(0.05)
        os.kill(b.proc.pid, signal.SIGKILL)
        b.proc.wait()
        sender.join()
        b2 = self.exporter()  # the same repository, outbox and trainer.state
        self.send(b2, range(220, 240))  # through b2's outbox
        total = 2 * 240
        self.wait("a learning everything", lambda: self.learned(a) >= total, a)
        self.wait("b2 caught up", lambda: b2.metric("tlserve_bus_consumer_lag") == 0 and
                  b2.metric("tlserve_bus_consumed_total") > 0 and
                  b2.metric('tlserve_online_queue_bytes{model="%s"}' % M) == 0, b2, timeout=90)
        start = b2.metric("tlserve_bus_start_seq")
        self.assertGreaterEqual(start, 81, "the restarted consumer did not start at an export")
        self.assertLessEqual(self.learned(b2), total - 160, "b2 learned the stream from the start")
        self.assert_same_digest(a, b2)
        self.assertEqual(self.learned(a), total)
        self.assertIn("restored", b2.output())  # the export's optimizer state
        self.assertEqual(b2.metric("tlserve_bus_gap_total"), 0)


if __name__ == "__main__":
    unittest.main()
