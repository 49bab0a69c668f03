"""tlserve --model-repo serving several models at once, each with its own policy state.

A repository <tmp>/repo/ holds two models: "a" (LR) and "b" (FM), each a full version 1
(tlsynth).  One tlserve serves both: a request to each gets that model's scores, equal to a
second tlserve serving that full version alone; an unknown model gets UNKNOWN_MODEL naming
both; /v1/models lists both, "repository" being the first model's state and "repositories"
every model's.  Then a delta 2 of "a" goes live while "b" keeps version 1; a rollback of "a"
leaves "b" alone (its own rolled-back list, its own pin); a corrupt delta 2 of "b" is refused
(listed in b's state only) while "a" is unaffected; activating a version of "a" pins "a" only.
"""

import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest

import harness
import tlserve
from harness import TLSERVE, TLSNAP, TLSYNTH, Server, model_key, require

KEYS = 5000
TOKEN = "repo-models-token"
KIND = {"a": ["--kind", "lr"], "b": ["--kind", "fm", "--value-floats", "9"]}
SEEDS = {("a", 1): 42, ("a", 2): 43, ("b", 1): 50, ("b", 2): 51}


def run(*args):
    r = subprocess.run(list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=120)
    if r.returncode != 0:
        raise AssertionError("%s: %s" % (" ".join(args), r.stderr))


def request():
    """Keys of every seed used, so that each version of each model scores it differently."""
    shared = sorted(model_key(i, 42) for i in range(30))
    items = [sorted(model_key(100 * j + i, seed) for i in range(10) for seed in SEEDS.values())
             for j in range(6)]
    return shared, items


