"""Integration test of tlserve's admin plane (server/admin.c) over real HTTP on loopback.

Generates small models with tlsynth model, starts the real tlserve binary on free loopback ports
and checks /healthz, /readyz, /metrics, /v1/models, the token-protected load endpoint (with
?wait=1) and a clean SIGTERM shutdown.  Standard library only (unittest + urllib).

Binaries come from $TL_BUILD_DIR (default: <repo>/build): model/tlsynth and server/tlserve.
Tests are skipped when they are missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import TLSERVE, TLSYNTH, free_port, gen_model, http  # noqa: E402

TOKEN = "secret"


def parse_metrics(text: str) -> dict:
    """Sample lines of the Prometheus text format -> {'name{labels}': float}."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        out[key] = float(value)
    return out


class Server(harness.Server):
    """A tlserve that is started, not yet up (see wait_up); one worker and the admin token by
    default, and load() for the token-protected load endpoint."""

    def __init__(self, model_dir: str | None, *extra: str, token: str | None = TOKEN,
                 workers: int = 1):
        super().__init__(model_dir, "--workers", str(workers), *extra, token=token, wait=None)

    def load(self, name: str, body: bytes, token: str | None):
        """POST .../{name}:load?wait=1: answered when the load has ended, as a synchronous load
        (the background API itself is tested in test_load_background.py)."""
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return http(self.admin_port, f"/v1/models/{name}:load?wait=1", "POST", body, headers,
                    timeout=60.0)


@harness.needs(os.access(TLSERVE, os.X_OK) and os.access(TLSYNTH, os.X_OK),
               f"needs {TLSERVE} and {TLSYNTH} (set TL_BUILD_DIR)")
class AdminTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="tl_admin_")
        cls.v1 = os.path.join(cls.tmp.name, "demo", "1")
        cls.v2 = os.path.join(cls.tmp.name, "demo", "2")
        cls.other = os.path.join(cls.tmp.name, "other", "1")
        gen_model(cls.v1, 1000, "demo", version=1)
        gen_model(cls.v2, 2000, "demo", version=2, seed=7)
        gen_model(cls.other, 10, "other", version=1)
        # --model-root tests: the root holds demo/1 and demo/2 (and links); the same model
        # outside it would load but for the root.
        cls.root = os.path.join(cls.tmp.name, "demo")
        cls.outside = os.path.join(cls.tmp.name, "outside", "demo", "3")
        gen_model(cls.outside, 10, "demo", version=3)
        os.symlink("../outside/demo/3", os.path.join(cls.root, "link_out"))
        os.symlink("2", os.path.join(cls.root, "link_in"))
        gen_model(os.path.join(cls.tmp.name, "demo2", "3"), 10, "demo", version=3)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def start(self, model_dir, *extra, **kw) -> Server:
        srv = Server(model_dir, *extra, **kw)
        self.addCleanup(srv.stop, timeout=5.0, check=True)
        srv.wait_up("/readyz" if model_dir is not None else "/healthz", timeout=15.0)
        return srv

    def test_health_ready_models(self):
        srv = self.start(self.v1)
        status, _, body = srv.get("/healthz")
        self.assertEqual((status, body.strip()), (200, b"ok"))
        self.assertEqual(srv.get("/readyz")[0], 200)
        status, headers, body = srv.get("/v1/models")
        self.assertEqual(status, 200)
        self.assertIn("application/json", headers["Content-Type"])
        self.assertEqual(json.loads(body),
                         {"models": [{"name": "demo", "version": 1, "kind": "lr", "keys": 1000}]})
        self.assertEqual(srv.get("/nope")[0], 404)
        self.assertEqual(http(srv.admin_port, "/healthz", "POST", b"")[0], 405)
        self.assertEqual(http(srv.admin_port, "/v1/models/demo:load", "PUT", b"")[0], 405)
        # GET .../demo:load is the load status: none since start.
        self.assertEqual(http(srv.admin_port, "/v1/models/demo:load", "GET")[0], 404)

    def test_digest_fingerprints_the_weights(self):
        # demo/1 again, written with 16 shards instead of 4: the same keys and weights in
        # another table layout and order, so the same digest
        same = os.path.join(self.tmp.name, "demo16", "1")
        gen_model(same, 1000, "demo", version=1, shards=16)
        a, b = self.start(self.v1), self.start(same)
        da, db = (json.loads(s.get("/v1/models/demo/digest")[2]) for s in (a, b))
        self.assertEqual((da["model"], da["version"], da["keys"], da["value_floats"]),
                         ("demo", 1, 1000, 1))
        self.assertRegex(da["digest"], "^[0-9a-f]{16}$")
        self.assertEqual(da["digest"], db["digest"])
        self.assertEqual(self.load_and_digest(a, self.v2)["version"], 2)
        d2 = json.loads(a.get("/v1/models/demo/digest")[2])
        self.assertNotEqual(d2["digest"], da["digest"])
        self.assertEqual(a.get("/v1/models/nope/digest")[0], 404)
        self.assertEqual(http(a.admin_port, "/v1/models/demo/digest", "POST", b"")[0], 405)

    def test_a_digest_does_not_hold_up_the_admin_plane(self):
        # the walk of 3M keys runs on its own thread: /healthz answers meanwhile; two digests
        # asked at once are both answered, one after the other or the second told to retry
        big = os.path.join(self.tmp.name, "big", "1")
        gen_model(big, 3_000_000, "big", version=1)
        srv = self.start(big)
        got = []

        def digest():
            r = srv.get("/v1/models/big/digest")
            got.append((r, time.monotonic()))

        threads = [threading.Thread(target=digest) for _ in range(2)]
        for t in threads:
            t.start()
        answers = []
        while any(t.is_alive() for t in threads):
            t0 = time.monotonic()
            status = srv.get("/healthz")[0]
            answers.append((status, time.monotonic() - t0, time.monotonic()))
        for t in threads:
            t.join()
        self.assertIn(sorted(r[0][0] for r in got), ([200, 200], [200, 503]), got)
        ok = [(r, done) for r, done in got if r[0] == 200]
        d = json.loads(ok[0][0][2])
        self.assertEqual(d["keys"], 3_000_000)
        self.assertGreater(d["micros"], 50_000)  # long enough for the count below to mean it
        during = [a for a in answers if a[2] < ok[0][1]]
        # on the admin thread the walk held every call behind it: one or two answered
        self.assertGreaterEqual(len(during), 5, "/healthz waited for the digest: %s" % answers)
        self.assertTrue(all(a[0] == 200 for a in answers), answers)

    def test_a_load_under_the_active_number_says_what_it_replaced(self):
        # another build numbered 1 replaces the active 1; the replaced weights cannot be kept
        # beside it (versions are found by number): served, and the log says so
        other = os.path.join(self.tmp.name, "demo_rebuilt", "1")
        gen_model(other, 1000, "demo", version=1, seed=9)
        srv = self.start(self.v1)
        before = json.loads(srv.get("/v1/models/demo/digest")[2])
        after = self.load_and_digest(srv, other)
        self.assertEqual(after["version"], 1)
        self.assertNotEqual(after["digest"], before["digest"])
        self.assertIn("replaced the active version 1 (the same number): the replaced weights "
                      "are not kept for a rollback", srv.output())
        # a load that went live is not also reported as one that failed
        self.assertNotIn("(the current version keeps serving)", srv.output())

    def load_and_digest(self, srv, model_dir):
        status, _, body = srv.load("demo", json.dumps({"path": model_dir}).encode(), TOKEN)
        self.assertEqual(status, 200, body)
        return json.loads(srv.get("/v1/models/demo/digest")[2])

    def test_not_ready_without_model(self):
        srv = self.start(None)
        self.assertEqual(srv.get("/healthz")[0], 200)
        self.assertEqual(srv.get("/readyz")[0], 503)
        status, _, body = srv.get("/v1/models")
        self.assertEqual((status, json.loads(body)), (200, {"models": []}))
        # Loading through the API makes it ready.
        status, _, body = srv.load("demo", json.dumps({"path": self.v1}).encode(), TOKEN)
        self.assertEqual(status, 200, body)
        self.assertEqual(srv.get("/readyz")[0], 200)

    def test_metrics(self):
        srv = self.start(self.v1)
        status, headers, body = srv.get("/metrics")
        self.assertEqual(status, 200)
        self.assertTrue(headers["Content-Type"].startswith("text/plain"))
        text = body.decode()
        m = parse_metrics(text)
        for counter in ("requests_total", "predict_total", "items_total", "errors_total",
                        "overloaded_total", "connections_accepted_total",
                        "connections_closed_total", "bytes_in_total", "bytes_out_total"):
            self.assertIn(f"# TYPE tlserve_{counter} counter", text)
            self.assertIn(f"tlserve_{counter}", m)
        self.assertIn("# TYPE tlserve_request_latency_seconds histogram", text)
        self.assertEqual(m['tlserve_request_latency_seconds_bucket{le="+Inf"}'],
                         m["tlserve_request_latency_seconds_count"])
        self.assertIn("tlserve_request_latency_seconds_sum", m)
        for q in ("0.5", "0.9", "0.99", "0.999"):
            self.assertIn(f'tlserve_request_latency_quantile_seconds{{quantile="{q}"}}', m)
        self.assertIn("# TYPE tlserve_errors_by_code_total counter", text)
        self.assertIn("# TYPE tlserve_lookup_splits_total counter", text)
        self.assertIn("tlserve_inflight", m)
        self.assertIn("tlserve_connections", m)
        self.assertEqual(m['tlserve_model_info{name="demo",version="1",kind="lr"}'], 1)
        self.assertEqual(m["tlserve_model_keys"], 1000)
        # The --model load at start is not an admin load: the load metrics start at 0.
        self.assertIn("# TYPE tlserve_model_loads_total counter", text)
        self.assertEqual(m['tlserve_model_loads_total{result="ok"}'], 0)
        self.assertEqual(m['tlserve_model_loads_total{result="failed"}'], 0)
        self.assertEqual(m["tlserve_model_load_seconds"], 0)
        self.assertEqual(m["tlserve_model_loads_in_progress"], 0)
        if os.environ.get("TL_SANITIZE") != "1":  # sanitizer builds do not link jemalloc
            self.assertGreater(m["tlserve_jemalloc_allocated_bytes"], 0)
            self.assertGreater(m["tlserve_jemalloc_resident_bytes"], 0)
        # The process's RSS, as the kernel reports it (read just after the scrape: the two
        # may differ by what the process touched in between, not by a factor).
        with open(f"/proc/{srv.proc.pid}/status") as f:
            vmrss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
        self.assertIn("# TYPE process_resident_memory_bytes gauge", text)
        rss = m["process_resident_memory_bytes"]
        self.assertGreater(rss, vmrss / 2)
        self.assertLess(rss, vmrss * 2)

    def test_load(self):
        srv = self.start(self.v1)
        good = json.dumps({"path": self.v2}).encode()

        status, headers, body = srv.load("demo", good, None)
        self.assertEqual(status, 401, body)
        self.assertIn("error", json.loads(body))
        status, _, body = srv.load("demo", good, "wrong")
        self.assertEqual(status, 401, body)
        status, _, body = srv.load("demo", good, TOKEN + "x")
        self.assertEqual(status, 401, body)
        self.assertEqual(json.loads(srv.get("/v1/models")[2])["models"][0]["version"], 1)

        # Malformed requests: 400; snapshots that cannot be served: 409.
        self.assertEqual(srv.load("demo", b"not json", TOKEN)[0], 400)
        self.assertEqual(srv.load("demo", b'{"dir": "/x"}', TOKEN)[0], 400)
        status, _, body = srv.load("demo", json.dumps({"path": self.tmp.name + "/none"}).encode(),
                                   TOKEN)
        self.assertEqual(status, 409, body)
        self.assertIn("/none", json.loads(body)["error"])
        status, _, body = srv.load("demo", json.dumps({"path": self.other}).encode(), TOKEN)
        self.assertEqual(status, 409, body)
        self.assertIn("other", json.loads(body)["error"])
        self.assertEqual(srv.load("demo", b"x" * (65 * 1024), TOKEN)[0], 413)

        status, _, body = srv.load("demo", good, TOKEN)
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body), {"name": "demo", "version": 2, "kind": "lr", "keys": 2000})
        status, _, body = srv.get("/v1/models")
        self.assertEqual(json.loads(body),
                         {"models": [{"name": "demo", "version": 2, "kind": "lr", "keys": 2000}]})
        m = parse_metrics(srv.get("/metrics")[2].decode())
        self.assertEqual(m['tlserve_model_info{name="demo",version="2",kind="lr"}'], 1)
        self.assertEqual(m["tlserve_model_keys"], 2000)
        # Only the accepted load counts: the refusals above were answered before the queue.
        self.assertEqual(m['tlserve_model_loads_total{result="ok"}'], 1)
        self.assertEqual(m['tlserve_model_loads_total{result="failed"}'], 0)
        self.assertGreater(m["tlserve_model_load_seconds"], 0)
        self.assertEqual(m["tlserve_model_loads_in_progress"], 0)

    def test_model_root(self):
        srv = self.start(self.v1, "--model-root", self.root)
        refused = [self.outside,                                    # outside
                   os.path.join(self.root, "..", "outside", "demo", "3"),  # a '..' escape
                   os.path.join(self.root, "link_out"),             # a symlink out
                   self.root,                                       # the root itself
                   os.path.join(self.tmp.name, "demo2", "3"),      # a sibling sharing the prefix
                   os.path.join(self.root, "none")]                 # nothing there
        for path in refused:
            status, _, body = srv.load("demo", json.dumps({"path": path}).encode(), TOKEN)
            self.assertEqual(status, 403, (path, body))
            err = json.loads(body)["error"]
            self.assertIn(self.root, err)
            self.assertIn(path, err)
            # Still the token first: no token is 401 whatever the path.
            self.assertEqual(srv.load("demo", json.dumps({"path": path}).encode(), None)[0], 401)
        self.assertEqual(json.loads(srv.get("/v1/models")[2])["models"][0]["version"], 1)
        m = parse_metrics(srv.get("/metrics")[2].decode())
        self.assertEqual(m['tlserve_model_loads_total{result="ok"}'], 0)
        self.assertEqual(m['tlserve_model_loads_total{result="failed"}'], 0)
        # every refusal counted by its status, the token's first
        self.assertEqual(m['tlserve_admin_responses_total{code="401"}'], len(refused))
        self.assertEqual(m['tlserve_admin_responses_total{code="403"}'], len(refused))

        # Inside, waited for (200), and through a symlink that stays inside, queued (202).
        status, _, body = srv.load("demo", json.dumps({"path": self.v2}).encode(), TOKEN)
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["version"], 2)
        status, _, body = http(srv.admin_port, "/v1/models/demo:load", "POST",
                               json.dumps({"path": os.path.join(self.root, "link_in")}).encode(),
                               {"Authorization": f"Bearer {TOKEN}"})
        self.assertEqual(status, 202, body)
        deadline = time.monotonic() + 30
        while True:
            st = json.loads(http(srv.admin_port, "/v1/models/demo:load", "GET")[2])
            if st["state"] in ("done", "failed") or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(st["state"], "done", st)
        self.assertEqual(st["path"], os.path.realpath(self.v2))  # the resolved path is loaded

        # Without the root the same outside path loads: the refusals above were the root's.
        srv2 = self.start(self.v1)
        status, _, body = srv2.load("demo", json.dumps({"path": self.outside}).encode(), TOKEN)
        self.assertEqual(status, 200, body)

    def test_model_root_at_start(self):
        proc = subprocess.run([TLSERVE, "--model", self.outside, "--model-root", self.root,
                               "--port", str(free_port()), "--admin-port", str(free_port())],
                              capture_output=True, timeout=30)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn(self.outside.encode(), proc.stderr)
        self.assertIn(self.root.encode(), proc.stderr)
        self.assertIn(b"--model-root", proc.stderr)

    def test_load_refused_without_configured_token(self):
        srv = self.start(self.v1, token=None)
        status, _, body = srv.load("demo", json.dumps({"path": self.v2}).encode(), "anything")
        self.assertEqual(status, 403, body)
        self.assertIn("no admin token configured", json.loads(body)["error"])

    def test_bad_model_exits_1(self):
        proc = subprocess.run([TLSERVE, "--model", self.tmp.name + "/none", "--port",
                               str(free_port()), "--admin-port", str(free_port())],
                              capture_output=True, timeout=30)
        self.assertEqual(proc.returncode, 1)
        self.assertIn(b"/none", proc.stderr)

    def test_bad_flag_exits_2(self):
        proc = subprocess.run([TLSERVE, "--port", "99999"], capture_output=True, timeout=30)
        self.assertEqual(proc.returncode, 2)
        self.assertIn(b"--port", proc.stderr)

    def test_sigterm_exits_0(self):
        srv = Server(self.v1)
        try:
            srv.wait_up("/readyz", timeout=15.0)
            t0 = time.monotonic()
            self.proc_log = srv.output()
            self.assertEqual(srv.stop(timeout=5.0), 0, self.proc_log)
            self.assertLess(time.monotonic() - t0, 5.0)
        finally:
            if srv.proc.poll() is None:
                srv.proc.kill()
                srv.proc.wait()


if __name__ == "__main__":
    unittest.main()
