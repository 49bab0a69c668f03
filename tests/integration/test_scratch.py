"""A worker's scratch follows the model it serves: after a wide model (FFM, K = 81 floats per key)
is replaced by a narrow one (LR, K = 1), the worker gives the wide rows back.

The scratch is sized for the largest request (1,048,576 features), so its rows are K x 4 MiB:
324 MiB for K = 81, 4 MiB for LR.  The real tlserve (one worker) serves an LR model, then an FFM
model with K = 81 loaded through the admin API, then an LR model again, with a request after each
load (a worker sizes its scratch when it first scores with a version).  The process's address
space (VmSize from /proc) must grow by about the wide rows and shrink back by most of them, and
jemalloc must not keep them either (tlserve_jemalloc_allocated_bytes back near where it started).
Most of the scratch is never touched by small requests, so RSS would not show it: the address
space is what the scratch holds.

Run: TL_BUILD_DIR=build python3 -m unittest tests/integration/test_scratch.py
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import TLSERVE, TLSYNTH, SEED, gen_model, http, model_key, require  # noqa: E402

TOKEN = "t"
MAX_FEATURES = 1048576  # CODEC_MAX_REQUEST_FEATURES: what a worker's scratch is sized for
WIDE_K = 81  # FFM, 20 fields x k 4 + 1
WIDE_ROWS = (MAX_FEATURES + 1) * (WIDE_K - 1) * 4  # bytes the wide model adds to the rows


def vm_size(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))


class ScratchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require(TLSERVE, TLSYNTH)
        cls.tmp = tempfile.mkdtemp(prefix="tl_scratch_")
        cls.lr1 = os.path.join(cls.tmp, "demo", "1")
        cls.ffm = os.path.join(cls.tmp, "demo", "2")
        cls.lr3 = os.path.join(cls.tmp, "demo", "3")
        gen_model(cls.lr1, 1000, "demo", version=1)
        r = subprocess.run([TLSYNTH, "model", "--keys", "2000", "--out", cls.ffm, "--name", "demo",
                            "--version", "2", "--seed", str(SEED), "--shards", "4", "--kind",
                            "ffm", "--value-floats", str(WIDE_K), "--param", "fields=20",
                            "--param", "k=4"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           timeout=120)
        if r.returncode != 0:
            raise RuntimeError("tlsynth model exited with %d: %s" % (r.returncode, r.stderr))
        gen_model(cls.lr3, 1000, "demo", version=3, seed=7)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def load(self, srv, path):
        status, _, body = http(srv.admin_port, "/v1/models/demo:load?wait=1", "POST",
                               json.dumps({"path": path}).encode(),
                               {"Authorization": f"Bearer {TOKEN}"}, timeout=60.0)
        self.assertEqual(status, 200, body)
        return json.loads(body)

    def score(self, srv, version):
        shared = [model_key(j) for j in range(30)]
        items = [[model_key(100 + 10 * i + j) for j in range(10)] for i in range(20)]
        with srv.client() as c:
            res = c.predict("demo", shared, items)
        self.assertEqual(res.version, version)
        self.assertEqual(len(res.scores), 20)
        self.assertTrue(all(0.0 < s < 1.0 for s in res.scores), res.scores)

    def test_narrow_model_gives_the_scratch_back(self):
        srv = harness.Server(self.lr1, "--workers", "1", "--gate-allow-kind-change",
                             "--gate-sample", "0", token=TOKEN)  # unrelated models on purpose
        self.addCleanup(srv.stop)
        jemalloc = os.environ.get("TL_SANITIZE") != "1"  # sanitizer builds do not link it
        pid = srv.proc.pid

        self.score(srv, 1)
        vm0 = vm_size(pid)
        a0 = srv.metric("tlserve_jemalloc_allocated_bytes") if jemalloc else 0

        self.assertEqual(self.load(srv, self.ffm)["kind"], "ffm")
        self.score(srv, 2)
        vm1 = vm_size(pid)
        # The wide rows are mapped (the measure sees the scratch at all).
        self.assertGreater(vm1 - vm0, 0.9 * WIDE_ROWS, (vm0, vm1))

        self.assertEqual(self.load(srv, self.lr3)["kind"], "lr")
        self.score(srv, 3)
        vm2 = vm_size(pid)
        # Most of them are given back: at most a quarter of the wide rows stays (thread stacks
        # glibc caches after the loader's helpers exit, allocator slack).
        self.assertGreater(vm1 - vm2, 0.75 * WIDE_ROWS, (vm0, vm1, vm2))
        self.assertLess(vm2 - vm0, 0.25 * WIDE_ROWS, (vm0, vm1, vm2))
        if jemalloc:
            a2 = srv.metric("tlserve_jemalloc_allocated_bytes")
            self.assertLess(a2 - a0, 0.25 * WIDE_ROWS, (a0, a2))
        self.assertEqual(srv.stop(timeout=10.0), 0, srv.output())


if __name__ == "__main__":
    unittest.main()
