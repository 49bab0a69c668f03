"""tlserve serves every model kind: FM, FFM and a Wide & Deep DNN, each a `tlsynth model` model
with its params (and, for the DNN, dense layers) in the snapshot.  For each kind the real
tlserve starts on loopback with the model, the Python wire client gets probabilities for a
request, and score_check compares tlserve's scores over the wire with the in-process
model_load + model_score of the same snapshot, bit for bit.  A snapshot whose params do not
fit its rows is refused at start with a message naming the problem.

Run: TL_BUILD_DIR=build python3 -m unittest tests/integration/test_model_kinds.py
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import BUILD, TLSERVE, TLSYNTH, SEED, model_key, require  # noqa: E402

SCORE_CHECK = os.path.join(BUILD, "tests", "score_check")
KEYS = 5000
KINDS = {
    "fm": ["--kind", "fm", "--value-floats", "9"],
    "ffm": ["--kind", "ffm", "--value-floats", "33", "--param", "fields=8", "--param", "k=4",
            "--param", "norm=1"],
    "dnn": ["--kind", "dnn", "--value-floats", "5", "--param", "fields=6", "--param", "dim=4",
            "--param", "hidden=16,8", "--param", "wide=1", "--mlp", "24,16,8,1"],
}


def gen(out, name, args):
    r = subprocess.run([TLSYNTH, "model", "--keys", str(KEYS), "--out", out, "--name", name,
                        "--seed", str(SEED), "--shards", "4", *args],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError("tlsynth model exited with %d: %s" % (r.returncode, r.stderr))


def setUpModule():
    global TMP
    require(TLSERVE, TLSYNTH)
    TMP = tempfile.mkdtemp(prefix="tlserve-kinds-")


def tearDownModule():
    shutil.rmtree(TMP, ignore_errors=True)


class Kinds(unittest.TestCase):
    def serve_and_check(self, kind):
        name = "ctr_" + kind
        model_dir = os.path.join(TMP, name, "1")
        gen(model_dir, name, KINDS[kind])
        srv = harness.Server(model_dir, "--workers", "2", token="t")
        try:
            shared = sorted({model_key(j) for j in range(40)})
            items = [sorted({model_key(100 + 10 * i + j) for j in range(10)}) for i in range(30)]
            with srv.client() as c:
                res = c.predict(name, shared, items)
            self.assertEqual(len(res.scores), 30)
            for s in res.scores:
                self.assertTrue(0.0 < s < 1.0, (kind, s))
            self.assertGreater(len(set(res.scores)), 1, kind)  # a model, not a constant
            if os.path.exists(SCORE_CHECK):
                r = subprocess.run([SCORE_CHECK, "--port", str(srv.port), "--model-dir",
                                    model_dir, "--requests", "10"],
                                   capture_output=True, text=True, timeout=120)
                self.assertEqual(r.returncode, 0, kind + ": " + r.stdout + r.stderr)
        finally:
            rc = srv.stop()
        self.assertEqual(rc, 0, "tlserve exited with %r on SIGTERM" % rc)

    def test_fm(self):
        self.serve_and_check("fm")

    def test_ffm(self):
        self.serve_and_check("ffm")

    def test_dnn(self):
        self.serve_and_check("dnn")

    def test_params_that_do_not_fit_are_refused(self):
        name = "ctr_badffm"
        model_dir = os.path.join(TMP, name, "1")
        # 8 fields x k 4 needs 1 + 32 floats per key; this snapshot has 9
        gen(model_dir, name, ["--kind", "ffm", "--value-floats", "9", "--param", "fields=8",
                              "--param", "k=4"])
        port, admin = harness.free_port(), harness.free_port()
        r = subprocess.run([TLSERVE, "--model", model_dir, "--port", str(port),
                            "--admin-port", str(admin)],
                           capture_output=True, text=True, timeout=120)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("1 + 32 floats per key, this one 9", r.stderr + r.stdout)
        self.assertIn("FFM", r.stderr + r.stdout)


if __name__ == "__main__":
    unittest.main()
