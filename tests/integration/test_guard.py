"""The post-swap guard (server/guard.c) end to end with the real tlserve.

Three LR versions of model "gd" are trained with tltrain on click files of different rates:
version 1 and the good version 3 on a 10% click rate (mean prediction about 0.1), the bad
version 2 on 80% (about 0.8: a shifted bias).  tlserve serves version 1 while a client scores
in a loop; version 2 is force-loaded (the gate bypassed, as ops would): the guard rolls back to
version 1 within its 2 s window, logs why with the numbers, counts it in /metrics and shows it
in /v1/models, and the client saw answers of versions 1 and 2 only, never a failed request.
Version 3 then passes the window and stays.  With --keep-versions 0 the bad version has nothing
to roll back to: the guard logs an ERROR, raises tlserve_guard_stuck_total, and the version keeps
serving; with --guard-window-ms 0 nothing watches at all."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import BUILD, TLSERVE, http, require  # noqa: E402

TOKEN = "guard-secret"
TLTRAIN = os.path.join(BUILD, "model", "tltrain")
NAME = "gd"
WINDOW_MS = 2000


def train(tmp, version, rate, seed):
    """An LR version of NAME trained on 5,000 samples with click rate `rate`."""
    svm = os.path.join(tmp, "train_%d.svm" % version)
    rng = random.Random(seed)
    with open(svm, "w") as f:
        for _ in range(5000):
            f.write("%d %d:1 %d:1\n" % (rng.random() < rate, rng.randrange(1, 50),
                                        rng.randrange(50, 100)))
    os.makedirs(os.path.join(tmp, NAME), exist_ok=True)
    out = os.path.join(tmp, NAME, str(version))
    r = subprocess.run([TLTRAIN, "--train", svm, "--format", "libsvm", "--model", "lr",
                        "--epochs", "2", "--export", out, "--name", NAME, "--version",
                        str(version)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError("tltrain exited with %d: %s" % (r.returncode, r.stderr))
    return out


def force_load(port, path):
    body = json.dumps({"path": path, "force": True}).encode()
    headers = {"Content-Type": "application/json", "Authorization": "Bearer " + TOKEN}
    return http(port, "/v1/models/%s:load?wait=1" % NAME, "POST", body, headers, timeout=60.0)


class Traffic(threading.Thread):
    """Scores requests in a loop until stopped; counts answers per version and failures."""

    def __init__(self, srv):
        super().__init__(daemon=True)
        self.srv = srv
        self.halt = threading.Event()
        self.ok = 0
        self.failed = []
        self.versions = {}
        self.rng = random.Random(3)

    def run(self):
        with self.srv.client() as c:
            while not self.halt.is_set():
                shared = [self.rng.randrange(50, 100)]
                items = [[self.rng.randrange(1, 50)] for _ in range(10)]
                try:
                    res = c.predict(NAME, shared, items)
                    self.ok += 1
                    self.versions[res.version] = self.versions.get(res.version, 0) + 1
                except Exception as e:  # noqa: BLE001 - every failure counts
                    self.failed.append(repr(e))
                time.sleep(0.001)

    def wait_ok(self, n, timeout=30.0):
        deadline = time.monotonic() + timeout
        want = self.ok + n
        while self.ok < want:
            if time.monotonic() > deadline:
                raise AssertionError("only %d answers" % self.ok)
            time.sleep(0.01)

    def stop(self):
        self.halt.set()
        self.join(timeout=30)


def models(srv):
    return json.loads(srv.get("/v1/models")[2])["models"]


def guard_of(srv):
    """The guard's state in GET /v1/models/NAME/versions (None: the guard is off)."""
    status, _, body = srv.get("/v1/models/%s/versions" % NAME)
    if status != 200:
        raise AssertionError("versions: %d %s" % (status, body))
    return json.loads(body).get("guard")


