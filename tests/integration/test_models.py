"""Several models served at once by one tlserve, through admin loads.

tlserve starts with model "a" (LR, tlsynth); an admin load of model "b" (another seed) adds it
beside "a" instead of replacing it: requests naming each are scored by that model (scores equal
to a second tlserve serving it alone), /v1/models and tlserve_model_info list both, and a
request for a third name gets UNKNOWN_MODEL naming the two served. A new version of "b" swaps
in while "a" keeps its version and keeps answering (a client scoring "a" throughout sees no
failure), and a rollback of "b" returns to its first version and leaves "a" alone; pinning a
kept version of "b" works while "a" is untouched.

Run: TL_BUILD_DIR=build python3 -m unittest tests/integration/test_models.py
"""

import json
import os
import threading
import time
import unittest

import harness
import tlserve
from harness import TLSERVE, TLSYNTH, ServerCase, gen_model, model_key, require

TOKEN = "models-test-token"


SEEDS = (11, 21, 22)


def request():
    """Keys of every model's seed, so that each model scores it differently."""
    shared = sorted(model_key(i, seed) for i in range(20) for seed in SEEDS)
    items = [sorted(model_key(100 * j + i, seed) for i in range(10) for seed in SEEDS)
             for j in range(8)]
    return shared, items


class ScoreA(threading.Thread):
    """Scores model "a" in a loop; records answers and failures."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port, self.stopping, self.answers, self.failures = port, False, [], []

    def run(self):
        shared, items = request()
        try:
            with tlserve.Client("127.0.0.1", self.port, timeout=10) as c:
                while not self.stopping:
                    r = c.predict("a", shared, items)
                    self.answers.append((r.version, list(r.scores)))
        except Exception as e:  # noqa: BLE001 - any failure is the finding
            self.failures.append(repr(e))


class SeveralModels(ServerCase):
    TMP_PREFIX = "tl_models_"

    @classmethod
    def setUpClass(cls):
        require(TLSERVE, TLSYNTH)

    def setUp(self):
        super().setUp()
        self.dirs = {}
        for name, version, seed in (("a", 1, 11), ("b", 1, 21), ("b", 2, 22)):
            d = os.path.join(self.tmp, name, str(version))
            gen_model(d, 5000, name, version=version, seed=seed)
            self.dirs[(name, version)] = d

    def alone(self, name, version):
        s = self.serve(self.dirs[(name, version)])
        shared, items = request()
        with s.client() as c:
            r = c.predict(name, shared, items)
        s.stop()
        return list(r.scores)

    def load(self, srv, name, version):
        body = json.dumps({"path": self.dirs[(name, version)]}).encode()
        st, _, out = harness.http(srv.admin_port, "/v1/models/%s:load?wait=1" % name, "POST",
                                  body, {"Authorization": "Bearer " + TOKEN}, timeout=60)
        self.assertEqual(st, 200, out)

    def test_two_models_side_by_side(self):
        want = {(n, v): self.alone(n, v) for (n, v) in self.dirs}
        self.assertNotEqual(want[("a", 1)], want[("b", 1)])
        srv = self.serve(self.dirs[("a", 1)], "--keep-versions", "1", token=TOKEN)
        scorer = ScoreA(srv.port)
        scorer.start()
        shared, items = request()

        self.load(srv, "b", 1)
        with srv.client() as c:
            for name in ("a", "b"):
                r = c.predict(name, shared, items)
                self.assertEqual((r.version, list(r.scores)), (1, want[(name, 1)]))
            with self.assertRaises(tlserve.ModelNotFoundError) as e:
                c.predict("c", shared, items)
            self.assertIn("'a'", str(e.exception))
            self.assertIn("'b'", str(e.exception))
        listed = json.loads(srv.get("/v1/models")[2])["models"]
        self.assertEqual(sorted((m["name"], m["version"]) for m in listed), [("a", 1), ("b", 1)])
        metrics = srv.metrics()
        self.assertIn('tlserve_model_info{name="a",version="1"', metrics)
        self.assertIn('tlserve_model_info{name="b",version="1"', metrics)

        # A new version of b: a keeps its version; b's first version is kept and pinnable.
        self.load(srv, "b", 2)
        with srv.client() as c:
            r = c.predict("b", shared, items)
            self.assertEqual((r.version, list(r.scores)), (2, want[("b", 2)]))
            r = c.predict("b", shared, items, version=1)
            self.assertEqual((r.version, list(r.scores)), (1, want[("b", 1)]))
            r = c.predict("a", shared, items)
            self.assertEqual((r.version, list(r.scores)), (1, want[("a", 1)]))

        # Rollback of b: back to 1; a untouched.
        st, _, out = harness.http(srv.admin_port, "/v1/models/b:rollback", "POST", b"",
                                  {"Authorization": "Bearer " + TOKEN})
        self.assertEqual(st, 200, out)
        self.assertEqual(json.loads(out)["version"], 1)
        st, _, out = harness.http(srv.admin_port, "/v1/models/a:rollback", "POST", b"",
                                  {"Authorization": "Bearer " + TOKEN})
        self.assertEqual(st, 409, out)  # a has nothing kept: b's versions are not a's
        with srv.client() as c:
            self.assertEqual(c.predict("b", shared, items).version, 1)
            self.assertEqual(c.predict("a", shared, items).version, 1)

        time.sleep(0.2)
        scorer.stopping = True
        scorer.join(timeout=10)
        self.assertEqual(scorer.failures, [])
        self.assertGreater(len(scorer.answers), 5)
        for version, scores in scorer.answers:
            self.assertEqual((version, scores), (1, want[("a", 1)]))


if __name__ == "__main__":
    unittest.main()
