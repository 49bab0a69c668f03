"""Background model loads (server/loader.c, server/admin.c) over real HTTP on loopback.

Starts the real tlserve with a small model, POSTs a load of a larger snapshot and polls /healthz
every 10 ms while it loads: /healthz must answer 200 throughout, and the load must be seen in
state "loading" while it does.  Then the rest of the load API: 202 + Location + status to poll,
?wait=1, bad tokens, unknown paths, one load per model at a time, the bounded queue, a snapshot
that fails to load (state "failed" with the store's error, the old version still serving), the
metrics, and SIGTERM with a load in flight.  No timing assertion: the slowest /healthz answer is
printed.

Size: TL_LOAD_KEYS keys (default 2M, a few seconds).  server/bench/load_health.sh runs measure()
at 100M keys:  python3 test_load_background.py --bench --keys 100M
Binaries come from $TL_BUILD_DIR (default: <repo>/build).  Standard library only.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import TLSERVE, TLSYNTH, http  # noqa: E402

TOKEN = "secret"
SUFFIX = {"k": 10**3, "M": 10**6, "G": 10**9}


def parse_keys(text: str) -> int:
    text = text.strip()
    if text and text[-1] in SUFFIX:
        return int(float(text[:-1]) * SUFFIX[text[-1]])
    return int(text)


LOAD_KEYS = parse_keys(os.environ.get("TL_LOAD_KEYS", "2M"))


def make_snapshot(out: str, keys: int, name: str, version: int, seed: int = harness.SEED,
                  extra=()):
    """The one place that generates a synthetic snapshot (`tlsynth model`: LR unless extra says
    otherwise) for this test and the benchmark."""
    r = subprocess.run([TLSYNTH, "model", "--keys", str(keys), "--out", out, "--name", name,
                        "--version", str(version), "--seed", str(seed), "--shards", "4",
                        *extra], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       timeout=3600)
    if r.returncode != 0:
        raise RuntimeError("tlsynth model exited with %d: %s" % (r.returncode, r.stderr))


def corrupt(snapshot_dir: str):
    """Flips a byte in the middle of a shard file: the manifest still reads, the load fails."""
    shard = sorted(f for f in os.listdir(snapshot_dir) if f.startswith("shard-"))[0]
    path = os.path.join(snapshot_dir, shard)
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0xFF]))


def post_load(port, name, path, token=TOKEN, query="", timeout=10.0):
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = "Bearer " + token
    body = json.dumps({"path": path}).encode()
    return http(port, f"/v1/models/{name}:load{query}", "POST", body, headers, timeout=timeout)


def load_status(port, name):
    status, _, body = http(port, f"/v1/models/{name}:load")
    return status, (json.loads(body) if status == 200 else None)


class HealthPoller(threading.Thread):
    """GET /healthz every 10 ms until stopped: (start time, status, seconds) per sample."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port = port
        self.samples = []
        self.halt = threading.Event()

    def run(self):
        while not self.halt.is_set():
            t0 = time.monotonic()
            try:
                status = http(self.port, "/healthz", timeout=10.0)[0]
            except OSError as e:
                status = repr(e)
            t1 = time.monotonic()
            self.samples.append((t0, status, t1 - t0))
            self.halt.wait(max(0.0, 0.010 - (t1 - t0)))

    def stop(self):
        self.halt.set()
        self.join()

    def slowest_ms(self):
        return max(s[2] for s in self.samples) * 1e3

    def p99_ms(self):
        lat = sorted(s[2] for s in self.samples)
        return lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1e3


def measure(srv, name, path, timeout=1800.0):
    """POSTs a background load of path as model name on srv, polls /healthz every 10 ms and the
    load status every 10 ms until it ends.  Returns (accepted answer, states seen as
    [(time, state)], final status, HealthPoller)."""
    poller = HealthPoller(srv.admin_port)
    poller.start()
    try:
        time.sleep(0.05)  # a few samples before the load
        accepted = post_load(srv.admin_port, name, path)
        states = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, st = load_status(srv.admin_port, name)
            states.append((time.monotonic(), st["state"] if st else status))
            if st and st["state"] in ("done", "failed"):
                break
            time.sleep(0.010)
        time.sleep(0.05)  # and a few after
    finally:
        poller.stop()
    return accepted, states, st, poller


