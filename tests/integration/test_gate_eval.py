"""The gate's labeled evaluation file (server/gate_eval.c) end to end, with the real tlserve on a
model repository.

Version 1 of an LR model is trained by tltrain on ../shared/data/avazu_rx (one epoch), version 2
on the same data for three epochs (a better logloss on the test file), version 3 is version 1
with every weight negated (tests/gate_snap, scale -1).  tlserve --model-repo with
--gate-eval-file avazu_rx/test.svm serves 1 (its logloss reported alone: no active version),
takes 2, and refuses 3 with the sentence "logloss ... on <file> (99 rows) is worse than the active
version's ... by more than 0.01" in /v1/models and the versions listing, while 2 keeps serving.
The logloss figures in /metrics equal `tltrain predict --json`'s on the same file and snapshot
(the gate scores rows as tltrain predict does).  The shadow sample is off (--gate-sample 0), so
the evaluation file is the only check that can refuse 3.  A bad evaluation file (missing,
unparsable at a line, empty, an index the reader refuses, a directory) stops tlserve at start
with the file and the line named.
"""

import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest

import harness
from harness import BUILD, REPO, TLSERVE, Server, free_port, require

TLTRAIN = os.path.join(BUILD, "model", "tltrain")
GATE_SNAP = os.path.join(BUILD, "tests", "gate_snap")
DATA = os.environ.get("TL_SHARED_DATA") or os.path.join(REPO, "..", "shared", "data")
TRAIN = os.path.join(DATA, "avazu_rx", "train.svm")
TEST = os.path.join(DATA, "avazu_rx", "test.svm")
NAME = "em"


def run(*argv):
    r = subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=120)
    if r.returncode != 0:
        raise AssertionError("%s exited with %d: %s" % (argv[0], r.returncode, r.stderr))
    return r.stdout


def offline_logloss(model_dir):
    out = run(TLTRAIN, "predict", "--model-dir", model_dir, "--data", TEST, "--format", "libsvm",
              "--json", "--out", os.devnull)
    return json.loads(out.strip().splitlines()[-1])["logloss"]


def models(srv):
    status, _, body = srv.get("/v1/models")
    assert status == 200, body
    return json.loads(body)


def eval_metric(srv, role, version):
    return srv.metric('tlserve_gate_eval_logloss{role="%s",version="%d"}' % (role, version))


