"""Online learning in a real tlserve (--online): TRAIN frames learned into the served model.

tlserve serves an LR model (tlsynth) with --online.  TRAIN frames of one positive sample are
acknowledged with the samples they carry, and the PREDICT of that sample rises until it is
above where it started (the weights are written into the served store: no reload); the
progressive figures in /metrics count what was learned; a client scoring throughout never
fails.  What a client can get wrong or overdo is refused with a sentence: a TRAIN for a model
that is not served (UNKNOWN_MODEL), a label that is not 0 or 1 (BAD_VALUE), a model whose kind
does not learn online (UNKNOWN_TYPE naming the kind), more samples/s than
--online-max-samples-per-s and a queue that is full (OVERLOADED); without --online a TRAIN is
UNKNOWN_TYPE.  A new version loaded through the admin API makes the trainer start over from
its weights.

Run: TL_BUILD_DIR=build python3 -m unittest tests/integration/test_online.py
"""

import os
import shutil
import subprocess
import tempfile
import threading
import time
import unittest

import harness
import tlserve
from harness import TLSERVE, TLSYNTH, Server, gen_model, model_key, require
from tlserve.errors import ServerError
from tlserve.wire import MsgType, encode_train

TOKEN = "online-test-token"
SEED = 31


def sample(j):
    """A shared block and one item block of the model's keys."""
    shared = sorted(model_key(i, SEED) for i in range(30))
    item = sorted(model_key(1000 + 10 * j + i, SEED) for i in range(10))
    return shared, item


