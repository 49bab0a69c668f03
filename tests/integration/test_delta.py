"""tlsnap diff / compact / info / verify on delta versions of tlsynth models.

diff(A, B) then compact(A, diff) gives B key for key and value for value (the shard files'
records compared as sets, tlsnap verify on the result), also through a chain of two deltas and
for a DNN with dense arrays; info and verify describe a delta (kind, parent, producer, counts per
shard); a corrupt delta, a delta applied to the wrong version, two models of different layouts
and a full load of a delta are refused with a message naming what was wrong, exit status 1.

Run: TL_BUILD_DIR=build python3 -m unittest tests/integration/test_delta.py
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import TLSNAP, TLSYNTH, SEED, require, SHARD_HEADER, snapshot_records  # noqa: E402

DNN = ["--kind", "dnn", "--value-floats", "5", "--param", "fields=6", "--param", "dim=4",
       "--param", "hidden=16,8", "--param", "wide=1", "--mlp", "24,16,8,1"]


def run(*args):
    return subprocess.run([TLSNAP, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=120)


def synth(out, keys, version, seed=SEED, extra=()):
    r = subprocess.run([TLSYNTH, "model", "--keys", str(keys), "--out", out, "--name", "dm",
                        "--seed", str(seed), "--shards", "4", "--version", str(version),
                        *(extra or ["--kind", "fm", "--value-floats", "4"])],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    if r.returncode != 0:
        raise AssertionError("tlsynth: %s" % r.stderr)


class TlsnapDelta(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require(TLSNAP, TLSYNTH)

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tlsnap_delta.")
        self.repo = os.path.join(self.tmp, "repo", "dm")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, *p):
        return os.path.join(self.repo, *p)

    def ok(self, *args):
        r = run(*args)
        self.assertEqual(r.returncode, 0, "tlsnap %s: %s" % (" ".join(args), r.stderr))
        self.assertTrue(r.stdout.rstrip().endswith("OK") or args[0] == "info", r.stdout)
        return r.stdout

    def refused(self, needle, *args):
        r = run(*args)
        self.assertEqual(r.returncode, 1, "tlsnap %s: %s %s" % (" ".join(args), r.stdout, r.stderr))
        self.assertIn(needle, r.stderr)
        return r.stderr

    def test_diff_compact_equals_new(self):
        a, b, c = self.path("1"), os.path.join(self.tmp, "B"), os.path.join(self.tmp, "C")
        synth(a, 20000, 1)
        synth(b, 26000, 2)   # A's 20000 keys (the same seed) and 6000 more
        out = self.ok("diff", a, b, self.path("2"))
        self.assertIn("6000 upserts, 0 deletes", out)
        synth(c, 9000, 3, seed=SEED + 1)   # other keys: everything of B deleted
        out = self.ok("diff", b, c, self.path("3"))
        self.assertIn("9000 upserts, 26000 deletes", out)

        info = self.ok("info", self.path("3"))
        self.assertIn("version    3 (delta of 2)", info)
        self.assertIn("producer   tlsnap diff", info)
        self.assertIn("changes    9000 upserts, 26000 deletes", info)
        self.assertIn("format     2", info)
        rows = [l.split() for l in info.splitlines() if l.strip().endswith(".tld")]
        self.assertEqual(len(rows), 4)
        self.assertEqual(sum(int(r[1]) for r in rows), 9000)
        self.assertEqual(sum(int(r[2]) for r in rows), 26000)
        ver = self.ok("verify", self.path("3"))
        self.assertIn("delta of v2", ver)
        self.assertIn("9000 upserts, 26000 deletes", ver)

        one = os.path.join(self.tmp, "AB")
        self.ok("compact", a, self.path("2"), one)
        self.assertEqual(snapshot_records(one), snapshot_records(b))
        self.ok("verify", one)
        two = os.path.join(self.tmp, "ABC")
        out = self.ok("compact", a, self.path("2"), self.path("3"), two)
        self.assertIn("-> 9000 entries", out)
        self.assertEqual(snapshot_records(two), snapshot_records(c))
        self.assertIn("version    3 (full)", self.ok("info", two))
        self.ok("verify", two)
        # no temporaries left in the repository
        self.assertEqual(sorted(os.listdir(self.repo)), ["1", "2", "3"])

    def test_dnn_keeps_dense_arrays(self):
        a, b = self.path("1"), os.path.join(self.tmp, "B")
        synth(a, 5000, 1, extra=DNN)
        synth(b, 7000, 2, extra=DNN)
        self.ok("diff", a, b, self.path("2"))
        out = os.path.join(self.tmp, "AB")
        self.ok("compact", a, self.path("2"), out)
        self.assertEqual(snapshot_records(out), snapshot_records(b))
        dense = [n for n in os.listdir(b) if n.startswith("dense-")]
        self.assertEqual(len(dense), 6)
        for n in dense:
            with open(os.path.join(b, n), "rb") as x, open(os.path.join(out, n), "rb") as y:
                self.assertEqual(x.read(), y.read(), n)
        self.assertEqual([l for l in self.ok("info", out, "--brief").splitlines()
                          if "param" in l],
                         [l for l in self.ok("info", b, "--brief").splitlines() if "param" in l])

    def test_refusals(self):
        a, b = self.path("1"), os.path.join(self.tmp, "B")
        synth(a, 3000, 1)
        synth(b, 4000, 2)
        self.ok("diff", a, b, self.path("2"))
        # OUT exists
        self.refused("already holds a snapshot", "diff", a, b, self.path("2"))  # before the loads
        self.refused("already holds a snapshot", "compact", a, self.path("2"), self.path("2"))
        # a repository's <model>/<N> holding another version than N
        self.refused("is named version 7 but holds version 2", "diff", a, b, self.path("7"))
        self.assertFalse(os.path.exists(self.path("7")))
        # OLD and NEW swapped, or one version twice: no delta that would undo NEW
        self.refused("not newer than OLD", "diff", b, a, os.path.join(self.tmp, "SW"))
        self.refused("(OLD and NEW swapped?)", "diff", a, a, os.path.join(self.tmp, "SW"))
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "SW")))
        # layouts differ
        k8 = os.path.join(self.tmp, "K8")
        synth(k8, 100, 5, extra=["--kind", "fm", "--value-floats", "8"])
        self.refused("K 4 vs 8", "diff", a, k8, self.path("5"))
        self.assertFalse(os.path.exists(self.path("5")))
        # a full load of a delta
        self.refused("is a delta of 1", "rewrite", self.path("2"), os.path.join(self.tmp, "R"))
        # compact through the wrong parent
        self.refused("against version 1, the store holds version 2",
                     "compact", b, self.path("2"), os.path.join(self.tmp, "X"))
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "X")))
        # a corrupt delta
        victim = os.path.join(self.path("2"), "delta-00001.tld")
        with open(victim, "r+b") as f:
            f.seek(SHARD_HEADER + 3)
            byte = f.read(1)
            f.seek(SHARD_HEADER + 3)
            f.write(bytes([byte[0] ^ 0x10]))
        self.refused("delta-00001.tld", "verify", self.path("2"))
        self.refused("hash to", "compact", a, self.path("2"), os.path.join(self.tmp, "Y"))
        # truncated
        with open(victim, "r+b") as f:
            f.truncate(SHARD_HEADER + 5)
        self.refused("the manifest says", "verify", self.path("2"))
        # usage
        r = run("compact", a, os.path.join(self.tmp, "Z"))
        self.assertEqual(r.returncode, 2)


if __name__ == "__main__":
    unittest.main()
