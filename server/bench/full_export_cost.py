#!/usr/bin/env python3
"""The cost of a FULL online export (--online-full-every 1) of a KEYS-key LR model.

Serves a `tlsynth model` of KEYS keys (default 1M) with --online, an export every 300 ms and
every export full, sends a few TRAIN frames per round and prints each export's log line: the
time the hand-over held the trainer's writer lock (copying every key's values and state) and
the time the export thread took to write the version.

Run: TL_BUILD_DIR=build python3 server/bench/full_export_cost.py [KEYS]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                                "integration"))
import unittest  # noqa: E402

from harness import ServerCase, gen_model, model_key  # noqa: E402

KEYS = int(sys.argv.pop(1)) if len(sys.argv) > 1 else 1000000


class FullExportCost(ServerCase):
    TMP_PREFIX = "tl_fullexp_bench_"

    def test_cost(self):
        repo = os.path.join(self.tmp, "repo")
        gen_model(os.path.join(repo, "ctr", "1"), KEYS, "ctr", seed=41)
        s = self.serve(None, "--model-repo", repo, "--load-sched-idle=false", "--online",
                       "--online-export-ms", "300", "--online-full-every", "1")
        with s.client() as c:
            for rnd in range(4):
                for k in range(20):
                    shared = sorted(model_key(i + 37 * k, 41) for i in range(30))
                    item = sorted(model_key(5000 + i + 13 * k, 41) for i in range(10))
                    c.train("ctr", shared, [(1.0, item)])
                self.wait_metric(s, 'tlserve_online_exports_total{model="ctr"}', rnd + 1,
                                 timeout=120)
        for line in s.output().splitlines():
            if "exported as" in line:
                print(line)


if __name__ == "__main__":
    unittest.main()
