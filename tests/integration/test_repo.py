"""tlserve --model-repo: the latest version of a repository served, deltas discovered under load.

A repository <tmp>/repo/rm/ starts with a full version 1 (tlsynth).  While a client keeps
scoring, version 2 appears as a delta (tlsnap diff against a second tlsynth model, version 2):
the server must pick it up by itself, every answer during the switch must equal the offline
scores of the version it names (1 or 2, never a mix, no failed request), and afterwards the
scores must equal those of a second tlserve serving the full version 2.  Then a corrupt delta
3 (a flipped byte in a shard file, renamed in whole) and a delta 5 whose parent 4 is missing
are refused with their reasons in /v1/models and counted, while version 2 keeps serving; a
restart on the repository serves version 2 again with the same scores.  Bad settings
(--model with --model-repo, more models than a server serves) are refused at start;
several models are all served, or the one --model-name names.
"""

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import unittest

import harness
import tlserve
from harness import TLSERVE, TLSNAP, TLSYNTH, Server, gen_model, model_key, require

NAME = "rm"
KEYS = 20000
SEEDS = {1: 42, 2: 43, 3: 44, 4: 45, 5: 46}
REPO_SCAN_S = 2.5  # a rescan at least (REPO_RESCAN_MS 2000)


def tlsnap(*args):
    r = subprocess.run([TLSNAP, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=120)
    if r.returncode != 0:
        raise AssertionError("tlsnap %s: %s" % (" ".join(args), r.stderr))


def request():
    """One request with keys of every seed used, so that each version scores it differently."""
    shared = sorted(model_key(i, SEEDS[1]) for i in range(50))
    items = [sorted(model_key(100 * j + i, seed) for i in range(20) for seed in SEEDS.values())
             for j in range(8)]
    return shared, items


def models(srv):
    status, _, body = srv.get("/v1/models")
    assert status == 200, body
    return json.loads(body)


class Scorer(threading.Thread):
    """Scores one request in a loop until stopped; keeps (version, scores) and any failure."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port = port
        self.answers = []
        self.failures = []
        self.halt = threading.Event()

    def run(self):
        shared, items = request()
        try:
            c = harness.tlserve.Client("127.0.0.1", self.port, timeout=10)
        except Exception as e:  # noqa: BLE001  (a failure is what the test counts)
            self.failures.append(repr(e))
            return
        with c:
            while not self.halt.is_set():
                try:
                    r = c.predict(NAME, shared, items)
                    self.answers.append((r.version, list(r.scores)))
                except Exception as e:  # noqa: BLE001
                    self.failures.append(repr(e))
                    return
                time.sleep(0.002)

    def stop(self):
        self.halt.set()
        self.join(30)


class ModelRepo(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require(TLSERVE, TLSNAP, TLSYNTH)

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tl_repo_")
        self.repo = os.path.join(self.tmp, "repo")
        self.mdir = os.path.join(self.repo, NAME)
        os.makedirs(self.mdir)
        self.full = {}  # version -> a full snapshot outside the repository
        for v in SEEDS:
            self.full[v] = os.path.join(self.tmp, "full", str(v))
            gen_model(self.full[v], KEYS, NAME, version=v, seed=SEEDS[v])
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            s.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def serve(self, *args, model=None, **kw):
        # Repository mechanics, not the gate (test_gate.py): versions here are unrelated
        # models, so the shadow scoring is off; the gate's sanity pass still runs.
        s = Server(model, "--gate-sample", "0", *args, **kw)
        self.servers.append(s)
        return s

    def scores_of_full(self, v):
        """Offline scores of full version v: a second tlserve serving it."""
        s = self.serve(model=self.full[v])
        shared, items = request()
        with s.client() as c:
            r = c.predict(NAME, shared, items)
        s.stop()
        self.assertEqual(r.version, v)
        return list(r.scores)

    def wait_for(self, srv, pred, what, timeout=60.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = models(srv)
            if pred(m):
                return m
            time.sleep(0.05)
        self.fail("timed out waiting for %s: %s\n%s" % (what, models(srv), srv.output()))

    def add_delta(self, old, new, corrupt=False):
        """Writes diff(full old, full new) to a staging directory on the same filesystem,
        corrupts it when asked, then renames it to <mdir>/<new>: it appears whole."""
        os.makedirs(os.path.join(self.tmp, "stage"), exist_ok=True)
        stage = os.path.join(self.tmp, "stage", str(new))
        tlsnap("diff", self.full[old], self.full[new], stage)
        if corrupt:
            files = [f for f in os.listdir(stage) if f != "MANIFEST"]
            victim = max(files, key=lambda f: os.path.getsize(os.path.join(stage, f)))
            path = os.path.join(stage, victim)
            with open(path, "r+b") as f:
                f.seek(os.path.getsize(path) // 2)
                b = f.read(1)
                f.seek(-1, os.SEEK_CUR)
                f.write(bytes([b[0] ^ 0x40]))
        os.rename(stage, os.path.join(self.mdir, str(new)))

    def test_deltas_under_load_refusals_and_restart(self):
        shutil.copytree(self.full[1], os.path.join(self.mdir, "1"))
        want = {1: None, 2: self.scores_of_full(2)}
        srv = self.serve("--model-repo", self.repo)
        self.assertEqual(models(srv)["models"][0]["version"], 1)
        shared, items = request()
        with srv.client() as c:
            want[1] = list(c.predict(NAME, shared, items).scores)
        self.assertNotEqual(want[1], want[2])

        scorer = Scorer(srv.port)
        scorer.start()
        time.sleep(0.3)
        self.add_delta(1, 2)
        self.wait_for(srv, lambda m: m["models"] and m["models"][0]["version"] == 2, "version 2")
        time.sleep(0.3)
        scorer.stop()
        self.assertEqual(scorer.failures, [])
        self.assertGreater(len(scorer.answers), 10)
        self.assertEqual(scorer.answers[-1][0], 2)
        for version, scores in scorer.answers:
            self.assertIn(version, (1, 2))
            self.assertEqual(scores, want[version], "version %d answered other scores" % version)
        with srv.client() as c:
            r = c.predict(NAME, shared, items)
        self.assertEqual((r.version, list(r.scores)), (2, want[2]))

        # A corrupt delta 3: refused with the reason; version 2 keeps serving.
        self.add_delta(2, 3, corrupt=True)
        m = self.wait_for(srv, lambda m: any(x["version"] == 3
                                             for x in m["repository"]["refused"]), "refusal of 3")
        err3 = [x["error"] for x in m["repository"]["refused"] if x["version"] == 3][0]
        self.assertIn("/3", err3)
        self.assertRegex(err3, "xxh3|checksum|XXH3|CORRUPT|corrupt")
        self.assertEqual(m["models"][0]["version"], 2)

        # A delta 5 whose parent 4 is not in the repository.
        self.add_delta(4, 5)
        m = self.wait_for(srv, lambda m: any(x["version"] == 5
                                             for x in m["repository"]["refused"]), "refusal of 5")
        err5 = [x["error"] for x in m["repository"]["refused"] if x["version"] == 5][0]
        self.assertIn("4", err5)
        self.assertEqual(m["models"][0]["version"], 2)
        self.assertEqual(m["repository"]["latest"], 5)
        self.assertEqual(srv.metric("tlserve_model_versions_refused_total"), 2)
        # Never retried while unchanged: the count stays after several rescans.
        time.sleep(4.5)
        self.assertEqual(srv.metric("tlserve_model_versions_refused_total"), 2)
        with srv.client() as c:
            r = c.predict(NAME, shared, items)
        self.assertEqual((r.version, list(r.scores)), (2, want[2]))
        log = srv.output()
        self.assertEqual(log.count("version 3 of rm refused"), 1, log)
        srv.stop()

        # Restart on the repository: version 2 (a chain 1 -> 2) again, the same scores.
        srv = self.serve("--model-repo", self.repo)
        self.assertEqual(models(srv)["models"][0]["version"], 2)
        with srv.client() as c:
            r = c.predict(NAME, shared, items)
        self.assertEqual((r.version, list(r.scores)), (2, want[2]))
        m = self.wait_for(srv, lambda m: len(m["repository"]["refused"]) == 2, "refusals")
        self.assertEqual([x["version"] for x in m["repository"]["refused"]], [3, 5])

    def test_overlay_fold_and_rollback_are_exact(self):
        # A delta over the active version goes live as an overlay (no copy of the model),
        # is folded into the base in the background, and the kept parent (which then
        # reads through the fold's undo) still answers its own scores exactly.
        shutil.copytree(self.full[1], os.path.join(self.mdir, "1"))
        want = {v: self.scores_of_full(v) for v in (2, 3, 4)}
        token = "overlay-test-token"
        srv = self.serve("--model-repo", self.repo, "--keep-versions", "2", token=token)
        shared, items = request()
        with srv.client() as c:
            want[1] = list(c.predict(NAME, shared, items).scores)
        keys1 = models(srv)["models"][0]["keys"]
        scorer = Scorer(srv.port)
        scorer.start()
        time.sleep(0.2)
        self.add_delta(1, 2)
        self.wait_for(srv, lambda m: m["models"] and m["models"][0]["version"] == 2, "version 2")
        deadline = time.monotonic() + 30
        while srv.metric('tlserve_delta_folds_total{result="done"}') < 1:
            self.assertLess(time.monotonic(), deadline, srv.output())
            time.sleep(0.05)
        keys2 = models(srv)["models"][0]["keys"]
        # Two deltas at once: 3 over 2 and 4 over 3 (one overlay, or two in turn).
        self.add_delta(2, 3)
        self.add_delta(3, 4)
        self.wait_for(srv, lambda m: m["models"] and m["models"][0]["version"] == 4, "version 4")
        while srv.metric('tlserve_delta_folds_total{result="done"}') < 2:
            self.assertLess(time.monotonic(), deadline, srv.output())
            time.sleep(0.05)
        time.sleep(0.2)
        scorer.stop()
        self.assertEqual(scorer.failures, [])
        seen = set()
        for version, scores in scorer.answers:
            self.assertIn(version, want)
            self.assertEqual(scores, want[version], "version %d answered other scores" % version)
            seen.add(version)
        self.assertTrue({1, 2, 4} <= seen, seen)
        log = srv.output()
        self.assertIn("as an overlay", log)
        # the loader thread's CPU beside the wall time, for the build and the gate
        self.assertRegex(log, r"as an overlay in [\d.]+ s .*this thread's CPU [\d.]+ s")
        self.assertRegex(log, r"gate: \S+ version \d+ passed: .*; [\d.]+ s \(this thread's CPU [\d.]+ s\)")
        self.assertIn("folded into the base", log)
        self.assertGreaterEqual(srv.metric("tlserve_delta_overlays_total"), 2)
        self.assertEqual(srv.metric('tlserve_delta_folds_total{result="stopped"}'), 0)
        self.assertNotIn("fold stopped", log)

        # The key counts an overlay computes equal the base's count after the fold: a server
        # loading the chain from scratch reports the same.
        keys4 = models(srv)["models"][0]["keys"]
        fresh = self.serve("--model-repo", self.repo)
        self.assertEqual(models(fresh)["models"][0]["version"], 4)
        self.assertEqual(models(fresh)["models"][0]["keys"], keys4)
        with fresh.client() as c:
            self.assertEqual(list(c.predict(NAME, shared, items).scores), want[4])
        fresh.stop()
        self.assertGreater(keys1, 0)
        self.assertGreater(keys2, 0)

        # A request may pin a kept version (they read through the folds' undos): exact;
        # a version that is not loaded is UNKNOWN_VERSION.
        kept = [x["version"] for x in json.loads(
            srv.get("/v1/models/rm/versions")[2])["versions"] if x["state"] == "standby"]
        self.assertEqual(len(kept), 2, kept)
        with srv.client() as c:
            for v in kept:
                r = c.predict(NAME, shared, items, version=v)
                self.assertEqual((r.version, list(r.scores)), (v, want[v]))
            with self.assertRaises(tlserve.ModelNotFoundError) as e:
                c.predict(NAME, shared, items, version=99)
            self.assertIn("version 99 is not loaded", str(e.exception))

        # Rollbacks land on kept versions that read through the folds' undos: exact.
        auth = {"Authorization": "Bearer " + token}
        for _ in range(2):
            st, _, body = harness.http(srv.admin_port, "/v1/models/rm:rollback", "POST", b"",
                                       auth)
            self.assertEqual(st, 200, body)
            v = models(srv)["models"][0]["version"]
            self.assertIn(v, (1, 2, 3))
            with srv.client() as c:
                r = c.predict(NAME, shared, items)
            self.assertEqual((r.version, list(r.scores)), (v, want[v]))

    def test_chain_over_a_model_with_params(self):
        # FFM (params fields, k, norm): a chain is rebuilt with the full version's params.
        ffm = ["--kind", "ffm", "--value-floats", "33", "--param", "fields=8", "--param", "k=4",
               "--param", "norm=1", "--shards", "4", "--keys", "5000", "--name", NAME]
        for v in (1, 2):
            self.full[v] = os.path.join(self.tmp, "ffm", str(v))
            r = subprocess.run([TLSYNTH, "model", "--out", self.full[v], "--version", str(v),
                                "--seed", str(SEEDS[v]), *ffm],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
        shutil.copytree(self.full[1], os.path.join(self.mdir, "1"))
        self.add_delta(1, 2)
        srv = self.serve("--model-repo", self.repo)
        self.wait_for(srv, lambda m: m["models"] and m["models"][0]["version"] == 2,
                      "version 2 (an FFM chain) active")
        shared, items = request()
        with srv.client() as c:
            got = c.predict(NAME, shared, items)
        self.assertEqual(got.version, 2)
        self.assertEqual(list(got.scores), self.scores_of_full(2))
        self.assertEqual(models(srv)["repository"]["refused"], [])

    def test_vanishing_repository_keeps_serving(self):
        shutil.copytree(self.full[1], os.path.join(self.mdir, "1"))
        srv = self.serve("--model-repo", self.repo)
        moved = self.repo + ".away"
        os.rename(self.repo, moved)
        self.wait_for(srv, lambda m: not m["repository"]["readable"], "unreadable")
        self.assertGreaterEqual(srv.metric("tlserve_model_repo_errors_total"), 1)
        shared, items = request()
        with srv.client() as c:
            self.assertEqual(c.predict(NAME, shared, items).version, 1)
        os.rename(moved, self.repo)
        self.add_delta(1, 2)
        self.wait_for(srv, lambda m: m["models"][0]["version"] == 2, "version 2 after return")

    def test_full_version_and_its_delta_appearing_together(self):
        # 2 (full) and 3 (a delta of 2) renamed in back to back while 1 serves: 3 is served
        # as 2 + 3, a new line, not refused as a delta off the active version's line
        shutil.copytree(self.full[1], os.path.join(self.mdir, "1"))
        want3 = self.scores_of_full(3)
        srv = self.serve("--model-repo", self.repo)
        self.assertEqual(models(srv)["models"][0]["version"], 1)
        stage = os.path.join(self.tmp, "stage_full_2")
        shutil.copytree(self.full[2], stage)
        os.makedirs(os.path.join(self.tmp, "stage"), exist_ok=True)
        stage3 = os.path.join(self.tmp, "stage", "3")
        tlsnap("diff", self.full[2], self.full[3], stage3)
        os.rename(stage, os.path.join(self.mdir, "2"))
        os.rename(stage3, os.path.join(self.mdir, "3"))
        m = self.wait_for(srv, lambda m: m["models"][0]["version"] == 3, "version 3 active")
        self.assertEqual(m["repository"]["refused"], [])
        shared, items = request()
        with srv.client() as c:
            r = c.predict(NAME, shared, items)
        self.assertEqual(r.version, 3)
        self.assertEqual(list(r.scores), want3)

    def test_a_bad_link_is_named_by_its_own_version(self):
        # 2 is corrupt, 3 a good delta on it: 3's refusal names version 2, where the bad
        # file is, not only 3's directory
        shutil.copytree(self.full[1], os.path.join(self.mdir, "1"))
        srv = self.serve("--model-repo", self.repo)
        self.add_delta(1, 2, corrupt=True)
        self.wait_for(srv, lambda m: any(x["version"] == 2 for x in m["repository"]["refused"]),
                      "refusal of 2")
        self.add_delta(2, 3)
        m = self.wait_for(srv, lambda m: any(x["version"] == 3
                                             for x in m["repository"]["refused"]), "refusal of 3")
        err3 = [x["error"] for x in m["repository"]["refused"] if x["version"] == 3][0]
        self.assertIn("in version 2 (a link of 3's chain)", err3)
        self.assertEqual(m["models"][0]["version"], 1)

    def rewrite_active_version_1(self, also=None):
        """Serves version 1, then replaces its directory by other weights under the same
        number (with also() run just before the rename, in the same scan); waits until the
        answers change and checks they name version 1 and the log says why."""
        shutil.copytree(self.full[1], os.path.join(self.mdir, "1"))
        srv = self.serve("--model-repo", self.repo)
        shared, items = request()
        with srv.client() as c:
            before = list(c.predict(NAME, shared, items).scores)
        time.sleep(REPO_SCAN_S)  # a scan signs the active version's files
        other = os.path.join(self.tmp, "other1")
        gen_model(other, KEYS, NAME, version=1, seed=SEEDS[2])
        shutil.rmtree(os.path.join(self.mdir, "1"))
        if also:
            also()
        os.rename(other, os.path.join(self.mdir, "1"))
        deadline = time.monotonic() + 30
        after = before
        while after == before and time.monotonic() < deadline:
            time.sleep(0.1)
            with srv.client() as c:
                r = c.predict(NAME, shared, items)
            after = list(r.scores)
        self.assertNotEqual(after, before, srv.output())
        self.assertEqual(r.version, 1)
        self.assertIn("version 1 was rewritten in place", srv.output())
        return srv

    def test_active_version_rewritten_in_place_is_loaded_again(self):
        # served again from its files, not left serving what it held before
        self.rewrite_active_version_1()

    def test_rewrite_seen_while_a_bad_version_appears_is_not_lost(self):
        # a bad version 3 (its MANIFEST says 2) appears in the same scan as the rewrite: the
        # scan picks 3, which is refused; the rewrite it saw is still acted on, not forgotten
        # because the listing no longer changes
        bad = os.path.join(self.tmp, "bad3")
        shutil.copytree(self.full[2], bad)
        srv = self.rewrite_active_version_1(
            also=lambda: os.rename(bad, os.path.join(self.mdir, "3")))
        self.assertTrue(any(r["version"] == 3 for r in models(srv)["repository"]["refused"]),
                        srv.output())

    def test_misnamed_version_is_named_in_the_warning(self):
        # "001" is not version 1 (no leading zeros): with nothing else, the warning that no
        # version is servable names the directory it skipped and the rule
        shutil.copytree(self.full[1], os.path.join(self.mdir, "001"))
        srv = self.serve("--model-repo", self.repo, wait="/healthz")
        deadline = time.monotonic() + 20
        while "no servable version" not in srv.output() and time.monotonic() < deadline:
            time.sleep(0.05)
        out = srv.output()
        self.assertIn("no servable version", out)
        self.assertIn("'001' is not a version name", out)
        self.assertIn("no leading zero", out)
        self.assertEqual(models(srv)["models"], [])

    def test_model_flag_on_a_repository_hints_model_repo(self):
        # --model given a repository, a model directory or a delta: exit 1, and the line says
        # which flag or tool serves it
        shutil.copytree(self.full[1], os.path.join(self.mdir, "1"))
        tlsnap("diff", self.full[1], self.full[2], os.path.join(self.mdir, "2"))
        for model, hint in ((self.repo, "--model-repo " + self.repo),
                            (self.mdir, "--model %s/1" % self.mdir),
                            (os.path.join(self.mdir, "2"), "tlsnap compact")):
            r = subprocess.run([TLSERVE, "--model", model, "--port", str(harness.free_port()),
                                "--admin-port", str(harness.free_port())], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, timeout=30)
            self.assertEqual(r.returncode, 1, r.stdout)
            self.assertIn(hint, r.stdout)

    def test_bad_settings(self):
        shutil.copytree(self.full[1], os.path.join(self.mdir, "1"))
        r = subprocess.run([TLSERVE, "--model", self.full[1], "--model-repo", self.repo],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stdout)
        self.assertIn("--model and --model-repo", r.stdout)
        os.makedirs(os.path.join(self.repo, "other"))
        # Several models without --model-name: every one is served (test_repo_models.py).
        srv = self.serve("--model-repo", self.repo)
        m = models(srv)
        self.assertEqual(sorted(x["model"] for x in m["repositories"]), ["other", NAME])
        self.assertEqual([x["name"] for x in m["models"]], [NAME])
        srv.stop()
        srv = self.serve("--model-repo", self.repo, "--model-name", NAME)
        self.assertEqual(models(srv)["repository"]["model"], NAME)
        self.assertEqual([x["model"] for x in models(srv)["repositories"]], [NAME])
        srv.stop()
        # More models than one server serves (16): refused at start, naming the way out.
        for i in range(15):
            os.makedirs(os.path.join(self.repo, "m%02d" % i))
        r = subprocess.run([TLSERVE, "--model-repo", self.repo, "--port", "1"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stdout)
        self.assertIn("17 models", r.stdout)
        self.assertIn("--model-name", r.stdout)
        root = os.path.join(self.tmp, "full")
        r = subprocess.run([TLSERVE, "--model-repo", self.repo, "--model-root", root],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stdout)
        self.assertIn("not under --model-root", r.stdout)


if __name__ == "__main__":
    unittest.main()
