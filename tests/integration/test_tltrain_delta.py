"""tltrain --export-delta OUT --parent DIR: what training changed since a parent version.

LR and FM trained on ../shared/data/criteo_tiny: a full v1, then a second training (other epochs,
other seed) written both as a full export and as a delta of v1; `tlsnap compact v1 delta` equals
that full export record for record (with and without --export beside the delta: the temporary
export is removed), also for a delta whose parent is itself a delta (a chain in the repository).
Refused, with a message naming what was wrong and nothing written: a parent of another model,
kind or layout (K), a --version not above the parent's, a DNN (its MLP cannot be in a delta),
--export-delta without --parent.

Run: TL_BUILD_DIR=build python3 -m unittest tests/integration/test_tltrain_delta.py
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import BUILD, REPO, TLSNAP, TLSYNTH, require, snapshot_records  # noqa: E402

TLTRAIN = os.path.join(BUILD, "model", "tltrain")
DATA = os.environ.get("TL_SHARED_DATA") or os.path.join(REPO, "..", "shared", "data")
SVM = os.path.join(DATA, "criteo_tiny", "train.svm")
FFM = os.path.join(DATA, "criteo_tiny", "train.ffm")


def tltrain(*args):
    return subprocess.run([TLTRAIN, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=300)


def tlsnap(*args):
    return subprocess.run([TLSNAP, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=120)


class TltrainDelta(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require(TLTRAIN, TLSNAP, TLSYNTH)
        if not os.path.exists(SVM) or not os.path.exists(FFM):
            harness.missing("no test data at %s" % DATA, data=True)

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tl_tltrain_delta_")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def ok(self, *args):
        r = tltrain(*args)
        self.assertEqual(r.returncode, 0, "tltrain %s: %s" % (" ".join(args), r.stderr))
        return r

    def refused(self, status, out, words, *args):
        r = tltrain(*args)
        self.assertEqual(r.returncode, status, r.stderr)
        for w in words:
            self.assertIn(w, r.stderr)
        self.assertFalse(os.path.exists(out), "%s written by a refused export" % out)
        self.assertEqual([n for n in os.listdir(os.path.dirname(out)) if n.startswith(".tmp-")],
                         [], "a temporary directory left behind")
        return r

    def info(self, d):
        r = tlsnap("info", d)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def check_kind(self, model, first, second):
        """first/second: extra tltrain arguments of the two trainings."""
        base = ["--train", SVM, "--format", "libsvm", "--model", model]
        repo = self.path("repo", model)
        os.makedirs(repo)
        v1 = os.path.join(repo, "1")
        self.ok(*base, *first, "--export", v1, "--version", "1")
        # the second training written in full and, from the same trainer, as a delta of v1
        full2 = self.path("full2")
        r = self.ok(*base, *second, "--export", full2, "--version", "2",
                    "--export-delta", os.path.join(repo, "2"), "--parent", v1)
        self.assertIn("as a delta of", r.stderr)
        info = self.info(os.path.join(repo, "2"))
        self.assertIn("version    2 (delta of 1)", info)
        self.assertIn("producer   tltrain", info)
        self.assertEqual(tlsnap("verify", os.path.join(repo, "2")).returncode, 0)
        comp = self.path("comp2")
        r = tlsnap("compact", v1, os.path.join(repo, "2"), comp)
        self.assertEqual(r.returncode, 0, r.stderr)
        want = snapshot_records(full2)
        self.assertGreater(len(want), 100)
        self.assertNotEqual(snapshot_records(v1), want, "the second training changed nothing")
        self.assertEqual(snapshot_records(comp), want)
        # without --export: the export goes to a temporary directory, removed after
        dsolo = self.path("solo", model, "2")
        self.ok(*base, *second, "--version", "2", "--export-delta", dsolo, "--parent", v1)
        self.assertEqual(sorted(os.listdir(os.path.dirname(dsolo))), ["2"])
        comp = self.path("comp2solo")
        self.assertEqual(tlsnap("compact", v1, dsolo, comp).returncode, 0)
        self.assertEqual(snapshot_records(comp), want)
        # a parent that is itself a delta: its chain (1 <- 2) resolves in the repository
        full3 = self.path("full3")
        self.ok(*base, *first, "--epochs", "2", "--export", full3, "--version", "3",
                "--export-delta", os.path.join(repo, "3"), "--parent", os.path.join(repo, "2"))
        self.assertIn("version    3 (delta of 2)", self.info(os.path.join(repo, "3")))
        comp = self.path("comp3")
        r = tlsnap("compact", v1, os.path.join(repo, "2"), os.path.join(repo, "3"), comp)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(snapshot_records(comp), snapshot_records(full3))
        self.assertEqual([n for n in os.listdir(repo) if n.startswith(".tmp-")], [])
        return base, repo

    def test_lr(self):
        base, repo = self.check_kind("lr", ["--epochs", "1"], ["--epochs", "2"])
        v1 = os.path.join(repo, "1")
        out = os.path.join(repo, "9")
        # --version not above the parent's: refused before training (no epoch printed)
        r = self.refused(2, out, ["--version 1 must be above the parent's version 1"], *base,
                         "--version", "1", "--export-delta", out, "--parent", v1)
        self.assertEqual(r.stdout, "")
        # OUT named by another version than --version, or already there
        self.refused(2, os.path.join(repo, "8"), ["named version 8 but --version is 9"], *base,
                     "--version", "9", "--export-delta", os.path.join(repo, "8"), "--parent", v1)
        r = tltrain(*base, "--version", "2", "--export-delta", os.path.join(repo, "2"),
                    "--parent", v1)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("already exists", r.stderr)
        self.assertEqual(r.stdout, "")
        # another model name, another kind: refused before training, both sides named
        r = self.refused(2, out, ["model lr (lr)", "model other (lr)"], *base, "--name", "other",
                         "--version", "9", "--export-delta", out, "--parent", v1)
        self.assertEqual(r.stdout, "")
        r = self.refused(2, out, ["model lr (lr)", "(fm)"], "--train", SVM, "--format",
                         "libsvm", "--model", "fm", "--name", "lr", "--version", "9",
                         "--export-delta", out, "--parent", v1)
        self.assertEqual(r.stdout, "")
        # the same model and kind stored otherwise (tlsynth): 4 shards, f16; both sides named
        for name, extra, words in (("shards4", ["--shards", "4"], ["4 shards", "16 shards"]),
                                   ("f16", ["--dtype", "f16"], ["K=1, f16", "K=1, f32"])):
            parent = self.path("synth", name, "1")
            r = subprocess.run([TLSYNTH, "model", "--keys", "1000", "--out", parent, "--name",
                                "lr", "--kind", "lr", "--value-floats", "1", *extra],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.refused(1, out, words, *base, "--version", "9", "--export-delta", out,
                         "--parent", parent)
        # a missing parent
        self.refused(1, out, ["parent", "no-such"], *base, "--version", "9",
                     "--export-delta", out, "--parent", os.path.join(repo, "no-such"))
        # --export-delta alone
        self.refused(2, out, ["go together"], *base, "--export-delta", out)

    def test_fm(self):
        base, repo = self.check_kind("fm", ["--epochs", "1", "--seed", "1"],
                                     ["--epochs", "2", "--seed", "7"])
        out = os.path.join(repo, "9")
        # the same model and kind with another width: refused after training, K of both sides
        self.refused(1, out, ["K=5", "K=9"], *base, "--k", "8", "--epochs", "1", "--version",
                     "9", "--export-delta", out, "--parent", os.path.join(repo, "1"))
        # the same layout with other params (no instance normalisation): a full version needed
        self.refused(1, out, ["param norm", "--export"], *base, "--no-norm", "--epochs", "1",
                     "--version", "9", "--export-delta", out, "--parent",
                     os.path.join(repo, "1"))

    def test_export_dir_names_its_version(self):
        # <model>/<N>: the snapshot says N (as a repository reads it) unless --version says
        # otherwise, which is refused before training, as are an empty path and one path for
        # both exports
        base = ["--train", SVM, "--format", "libsvm", "--model", "lr", "--epochs", "1"]
        repo = self.path("repo", "named")
        os.makedirs(repo)
        self.ok(*base, "--export", os.path.join(repo, "2"))
        self.assertIn("version    2 (full)", self.info(os.path.join(repo, "2")))
        out = os.path.join(repo, "3")
        self.refused(2, out, ["named version 3 but --version is 4"], *base, "--export", out,
                     "--version", "4")
        r = tltrain(*base, "--export", "")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--export: the path is empty", r.stderr)
        self.refused(2, out, ["name the same directory"], *base, "--export", out,
                     "--export-delta", out, "--parent", os.path.join(repo, "2"))

    def test_dnn_refused(self):
        base = ["--train", FFM, "--format", "libffm", "--model", "dnn", "--dim", "4",
                "--hidden", "8", "--epochs", "1"]
        repo = self.path("repo", "dnn")
        os.makedirs(repo)
        self.ok(*base, "--export", os.path.join(repo, "1"), "--version", "1")
        out = os.path.join(repo, "2")
        self.refused(1, out, ["dense array", "--export"], *base, "--seed", "5", "--version", "2",
                     "--export-delta", out, "--parent", os.path.join(repo, "1"))


if __name__ == "__main__":
    unittest.main()
