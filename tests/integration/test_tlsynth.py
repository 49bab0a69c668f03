"""tlsynth model: a synthetic model snapshot of every kind (lr, fm, ffm, dnn) that `tlsnap verify`
loads and `tlsnap info` lists, with the very model tlsnap's gen command made from the same options
before it moved to model/ (the sorted shard records, the params and the dense arrays are pinned below,
as tlsnap's gen wrote them; only the record order, which follows a random hash seed, and the
creation time differ between runs).  Bad options are refused with a message naming the option
and exit 2, before anything is created; a failure leaves nothing behind.  Serving these models is
test_model_kinds.py's (it generates with tlsynth model).  `tlsynth data` is the explicit spelling
of the planted-data mode, which keeps working without it.

Run: TL_BUILD_DIR=build python3 -m unittest tests/integration/test_tlsynth.py
"""

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import TLSNAP, TLSYNTH, require, snapshot_records  # noqa: E402


# name: (options, record count, sha256 of the sorted records [:16], `tlsnap info` lines) —
# the figures are those tlsnap's gen command gave for the same options.
CASES = {
    "lr": (["--keys", "3000", "--shards", "4", "--seed", "7"], 3000, "ea161e6289ec400f",
           ["model      synthetic", "kind       lr", "version    1 (full)", "entries    3000",
            "values     1 x f32 (12 B/entry with key)", "shards     4"]),
    "lr_f16": (["--keys", "3k", "--shards", "1", "--seed", "7", "--dtype", "f16",
                "--value-floats", "3"], 3000, "e5e7269788139996",
               ["model      synthetic", "kind       lr", "version    1 (full)", "entries    3000",
                "values     3 x f16 (14 B/entry with key)", "shards     1"]),
    "fm": (["--keys", "3000", "--kind", "fm", "--value-floats", "9", "--seed", "7", "--name",
            "m.x", "--version", "5"], 3000, "f69b108b2aa1ebb2",
           ["model      m.x", "kind       fm", "version    5 (full)", "entries    3000",
            "values     9 x f32 (44 B/entry with key)", "shards     16"]),
    "ffm": (["--keys", "3000", "--kind", "ffm", "--value-floats", "33", "--param", "fields=8",
             "--param", "k=4", "--param", "norm=1"], 3000, "494dde00ab49c71c",
            ["model      synthetic", "kind       ffm", "version    1 (full)", "entries    3000",
             "values     33 x f32 (140 B/entry with key)", "shards     16",
             "param      fields = 8", "param      k = 4", "param      norm = 1"]),
    "dnn": (["--keys", "3000", "--kind", "dnn", "--value-floats", "5", "--param", "fields=6",
             "--param", "dim=4", "--param", "hidden=16,8", "--param", "wide=1", "--mlp",
             "24,16,8,1", "--threads", "3"], 3000, "223bc5147f2dbcae",
            ["model      synthetic", "kind       dnn", "version    1 (full)", "entries    3000",
             "values     5 x f32 (28 B/entry with key)", "shards     16",
             "param      fields = 6", "param      dim = 4", "param      hidden = 16,8",
             "param      wide = 1",
             "dense      mlp.0.weight            384 floats  f63b98d6e86d2ba9  dense-00.tld",
             "dense      mlp.0.bias               16 floats  97f49ae4eda253e1  dense-01.tld",
             "dense      mlp.1.weight            128 floats  0e9a8f77808044af  dense-02.tld",
             "dense      mlp.1.bias                8 floats  2a0da7ed6b0af718  dense-03.tld",
             "dense      mlp.2.weight              8 floats  f6c3ea1b59c5af6c  dense-04.tld",
             "dense      mlp.2.bias                1 floats  c84b2e5ef595e602  dense-05.tld"]),
}
PINNED = ("model", "kind", "version", "entries", "values", "shards", "param", "dense")


