"""The validation gate (server/gate.c) end to end: tlserve serves version 1 of an LR model while
a client sends requests; a version 2 whose weights are all scaled x10 is refused by the shadow
scoring (409 with the gate's numbers, the log says so, version 1 keeps serving, no request
fails); a version with a value over --gate-max-abs is refused by sanity; a close version (x1.02)
passes; the x10 version loaded with "force": true is served.  Versions are written by
tests/gate_snap from tlsynth's version 1."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import BUILD, TLSERVE, TLSYNTH, http  # noqa: E402

TOKEN = "secret"
GATE_SNAP = os.path.join(BUILD, "tests", "gate_snap")
KEYS = 20000


def post_load(port, name, path, force=None):
    body = {"path": path}
    if force is not None:
        body["force"] = force
    headers = {"Content-Type": "application/json", "Authorization": "Bearer " + TOKEN}
    return http(port, f"/v1/models/{name}:load?wait=1", "POST", json.dumps(body).encode(), headers,
                timeout=60.0)


def gate_snap(src, out, version, scale, set_value=None):
    argv = [GATE_SNAP, src, out, str(version), str(scale)]
    if set_value is not None:
        argv.append(str(set_value))
    r = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       timeout=120)
    if r.returncode != 0:
        raise RuntimeError("gate_snap exited with %d: %s" % (r.returncode, r.stderr))


class Traffic(threading.Thread):
    """Sends PREDICT requests for model keys until stopped; counts answers and failures and
    remembers which versions answered."""

    def __init__(self, srv):
        super().__init__(daemon=True)
        self.srv = srv
        self.halt = threading.Event()
        self.ok = 0
        self.failed = []
        self.versions = set()
        self.rng = random.Random(7)

    def request(self):
        keys = [harness.model_key(self.rng.randrange(KEYS)) for _ in range(60)]
        shared = sorted(set(keys[:20]))
        items = [sorted(set(keys[20 + 5 * i:25 + 5 * i])) for i in range(8)]
        return shared, items

    def run(self):
        with self.srv.client() as c:
            while not self.halt.is_set():
                shared, items = self.request()
                try:
                    res = c.predict("gm", shared, items)
                    self.ok += 1
                    self.versions.add(res.version)
                except Exception as e:  # noqa: BLE001 - every failure counts
                    self.failed.append(repr(e))

    def stop(self):
        self.halt.set()
        self.join(timeout=30)

    def wait_version(self, version, timeout=30):
        """Until an answer carried version (the thread may be slow to run on a busy host)."""
        deadline = time.monotonic() + timeout
        while version not in self.versions and time.monotonic() < deadline:
            threading.Event().wait(0.01)
        return version in self.versions


@harness.needs(all(os.access(p, os.X_OK) for p in (TLSERVE, TLSYNTH, GATE_SNAP)),
               f"needs {TLSERVE}, {TLSYNTH} and {GATE_SNAP} (set TL_BUILD_DIR)")
class Gate(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="tl_gate_")
        d = cls.tmp.name
        cls.v1 = os.path.join(d, "gm", "1")
        harness.gen_model(cls.v1, KEYS, "gm", 1, shards=4)
        cls.x10 = os.path.join(d, "gm", "2")
        gate_snap(cls.v1, cls.x10, 2, 10)
        cls.big = os.path.join(d, "gm", "3")
        gate_snap(cls.v1, cls.big, 3, 1, 1e5)
        cls.close = os.path.join(d, "gm", "4")
        gate_snap(cls.v1, cls.close, 4, 1.02)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_refuse_pass_and_force(self):
        srv = harness.Server(self.v1, "--workers", "1", token=TOKEN)
        self.addCleanup(srv.stop, timeout=60.0)
        traffic = Traffic(srv)
        traffic.start()
        self.addCleanup(traffic.stop)
        while traffic.ok < 300:  # the sample fills (1,000 at most; every request until full)
            self.assertEqual(traffic.failed, [])
            threading.Event().wait(0.01)

        # x10: the shadow scoring refuses it, with its numbers; version 1 keeps serving.
        status, _, body = post_load(srv.admin_port, "gm", self.x10)
        self.assertEqual(status, 409, body)
        err = json.loads(body)["error"]
        self.assertIn("refused by the gate: shadow scoring", err)
        for word in ("mean_active", "mean_candidate", "psi", "n_sampled"):
            self.assertIn(word, err)
        self.assertEqual(srv.get("/v1/models")[0], 200)
        models = json.loads(srv.get("/v1/models")[2])["models"]
        self.assertEqual(models[0]["version"], 1)
        self.assertIn("gate: gm version 2 refused: shadow scoring", srv.output())
        self.assertEqual(srv.metric('tlserve_gate_verdicts_total{result="refuse"}'), 1)
        self.assertGreater(srv.metric("tlserve_gate_last_psi"), 0.25)
        self.assertGreater(srv.metric("tlserve_gate_seconds"), 0)

        # A value over --gate-max-abs (1e4 by default): refused by sanity.
        status, _, body = post_load(srv.admin_port, "gm", self.big)
        self.assertEqual(status, 409, body)
        self.assertIn("sanity: key", json.loads(body)["error"])
        self.assertIn("100000", json.loads(body)["error"])

        # A close version (x1.02): passes and is served.
        status, _, body = post_load(srv.admin_port, "gm", self.close)
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["version"], 4)
        self.assertEqual(srv.metric('tlserve_gate_verdicts_total{result="pass"}'), 1)
        self.assertTrue(traffic.wait_version(4), traffic.versions)  # served, before it is replaced

        # "force" must be a boolean; forced, the x10 version is served.
        headers = {"Content-Type": "application/json", "Authorization": "Bearer " + TOKEN}
        status, _, body = http(srv.admin_port, "/v1/models/gm:load", "POST",
                               json.dumps({"path": self.x10, "force": "yes"}).encode(), headers)
        self.assertEqual(status, 400, body)
        status, _, body = post_load(srv.admin_port, "gm", self.x10, force=True)
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["version"], 2)
        self.assertEqual(srv.metric('tlserve_gate_verdicts_total{result="refuse"}'), 2)
        self.assertEqual(srv.metric('tlserve_gate_verdicts_total{result="pass"}'), 1)

        ok = traffic.ok
        while traffic.ok < ok + 50:
            threading.Event().wait(0.01)
        traffic.stop()
        self.assertEqual(traffic.failed, [])
        self.assertEqual(srv.metric("tlserve_errors_total"), 0)
        self.assertEqual(traffic.versions, {1, 4, 2})

    def test_gate_off_and_sample_off(self):
        # --gate=false: the x10 version goes live unchecked.
        srv = harness.Server(self.v1, "--workers", "1", "--gate=false", token=TOKEN)
        self.addCleanup(srv.stop, timeout=60.0)
        status, _, body = post_load(srv.admin_port, "gm", self.big)
        self.assertEqual(status, 200, body)
        self.assertEqual(srv.metric("tlserve_gate_verdicts_total"), 0)
        # --gate-sample 0: sanity only, so x10 passes but a value over the bound does not.
        srv2 = harness.Server(self.v1, "--workers", "1", "--gate-sample", "0", token=TOKEN)
        self.addCleanup(srv2.stop, timeout=60.0)
        traffic = Traffic(srv2)
        traffic.start()
        self.addCleanup(traffic.stop)
        while traffic.ok < 100:
            threading.Event().wait(0.01)
        status, _, body = post_load(srv2.admin_port, "gm", self.big)
        self.assertEqual(status, 409, body)
        status, _, body = post_load(srv2.admin_port, "gm", self.x10)
        self.assertEqual(status, 200, body)
        traffic.stop()
        self.assertEqual(traffic.failed, [])


if __name__ == "__main__":
    unittest.main()
