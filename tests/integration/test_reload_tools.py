"""The reload benchmark's tools (loadgen/reload_bench.py): mkdelta and tlgen --interval-ms.

mkdelta: a delta of a 10k-key tlsynth model, compacted onto it with tlsnap, changes exactly the
keys loadgen/mkdelta.c promises (upserts of existing keys with new values, inserts of new keys,
deletes from the top block), a second delta chains on the first, and impossible or unsafe
requests are refused.

tlgen --interval-ms: against tlserve --model-repo, with a delta renamed in mid-run, the intervals
add up to the run's own totals, their buckets give the run's percentiles within the coarse
buckets' precision, and the versions and first-seen times show the delta going live after its
rename.

Run: TL_BUILD_DIR=build python3 -m unittest tests/integration/test_reload_tools.py
"""

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (BUILD, SEED, TLSERVE, TLSYNTH, Server, gen_model, model_key,  # noqa: E402
                     require, snapshot_records)

TLGEN = os.path.join(BUILD, "loadgen", "tlgen")
MKDELTA = os.path.join(BUILD, "loadgen", "mkdelta")
TLSNAP = os.path.join(BUILD, "store", "tlsnap")
MODEL = "ctr_lr"
KEYS = 10000


def mkdelta(*args):
    return subprocess.run([MKDELTA, *map(str, args)], capture_output=True, text=True, timeout=60)


def records(snap):
    """{key: value bytes} of a full snapshot."""
    return {struct.unpack_from("<Q", r)[0]: r[8:] for r in snapshot_records(snap)}