def run(exe, *args):
    return subprocess.run([exe, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=120)


def synth(*args):
    return run(TLSYNTH, "model", *args)


def records_digest(snap):
    """The record count and sha256[:16] of every shard file's records, sorted."""
    recs = snapshot_records(snap)
    return len(recs), hashlib.sha256(b"".join(recs)).hexdigest()[:16]


class TlsynthModel(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require(TLSNAP, TLSYNTH)

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tlsynth_test.")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_every_kind_is_tlsnap_gens_model_and_loads(self):
        for name, (args, count, digest, info) in CASES.items():
            with self.subTest(kind=name):
                out = os.path.join(self.tmp, "m", name, "1")  # parents are created
                r = synth("--out", out, *args)
                self.assertEqual(r.returncode, 0, r.stderr)
                # an LR of 3 floats a key is a storage layout only: said up front
                self.assertEqual("tlserve will not serve this snapshot" in r.stderr,
                                 name == "lr_f16", r.stderr)
                self.assertRegex(r.stdout, r"total +%d keys" % count)
                self.assertEqual(records_digest(out), (count, digest))
                r = run(TLSNAP, "info", "--brief", out)
                self.assertEqual(r.returncode, 0, r.stderr)
                got = [line.strip() for line in r.stdout.splitlines()[1:]
                       if line.split() and line.split()[0] in PINNED]
                self.assertEqual(got, info)
                r = run(TLSNAP, "verify", out)
                if name == "lr_f16":  # whole files, but not a model tlserve serves: verify says so
                    self.assertEqual(r.returncode, 1, r.stdout)
                    self.assertIn("all found and equal", r.stdout)
                    self.assertIn("NOT servable by tlserve", r.stdout)
                    continue
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertTrue(r.stdout.rstrip().endswith("OK"), r.stdout)

    def test_same_model_for_any_thread_count(self):
        args = CASES["dnn"][0][:-2]  # without --threads 3
        for threads in ("1", "2"):
            out = os.path.join(self.tmp, "t" + threads)
            r = synth("--out", out, "--threads", threads, *args)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(records_digest(out), CASES["dnn"][1:3])

    def test_bad_options_exit_2_and_create_nothing(self):
        bad = [
            ([], "--keys N is required"),
            (["--keys", "-1"], "--keys: '-1' is not a count"),
            (["--keys", "10Q"], "--keys: '10Q' is not a count"),
            (["--keys", "10", "--kind", "svm"], "--kind: 'svm' is not one of lr, fm, ffm, dnn"),
            (["--keys", "10", "--shards", "3"], "--shards: 3 is not a power of two"),
            (["--keys", "10", "--shards", "512"], "--shards: 512 is out of range 1..256"),
            (["--keys", "10", "--value-floats", "0"], "--value-floats: 0 is out of range"),
            (["--keys", "10", "--value-floats", "1025"], "--value-floats: 1025 is out of range"),
            (["--keys", "10", "--dtype", "f64"], "--dtype: 'f64' is neither f32 nor f16"),
            (["--keys", "10", "--name", "a b"], "--name: 'a b' must be 1..63 characters"),
            (["--keys", "10", "--version", "0"], "--version: 0 is out of range"),
            (["--keys", "10", "--threads", "0"], "--threads: 0 is out of range"),
            (["--keys", "10", "--param", "fields"], "--param: 'fields' is not KEY=VALUE"),
            (["--keys", "10", "--param", "a b=1"], "--param: 'a b=1': keys are"),
            (["--keys", "10", "--mlp", "5"], "--mlp: '5' needs at least two widths"),
            (["--keys", "10", "--mlp", "4,x"], "--mlp: '4,x' is not a list of 2..17 widths"),
            (["--keys", "10", "--mlp", "4,0"], "--mlp: '4,0' is not a list"),
            (["--keys", "10", "--bogus"], "unknown option '--bogus'"),
            (["--keys", "10", "extra"], "unexpected argument 'extra'"),
            (["--keys"], "option --keys needs a value"),
        ]
        parent = os.path.join(self.tmp, "new")
        out = os.path.join(parent, "deeper", "snap")
        for args, message in bad:
            with self.subTest(args=args):
                full = args + (["--out", out] if args != ["--keys"] else [])
                r = synth(*full)
                self.assertEqual(r.returncode, 2, r.stderr)
                first = r.stderr.splitlines()[0]
                self.assertTrue(first.startswith("tlsynth model: "), first)
                self.assertIn(message, first)
                self.assertIn("usage: tlsynth model", r.stderr)
                self.assertFalse(os.path.exists(parent), "a refused run created %s" % parent)
        r = synth("--keys", "10")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--out DIR is required", r.stderr)
        r = synth("--keys", "1T", "--out", out)  # refused before hours of filling
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("more than this machine's", r.stderr)
        self.assertFalse(os.path.exists(parent))

    def test_refuses_a_dir_holding_a_snapshot_and_keeps_it(self):
        out = os.path.join(self.tmp, "snap")
        self.assertEqual(synth("--keys", "100", "--out", out).returncode, 0)
        with open(os.path.join(out, "MANIFEST"), "rb") as f:
            before = f.read()
        names = sorted(os.listdir(out))
        r = synth("--keys", "200", "--out", out, "--seed", "9")
        self.assertEqual(r.returncode, 1)
        self.assertIn("already holds a snapshot", r.stderr)
        with open(os.path.join(out, "MANIFEST"), "rb") as f:
            self.assertEqual(f.read(), before)
        self.assertEqual(sorted(os.listdir(out)), names)

    def test_a_failed_write_leaves_nothing(self):
        # the parents n1 and n1/n2 are created, then the write fails: "file" is not a directory
        blocker = os.path.join(self.tmp, "file")
        with open(blocker, "w") as f:
            f.write("x")
        out = os.path.join(self.tmp, "n1", "n2", "..", "..", "file", "snap")
        r = synth("--keys", "100", "--out", out)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("tlsynth model: ", r.stderr)
        self.assertEqual(sorted(os.listdir(self.tmp)), ["file"])

    def test_help(self):
        r = synth("--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("usage: tlsynth model --keys N --out DIR", r.stdout)
        self.assertIn("--mlp W0,W1,..,1", r.stdout)


class TlsynthData(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require(TLSYNTH)

    def test_data_is_the_default_mode(self):
        tmp = tempfile.mkdtemp(prefix="tlsynth_data.")
        try:
            a, b = os.path.join(tmp, "a.ffm"), os.path.join(tmp, "b.ffm")
            common = ["--model", "fm", "--samples", "500", "--seed", "3"]
            r1 = run(TLSYNTH, *common, "--out", a)
            r2 = run(TLSYNTH, "data", *common, "--out", b)
            self.assertEqual(r1.returncode, 0, r1.stderr)
            self.assertEqual(r2.returncode, 0, r2.stderr)
            with open(a, "rb") as fa, open(b, "rb") as fb:
                self.assertEqual(fa.read(), fb.read())
            # wide weights need a bias far past +-50 for a rare click: it is reached
            r = run(TLSYNTH, "data", "--model", "lr", "--samples", "20000", "--ctr", "0.001",
                    "--sigma-w", "10", "--out", a)
            self.assertEqual(r.returncode, 0, r.stderr)
            got = re.search(r"rows, ctr ([0-9.]+)", r.stderr)
            self.assertIsNotNone(got, r.stderr)
            self.assertLess(abs(float(got.group(1)) - 0.001), 0.0006, r.stderr)
            r = run(TLSYNTH, "data", "--model", "svm", "--samples", "1", "--out", a)
            self.assertEqual(r.returncode, 2)
            self.assertIn("--model: 'svm' is not lr or fm", r.stderr)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
