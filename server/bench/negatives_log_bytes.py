#!/usr/bin/env python3
"""What the negatives of unclicked impressions cost the sample log, for one or more builds.

Each build's tlserve (--online, --sample-log-dir, --impression-window-ms 200) gets N logged
standard ranking PREDICTs (an impression id; 300 shared ids, 200 items of 200 ids, all random
64-bit ids) and no FEEDBACK, so every item expires as a negative.  Once all N x 200 are learned,
prints one JSON line per build: negatives emitted and dropped, samples learned, the sample
log's bytes and bytes per impression.  An impression's negatives are one record with the shared
block once (server/impression_log.h, impression_negatives_t); a build before that wrote a
record, an append and a copy of the shared block per item.

Run: python3 server/bench/negatives_log_bytes.py build/server/tlserve [OTHER_TLSERVE...]
Env: N=100 (impressions)
"""
import json
import os
import random
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                                "integration"))
import harness  # noqa: E402
from harness import Server, gen_model  # noqa: E402

N = int(os.environ.get("N", "100"))


def run(tlserve_bin):
    harness.TLSERVE = tlserve_bin
    tmp = tempfile.mkdtemp(prefix="tl_neg_bytes_")
    try:
        model = os.path.join(tmp, "ctr", "1")
        gen_model(model, 100000, "ctr", seed=42)
        slog = os.path.join(tmp, "slog")
        s = Server(model, "--online", "--sample-log-dir", slog, "--impression-window-ms", "200",
                   "--workers", "1")
        rnd = random.Random(1)
        shared = sorted(rnd.sample(range(1, 1 << 62), 300))
        with s.client() as c:
            for i in range(N):
                items = [sorted(rnd.sample(range(1, 1 << 62), 200)) for _ in range(200)]
                c.predict("ctr", shared, items, impression_id=i + 1)
        deadline = time.time() + 120
        learned = 0
        while time.time() < deadline and learned < N * 200:
            time.sleep(0.2)
            learned = s.metric('tlserve_online_samples_total{model="ctr"}')
        size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(slog)
                   for f in fs if ".slog" in f)
        out = {"build": tlserve_bin, "impressions": N,
               "negatives_emitted": s.metric("tlserve_impression_log_negatives_emitted_total"),
               "negatives_dropped": s.metric("tlserve_impression_log_negatives_dropped_total"),
               "learned": learned, "sample_log_bytes": size, "bytes_per_impression": size / N}
        s.stop()
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for b in sys.argv[1:]:
        print(json.dumps(run(os.path.abspath(b))))
