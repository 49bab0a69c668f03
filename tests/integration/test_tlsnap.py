"""tlsnap rewrite: a snapshot loaded and written again holds the same model — the same
records (as a set: the order is the loader's bucket order), params, dense arrays and meta —
and records a hash seed; a bad SRC or a DST that already holds a snapshot is refused with a
message naming it, and nothing is left half written.  The source is a `tlsynth model` snapshot;
tlsnap's retired gen command names its successor and exits 2.

Run: TL_BUILD_DIR=build python3 -m unittest tests/integration/test_tlsnap.py
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


def synth(*args):
    return subprocess.run([TLSYNTH, "model", *args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=120)


def shard_records(snap):
    """Every shard file's records as a sorted list of bytes, and the record count."""
    recs = snapshot_records(snap)
    return recs, len(recs)


def info_body(snap):
    """`tlsnap info --brief` without its first line (the path)."""
    r = run("info", snap, "--brief")
    if r.returncode != 0:
        raise AssertionError("tlsnap info %s: %s" % (snap, r.stderr))
    return r.stdout.splitlines()[1:]


class TlsnapRewrite(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require(TLSNAP, TLSYNTH)

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tlsnap_test.")
        self.src = os.path.join(self.tmp, "src")
        r = synth("--keys", "20000", "--out", self.src, "--name", "rw", "--seed", str(SEED),
                "--shards", "4", *DNN)
        self.assertEqual(r.returncode, 0, r.stderr)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_same_model_after_rewrite(self):
        dst = os.path.join(self.tmp, "a", "b", "dst")  # parents are created
        r = run("rewrite", self.src, dst)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("20000 entries", r.stdout)
        self.assertIn("4 params, 6 dense arrays", r.stdout)  # 3 layers
        self.assertTrue(r.stdout.rstrip().endswith("OK"), r.stdout)
        src_recs, n = shard_records(self.src)
        dst_recs, m = shard_records(dst)
        self.assertEqual(n, 20000)
        self.assertEqual(m, n)
        self.assertTrue(src_recs == dst_recs, "the rewritten records differ from the source's")
        for name in sorted(os.listdir(self.src)):
            if name.startswith("dense-"):
                with open(os.path.join(self.src, name), "rb") as a, \
                        open(os.path.join(dst, name), "rb") as b:
                    self.assertEqual(a.read(), b.read(), name)
        body = info_body(dst)
        self.assertEqual(body, info_body(self.src))  # meta, params, dense, seed
        self.assertTrue(any(line.strip().startswith("hash seed  0x") for line in body), body)
        r = run("verify", dst)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_refuses_a_dst_holding_a_snapshot(self):
        r = run("rewrite", self.src, self.src)
        self.assertEqual(r.returncode, 1)
        self.assertIn("already holds a snapshot", r.stderr)

    def test_refuses_a_missing_src(self):
        missing = os.path.join(self.tmp, "nope")
        r = run("rewrite", missing, os.path.join(self.tmp, "dst"))
        self.assertEqual(r.returncode, 1)
        self.assertIn(missing, r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "dst")))

    def test_refuses_a_corrupt_src_and_writes_nothing(self):
        shard = os.path.join(self.src, "shard-00001.tls")
        with open(shard, "r+b") as f:
            f.seek(SHARD_HEADER + 100)
            b = f.read(1)
            f.seek(SHARD_HEADER + 100)
            f.write(bytes([b[0] ^ 0x40]))
        dst = os.path.join(self.tmp, "dst")
        r = run("rewrite", self.src, dst)
        self.assertEqual(r.returncode, 1)
        self.assertIn("checksum", r.stderr)
        self.assertIn("shard-00001.tls", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(dst, "MANIFEST")))

    def test_usage_errors(self):
        r = run("rewrite", self.src)
        self.assertEqual(r.returncode, 2)
        self.assertIn("SRC and DST are required", r.stderr)
        r = run("rewrite", self.src, "x", "y")
        self.assertEqual(r.returncode, 2)
        r = run("rewrite", "--bogus", self.src, "x")
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown option", r.stderr)

    def test_verify_checks_what_a_load_checks(self):
        """verify passes the DNN (its params fit K and its dense arrays) and refuses what
        tlserve would not serve: an FFM without its params, a DNN whose MLP is not its
        params' shape."""
        r = run("verify", self.src)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("servable", r.stdout)
        ffm = os.path.join(self.tmp, "ffm")
        self.assertEqual(synth("--keys", "100", "--out", ffm, "--kind", "ffm",
                               "--value-floats", "9").returncode, 0)
        r = run("verify", ffm)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("checksums ok", r.stdout)  # the files are whole: it is the model
        self.assertIn("NOT servable", r.stdout)
        self.assertIn("fields", r.stdout)
        dnn = os.path.join(self.tmp, "dnn")
        bad = DNN[:-1] + ["28,16,8,1"]  # the first layer's input is fields x dim = 24
        self.assertEqual(synth("--keys", "100", "--out", dnn, *bad).returncode, 0)
        r = run("verify", dnn)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("mlp.0.weight", r.stdout)

    def test_gen_names_its_successor(self):
        dst = os.path.join(self.tmp, "gen")
        r = run("gen", "--keys", "100", "--out", dst)
        self.assertEqual(r.returncode, 2)
        self.assertIn("tlsynth model", r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertFalse(os.path.exists(dst))


if __name__ == "__main__":
    unittest.main()