class Guard(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require(TLSERVE, TLTRAIN)
        cls.tmp = tempfile.TemporaryDirectory(prefix="tl_guard_")
        cls.v1 = train(cls.tmp.name, 1, 0.1, 1)
        cls.v2 = train(cls.tmp.name, 2, 0.8, 2)
        cls.v3 = train(cls.tmp.name, 3, 0.1, 3)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def serve(self, *flags):
        srv = harness.Server(self.v1, "--workers", "2", "--guard-window-ms", str(WINDOW_MS),
                             "--guard-min-requests", "50", *flags, token=TOKEN)
        self.addCleanup(srv.stop, timeout=60.0)
        traffic = Traffic(srv)
        traffic.start()
        self.addCleanup(traffic.stop)
        traffic.wait_ok(300)  # the baseline: version 1's last window
        return srv, traffic

    def wait_guard(self, srv, state, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            g = guard_of(srv) or {}
            if g.get("state") == state:
                return g
            time.sleep(0.02)
        self.fail("guard not %s after %g s: %s\n%s" % (state, timeout, guard_of(srv),
                                                        srv.output()[-3000:]))

    def test_rolls_back_a_far_off_version_and_keeps_a_good_one(self):
        srv, traffic = self.serve()
        self.assertEqual(guard_of(srv), {"state": "idle"})
        self.assertEqual(srv.metric("tlserve_guard_watching"), 0)

        status, _, body = force_load(srv.admin_port, self.v2)
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["version"], 2)
        t0 = time.monotonic()
        g = self.wait_guard(srv, "rolled_back", WINDOW_MS / 1000 + 1.0)
        elapsed = time.monotonic() - t0
        self.assertLess(elapsed, WINDOW_MS / 1000)  # within the window, not at its end
        self.assertEqual(models(srv)[0]["version"], 1)
        self.assertEqual((g["version"], g["rolled_back_to"]), (2, 1))
        self.assertGreater(g["mean_ratio"], 1.5)
        self.assertGreaterEqual(g["requests"], 50)
        self.assertIn("--guard-max-mean-ratio", g["reason"])
        log = srv.output()
        self.assertIn("guard: watching gd version 2 for 2000 ms (baseline: version 1", log)
        self.assertRegex(log, r"warn: guard: rolled gd back from version 2 to 1: mean prediction "
                              r"0\.[0-9]+ against the previous version's 0\.[0-9]+: ratio")
        self.assertEqual(srv.metric("tlserve_guard_rollbacks_total"), 1)
        self.assertGreater(srv.metric("tlserve_guard_last_mean_ratio"), 1.5)
        self.assertEqual(srv.metric("tlserve_guard_last_error_rate"), 0)
        self.assertEqual(srv.metric("tlserve_guard_watching"), 0)
        print("guard: rolled back %.0f ms after the load returned" % (elapsed * 1e3))

        # A good version: watched for the window, passes, stays.
        status, _, body = force_load(srv.admin_port, self.v3)
        self.assertEqual(status, 200, body)
        self.assertEqual(srv.metric("tlserve_guard_watching"), 1)
        g = self.wait_guard(srv, "passed", WINDOW_MS / 1000 + 2.0)
        self.assertEqual(g["version"], 3)
        self.assertLess(g["mean_ratio"], 1.5)
        traffic.wait_ok(50)
        self.assertEqual(models(srv)[0]["version"], 3)
        self.assertEqual(srv.metric("tlserve_guard_rollbacks_total"), 1)
        self.assertEqual(srv.metric("tlserve_guard_passed_total"), 1)
        self.assertIn("guard: gd version 3 passed its window", srv.output())

        traffic.stop()
        self.assertEqual(traffic.failed, [])
        self.assertEqual(set(traffic.versions), {1, 2, 3})
        self.assertEqual(srv.metric("tlserve_errors_total"), 0)

    def test_nothing_to_roll_back_to(self):
        srv, traffic = self.serve("--keep-versions", "0")
        status, _, body = force_load(srv.admin_port, self.v2)
        self.assertEqual(status, 200, body)
        g = self.wait_guard(srv, "stuck", WINDOW_MS / 1000 + 1.0)
        self.assertEqual(g["version"], 2)
        self.assertEqual(models(srv)[0]["version"], 2)  # it keeps serving
        self.assertEqual(srv.metric("tlserve_guard_stuck_total"), 1)
        self.assertEqual(srv.metric("tlserve_guard_rollbacks_total"), 0)
        self.assertRegex(srv.output(), r"error: guard: gd version 2 is out of bounds but there "
                                       r"is nothing to roll back to")
        traffic.stop()
        self.assertEqual(traffic.failed, [])

    def test_guard_off(self):
        srv, traffic = self.serve("--guard-window-ms", "0")
        self.assertIsNone(guard_of(srv))
        status, _, body = force_load(srv.admin_port, self.v2)
        self.assertEqual(status, 200, body)
        traffic.wait_ok(300)
        time.sleep(0.5)
        self.assertEqual(models(srv)[0]["version"], 2)
        self.assertEqual(srv.metric("tlserve_guard_rollbacks_total"), 0)
        traffic.stop()
        self.assertEqual(traffic.failed, [])

    def test_repository_does_not_pick_the_rolled_back_version_again(self):
        repo = tempfile.mkdtemp(prefix="tl_guard_repo_")
        self.addCleanup(shutil.rmtree, repo, True)
        os.makedirs(os.path.join(repo, NAME))
        shutil.copytree(self.v1, os.path.join(repo, NAME, "1"))
        # The gate's shadow scoring would refuse version 2 itself: off, so the guard is tested.
        srv = harness.Server(None, "--model-repo", repo, "--workers", "2", "--gate-sample", "0",
                             "--guard-window-ms", str(WINDOW_MS), "--guard-min-requests", "50",
                             token=TOKEN)
        self.addCleanup(srv.stop, timeout=60.0)
        traffic = Traffic(srv)
        traffic.start()
        self.addCleanup(traffic.stop)
        traffic.wait_ok(300)
        stage = os.path.join(repo, ".stage2")
        shutil.copytree(self.v2, stage)
        os.rename(stage, os.path.join(repo, NAME, "2"))  # appears whole; the watcher loads it
        g = self.wait_guard(srv, "rolled_back", 30.0)
        self.assertEqual((g["version"], g["rolled_back_to"]), (2, 1))
        time.sleep(1.5)  # a rescan or two: 2 stays refused
        self.assertEqual(models(srv)[0]["version"], 1)
        body = json.loads(srv.get("/v1/models/%s/versions" % NAME)[2])
        states = {v["version"]: v["state"] for v in body["versions"]}
        self.assertEqual(states[2], "rolled_back")
        self.assertEqual(states[1], "active")
        self.assertEqual(srv.metric("tlserve_guard_rollbacks_total"), 1)
        traffic.stop()
        self.assertEqual(traffic.failed, [])
        self.assertEqual(set(traffic.versions), {1, 2})

    def test_bad_settings(self):
        for flag, value in (("--guard-window-ms", "-5"), ("--guard-max-error-rate", "2"),
                            ("--guard-max-mean-ratio", "0.9"), ("--guard-min-requests", "x")):
            r = subprocess.run([TLSERVE, flag, value], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, timeout=30)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn(flag, r.stderr)
        r = subprocess.run([TLSERVE, "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=30)
        self.assertIn("guard-max-mean-ratio", r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