class RepoModels(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require(TLSERVE, TLSNAP, TLSYNTH)

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tl_repo_models_")
        self.repo = os.path.join(self.tmp, "repo")
        self.full = {}  # (model, version) -> a full snapshot outside the repository
        for (name, v), seed in SEEDS.items():
            out = os.path.join(self.tmp, "full", name, str(v))
            run(TLSYNTH, "model", "--keys", str(KEYS), "--out", out, "--name", name, "--version",
                str(v), "--seed", str(seed), "--shards", "4", *KIND[name])
            self.full[(name, v)] = out
        for name in KIND:
            os.makedirs(os.path.join(self.repo, name))
            shutil.copytree(self.full[(name, 1)], os.path.join(self.repo, name, "1"))
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            s.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def serve(self, *args, model=None, **kw):
        # Versions here are unrelated models: the gate's shadow scoring is off.
        s = Server(model, "--gate-sample", "0", *args, **kw)
        self.servers.append(s)
        return s

    def models(self, srv):
        status, _, body = srv.get("/v1/models")
        self.assertEqual(status, 200, body)
        return json.loads(body)

    def live(self, srv):
        """{model name: active version}."""
        return {m["name"]: m["version"] for m in self.models(srv)["models"]}

    def repo_state(self, srv, name):
        return {r["model"]: r for r in self.models(srv)["repositories"]}[name]

    def wait_for(self, srv, pred, what, timeout=60.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return
            time.sleep(0.05)
        self.fail("timed out waiting for %s: %s\n%s" % (what, self.models(srv), srv.output()))

    def scores(self, srv, name, version=None):
        shared, items = request()
        with srv.client() as c:
            r = c.predict(name, shared, items, **({} if version is None else {"version": version}))
        return r.version, list(r.scores)

    def scores_of_full(self, name, v):
        """Offline scores of full version v of name: a second tlserve serving it alone."""
        s = self.serve(model=self.full[(name, v)])
        got = self.scores(s, name)
        s.stop()
        self.assertEqual(got[0], v)
        return got[1]

    def add_delta(self, name, old, new, corrupt=False):
        """diff(full old, full new) staged on the same filesystem, then renamed in whole."""
        os.makedirs(os.path.join(self.tmp, "stage"), exist_ok=True)
        stage = os.path.join(self.tmp, "stage", "%s-%d" % (name, new))
        run(TLSNAP, "diff", self.full[(name, old)], self.full[(name, new)], stage)
        if corrupt:
            files = [f for f in os.listdir(stage) if f != "MANIFEST"]
            victim = max(files, key=lambda f: os.path.getsize(os.path.join(stage, f)))
            path = os.path.join(stage, victim)
            with open(path, "r+b") as f:
                f.seek(os.path.getsize(path) // 2)
                b = f.read(1)
                f.seek(-1, os.SEEK_CUR)
                f.write(bytes([b[0] ^ 0x40]))
        os.rename(stage, os.path.join(self.repo, name, str(new)))

    def post(self, srv, path, body=b""):
        st, _, out = harness.http(srv.admin_port, path, "POST", body,
                                  {"Authorization": "Bearer " + TOKEN,
                                   "Content-Type": "application/json"})
        return st, out

    def test_two_models_each_with_its_own_state(self):
        want = {k: self.scores_of_full(*k) for k in (("a", 1), ("a", 2), ("b", 1))}
        self.assertNotEqual(want[("a", 1)], want[("b", 1)])

        srv = self.serve("--model-repo", self.repo, "--keep-versions", "2", token=TOKEN)
        self.wait_for(srv, lambda: self.live(srv) == {"a": 1, "b": 1}, "a and b live")
        self.assertEqual(self.scores(srv, "a"), (1, want[("a", 1)]))
        self.assertEqual(self.scores(srv, "b"), (1, want[("b", 1)]))

        # An unknown model names both.
        with srv.client() as c, self.assertRaises(tlserve.ModelNotFoundError) as e:
            c.predict("zz", *request())
        self.assertIn("'a'", str(e.exception))
        self.assertIn("'b'", str(e.exception))

        # /v1/models: both models, both repository states; "repository" is the first.
        m = self.models(srv)
        self.assertEqual(sorted(x["name"] for x in m["models"]), ["a", "b"])
        self.assertEqual([r["model"] for r in m["repositories"]], ["a", "b"])
        self.assertEqual(m["repository"], m["repositories"][0])
        for r in m["repositories"]:
            self.assertEqual((r["latest"], r["refused"], r["pinned"]), (1, [], 0), r)
        r = subprocess.run([os.path.join(harness.BUILD, "server", "tlctl"), "--admin",
                            "127.0.0.1:%d" % srv.admin_port, "status"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        for name in ("a", "b"):  # each model's policy, not the first's only
            self.assertRegex(r.stdout, r"repository \S+: model %s, latest 1, latest policy" % name)

        # A delta of "a" goes live; "b" keeps its version and scores.
        self.add_delta("a", 1, 2)
        self.wait_for(srv, lambda: self.live(srv).get("a") == 2, "a version 2")
        self.assertEqual(self.live(srv), {"a": 2, "b": 1})
        self.assertEqual(self.scores(srv, "a"), (2, want[("a", 2)]))
        self.assertEqual(self.scores(srv, "b"), (1, want[("b", 1)]))
        self.assertEqual(self.repo_state(srv, "a")["latest"], 2)
        self.assertEqual(self.repo_state(srv, "b")["latest"], 1)

        # A rollback of "a": "a" back to 1, 2 rolled back in a's state only; "b" untouched.
        st, out = self.post(srv, "/v1/models/a:rollback")
        self.assertEqual(st, 200, out)
        self.assertEqual(self.live(srv), {"a": 1, "b": 1})
        self.assertEqual(self.scores(srv, "a"), (1, want[("a", 1)]))
        self.assertEqual(self.scores(srv, "b"), (1, want[("b", 1)]))
        self.assertEqual(self.repo_state(srv, "a")["rolled_back"], [2])
        self.assertEqual(self.repo_state(srv, "b")["rolled_back"], [])
        st, out = self.post(srv, "/v1/models/b:rollback")
        self.assertEqual(st, 409, out)  # b has no standby: nothing of a's is taken
        self.assertEqual(self.live(srv), {"a": 1, "b": 1})

        # A corrupt delta of "b" is refused in b's state; "a" is unaffected.
        self.add_delta("b", 1, 2, corrupt=True)
        self.wait_for(srv, lambda: [x["version"] for x in self.repo_state(srv, "b")["refused"]]
                      == [2], "b version 2 refused")
        self.assertEqual(self.repo_state(srv, "a")["refused"], [])
        self.assertEqual(srv.metric("tlserve_model_versions_refused_total"), 1)
        time.sleep(0.3)
        self.assertEqual(self.live(srv), {"a": 1, "b": 1})
        self.assertEqual(self.scores(srv, "a"), (1, want[("a", 1)]))
        self.assertEqual(self.scores(srv, "b"), (1, want[("b", 1)]))
        st, _, body = srv.get("/v1/models/b/versions")
        self.assertEqual(st, 200, body)
        vs = {v["version"]: v for v in json.loads(body)["versions"]}
        self.assertEqual(vs[1]["state"], "active")
        self.assertEqual(vs[2]["state"], "refused")
        st, _, body = srv.get("/v1/models/a/versions")
        vs = {v["version"]: v for v in json.loads(body)["versions"]}
        self.assertEqual((vs[1]["state"], vs[2]["state"]), ("active", "rolled_back"))

        # Activating version 2 of "a" pins "a" only.
        st, out = self.post(srv, "/v1/models/a:activate", b'{"version": 2}')
        self.assertIn(st, (200, 202), out)
        self.wait_for(srv, lambda: self.live(srv).get("a") == 2, "a version 2 activated")
        self.assertEqual(self.repo_state(srv, "a")["pinned"], 2)
        self.assertEqual(self.repo_state(srv, "b")["pinned"], 0)
        self.assertEqual(self.live(srv), {"a": 2, "b": 1})
        self.assertEqual(self.scores(srv, "a"), (2, want[("a", 2)]))
        st, out = self.post(srv, "/v1/models/zz:activate", b'{"version": 1}')
        self.assertEqual(st, 404, out)

    def test_model_appearing_while_running_is_served(self):
        shutil.rmtree(os.path.join(self.repo, "b"))
        srv = self.serve("--model-repo", self.repo)
        self.wait_for(srv, lambda: self.live(srv) == {"a": 1}, "a live")
        # "b" written aside, then renamed in whole into the repository.
        stage = os.path.join(self.tmp, "stage-b")
        os.makedirs(stage)
        shutil.copytree(self.full[("b", 1)], os.path.join(stage, "1"))
        os.rename(stage, os.path.join(self.repo, "b"))
        self.wait_for(srv, lambda: self.live(srv) == {"a": 1, "b": 1}, "b picked up")
        self.assertEqual([r["model"] for r in self.models(srv)["repositories"]], ["a", "b"])
        self.assertIn("new model b", srv.output())


if __name__ == "__main__":
    unittest.main()