def wait_state(port, name, want, timeout=60.0):
    """Polls the load status of name until its state is in want; returns the status."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, st = load_status(port, name)
        if st and st["state"] in want:
            return st
        time.sleep(0.005)
    raise AssertionError(f"load of {name} not in {want} after {timeout}s: {st}")


@harness.needs(os.access(TLSERVE, os.X_OK) and os.access(TLSYNTH, os.X_OK),
               f"needs {TLSERVE} and {TLSYNTH} (set TL_BUILD_DIR)")
class LoadBackground(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="tl_loadbg_")
        d = cls.tmp.name
        cls.v1 = os.path.join(d, "demo", "1")
        cls.big = os.path.join(d, "demo", "2")
        cls.v3 = os.path.join(d, "demo", "3")
        cls.bad = os.path.join(d, "demo", "4")
        make_snapshot(cls.v1, 1000, "demo", 1)
        make_snapshot(cls.big, LOAD_KEYS, "demo", 2, seed=7)
        make_snapshot(cls.v3, 3000, "demo", 3, seed=3)
        make_snapshot(cls.bad, 1000, "demo", 4, seed=4)
        cls.fm = os.path.join(d, "demo", "5")
        make_snapshot(cls.fm, 1000, "demo", 5, seed=5,
                      extra=("--kind", "fm", "--value-floats", "9"))
        corrupt(cls.bad)
        cls.others = []
        for i in range(queue_max() + 1):
            p = os.path.join(d, f"q{i}", "1")
            make_snapshot(p, 10, f"q{i}", 1, seed=100 + i)
            cls.others.append((f"q{i}", p))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def start(self, model_dir=None):
        # Swaps kinds on purpose (the gate refuses that by default).
        srv = harness.Server(model_dir or self.v1, "--workers", "1", "--gate-allow-kind-change",
                             token=TOKEN)
        self.addCleanup(srv.stop, timeout=60.0)
        return srv

    def models(self, srv):
        return json.loads(srv.get("/v1/models")[2])["models"]

    def test_health_answers_during_a_load(self):
        srv = self.start()
        accepted, states, final, poller = measure(srv, "demo", self.big)
        status, headers, body = accepted
        self.assertEqual(status, 202, body)
        self.assertEqual(headers["Location"], "/v1/models/demo:load")
        ans = json.loads(body)
        self.assertEqual(ans, {"model": "demo", "load": ans["load"], "state": "queued",
                               "status": "/v1/models/demo:load"})
        self.assertGreater(ans["load"], 0)

        self.assertEqual(final["state"], "done", final)
        self.assertEqual((final["model"], final["load"], final["path"], final["version"]),
                         ("demo", ans["load"], self.big, 2))
        self.assertGreaterEqual(final["elapsed_ms"], 0)
        self.assertNotIn("error", final)
        self.assertEqual(self.models(srv),
                         [{"name": "demo", "version": 2, "kind": "lr", "keys": LOAD_KEYS}])

        bad = [s for s in poller.samples if s[1] != 200]
        self.assertEqual(bad, [], "healthz did not answer 200 throughout the load")
        loading = [t for t, state in states if state == "loading"]
        self.assertTrue(loading, f"the load was never seen loading: {states}")
        # The states in their one order: queued, loading, validating (the gate), done.
        order = ["queued", "loading", "validating", "done"]
        seen = [order.index(state) for _, state in states]
        self.assertEqual(seen, sorted(seen), f"states out of order: {states}")
        during = [s for s in poller.samples if loading[0] <= s[0] + s[2] and s[0] <= loading[-1]]
        self.assertTrue(during, "no healthz answer while the load was seen loading")
        print(f"\nhealthz during a {LOAD_KEYS}-key load: {len(poller.samples)} samples, "
              f"{len(during)} while loading, slowest {poller.slowest_ms():.2f} ms, "
              f"p99 {poller.p99_ms():.2f} ms", file=sys.stderr)

        m = srv.metrics()
        self.assertIn("# TYPE tlserve_model_loads_total counter", m)
        self.assertEqual(srv.metric('tlserve_model_loads_total{result="ok"}'), 1)
        self.assertEqual(srv.metric('tlserve_model_loads_total{result="failed"}'), 0)
        self.assertEqual(srv.metric("tlserve_model_loads_in_progress"), 0)
        self.assertGreater(srv.metric("tlserve_model_load_seconds"), 0)

    def test_api(self):
        srv = self.start()
        port = srv.admin_port
        # Tokens and unknown paths, checked before anything is queued.
        self.assertEqual(post_load(port, "demo", self.v3, token=None)[0], 401)
        self.assertEqual(post_load(port, "demo", self.v3, token="wrong")[0], 401)
        self.assertEqual(post_load(port, "demo", self.v3, token="wrong", query="?wait=1")[0], 401)
        self.assertEqual(load_status(port, "demo")[0], 404)  # never loaded through the API
        self.assertEqual(http(port, "/v1/models/demo:unload")[0], 404)
        self.assertEqual(http(port, "/v1/models/demo:load/x")[0], 404)
        self.assertEqual(http(port, "/v1/models/bad name:load".replace(" ", "%20"))[0], 400)
        self.assertEqual(http(port, "/v1/models/demo:load", "DELETE")[0], 405)
        self.assertEqual(post_load(port, "demo", self.v3, query="?wait=maybe")[0], 400)
        self.assertEqual(post_load(port, "demo", self.v1 + "/none")[0], 409)
        self.assertEqual(post_load(port, "demo", self.others[0][1])[0], 409)  # model q0
        self.assertEqual(load_status(port, "demo")[0], 404)
        self.assertEqual(self.models(srv)[0]["version"], 1)

        # A snapshot whose manifest reads but whose load fails: 202, then "failed" with the
        # store's error; the old version keeps serving.
        status, _, body = post_load(port, "demo", self.bad)
        self.assertEqual(status, 202, body)
        st = wait_state(port, "demo", ("done", "failed"))
        self.assertEqual(st["state"], "failed", st)
        self.assertEqual(st["load"], json.loads(body)["load"])
        self.assertIn(self.bad, st["error"])
        self.assertIn("checksum", st["error"])
        self.assertNotIn("version", st)
        self.assertEqual(self.models(srv)[0]["version"], 1)
        self.assertEqual(srv.get("/readyz")[0], 200)
        # ... and with ?wait=1: today's synchronous 409 with the store's error.
        status, _, body = post_load(port, "demo", self.bad, query="?wait=1")
        self.assertEqual(status, 409, body)
        self.assertIn("checksum", json.loads(body)["error"])
        self.assertEqual(srv.metric('tlserve_model_loads_total{result="failed"}'), 2)

        # ?wait=1 and wait=true: 200 with the new model's JSON once it is active.
        status, _, body = post_load(port, "demo", self.v3, query="?wait=1")
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body), {"name": "demo", "version": 3, "kind": "lr",
                                            "keys": 3000})
        self.assertEqual(self.models(srv)[0]["version"], 3)
        status, _, body = post_load(port, "demo", self.v1, query="?wait=true")
        self.assertEqual((status, json.loads(body)["version"]), (200, 1), body)
        st = load_status(port, "demo")[1]
        self.assertEqual((st["state"], st["version"], st["path"]), ("done", 1, self.v1))
        self.assertEqual(srv.metric('tlserve_model_loads_total{result="ok"}'), 2)

    def test_swap_to_a_larger_kind_scores_at_once(self):
        # The workers' scratch starts sized for LR (one float per feature of the largest
        # request); after a swap to FM (9 floats per key) the first request with more than a
        # ninth of that many features must be scored, not refused: the worker sizes its
        # scratch when it first pins the new version.
        srv = self.start()
        shared = sorted(harness.model_key(i) for i in range(60000))
        items = [sorted(harness.model_key(60000 + 30000 * i + j) for j in range(30000))
                 for i in range(2)]
        with srv.client() as c:
            self.assertEqual(len(c.predict("demo", shared, items).scores), 2)
            status, _, body = post_load(srv.admin_port, "demo", self.fm, query="?wait=1")
            self.assertEqual(status, 200, body)
            self.assertEqual(json.loads(body)["kind"], "fm")
            res = c.predict("demo", shared, items)
            self.assertEqual((res.version, len(res.scores)), (5, 2))
            self.assertTrue(all(0.0 < x < 1.0 for x in res.scores), res.scores)

    def test_one_load_per_model_and_bounded_queue(self):
        srv = self.start()
        port = srv.admin_port
        # A waiter that leaves before its load ends: the late answer must not hurt the server.
        s = socket.create_connection(("127.0.0.1", port))
        self.addCleanup(s.close)
        body = json.dumps({"path": self.big}).encode()
        s.sendall(b"POST /v1/models/demo:load?wait=1 HTTP/1.1\r\nHost: x\r\n"
                  b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        wait_state(port, "demo", ("loading", "validating", "done"))  # off the queue (the loader is niced)
        # While it is loading (a {LOAD_KEYS}-key load takes a while; the checks
        # below are skipped if it has already ended): a second load of the same model gets
        # 409 naming it, and the queue takes queue_max() loads, one more gets 503.
        answers = [post_load(port, "demo", self.v3)]
        answers += [post_load(port, name, path) for name, path in self.others]
        still = load_status(port, "demo")[1]["state"] in ("loading", "validating")
        s.close()
        if still:
            self.assertEqual(answers[0][0], 409, answers[0][2])
            self.assertIn("still", json.loads(answers[0][2])["error"])
            for status, _, body in answers[1:-1]:
                self.assertEqual(status, 202, body)
            status, _, body = answers[-1]
            self.assertEqual(status, 503, body)
            self.assertIn(f"limit {queue_max()}", json.loads(body)["error"])
        else:
            print("\nthe load ended before the queue filled: 409/503 not checked", file=sys.stderr)
        for name, _ in self.others[:-1]:
            self.assertEqual(wait_state(port, name, ("done", "failed"))["state"], "done")
        self.assertEqual(wait_state(port, "demo", ("done", "failed"))["state"], "done")
        self.assertEqual(srv.get("/healthz")[0], 200)
        self.assertEqual(srv.metric("tlserve_model_loads_in_progress"), 0)

    def test_sigterm_with_a_load_in_flight(self):
        srv = harness.Server(self.v1, "--workers", "1", token=TOKEN)
        try:
            port = srv.admin_port
            answers = []

            def wait_for_load():
                try:
                    answers.append(post_load(port, "demo", self.big, query="?wait=1",
                                             timeout=600.0))
                except OSError as e:  # e.g. closed without an answer
                    answers.append((repr(e), None, b"{}"))

            waiter = threading.Thread(target=wait_for_load)
            waiter.start()
            wait_state(port, "demo", ("loading", "validating", "done"))
            queued = post_load(port, "q0", self.others[0][1])
            self.assertEqual(queued[0], 202, queued[2])
            rc = srv.stop(timeout=600.0)
            waiter.join()
            self.assertEqual(rc, 0)
            status, _, body = answers[0]
            # 503 when the signal came while it loaded (the version is discarded); 200 only if
            # the load ended between the status poll and the signal.
            self.assertIn(status, (200, 503), body)
            print(f"\nSIGTERM during a load: the waiting request got {status}", file=sys.stderr)
            if status == 503:
                self.assertIn("shutting down", json.loads(body)["error"])
        finally:
            if srv.proc.poll() is None:
                srv.proc.kill()
                srv.proc.wait()


def queue_max():
    """LOADER_QUEUE_MAX in server/server.h: loads that may wait behind the running one."""
    header = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "server",
                          "server.h")
    with open(header, encoding="utf-8") as f:
        m = re.search(r"^#define LOADER_QUEUE_MAX (\d+)", f.read(), re.M)
    assert m, f"no LOADER_QUEUE_MAX in {header}"
    return int(m.group(1))


def bench(keys):
    """One line for server/bench/load_health.sh: a keys-key load while /healthz is polled."""
    with tempfile.TemporaryDirectory(prefix="tl_loadbench_") as d:
        v1, big = os.path.join(d, "demo", "1"), os.path.join(d, "demo", "2")
        make_snapshot(v1, 1000, "demo", 1)
        make_snapshot(big, keys, "demo", 2, seed=7)
        srv = harness.Server(v1, "--workers", "1", token=TOKEN)
        try:
            accepted, _, final, poller = measure(srv, "demo", big)
            if accepted[0] != 202 or final["state"] != "done":
                raise SystemExit(f"load failed: {accepted} {final}")
            seconds = srv.metric("tlserve_model_load_seconds")
        finally:
            srv.stop(timeout=600.0)
    bad = sum(1 for s in poller.samples if s[1] != 200)
    print(f"keys {keys} load_s {seconds:.2f} healthz_samples {len(poller.samples)} "
          f"non_200 {bad} slowest_ms {poller.slowest_ms():.2f} p99_ms {poller.p99_ms():.2f}")


if __name__ == "__main__":
    if "--bench" in sys.argv:
        args = sys.argv[sys.argv.index("--bench") + 1:]
        keys = parse_keys(args[args.index("--keys") + 1]) if "--keys" in args else 100 * 10**6
        bench(keys)
    else:
        unittest.main()
