"""FM and FFM models with replicas over a real 3-node NATS JetStream cluster (natscluster.py).

- Replay mode (the default --bus-mode): two replicas serve the same FM (then FFM) model; TRAIN
  frames sent to either are learned by both in the stream's order, and since the trainer is
  deterministic (it starts from the served rows, a new id from a hash of the seed) they then
  score float for float the same, and other than the model's original scores.
- Partitioned mode exchanges LR-FTRL's z and n only: a TRAIN for an FM model is UNKNOWN_TYPE
  naming the kind and the mode, counted in tlserve_sync_refused_kind_total, and PREDICT keeps
  working.

Run: TL_BUILD_DIR=build python3 -m unittest tests/integration/test_online_fm_bus.py
"""

import os
import random
import shutil
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import natscluster  # noqa: E402
from harness import BUILD, TLSERVE, TLSYNTH, Server, require  # noqa: E402
from tlserve.errors import ServerError  # noqa: E402
from test_online_fm import KINDS, PROBES, frame, gen, shared_block  # noqa: E402

PROBE = os.path.join(BUILD, "tests", "bus_probe")
FRAMES = 20
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
                self.assertNotEqual(sa, before)
                self.assertGreater(sa[1], before[1], "the clicked item's score did not rise")

    def test_partitioned_refuses_fm(self):
        model = os.path.join(self.tmp, "fm", "1")
        gen(model, "fm", KINDS["fm"])
        stream = "P%d" % random.randrange(1 << 30)
        s = self.replica(model, stream, "p", "--bus-mode", "partitioned")
        shared, samples = frame(0)
        with s.client() as c:
            with self.assertRaises(ServerError) as e:
                c.train("fm", shared, samples)
            self.assertEqual(e.exception.name, "UNKNOWN_TYPE")
            self.assertIn("fm", e.exception.message)
            self.assertIn("partitioned", e.exception.message)
            c.predict("fm", shared_block(), PROBES)  # serving goes on
        self.assertEqual(s.metric("tlserve_sync_refused_kind_total"), 1)
        self.assertIn("partitioned replicas", s.output())


if __name__ == "__main__":
    unittest.main()