class Scorer(threading.Thread):
    """Scores a request in a loop; records failures."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port, self.stopping, self.answers, self.failures = port, False, 0, []

    def run(self):
        shared, item = sample(7)
        try:
            with tlserve.Client("127.0.0.1", self.port, timeout=10) as c:
                while not self.stopping:
                    c.predict("ctr", shared, [item])
                    self.answers += 1
        except Exception as e:  # noqa: BLE001 - any failure is the finding
            self.failures.append(repr(e))


class Online(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require(TLSERVE, TLSYNTH)

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tl_online_")
        self.model = os.path.join(self.tmp, "ctr", "1")
        gen_model(self.model, 20000, "ctr", seed=SEED)
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            s.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def serve(self, model, *args, **kw):
        s = Server(model, "--gate-sample", "0", "--guard-window-ms", "0", *args, **kw)
        self.servers.append(s)
        return s

    def wait_metric(self, s, name, want, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = s.metric(name)
            if got >= want:
                return got
            time.sleep(0.05)
        self.fail("%s stayed at %s, wanted %s" % (name, s.metric(name), want))

    def test_train_moves_the_served_prediction(self):
        s = self.serve(self.model, "--online")
        scorer = Scorer(s.port)
        scorer.start()
        shared, item = sample(1)
        with s.client() as c:
            p0 = c.predict("ctr", shared, [item]).scores[0]
            frames = 40
            for _ in range(frames):
                self.assertEqual(c.train("ctr", shared, [(1.0, item), (1.0, item)]), 2)
            self.wait_metric(s, 'tlserve_online_samples_total{model="ctr"}', 2 * frames)
            p1 = c.predict("ctr", shared, [item]).scores[0]
            self.assertGreater(p1, p0, "80 positive steps did not raise the served score")
            # negatives bring it down again
            for _ in range(frames):
                c.train("ctr", shared, [(0.0, item)] * 4)
            self.wait_metric(s, 'tlserve_online_samples_total{model="ctr"}', 6 * frames)
            p2 = c.predict("ctr", shared, [item]).scores[0]
            self.assertLess(p2, p1)
        scorer.stopping = True
        scorer.join(10)
        self.assertEqual(scorer.failures, [])
        self.assertGreater(scorer.answers, 0)
        m = s.metrics()
        self.assertIn('tlserve_online_frames_total{model="ctr"} %d' % (2 * frames), m)
        self.assertIn('tlserve_online_positives_total{model="ctr"} %d' % (2 * frames), m)
        ll = s.metric('tlserve_online_logloss{model="ctr"}')
        self.assertTrue(0 < ll < 10, ll)
        self.assertEqual(s.metric('tlserve_online_resets_total{model="ctr"}'), 1)
        self.assertEqual(s.metric('tlserve_online_version{model="ctr"}'), 1)

    def test_refusals(self):
        s = self.serve(self.model, "--online", "--online-max-samples-per-s", "50")
        shared, item = sample(2)
        with s.client() as c:
            with self.assertRaises(ServerError) as e:
                c.train("nope", shared, [(1.0, item)])
            self.assertEqual(e.exception.name, "UNKNOWN_MODEL")
            # a label of 0.5 (the client refuses to encode one: check=False)
            rid = c.send_frame(MsgType.TRAIN, encode_train("ctr", shared, [(0.5, item)],
                                                           check=False))
            with self.assertRaises(ServerError) as e:
                c._raise_if_error(c.wait_for(rid))
            self.assertEqual(e.exception.name, "BAD_VALUE")
            self.assertIn("label", e.exception.message)
            overloaded = None
            for _ in range(20):  # 20 x 10 samples: past a second's 50
                try:
                    c.train("ctr", shared, [(1.0, item)] * 10)
                except ServerError as ex:
                    overloaded = ex
                    break
            self.assertIsNotNone(overloaded)
            self.assertEqual(overloaded.name, "OVERLOADED")
            self.assertIn("50 samples/s", overloaded.message)
            c.predict("ctr", shared, [item])  # the connection and PREDICT still work
        self.assertGreaterEqual(
            s.metric('tlserve_online_refused_total{model="ctr",reason="rate"}'), 1)

    def test_a_frame_larger_than_the_queue(self):
        s = self.serve(self.model, "--online", "--online-queue-bytes", "65536")
        shared, _ = sample(3)
        big = [(1.0, sorted(model_key(5000 + 100 * j + i, SEED) for i in range(100)))
               for j in range(60)]  # about 60 x 800 bytes
        with s.client() as c:
            with self.assertRaises(ServerError) as e:
                c.train("ctr", shared, big)
            self.assertEqual(e.exception.name, "OVERLOADED")
            self.assertIn("--online-queue-bytes", e.exception.message)

    def test_kind_and_off(self):
        fm = os.path.join(self.tmp, "fm", "1")
        subprocess.run([TLSYNTH, "model", "--keys", "2000", "--kind", "fm", "--value-floats", "5",
                        "--name", "fm", "--out", fm], check=True, stdout=subprocess.DEVNULL)
        s = self.serve(fm, "--online")
        shared, item = sample(4)
        with s.client() as c:
            with self.assertRaises(ServerError) as e:
                c.train("fm", shared, [(1.0, item)])
            self.assertEqual(e.exception.name, "UNKNOWN_TYPE")
            self.assertIn("fm", e.exception.message)
            self.assertIn("LR", e.exception.message)
        off = self.serve(self.model)
        with off.client() as c:
            with self.assertRaises(ServerError) as e:
                c.train("ctr", shared, [(1.0, item)])
            self.assertEqual(e.exception.name, "UNKNOWN_TYPE")
            self.assertIn("--online", e.exception.message)

    def test_new_version_restarts_the_trainer(self):
        s = self.serve(self.model, "--online", "--model-root", self.tmp, token=TOKEN)
        v2 = os.path.join(self.tmp, "ctr", "2")
        gen_model(v2, 20000, "ctr", version=2, seed=SEED + 1)
        shared, item = sample(5)
        with s.client() as c:
            c.train("ctr", shared, [(1.0, item)])
            self.wait_metric(s, 'tlserve_online_samples_total{model="ctr"}', 1)
            st, _, body = harness.http(s.admin_port, "/v1/models/ctr:load?wait=1", "POST",
                                       ('{"path": "%s"}' % v2).encode(),
                                       {"Authorization": "Bearer " + TOKEN}, timeout=60)
            self.assertEqual(st, 200, body)
            deadline = time.monotonic() + 20
            while c.predict("ctr", shared, [item]).version != 2:
                self.assertLess(time.monotonic(), deadline, "version 2 never went live")
                time.sleep(0.05)
            c.train("ctr", shared, [(1.0, item)])
            self.wait_metric(s, 'tlserve_online_samples_total{model="ctr"}', 2)
        self.assertEqual(s.metric('tlserve_online_resets_total{model="ctr"}'), 2)
        self.assertEqual(s.metric('tlserve_online_version{model="ctr"}'), 2)


if __name__ == "__main__":
    unittest.main()