@harness.needs(os.path.exists(TRAIN), "needs %s" % TRAIN, data=True)
class GateEval(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require(TLSERVE, TLTRAIN, GATE_SNAP)
        cls.tmp = tempfile.mkdtemp(prefix="tl_gate_eval_")
        cls.full = {}
        os.makedirs(os.path.join(cls.tmp, "full"))
        for version, epochs in ((1, 1), (2, 3)):
            cls.full[version] = os.path.join(cls.tmp, "full", str(version))
            run(TLTRAIN, "--train", TRAIN, "--format", "libsvm", "--model", "lr", "--epochs",
                str(epochs), "--export", cls.full[version], "--name", NAME, "--version",
                str(version))
        cls.full[3] = os.path.join(cls.tmp, "full", "3")
        run(GATE_SNAP, cls.full[1], cls.full[3], "3", "-1")
        cls.ll = {v: offline_logloss(cls.full[v]) for v in (1, 2, 3)}
        with open(TEST) as f:
            cls.rows = sum(1 for line in f if line.strip())

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.repo = tempfile.mkdtemp(prefix="repo_", dir=self.tmp)
        self.mdir = os.path.join(self.repo, NAME)
        os.makedirs(self.mdir)
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            s.stop()

    def add(self, version):
        """Copies full version `version` in under a staging name, then renames it whole."""
        stage = os.path.join(self.repo, ".stage-%d" % version)
        shutil.copytree(self.full[version], stage)
        os.rename(stage, os.path.join(self.mdir, str(version)))

    def wait_for(self, srv, pred, what, timeout=60.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = models(srv)
            if pred(m):
                return m
            time.sleep(0.05)
        self.fail("timed out waiting for %s: %s\n%s" % (what, models(srv), srv.output()))

    def test_offline_figures_order(self):
        # The premise of the test below: 2 is better than 1, 3 far worse.
        self.assertLess(self.ll[2], self.ll[1] + 0.01)
        self.assertGreater(self.ll[3], self.ll[2] + 0.5)
        self.assertEqual(self.rows, 99)

    def test_good_version_passes_bad_version_refused(self):
        self.add(1)
        srv = Server(None, "--model-repo", self.repo, "--gate-sample", "0",
                     "--gate-eval-file", TEST)
        self.servers.append(srv)
        self.wait_for(srv, lambda m: m["models"] and m["models"][0]["version"] == 1, "version 1")
        self.assertIn("gate: evaluation file %s: %d libsvm rows" % (TEST, self.rows), srv.output())
        # First load: the candidate's logloss alone, equal to tltrain predict's.
        self.assertAlmostEqual(eval_metric(srv, "candidate", 1), self.ll[1], delta=2e-6)
        self.assertNotIn('tlserve_gate_eval_logloss{role="active"', srv.metrics())
        self.assertEqual(srv.metric("tlserve_gate_eval_rows"), self.rows)

        self.add(2)
        self.wait_for(srv, lambda m: m["models"][0]["version"] == 2, "version 2")
        self.assertAlmostEqual(eval_metric(srv, "candidate", 2), self.ll[2], delta=2e-6)
        self.assertAlmostEqual(eval_metric(srv, "active", 1), self.ll[1], delta=2e-6)
        self.assertEqual(srv.metric('tlserve_gate_verdicts_total{result="pass"}'), 2)

        self.add(3)
        m = self.wait_for(srv, lambda m: any(x["version"] == 3
                                             for x in m["repository"]["refused"]), "refusal of 3")
        err = [x["error"] for x in m["repository"]["refused"] if x["version"] == 3][0]
        want = ("logloss %.6f on %s (%d rows) is worse than the active version's %.6f by more "
                "than 0.01" % (self.ll[3], TEST, self.rows, self.ll[2]))
        self.assertIn(want, err)
        self.assertEqual(m["models"][0]["version"], 2)
        self.assertEqual(srv.metric('tlserve_gate_verdicts_total{result="refuse"}'), 1)
        self.assertAlmostEqual(eval_metric(srv, "candidate", 3), self.ll[3], delta=2e-6)
        self.assertAlmostEqual(eval_metric(srv, "active", 2), self.ll[2], delta=2e-6)
        self.assertIn("gate: %s version 3 refused: eval: logloss" % NAME, srv.output())
        status, _, body = srv.get("/v1/models/%s/versions" % NAME)
        self.assertEqual(status, 200, body)
        rows = {v["version"]: v for v in json.loads(body)["versions"]}
        self.assertEqual(rows[3]["state"], "refused")
        self.assertIn(want, rows[3]["reason"])
        self.assertEqual(rows[2]["state"], "active")
        with srv.client() as c:
            self.assertEqual(c.predict(NAME, [1, 2, 3], [[4], [5]]).version, 2)

    def test_bound_lets_a_worse_version_through(self):
        # With a bound over the gap, the same version 3 goes live: the bound is what refuses.
        self.add(1)
        srv = Server(None, "--model-repo", self.repo, "--gate-sample", "0",
                     "--gate-eval-file", TEST, "--gate-max-logloss-increase", "5",
                     "--gate-eval-max-rows", "50")
        self.servers.append(srv)
        self.wait_for(srv, lambda m: m["models"] and m["models"][0]["version"] == 1, "version 1")
        self.assertEqual(srv.metric("tlserve_gate_eval_rows"), 50)
        self.add(3)
        self.wait_for(srv, lambda m: m["models"][0]["version"] == 3, "version 3")
        self.assertGreater(eval_metric(srv, "candidate", 3), eval_metric(srv, "active", 1) + 0.5)

    def bad_start(self, path, *want):
        argv = [TLSERVE, "--model", self.full[1], "--port", str(free_port()), "--admin-port",
                str(free_port()), "--gate-eval-file", path]
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=60)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn(path, r.stdout)
        for w in want:
            self.assertIn(w, r.stdout)
        self.assertNotIn("serving on", r.stdout)

    def test_bad_file_stops_the_start(self):
        d = tempfile.mkdtemp(prefix="bad_", dir=self.tmp)

        def write(name, text):
            p = os.path.join(d, name)
            with open(p, "w") as f:
                f.write(text)
            return p

        self.bad_start(os.path.join(d, "missing.svm"), "--gate-eval-file")
        self.bad_start(d, "not a regular file")
        self.bad_start(write("empty.svm", ""), "no labeled row")
        self.bad_start(write("label.svm", "1 3:1\n0 4:1\n7 5:1\n"), "label.svm:3:")
        self.bad_start(write("words.svm", "\n1 abc def\n"), "words.svm:2:", "neither")
        self.bad_start(write("bigid.svm", "1 3:1\n1 72057594037927935:1\n"), "bigid.svm:2:")
        self.bad_start(write("mixed.svm", "1 3:1\n1 2:3:1\n"), "mixed.svm:2:")
        # The bounds of the options are named too.
        r = subprocess.run([TLSERVE, "--gate-eval-max-rows", "0"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=30)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("gate-eval-max-rows", r.stdout)
        r = subprocess.run([TLSERVE, "--gate-max-logloss-increase", "-1"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=30)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("gate-max-logloss-increase", r.stdout)


if __name__ == "__main__":
    unittest.main()