class MkDelta(unittest.TestCase):
    def setUp(self):
        require(MKDELTA, TLSNAP, TLSYNTH)
        self.tmp = tempfile.mkdtemp(prefix="mkdelta-it-")
        self.v1 = os.path.join(self.tmp, MODEL, "1")
        gen_model(self.v1, KEYS, MODEL, shards=4)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def compact(self, *dirs):
        out = os.path.join(self.tmp, "full-%d" % len(os.listdir(self.tmp)))
        r = subprocess.run([TLSNAP, "compact", *dirs, out], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return records(out)

    def test_delta_changes_the_promised_keys(self):
        d2 = os.path.join(self.tmp, MODEL, "2")
        r = mkdelta("--parent", self.v1, "--out", d2, "--keys", KEYS, "--seq", 1,
                    "--upserts", 300, "--inserts", 20, "--deletes", 10)  # 4 shards: the parent's
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("version 2 (parent 1): 300 upserts, 20 inserts, 10 deletes", r.stdout)
        base, new = records(self.v1), self.compact(self.v1, d2)
        deleted = {model_key(i) for i in range(KEYS - 10, KEYS)}
        inserted = {model_key(KEYS + t) for t in range(20)}
        self.assertEqual(set(base) - set(new), deleted)
        self.assertEqual(set(new) - set(base), inserted)
        changed = {k for k in base if k in new and base[k] != new[k]}
        self.assertEqual(len(changed), 300)  # every upsert a new value of an existing key
        self.assertFalse(changed & deleted)

        # the next delta of the series chains on this one (layout from the delta parent)
        d3 = os.path.join(self.tmp, MODEL, "3")
        r = mkdelta("--parent", d2, "--out", d3, "--keys", KEYS, "--seq", 2,
                    "--upserts", 300, "--inserts", 20, "--deletes", 10)
        self.assertEqual(r.returncode, 0, r.stderr)
        new3 = self.compact(self.v1, d2, d3)
        self.assertEqual(set(new) - set(new3), {model_key(i) for i in range(KEYS - 20, KEYS - 10)})
        self.assertEqual(set(new3) - set(new), {model_key(KEYS + 20 + t) for t in range(20)})
        self.assertEqual(len(new3), KEYS - 20 + 40)

    def test_refusals(self):
        d2 = os.path.join(self.tmp, MODEL, "2")
        # deletes of 1000 per delta leave no room for a 10th
        r = mkdelta("--parent", self.v1, "--out", d2, "--keys", KEYS, "--seq", 10,
                    "--deletes", 1000)
        self.assertEqual(r.returncode, 2, r.stderr)
        r = mkdelta("--parent", self.v1, "--out", d2, "--keys", KEYS, "--seq", 1,
                    "--upserts", KEYS, "--deletes", 1)
        self.assertEqual(r.returncode, 2, r.stderr)
        r = mkdelta("--parent", os.path.join(self.tmp, "nothing"), "--out", d2, "--keys", KEYS,
                    "--seq", 1)
        self.assertEqual(r.returncode, 1)
        self.assertFalse(os.path.exists(d2))
        # an existing version is never replaced
        r = mkdelta("--parent", self.v1, "--out", self.v1, "--keys", KEYS, "--seq", 1,
                    "--version", 5)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertEqual(len(records(self.v1)), KEYS)
        # a delta goes forward; the layout is the parent's, never a flag's
        r = mkdelta("--parent", self.v1, "--out", d2, "--keys", KEYS, "--seq", 1, "--version", 1)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("not above the parent's 1", r.stderr)
        r = mkdelta("--parent", self.v1, "--out", d2, "--keys", KEYS, "--seq", 1, "--shards", 16)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertFalse(os.path.exists(d2))


class Intervals(unittest.TestCase):
    def setUp(self):
        require(MKDELTA, TLGEN, TLSERVE, TLSYNTH)
        self.tmp = tempfile.mkdtemp(prefix="tlgen-iv-it-")
        self.repo = os.path.join(self.tmp, "repo")
        gen_model(os.path.join(self.repo, MODEL, "1"), KEYS, MODEL, shards=4)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_usage(self):
        base = [TLGEN, "--port", "1", "--model", MODEL, "--duration", "1"]
        for extra in (["--rate", "10", "--interval-ms", "100"],
                      ["--rate", "10", "--interval-out", "x"],
                      ["--sweep", "10,20", "--interval-ms", "100", "--interval-out", "x"],
                      ["--rate", "10", "--interval-ms", "0", "--interval-out", "x"]):
            r = subprocess.run(base + extra, capture_output=True, text=True, timeout=10)
            self.assertEqual(r.returncode, 2, (extra, r.stderr))

    def test_errors_by_interval(self):
        srv = Server(None, "--model-repo", self.repo, "--keep-versions", "1")
        try:
            ivf = os.path.join(self.tmp, "err.jsonl")
            r = subprocess.run([TLGEN, "--port", str(srv.port), "--model", "no_such_model",
                                "--rate", "100", "--duration", "1", "--items", "10", "--shared",
                                "20", "--per-item", "10", "--json", "--interval-ms", "250",
                                "--interval-out", ivf], capture_output=True, text=True, timeout=60)
        finally:
            srv.stop()
        run = json.loads(r.stdout.strip().splitlines()[-1])
        ivs = [json.loads(x) for x in open(ivf).read().strip().splitlines()[1:-1]]
        self.assertGreater(run["errors"], 50)
        self.assertEqual(run["ok"], 0)
        self.assertEqual(len(ivs), 4)
        self.assertEqual(sum(i["errors"] for i in ivs), run["errors"])
        self.assertEqual(sum(i["scheduled"] for i in ivs), run["scheduled"])
        self.assertTrue(all(i["ok"] == 0 and i["b"] == [] and i["versions"] == {} for i in ivs))

    def test_intervals_around_a_delta(self):
        stage = os.path.join(self.tmp, "stage")
        d2 = os.path.join(stage, "2")
        os.makedirs(stage)
        r = mkdelta("--parent", os.path.join(self.repo, MODEL, "1"), "--out", d2, "--keys", KEYS,
                    "--seq", 1, "--upserts", 500)
        self.assertEqual(r.returncode, 0, r.stderr)
        srv = Server(None, "--model-repo", self.repo, "--keep-versions", "1")
        try:
            ivf = os.path.join(self.tmp, "iv.jsonl")
            gen = subprocess.Popen(
                [TLGEN, "--port", str(srv.port), "--model", MODEL, "--rate", "200", "--duration",
                 "4", "--items", "10", "--shared", "20", "--per-item", "10", "--key-space",
                 str(KEYS), "--seed", str(SEED), "--json", "--interval-ms", "100",
                 "--interval-out", ivf], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(1.5)
            os.rename(d2, os.path.join(self.repo, MODEL, "2"))
            t_rename = time.time() * 1000
            out, err = gen.communicate(timeout=60)
            self.assertIn(gen.returncode, (0, 3), err)
            run = json.loads(out.strip().splitlines()[-1])
        finally:
            srv.stop()
        lines = [json.loads(x) for x in open(ivf).read().strip().splitlines()]
        head, ivs, tail = lines[0], lines[1:-1], lines[-1]
        self.assertEqual(head["interval_ms"], 100)
        self.assertEqual(head["intervals"], 40)
        self.assertEqual(head["bucket_sub"], 64)
        self.assertEqual(sum(i["scheduled"] for i in ivs), run["scheduled"])
        self.assertEqual(sum(i["ok"] for i in ivs), run["ok"])
        self.assertEqual(sum(i["errors"] for i in ivs), run["errors"])
        self.assertEqual(sum(c for i in ivs for _, c in i["b"]), run["ok"])
        self.assertEqual(sum(sum(i["versions"].values()) for i in ivs), run["ok"])
        self.assertGreater(run["ok"], 700)
        # every interval starts 100 ms after the one before, from the header's origin
        for i in ivs:
            self.assertAlmostEqual(i["start_unix_ms"], head["origin_unix_ms"] + 100 * i["i"], 2)
        # the merged buckets give tlgen's own p99 within their 1/64 precision (+ rounding)
        b = {}
        for i in ivs:
            for k, c in i["b"]:
                b[k] = b.get(k, 0) + c
        want, seen = -(-99 * run["ok"] // 100), 0
        for k in sorted(b):
            seen += b[k]
            if seen >= want:
                e, s = k // 64 + 5, k % 64
                p99 = ((((64 + s + 1) << (e - 6)) - 1) if k >= 64 else k) / 1000
                break
        self.assertLess(abs(p99 - run["p99_us"]) / run["p99_us"], 0.04, (p99, run["p99_us"]))
        # version 1 first, version 2 only after its rename, and then in the last intervals
        first = {int(k): v for k, v in tail["first_seen"].items()}
        self.assertEqual(set(first), {1, 2})
        self.assertLess(first[1], first[2])
        self.assertGreater(first[2], t_rename - 5)  # 5 ms: the two clocks are read apart
        self.assertEqual(set(ivs[0]["versions"]), {"1"})
        self.assertEqual(set(ivs[-1]["versions"]), {"2"})


if __name__ == "__main__":
    unittest.main()
